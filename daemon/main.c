/* tracesand: the streaming sanitizer.
 *
 * One thread, one libevent loop. Each readiness callback of the transport
 * hands over a bounded group of input messages; every update in them goes
 * through the pipeline and its outcome is encoded into the outbox. When the
 * group ends, the batch is committed (a no-op until durable state exists)
 * and only then published, so nothing is ever published that the state
 * would not also remember.
 */
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include <gsl/gsl_errno.h>

#include "daemon/codec.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/curve_keys.h"
#include "daemon/metrics.h"
#include "daemon/ops_http.h"
#include "daemon/pipeline.h"
#include "daemon/pipeline_reload.h"
#include "daemon/store.h"
#include "daemon/transport.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif
#ifndef TS_SYSCONFDIR
#define TS_SYSCONFDIR "/etc"
#endif

#define PROGRAM_NAME "tracesand"
#define DEFAULT_CONFIG_PATH TS_SYSCONFDIR "/tracesand.conf"
#define ERR_MAX 512
#define MAX_OVERRIDES 256

/* Rejection log lines per second; the rest are counted and reported. */
#define REJECTION_LOG_PER_SECOND 10
/* Users visited per expiry tick: bounded so a huge table never stalls the
 * loop; the pipeline resumes where the previous tick stopped. */
#define EXPIRE_SCAN_PER_TICK 10000
/* Outcomes held before a mid-callback flush. A read budget of full batches
 * could otherwise hold millions of encoded outcomes at once. */
#define OUTBOX_FLUSH_ENTRIES 65536
/* Longest user id echoed into a log line. */
#define LOG_USER_MAX 64
/* A failed commit is retried with exponential backoff: quick enough to
 * recover soon after an operator frees space, slow enough not to hammer a
 * broken disk or flood the log. */
#define COMMIT_RETRY_FIRST_MS 1000
#define COMMIT_RETRY_MAX_MS 30000

typedef struct outbox_entry {
    size_t topic_offset;
    size_t topic_len;
    size_t payload_offset;
    size_t payload_len;
} outbox_entry;

/* Encoded outcomes waiting for the end of the batch. Topics and payloads are
 * appended to two buffers reused across batches, so steady state allocates
 * nothing per message. */
typedef struct outbox {
    ts_buf topics;
    ts_buf payloads;
    outbox_entry *entries;
    size_t count;
    size_t capacity;
    /* Entries before `sent` are published: a full PUSH output stopped the
     * rest, which wait (committed, in order) for it to take more. */
    size_t sent;
} outbox;

typedef struct daemon_state {
    const ts_settings *settings;
    ts_pipeline *pipeline;
    const ts_transport_ops *transport_ops;
    ts_transport *transport;
    struct event_base *base;
    outbox outbox;
    ts_log_limiter log_limiter;  /* rejection lines */
    uint64_t encode_failures;
    uint64_t publish_failures;
    uint64_t clock_rejections;
    /* Wire lengths of one batch's updates (input.max_batch_updates). */
    ts_wire_update *wire;
    ts_store *store;             /* NULL: state.dir unset, memory only */
    ts_store_backend store_backend;
    int store_failed;            /* a commit failed: unhealthy, input
                                    paused, the outbox held until a retry
                                    commits it */
    struct event *commit_retry_event;
    long commit_retry_ms;        /* delay before the next retry */
    uint64_t commit_failures;    /* failed attempts, first and retries */
    uint64_t store_pauses;       /* times input paused for the store */
    uint64_t dropped_uncommitted; /* held outcomes dropped at shutdown */
    uint64_t dropped_unsent;     /* committed outcomes a full output still
                                    held at shutdown */
    /* operations: metrics, HTTP, reload, systemd */
    ts_metrics *metrics;
    ts_ops_http *http;
    uint64_t messages_in;
    uint64_t messages_published;
    uint64_t messages_at_last_tick;  /* input quiet since: trim the heap */
    uint64_t messages_at_last_trim;
    const char *config_path;     /* re-read on SIGHUP */
    const char *const *overrides;
    size_t n_overrides;
    struct event *ops_tick_event;
    struct timespec ops_tick_due;
    unsigned ops_ticks;
    struct event *watchdog_event;
} daemon_state;

typedef struct options {
    const char *config_path;
    const char *overrides[MAX_OVERRIDES];
    size_t n_overrides;
    int check_config;
} options;

static void usage(FILE *out)
{
    fprintf(out,
        "usage: " PROGRAM_NAME " [-c FILE] [-o path=value]...\n"
        "       " PROGRAM_NAME " --check-config FILE [-o path=value]...\n"
        "\n"
        "Streaming location-trace sanitizer. Reads LocationBatch messages\n"
        "(protobuf, tracesan.v1) from a ZeroMQ PULL or SUB socket, applies the\n"
        "configured privacy mechanism per user and publishes SanitizedLocation\n"
        "or Rejection messages on a ZeroMQ PUB socket, topics\n"
        "\"sanitized.<profile>\" and \"rejected\". Runs in the foreground.\n"
        "\n"
        "options:\n"
        "  -c, --config FILE     configuration file (libconfig syntax; default\n"
        "                        " DEFAULT_CONFIG_PATH " when it exists,\n"
        "                        built-in defaults otherwise)\n"
        "  -o path=value         override one setting, libconfig path syntax,\n"
        "                        e.g. -o input.endpoint=tcp://127.0.0.1:7001\n"
        "                        or -o profiles.geoind.radius_m=200; repeatable\n"
        "      --check-config    validate the configuration (and overrides),\n"
        "                        print \"FILE: configuration OK\" and exit 0, or\n"
        "                        print \"FILE:LINE: message\" and exit 1\n"
        "  -h, --help            show this help and exit\n"
        "  -V, --version         show the version and exit\n"
        "\n"
        "Once both sockets are up the daemon logs\n"
        "  ready input=<endpoint> output=<endpoint> [http=<host:port>]\n"
        "with the actual endpoints (tcp://host:* ports resolved); http= names\n"
        "the /metrics and /healthz endpoint (http.listen) when it is on.\n"
        "\n"
        "signals:\n"
        "  SIGINT, SIGTERM  finish and publish the current batch, log a summary\n"
        "                   (summary updates=N sanitized=N repeated=N rejected=N\n"
        "                   users=N rejected.<reason>=N...) and exit 0\n"
        "  SIGHUP           reload the configuration file: log level and\n"
        "                   profile parameters and CURVE client\n"
        "                   allow-lists apply, users keep their spend and\n"
        "                   peers their connections; an invalid file is\n"
        "                   logged and ignored\n"
        "  SIGPIPE          ignored\n"
        "\n"
        "Logs go to stderr as \"" PROGRAM_NAME ": <level>: <message>\" (or to\n"
        "syslog with log.syslog = true). Coordinates are never logged.\n"
        "Exit status: 0 on a clean shutdown, 1 on a usage, configuration or\n"
        "startup error.\n");
}

