#include "drivers/mqtt/mqtt_client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "drivers/mqtt/mqtt_packet.h"
#include "drivers/mqtt/mqtt_tls.h"
#include "engine/log.h"

#define HOST_MAX 256
/* Control packets other than PUBLISH are small; a larger one is an
 * attack or a broken server. */
#define MAX_CONTROL_PACKET (64u << 10)
/* Bytes of held QoS 0 PUBLISH packets (input paused) before more are
 * dropped. */
#define MAX_HELD_BYTES ((size_t)32 << 20)
/* Bytes queued for the socket before publishes answer BLOCKED. */
#define MAX_QUEUED_OUT ((size_t)8 << 20)
/* How long a connection may take from TCP connect to CONNACK/SUBACK. */
#define HANDSHAKE_TIMEOUT_S 10
#define ERR_MAX 512

typedef enum state {
    DOWN,            /* waiting for the retry timer */
    CONNECTING,      /* TCP, TLS, CONNECT sent, waiting for CONNACK */
    SUBSCRIBING,     /* SUBSCRIBE sent, waiting for SUBACK */
    UP,
} state;

typedef struct outgoing {
    uint16_t id;
    int used;
    size_t topic_len, len;
    uint8_t *data;   /* topic then payload */
} outgoing;

struct ts_mqtt_client {
    ts_mqtt_client_config config;
    ts_mqtt_client_events events;
    struct event_base *base;
    char **urls;
    char **filters;
    char *client_id, *username, *password;
    char *ca_file, *cert_file, *key_file;
    SSL_CTX *tls;
    struct evdns_base *dns;
    int own_dns;                     /* dns is ours to free */
    struct bufferevent *bev;
    struct event *retry_timer, *keepalive_timer, *resume_event;
    state state;
    size_t url_index;
    char url[HOST_MAX + 16];
    char host[HOST_MAX];
    int retry_ms;
    uint64_t connection;
    uint16_t next_id;
    uint16_t server_receive_maximum;
    /* Received QoS 1 messages of this connection not acknowledged. */
    size_t unacked_in;
    int paused;
    int blocked;                     /* a publish answered BLOCKED */
    int session_present;             /* of the CONNACK, for after SUBACK */
    struct evbuffer *held;           /* PUBLISH packets while paused */
    size_t skip;                     /* bytes of an oversized payload */
    outgoing *inflight;
    size_t n_inflight;
    time_t last_sent, ping_sent;
    int ping_outstanding;
    ts_buf packet;
    ts_mqtt_client_stats stats;
};

static void connect_next(ts_mqtt_client *c);

/* Messages handed over and not yet acknowledged fill the window: what
 * comes meanwhile is held, unprocessed. The consumer's memory of recent
 * messages covers the window, whatever the broker sends past its
 * Receive Maximum. */
static int window_full(const ts_mqtt_client *c)
{
    return c->unacked_in >= c->config.max_inflight_in;
}
static void on_read(struct bufferevent *bev, void *arg);
static void process_input(ts_mqtt_client *c);

/* ---------------------------------------------------------------- URLs */

int ts_mqtt_parse_url(const char *url, int *tls, char *host, size_t hostlen,
                      int *port, char *problem, size_t problem_len)
{
    const char *rest;
    if (strncmp(url, "mqtt://", 7) == 0) {
        *tls = 0;
        rest = url + 7;
    } else if (strncmp(url, "mqtts://", 8) == 0) {
        *tls = 1;
        rest = url + 8;
    } else {
        snprintf(problem, problem_len, "must start with mqtt:// or "
                 "mqtts://, e.g. mqtt://127.0.0.1:1883");
        return -1;
    }
    *port = *tls ? 8883 : 1883;
    const char *host_end;
    const char *host_start = rest;
    if (*rest == '[') {
        host_start = rest + 1;
        host_end = strchr(host_start, ']');
        if (host_end == NULL) {
            snprintf(problem, problem_len, "has an unclosed [");
            return -1;
        }
        rest = host_end + 1;
    } else {
        host_end = rest + strcspn(rest, ":/");
        rest = host_end;
    }
    size_t n = (size_t)(host_end - host_start);
    if (n == 0 || n >= hostlen) {
        snprintf(problem, problem_len, "has no host (or one too long)");
        return -1;
    }
    memcpy(host, host_start, n);
    host[n] = '\0';
    if (*rest == ':') {
        char *end;
        long p = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || p < 1 || p > 65535) {
            snprintf(problem, problem_len, "has a bad port");
            return -1;
        }
        *port = (int)p;
        rest = end;
    }
    if (*rest != '\0' && strcmp(rest, "/") != 0) {
        snprintf(problem, problem_len, "has a path, which MQTT does not use");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ helpers */

static time_t now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec;
}

