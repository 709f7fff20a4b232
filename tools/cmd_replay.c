/* tracesan replay: send a CSV trace, or JSON lines of LocationUpdate, to
 * tracesand as LocationBatch messages.
 *
 * Values go out as parsed: validating them is the daemon's job, and a
 * replay of a bad trace is how its rejections get exercised. Only rows that
 * cannot be parsed at all (wrong field count, text in a number column, a
 * line that is not a LocationUpdate object) are skipped here.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "wire/codec.h"
#include "drivers/zmq/curve_keys.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/jsonl.h"
#include "tools/replay_batch.h"

#define ERR_MAX 512
#define ENDPOINT_MAX 512
#define DEFAULT_BATCH 100
/* Messages queued ahead of the daemon; a PUSH socket blocks beyond it. */
#define SEND_HWM 10000
/* How long a send may block, and how long queued messages may take to leave
 * at exit, before replay gives up on an unresponsive daemon. */
#define SEND_TIMEOUT_MS 60000
#define LINGER_MS 60000
/* A PUB socket drops whatever it sends before the subscription arrives. */
#define PUB_CONNECT_TIMEOUT_S 10.0
#define MAX_SKIP_WARNINGS 100
/* JSON lines from a pipe (a Kafka consumer): a partial batch goes out once
 * the input has been quiet this long, so a trickle is not held back
 * waiting for a full batch. */
#define IDLE_FLUSH_MS 50
/* Exit status when every update went out but those too large for any
 * message the daemon takes. */
#define EXIT_REFUSED 2

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " replay [--connect ENDPOINT] [--rate N] "
        "[--batch N]\n"
        "                       [--socket push|pub] [--profile NAME] "
        "[--topic T]\n"
        "                       [--format csv|jsonl] [--config FILE]\n"
        "                       [-o PATH=VALUE]... IN\n"
        "\n"
        "       " TS_TOOL_NAME " replay --jetstream URLS [options] IN.csv\n"
        "\n"
        "Sends the rows of a CSV trace (same format as sanitize reads) to a\n"
        "running tracesand as LocationBatch messages, in file order. Values\n"
        "are sent as parsed; the daemon validates them. Rows that cannot be\n"
        "parsed at all are skipped with a warning.\n"
        "\n"
        "options:\n"
        "  -C, --connect ENDPOINT  the daemon's input endpoint (default: from\n"
        "                          --config/-o if given, else " TS_TOOL_DEFAULT_INPUT ")\n"
        "  -c, --config FILE       the daemon's configuration: its input\n"
        "                          endpoint (unless --connect) and the limits\n"
        "                          of one message (input.max_message_bytes,\n"
        "                          input.max_batch_updates; the defaults\n"
        "                          without it)\n"
        "  -o, --override PATH=VALUE\n"
        "                          override its settings; repeatable\n"
        "  -p, --profile NAME      profile for rows without one\n"
        "      --curve-server-key FILE --curve-key PREFIX\n"
        "                          connect with CURVE: the daemon's public\n"
        "                          key, and this client's PREFIX.key/.pub\n"
        "  -r, --rate N            send at most N points per second\n"
        "  -b, --batch N           updates per message (default 100; a\n"
        "                          message also closes before it would\n"
        "                          exceed input.max_message_bytes)\n"
        "      --socket push|pub   socket type matching input.type pull|sub\n"
        "                          (default push)\n"
        "  -t, --topic T           send two-frame messages [T][payload]\n"
        "  -f, --format csv|jsonl  jsonl: IN holds one LocationUpdate per\n"
        "                          line as a JSON object with the wire\n"
        "                          format's field names, e.g.\n"
        "                          {\"user_id\":\"u1\",\"timestamp_ms\":1700000000000,\n"
        "                           \"lat\":40.7,\"lon\":-74.0}\n"
        "                          (timestamp_ms may be a string); from a\n"
        "                          pipe, a partial batch is sent once the\n"
        "                          input has been idle for 50 ms\n"
        "  -h, --help              show this help\n"
        "\n"
        "An update larger than input.max_message_bytes on its own is not\n"
        "sent ('line N: not sent: ...'); the others around it are.\n"
        "\n"
        "Waits until every message has been handed to the network, then\n"
        "prints 'replay: sent N updates in M messages' on stderr (and, for\n"
        "jsonl, 'replay: skipped K bad lines' when there were any). Exit\n"
        "status 0 on success, 2 when everything else was sent but some\n"
        "updates were too large to send ('replay: refused K updates ...'),\n"
        "1 on a usage, I/O or connection error.\n"
        "\n",
        out);
    ts_replay_jetstream_usage(out);
}

