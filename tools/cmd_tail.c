/* tracesan tail: print tracesand's feed as CSV or JSON lines.
 *
 * Sanitized messages become the same CSV rows `tracesan sanitize` writes;
 * rejections go to a separate CSV. With --format jsonl every message is
 * one JSON line on stdout, {"sanitized":{...}}, {"rejected":{...}} or
 * {"density":{...}}, the wire format's fields under their own names. A
 * message that does not decode is skipped with a warning: the feed is
 * input to this tool and may be anything.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "wire/codec.h"
#include "drivers/zmq/curve_keys.h"
#include "engine/pipeline.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/jsonl.h"

#define ERR_MAX 512
#define ENDPOINT_MAX 512
#define MAX_TOPICS 64
#define RECEIVE_HWM 1000000
/* After the connection is reported, the subscription still has to reach
 * the publisher; until it does, the publisher drops our messages. */
#define SUBSCRIPTION_GRACE_S 0.2
/* Messages handled between flushes and deadline checks. */
#define DRAIN_BUDGET 4096
#define MAX_SKIP_WARNINGS 20
#define STDOUT_BUFFER_BYTES (256 * 1024)
#define DENSITY_HEADER                                                      \
    "profile,mechanism,channel_version,cycle,reports,reports_total,rows,"  \
    "cols,cells,probability_sum,estimated_at_ms"

typedef struct topic_list {
    const char *topics[MAX_TOPICS];
    size_t n;
} topic_list;

typedef struct tail_state {
    int jsonl;               /* --format jsonl */
    ts_buf json;             /* a JSON line being written */
    FILE *rejections;
    FILE *density;           /* NULL: density estimates are skipped */
    ts_codec_arena arena;    /* batches unpack here */
    uint64_t received;       /* sanitized + rejected */
    uint64_t skipped;
} tail_state;

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int signum)
{
    (void)signum;
    stop_requested = 1;
}

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " tail [--connect ENDPOINT] [--topic T]... "
        "[--count N]\n"
        "                     [--timeout S] [--rejections FILE] "
        "[--ready-file F]\n"
        "                     [--density FILE] [--format csv|jsonl] "
        "[--pull]\n"
        "                     [--config FILE] [-o PATH=VALUE]...\n"
        "\n"
        "Subscribes to tracesand's output and prints sanitized points on\n"
        "stdout as CSV with the header\n",
        out);
    fprintf(out, "  %s\n", ts_csv_sanitized_header());
    fputs(
        "(the same format as 'tracesan sanitize') and rejections as CSV with\n"
        "the header\n"
        "  " TS_CSV_REJECTED_HEADER "\n"
        "\n"
        "options:\n"
        "  -C, --connect ENDPOINT  the daemon's output endpoint (default: from\n"
        "                          --config/-o if given, else " TS_TOOL_DEFAULT_OUTPUT ")\n"
        "  -c, --config FILE       read the default endpoint from this\n"
        "                          configuration\n"
        "  -o, --override PATH=VALUE\n"
        "                          override its settings; repeatable\n"
        "      --curve-server-key FILE --curve-key PREFIX\n"
        "                          connect with CURVE: the daemon's public\n"
        "                          key, and this client's PREFIX.key/.pub\n"
        "  -t, --topic T           subscribe to topics starting with T, e.g.\n"
        "                          sanitized.geoind or rejected; repeatable;\n"
        "                          default: everything. A daemon with\n"
        "                          output.format = \"batch\" publishes on\n"
        "                          topic batch, read the same way\n"
        "  -n, --count N           exit after N points and rejections\n"
        "  -T, --timeout S         exit after S seconds (float) without a\n"
        "                          message\n"
        "  -r, --rejections FILE   write rejections there (default stderr)\n"
        "  -D, --density FILE      write a CSV summary of each density estimate\n"
        "                          (topic density.<profile>) there, header\n"
        "                          " DENSITY_HEADER "\n"
        "                          (the cells themselves: GET /density/<profile>)\n"
        "  -R, --ready-file F      create F once the subscription is connected\n"
        "                          (scripts wait for it before sending)\n"
        "  -P, --pull              connect a PULL socket to a daemon with\n"
        "                          output.type = \"push\" (lossless; --topic\n"
        "                          then filters nothing)\n"
        "  -f, --format csv|jsonl  jsonl: one JSON object per line, on stdout\n"
        "                          for every message received (rejections\n"
        "                          and density estimates too, unless\n"
        "                          --rejections/--density send them\n"
        "                          elsewhere): {\"sanitized\":{...}},\n"
        "                          {\"rejected\":{...}} or {\"density\":{...}},\n"
        "                          fields named as in the wire format\n"
        "  -h, --help              show this help\n"
        "\n"
        "Runs until --count, --timeout, SIGINT or SIGTERM; exit status 0, or\n"
        "1 on a usage or connection error.\n",
        out);
}