/* ------------------------------------------------------------- logging */

/* The ready and summary lines are the daemon's interface to scripts, so they
 * are written at info level even when log.level hides info messages. */
static void log_always(const ts_settings *settings, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void log_always(const ts_settings *settings, const char *fmt, ...)
{
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (ts_log_get_level() >= TS_LOG_INFO) {
        ts_log(TS_LOG_INFO, "%s", message);
    } else if (settings != NULL && settings->log_syslog) {
        syslog(LOG_NOTICE, "%s", message);
    } else {
        fprintf(stderr, PROGRAM_NAME ": info: %s\n", message);
    }
}

/* User ids reach the log only as printable ASCII and bounded in length:
 * they come from the network. */
static const char *loggable_user(const char *user_id, char *out, size_t size)
{
    if (user_id == NULL || user_id[0] == '\0')
        return "-";
    size_t n = 0;
    for (; user_id[n] != '\0' && n + 1 < size && n < LOG_USER_MAX; n++) {
        unsigned char c = (unsigned char)user_id[n];
        out[n] = (c >= 0x21 && c < 0x7f) ? (char)c : '?';
    }
    out[n] = '\0';
    if (user_id[n] != '\0' && n >= 3) {
        out[n - 3] = '.';
        out[n - 2] = '.';
        out[n - 1] = '.';
    }
    return out;
}

static void log_rejection(daemon_state *daemon, const char *user_id,
                          ts_reason reason, const char *detail)
{
    if (ts_log_get_level() < TS_LOG_WARN)
        return;
    unsigned long long suppressed;
    if (!ts_log_limit(&daemon->log_limiter, &suppressed))
        return;
    if (suppressed > 0)
        ts_log(TS_LOG_WARN, "%llu more rejections not logged (limit %d/s)",
               suppressed, REJECTION_LOG_PER_SECOND);
    char user[LOG_USER_MAX + 1];
    ts_log(TS_LOG_WARN, "rejected user=%s reason=%s: %s",
           loggable_user(user_id, user, sizeof user), ts_reason_name(reason),
           detail != NULL && detail[0] != '\0' ? detail : "-");
}

/* -------------------------------------------------------------- outbox */

static int outbox_push(outbox *box, size_t topic_mark, size_t payload_mark)
{
    if (box->count == box->capacity) {
        size_t capacity = box->capacity != 0 ? box->capacity * 2 : 1024;
        outbox_entry *entries =
            realloc(box->entries, capacity * sizeof *entries);
        if (entries == NULL)
            return -1;
        box->entries = entries;
        box->capacity = capacity;
    }
    box->entries[box->count++] = (outbox_entry){
        .topic_offset = topic_mark,
        .topic_len = box->topics.len - topic_mark,
        .payload_offset = payload_mark,
        .payload_len = box->payloads.len - payload_mark,
    };
    return 0;
}

static void outbox_clear(outbox *box)
{
    ts_buf_reset(&box->topics);
    ts_buf_reset(&box->payloads);
    box->count = 0;
    box->sent = 0;
}

static void outbox_free(outbox *box)
{
    ts_buf_free(&box->topics);
    ts_buf_free(&box->payloads);
    free(box->entries);
    box->entries = NULL;
    box->count = box->capacity = 0;
}

/* Encoding can only fail on allocation; the outcome is then lost, which is
 * the fail-closed direction, and counted. */
static void queue_outcome(daemon_state *daemon, const ts_outcome *outcome)
{
    outbox *box = &daemon->outbox;
    size_t topic_mark = box->topics.len;
    size_t payload_mark = box->payloads.len;
    if (ts_codec_encode_outcome(outcome, &box->topics, &box->payloads) != 0 ||
        outbox_push(box, topic_mark, payload_mark) != 0) {
        box->topics.len = topic_mark;
        box->payloads.len = payload_mark;
        daemon->encode_failures++;
    }
}

static void queue_message_rejection(daemon_state *daemon, ts_reason reason,
                                    const char *detail)
{
    ts_pipeline_count_rejection(daemon->pipeline, reason);
    log_rejection(daemon, NULL, reason, detail);
    outbox *box = &daemon->outbox;
    size_t topic_mark = box->topics.len;
    size_t payload_mark = box->payloads.len;
    if (ts_codec_encode_rejection(reason, NULL, 0, NULL, detail, &box->topics,
                                  &box->payloads) != 0 ||
        outbox_push(box, topic_mark, payload_mark) != 0) {
        box->topics.len = topic_mark;
        box->payloads.len = payload_mark;
        daemon->encode_failures++;
    }
}

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) +
           (double)(now.tv_nsec - start->tv_nsec) * 1e-9;
}

/* Group commit: every user whose ledger changed in this batch is written in
 * one transaction, committed (durable per state.sync), and only then is the
 * batch published. 0 on success; -1 with `err` filled, the transaction
 * aborted and the users still dirty, so the same group can be retried. */
static int commit_batch(daemon_state *daemon, char *err, size_t errlen)
{
    if (daemon->store == NULL)
        return 0;
    if (ts_pipeline_dirty_count(daemon->pipeline) == 0)
        return 0;
    struct timespec commit_started;
    clock_gettime(CLOCK_MONOTONIC, &commit_started);
    if (ts_store_begin(daemon->store, err, errlen) != 0)
        return -1;
    if (ts_pipeline_save_dirty(daemon->pipeline) != 0) {
        snprintf(err, errlen, "%s", daemon->store_backend.err);
        ts_store_abort(daemon->store);
        return -1;
    }
    if (ts_store_commit(daemon->store, err, errlen) != 0)
        return -1;
    ts_pipeline_mark_clean(daemon->pipeline);
    ts_metrics_observe_commit(daemon->metrics, seconds_since(&commit_started),
                              daemon->outbox.count);
    return 0;
}

