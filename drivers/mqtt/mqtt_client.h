/* One MQTT connection on the event loop, written for a consumer that
 * acknowledges late: a QoS 1 message is acknowledged (PUBACK) only when
 * the consumer says so (ts_mqtt_client_ack), never on receipt. Neither
 * Debian client library can do that: libmosquitto 2.0.11 queues the
 * PUBACK before it calls on_message (lib/handle_publish.c), Paho C 1.3.12
 * sends it as soon as the message is queued for the application
 * (MQTTProtocol_handlePublishes); docs/mqtt.md.
 *
 * Over TCP (mqtt://) or TLS (mqtts://, OpenSSL through libevent, the
 * server's certificate checked against mqtt.tls_ca_file and its host name;
 * a client certificate when given). Never falls back from TLS to clear
 * text. Host names resolve asynchronously (libevent's evdns), so a slow
 * or dead name server never stalls the loop. Reconnects with backoff
 * across the URLs, in order; on each
 * connection it subscribes again and sends again, with DUP, the QoS 1
 * publishes the server has not acknowledged.
 *
 * Received messages are handed over as they are read, at most
 * max_inflight_in of them unacknowledged; past that, and while the
 * consumer has paused input, PUBLISH packets are held (bounded) while the
 * client keeps reading acknowledgements and pings. */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_CLIENT_H
#define TRACESAN_DRIVERS_MQTT_MQTT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "datapath/io.h"

struct event_base;
struct evdns_base;

typedef struct ts_mqtt_client ts_mqtt_client;

typedef struct ts_mqtt_message {
    const char *topic;               /* not NUL-terminated */
    size_t topic_len;
    const uint8_t *payload;          /* NULL when oversized */
    size_t payload_len;              /* its true size */
    int qos, dup;
    int oversized;                   /* larger than max_payload: skipped */
    uint16_t packet_id;
    uint64_t connection;             /* which connection it came on */
} ts_mqtt_message;

typedef struct ts_mqtt_client_events {
    void *arg;
    void (*message)(void *arg, const ts_mqtt_message *message);
    /* After the messages of one read. */
    void (*batch_end)(void *arg);
    /* Connected and subscribed. */
    void (*up)(void *arg, int session_present);
    /* The connection is gone (why: the cause, for the log and /healthz);
     * `refused` when the server or TLS refused us (credentials,
     * certificates), which retrying alone will not mend. */
    void (*down)(void *arg, const char *why, int refused);
    /* Publishes that answered TS_PUBLISH_BLOCKED may be offered again. */
    void (*writable)(void *arg);
} ts_mqtt_client_events;

typedef struct ts_mqtt_client_config {
    const char *const *urls;         /* mqtt://host:port, mqtts://... */
    size_t n_urls;
    const char *client_id;
    const char *username;            /* NULL: none */
    const char *password;            /* NULL: none; never logged */
    size_t password_len;
    const char *ca_file, *cert_file, *key_file;  /* TLS; NULL: none */
    int version;                     /* TS_MQTT_V311 or TS_MQTT_V5 */
    int keepalive_s;
    int clean_start;
    uint32_t session_expiry_s;       /* v5 */
    /* QoS 1 messages handed over and not yet acknowledged, at most; sent
     * as Receive Maximum (v5). More are held (over_receive_maximum). */
    uint16_t max_inflight_in;
    size_t max_payload;              /* larger payloads are skipped */
    const char *const *filters;      /* subscribed on every connection */
    size_t n_filters;
    int qos;
    size_t max_inflight_out;         /* own QoS 1 publishes unacknowledged */
    int retry_first_ms, retry_max_ms;
    /* Resolves host names off the loop's back (evdns); NULL: the client's
     * own, from /etc/resolv.conf and /etc/hosts. Borrowed. */
    struct evdns_base *dns;
} ts_mqtt_client_config;

typedef struct ts_mqtt_client_stats {
    int connected;
    uint64_t connections;            /* successful CONNACKs */
    uint64_t disconnects;            /* connections lost or refused */
    uint64_t messages;               /* PUBLISH received */
    uint64_t duplicates;             /* of them with DUP set */
    uint64_t acks_sent;
    uint64_t acks_lost;              /* the message's connection was gone:
                                        the broker sends it again */
    uint64_t published;              /* own publishes acknowledged (QoS 1)
                                        or written (QoS 0) */
    uint64_t publish_refused;        /* PUBACK with a failure code */
    uint64_t resent;                 /* own publishes sent again */
    uint64_t over_receive_maximum;   /* messages held, unprocessed,
                                        because max_inflight_in were
                                        unacknowledged */
    uint64_t dropped_qos0;           /* QoS 0 input dropped while paused */
} ts_mqtt_client_stats;

/* Copies what it needs of config (strings included). NULL with err. */
ts_mqtt_client *ts_mqtt_client_new(const ts_mqtt_client_config *config,
                                   const ts_mqtt_client_events *events,
                                   struct event_base *base, char *err,
                                   size_t errlen);
/* Starts connecting (and reconnecting) in the background. */
void ts_mqtt_client_start(ts_mqtt_client *client);
/* Sends DISCONNECT when connected and writes what is queued (bounded
 * wait), then frees. */
void ts_mqtt_client_free(ts_mqtt_client *client);

/* PUBACK for a QoS 1 message of `connection`; nothing when that
 * connection is gone (counted in acks_lost). */
void ts_mqtt_client_ack(ts_mqtt_client *client, uint64_t connection,
                        uint16_t packet_id);
/* Queues a publish. BLOCKED (nothing queued; `writable` follows) while
 * there is no session (before CONNACK) or with max_inflight_out QoS 1 publishes unacknowledged;
 * FAILED when the packet cannot be built. */
ts_publish_result ts_mqtt_client_publish(ts_mqtt_client *client,
                                         const char *topic, size_t topic_len,
                                         const void *payload, size_t len,
                                         int qos);
/* Own QoS 1 publishes not yet acknowledged. */
size_t ts_mqtt_client_unacknowledged(const ts_mqtt_client *client);

/* While paused, received PUBLISH packets are held, not handed over. */
void ts_mqtt_client_pause_input(ts_mqtt_client *client);
void ts_mqtt_client_resume_input(ts_mqtt_client *client);

void ts_mqtt_client_get_stats(const ts_mqtt_client *client,
                              ts_mqtt_client_stats *out);
/* The URL of the current (or last tried) connection. */
const char *ts_mqtt_client_url(const ts_mqtt_client *client);

/* Parses mqtt://host[:port] or mqtts://host[:port] (1883 and 8883 by
 * default; IPv6 as [addr]). 0, or -1 with a problem worded to follow the
 * URL. */
int ts_mqtt_parse_url(const char *url, int *tls, char *host, size_t hostlen,
                      int *port, char *problem, size_t problem_len);

#endif