typedef struct sender {
    void *socket;
    const char *topic;
    ts_replay_batch batch;
    size_t max_message_bytes;  /* the daemon's input.max_message_bytes */
    uint64_t refused;          /* updates too large for any message */
    uint64_t updates_sent;
    uint64_t messages_sent;
    double rate;
    double started;
} sender;

static int send_part(void *socket, const void *data, size_t len, int flags)
{
    for (;;) {
        if (zmq_send(socket, data, len, flags) >= 0)
            return 0;
        if (zmq_errno() != EINTR)
            return -1;
    }
}

/* Sends the batch's ready message. */
static int send_ready(sender *s)
{
    ts_replay_batch *b = &s->batch;
    if ((s->topic != NULL &&
         send_part(s->socket, s->topic, strlen(s->topic), ZMQ_SNDMORE) != 0) ||
        send_part(s->socket, b->payload.data, b->ready_len, 0) != 0) {
        if (zmq_errno() == EAGAIN)
            fprintf(stderr, TS_TOOL_NAME ": replay: the daemon accepted "
                    "nothing for %d s; giving up\n", SEND_TIMEOUT_MS / 1000);
        else
            fprintf(stderr, TS_TOOL_NAME ": replay: send failed: %s\n",
                    zmq_strerror(zmq_errno()));
        return -1;
    }
    s->updates_sent += b->ready_count;
    s->messages_sent++;
    ts_replay_batch_sent(b);
    if (s->rate > 0.0) {
        /* Paced against the start, so sleep overshoot does not accumulate
         * into a lower average rate. */
        ts_tool_sleep_until(s->started + (double)s->updates_sent / s->rate);
    }
    return 0;
}

/* A PUB drops everything sent before the subscriber's subscription has
 * reached it (the slow-joiner problem). The XPUB socket receives that
 * subscription as a message whose first byte is 1; waiting for it makes
 * delivery depend on the subscription, not on timing. */
static int wait_for_subscription(void *socket)
{
    double deadline = ts_tool_now() + PUB_CONNECT_TIMEOUT_S;
    for (;;) {
        double left = deadline - ts_tool_now();
        if (left <= 0.0)
            return -1;
        zmq_pollitem_t item = { .socket = socket, .events = ZMQ_POLLIN };
        int rc = zmq_poll(&item, 1, (long)(left * 1000.0) + 1);
        if (rc < 0 && zmq_errno() != EINTR)
            return -1;
        if (rc <= 0)
            continue;
        unsigned char first = 0;
        int n = zmq_recv(socket, &first, sizeof first, ZMQ_DONTWAIT);
        if (n >= 1 && first == 1)
            return 0;
    }
}

/* 0 once a CURVE handshake succeeded, -1 (reported) when the daemon
 * refused it or nothing happened in time. */