/* Publishes the committed outbox from where it stopped. Returns 1 when the
 * output blocked (a lossless output is full): the rest stays, in order,
 * for on_output_ready, and the transport has paused input. */
static int publish_outbox(daemon_state *daemon)
{
    outbox *box = &daemon->outbox;
    for (; box->sent < box->count; box->sent++) {
        const outbox_entry *entry = &box->entries[box->sent];
        ts_publish_result result = daemon->transport_ops->publish(
            daemon->transport, box->topics.data + entry->topic_offset,
            entry->topic_len, box->payloads.data + entry->payload_offset,
            entry->payload_len);
        if (result == TS_PUBLISH_BLOCKED)
            return 1;
        if (result == TS_PUBLISH_SENT)
            daemon->messages_published++;
        else
            daemon->publish_failures++;
    }
    outbox_clear(box);
    return 0;
}

/* The transport's on_output_ready: the output takes messages again. */
static int on_output_ready(void *arg)
{
    daemon_state *daemon = arg;
    /* A group held by a failed commit leaves only through the retry. */
    if (daemon->store_failed || daemon->outbox.sent == 0)
        return 0;
    return publish_outbox(daemon);
}

static void arm_commit_retry(daemon_state *daemon)
{
    struct timeval delay = {
        .tv_sec = (time_t)(daemon->commit_retry_ms / 1000),
        .tv_usec = (suseconds_t)(daemon->commit_retry_ms % 1000) * 1000,
    };
    if (daemon->commit_retry_event == NULL ||
        event_add(daemon->commit_retry_event, &delay) != 0) {
        /* Without a retry the daemon would stay paused for good; leaving
         * the loop ends in the shutdown path's last attempt. */
        ts_log(TS_LOG_ERROR, "cannot schedule the commit retry; stopping");
        event_base_loopbreak(daemon->base);
    }
}

/* The failed group stays in the outbox, unpublished, and its users stay
 * dirty with their in-memory ledgers debited (conservative). Input stops so
 * that nothing new is debited or queued while nothing can be committed. */
static void hold_after_commit_failure(daemon_state *daemon, const char *err)
{
    daemon->commit_failures++;
    daemon->store_pauses++;
    daemon->store_failed = 1;
    daemon->commit_retry_ms = COMMIT_RETRY_FIRST_MS;
    char reason[ERR_MAX + 64];
    snprintf(reason, sizeof reason,
             "state store commit failed (%s); input paused", err);
    ts_metrics_set_unhealthy(reason);
    ts_log(TS_LOG_ERROR, "%s; the batch is not published (%zu outcomes "
           "held), input paused: daemon unhealthy, retrying in %ld ms",
           err, daemon->outbox.count, daemon->commit_retry_ms);
    daemon->transport_ops->pause_input(daemon->transport);
    arm_commit_retry(daemon);
}

/* 0 when the held group is now committed and published. */
static int retry_held_commit(daemon_state *daemon)
{
    char err[ERR_MAX];
    if (commit_batch(daemon, err, sizeof err) != 0) {
        daemon->commit_failures++;
        ts_log(TS_LOG_WARN, "commit retry failed: %s; %zu outcomes still "
               "held", err, daemon->outbox.count);
        return -1;
    }
    daemon->store_failed = 0;
    publish_outbox(daemon);
    ts_metrics_set_healthy();
    ts_log(TS_LOG_INFO, "commit retry succeeded: held batch published, "
           "input resumed, daemon healthy");
    return 0;
}

static void on_commit_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    daemon_state *daemon = arg;
    if (!daemon->store_failed)
        return;
    if (retry_held_commit(daemon) == 0) {
        daemon->transport_ops->resume_input(daemon->transport);
        return;
    }
    daemon->commit_retry_ms *= 2;
    if (daemon->commit_retry_ms > COMMIT_RETRY_MAX_MS)
        daemon->commit_retry_ms = COMMIT_RETRY_MAX_MS;
    arm_commit_retry(daemon);
}

static void flush_outbox(daemon_state *daemon)
{
    if (daemon->outbox.count == 0 || daemon->store_failed)
        return; /* a held group leaves only through on_commit_retry */
    char err[ERR_MAX];
    if (commit_batch(daemon, err, sizeof err) != 0) {
        hold_after_commit_failure(daemon, err);
        return;
    }
    publish_outbox(daemon);
}

/* ---------------------------------------------------- message handling */

static int64_t wall_clock_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Profiles live in one array inside the pipeline, so an outcome's profile
 * pointer gives its index without a name lookup on the hot path. */
static void observe_update_latency(daemon_state *daemon,
                                   const ts_outcome *outcome,
                                   const struct timespec *started)
{
    if (daemon->metrics == NULL || outcome->profile == NULL)
        return;
    const ts_profile *first = ts_pipeline_profile_at(daemon->pipeline, 0);
    size_t count = ts_pipeline_profile_count(daemon->pipeline);
    if (first == NULL || outcome->profile < first ||
        outcome->profile >= first + count)
        return;
    ts_metrics_observe_profile(daemon->metrics,
                               (size_t)(outcome->profile - first),
                               seconds_since(started));
}

/* The wall-clock bounds on event time, from one reading of the clock per
 * message; 0 leaves a side unbounded. */
typedef struct time_bounds {
    int64_t earliest_ms;
    int64_t latest_ms;
} time_bounds;

static void reject_by_clock(daemon_state *daemon, const ts_input *input,
                            ts_reason reason, ts_outcome *outcome,
                            const char *what, int64_t seconds)
{
    memset(outcome, 0, sizeof *outcome);
    outcome->sanitized = 0;
    outcome->user_id = input->user_id != NULL ? input->user_id : "";
    outcome->ts_ms = input->ts_ms;
    outcome->reason = reason;
    snprintf(outcome->detail, sizeof outcome->detail,
             "timestamp more than %" PRId64 " s %s", seconds, what);
    ts_pipeline_count_rejection(daemon->pipeline, reason);
    daemon->clock_rejections++;
}

