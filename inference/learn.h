/* Learning Markov mobility models from traces (Xiao & Xiong, CCS 2015,
 * Section 6: a "popular" model from all users, "personal" models per
 * user).
 *
 * 1. Resampling. Each user's trace is read at the model's tick boundaries
 *    (multiples of tick_s since the Unix epoch, the boundaries of
 *    ts_markov_ticks_between). The position at a boundary between two
 *    consecutive fixes is their linear interpolation (in degrees); fixes
 *    more than max_gap_s apart break the trace (no position for the
 *    boundaries between them), and so does a boundary position outside the
 *    region. Duplicate timestamps: the later fix wins.
 * 2. Counting. Consecutive boundaries with a position each give one
 *    transition (cell at k -> cell at k + 1); each position is one visit.
 *    A transition to a cell that is not reachable (below) is dropped and
 *    counted as `unreachable`: the model declares it impossible (a GPS
 *    glitch or a speed above the configured maximum).
 * 3. Smoothing. Cell j is reachable from cell i when the two squares are at
 *    most max_speed_mps * tick_s apart (closest points), so i itself and
 *    its 8 neighbours always are. Row i gets
 *        M[i][j] = (count(i, j) + alpha) / (n_i + alpha * |R_i|)
 *    for the reachable cells R_i (clipped to the grid) and 0 elsewhere. A
 *    row without data is a self-loop with one pseudo-count plus the same
 *    smoothing; in a personal model it is left empty, which means the
 *    popular model's row (ts_markov.fallback), so a personal model costs
 *    only the rows its user visited.
 *    That is TS_LEARN_SMOOTH_UNIFORM; TS_LEARN_SMOOTH_DISPLACEMENT backs
 *    off to the displacement kernel instead (ts_learn_smoothing below).
 * 4. Initial distribution: visit frequencies, smoothed:
 *    (visits_i + alpha) / (V + alpha * cells) for the popular model; a
 *    personal model spreads its alpha * cells pseudo-visits by the popular
 *    initial distribution instead of uniformly.
 *
 * Privacy note: a model is derived from raw traces and the paper assumes
 * the adversary knows it. Personal models reveal a user's visit and
 * transition frequencies at cell resolution; treat them as that user's
 * data.
 */
#ifndef TRACESAN_INFERENCE_LEARN_H
#define TRACESAN_INFERENCE_LEARN_H

#include <stddef.h>
#include <stdint.h>

#include "inference/grid.h"
#include "inference/markov.h"

/* One fix. Input arrays are sorted by user, then by ts_s. Points with a
 * non-finite coordinate or time are skipped. */
typedef struct ts_learn_point {
    uint32_t user;            /* dense index, < user_count */
    double ts_s;              /* Unix seconds */
    double lat, lon;          /* WGS84 degrees */
} ts_learn_point;

/* How a row's pseudo-counts are spread over its reachable cells. */
typedef enum ts_learn_smoothing {
    /* alpha per reachable cell, evenly (the first learner; a row without
     * data is a self-loop plus the same): at a 60 s tick a sparse row
     * moves 14 % of its mass evenly over 2 km in every tick. */
    TS_LEARN_SMOOTH_UNIFORM = 0,
    /* Back-off to the displacement kernel: `backoff` pseudo-counts spread
     * by g(j - i), the share of all training transitions (every user,
     * every cell) that moved by that offset, itself smoothed by alpha per
     * offset; a row without data is the kernel. Most of the kernel's mass
     * stays put or moves one cell, as people do. */
    TS_LEARN_SMOOTH_DISPLACEMENT = 1,
} ts_learn_smoothing;

typedef struct ts_learn_params {
    double tick_s;            /* > 0 */
    double max_speed_mps;     /* > 0 */
    double max_gap_s;         /* > 0 */
    double alpha;             /* pseudo-count per reachable cell (uniform)
                                 or per offset of the kernel
                                 (displacement), >= 0; 0: no smoothing */
    ts_learn_smoothing smoothing;
    double backoff;           /* displacement: pseudo-counts per row that
                                 follow the kernel, >= 0 */
} ts_learn_params;

