/* Operational metrics of tracesand, rendered in the Prometheus text format.
 *
 * Counters that the pipeline already keeps (updates, sanitized, rejections
 * by reason, users, exhaustions) are not duplicated here: the renderer reads
 * them from ts_pipeline_stats at scrape time, so /metrics and the shutdown
 * summary can never disagree. This module only owns what nobody else
 * measures: latency histograms, event-loop lag, store commits, reloads.
 *
 * No metric carries a coordinate or a per-user label: user ids are personal
 * data and unbounded label sets would grow the scrape without limit. The
 * only label sets are reasons (fixed enum) and profiles (from the config).
 */
#ifndef TRACESAN_OPS_METRICS_H
#define TRACESAN_OPS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/health.h"
#include "ops/ops_http.h"
#include "engine/pipeline.h"

/* Histograms have fixed buckets so an observation is a few compares and
 * no allocation: latencies in 1-2.5-5 steps from 1 us to 10 s, batch sizes
 * in powers of two up to 2^21, each plus +Inf. */
#define TS_METRICS_BUCKETS 23

typedef struct ts_metrics ts_metrics;

/* Profile names label the per-profile latency histograms; copied. */
ts_metrics *ts_metrics_new(const char *const *profile_names,
                           size_t n_profiles);
void ts_metrics_free(ts_metrics *metrics);

/* Time the pipeline spent on one update of profile `profile_index`. */
void ts_metrics_observe_profile(ts_metrics *metrics, size_t profile_index,
                                double seconds);
/* One durable commit of `batch_size` updates that took `seconds`; called by
 * the store's group commit. */
/* Seconds on CLOCK_MONOTONIC since `start`: what the histograms observe. */
struct timespec;
double ts_metrics_seconds_since(const struct timespec *start);

void ts_metrics_observe_commit(ts_metrics *metrics, double seconds,
                               size_t batch_size);
/* How late a timer fired compared to when it was due. */
void ts_metrics_observe_loop_lag(ts_metrics *metrics, double seconds);
void ts_metrics_count_reload(ts_metrics *metrics, int succeeded);

/* Daemon-side counts read at render time. */
typedef struct ts_metrics_sources {
    const ts_pipeline_stats *pipeline;  /* single source for points */
    uint64_t updates_before_pipeline;   /* refused before the pipeline (far
                                           future), still updates */
    size_t users;
    uint64_t messages_in;
    uint64_t messages_published;
    uint64_t publish_failures;          /* dropped by the output socket */
    uint64_t encode_failures;           /* dropped before publishing */
    /* Drops and pauses by cause (tracesand_dropped_total{cause}); the
     * publish_failures above is their output-side sum. */
    uint64_t dropped_output_hwm;        /* output socket at its HWM */
    uint64_t dropped_output_error;      /* other output socket errors */
    uint64_t subscriber_cutoffs;        /* PUB: a subscriber at its HWM was
                                           cut off until it caught up */
    uint64_t dropped_uncommitted;       /* held outcomes never committed
                                           (store failure at shutdown) */
    uint64_t input_pauses_output;       /* input paused: output full */
    uint64_t input_pauses_store;        /* input paused: commit failed */
    int has_http;                       /* the endpoint's own counters: */
    ts_ops_http_counters http;
    uint64_t store_commit_failures;     /* failed commit attempts */
    int has_zap;                        /* CURVE on: render ZAP counters */
    uint64_t zap_accepted;
    uint64_t zap_denied;
} ts_metrics_sources;

/* The exposition text, NUL-terminated, malloc'ed (caller frees); NULL when
 * memory ran out. `*len` gets its length when len is not NULL. */
char *ts_metrics_render(const ts_metrics *metrics,
                        const ts_metrics_sources *sources, size_t *len);

#endif