static void process_update(daemon_state *daemon,
                           const Tracesan__V1__LocationUpdate *update,
                           const ts_wire_update *wire,
                           const time_bounds *bounds, ts_outcome *outcome)
{
    ts_input input;
    ts_codec_input_from_update(update, &input);
    ts_codec_input_wire(wire, &input);
    /* Event time drives budget windows and expiry. A far-future timestamp
     * would let one update age every other user's state; a far-past one
     * would open a fresh budget window per update (item 6 of issue 10:
     * updates dated a day apart from 1970 on each got a new window). */
    if (bounds->latest_ms > 0 && input.ts_ms > bounds->latest_ms) {
        reject_by_clock(daemon, &input, TS_REASON_INVALID_TIMESTAMP, outcome,
                        "in the future",
                        daemon->settings->max_future_ms / 1000);
    } else if (bounds->earliest_ms > 0 && input.ts_ms > 0 &&
               input.ts_ms < bounds->earliest_ms) {
        reject_by_clock(daemon, &input, TS_REASON_TOO_OLD, outcome,
                        "before the daemon's clock",
                        daemon->settings->max_backdate_ms / 1000);
    } else {
        struct timespec started;
        clock_gettime(CLOCK_MONOTONIC, &started);
        ts_pipeline_process(daemon->pipeline, &input, outcome);
        observe_update_latency(daemon, outcome, &started);
    }
    if (!outcome->sanitized)
        log_rejection(daemon, outcome->user_id, outcome->reason,
                      outcome->detail);
    queue_outcome(daemon, outcome);
}

static void on_message(void *arg, const ts_inbound *message)
{
    daemon_state *daemon = arg;
    const ts_settings *settings = daemon->settings;
    char detail[160];

    daemon->messages_in++;
    if (message->frames != 1 && message->frames != 2) {
        snprintf(detail, sizeof detail,
                 "message has %zu frames, expected 1 or 2", message->frames);
        queue_message_rejection(daemon, TS_REASON_MALFORMED, detail);
        return;
    }
    if (message->len > settings->max_message_bytes) {
        snprintf(detail, sizeof detail, "message of %zu bytes exceeds %zu",
                 message->len, settings->max_message_bytes);
        queue_message_rejection(daemon, TS_REASON_OVERSIZED, detail);
        return;
    }
    /* Count the updates in the wire bytes first: unpacking allocates per
     * update, and 1 MiB of empty updates took 0.4 s to decode before the
     * count could be refused (issue 10, item 8). */
    size_t n_updates = 0;
    if (ts_codec_scan_batch(message->payload, message->len, &n_updates,
                            daemon->wire, settings->max_batch_updates) < 0) {
        queue_message_rejection(daemon, TS_REASON_MALFORMED,
                                "payload is not a LocationBatch");
        return;
    }
    if (n_updates == 0) {
        queue_message_rejection(daemon, TS_REASON_EMPTY_BATCH,
                                "batch has no updates");
        return;
    }
    if (n_updates > settings->max_batch_updates) {
        snprintf(detail, sizeof detail, "batch of %zu updates exceeds %zu",
                 n_updates, settings->max_batch_updates);
        queue_message_rejection(daemon, TS_REASON_BATCH_TOO_LARGE, detail);
        return;
    }
    Tracesan__V1__LocationBatch *batch =
        ts_codec_decode_batch(message->payload, message->len);
    if (batch == NULL || batch->n_updates != n_updates) {
        ts_codec_batch_free(batch);
        queue_message_rejection(daemon, TS_REASON_MALFORMED,
                                "payload is not a LocationBatch");
        return;
    }
    {
        int64_t now_ms = wall_clock_ms();
        time_bounds bounds = {0, 0};
        if (settings->max_future_ms > 0)
            bounds.latest_ms = now_ms + settings->max_future_ms;
        if (settings->max_backdate_ms > 0) {
            bounds.earliest_ms = now_ms - settings->max_backdate_ms;
            /* No accepted update can land before earliest_ms any more, so
             * windows that ended before it are dead by the wall clock even
             * when no update moves the event-time watermark. */
            ts_pipeline_set_expiry_floor(daemon->pipeline,
                                         bounds.earliest_ms);
        }
        ts_outcome outcome;
        for (size_t i = 0; i < batch->n_updates; i++)
            process_update(daemon, batch->updates[i], &daemon->wire[i],
                           &bounds, &outcome);
    }
    ts_codec_batch_free(batch);
    if (daemon->outbox.count >= OUTBOX_FLUSH_ENTRIES)
        flush_outbox(daemon);
}

static void on_batch_end(void *arg)
{
    flush_outbox(arg);
}

/* ------------------------------------------------------- timers/signals */

static void on_signal(evutil_socket_t signum, short what, void *arg)
{
    (void)what;
    daemon_state *daemon = arg;
    ts_log(TS_LOG_INFO, "received %s, shutting down",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
    /* The transport callback in progress has already published its batch:
     * loopbreak only takes effect between callbacks. */
    event_base_loopbreak(daemon->base);
}

static void on_expire_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    daemon_state *daemon = arg;
    if (daemon->settings->max_backdate_ms > 0)
        ts_pipeline_set_expiry_floor(daemon->pipeline,
                                     wall_clock_ms() -
                                         daemon->settings->max_backdate_ms);
    size_t forgotten = ts_pipeline_expire(daemon->pipeline,
                                          EXPIRE_SCAN_PER_TICK);
    if (forgotten > 0)
        ts_log(TS_LOG_DEBUG, "expired %zu idle users", forgotten);
}