static const char *add_topic(void *dest, const char *topic)
{
    topic_list *list = dest;
    if (list->n == MAX_TOPICS)
        return "is given too many times";
    list->topics[list->n++] = topic;
    return NULL;
}

static void skip_message(tail_state *state, const char *why)
{
    if (++state->skipped <= MAX_SKIP_WARNINGS)
        fprintf(stderr, TS_TOOL_NAME ": tail: skipping a message: %s\n", why);
}

/* One JSON line; a message with no JSON form is skipped, not counted. */
static int write_json(tail_state *state, FILE *out, const char *kind,
                      const ProtobufCMessage *message, int counted)
{
    int rc = ts_jsonl_write(out, kind, message, &state->json);
    if (rc == 1) {
        skip_message(state, "it has no JSON form (a non-finite number or "
                            "a string that is not UTF-8)");
        return 0;
    }
    if (rc == 0 && counted)
        state->received++;
    return rc;
}

static int write_location(tail_state *state,
                          const Tracesan__V1__SanitizedLocation *location)
{
    if (state->jsonl)
        return write_json(state, stdout, "sanitized", &location->base, 1);
    ts_report extras;
    memset(&extras, 0, sizeof extras);
    if (ts_codec_get_extras(location, &extras) != 0) {
        skip_message(state, "schema lacks a public extra's field");
        return 0;
    }
    ts_csv_sanitized row = {
        .user = location->user_id != NULL ? location->user_id : "",
        .ts_ms = location->has_timestamp_ms ? location->timestamp_ms : 0,
        .lat = location->lat,
        .lon = location->lon,
        .mechanism = location->mechanism != NULL ? location->mechanism : "",
        .eps_point = location->eps_point,
        .eps_spent = location->eps_spent_window,
        .eps_remaining = location->eps_remaining,
        .profile = location->profile != NULL ? location->profile : "",
        .extras = &extras,
    };
    state->received++;
    return ts_csv_write_sanitized(stdout, &row);
}

static int write_rejection(tail_state *state,
                           const Tracesan__V1__Rejection *rejection)
{
    if (state->jsonl)
        return write_json(state, state->rejections, "rejected",
                          &rejection->base, 1);
    ts_csv_rejected row = {
        .user = rejection->user_id,
        .has_ts = rejection->has_timestamp_ms,
        .ts_ms = rejection->timestamp_ms,
        .reason = ts_tool_reason_name(
            rejection->has_reason ? (int)rejection->reason : 0),
        .profile = rejection->profile,
        .detail = rejection->detail,
    };
    state->received++;
    return ts_csv_write_rejected(state->rejections, &row);
}

static int print_sanitized(tail_state *state, const zmq_msg_t *payload)
{
    Tracesan__V1__SanitizedLocation *location =
        tracesan__v1__sanitized_location__unpack(
            NULL, zmq_msg_size(payload), zmq_msg_data((zmq_msg_t *)payload));
    if (location == NULL) {
        skip_message(state, "payload is not a SanitizedLocation");
        return 0;
    }
    int rc = write_location(state, location);
    tracesan__v1__sanitized_location__free_unpacked(location, NULL);
    return rc;
}

static int print_rejection(tail_state *state, const zmq_msg_t *payload)
{
    Tracesan__V1__Rejection *rejection = tracesan__v1__rejection__unpack(
        NULL, zmq_msg_size(payload), zmq_msg_data((zmq_msg_t *)payload));
    if (rejection == NULL) {
        skip_message(state, "payload is not a Rejection");
        return 0;
    }
    int rc = write_rejection(state, rejection);
    tracesan__v1__rejection__free_unpacked(rejection, NULL);
    return rc;
}

