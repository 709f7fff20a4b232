#include "ops/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

typedef struct histogram {
    uint64_t buckets[TS_METRICS_BUCKETS]; /* non-cumulative; last is +Inf */
    uint64_t count;
    double sum;
} histogram;

struct ts_metrics {
    char **profile_names;
    size_t n_profiles;
    histogram *profile_latency;          /* one per profile */
    histogram commit_latency;
    histogram commit_batch_size;
    histogram loop_lag;
    double loop_lag_last;
    uint64_t reloads;
    uint64_t reload_failures;
};

static const double latency_bounds[TS_METRICS_BUCKETS] = {
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
    1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, INFINITY,
};

static const double size_bounds[TS_METRICS_BUCKETS] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
    16384, 32768, 65536, 131072, 262144, 524288, 1048576, 2097152,
    INFINITY,
};

static void observe(histogram *h, const double *bounds, double value)
{
    /* A clock step or a NaN must not poison the sum forever. */
    if (!(value >= 0.0))
        value = 0.0;
    size_t i = 0;
    while (i + 1 < TS_METRICS_BUCKETS && value > bounds[i])
        i++;
    h->buckets[i]++;
    h->count++;
    h->sum += value;
}

ts_metrics *ts_metrics_new(const char *const *profile_names,
                           size_t n_profiles)
{
    ts_metrics *metrics = calloc(1, sizeof *metrics);
    if (metrics == NULL)
        return NULL;
    if (n_profiles > 0) {
        metrics->profile_names = calloc(n_profiles,
                                        sizeof *metrics->profile_names);
        metrics->profile_latency = calloc(n_profiles,
                                          sizeof *metrics->profile_latency);
        if (metrics->profile_names == NULL ||
            metrics->profile_latency == NULL)
            goto fail;
        metrics->n_profiles = n_profiles;
        for (size_t i = 0; i < n_profiles; i++) {
            metrics->profile_names[i] =
                strdup(profile_names[i] != NULL ? profile_names[i] : "");
            if (metrics->profile_names[i] == NULL)
                goto fail;
        }
    }
    return metrics;
fail:
    ts_metrics_free(metrics);
    return NULL;
}

void ts_metrics_free(ts_metrics *metrics)
{
    if (metrics == NULL)
        return;
    if (metrics->profile_names != NULL)
        for (size_t i = 0; i < metrics->n_profiles; i++)
            free(metrics->profile_names[i]);
    free(metrics->profile_names);
    free(metrics->profile_latency);
    free(metrics);
}

void ts_metrics_observe_profile(ts_metrics *metrics, size_t profile_index,
                                double seconds)
{
    if (metrics == NULL || profile_index >= metrics->n_profiles)
        return;
    observe(&metrics->profile_latency[profile_index], latency_bounds, seconds);
}

void ts_metrics_observe_commit(ts_metrics *metrics, double seconds,
                               size_t batch_size)
{
    if (metrics == NULL)
        return;
    observe(&metrics->commit_latency, latency_bounds, seconds);
    observe(&metrics->commit_batch_size, size_bounds, (double)batch_size);
}

void ts_metrics_observe_loop_lag(ts_metrics *metrics, double seconds)
{
    if (metrics == NULL)
        return;
    observe(&metrics->loop_lag, latency_bounds, seconds);
    metrics->loop_lag_last = seconds >= 0.0 ? seconds : 0.0;
}

void ts_metrics_count_reload(ts_metrics *metrics, int succeeded)
{
    if (metrics == NULL)
        return;
    if (succeeded)
        metrics->reloads++;
    else
        metrics->reload_failures++;
}

/* --------------------------------------------------------- rendering */

typedef struct text {
    char *data;
    size_t len;
    size_t capacity;
    int failed;
} text;

static void put(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = t->capacity - t->len;
        int n = vsnprintf(t->data != NULL ? t->data + t->len : NULL, room,
                          fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t capacity = t->capacity != 0 ? t->capacity : 4096;
        while (capacity - t->len <= (size_t)n)
            capacity *= 2;
        char *data = realloc(t->data, capacity);
        if (data == NULL) {
            t->failed = 1;
            return;
        }
        t->data = data;
        t->capacity = capacity;
    }
}