static int wait_for_handshake(void *monitor, const char *endpoint)
{
    double deadline = ts_tool_now() + PUB_CONNECT_TIMEOUT_S;
    for (;;) {
        double left = deadline - ts_tool_now();
        if (left <= 0.0) {
            fprintf(stderr, TS_TOOL_NAME ": no CURVE handshake with %s "
                    "within %.0f s\n", endpoint, PUB_CONNECT_TIMEOUT_S);
            return -1;
        }
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        zmq_pollitem_t item = { .socket = monitor, .events = ZMQ_POLLIN };
        int rc = zmq_poll(&item, 1, (long)(left * 1000.0) + 1);
        if (rc <= 0 || zmq_msg_recv(&frame, monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&frame);
            if (rc < 0 && zmq_errno() != EINTR)
                return -1;
            continue;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&frame) >= sizeof event)
            memcpy(&event, zmq_msg_data(&frame), sizeof event);
        while (zmq_msg_more(&frame) &&
               (zmq_msg_recv(&frame, monitor, 0) >= 0 || zmq_errno() == EINTR)) {
        }
        zmq_msg_close(&frame);
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
            return 0;
        fprintf(stderr, TS_TOOL_NAME ": %s refused the CURVE handshake (%s)\n",
                endpoint, event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                              ? "this client key is not allowed"
                              : "wrong server key or no CURVE on that side");
        return -1;
    }
}

static int set_int_option(void *socket, int option, int value)
{
    return zmq_setsockopt(socket, option, &value, sizeof value);
}

/* Sends what the batch holds: the last, partial message, or one held
 * back while the input is idle. */
static int flush_batch(sender *s)
{
    return ts_replay_batch_close(&s->batch) == TS_BATCH_SEND ? send_ready(s)
                                                             : 0;
}

/* The update of input line `line`, appended at payload offset `before`:
 * into the batch, which may send a message, or refused alone. */
static int take_update(sender *s, size_t before, size_t line)
{
    size_t bytes;
    int rc = ts_replay_batch_added(&s->batch, before, &bytes);
    if (rc == TS_BATCH_SEND)
        return send_ready(s);
    if (rc == TS_BATCH_TOO_LARGE && ++s->refused <= MAX_SKIP_WARNINGS)
        fprintf(stderr, TS_TOOL_NAME ": line %zu: not sent: the update takes "
                "%zu bytes, more than a message may (input.max_message_bytes "
                "= %zu)\n", line, bytes, s->batch.max_bytes);
    return 0;
}

/* Appends one update to the batch being built: a LocationBatch of one
 * packs to the `updates` field of that update, and repeated fields
 * concatenate. Every field read from the line travels, known to this
 * code or not. */
static int append_update(sender *s, Tracesan__V1__LocationUpdate *update)
{
    Tracesan__V1__LocationBatch one = TRACESAN__V1__LOCATION_BATCH__INIT;
    one.n_updates = 1;
    one.updates = &update;
    size_t size = tracesan__v1__location_batch__get_packed_size(&one);
    ts_buf *payload = &s->batch.payload;
    if (ts_buf_reserve(payload, size) != 0)
        return -1;
    payload->len += tracesan__v1__location_batch__pack(
        &one, payload->data + payload->len);
    return 0;
}

/* Reads the next update and appends it to the batch's payload, from
 * offset *before. 1 when one was appended (*line: its input line), 0 at
 * the end of the input, -1 on an error (reported). */
static int next_csv(ts_csv_reader *reader, sender *s, const char *path,
                    const char *profile, uint64_t *skipped, size_t *before,
                    size_t *line)
{
    char err[ERR_MAX];
    ts_csv_row row;
    for (;;) {
        int rc = ts_csv_read(reader, &row, err, sizeof err);
        if (rc == TS_CSV_EOF)
            return 0;
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
            return -1;
        }
        if (rc == TS_CSV_BAD_ROW) {
            if (++*skipped <= MAX_SKIP_WARNINGS)
                fprintf(stderr, TS_TOOL_NAME ": line %zu: skipped: %s\n",
                        row.line, err);
            continue;
        }
        ts_input input = ts_csv_input(&row, profile);
        *before = s->batch.payload.len;
        *line = row.line;
        if (ts_codec_encode_batch(&input, 1, &s->batch.payload) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            return -1;
        }
        return 1;
    }
}

