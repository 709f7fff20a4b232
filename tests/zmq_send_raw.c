/* zmq_send_raw: put hand-made messages on the daemon's input socket.
 *
 * The integration tests need inputs that `tracesan replay` would never
 * produce (garbage bytes, wrong frame counts, empty or huge batches) and a
 * burst of many small messages that lands while the daemon is stopped, so it
 * must drain them from very few ZMQ_FD edge notifications.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "wire/codec.h"

typedef enum payload_kind {
    KIND_NONE,
    KIND_HEX,
    KIND_SIZE,
    KIND_FRAMES,
    KIND_EMPTY_BATCH,
    KIND_BATCH_OF,
    KIND_EMPTY_UPDATES,
    KIND_BURST
} payload_kind;

typedef struct options {
    const char *endpoint;
    int use_pub;
    const char *topic;       /* NULL: single-frame messages */
    payload_kind kind;
    const char *hex;
    long long count;         /* --size N, --frames K, --batch-of N, --burst N */
    long long users;         /* --burst: distinct users, round robin */
    const char *user_prefix;
    long long ts_start_ms;
    long long wait_ms;       /* before sending; PUB needs it for subscriptions */
    int linger_ms;
    long long repeat;        /* single-message kinds: send it this often */
} options;

static void usage(FILE *out)
{
    fputs(
        "usage: zmq_send_raw --connect ENDPOINT [--socket push|pub] [--topic T]\n"
        "                    [--wait-ms MS] [--linger-ms MS] PAYLOAD\n"
        "PAYLOAD is one of:\n"
        "  --hex HEX          one message with these raw bytes\n"
        "  --size N           one message of N garbage bytes (0xff)\n"
        "  --frames K         one K-frame message (last frame a valid batch)\n"
        "  --empty-batch      one LocationBatch with no updates\n"
        "  --batch-of N       one LocationBatch with N valid updates\n"
        "  --empty-updates N  one LocationBatch of N empty updates (0a 00 x N)\n"
        "  --burst N          N messages, each a batch of one valid update\n"
        "                     [--users U] [--user-prefix P] [--ts-start MS]\n"
        "--repeat R sends a single-message PAYLOAD R times (default 1)\n",
        out);
}

