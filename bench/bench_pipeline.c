/* bench_pipeline: load generator and latency probe for a running tracesand.
 *
 *   bench_pipeline --gen N [--users U] OUT.csv
 *       Write N synthetic updates (round robin over U users, each user's
 *       timestamps increasing) as a `tracesan replay` CSV.
 *
 *   bench_pipeline --latency --input EP --output EP [--rate R] [--seconds S]
 *                  [--users U]
 *       One process, two threads sharing CLOCK_MONOTONIC: a sender pushes
 *       one-update messages at R per second; a subscriber decodes each
 *       SanitizedLocation and takes its latency from the send time of the
 *       same sequence number, which travels in timestamp_ms. Prints
 *       p50/p90/p99/max and the achieved rate.
 *
 * Prints figures only; there is no pass/fail.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "wire/codec.h"
#include "tracesan/v1/tracesan.pb-c.h"

/* Sequence numbers ride in timestamp_ms on top of this epoch (2023-11-14),
 * which is in the past, so the daemon's future check never fires. */
#define BENCH_EPOCH_MS 1700000000000LL

typedef struct bench {
    const char *input;
    const char *output;
    double rate;
    double seconds;
    long users;
    size_t total;              /* messages to send */
    int64_t *sent_ns;          /* per sequence number; 0 = not sent */
    int64_t *latency_ns;       /* per received message */
    size_t received;
    size_t rejected;
    size_t out_of_range;
    atomic_int sender_done;
    int64_t send_start_ns;
    int64_t send_end_ns;
    void *context;
} bench;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until_ns(int64_t deadline)
{
    /* Absolute sleep, no spinning: on a 2-core machine a spinning sender
     * would steal the CPU the daemon needs. A late wake-up sends the
     * messages that fell due at once, so the offered rate holds. */
    if (deadline <= now_ns())
        return;
    struct timespec until = {(time_t)(deadline / 1000000000LL),
                             (long)(deadline % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
}

static int generate(size_t n, long users, const char *path)
{
    FILE *out = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
    if (out == NULL) {
        fprintf(stderr, "bench_pipeline: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fputs("user,ts,lat,lon\n", out);
    /* A random walk per user would be more realistic but costs nothing
     * different in the pipeline; a deterministic spread keeps it simple. */
    for (size_t i = 0; i < n; i++) {
        long user = (long)(i % (size_t)users);
        size_t step = i / (size_t)users;
        double lat = 40.5 + 0.4 * (double)user / (double)users + 1e-5 * (double)(step % 1000);
        double lon = -74.2 + 0.5 * (double)((user * 7919) % users) / (double)users;
        fprintf(out, "bench-%ld,%zu,%.7f,%.7f\n", user, (size_t)1700000000 + step * 10,
                lat, lon);
    }
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "bench_pipeline: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static void *sender_main(void *arg)
{
    bench *b = arg;
    void *push = zmq_socket(b->context, ZMQ_PUSH);
    int unlimited = 0, linger = 10000;
    zmq_setsockopt(push, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(push, b->input) != 0) {
        fprintf(stderr, "bench_pipeline: connect %s: %s\n", b->input, zmq_strerror(errno));
        atomic_store(&b->sender_done, 1);
        zmq_close(push);
        return NULL;
    }
    ts_buf payload = {0};
    char user[32];
    double interval_ns = 1e9 / b->rate;
    b->send_start_ns = now_ns();
    for (size_t seq = 0; seq < b->total; seq++) {
        sleep_until_ns(b->send_start_ns + (int64_t)((double)seq * interval_ns));
        snprintf(user, sizeof user, "lat-%ld", (long)(seq % (size_t)b->users));
        ts_input in = {
            .user_id = user,
            .ts_ms = BENCH_EPOCH_MS + (int64_t)seq,
            .lat = 40.7 + 1e-6 * (double)(seq % 1000),
            .lon = -74.0,
        };
        ts_buf_reset(&payload);
        if (ts_codec_encode_batch(&in, 1, &payload) != 0)
            break;
        b->sent_ns[seq] = now_ns();
        if (zmq_send(push, payload.data, payload.len, 0) < 0)
            break;
    }
    b->send_end_ns = now_ns();
    ts_buf_free(&payload);
    zmq_close(push);
    atomic_store(&b->sender_done, 1);
    return NULL;
}

static void receive_all(bench *b, void *sub)
{
    int64_t last_progress = now_ns();
    zmq_msg_t topic, payload;
    zmq_msg_init(&topic);
    zmq_msg_init(&payload);
    while (b->received + b->rejected < b->total) {
        zmq_pollitem_t item = {sub, 0, ZMQ_POLLIN, 0};
        int ready = zmq_poll(&item, 1, 200);
        if (ready <= 0) {
            /* Stop 3 s after the sender finished and nothing came. */
            if (atomic_load(&b->sender_done) && now_ns() - last_progress > 3000000000LL)
                break;
            continue;
        }
        if (zmq_msg_recv(&topic, sub, 0) < 0)
            continue;
        if (!zmq_msg_more(&topic) || zmq_msg_recv(&payload, sub, 0) < 0)
            continue;
        int64_t arrived = now_ns();
        last_progress = arrived;
        const char *topic_text = zmq_msg_data(&topic);
        size_t topic_len = zmq_msg_size(&topic);
        if (topic_len >= strlen(TS_TOPIC_SANITIZED_PREFIX) &&
            memcmp(topic_text, TS_TOPIC_SANITIZED_PREFIX,
                   strlen(TS_TOPIC_SANITIZED_PREFIX)) == 0) {
            Tracesan__V1__SanitizedLocation *loc =
                tracesan__v1__sanitized_location__unpack(
                    NULL, zmq_msg_size(&payload), zmq_msg_data(&payload));
            if (loc == NULL)
                continue;
            int64_t seq = loc->timestamp_ms - BENCH_EPOCH_MS;
            if (seq >= 0 && (size_t)seq < b->total && b->sent_ns[seq] != 0)
                b->latency_ns[b->received++] = arrived - b->sent_ns[seq];
            else
                b->out_of_range++;
            tracesan__v1__sanitized_location__free_unpacked(loc, NULL);
        } else {
            b->rejected++;
        }
    }
    zmq_msg_close(&topic);
    zmq_msg_close(&payload);
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double percentile_us(const int64_t *sorted, size_t n, double p)
{
    /* Nearest rank. */
    size_t rank = (size_t)(p * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)sorted[rank - 1] / 1000.0;
}

static int latency(bench *b)
{
    b->total = (size_t)(b->rate * b->seconds);
    if (b->total == 0) {
        fprintf(stderr, "bench_pipeline: nothing to send\n");
        return 1;
    }
    b->sent_ns = calloc(b->total, sizeof *b->sent_ns);
    b->latency_ns = calloc(b->total, sizeof *b->latency_ns);
    b->context = zmq_ctx_new();
    if (b->sent_ns == NULL || b->latency_ns == NULL || b->context == NULL) {
        fprintf(stderr, "bench_pipeline: out of memory\n");
        return 1;
    }
    void *sub = zmq_socket(b->context, ZMQ_SUB);
    int unlimited = 0;
    zmq_setsockopt(sub, ZMQ_RCVHWM, &unlimited, sizeof unlimited);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    if (zmq_connect(sub, b->output) != 0) {
        fprintf(stderr, "bench_pipeline: connect %s: %s\n", b->output, zmq_strerror(errno));
        return 1;
    }
    /* Give the subscription time to reach the PUB before anything is sent. */
    struct timespec settle = {0, 500000000L};
    nanosleep(&settle, NULL);

    pthread_t sender;
    if (pthread_create(&sender, NULL, sender_main, b) != 0) {
        fprintf(stderr, "bench_pipeline: cannot start the sender thread\n");
        return 1;
    }
    receive_all(b, sub);
    pthread_join(sender, NULL);
    zmq_close(sub);
    zmq_ctx_term(b->context);

    double send_s = (double)(b->send_end_ns - b->send_start_ns) / 1e9;
    printf("latency: offered %.0f points/s for %.1f s: sent %zu in %.2f s (%.0f points/s)\n",
           b->rate, b->seconds, b->total, send_s, send_s > 0 ? (double)b->total / send_s : 0.0);
    printf("latency: received %zu sanitized, %zu rejected, %zu lost\n", b->received,
           b->rejected, b->total - b->received - b->rejected - b->out_of_range);
    if (b->received > 0) {
        qsort(b->latency_ns, b->received, sizeof *b->latency_ns, compare_i64);
        printf("latency: p50 %.0f us  p90 %.0f us  p99 %.0f us  max %.0f us\n",
               percentile_us(b->latency_ns, b->received, 0.50),
               percentile_us(b->latency_ns, b->received, 0.90),
               percentile_us(b->latency_ns, b->received, 0.99),
               (double)b->latency_ns[b->received - 1] / 1000.0);
    }
    free(b->sent_ns);
    free(b->latency_ns);
    return b->received > 0 ? 0 : 1;
}

static void usage(FILE *out)
{
    fputs("usage: bench_pipeline --gen N [--users U] OUT.csv\n"
          "       bench_pipeline --latency --input EP --output EP [--rate R]\n"
          "                      [--seconds S] [--users U]\n",
          out);
}

int main(int argc, char **argv)
{
    enum { OPT_GEN = 256, OPT_USERS, OPT_LATENCY, OPT_INPUT, OPT_OUTPUT,
           OPT_RATE, OPT_SECONDS, OPT_HELP };
    static const struct option longopts[] = {
        {"gen", required_argument, NULL, OPT_GEN},
        {"users", required_argument, NULL, OPT_USERS},
        {"latency", no_argument, NULL, OPT_LATENCY},
        {"input", required_argument, NULL, OPT_INPUT},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"rate", required_argument, NULL, OPT_RATE},
        {"seconds", required_argument, NULL, OPT_SECONDS},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    bench b = {.rate = 50000, .seconds = 5, .users = 1000};
    long long gen = -1;
    int want_latency = 0, c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_GEN: gen = atoll(optarg); break;
        case OPT_USERS: b.users = atol(optarg); break;
        case OPT_LATENCY: want_latency = 1; break;
        case OPT_INPUT: b.input = optarg; break;
        case OPT_OUTPUT: b.output = optarg; break;
        case OPT_RATE: b.rate = atof(optarg); break;
        case OPT_SECONDS: b.seconds = atof(optarg); break;
        case 'h': case OPT_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (b.users < 1 || !(b.rate > 0) || !(b.seconds > 0)) {
        usage(stderr);
        return 2;
    }
    if (gen >= 0 && !want_latency && optind + 1 == argc)
        return generate((size_t)gen, b.users, argv[optind]);
    if (want_latency && gen < 0 && optind == argc && b.input && b.output)
        return latency(&b);
    usage(stderr);
    return 2;
}