/* As next_csv; while a partial batch waits, an idle pipe sends it. */
static int next_jsonl(ts_jsonl_reader *reader, sender *s, const char *path,
                      const char *profile, uint64_t *skipped, size_t *before,
                      size_t *line)
{
    char err[ERR_MAX];
    for (;;) {
        ProtobufCMessage *message;
        int rc = ts_jsonl_read(reader,
                               s->batch.pending > 0 ? IDLE_FLUSH_MS : -1,
                               &message, line, err, sizeof err);
        if (rc == TS_JSONL_EOF)
            return 0;
        if (rc == TS_JSONL_IDLE) {
            if (flush_batch(s) != 0)
                return -1;
            continue;
        }
        if (rc == TS_JSONL_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
            return -1;
        }
        if (rc == TS_JSONL_BAD_LINE) {
            /* err names the field and byte, never the value. */
            if (++*skipped <= MAX_SKIP_WARNINGS)
                fprintf(stderr, TS_TOOL_NAME ": line %zu: skipped: %s\n",
                        *line, err);
            continue;
        }
        Tracesan__V1__LocationUpdate *update =
            (Tracesan__V1__LocationUpdate *)message;
        /* The string lives as long as the update (the reader's arena
         * never frees single allocations). */
        if (update->profile == NULL && profile != NULL)
            update->profile = (char *)profile;
        *before = s->batch.payload.len;
        if (append_update(s, update) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            return -1;
        }
        return 1;
    }
}