/* Upper bound on cells * (reachable cells per row): keeps a model below
 * about 3 GB. */
#define TS_LEARN_MAX_NNZ (1ull << 28)
/* Most positions one gap between two fixes (at most max_gap_s) may be
 * resampled into: max_gap_s / tick_s is refused above it. */
#define TS_LEARN_MAX_GAP_TICKS 1000000.0
/* Most resampled positions (and breaks) of one learning run, 1 GiB of
 * cells: a trace of hostile timestamps is refused, not resampled until
 * memory runs out. */
#define TS_LEARN_MAX_POSITIONS ((size_t)1 << 28)

typedef struct ts_learn_stats {
    uint64_t points;          /* fixes read */
    uint64_t skipped;         /* fixes with a non-finite field */
    uint64_t positions;       /* boundary positions inside the region */
    uint64_t outside;         /* boundary positions outside the region */
    uint64_t gaps;            /* consecutive fixes more than max_gap_s apart */
    uint64_t transitions;     /* transitions counted */
    uint64_t unreachable;     /* transitions dropped as unreachable */
    uint32_t users;           /* users with at least one position */
    uint32_t reachable;       /* cells reachable in one tick (interior) */
} ts_learn_stats;

/* A learned model: `markov` is a view over the owned arrays. A personal
 * model of a user without any transition is empty (markov.cell_count 0,
 * no arrays). */
typedef struct ts_learned {
    ts_markov markov;
    uint64_t *row_start;
    uint32_t *col;
    double *prob;
    double *initial;
    uint64_t transitions;
    uint64_t visits;
} ts_learned;

void ts_learned_free(ts_learned *learned);

/* -1 with a message when a parameter is out of range: tick_s below
 * TS_MARKOV_MIN_TICK_S, max_gap_s / tick_s above TS_LEARN_MAX_GAP_TICKS,
 * a non-finite or negative value. */
int ts_learn_params_check(const ts_learn_params *params, char *err,
                          size_t errlen);

/* 1 when `to` is reachable from `from` in one tick (squares at most
 * reach_m apart). */
int ts_learn_reachable(const ts_grid *grid, double reach_m, uint32_t from,
                       uint32_t to);

/* The popular model from all points. -1 with a message on bad parameters,
 * unsorted input, no position inside the region, a model too large
 * (TS_LEARN_MAX_NNZ) or an allocation failure. stats may be NULL. */
int ts_learn_popular(const ts_grid *grid, const ts_learn_params *params,
                     const ts_learn_point *points, size_t n,
                     ts_learned *out, ts_learn_stats *stats, char *err,
                     size_t errlen);

/* Held-out fit of a model: the points' traces resampled and counted as
 * the learner does (same params), scored under `model` (same grid and
 * tick). A personal model with a fallback is scored through it. */
typedef struct ts_learn_fit {
    uint64_t transitions;     /* held-out transitions scored */
    uint64_t impossible;      /* of which the model gives probability 0 */
    double log_lik;           /* sum of ln M[i][j] over the possible ones */
    uint64_t visits;          /* held-out positions */
    double initial_log_lik;   /* sum of ln initial[i] over them */
} ts_learn_fit;

int ts_learn_fit_model(const ts_grid *grid, const ts_learn_params *params,
                       const ts_markov *model, const ts_learn_point *points,
                       size_t n, ts_learn_fit *fit, char *err,
                       size_t errlen);

/* Personal models out[0 .. user_count) (user indices of the points must be
 * below user_count), with `popular` (same grid and tick, no fallback) as
 * the fallback for rows without data (out[u].markov.fallback = popular,
 * which must outlive them) and the prior of the initial distribution. */
int ts_learn_personal(const ts_grid *grid, const ts_learn_params *params,
                      const ts_learn_point *points, size_t n,
                      uint32_t user_count, const ts_markov *popular,
                      ts_learned *out, char *err, size_t errlen);

#endif