/* output.format = "batch": one OutcomeBatch per input message. */
static int print_batch(tail_state *state, const zmq_msg_t *payload)
{
    Tracesan__V1__OutcomeBatch *batch = tracesan__v1__outcome_batch__unpack(
        &state->arena.allocator, zmq_msg_size(payload),
        zmq_msg_data((zmq_msg_t *)payload));
    if (batch == NULL) {
        ts_codec_arena_reset(&state->arena);
        skip_message(state, "payload is not an OutcomeBatch");
        return 0;
    }
    int rc = 0;
    for (size_t i = 0; i < batch->n_sanitized && rc == 0; i++)
        rc = write_location(state, batch->sanitized[i]);
    for (size_t i = 0; i < batch->n_rejected && rc == 0; i++)
        rc = write_rejection(state, batch->rejected[i]);
    ts_codec_arena_reset(&state->arena);
    return rc;
}

/* One summary row per estimate; the sum of its probabilities lets a
 * script check that what arrived is a distribution. */
static int print_density(tail_state *state, const zmq_msg_t *payload)
{
    Tracesan__V1__DensityEstimate *estimate =
        tracesan__v1__density_estimate__unpack(
            NULL, zmq_msg_size(payload), zmq_msg_data((zmq_msg_t *)payload));
    if (estimate == NULL) {
        skip_message(state, "payload is not a DensityEstimate");
        return 0;
    }
    if (state->jsonl) {
        int rc = write_json(state, state->density, "density",
                            &estimate->base, 0);
        if (rc == 0 && fflush(state->density) != 0)
            rc = -1;
        tracesan__v1__density_estimate__free_unpacked(estimate, NULL);
        return rc;
    }
    double sum = 0.0;
    for (size_t i = 0; i < estimate->n_probability; i++)
        sum += estimate->probability[i];
    int rc = fprintf(state->density,
                     "%s,%s,%" PRIu32 ",%" PRIu32 ",%" PRIu64 ",%" PRIu64
                     ",%" PRIu32 ",%" PRIu32 ",%zu,%.12g,%" PRId64 "\n",
                     estimate->profile != NULL ? estimate->profile : "",
                     estimate->mechanism != NULL ? estimate->mechanism : "",
                     estimate->channel_version, estimate->cycle,
                     estimate->reports, estimate->reports_total,
                     estimate->rows, estimate->cols,
                     estimate->n_probability, sum,
                     estimate->estimated_at_ms) < 0 ||
             fflush(state->density) != 0 ? -1 : 0;
    tracesan__v1__density_estimate__free_unpacked(estimate, NULL);
    return rc;
}

static int topic_is(const zmq_msg_t *topic, const char *name, int prefix)
{
    size_t len = strlen(name);
    size_t size = zmq_msg_size(topic);
    if (size < len || (!prefix && size != len))
        return 0;
    return memcmp(zmq_msg_data((zmq_msg_t *)topic), name, len) == 0;
}

/* Receives one [topic][payload] message without waiting. Returns 1 when
 * one was handled, 0 when none is pending, -1 on an output error. */
static int receive_one(void *socket, tail_state *state, zmq_msg_t *topic,
                       zmq_msg_t *payload)
{
    if (zmq_msg_recv(topic, socket, ZMQ_DONTWAIT) < 0)
        return 0;
    size_t frames = 1;
    int have_payload = 0;
    while (zmq_msg_more(frames == 1 ? topic : payload)) {
        if (zmq_msg_recv(payload, socket, 0) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            break;
        }
        frames++;
        have_payload = 1;
    }
    if (frames != 2 || !have_payload) {
        skip_message(state, "expected two frames [topic][payload]");
        return 1;
    }
    if (topic_is(topic, TS_TOPIC_SANITIZED_PREFIX, 1))
        return print_sanitized(state, payload) == 0 ? 1 : -1;
    if (topic_is(topic, TS_TOPIC_REJECTED, 0))
        return print_rejection(state, payload) == 0 ? 1 : -1;
    if (topic_is(topic, "batch", 0))
        return print_batch(state, payload) == 0 ? 1 : -1;
    /* Density estimates are grids, not rows of the points' CSV: --density
     * summarises them, GET /density/<profile> serves their cells. */
    if (topic_is(topic, TS_TOPIC_DENSITY_PREFIX, 1))
        return state->density == NULL || print_density(state, payload) == 0
                   ? 1 : -1;
    skip_message(state, "unknown topic");
    return 1;
}

static int create_ready_file(const char *path)
{
    FILE *file = fopen(path, "w");
    if (file == NULL)
        return -1;
    return fclose(file) == 0 ? 0 : -1;
}