static int send_packet(ts_mqtt_client *c)
{
    if (c->bev == NULL ||
        bufferevent_write(c->bev, c->packet.data, c->packet.len) != 0)
        return -1;
    c->last_sent = now_s();
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

static void close_connection(ts_mqtt_client *c)
{
    if (c->bev != NULL) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    evbuffer_drain(c->held, evbuffer_get_length(c->held));
    c->skip = 0;
    c->unacked_in = 0;
    c->ping_outstanding = 0;
    event_del(c->keepalive_timer);
}

static void schedule_retry(ts_mqtt_client *c)
{
    struct timeval delay = { c->retry_ms / 1000, (c->retry_ms % 1000) * 1000 };
    event_add(c->retry_timer, &delay);
    c->retry_ms = c->retry_ms * 2 > c->config.retry_max_ms
                      ? c->config.retry_max_ms : c->retry_ms * 2;
}

static void lose(ts_mqtt_client *c, const char *why, int refused)
{
    close_connection(c);
    c->state = DOWN;
    c->stats.connected = 0;
    c->stats.disconnects++;
    if (c->events.down != NULL)
        c->events.down(c->events.arg, why, refused);
    c->url_index = (c->url_index + 1) % c->config.n_urls;
    schedule_retry(c);
}

/* --------------------------------------------------------- the session */

static void resend_inflight(ts_mqtt_client *c, int session_present)
{
    for (size_t i = 0; i < c->n_inflight; i++) {
        outgoing *o = &c->inflight[i];
        ts_buf_reset(&c->packet);
        if (ts_mqtt_write_publish(&c->packet, c->config.version,
                                  (const char *)o->data, o->topic_len,
                                  o->data + o->topic_len, o->len, 1, o->id,
                                  session_present) == 0 &&
            send_packet(c) == 0)
            c->stats.resent++;
    }
}

/* The session is established (CONNACK): publishing may go on, and the
 * publishes the broker had not acknowledged go again. A resumed session
 * may deliver before the SUBACK, and those messages' acknowledgements
 * wait behind the outcomes published here. */
static void session_open(ts_mqtt_client *c, int session_present)
{
    /* From here on the keep-alive watches the broker. */
    bufferevent_set_timeouts(c->bev, NULL, NULL);
    c->retry_ms = c->config.retry_first_ms;
    c->session_present = session_present;
    resend_inflight(c, session_present);
    if (c->blocked && c->events.writable != NULL) {
        c->blocked = 0;
        c->events.writable(c->events.arg);
    }
}

static void became_up(ts_mqtt_client *c)
{
    c->state = UP;
    c->stats.connected = 1;
    if (c->events.up != NULL)
        c->events.up(c->events.arg, c->session_present);
}

static int subscribe(ts_mqtt_client *c)
{
    if (c->config.n_filters == 0)
        return 0;
    ts_buf_reset(&c->packet);
    if (ts_mqtt_write_subscribe(&c->packet, c->config.version, 1,
                                (const char *const *)c->filters,
                                c->config.n_filters, c->config.qos) != 0 ||
        send_packet(c) != 0)
        return -1;
    c->state = SUBSCRIBING;
    return 1;
}

static void on_connack(ts_mqtt_client *c, const uint8_t *body, size_t len)
{
    ts_mqtt_connack ack;
    if (c->state != CONNECTING ||
        ts_mqtt_read_connack(body, len, c->config.version, &ack) != 0) {
        lose(c, "malformed CONNACK", 0);
        return;
    }
    if (ack.code != 0) {
        char why[256];
        snprintf(why, sizeof why, "the broker refused the connection: %s%s%s",
                 ts_mqtt_connack_text(c->config.version, ack.code),
                 ack.reason[0] != '\0' ? ": " : "", ack.reason);
        lose(c, why, 1);
        return;
    }
    c->stats.connections++;
    c->server_receive_maximum = ack.receive_maximum;
    struct timeval tick = { c->config.keepalive_s > 1
                                ? c->config.keepalive_s / 2 : 1, 0 };
    event_add(c->keepalive_timer, &tick);
    int subscribing = subscribe(c);
    if (subscribing < 0) {
        lose(c, "cannot send SUBSCRIBE", 0);
        return;
    }
    uint64_t connection = c->connection;
    if (subscribing == 0)
        c->state = UP;
    session_open(c, ack.session_present);
    if (subscribing == 0 && c->connection == connection)
        became_up(c);
}

static void on_suback(ts_mqtt_client *c, const uint8_t *body, size_t len)
{
    uint16_t id;
    int failure;
    if (c->state != SUBSCRIBING ||
        ts_mqtt_read_suback(body, len, c->config.version, &id,
                            &failure) != 0) {
        lose(c, "malformed SUBACK", 0);
        return;
    }
    if (failure != 0) {
        char why[128];
        snprintf(why, sizeof why, "the broker refused the subscription "
                 "(code 0x%02x): is this user allowed to read "
                 "mqtt.topics?", failure);
        lose(c, why, 1);
        return;
    }
    became_up(c);
}

static void on_puback(ts_mqtt_client *c, const uint8_t *body, size_t len)
{
    uint16_t id;
    int reason;
    if (ts_mqtt_read_puback(body, len, c->config.version, &id, &reason) !=
        0) {
        lose(c, "malformed PUBACK", 0);
        return;
    }
    for (size_t i = 0; i < c->n_inflight; i++) {
        if (c->inflight[i].id != id)
            continue;
        free(c->inflight[i].data);
        memmove(&c->inflight[i], &c->inflight[i + 1],
                (c->n_inflight - i - 1) * sizeof *c->inflight);
        c->n_inflight--;
        /* 0x10: accepted, no subscriber matched. */
        if (reason >= 0x80) {
            c->stats.publish_refused++;
            ts_log(TS_LOG_ERROR, "mqtt: the broker refused a publish "
                   "(reason 0x%02x): is this user allowed to write the "
                   "output topics?", reason);
        } else {
            c->stats.published++;
        }
        break;
    }
    if (c->blocked && c->events.writable != NULL) {
        c->blocked = 0;
        c->events.writable(c->events.arg);
    }
}

static void deliver(ts_mqtt_client *c, const uint8_t *body, size_t len,
                    uint8_t first, size_t true_len, int head_only)
{
    ts_mqtt_publish p;
    const char *why = NULL;
    if (ts_mqtt_read_publish(first, body, len, c->config.version, head_only,
                             &p, &why) != 0) {
        lose(c, why, 0);
        return;
    }
    ts_mqtt_message m = {
        .topic = p.topic, .topic_len = p.topic_len,
        .payload = head_only ? NULL : p.payload,
        .payload_len = head_only ? true_len : p.payload_len,
        .qos = p.qos, .dup = p.dup, .oversized = head_only,
        .packet_id = p.packet_id, .connection = c->connection,
    };
    c->stats.messages++;
    if (p.dup)
        c->stats.duplicates++;
    if (p.qos > 0)
        c->unacked_in++;
    if (c->events.message != NULL)
        c->events.message(c->events.arg, &m);
}

/* One packet from `in`; 1 handled, 0 more bytes needed, -1 connection
 * lost. PUBLISH packets are moved to `held` while paused (from the
 * socket's buffer only). */
static int one_packet(ts_mqtt_client *c, struct evbuffer *in, int from_held)
{
    size_t avail = evbuffer_get_length(in);
    if (c->skip > 0) {
        size_t n = c->skip < avail ? c->skip : avail;
        evbuffer_drain(in, n);
        c->skip -= n;
        return n > 0 ? 1 : 0;
    }
    uint8_t head[5];
    size_t peek = avail < sizeof head ? avail : sizeof head;
    evbuffer_copyout(in, head, peek);
    uint8_t first;
    size_t remaining, header_len;
    int got = ts_mqtt_read_header(head, peek, &first, &remaining,
                                  &header_len);
    if (got < 0) {
        lose(c, "malformed packet length", 0);
        return -1;
    }
    if (got == 0)
        return 0;
    int type = first >> 4;
    size_t total = header_len + remaining;
    int oversized = remaining > c->config.max_payload + 65536 + 16;
    if (type == TS_MQTT_PUBLISH && !oversized && !from_held &&
        (c->paused || window_full(c) || evbuffer_get_length(c->held) > 0)) {
        if (avail < total)
            return 0;
        if (evbuffer_get_length(c->held) > MAX_HELD_BYTES) {
            /* QoS 0 promises no delivery: dropped, counted. A broker
             * that sends this much QoS 1 past the window gets a new
             * session; held messages were not processed, and come
             * again. */
            if (((first >> 1) & 3) == 0) {
                c->stats.dropped_qos0++;
                evbuffer_drain(in, total);
                return 1;
            }
            lose(c, "the broker sent more than 32 MiB past mqtt.max_inflight",
                 0);
            return -1;
        }
        /* Receive Maximum is what we ask; Mosquitto 2.0.11 sends
         * thousands past it to a client that also publishes on the same
         * connection. */
        if (window_full(c))
            c->stats.over_receive_maximum++;
        evbuffer_remove_buffer(in, c->held, total);
        return 1;
    }
    if (type == TS_MQTT_PUBLISH && oversized) {
        /* Too large to hold: read its head, skip its payload. */
        size_t want = header_len + 2 + 65535 + 2;
        if (want > avail)
            want = avail;
        uint8_t *bytes = evbuffer_pullup(in, (ev_ssize_t)want);
        size_t head_len = ts_mqtt_publish_head_len(first, bytes + header_len,
                                                   want - header_len);
        if (head_len == 0)
            return 0;
        size_t true_len = remaining - head_len;
        uint64_t before = c->connection;
        deliver(c, bytes + header_len, head_len, first, true_len, 1);
        if (c->bev == NULL || c->connection != before)
            return -1;
        evbuffer_drain(in, header_len + head_len);
        c->skip = remaining - head_len;
        return 1;
    }
    if (type != TS_MQTT_PUBLISH && remaining > MAX_CONTROL_PACKET) {
        lose(c, "oversized control packet", 0);
        return -1;
    }
    if (avail < total)
        return 0;
    uint8_t *bytes = evbuffer_pullup(in, (ev_ssize_t)total);
    const uint8_t *body = bytes + header_len;
    uint64_t connection = c->connection;
    switch (type) {
    case TS_MQTT_CONNACK: on_connack(c, body, remaining); break;
    case TS_MQTT_SUBACK: on_suback(c, body, remaining); break;
    case TS_MQTT_PUBACK: on_puback(c, body, remaining); break;
    case TS_MQTT_PINGRESP: c->ping_outstanding = 0; break;
    case TS_MQTT_PUBLISH:
        if (remaining > c->config.max_payload + 65536 + 16)
            break;
        {
            ts_mqtt_publish p;
            const char *why = NULL;
            if (ts_mqtt_read_publish(first, body, remaining,
                                     c->config.version, 0, &p, &why) != 0) {
                lose(c, why, 0);
                return -1;
            }
            if (p.payload_len > c->config.max_payload)
                deliver(c, body, remaining, first, p.payload_len, 1);
            else
                deliver(c, body, remaining, first, 0, 0);
        }
        break;
    case TS_MQTT_DISCONNECT:
        lose(c, "the broker closed the session (DISCONNECT)", 0);
        return -1;
    default: {
        char why[64];
        snprintf(why, sizeof why, "unexpected packet type %d", type);
        lose(c, why, 0);
        return -1;
    }
    }
    if (c->bev == NULL || c->connection != connection)
        return -1;  /* lost inside a handler */
    evbuffer_drain(in, total);
    return 1;
}

static void process_input(ts_mqtt_client *c)
{
    if (c->bev == NULL)
        return;
    int delivered = 0;
    uint64_t connection = c->connection;
    /* Held messages first, in order, once input resumes. */
    while (!c->paused && !window_full(c) &&
           evbuffer_get_length(c->held) > 0) {
        int rc = one_packet(c, c->held, 1);
        if (rc < 0 || c->connection != connection)
            return;
        if (rc == 0)
            break;
        delivered = 1;
    }
    struct evbuffer *in = bufferevent_get_input(c->bev);
    for (;;) {
        int rc = one_packet(c, in, 0);
        if (rc < 0 || c->bev == NULL || c->connection != connection)
            return;
        if (rc == 0)
            break;
        delivered = 1;
    }
    if (delivered && c->events.batch_end != NULL)
        c->events.batch_end(c->events.arg);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    process_input(arg);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    ts_mqtt_client *c = arg;
    if (c->blocked && (c->state == UP || c->state == SUBSCRIBING) &&
        c->events.writable != NULL) {
        c->blocked = 0;
        c->events.writable(c->events.arg);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    ts_mqtt_client *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        ts_mqtt_connect connect = {
            .version = c->config.version,
            .client_id = c->client_id,
            .username = c->username,
            .password = c->password,
            .password_len = c->config.password_len,
            .clean_start = c->config.clean_start,
            .keepalive_s = (uint16_t)c->config.keepalive_s,
            .session_expiry_s = c->config.session_expiry_s,
            .receive_maximum = c->config.max_inflight_in,
        };
        ts_buf_reset(&c->packet);
        if (ts_mqtt_write_connect(&c->packet, &connect) != 0 ||
            send_packet(c) != 0)
            lose(c, "cannot send CONNECT", 0);
        ts_buf_reset(&c->packet);  /* the password leaves no copy here */
        memset(c->packet.data, 0, c->packet.cap);
        return;
    }
    char why[ERR_MAX + 64];
    int dns_error = bufferevent_socket_get_dns_error(bev);
    if (dns_error != 0) {
        snprintf(why, sizeof why, "%s: cannot resolve %s: %s", c->url,
                 c->host, evutil_gai_strerror(dns_error));
        lose(c, why, 0);
        return;
    }
    int tls = strncmp(c->url, "mqtts://", 8) == 0;
    if (tls && c->state == CONNECTING && (what & BEV_EVENT_ERROR) &&
        EVUTIL_SOCKET_ERROR() != ECONNREFUSED) {
        ts_mqtt_tls_failure(c->bev, why, sizeof why);
        lose(c, why, 1);
        return;
    }
    if (what & BEV_EVENT_EOF)
        snprintf(why, sizeof why, "%s closed the connection%s", c->url,
                 c->state == CONNECTING ? " before CONNACK" : "");
    else if (what & BEV_EVENT_TIMEOUT)
        snprintf(why, sizeof why, "%s: timed out", c->url);
    else
        snprintf(why, sizeof why, "%s: %s", c->url,
                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    lose(c, why, 0);
}

static void connect_next(ts_mqtt_client *c)
{
    const char *url = c->urls[c->url_index];
    snprintf(c->url, sizeof c->url, "%s", url);
    int tls, port;
    char problem[128];
    if (ts_mqtt_parse_url(url, &tls, c->host, sizeof c->host, &port, problem,
                          sizeof problem) != 0) {
        lose(c, problem, 1);
        return;
    }
    c->connection++;
    c->state = CONNECTING;
    if (tls) {
        SSL *ssl = ts_mqtt_tls_session(c->tls, c->host);
        if (ssl == NULL) {
            lose(c, "cannot create a TLS session", 0);
            return;
        }
        c->bev = bufferevent_openssl_socket_new(
            c->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
            BEV_OPT_CLOSE_ON_FREE);
    } else {
        c->bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (c->bev == NULL) {
        lose(c, "cannot create a connection", 0);
        return;
    }
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    struct timeval handshake = { HANDSHAKE_TIMEOUT_S, 0 };
    bufferevent_set_timeouts(c->bev, &handshake, NULL);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%d", port);
    /* An address connects at once; a name is looked up by evdns while
     * the loop goes on, and a failed lookup comes back through on_event
     * (bufferevent_socket_get_dns_error). */
    if (bufferevent_socket_connect_hostname(c->bev, c->dns, AF_UNSPEC,
                                            c->host, port) != 0) {
        char why[HOST_MAX + 64];
        snprintf(why, sizeof why, "cannot connect to %s", c->url);
        lose(c, why, 0);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connect_next(arg);
}

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_mqtt_client *c = arg;
    if (c->bev == NULL)
        return;
    time_t now = now_s();
    if (c->state == CONNECTING)
        return;  /* the handshake timeout covers it */
    if (c->ping_outstanding && now - c->ping_sent > c->config.keepalive_s) {
        lose(c, "no PINGRESP within mqtt.keepalive_s", 0);
        return;
    }
    if (now - c->last_sent >= c->config.keepalive_s / 2 &&
        !c->ping_outstanding) {
        ts_buf_reset(&c->packet);
        if (ts_mqtt_write_empty(&c->packet, c->config.version,
                                TS_MQTT_PINGREQ) == 0 &&
            send_packet(c) == 0) {
            c->ping_outstanding = 1;
            c->ping_sent = now;
        }
    }
    struct timeval tick = { c->config.keepalive_s > 1
                                ? c->config.keepalive_s / 2 : 1, 0 };
    event_add(c->keepalive_timer, &tick);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    process_input(arg);
}

/* ---------------------------------------------------------------- API */

ts_mqtt_client *ts_mqtt_client_new(const ts_mqtt_client_config *config,
                                   const ts_mqtt_client_events *events,
                                   struct event_base *base, char *err,
                                   size_t errlen)
{
    ts_mqtt_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->config = *config;
    c->events = *events;
    c->base = base;
    c->urls = calloc(config->n_urls + 1, sizeof *c->urls);
    c->filters = calloc(config->n_filters + 1, sizeof *c->filters);
    c->inflight = calloc(config->max_inflight_out + 1, sizeof *c->inflight);
    c->held = evbuffer_new();
    int ok = c->urls != NULL && c->filters != NULL && c->inflight != NULL &&
             c->held != NULL && config->n_urls > 0;
    for (size_t i = 0; ok && i < config->n_urls; i++)
        ok = (c->urls[i] = strdup(config->urls[i])) != NULL;
    for (size_t i = 0; ok && i < config->n_filters; i++)
        ok = (c->filters[i] = strdup(config->filters[i])) != NULL;
    c->client_id = dup_or_null(config->client_id);
    c->username = dup_or_null(config->username);
    c->ca_file = dup_or_null(config->ca_file);
    c->cert_file = dup_or_null(config->cert_file);
    c->key_file = dup_or_null(config->key_file);
    if (config->password != NULL) {
        c->password = malloc(config->password_len + 1);
        if (c->password != NULL) {
            memcpy(c->password, config->password, config->password_len);
            c->password[config->password_len] = '\0';
        } else {
            ok = 0;
        }
    }
    if (!ok || c->client_id == NULL) {
        snprintf(err, errlen, "out of memory");
        ts_mqtt_client_free(c);
        return NULL;
    }
    c->config.client_id = NULL;
    c->config.password = NULL;
    int any_tls = 0;
    for (size_t i = 0; i < config->n_urls; i++)
        any_tls |= strncmp(config->urls[i], "mqtts://", 8) == 0;
    if (any_tls && (c->tls = ts_mqtt_tls_context(c->ca_file, c->cert_file,
                                                 c->key_file, err,
                                                 errlen)) == NULL) {
        ts_mqtt_client_free(c);
        return NULL;
    }
    c->dns = config->dns;
    c->config.dns = NULL;
    if (c->dns == NULL) {
        /* Without a usable resolv.conf, names in /etc/hosts still
         * resolve. */
        c->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                          EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        if (c->dns == NULL &&
            (c->dns = evdns_base_new(base,
                                     EVDNS_BASE_DISABLE_WHEN_INACTIVE)) !=
                NULL)
            evdns_base_load_hosts(c->dns, NULL);
        c->own_dns = c->dns != NULL;
        if (c->dns == NULL) {
            snprintf(err, errlen, "cannot set up the name resolver");
            ts_mqtt_client_free(c);
            return NULL;
        }
    }
    c->retry_timer = event_new(base, -1, 0, on_retry, c);
    c->keepalive_timer = event_new(base, -1, 0, on_keepalive, c);
    c->resume_event = event_new(base, -1, 0, on_resume, c);
    if (c->retry_timer == NULL || c->keepalive_timer == NULL ||
        c->resume_event == NULL) {
        snprintf(err, errlen, "cannot create the connection's timers");
        ts_mqtt_client_free(c);
        return NULL;
    }
    c->retry_ms = config->retry_first_ms > 0 ? config->retry_first_ms : 100;
    if (c->config.retry_max_ms < c->retry_ms)
        c->config.retry_max_ms = c->retry_ms;
    c->config.retry_first_ms = c->retry_ms;
    c->next_id = 1;
    return c;
}

void ts_mqtt_client_start(ts_mqtt_client *c)
{
    connect_next(c);
}

void ts_mqtt_client_free(ts_mqtt_client *c)
{
    if (c == NULL)
        return;
    /* Nothing more is handed over: the consumer is finishing, and what
     * it would process now it could no longer commit. */
    c->events.message = NULL;
    c->events.batch_end = NULL;
    c->events.writable = NULL;
    c->events.up = NULL;
    c->events.down = NULL;
    if (c->bev != NULL)
        bufferevent_disable(c->bev, EV_READ);
    if (c->bev != NULL && c->state == UP) {
        ts_buf_reset(&c->packet);
        if (ts_mqtt_write_empty(&c->packet, c->config.version,
                                TS_MQTT_DISCONNECT) == 0)
            send_packet(c);
        /* A bounded wait for what is queued to leave. */
        struct evbuffer *out = bufferevent_get_output(c->bev);
        for (int i = 0; i < 200 && evbuffer_get_length(out) > 0; i++)
            event_base_loop(c->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    close_connection(c);
    if (c->own_dns)
        evdns_base_free(c->dns, 1);
    if (c->retry_timer != NULL)
        event_free(c->retry_timer);
    if (c->keepalive_timer != NULL)
        event_free(c->keepalive_timer);
    if (c->resume_event != NULL)
        event_free(c->resume_event);
    for (size_t i = 0; c->urls != NULL && c->urls[i] != NULL; i++)
        free(c->urls[i]);
    for (size_t i = 0; c->filters != NULL && c->filters[i] != NULL; i++)
        free(c->filters[i]);
    for (size_t i = 0; i < c->n_inflight; i++)
        free(c->inflight[i].data);
    free(c->urls);
    free(c->filters);
    free(c->inflight);
    if (c->held != NULL)
        evbuffer_free(c->held);
    if (c->password != NULL) {
        memset(c->password, 0, c->config.password_len);
        free(c->password);
    }
    free(c->client_id);
    free(c->username);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    if (c->tls != NULL)
        SSL_CTX_free(c->tls);
    ts_buf_free(&c->packet);
    free(c);
}

void ts_mqtt_client_ack(ts_mqtt_client *c, uint64_t connection,
                        uint16_t packet_id)
{
    if (c->bev == NULL || connection != c->connection ||
        (c->state != UP && c->state != SUBSCRIBING)) {
        c->stats.acks_lost++;
        return;
    }
    ts_buf_reset(&c->packet);
    if (ts_mqtt_write_puback(&c->packet, c->config.version, packet_id) != 0 ||
        send_packet(c) != 0) {
        c->stats.acks_lost++;
        return;
    }
    c->stats.acks_sent++;
    if (c->unacked_in > 0)
        c->unacked_in--;
    if (!window_full(c) && evbuffer_get_length(c->held) > 0)
        event_active(c->resume_event, EV_TIMEOUT, 0);
}

static uint16_t next_packet_id(ts_mqtt_client *c)
{
    /* Identifiers in flight are few; skip any still in use (and 0, and 1,
     * which SUBSCRIBE uses). */
    for (;;) {
        uint16_t id = c->next_id++;
        if (id < 2)
            continue;
        int used = 0;
        for (size_t i = 0; i < c->n_inflight && !used; i++)
            used = c->inflight[i].id == id;
        if (!used)
            return id;
    }
}

ts_publish_result ts_mqtt_client_publish(ts_mqtt_client *c,
                                         const char *topic, size_t topic_len,
                                         const void *payload, size_t len,
                                         int qos)
{
    if ((c->state != UP && c->state != SUBSCRIBING) || c->bev == NULL ||
        (qos > 0 && c->n_inflight >= c->config.max_inflight_out) ||
        (qos > 0 && c->n_inflight >= c->server_receive_maximum) ||
        evbuffer_get_length(bufferevent_get_output(c->bev)) >
            MAX_QUEUED_OUT) {
        c->blocked = 1;
        return TS_PUBLISH_BLOCKED;
    }
    uint16_t id = qos > 0 ? next_packet_id(c) : 0;
    ts_buf_reset(&c->packet);
    if (ts_mqtt_write_publish(&c->packet, c->config.version, topic,
                              topic_len, payload, len, qos, id, 0) != 0)
        return TS_PUBLISH_FAILED;
    if (qos > 0) {
        outgoing *o = &c->inflight[c->n_inflight];
        o->data = malloc(topic_len + len + 1);
        if (o->data == NULL)
            return TS_PUBLISH_FAILED;
        memcpy(o->data, topic, topic_len);
        if (len > 0)
            memcpy(o->data + topic_len, payload, len);
        o->id = id;
        o->topic_len = topic_len;
        o->len = len;
        c->n_inflight++;
    }
    if (send_packet(c) != 0)
        return TS_PUBLISH_FAILED;
    if (qos == 0)
        c->stats.published++;
    return TS_PUBLISH_SENT;
}

size_t ts_mqtt_client_unacknowledged(const ts_mqtt_client *c)
{
    return c->n_inflight;
}

void ts_mqtt_client_pause_input(ts_mqtt_client *c)
{
    c->paused = 1;
}

void ts_mqtt_client_resume_input(ts_mqtt_client *c)
{
    if (!c->paused)
        return;
    c->paused = 0;
    event_active(c->resume_event, EV_TIMEOUT, 0);
}

void ts_mqtt_client_get_stats(const ts_mqtt_client *c,
                              ts_mqtt_client_stats *out)
{
    *out = c->stats;
}

const char *ts_mqtt_client_url(const ts_mqtt_client *c)
{
    return c->url;
}
