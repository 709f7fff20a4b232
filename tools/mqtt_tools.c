/* tracesan replay --mqtt and tracesan tail --mqtt: a trace into an MQTT
 * broker (per-vehicle JSON, or protobuf batches) and the daemon's MQTT
 * output out of it, over the driver's own client
 * (drivers/mqtt/mqtt_client.h) on a private event loop. The options
 * mirror the daemon's mqtt.* keys. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "drivers/mqtt/mqtt_client.h"
#include "drivers/mqtt/mqtt_packet.h"
#include "drivers/mqtt/mqtt_settings.h"
#include "drivers/mqtt/mqtt_topics.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/jsonl.h"
#include "wire/format.h"
#include "wire/json_codec.h"

#define ERR_MAX 512
#define MAX_FILTERS 16
/* How long a tool waits for the broker before it gives up. */
#define CONNECT_TIMEOUT_S 10

/* What both commands share: the connection's options. */
typedef struct connection {
    const char *url;
    const char *client_id;
    const char *username;
    const char *password_file;
    const char *ca, *cert, *key;
    int version;
    int qos;
    struct event_base *base;
    ts_mqtt_client *client;
    int up, writable;
    char failure[512];
    int failed;
} connection;

enum {
    OPT_MQTT = 1000, OPT_USERNAME, OPT_PASSWORD_FILE, OPT_CA, OPT_CERT,
    OPT_KEY, OPT_PROTOCOL, OPT_QOS, OPT_CLIENT_ID, OPT_PAYLOAD, OPT_COUNT,
    OPT_TIMEOUT, OPT_READY, OPT_ENCODING,
};

#define CONNECTION_OPTIONS                                                  \
    { "mqtt", required_argument, NULL, OPT_MQTT },                          \
    { "username", required_argument, NULL, OPT_USERNAME },                  \
    { "password-file", required_argument, NULL, OPT_PASSWORD_FILE },        \
    { "tls-ca-file", required_argument, NULL, OPT_CA },                     \
    { "tls-cert-file", required_argument, NULL, OPT_CERT },                 \
    { "tls-key-file", required_argument, NULL, OPT_KEY },                   \
    { "protocol", required_argument, NULL, OPT_PROTOCOL },                  \
    { "qos", required_argument, NULL, OPT_QOS },                            \
    { "client-id", required_argument, NULL, OPT_CLIENT_ID }

#define CONNECTION_HELP                                                     \
    "      --mqtt URL             the broker (mqtt://host:port, "          \
    "mqtts://host:port)\n"                                                  \
    "      --username NAME --password-file FILE (mode 600)\n"               \
    "      --tls-ca-file F --tls-cert-file F --tls-key-file F\n"            \
    "      --protocol 3.1.1|5     (default 5)\n"                            \
    "      --qos 0|1              (default 1)\n"                            \
    "      --client-id ID         (default tracesan-<command>-<pid>)\n"

static int connection_option(connection *c, int opt, const char *arg)
{
    switch (opt) {
    case OPT_MQTT: c->url = arg; return 1;
    case OPT_USERNAME: c->username = arg; return 1;
    case OPT_PASSWORD_FILE: c->password_file = arg; return 1;
    case OPT_CA: c->ca = arg; return 1;
    case OPT_CERT: c->cert = arg; return 1;
    case OPT_KEY: c->key = arg; return 1;
    case OPT_CLIENT_ID: c->client_id = arg; return 1;
    case OPT_PROTOCOL:
        if (strcmp(arg, "3.1.1") == 0)
            c->version = TS_MQTT_V311;
        else if (strcmp(arg, "5") == 0)
            c->version = TS_MQTT_V5;
        else
            return -1;
        return 1;
    case OPT_QOS:
        if (strcmp(arg, "0") != 0 && strcmp(arg, "1") != 0)
            return -1;
        c->qos = arg[0] - '0';
        return 1;
    default:
        return 0;
    }
}

static void on_up(void *arg, int session_present)
{
    (void)session_present;
    connection *c = arg;
    c->up = 1;
    c->writable = 1;
}

static void on_down(void *arg, const char *why, int refused)
{
    connection *c = arg;
    c->up = 0;
    snprintf(c->failure, sizeof c->failure, "%s", why);
    /* A tool does not wait out refusals: credentials and certificates
     * will not change while it retries. */
    if (refused)
        c->failed = 1;
}