static void log_summary(const daemon_state *daemon)
{
    if (daemon->log_limiter.suppressed > 0)
        ts_log(TS_LOG_WARN, "%llu more rejections not logged (limit %d/s)",
               daemon->log_limiter.suppressed, REJECTION_LOG_PER_SECOND);
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(daemon->pipeline);
    uint64_t rejected = 0;
    for (int r = 0; r < TS_REASON_COUNT; r++)
        rejected += stats->rejected[r];
    /* ts_pipeline_process counts the updates it saw; the ones refused
     * before it (far-future timestamps) are updates too. */
    uint64_t updates = stats->updates + daemon->clock_rejections;

    char line[2048];
    int n = snprintf(line, sizeof line,
                     "summary updates=%" PRIu64 " sanitized=%" PRIu64
                     " repeated=%" PRIu64 " rejected=%" PRIu64 " users=%zu",
                     updates, stats->sanitized, stats->repeated, rejected,
                     ts_pipeline_user_count(daemon->pipeline));
    for (int r = 0; r < TS_REASON_COUNT && n > 0 && (size_t)n < sizeof line;
         r++) {
        if (stats->rejected[r] == 0)
            continue;
        n += snprintf(line + n, sizeof line - (size_t)n,
                      " rejected.%s=%" PRIu64, ts_reason_name((ts_reason)r),
                      stats->rejected[r]);
    }
    log_always(daemon->settings, "%s", line);
    if (daemon->encode_failures > 0 || daemon->publish_failures > 0)
        ts_log(TS_LOG_WARN,
               "outputs lost: encode_failures=%" PRIu64
               " publish_failures=%" PRIu64,
               daemon->encode_failures, daemon->publish_failures);
}

/* ---------------------------------------------------------- operations */

/* Period of the timer that measures event-loop lag; every
 * STATUS_EVERY_TICKS ticks it also refreshes systemd's STATUS= line. */
#define OPS_TICK_MS 250
#define STATUS_EVERY_TICKS 20

static char *render_metrics(void *arg, size_t *len)
{
    daemon_state *daemon = arg;
    ts_metrics_sources sources = {
        .pipeline = ts_pipeline_get_stats(daemon->pipeline),
        .updates_before_pipeline = daemon->clock_rejections,
        .users = ts_pipeline_user_count(daemon->pipeline),
        .messages_in = daemon->messages_in,
        .messages_published = daemon->messages_published,
        .publish_failures = daemon->publish_failures,
        .encode_failures = daemon->encode_failures,
        .dropped_uncommitted = daemon->dropped_uncommitted,
        .input_pauses_store = daemon->store_pauses,
        .store_commit_failures = daemon->commit_failures,
    };
    ts_transport_counters transport;
    daemon->transport_ops->get_counters(daemon->transport, &transport);
    sources.dropped_output_hwm = daemon->dropped_unsent;
    sources.dropped_output_error = transport.publish_dropped_error;
    sources.subscriber_cutoffs = transport.subscriber_cutoffs;
    sources.input_pauses_output = transport.input_pauses_output;
    sources.has_zap = transport.has_zap;
    if (daemon->http != NULL) {
        sources.has_http = 1;
        sources.http = ts_ops_http_get_counters(daemon->http);
    }
    sources.zap_accepted = transport.zap_accepted;
    sources.zap_denied = transport.zap_denied;
    return ts_metrics_render(daemon->metrics, &sources, len);
}

static void notify_status(const daemon_state *daemon)
{
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(daemon->pipeline);
    uint64_t rejected = 0;
    for (int r = 0; r < TS_REASON_COUNT; r++)
        rejected += stats->rejected[r];
    sd_notifyf(0,
               "STATUS=updates=%" PRIu64 " sanitized=%" PRIu64
               " rejected=%" PRIu64 " users=%zu",
               stats->updates + daemon->clock_rejections, stats->sanitized,
               rejected, ts_pipeline_user_count(daemon->pipeline));
}

static void timespec_add_ms(struct timespec *t, long ms)
{
    t->tv_sec += ms / 1000;
    t->tv_nsec += (ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static int arm_ops_tick(daemon_state *daemon)
{
    clock_gettime(CLOCK_MONOTONIC, &daemon->ops_tick_due);
    timespec_add_ms(&daemon->ops_tick_due, OPS_TICK_MS);
    struct timeval delay = { .tv_sec = 0, .tv_usec = OPS_TICK_MS * 1000 };
    return event_add(daemon->ops_tick_event, &delay);
}

/* A one-shot timer re-armed on each tick: how late it fires is the time
 * the loop spent on other work, i.e. the event-loop lag. */
static void on_ops_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    daemon_state *daemon = arg;
    ts_metrics_observe_loop_lag(daemon->metrics,
                                seconds_since(&daemon->ops_tick_due));
    if (++daemon->ops_ticks % STATUS_EVERY_TICKS == 0)
        notify_status(daemon);
    /* A burst leaves freed message buffers (up to input.max_queued_mb per
     * producer) in the allocator; glibc keeps them unless asked. Once the
     * input has gone quiet for a tick, hand them back to the system. */
    if (daemon->messages_in == daemon->messages_at_last_tick &&
        daemon->messages_in != daemon->messages_at_last_trim) {
        malloc_trim(0);
        daemon->messages_at_last_trim = daemon->messages_in;
    }
    daemon->messages_at_last_tick = daemon->messages_in;
    if (arm_ops_tick(daemon) != 0)
        ts_log(TS_LOG_ERROR, "cannot re-arm the metrics timer");
}

/* Pinged from the loop itself, so a wedged loop stops the pings and
 * systemd restarts the daemon. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    sd_notify(0, "WATCHDOG=1");
}

static void notify_reloading(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    /* MONOTONIC_USEC lets Type=notify-reload managers match the reload. */
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64,
               (uint64_t)now.tv_sec * 1000000u +
                   (uint64_t)now.tv_nsec / 1000u);
}

static void warn_restart_only(const char *key, void *arg)
{
    (void)arg;
    ts_log(TS_LOG_WARN, "reload: %s changed; it takes effect only after a "
           "restart", key);
}

static const char *on_exhausted_name(ts_on_exhausted policy)
{
    return policy == TS_ON_EXHAUSTED_REPEAT ? "repeat" : "drop";
}

/* Called before the swap; the names and order already match or the swap
 * will refuse them. */
/* What the reload log compares: a profile's ledger settings, copied
 * before the pipeline's profiles are replaced (and freed). */
typedef struct profile_summary {
    char name[128];
    double window_budget;
    int64_t window_ms;
    ts_on_exhausted on_exhausted;
} profile_summary;