static int set_int_option(void *socket, int option, int value)
{
    return zmq_setsockopt(socket, option, &value, sizeof value);
}

static int flush_outputs(FILE *rejections)
{
    int rc = 0;
    if (fflush(stdout) != 0)
        rc = -1;
    if (fflush(rejections) != 0)
        rc = -1;
    return rc;
}

int cmd_tail(int argc, char **argv)
{
    /* The MQTT subscriber (tools/mqtt_tools.c). */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--mqtt") == 0 ||
            strncmp(argv[i], "--mqtt=", 7) == 0)
            return cmd_tail_mqtt(argc, argv);
    topic_list subscriptions = { .n = 0 };
    uint64_t count = 0;      /* 0 = unlimited */
    double timeout_s = 0.0;  /* 0 = none */
    const char *rejections_path = NULL;
    const char *ready_path = NULL;
    const char *density_path = NULL;
    int jsonl = 0;
    int pull = 0;
    static const char *const formats[] = { "csv", "jsonl", NULL };
    const ts_tool_option options[] = {
        { "topic", 't', TS_ARG_HANDLER, .dest = &subscriptions,
          .handle = add_topic },
        { "count", 'n', TS_ARG_U64, .dest = &count, .min = 1 },
        { "timeout", 'T', TS_ARG_POSITIVE, .dest = &timeout_s },
        { "rejections", 'r', TS_ARG_STRING, .dest = &rejections_path },
        { "ready-file", 'R', TS_ARG_STRING, .dest = &ready_path },
        { "density", 'D', TS_ARG_STRING, .dest = &density_path },
        { "format", 'f', TS_ARG_CHOICE, .dest = &jsonl, .choices = formats },
        { "pull", 'P', TS_ARG_FLAG, .dest = &pull },
        { 0 },
    };
    const ts_tool_command command = {
        "tail", TS_OPT_CONNECT | TS_OPT_CONFIG | TS_OPT_OVERRIDE | TS_OPT_CURVE,
        options, 0, NULL, usage,
    };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    char err[ERR_MAX];
    char endpoint[ENDPOINT_MAX];
    if (ts_tool_endpoint(&common, 0, endpoint, sizeof endpoint, NULL) != 0)
        return 1;

    int status = 1;
    /* JSON lines say what they carry, so one stream can hold them all. */
    tail_state state = { .jsonl = jsonl,
                         .rejections = jsonl ? stdout : stderr,
                         .density = jsonl ? stdout : NULL };
    ts_codec_arena_init(&state.arena);
    void *context = NULL;
    void *socket = NULL;
    void *monitor = NULL;
    zmq_msg_t topic;
    zmq_msg_t payload;
    zmq_msg_init(&topic);
    zmq_msg_init(&payload);

    if (rejections_path != NULL) {
        state.rejections = fopen(rejections_path, "w");
        if (state.rejections == NULL) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", rejections_path,
                    strerror(errno));
            state.rejections = stderr;
            goto out;
        }
    }
    if (density_path != NULL) {
        state.density = fopen(density_path, "w");
        if (state.density == NULL) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", density_path,
                    strerror(errno));
            goto out;
        }
        if (!jsonl && (fputs(DENSITY_HEADER "\n", state.density) == EOF ||
                       fflush(state.density) != 0))
            goto write_error;
    }
    static char stdout_buffer[STDOUT_BUFFER_BYTES];
    setvbuf(stdout, stdout_buffer, _IOFBF, sizeof stdout_buffer);
    if (!jsonl && (ts_csv_write_sanitized_header(stdout) != 0 ||
                   ts_csv_write_rejected_header(state.rejections) != 0))
        goto write_error;
    if (flush_outputs(state.rejections) != 0)
        goto write_error;

    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    /* No SA_RESTART: zmq_poll must return so the loop sees the request. */
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);

    context = zmq_ctx_new();
    socket = context != NULL ? zmq_socket(context, pull ? ZMQ_PULL : ZMQ_SUB)
                             : NULL;
    if (socket == NULL ||
        set_int_option(socket, ZMQ_RCVHWM, RECEIVE_HWM) != 0 ||
        set_int_option(socket, ZMQ_LINGER, 0) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": cannot set up the socket: %s\n",
                zmq_strerror(zmq_errno()));
        goto out;
    }
    if (subscriptions.n == 0)
        subscriptions.topics[subscriptions.n++] = "";
    for (size_t i = 0; i < subscriptions.n && !pull; i++) {
        if (zmq_setsockopt(socket, ZMQ_SUBSCRIBE, subscriptions.topics[i],
                           strlen(subscriptions.topics[i])) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": cannot subscribe: %s\n",
                    zmq_strerror(zmq_errno()));
            goto out;
        }
    }
    if (common.curve_key != NULL &&
        ts_curve_client_setup(socket, common.curve_server_key, common.curve_key,
                              err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        goto out;
    }
    if (ready_path != NULL) {
        monitor = ts_tool_monitor_open(
            context, socket,
            ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        if (monitor == NULL) {
            fprintf(stderr, TS_TOOL_NAME ": cannot monitor the socket: %s\n",
                    zmq_strerror(zmq_errno()));
            goto out;
        }
    }
    if (zmq_connect(socket, endpoint) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": cannot connect to %s: %s\n", endpoint,
                zmq_strerror(zmq_errno()));
        goto out;
    }

    double last_activity = ts_tool_now();
    double ready_at = -1.0;  /* when to create the ready file */
    int ready_done = ready_path == NULL;
    int done = 0;
    while (!done && !stop_requested) {
        double now = ts_tool_now();
        if (!ready_done && ready_at >= 0.0 && now >= ready_at) {
            if (create_ready_file(ready_path) != 0) {
                fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", ready_path,
                        strerror(errno));
                goto out;
            }
            ready_done = 1;
        }
        if (timeout_s > 0.0 && now - last_activity >= timeout_s)
            break;

        double wait_s = -1.0;
        if (timeout_s > 0.0)
            wait_s = last_activity + timeout_s - now;
        if (!ready_done && ready_at >= 0.0 &&
            (wait_s < 0.0 || ready_at - now < wait_s))
            wait_s = ready_at - now;
        long wait_ms = wait_s < 0.0 ? -1 : (long)(wait_s * 1000.0) + 1;

        zmq_pollitem_t items[2] = {
            { .socket = socket, .events = ZMQ_POLLIN },
            { .socket = monitor, .events = ZMQ_POLLIN },
        };
        int polled = zmq_poll(items, monitor != NULL ? 2 : 1, wait_ms);
        if (polled < 0) {
            if (zmq_errno() == EINTR)
                continue;
            fprintf(stderr, TS_TOOL_NAME ": poll failed: %s\n",
                    zmq_strerror(zmq_errno()));
            goto out;
        }
        if (monitor != NULL && (items[1].revents & ZMQ_POLLIN)) {
            int event;
            while ((event = ts_tool_monitor_read(monitor)) != 0) {
                if (event == 1 && ready_at < 0.0)
                    ready_at = ts_tool_now() + SUBSCRIPTION_GRACE_S;
                if (event < 0)
                    break;
            }
        }
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t before = state.received;
            for (int n = 0; n < DRAIN_BUDGET; n++) {
                int rc = receive_one(socket, &state, &topic, &payload);
                if (rc < 0)
                    goto write_error;
                if (rc == 0)
                    break;
                if (count > 0 && state.received >= count) {
                    done = 1;
                    break;
                }
            }
            if (state.received != before)
                last_activity = ts_tool_now();
            if (flush_outputs(state.rejections) != 0)
                goto write_error;
        }
    }
    if (flush_outputs(state.rejections) != 0)
        goto write_error;
    if (state.skipped > MAX_SKIP_WARNINGS)
        fprintf(stderr, TS_TOOL_NAME ": tail: %" PRIu64
                " undecodable messages skipped\n", state.skipped);
    status = 0;
    goto out;

write_error:
    fprintf(stderr, TS_TOOL_NAME ": cannot write the output\n");
out:
    zmq_msg_close(&topic);
    zmq_msg_close(&payload);
    if (monitor != NULL)
        zmq_close(monitor);
    if (socket != NULL)
        zmq_close(socket);
    if (context != NULL)
        zmq_ctx_term(context);
    if (state.rejections != stderr && state.rejections != stdout &&
        state.rejections != NULL)
        fclose(state.rejections);
    if (state.density != NULL && state.density != stdout &&
        fclose(state.density) != 0 && status == 0) {
        fprintf(stderr, TS_TOOL_NAME ": cannot write the density summary\n");
        status = 1;
    }
    ts_codec_arena_free(&state.arena);
    ts_buf_free(&state.json);
    return status;
}