static void on_writable(void *arg)
{
    ((connection *)arg)->writable = 1;
}

/* Connects (and subscribes to `filters`), waiting at most
 * CONNECT_TIMEOUT_S; a refusal ends it at once, with its cause. */
static int open_connection(connection *c, const char *command,
                           const char *const *filters, size_t n_filters,
                           void (*on_message)(void *, const ts_mqtt_message *),
                           void *message_arg)
{
    char err[ERR_MAX];
    char id[64];
    /* A named client keeps its session across reconnections. */
    int clean = c->client_id == NULL;
    if (c->client_id == NULL) {
        snprintf(id, sizeof id, "tracesan-%s-%ld", command, (long)getpid());
        c->client_id = id;
    }
    char *password = NULL;
    size_t password_len = 0;
    if (c->password_file != NULL) {
        char problem[512];
        password = ts_mqtt_read_password(c->password_file, &password_len,
                                         problem, sizeof problem);
        if (password == NULL) {
            fprintf(stderr, TS_TOOL_NAME ": --password-file %s\n", problem);
            return -1;
        }
    }
    ts_mqtt_client_config config = {
        .urls = &c->url, .n_urls = 1,
        .client_id = c->client_id,
        .username = c->username,
        .password = password, .password_len = password_len,
        .ca_file = c->ca, .cert_file = c->cert, .key_file = c->key,
        .version = c->version,
        .keepalive_s = 30,
        .clean_start = clean,
        .session_expiry_s = clean ? 0 : 3600,
        .max_inflight_in = 1000,
        .max_payload = (size_t)64 << 20,
        .filters = filters, .n_filters = n_filters,
        .qos = c->qos,
        .max_inflight_out = 1000,
        .retry_first_ms = 100, .retry_max_ms = 1000,
    };
    ts_mqtt_client_events events = {
        .arg = c, .up = on_up, .down = on_down, .writable = on_writable,
    };
    events.message = on_message;
    (void)message_arg;
    c->base = event_base_new();
    if (c->base == NULL)
        return -1;
    c->client = ts_mqtt_client_new(&config, &events, c->base, err,
                                   sizeof err);
    ts_mqtt_free_password(password, password_len);
    if (c->client == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return -1;
    }
    ts_mqtt_client_start(c->client);
    double deadline = ts_tool_now() + CONNECT_TIMEOUT_S;
    while (!c->up && !c->failed && ts_tool_now() < deadline)
        event_base_loop(c->base, EVLOOP_ONCE);
    if (!c->up) {
        fprintf(stderr, TS_TOOL_NAME ": cannot connect to %s: %s\n", c->url,
                c->failure[0] != '\0' ? c->failure : "timed out");
        return -1;
    }
    return 0;
}

static void close_connection(connection *c)
{
    ts_mqtt_client_free(c->client);
    if (c->base != NULL)
        event_base_free(c->base);
}

/* ---------------------------------------------------------- replay */

typedef struct replay {
    connection conn;
    const char *topic;       /* may hold {user} */
    int json;                /* --payload json */
    size_t batch;
    double rate;
    ts_buf payload, topic_buf, one;
    size_t pending;
    uint64_t updates, messages;
    double started;
} replay;

static void replay_usage(FILE *out)
{
    fputs("usage: " TS_TOOL_NAME " replay --mqtt URL --topic T "
          "[--payload protobuf|json]\n"
          "                       [--format csv|jsonl] [--batch N] "
          "[--rate N] [--profile P] IN\n\n"
          "Publishes the updates of IN (CSV or JSON lines of "
          "LocationUpdate) to an MQTT\nbroker. --topic may hold {user}: "
          "one topic per vehicle, e.g. fleet/{user}/location.\n"
          "--payload json: one LocationUpdate JSON object per message "
          "(a batch of 1);\nprotobuf: LocationBatch messages of --batch "
          "updates (1 when the topic names the user).\n"
          "Waits for every PUBACK (QoS 1) before it exits.\n\n"
          CONNECTION_HELP, out);
}