static int parse_ll(const char *text, long long min, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min)
        return -1;
    *out = value;
    return 0;
}

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int decode_hex(const char *hex, ts_buf *out)
{
    size_t len = strlen(hex);
    if (len % 2 != 0)
        return -1;
    for (size_t i = 0; i < len; i += 2) {
        int hi = hex_nibble(hex[i]);
        int lo = hex_nibble(hex[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        uint8_t byte = (uint8_t)(hi << 4 | lo);
        if (ts_buf_append(out, &byte, 1) != 0)
            return -1;
    }
    return 0;
}

/* A valid update: a point in Manhattan moving a little with each index, one
 * second apart per user, so the daemon accepts every one of them. */
static void make_update(const options *opt, long long index, char *user,
                        size_t user_len, ts_input *in)
{
    long long users = opt->users > 0 ? opt->users : 1;
    long long user_index = index % users;
    long long step = index / users;
    snprintf(user, user_len, "%s%lld", opt->user_prefix, user_index);
    memset(in, 0, sizeof *in);
    in->user_id = user;
    in->ts_ms = opt->ts_start_ms + step * 1000;
    in->lat = 40.70 + 0.0001 * (double)(index % 1000);
    in->lon = -74.00 + 0.0001 * (double)(user_index % 1000);
    in->profile = NULL;
}

static int encode_batch(const options *opt, long long first, long long n,
                        ts_buf *payload)
{
    ts_input *inputs = calloc(n > 0 ? (size_t)n : 1, sizeof *inputs);
    char(*users)[64] = calloc(n > 0 ? (size_t)n : 1, sizeof *users);
    int rc = -1;
    if (inputs != NULL && users != NULL) {
        for (long long i = 0; i < n; i++)
            make_update(opt, first + i, users[i], sizeof users[i], &inputs[i]);
        rc = ts_codec_encode_batch(inputs, (size_t)n, payload);
    }
    free(inputs);
    free(users);
    return rc;
}

static int send_frame(void *socket, const void *data, size_t len, int more)
{
    for (;;) {
        if (zmq_send(socket, data, len, more ? ZMQ_SNDMORE : 0) >= 0)
            return 0;
        if (errno != EINTR) {
            fprintf(stderr, "zmq_send_raw: send: %s\n", zmq_strerror(errno));
            return -1;
        }
    }
}

/* One message: optional topic frame, then the payload. */
static int send_message(void *socket, const options *opt, const ts_buf *payload)
{
    if (opt->topic != NULL &&
        send_frame(socket, opt->topic, strlen(opt->topic), 1) != 0)
        return -1;
    return send_frame(socket, payload->data, payload->len, 0);
}

static int send_payloads(void *socket, const options *opt)
{
    if (opt->kind == KIND_EMPTY_UPDATES) {
        static const uint8_t empty_update[2] = { 0x0a, 0x00 };
        ts_buf payload = {0};
        int rc = 0;
        for (long long i = 0; i < opt->count && rc == 0; i++)
            rc = ts_buf_append(&payload, empty_update, sizeof empty_update);
        for (long long r = 0; r < opt->repeat && rc == 0; r++)
            rc = send_message(socket, opt, &payload);
        ts_buf_free(&payload);
        return rc;
    }
    ts_buf payload = {0};
    int rc = -1;
    switch (opt->kind) {
    case KIND_HEX:
        if (decode_hex(opt->hex, &payload) != 0) {
            fprintf(stderr, "zmq_send_raw: --hex: not an even-length hex string\n");
            break;
        }
        rc = 0;
        for (long long r = 0; r < opt->repeat && rc == 0; r++)
            rc = send_message(socket, opt, &payload);
        break;
    case KIND_SIZE:
        if (ts_buf_reserve(&payload, (size_t)opt->count) != 0)
            break;
        memset(payload.data, 0xff, (size_t)opt->count);
        payload.len = (size_t)opt->count;
        rc = send_message(socket, opt, &payload);
        break;
    case KIND_FRAMES:
        if (encode_batch(opt, 0, 1, &payload) != 0)
            break;
        rc = 0;
        for (long long i = 0; i + 1 < opt->count && rc == 0; i++)
            rc = send_frame(socket, "frame", 5, 1);
        if (rc == 0)
            rc = send_frame(socket, payload.data, payload.len, 0);
        break;
    case KIND_EMPTY_BATCH:
        if (encode_batch(opt, 0, 0, &payload) != 0)
            break;
        rc = send_message(socket, opt, &payload);
        break;
    case KIND_BATCH_OF:
        if (encode_batch(opt, 0, opt->count, &payload) != 0)
            break;
        rc = send_message(socket, opt, &payload);
        break;
    case KIND_BURST:
        rc = 0;
        for (long long i = 0; i < opt->count && rc == 0; i++) {
            ts_buf_reset(&payload);
            rc = encode_batch(opt, i, 1, &payload);
            if (rc == 0)
                rc = send_message(socket, opt, &payload);
        }
        break;
    case KIND_EMPTY_UPDATES: /* handled above */
    case KIND_NONE:
        break;
    }
    ts_buf_free(&payload);
    return rc;
}

static int parse_options(int argc, char **argv, options *opt)
{
    enum {
        OPT_CONNECT = 256, OPT_SOCKET, OPT_TOPIC, OPT_HEX, OPT_SIZE,
        OPT_FRAMES, OPT_EMPTY, OPT_BATCH_OF, OPT_BURST, OPT_USERS,
        OPT_USER_PREFIX, OPT_TS_START, OPT_WAIT, OPT_LINGER, OPT_HELP,
        OPT_EMPTY_UPDATES, OPT_REPEAT
    };
    static const struct option longopts[] = {
        {"connect", required_argument, NULL, OPT_CONNECT},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"topic", required_argument, NULL, OPT_TOPIC},
        {"hex", required_argument, NULL, OPT_HEX},
        {"size", required_argument, NULL, OPT_SIZE},
        {"frames", required_argument, NULL, OPT_FRAMES},
        {"empty-batch", no_argument, NULL, OPT_EMPTY},
        {"batch-of", required_argument, NULL, OPT_BATCH_OF},
        {"burst", required_argument, NULL, OPT_BURST},
        {"empty-updates", required_argument, NULL, OPT_EMPTY_UPDATES},
        {"repeat", required_argument, NULL, OPT_REPEAT},
        {"users", required_argument, NULL, OPT_USERS},
        {"user-prefix", required_argument, NULL, OPT_USER_PREFIX},
        {"ts-start", required_argument, NULL, OPT_TS_START},
        {"wait-ms", required_argument, NULL, OPT_WAIT},
        {"linger-ms", required_argument, NULL, OPT_LINGER},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int c;
    int kinds = 0;
    long long value;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_CONNECT: opt->endpoint = optarg; break;
        case OPT_SOCKET:
            if (strcmp(optarg, "push") == 0)
                opt->use_pub = 0;
            else if (strcmp(optarg, "pub") == 0)
                opt->use_pub = 1;
            else
                return -1;
            break;
        case OPT_TOPIC: opt->topic = optarg; break;
        case OPT_HEX: opt->kind = KIND_HEX; opt->hex = optarg; kinds++; break;
        case OPT_SIZE: case OPT_FRAMES: case OPT_BATCH_OF: case OPT_BURST:
            if (parse_ll(optarg, c == OPT_FRAMES ? 1 : 0, &opt->count) != 0)
                return -1;
            opt->kind = c == OPT_SIZE ? KIND_SIZE
                      : c == OPT_FRAMES ? KIND_FRAMES
                      : c == OPT_BATCH_OF ? KIND_BATCH_OF : KIND_BURST;
            kinds++;
            break;
        case OPT_EMPTY: opt->kind = KIND_EMPTY_BATCH; kinds++; break;
        case OPT_EMPTY_UPDATES:
            if (parse_ll(optarg, 0, &opt->count) != 0)
                return -1;
            opt->kind = KIND_EMPTY_UPDATES;
            kinds++;
            break;
        case OPT_REPEAT:
            if (parse_ll(optarg, 1, &opt->repeat) != 0)
                return -1;
            break;
        case OPT_USERS:
            if (parse_ll(optarg, 1, &opt->users) != 0)
                return -1;
            break;
        case OPT_USER_PREFIX: opt->user_prefix = optarg; break;
        case OPT_TS_START:
            if (parse_ll(optarg, 1, &opt->ts_start_ms) != 0)
                return -1;
            break;
        case OPT_WAIT:
            if (parse_ll(optarg, 0, &opt->wait_ms) != 0)
                return -1;
            break;
        case OPT_LINGER:
            if (parse_ll(optarg, 0, &value) != 0 || value > 3600000)
                return -1;
            opt->linger_ms = (int)value;
            break;
        case 'h': case OPT_HELP: usage(stdout); exit(0);
        default: return -1;
        }
    }
    if (optind != argc || opt->endpoint == NULL || kinds != 1)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    options opt = {
        .users = 1,
        .user_prefix = "raw-",
        .ts_start_ms = 1700000000000LL,
        .wait_ms = -1,
        .linger_ms = 30000,
        .repeat = 1,
    };
    if (parse_options(argc, argv, &opt) != 0) {
        usage(stderr);
        return 2;
    }
    if (opt.wait_ms < 0)
        opt.wait_ms = opt.use_pub ? 500 : 0;

    void *context = zmq_ctx_new();
    void *socket = context ? zmq_socket(context, opt.use_pub ? ZMQ_PUB : ZMQ_PUSH)
                           : NULL;
    if (socket == NULL) {
        fprintf(stderr, "zmq_send_raw: socket: %s\n", zmq_strerror(errno));
        return 1;
    }
    /* No send limit: a burst must sit queued in full while the daemon is
     * stopped, and a bounded linger flushes it without hanging forever. */
    int unlimited = 0;
    zmq_setsockopt(socket, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    zmq_setsockopt(socket, ZMQ_LINGER, &opt.linger_ms, sizeof opt.linger_ms);
    if (zmq_connect(socket, opt.endpoint) != 0) {
        fprintf(stderr, "zmq_send_raw: connect %s: %s\n", opt.endpoint,
                zmq_strerror(errno));
        zmq_close(socket);
        zmq_ctx_term(context);
        return 1;
    }
    if (opt.wait_ms > 0) {
        struct timespec pause = {opt.wait_ms / 1000, (opt.wait_ms % 1000) * 1000000L};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
        }
    }
    int rc = send_payloads(socket, &opt);
    zmq_close(socket);
    zmq_ctx_term(context);
    return rc == 0 ? 0 : 1;
}