static profile_summary *summarize_profiles(const ts_pipeline *pipeline,
                                           size_t *n)
{
    *n = ts_pipeline_profile_count(pipeline);
    profile_summary *summary = calloc(*n != 0 ? *n : 1, sizeof *summary);
    if (summary == NULL)
        return NULL;
    for (size_t i = 0; i < *n; i++) {
        const ts_profile *p = ts_pipeline_profile_at(pipeline, i);
        snprintf(summary[i].name, sizeof summary[i].name, "%s", p->name);
        summary[i].window_budget = p->window_budget;
        summary[i].window_ms = p->window_ms;
        summary[i].on_exhausted = p->on_exhausted;
    }
    return summary;
}

/* Called only once the new profiles are in place, and matched by name:
 * a refused reload logs nothing as changed (issue 10, item 16). */
static void log_profile_changes(const profile_summary *before, size_t n_before,
                                const ts_pipeline *pipeline)
{
    for (size_t i = 0; i < ts_pipeline_profile_count(pipeline); i++) {
        const ts_profile *new = ts_pipeline_profile_at(pipeline, i);
        const profile_summary *old = NULL;
        for (size_t j = 0; j < n_before && old == NULL; j++)
            if (strcmp(before[j].name, new->name) == 0)
                old = &before[j];
        if (old != NULL && old->window_budget != new->window_budget)
            ts_log(TS_LOG_INFO, "reload: profile '%s' window budget %.9g -> "
                   "%.9g", new->name, old->window_budget,
                   new->window_budget);
        if (old != NULL && old->window_ms != new->window_ms)
            ts_log(TS_LOG_INFO, "reload: profile '%s' budget_window_s %lld -> "
                   "%lld (from each user's next window)", new->name,
                   (long long)(old->window_ms / 1000),
                   (long long)(new->window_ms / 1000));
        if (old != NULL && old->on_exhausted != new->on_exhausted)
            ts_log(TS_LOG_INFO, "reload: profile '%s' on_exhausted %s -> %s",
                   new->name, on_exhausted_name(old->on_exhausted),
                   on_exhausted_name(new->on_exhausted));
        /* Mechanism parameters are opaque here, so every profile is
         * reported as reloaded with its resulting ledger settings. */
        ts_log(TS_LOG_INFO, "reload: profile '%s' parameters reloaded "
               "(mechanism %s, window budget %.9g, budget_window_s %lld, "
               "on_exhausted %s)", new->name, new->ops->name,
               new->window_budget, (long long)(new->window_ms / 1000),
               on_exhausted_name(new->on_exhausted));
    }
}

/* Re-read the file with the original overrides. Only what can change
 * without dropping sockets or users is applied; anything invalid leaves the
 * running configuration untouched. */
static void reload_configuration(daemon_state *daemon)
{
    char err[ERR_MAX];
    notify_reloading();
    ts_log(TS_LOG_INFO, "received SIGHUP, reloading %s",
           daemon->config_path != NULL ? daemon->config_path
                                       : "(built-in defaults)");
    ts_config *fresh = ts_config_load(daemon->config_path, daemon->overrides,
                                      daemon->n_overrides, err, sizeof err);
    if (fresh == NULL) {
        ts_log(TS_LOG_ERROR, "reload refused, keeping the running "
               "configuration: %s", err);
        ts_metrics_count_reload(daemon->metrics, 0);
        goto done;
    }
    ts_profile *profiles = NULL;
    size_t n_profiles = 0;
    size_t default_index = 0;
    if (ts_config_build_profiles(fresh, &profiles, &n_profiles,
                                 &default_index, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "reload refused, keeping the running "
               "configuration: %s", err);
        ts_metrics_count_reload(daemon->metrics, 0);
        ts_config_free(fresh);
        goto done;
    }
    /* NULL only when out of memory: the reload then goes on unlogged. */
    size_t n_before = 0;
    profile_summary *before = summarize_profiles(daemon->pipeline, &n_before);
    if (ts_pipeline_replace_profiles(daemon->pipeline, profiles, n_profiles,
                                     default_index, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "reload refused, keeping the running "
               "configuration: %s", err);
        ts_metrics_count_reload(daemon->metrics, 0);
        free(before);
        ts_config_free(fresh);
        goto done;
    }
    if (before != NULL)
        log_profile_changes(before, n_before, daemon->pipeline);
    free(before);
    const ts_settings *settings = ts_config_settings(fresh);
    ts_settings_restart_changes(daemon->settings, settings, warn_restart_only,
                                NULL);
    /* Client keys apply to the next handshakes; connected peers stay. */
    int keys = daemon->transport_ops->reload_allow_lists(
        daemon->transport, settings, err, sizeof err);
    if (keys < 0) {
        ts_log(TS_LOG_ERROR, "reload: client allow-lists not reloaded, the "
               "running ones stay: %s", err);
        ts_metrics_count_reload(daemon->metrics, 0);
        ts_config_free(fresh);
        goto done;
    }
    if (keys > 0)
        ts_log(TS_LOG_INFO, "reload: client allow-lists reloaded "
               "(input %zu keys, output %s)",
               settings->curve_input_allow != NULL
                   ? settings->curve_input_allow->n_keys : (size_t)0,
               settings->curve_output_allow != NULL ? "restricted"
                                                    : "open to any key");
    if (settings->log_level != (int)ts_log_get_level()) {
        ts_log(TS_LOG_INFO, "reload: log level changed");
        ts_log_init(PROGRAM_NAME, (ts_log_level)settings->log_level,
                    daemon->settings->log_syslog);
    }
    /* The running settings stay those of the original file: the transport
     * and store hold pointers into them. */
    ts_config_free(fresh);
    ts_metrics_count_reload(daemon->metrics, 1);
    log_always(daemon->settings, "reload complete");
done:
    sd_notify(0, "READY=1");
}

static void on_sighup(evutil_socket_t signum, short what, void *arg)
{
    (void)signum;
    (void)what;
    reload_configuration(arg);
}

/* Metrics, HTTP endpoint, SIGHUP and systemd timers. Returns -1 (logged)
 * on failure; stop_operations frees whatever was set up. */
static int start_operations(daemon_state *daemon, const char *config_path,
                            const char *const *overrides, size_t n_overrides,
                            struct event **sighup_event)
{
    char err[ERR_MAX];
    daemon->config_path = config_path;
    daemon->overrides = overrides;
    daemon->n_overrides = n_overrides;

