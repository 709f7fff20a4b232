/* Mechanisms whose reports are the cells of a grid, drawn through a public
 * channel C[x * n + y] = P(report cell y | true cell x).
 *
 * Such a profile's published reports can be turned back into an estimate
 * of where its users are (IBU, inference/ibu.h), and an adaptive mechanism
 * (PRIVIC) rebuilds its channel from that estimate, cycle after cycle. The
 * caller owns that loop: the daemon runs it off its event loop
 * (ops/population_loop.c), `tracesan privic` in a plain loop. What is here
 * are its pure steps. Only published reports and public channels enter
 * them, so the estimate, the next channel and its version are
 * post-processing of released data (docs/privic.md). */
#ifndef TRACESAN_MECHANISMS_POPULATION_H
#define TRACESAN_MECHANISMS_POPULATION_H

#include <stddef.h>
#include <stdint.h>

#include "geometry/plane.h"
#include "inference/ibu.h"

/* When a cycle ends: after `reports` reports or `seconds` of event time
 * since the cycle's first report, whichever comes first (0 = unused; at
 * least one is set). */
typedef struct ts_population_cycle {
    uint64_t reports;
    double seconds;
    ts_ibu_params ibu;
} ts_population_cycle;

/* What building one channel did (BA for privic). */
typedef struct ts_channel_build_stats {
    unsigned iterations;
    int converged;
    double last_change;
} ts_channel_build_stats;

typedef struct ts_population_ops {
    /* 1: channel_build depends on the estimate (the loop rebuilds and
     * installs a channel every cycle); 0: the channel is fixed. */
    int adaptive;
    size_t (*cells)(const void *profile);
    /* The grid is cols x rows cells of cell_w x cell_h metres, cell index
     * row * cols + col, row 0 the southernmost. */
    void (*grid_shape)(const void *profile, uint32_t *cols, uint32_t *rows,
                       double *cell_w, double *cell_h);
    /* The cell of a published point: 0 with *cell set, -1 when it is in
     * no cell. */
    int (*cell_of)(const void *profile, double lat, double lon,
                   uint32_t *cell);
    /* A cell's bounds in degrees {lat_min, lon_min, lat_max, lon_max}
     * (GeoJSON) and its centre in metres of the grid's plane (EMD). */
    void (*cell_bounds)(const void *profile, uint32_t cell, double bounds[4]);
    ts_vec2 (*cell_centre)(const void *profile, uint32_t cell);
    void (*cycle)(const void *profile, ts_population_cycle *out);
    /* The channel for an estimate `theta` of the true distribution (n
     * entries, full support; NULL: none yet, uniform). Pure, may be slow
     * and is thread-safe: the daemon calls it off its event loop while
     * releases go on through the installed channel. NULL with err set on
     * failure. */
    void *(*channel_build)(const void *profile, const double *theta,
                           ts_channel_build_stats *stats, char *err,
                           size_t errlen);
    void (*channel_free)(void *channel);
    /* The n x n matrix, row-major. */
    const double *(*channel_matrix)(const void *channel);
    /* Releases from now on go through `channel` (which the caller keeps
     * alive until it installs another or frees the profile) and carry
     * `version`. NULL channel: back to the profile's own first channel. */
    void (*channel_install)(void *profile, const void *channel,
                            uint32_t version);
    /* The installed channel and its version. */
    const void *(*channel_current)(const void *profile, uint32_t *version);
} ts_population_ops;

/* ------------------------------------------------------------ the loop
 *
 * PRIVIC's Algorithm 1 as state and steps, shared by the daemon (which
 * runs ts_population_run on a worker thread) and `tracesan privic`:
 *
 *   observe   each published report's cell, counted under the version of
 *             the channel it was drawn through;
 *   close     at the cycle's end, the counts become a job;
 *   run       IBU (GIBU when the cycle's reports went through two channel
 *             versions) from the previous estimate, then, for an adaptive
 *             mechanism, the next channel from the new estimate;
 *   finish    the estimate replaces the old one and the new channel is
 *             installed as version + 1.
 *
 * Reports of a version that is no longer counted (drawn before the
 * channel before last) are dropped and counted in `stale`. */