static void header(text *t, const char *name, const char *type,
                   const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(text *t, const char *name, const char *help,
                    uint64_t value)
{
    header(t, name, "counter", help);
    put(t, "%s %" PRIu64 "\n", name, value);
}

/* Label values come from the configuration (profile names); the format
 * requires \, " and newline escaped. */
static void put_label_value(text *t, const char *value)
{
    for (const char *p = value; *p != '\0'; p++) {
        if (*p == '\\')
            put(t, "\\\\");
        else if (*p == '"')
            put(t, "\\\"");
        else if (*p == '\n')
            put(t, "\\n");
        else
            put(t, "%c", *p);
    }
}

static void put_bound(text *t, double bound)
{
    if (isinf(bound))
        put(t, "+Inf");
    else
        put(t, "%.9g", bound);
}

/* `label` is "name=\"value\"" text already escaped, or NULL. */
static void histogram_samples(text *t, const char *name, const char *label,
                              const histogram *h, const double *bounds)
{
    uint64_t cumulative = 0;
    for (size_t i = 0; i < TS_METRICS_BUCKETS; i++) {
        cumulative += h->buckets[i];
        put(t, "%s_bucket{", name);
        if (label != NULL)
            put(t, "%s,", label);
        put(t, "le=\"");
        put_bound(t, bounds[i]);
        put(t, "\"} %" PRIu64 "\n", cumulative);
    }
    if (label != NULL) {
        put(t, "%s_sum{%s} %.9g\n", name, label, h->sum);
        put(t, "%s_count{%s} %" PRIu64 "\n", name, label, h->count);
    } else {
        put(t, "%s_sum %.9g\n", name, h->sum);
        put(t, "%s_count %" PRIu64 "\n", name, h->count);
    }
}

/* A histogram without labels: its header and its samples. */
static void put_histogram(text *t, const char *name, const char *help,
                          const histogram *h, const double *bounds)
{
    header(t, name, "histogram", help);
    histogram_samples(t, name, NULL, h, bounds);
}

static void render_profiles(text *t, const ts_metrics *metrics)
{
    const char *name = "tracesand_update_duration_seconds";
    header(t, name, "histogram",
           "Time the pipeline spent on one update, by profile.");
    for (size_t p = 0; p < metrics->n_profiles; p++) {
        /* Build the escaped label once per profile. */
        text label = { 0 };
        put(&label, "profile=\"");
        put_label_value(&label, metrics->profile_names[p]);
        put(&label, "\"");
        if (label.failed) {
            free(label.data);
            t->failed = 1;
            return;
        }
        histogram_samples(t, name, label.data, &metrics->profile_latency[p],
                          latency_bounds);
        free(label.data);
    }
}

char *ts_metrics_render(const ts_metrics *metrics,
                        const ts_metrics_sources *sources, size_t *len)
{
    text t = { 0 };
    const ts_pipeline_stats *stats = sources->pipeline;

    counter(&t, "tracesand_updates_total",
            "Location updates received (points in).",
            stats->updates + sources->updates_before_pipeline);
    counter(&t, "tracesand_sanitized_total",
            "Sanitized points published or queued (points out), repeats "
            "included.", stats->sanitized);
    counter(&t, "tracesand_repeated_total",
            "Points answered by repeating the last sanitized point.",
            stats->repeated);
    header(&t, "tracesand_rejected_total", "counter",
           "Updates or messages rejected, by reason.");
    for (int r = 1; r < TS_REASON_COUNT; r++) {
        put(&t, "tracesand_rejected_total{reason=\"%s\"} %" PRIu64 "\n",
            ts_reason_name((ts_reason)r), stats->rejected[r]);
    }
    counter(&t, "tracesand_budget_exhaustions_total",
            "Times a user exhausted the budget of a window.",
            stats->budget_exhaustions);
    counter(&t, "tracesand_users_created_total", "Users added to the table.",
            stats->users_created);
    counter(&t, "tracesand_users_expired_total",
            "Idle users forgotten after their window closed.",
            stats->users_expired);
    header(&t, "tracesand_users", "gauge", "Users currently in the table.");
    put(&t, "tracesand_users %zu\n", sources->users);
    counter(&t, "tracesand_messages_received_total",
            "Input messages received.", sources->messages_in);
    counter(&t, "tracesand_messages_published_total",
            "Output messages handed to the output socket.",
            sources->messages_published);
    counter(&t, "tracesand_publish_failures_total",
            "Output messages dropped by the output socket.",
            sources->publish_failures);
    counter(&t, "tracesand_encode_failures_total",
            "Outcomes dropped before publishing (out of memory).",
            sources->encode_failures);
    header(&t, "tracesand_dropped_total", "counter",
           "Outcomes dropped without being published, by cause.");
    put(&t, "tracesand_dropped_total{cause=\"output_hwm\"} %" PRIu64 "\n",
        sources->dropped_output_hwm);
    put(&t, "tracesand_dropped_total{cause=\"output_error\"} %" PRIu64 "\n",
        sources->dropped_output_error);
    put(&t, "tracesand_dropped_total{cause=\"encode\"} %" PRIu64 "\n",
        sources->encode_failures);
    put(&t, "tracesand_dropped_total{cause=\"uncommitted\"} %" PRIu64 "\n",
        sources->dropped_uncommitted);
    counter(&t, "tracesand_subscriber_cutoffs_total",
            "PUB output: times a subscriber fell output.hwm messages behind "
            "and was cut off until it caught up (each loses it at least one "
            "message).", sources->subscriber_cutoffs);
    header(&t, "tracesand_input_pauses_total", "counter",
           "Times input reading stopped, by cause (queued input then waits "
           "in the input socket and the producers).");
    put(&t, "tracesand_input_pauses_total{cause=\"output_full\"} %" PRIu64
        "\n", sources->input_pauses_output);
    put(&t, "tracesand_input_pauses_total{cause=\"store\"} %" PRIu64 "\n",
        sources->input_pauses_store);
    if (sources->has_http) {
        header(&t, "tracesand_http_connections_total", "counter",
               "Connections to this endpoint, by outcome: served, or closed "
               "at once because http.max_connections were open.");
        put(&t, "tracesand_http_connections_total{result=\"accepted\"} %"
            PRIu64 "\n", sources->http.connections_accepted);
        put(&t, "tracesand_http_connections_total{result=\"refused\"} %"
            PRIu64 "\n", sources->http.connections_refused);
        counter(&t, "tracesand_http_accept_errors_total",
                "accept() failures (out of descriptors: accepting pauses "
                "with backoff).", sources->http.accept_errors);
        header(&t, "tracesand_http_open_connections", "gauge",
               "Connections to this endpoint open now.");
        put(&t, "tracesand_http_open_connections %" PRIu64 "\n",
            sources->http.open_connections);
        counter(&t, "tracesand_http_unauthorized_total",
                "Requests answered 401: no or a wrong bearer token "
                "(http.token).", sources->http.unauthorized);
        counter(&t, "tracesand_http_cors_denied_total",
                "CORS preflights refused: origin not in http.cors_origins "
                "or method not GET/HEAD.", sources->http.cors_denied);
        counter(&t, "tracesand_http_bad_requests_total",
                "Request heads refused and their connection closed: "
                "ambiguous framing (RFC 9112), too large, or malformed.",
                sources->http.bad_requests);
        counter(&t, "tracesand_http_head_timeouts_total",
                "Connections closed (408) because a request head had not "
                "arrived whole within 10 s.", sources->http.head_timeouts);
        counter(&t, "tracesand_http_evictions_total",
                "Connections closed with every slot taken, to make room for "
                "a new one: the longest wait for a head.",
                sources->http.evictions);
    }
    counter(&t, "tracesand_store_commit_failures_total",
            "Failed state store commit attempts (first failures and retries).",
            sources->store_commit_failures);
    if (sources->has_zap) {
        header(&t, "tracesand_zap_requests_total", "counter",
               "CURVE handshakes judged by the ZAP handler, by result.");
        put(&t, "tracesand_zap_requests_total{result=\"accepted\"} %" PRIu64
            "\n", sources->zap_accepted);
        put(&t, "tracesand_zap_requests_total{result=\"denied\"} %" PRIu64
            "\n", sources->zap_denied);
    }
    counter(&t, "tracesand_config_reloads_total",
            "Configuration reloads applied.", metrics->reloads);
    counter(&t, "tracesand_config_reload_failures_total",
            "Configuration reloads refused (old configuration kept).",
            metrics->reload_failures);

    put_histogram(&t, "tracesand_event_loop_lag_seconds",
                  "How late a periodic timer fired: time the loop was busy.",
                  &metrics->loop_lag, latency_bounds);
    header(&t, "tracesand_event_loop_lag_last_seconds", "gauge",
           "Lag of the most recent timer tick.");
    put(&t, "tracesand_event_loop_lag_last_seconds %.9g\n",
        metrics->loop_lag_last);

    put_histogram(&t, "tracesand_store_commit_duration_seconds",
                  "Duration of one durable group commit.",
                  &metrics->commit_latency, latency_bounds);
    put_histogram(&t, "tracesand_store_commit_batch_size",
                  "Updates covered by one durable group commit.",
                  &metrics->commit_batch_size, size_bounds);

    render_profiles(&t, metrics);

    header(&t, "tracesand_healthy", "gauge",
           "1 when /healthz reports ok, 0 otherwise.");
    put(&t, "tracesand_healthy %d\n", ts_metrics_healthy(NULL, 0));

    if (t.failed) {
        free(t.data);
        return NULL;
    }
    if (len != NULL)
        *len = t.len;
    return t.data;
}

double ts_metrics_seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) +
           (double)(now.tv_nsec - start->tv_nsec) * 1e-9;
}