    size_t n_profiles = ts_pipeline_profile_count(daemon->pipeline);
    const char **names = calloc(n_profiles > 0 ? n_profiles : 1,
                                sizeof *names);
    if (names == NULL) {
        ts_log(TS_LOG_ERROR, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n_profiles; i++)
        names[i] = ts_pipeline_profile_at(daemon->pipeline, i)->name;
    daemon->metrics = ts_metrics_new(names, n_profiles);
    free(names);
    if (daemon->metrics == NULL) {
        ts_log(TS_LOG_ERROR, "out of memory");
        return -1;
    }

    const char *listen = daemon->settings->http_listen;
    if (listen != NULL && listen[0] != '\0') {
        daemon->http = ts_ops_http_start(daemon->base, listen,
                                         daemon->settings->http_max_connections,
                                         render_metrics,
                                         daemon, err, sizeof err);
        if (daemon->http == NULL) {
            ts_log(TS_LOG_ERROR, "%s", err);
            return -1;
        }
    }

    *sighup_event = evsignal_new(daemon->base, SIGHUP, on_sighup, daemon);
    daemon->ops_tick_event = event_new(daemon->base, -1, 0, on_ops_tick,
                                       daemon);
    if (*sighup_event == NULL || daemon->ops_tick_event == NULL ||
        evsignal_add(*sighup_event, NULL) != 0 ||
        arm_ops_tick(daemon) != 0) {
        ts_log(TS_LOG_ERROR, "cannot set up the SIGHUP and metrics events");
        return -1;
    }

    uint64_t watchdog_usec = 0;
    if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0) {
        /* Half the interval: one late ping does not cost a restart. */
        uint64_t half = watchdog_usec / 2;
        struct timeval period = {
            .tv_sec = (time_t)(half / 1000000u),
            .tv_usec = (suseconds_t)(half % 1000000u),
        };
        daemon->watchdog_event = event_new(daemon->base, -1, EV_PERSIST,
                                           on_watchdog, daemon);
        if (daemon->watchdog_event == NULL ||
            event_add(daemon->watchdog_event, &period) != 0) {
            ts_log(TS_LOG_ERROR, "cannot start the watchdog timer");
            return -1;
        }
        ts_log(TS_LOG_INFO, "systemd watchdog every %" PRIu64 " ms",
               half / 1000u);
    }
    return 0;
}

static void stop_operations(daemon_state *daemon, struct event *sighup_event)
{
    if (daemon->watchdog_event != NULL)
        event_free(daemon->watchdog_event);
    daemon->watchdog_event = NULL;
    if (daemon->ops_tick_event != NULL)
        event_free(daemon->ops_tick_event);
    daemon->ops_tick_event = NULL;
    if (sighup_event != NULL)
        event_free(sighup_event);
    ts_ops_http_free(daemon->http);
    daemon->http = NULL;
    ts_metrics_free(daemon->metrics);
    daemon->metrics = NULL;
}

/* ---------------------------------------------------------------- main */