typedef struct ts_population_source {
    const void *channel;         /* borrowed from the profile, or owned */
    int owned;
    uint32_t version;
    double *counts;              /* n */
    uint64_t reports;
} ts_population_source;

typedef struct ts_population_loop {
    const ts_population_ops *ops;
    void *profile;
    size_t n;
    ts_population_cycle cycle;
    uint32_t cycles;             /* completed */
    uint64_t reports_total;      /* observed and counted, all cycles */
    uint64_t stale;
    uint64_t outside;            /* published points in no cell */
    /* The estimate: every cycle's IBU result combined in proportion to
     * its reports (Algorithm 1, step iv); NULL before the first. */
    double *theta;
    uint64_t estimated_reports;  /* the reports behind theta */
    /* [0] the channel before the current one, [1] the current one. */
    ts_population_source source[2];
    uint64_t cycle_reports;
    int64_t cycle_start_ms;
    int64_t last_ts_ms;          /* event time of the last report counted */
    int job_running;
} ts_population_loop;

typedef struct ts_population_job {
    const ts_population_ops *ops;
    const void *profile;
    size_t n;
    ts_ibu_params ibu_params;
    int adaptive;
    ts_ibu_source sources[2];
    double *counts[2];           /* owned copies */
    size_t n_sources;
    uint64_t reports;
    double *theta;               /* in: the start; out: the estimate */
    /* The loop's estimate before this cycle and its reports (0: none):
     * the cycle's IBU result is combined with it before BA. */
    double *previous;
    uint64_t previous_reports;
    /* out */
    int ok;
    char err[256];
    ts_ibu_result ibu;
    double ibu_ms;
    void *channel;               /* adaptive: the next channel */
    ts_channel_build_stats build;
    double build_ms;
} ts_population_job;

/* Starts the loop on the profile's installed channel. -1 on allocation
 * failure. */
int ts_population_loop_init(ts_population_loop *loop,
                            const ts_population_ops *ops, void *profile);
/* A loop that never installs a channel on its profile: the caller owns
 * every channel the loop counts under, keeps it alive while the loop or a
 * job reads it, and installs it itself on the thread that releases (the
 * JetStream driver's cluster job, which adopts versions from a KV bucket).
 * It starts counting under `channel` as `version`. -1 on allocation
 * failure. */
int ts_population_loop_init_detached(ts_population_loop *loop,
                                     const ts_population_ops *ops,
                                     void *profile, const void *channel,
                                     uint32_t version);
/* A detached loop's next channel, counted as `version` from now on: what
 * was counted under the current one stays for the next job (as the
 * previous version), what was counted under the one before becomes stale,
 * as when ts_population_finish installs. -1 on allocation failure
 * (nothing changed). */
int ts_population_shift(ts_population_loop *loop, const void *channel,
                        uint32_t version);
/* Frees the counts and the channels the loop owns, re-installing the
 * profile's own first channel when one of them was installed. */
void ts_population_loop_free(ts_population_loop *loop);

/* Resumes a loop from a persisted estimate: builds the channel for theta
 * (adaptive) and installs it as `version`. A theta of another length (the
 * grid changed) is dropped and the first channel installed as version, so
 * versions never go back. 0, or -1 with err. */
int ts_population_restore(ts_population_loop *loop, uint32_t version,
                          uint32_t cycles, uint64_t reports_total,
                          const double *theta, size_t n_theta, char *err,
                          size_t errlen);

