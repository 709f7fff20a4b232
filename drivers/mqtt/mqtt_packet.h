/* MQTT 3.1.1 and 5 control packets as bytes: what the client
 * (drivers/mqtt/mqtt_client.h) writes and reads. Pure: buffers in,
 * buffers out, no I/O.
 *
 * Only the packets a client that subscribes and publishes at QoS 0 and 1
 * needs: CONNECT/CONNACK, PUBLISH/PUBACK, SUBSCRIBE/SUBACK,
 * PINGREQ/PINGRESP and DISCONNECT. MQTT 5 properties are written for what
 * the client asks (Receive Maximum, Session Expiry Interval) and skipped
 * on read except those the client acts on (the server's Receive Maximum,
 * Maximum Packet Size, a reason string). */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_PACKET_H
#define TRACESAN_DRIVERS_MQTT_MQTT_PACKET_H

#include <stddef.h>
#include <stdint.h>

#include "wire/codec.h"

/* The CONNECT protocol level. */
#define TS_MQTT_V311 4
#define TS_MQTT_V5 5

enum ts_mqtt_packet_type {
    TS_MQTT_CONNECT = 1,
    TS_MQTT_CONNACK = 2,
    TS_MQTT_PUBLISH = 3,
    TS_MQTT_PUBACK = 4,
    TS_MQTT_PUBREC = 5,
    TS_MQTT_PUBREL = 6,
    TS_MQTT_PUBCOMP = 7,
    TS_MQTT_SUBSCRIBE = 8,
    TS_MQTT_SUBACK = 9,
    TS_MQTT_PINGREQ = 12,
    TS_MQTT_PINGRESP = 13,
    TS_MQTT_DISCONNECT = 14,
    TS_MQTT_AUTH = 15,
};

/* The largest remaining length the protocol can express (268 435 455). */
#define TS_MQTT_MAX_REMAINING 268435455u

typedef struct ts_mqtt_connect {
    int version;                     /* TS_MQTT_V311 or TS_MQTT_V5 */
    const char *client_id;
    const char *username;            /* NULL: none */
    const void *password;            /* NULL: none */
    size_t password_len;
    int clean_start;
    uint16_t keepalive_s;
    uint32_t session_expiry_s;       /* v5 only */
    uint16_t receive_maximum;        /* v5 only; 0: not sent */
} ts_mqtt_connect;

/* Writers append one packet to out: 0, or -1 when a field is too long for
 * the protocol or memory ran out (out as it was). */
int ts_mqtt_write_connect(ts_buf *out, const ts_mqtt_connect *connect);
int ts_mqtt_write_publish(ts_buf *out, int version, const char *topic,
                          size_t topic_len, const void *payload, size_t len,
                          int qos, uint16_t packet_id, int dup);
int ts_mqtt_write_puback(ts_buf *out, int version, uint16_t packet_id);
/* Every filter at `qos`; v5 sets No Local, so a client never receives
 * what it publishes itself. */
int ts_mqtt_write_subscribe(ts_buf *out, int version, uint16_t packet_id,
                            const char *const *filters, size_t n, int qos);
/* PINGREQ or DISCONNECT (reason 0). */
int ts_mqtt_write_empty(ts_buf *out, int version, int type);

/* The fixed header at data: 1 with its first byte, the remaining length
 * and the header's own length; 0 when more bytes are needed; -1 when the
 * length is malformed (more than four bytes). */
int ts_mqtt_read_header(const uint8_t *data, size_t len, uint8_t *first,
                        size_t *remaining, size_t *header_len);

typedef struct ts_mqtt_publish {
    const char *topic;               /* not NUL-terminated */
    size_t topic_len;
    const uint8_t *payload;
    size_t payload_len;
    int qos, dup, retain;
    uint16_t packet_id;              /* 0 for QoS 0 */
} ts_mqtt_publish;

/* A PUBLISH body (`len` bytes after the fixed header). 0, or -1 with why
 * when it is malformed (the connection must then be closed). With
 * `head_only` the body may be cut short after the packet identifier: the
 * topic and identifier are read, the payload is left empty (an oversized
 * message whose payload is skipped). */
int ts_mqtt_read_publish(uint8_t first, const uint8_t *body, size_t len,
                         int version, int head_only, ts_mqtt_publish *out,
                         const char **why);
/* Bytes of a PUBLISH body up to and including its packet identifier (or
 * its topic, QoS 0); 0 while `available` bytes are too few to tell. */
size_t ts_mqtt_publish_head_len(uint8_t first, const uint8_t *body,
                                size_t available);

typedef struct ts_mqtt_connack {
    int session_present;
    int code;                        /* 0 accepted; else v3 0x01-0x05 or a
                                        v5 reason code >= 0x80 */
    uint16_t receive_maximum;        /* the server's, v5; 65535 if absent */
    uint32_t maximum_packet_size;    /* v5; 0 if absent */
    char reason[128];                /* v5 Reason String, printable only */
} ts_mqtt_connack;

int ts_mqtt_read_connack(const uint8_t *body, size_t len, int version,
                         ts_mqtt_connack *out);
/* PUBACK: the identifier and the reason code (0 when absent). */
int ts_mqtt_read_puback(const uint8_t *body, size_t len, int version,
                        uint16_t *packet_id, int *reason);
/* SUBACK: the identifier and the first failed return code (>= 0x80), or 0
 * when every filter was granted. */
int ts_mqtt_read_suback(const uint8_t *body, size_t len, int version,
                        uint16_t *packet_id, int *failure);

/* Words for a CONNACK refusal, e.g. "bad user name or password". */
const char *ts_mqtt_connack_text(int version, int code);

/* Whether a topic name (not a filter) is valid UTF-8 without NUL, and
 * whether `topic` matches `filter` (+ and # wildcards). */
int ts_mqtt_topic_is_valid(const char *topic, size_t len);
int ts_mqtt_topic_matches(const char *filter, const char *topic,
                          size_t topic_len);

#endif