int cmd_replay(int argc, char **argv)
{
    /* The JetStream producer (tools/cmd_jetstream.c). */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--jetstream") == 0 ||
            strncmp(argv[i], "--jetstream=", 12) == 0)
            return cmd_replay_jetstream(argc, argv);
    /* The MQTT publisher (tools/mqtt_tools.c). */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--mqtt") == 0 ||
            strncmp(argv[i], "--mqtt=", 7) == 0)
            return cmd_replay_mqtt(argc, argv);
    double rate = 0.0; /* points/s, 0 = unlimited */
    uint64_t batch = DEFAULT_BATCH;
    int use_pub = 0;
    int jsonl = 0;
    static const char *const formats[] = { "csv", "jsonl", NULL };
    const char *topic = NULL; /* NULL: one-frame messages */
    static const char *const socket_types[] = { "push", "pub", NULL };
    const ts_tool_option options[] = {
        { "rate", 'r', TS_ARG_POSITIVE, .dest = &rate },
        { "batch", 'b', TS_ARG_U64, .dest = &batch, .min = 1,
          .max = 100000000 },
        { "socket", 0, TS_ARG_CHOICE, .dest = &use_pub,
          .choices = socket_types },
        { "topic", 't', TS_ARG_STRING, .dest = &topic },
        { "format", 'f', TS_ARG_CHOICE, .dest = &jsonl, .choices = formats },
        { 0 },
    };
    const ts_tool_command command = {
        "replay", TS_OPT_CONNECT | TS_OPT_CONFIG | TS_OPT_OVERRIDE |
                      TS_OPT_PROFILE | TS_OPT_CURVE,
        options, 1, "one input file ('-' for stdin)", usage,
    };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    const char *input_path = argv[first];
    char endpoint[ENDPOINT_MAX];
    ts_tool_input_limits limits;
    if (ts_tool_endpoint(&common, 1, endpoint, sizeof endpoint, &limits) != 0)
        return 1;
    if (batch > limits.max_batch_updates) {
        fprintf(stderr, TS_TOOL_NAME " replay: --batch %" PRIu64 " is more "
                "than the daemon takes in one message (input.max_batch_updates "
                "= %zu; give its configuration with --config or -o)\n", batch,
                limits.max_batch_updates);
        return 1;
    }

    char err[ERR_MAX];
    ts_csv_reader *reader;
    ts_jsonl_reader *json_reader;
    if (ts_jsonl_open_updates(input_path, jsonl, &reader, &json_reader, err,
                              sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return 1;
    }

    int status = 1;
    sender s = {
        .topic = topic,
        .rate = rate,
        .batch = { .max_updates = (size_t)batch,
                   .max_bytes = limits.max_message_bytes },
    };
    void *monitor = NULL;
    void *context = zmq_ctx_new();
    if (context == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": cannot create ZeroMQ context\n");
        goto out;
    }
    /* XPUB rather than PUB: it hands us the subscriber's subscription,
     * so we can start sending when it has arrived instead of guessing. */
    s.socket = zmq_socket(context, use_pub ? ZMQ_XPUB : ZMQ_PUSH);
    if (s.socket == NULL ||
        set_int_option(s.socket, ZMQ_SNDHWM, SEND_HWM) != 0 ||
        set_int_option(s.socket, ZMQ_SNDTIMEO, SEND_TIMEOUT_MS) != 0 ||
        set_int_option(s.socket, ZMQ_LINGER, LINGER_MS) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": cannot set up the socket: %s\n",
                zmq_strerror(zmq_errno()));
        goto out;
    }
    if (common.curve_key != NULL) {
        if (ts_curve_client_setup(s.socket, common.curve_server_key,
                                  common.curve_key, err, sizeof err) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
            goto out;
        }
        /* The daemon's verdict on our key comes back as a handshake
         * event: waiting for it turns a refused key into an error here
         * instead of messages silently dropped with the connection. */
        monitor = ts_tool_monitor_open(
            context, s.socket,
            ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
        if (monitor == NULL) {
            fprintf(stderr, TS_TOOL_NAME ": cannot monitor the socket: %s\n",
                    zmq_strerror(zmq_errno()));
            goto out;
        }
    }
    if (zmq_connect(s.socket, endpoint) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": cannot connect to %s: %s\n", endpoint,
                zmq_strerror(zmq_errno()));
        goto out;
    }
    if (common.curve_key != NULL && wait_for_handshake(monitor, endpoint) != 0)
        goto out;
    if (use_pub && wait_for_subscription(s.socket) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": no subscriber at %s within %.0f s\n",
                endpoint, PUB_CONNECT_TIMEOUT_S);
        goto out;
    }

    s.started = ts_tool_now();
    uint64_t skipped = 0;
    for (;;) {
        /* Repeated fields concatenate, so appending one update at a time
         * builds the batch without keeping rows around. */
        size_t before = 0, line = 0;
        int rc = jsonl ? next_jsonl(json_reader, &s, input_path,
                                    common.profile, &skipped, &before, &line)
                       : next_csv(reader, &s, input_path, common.profile,
                                  &skipped, &before, &line);
        if (rc < 0)
            goto out;
        if (rc == 0)
            break;
        if (take_update(&s, before, line) != 0)
            goto out;
    }
    if (flush_batch(&s) != 0)
        goto out;
    if (jsonl && skipped > 0)
        fprintf(stderr, "replay: skipped %" PRIu64 " bad lines\n", skipped);
    else if (skipped > MAX_SKIP_WARNINGS)
        fprintf(stderr, TS_TOOL_NAME ": %" PRIu64 " unparsable rows skipped\n",
                skipped);
    status = 0;
    if (s.refused > 0) {
        fprintf(stderr, "replay: refused %" PRIu64 " updates larger than "
                "input.max_message_bytes (%zu bytes)\n", s.refused,
                s.batch.max_bytes);
        status = EXIT_REFUSED;
    }

out:
    ts_csv_close(reader);
    ts_jsonl_close(json_reader);
    ts_replay_batch_free(&s.batch);
    if (monitor != NULL)
        zmq_close(monitor);
    if (s.socket != NULL) {
        /* After a failure nothing queued is worth waiting for. */
        if (status != 0 && status != EXIT_REFUSED)
            set_int_option(s.socket, ZMQ_LINGER, 0);
        zmq_close(s.socket);
    }
    if (context != NULL)
        zmq_ctx_term(context); /* blocks until queued messages are sent */
    if (status == 0 || status == EXIT_REFUSED)
        fprintf(stderr,
                "replay: sent %" PRIu64 " updates in %" PRIu64 " messages\n",
                s.updates_sent, s.messages_sent);
    return status;
}