/* ----------------------------------------------------------- records
 *
 * The loop's persisted state, little-endian. Format 1 is the single-node
 * loop's store record `population/<profile>` (ops/population_loop.c):
 *
 *   u8 1, u32 channel version, u32 cycles, u64 reports counted,
 *   u32 cells, f64 estimate[cells]
 *
 * Format 2 is the value a cluster job keeps in its KV bucket
 * (drivers/jetstream/js_population.c), everything a new holder needs to go
 * on exactly where the last write left off:
 *
 *   u8 2, u32 channel version, u32 cycles, u64 reports counted,
 *   u32 cells, u8 estimate kind, [f64 estimate[cells]],
 *   u8 previous kind, [f64 previous[cells]],
 *   u64 stale, u64 outside, u64 estimated reports, u64 last cycle's
 *   reports, i64 estimated at (ms), u64 out_seq
 *
 * A kind is TS_PRIOR_*; the f64 follow only for TS_PRIOR_ESTIMATE. The
 * channel of `version` is built from the estimate (the uniform prior when
 * there is none), the channel of version - 1 from `previous`. out_seq is
 * the last output-stream sequence whose reports the counts account for:
 * each report up to it is counted, stale or outside, exactly once. */
typedef enum ts_population_prior {
    TS_PRIOR_NONE = 0,           /* not counted under (previous only) */
    TS_PRIOR_UNIFORM = 1,        /* the profile's first channel */
    TS_PRIOR_ESTIMATE = 2,
} ts_population_prior;

typedef struct ts_population_record {
    int format;                  /* 1 or 2 */
    uint32_t version;
    uint32_t cycles;
    uint64_t reports_total;
    size_t n;
    double *theta;               /* n, or NULL: no estimate yet */
    /* format 2 */
    ts_population_prior previous_kind;
    double *previous;            /* n, with TS_PRIOR_ESTIMATE */
    uint64_t stale;
    uint64_t outside;
    uint64_t estimated_reports;
    uint64_t last_reports;
    int64_t estimated_at_ms;
    uint64_t out_seq;
} ts_population_record;

/* Bytes the record takes, and the record into `out` (that many bytes). */
size_t ts_population_record_size(const ts_population_record *record);
void ts_population_record_encode(const ts_population_record *record,
                                 unsigned char *out);
/* 0 with the arrays allocated (free with ts_population_record_free), -1
 * for bytes that are not a record (or out of memory, *oom set). */
int ts_population_record_decode(const void *bytes, size_t len,
                                ts_population_record *record, int *oom);
void ts_population_record_free(ts_population_record *record);

/* A detached loop (as ts_population_loop_init_detached makes) from a
 * format-2 record of the profile's grid, replacing `loop` (zeroed, or a
 * loop to drop): counting under `channel` as the record's version and,
 * when not NULL, under `previous` as version - 1, with the record's
 * counters and estimate (taken as it is: it was mixed when it was made).
 * -1 on allocation failure (`loop` as it was). */
int ts_population_resume(ts_population_loop *loop,
                         const ts_population_ops *ops, void *profile,
                         const ts_population_record *record,
                         const void *channel, const void *previous);

/* Counts one published report drawn through channel `version` at event
 * time ts_ms. Returns 1 when the cycle is due (and no job is running). */
int ts_population_observe(ts_population_loop *loop, double lat, double lon,
                          uint32_t version, int64_t ts_ms);

/* 1 when the reports counted so far complete a cycle and no job runs:
 * after a job, the reports that arrived meanwhile may already fill the
 * next cycle, and nothing else would start it until one more arrives. */
int ts_population_due(const ts_population_loop *loop);
/* Moves the cycle's counts into `job` (the loop starts counting afresh).
 * -1 on allocation failure or when nothing was counted; -1 without
 * touching `job` while a job is running. */
int ts_population_close(ts_population_loop *loop, ts_population_job *job);
/* The slow step; touches only the job (and reads the profile). */
void ts_population_run(ts_population_job *job);
/* Takes the job's results into the loop; frees the job. Returns 1 when a
 * new channel was installed, 0 when only the estimate changed, -1 when the
 * job failed (the loop keeps its estimate and channel). */
int ts_population_finish(ts_population_loop *loop, ts_population_job *job);
void ts_population_job_free(ts_population_job *job);

#endif