static int topic_for(replay *r, const char *user, ts_buf *out)
{
    ts_buf_reset(out);
    for (const char *p = r->topic; *p != '\0';) {
        if (strncmp(p, "{user}", 6) == 0) {
            if (ts_buf_append(out, user, strlen(user)) != 0)
                return -1;
            p += 6;
        } else if (ts_buf_append(out, p++, 1) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Publishes, running the loop while the client's window is full. */
static int send_message(replay *r, const ts_buf *topic, const ts_buf *payload)
{
    for (;;) {
        if (r->conn.failed)
            return -1;
        ts_publish_result rc = ts_mqtt_client_publish(
            r->conn.client, (const char *)topic->data, topic->len,
            payload->data, payload->len, r->conn.qos);
        if (rc == TS_PUBLISH_SENT)
            break;
        if (rc == TS_PUBLISH_FAILED)
            return -1;
        r->conn.writable = 0;
        while (!r->conn.writable && !r->conn.failed)
            event_base_loop(r->conn.base, EVLOOP_ONCE);
    }
    r->messages++;
    event_base_loop(r->conn.base, EVLOOP_NONBLOCK);
    return 0;
}

static int flush(replay *r)
{
    if (r->pending == 0)
        return 0;
    int rc = send_message(r, &r->topic_buf, &r->payload);
    r->updates += r->pending;
    r->pending = 0;
    ts_buf_reset(&r->payload);
    if (r->rate > 0)
        ts_tool_sleep_until(r->started + (double)r->updates / r->rate);
    return rc;
}

static int replay_update(replay *r, const ts_input *input)
{
    ts_buf_reset(&r->one);
    if (ts_codec_encode_batch(input, 1, &r->one) != 0)
        return -1;
    int per_user = strstr(r->topic, "{user}") != NULL;
    if (!r->json && !per_user) {
        if (r->pending == 0 && topic_for(r, "", &r->topic_buf) != 0)
            return -1;
        if (ts_buf_append(&r->payload, r->one.data, r->one.len) != 0)
            return -1;
        return ++r->pending >= r->batch ? flush(r) : 0;
    }
    if (topic_for(r, input->user_id != NULL ? input->user_id : "",
                  &r->topic_buf) != 0)
        return -1;
    if (!r->json) {
        if (ts_buf_append(&r->payload, r->one.data, r->one.len) != 0)
            return -1;
        r->pending = 1;
        return flush(r);
    }
    Tracesan__V1__LocationBatch *batch =
        ts_codec_decode_batch(r->one.data, r->one.len);
    if (batch == NULL || batch->n_updates != 1) {
        ts_codec_batch_free(batch);
        return -1;
    }
    int rc = ts_json_from_message(&batch->updates[0]->base, &r->payload);
    ts_codec_batch_free(batch);
    if (rc != 0)
        return 0;  /* no JSON form (not UTF-8): skipped */
    r->pending = 1;
    return flush(r);
}

int cmd_replay_mqtt(int argc, char **argv)
{
    static const struct option options[] = {
        CONNECTION_OPTIONS,
        { "topic", required_argument, NULL, 't' },
        { "payload", required_argument, NULL, OPT_PAYLOAD },
        { "format", required_argument, NULL, 'f' },
        { "batch", required_argument, NULL, 'b' },
        { "rate", required_argument, NULL, 'r' },
        { "profile", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    replay r = { .conn = { .version = TS_MQTT_V5, .qos = 1 }, .batch = 100 };
    int jsonl = 0;
    const char *profile = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "t:f:b:r:p:h", options, NULL)) !=
           -1) {
        int handled = connection_option(&r.conn, opt, optarg);
        if (handled < 0)
            goto usage;
        if (handled)
            continue;
        switch (opt) {
        case 't': r.topic = optarg; break;
        case 'f': jsonl = strcmp(optarg, "jsonl") == 0; break;
        case 'b': r.batch = (size_t)strtoul(optarg, NULL, 10); break;
        case 'r': r.rate = strtod(optarg, NULL); break;
        case 'p': profile = optarg; break;
        case OPT_PAYLOAD:
            if (strcmp(optarg, "json") != 0 && strcmp(optarg, "protobuf"))
                goto usage;
            r.json = strcmp(optarg, "json") == 0;
            break;
        case 'h': replay_usage(stdout); return 0;
        default: goto usage;
        }
    }
    if (r.topic == NULL || r.conn.url == NULL || optind != argc - 1 ||
        r.batch == 0)
        goto usage;
    const char *path = argv[optind];
    char err[ERR_MAX];
    ts_csv_reader *csv = NULL;
    ts_jsonl_reader *json_reader = NULL;
    if (ts_jsonl_open_updates(path, jsonl, &csv, &json_reader, err,
                              sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return 1;
    }
    int status = 1;
    uint64_t skipped = 0;
    if (open_connection(&r.conn, "replay", NULL, 0, NULL, NULL) != 0)
        goto out;
    r.started = ts_tool_now();
    for (;;) {
        ts_input input;
        if (csv != NULL) {
            ts_csv_row row;
            int rc = ts_csv_read(csv, &row, err, sizeof err);
            if (rc == TS_CSV_EOF)
                break;
            if (rc == TS_CSV_IO_ERROR) {
                fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
                goto out;
            }
            if (rc == TS_CSV_BAD_ROW) {
                skipped++;
                continue;
            }
            input = ts_csv_input(&row, profile);
        } else {
            ProtobufCMessage *message;
            size_t line;
            int rc = ts_jsonl_read(json_reader, -1, &message, &line, err,
                                   sizeof err);
            if (rc == TS_JSONL_EOF)
                break;
            if (rc == TS_JSONL_IO_ERROR) {
                fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
                goto out;
            }
            if (rc != TS_JSONL_MESSAGE) {
                skipped++;
                continue;
            }
            Tracesan__V1__LocationUpdate *u =
                (Tracesan__V1__LocationUpdate *)message;
            if (u->profile == NULL && profile != NULL)
                u->profile = (char *)profile;
            ts_codec_input_from_update(u, &input);
        }
        if (replay_update(&r, &input) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": replay: %s\n",
                    r.conn.failed ? r.conn.failure : "cannot publish");
            goto out;
        }
    }
    if (flush(&r) != 0)
        goto out;
    /* Every PUBACK, riding out a reconnection. */
    while (ts_mqtt_client_unacknowledged(r.conn.client) > 0 &&
           !r.conn.failed)
        event_base_loop(r.conn.base, EVLOOP_ONCE);
    status = r.conn.failed ? 1 : 0;
    if (skipped > 0)
        fprintf(stderr, "replay: skipped %" PRIu64 " bad lines\n", skipped);
out:
    close_connection(&r.conn);
    ts_csv_close(csv);
    ts_jsonl_close(json_reader);
    ts_buf_free(&r.payload);
    ts_buf_free(&r.topic_buf);
    ts_buf_free(&r.one);
    if (status == 0)
        fprintf(stderr, "replay: sent %" PRIu64 " updates in %" PRIu64
                " messages\n", r.updates, r.messages);
    return status;
usage:
    replay_usage(stderr);
    return 1;
}

/* ------------------------------------------------------------ tail */

typedef struct tail {
    connection conn;
    ts_mqtt_settings templates;
    const ts_format *format;
    ts_buf scratch;
    uint64_t received, count, skipped;
} tail;

static tail *the_tail;
static volatile sig_atomic_t stop_requested;

static void on_stop(int signum)
{
    (void)signum;
    stop_requested = 1;
}

static void print(tail *t, const char *kind,
                  const ProtobufCMessageDescriptor *descriptor,
                  const ts_mqtt_message *m)
{
    ProtobufCMessage *message = NULL;
    if (t->format->read(descriptor, m->payload, m->payload_len, NULL,
                        &message) != 0) {
        t->skipped++;
        return;
    }
    if (strcmp(kind, "batch") == 0) {
        Tracesan__V1__OutcomeBatch *b = (Tracesan__V1__OutcomeBatch *)message;
        for (size_t i = 0; i < b->n_sanitized; i++)
            ts_jsonl_write(stdout, "sanitized", &b->sanitized[i]->base,
                           &t->scratch);
        for (size_t i = 0; i < b->n_rejected; i++)
            ts_jsonl_write(stdout, "rejected", &b->rejected[i]->base,
                           &t->scratch);
        t->received += b->n_sanitized + b->n_rejected;
    } else {
        ts_jsonl_write(stdout, kind, message, &t->scratch);
        if (strcmp(kind, "density") != 0)
            t->received++;
    }
    protobuf_c_message_free_unpacked(message, NULL);
}

static void tail_message(void *arg, const ts_mqtt_message *m)
{
    (void)arg;
    tail *t = the_tail;
    if (m->qos > 0)
        ts_mqtt_client_ack(t->conn.client, m->connection, m->packet_id);
    if (m->oversized) {
        t->skipped++;
        return;
    }
    switch (ts_mqtt_topic_kind(&t->templates, m->topic, m->topic_len)) {
    case TS_MQTT_KIND_SANITIZED:
        print(t, "sanitized", &tracesan__v1__sanitized_location__descriptor,
              m);
        break;
    case TS_MQTT_KIND_REJECTED:
        print(t, "rejected", &tracesan__v1__rejection__descriptor, m);
        break;
    case TS_MQTT_KIND_DENSITY:
        print(t, "density", &tracesan__v1__density_estimate__descriptor, m);
        break;
    case TS_MQTT_KIND_BATCH:
        print(t, "batch", &tracesan__v1__outcome_batch__descriptor, m);
        break;
    default:
        t->skipped++;
    }
}

static void tail_usage(FILE *out)
{
    fputs("usage: " TS_TOOL_NAME " tail --mqtt URL [--topic FILTER]... "
          "[--encoding protobuf|json]\n"
          "                     [--count N] [--timeout S] "
          "[--ready-file F]\n\n"
          "Subscribes to the daemon's MQTT output (default filter "
          "tracesan/#) and prints\neach message as a JSON line, "
          "{\"sanitized\":{...}}, {\"rejected\":{...}} or\n"
          "{\"density\":{...}}, its kind told by the default "
          "mqtt.*_topic templates.\n--encoding is the daemon's "
          "output.encoding (default protobuf).\n\n" CONNECTION_HELP,
          out);
}

int cmd_tail_mqtt(int argc, char **argv)
{
    static const struct option options[] = {
        CONNECTION_OPTIONS,
        { "topic", required_argument, NULL, 't' },
        { "encoding", required_argument, NULL, OPT_ENCODING },
        { "count", required_argument, NULL, OPT_COUNT },
        { "timeout", required_argument, NULL, OPT_TIMEOUT },
        { "ready-file", required_argument, NULL, OPT_READY },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    tail t = { .conn = { .version = TS_MQTT_V5, .qos = 1 } };
    const char *filters[MAX_FILTERS];
    size_t n_filters = 0;
    double timeout = 0;
    const char *ready = NULL;
    t.format = ts_format_find("protobuf");
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "t:h", options, NULL)) != -1) {
        int handled = connection_option(&t.conn, opt, optarg);
        if (handled < 0)
            goto usage;
        if (handled)
            continue;
        switch (opt) {
        case 't':
            if (n_filters == MAX_FILTERS)
                goto usage;
            filters[n_filters++] = optarg;
            break;
        case OPT_ENCODING:
            t.format = ts_format_find(optarg);
            if (t.format == NULL)
                goto usage;
            break;
        case OPT_COUNT: t.count = strtoull(optarg, NULL, 10); break;
        case OPT_TIMEOUT: timeout = strtod(optarg, NULL); break;
        case OPT_READY: ready = optarg; break;
        case 'h': tail_usage(stdout); return 0;
        default: goto usage;
        }
    }
    if (t.conn.url == NULL || optind != argc)
        goto usage;
    if (n_filters == 0)
        filters[n_filters++] = "tracesan/#";
    ts_setting_section_defaults(&ts_mqtt_setting_section, &t.templates);
    the_tail = &t;
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    int status = 1;
    if (open_connection(&t.conn, "tail", filters, n_filters, tail_message,
                        &t) != 0)
        goto out;
    if (ready != NULL) {
        FILE *f = fopen(ready, "w");
        if (f != NULL)
            fclose(f);
    }
    double deadline = timeout > 0 ? ts_tool_now() + timeout : 0;
    struct timeval tick = { 0, 100000 };
    while (!stop_requested && !t.conn.failed &&
           (t.count == 0 || t.received < t.count) &&
           (deadline == 0 || ts_tool_now() < deadline)) {
        event_base_loopexit(t.conn.base, &tick);
        event_base_dispatch(t.conn.base);
        fflush(stdout);
    }
    status = t.count > 0 && t.received < t.count ? 1 : 0;
    if (t.conn.failed) {
        fprintf(stderr, TS_TOOL_NAME ": tail: %s\n", t.conn.failure);
        status = 1;
    }
out:
    fflush(stdout);
    close_connection(&t.conn);
    ts_buf_free(&t.scratch);
    if (t.skipped > 0)
        fprintf(stderr, "tail: skipped %" PRIu64 " messages\n", t.skipped);
    return status;
usage:
    tail_usage(stderr);
    return 1;
}