static int parse_options(int argc, char **argv, options *opts)
{
    enum { OPT_CHECK_CONFIG = 1000 };
    static const struct option long_options[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    memset(opts, 0, sizeof *opts);
    int c;
    while ((c = getopt_long(argc, argv, "c:o:hV", long_options, NULL)) != -1) {
        switch (c) {
        case 'c':
            opts->config_path = optarg;
            break;
        case 'o':
            if (opts->n_overrides == MAX_OVERRIDES) {
                fprintf(stderr, PROGRAM_NAME ": too many -o overrides (max %d)\n",
                        MAX_OVERRIDES);
                return 1;
            }
            opts->overrides[opts->n_overrides++] = optarg;
            break;
        case OPT_CHECK_CONFIG:
            opts->check_config = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf(PROGRAM_NAME " " PACKAGE_VERSION "\n");
            exit(0);
        default:
            usage(stderr);
            return 1;
        }
    }
    /* `--check-config FILE` names the file as an operand. */
    if (opts->check_config && opts->config_path == NULL &&
        optind + 1 == argc) {
        opts->config_path = argv[optind++];
    }
    if (optind != argc) {
        fprintf(stderr, PROGRAM_NAME ": unexpected argument '%s'\n",
                argv[optind]);
        usage(stderr);
        return 1;
    }
    if (opts->check_config && opts->config_path == NULL) {
        fprintf(stderr, PROGRAM_NAME ": --check-config needs a FILE\n");
        return 1;
    }
    return 0;
}

static int check_config(const options *opts)
{
    char err[ERR_MAX];
    ts_config *config = ts_config_load(opts->config_path, opts->overrides,
                                       opts->n_overrides, err, sizeof err);
    if (config == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* Loading validates every setting and instantiates every profile's
     * mechanism, so a configuration that loads is one the daemon runs. */
    printf("%s: configuration OK\n", opts->config_path);
    ts_config_free(config);
    return 0;
}

static int run(const options *opts)
{
    char err[ERR_MAX];
    int status = 1;
    daemon_state daemon;
    memset(&daemon, 0, sizeof daemon);
    daemon.log_limiter.per_second = REJECTION_LOG_PER_SECOND;
    daemon.transport_ops = &ts_transport_zmq_ops;
    ts_config *config = NULL;
    ts_rng *rng = NULL;
    struct event *sigint_event = NULL;
    struct event *sigterm_event = NULL;
    struct event *expire_event = NULL;
    struct event *sighup_event = NULL;

    const char *path = opts->config_path;
    if (path == NULL && access(DEFAULT_CONFIG_PATH, R_OK) == 0)
        path = DEFAULT_CONFIG_PATH;
    config = ts_config_load(path, opts->overrides, opts->n_overrides, err,
                            sizeof err);
    if (config == NULL) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    daemon.settings = ts_config_settings(config);
    ts_log_init(PROGRAM_NAME, (ts_log_level)daemon.settings->log_level,
                daemon.settings->log_syslog);
    ts_log_capture_libevent();
    if (path == NULL)
        ts_log(TS_LOG_INFO, "no configuration file, using built-in defaults");

    rng = ts_rng_new_secure();
    if (rng == NULL) {
        /* Noise from anything but the OS entropy source would void the
         * guarantee, so there is no fallback. */
        ts_log(TS_LOG_ERROR, "secure random generator unavailable");
        goto out;
    }
    daemon.pipeline = ts_config_make_pipeline(config, rng, err, sizeof err);
    if (daemon.pipeline == NULL) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    /* input.max_batch_updates is restart-only, so this never resizes;
     * calloc leaves the untouched tail of a large limit unmapped. */
    daemon.wire = calloc(daemon.settings->max_batch_updates,
                         sizeof *daemon.wire);
    if (daemon.wire == NULL) {
        ts_log(TS_LOG_ERROR, "out of memory for input.max_batch_updates");
        goto out;
    }
    if (daemon.settings->state_dir != NULL) {
        daemon.store = ts_store_open(daemon.settings->state_dir,
                                     (ts_store_sync)daemon.settings->state_sync,
                                     daemon.settings->state_map_size_mb, 0,
                                     err, sizeof err);
        if (daemon.store == NULL) {
            ts_log(TS_LOG_ERROR, "%s", err);
            goto out;
        }
        ts_store_backend_init(&daemon.store_backend, daemon.store);
        ts_pipeline_set_state_backend(daemon.pipeline,
                                      &daemon.store_backend.backend);
        ts_log(TS_LOG_INFO, "state store %s opened",
               daemon.settings->state_dir);
    } else {
        ts_log(TS_LOG_WARN, "state.dir is empty or unset: budget ledgers "
               "live in memory only and a restart gives every user a fresh "
               "budget");
    }
    daemon.base = event_base_new();
    if (daemon.base == NULL) {
        ts_log(TS_LOG_ERROR, "cannot create event loop");
        goto out;
    }
    if (daemon.transport_ops->open(&daemon.transport, daemon.settings,
                                   daemon.base, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }

    sigint_event = evsignal_new(daemon.base, SIGINT, on_signal, &daemon);
    sigterm_event = evsignal_new(daemon.base, SIGTERM, on_signal, &daemon);
    expire_event = event_new(daemon.base, -1, EV_PERSIST, on_expire_tick,
                             &daemon);
    daemon.commit_retry_event = event_new(daemon.base, -1, 0,
                                          on_commit_retry, &daemon);
    if (sigint_event == NULL || sigterm_event == NULL ||
        expire_event == NULL || daemon.commit_retry_event == NULL || evsignal_add(sigint_event, NULL) != 0 ||
        evsignal_add(sigterm_event, NULL) != 0) {
        ts_log(TS_LOG_ERROR, "cannot set up signal and timer events");
        goto out;
    }
    int64_t interval_ms = daemon.settings->expire_interval_ms > 0
                              ? daemon.settings->expire_interval_ms
                              : 1000;
    struct timeval interval = {
        .tv_sec = (time_t)(interval_ms / 1000),
        .tv_usec = (suseconds_t)(interval_ms % 1000) * 1000,
    };
    if (event_add(expire_event, &interval) != 0) {
        ts_log(TS_LOG_ERROR, "cannot start the expiry timer");
        goto out;
    }

    if (start_operations(&daemon, path, opts->overrides, opts->n_overrides,
                         &sighup_event) != 0)
        goto out;

    daemon.transport_ops->start(daemon.transport, on_message, on_batch_end,
                                on_output_ready, &daemon);
    log_always(daemon.settings, "ready input=%s output=%s%s%s",
               daemon.transport_ops->input_endpoint(daemon.transport),
               daemon.transport_ops->output_endpoint(daemon.transport),
               daemon.http != NULL ? " http=" : "",
               daemon.http != NULL ? ts_ops_http_address(daemon.http) : "");
    sd_notify(0, "READY=1");
    notify_status(&daemon);

    if (event_base_dispatch(daemon.base) < 0) {
        ts_log(TS_LOG_ERROR, "event loop failed");
        goto out;
    }
    sd_notify(0, "STOPPING=1");
    /* A mid-callback break cannot leave outcomes behind, but flushing here
     * keeps that true if the transport ever changes. A group held by a
     * failed commit gets one last attempt; if that fails too it is dropped
     * unpublished (its users' committed ledgers are what survives). */
    flush_outbox(&daemon);
    if (daemon.store_failed && retry_held_commit(&daemon) != 0) {
        ts_log(TS_LOG_ERROR, "shutting down with an uncommitted batch: %zu "
               "outcomes not published", daemon.outbox.count);
        daemon.dropped_uncommitted += daemon.outbox.count;
        outbox_clear(&daemon.outbox);
    }
    if (daemon.outbox.count > 0) {
        size_t unsent = daemon.outbox.count - daemon.outbox.sent;
        ts_log(TS_LOG_WARN, "shutting down with the output full: %zu "
               "committed outcomes not published", unsent);
        daemon.dropped_unsent += unsent;
        outbox_clear(&daemon.outbox);
    }
    log_summary(&daemon);
    status = daemon.store_failed ? 1 : 0;

out:
    stop_operations(&daemon, sighup_event);
    if (expire_event != NULL)
        event_free(expire_event);
    if (daemon.commit_retry_event != NULL)
        event_free(daemon.commit_retry_event);
    if (sigterm_event != NULL)
        event_free(sigterm_event);
    if (sigint_event != NULL)
        event_free(sigint_event);
    if (daemon.transport != NULL)
        daemon.transport_ops->close(daemon.transport);
    if (daemon.base != NULL)
        event_base_free(daemon.base);
    outbox_free(&daemon.outbox);
    free(daemon.wire);
    if (daemon.pipeline != NULL)
        ts_pipeline_free(daemon.pipeline);
    ts_store_close(daemon.store);
    ts_store_backend_free(&daemon.store_backend);
    if (rng != NULL)
        ts_rng_free(rng);
    if (config != NULL)
        ts_config_free(config);
    ts_log_close();
    libevent_global_shutdown();
    return status;
}

int main(int argc, char **argv)
{
    /* GSL's default handler aborts the process; with it off, a special
     * function's domain error comes back as a status the mechanism turns
     * into a dropped point (fail closed) instead of a crash. */
    gsl_set_error_handler_off();
    options opts;
    int rc = parse_options(argc, argv, &opts);
    if (rc != 0)
        return rc;
    ts_log_init(PROGRAM_NAME, TS_LOG_INFO, 0);
    if (opts.check_config)
        return check_config(&opts);
    signal(SIGPIPE, SIG_IGN);
    return run(&opts);
}
