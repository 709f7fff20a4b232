/* The per-user HMM belief of Xiao & Xiong (CCS 2015): prior
 * p- = p+ M^k, the delta-location set (Definition 3.1), drift and the
 * surrogate (Definition 3.2), and the posterior of Equation (1) with the
 * emission probability of the mechanism that released z (Section 5.3).
 *
 * Public data only. The belief is a function of the model and of released
 * outputs (z, their timestamps) and nothing else: the true location enters
 * only ts_delta_set_surrogate and the drift test, whose results are never
 * stored here. Everything below is therefore what an adversary holding the
 * same model computes, and any deterministic transformation of it --
 * pruning, the reset rule, the tie orders -- is post-processing of
 * published data: it cannot weaken the guarantee, which holds for whatever
 * set of cells Delta-X turns out to be.
 *
 * Sparse, bounded belief. Only cells with non-negligible mass are kept, at
 * most `capacity` of them, sorted by cell index, probabilities summing to 1.
 * After every product with M and after every posterior the vector is
 * PRUNED:
 *   1. cells with probability < prune_threshold * (total mass) are dropped
 *      (never the most probable cell), which loses less than
 *      prune_threshold * (support before pruning) of the mass;
 *   2. if more than `capacity` cells remain, the `capacity` most probable
 *      are kept (order: probability descending, then cell index ascending);
 *   3. the rest is renormalised to sum 1.
 * So a user's belief is a flat block of ts_belief_bytes(capacity) bytes
 * that can live in the daemon's per-user state and be persisted as is.
 *
 * Reset. When the belief is empty (a new user, count 0) or more than
 * max_ticks ticks passed since the last release, the prior is the model's
 * initial distribution (pruned the same way). The learner makes that
 * distribution the smoothed visit frequency of the training traces, i.e.
 * the empirical stationary distribution of the chain, which p+ M^k
 * approaches anyway as k grows; the cap bounds the work of one update to
 * max_ticks sparse products.
 *
 * Certified mass. Pruning drops mass that the exact (untruncated) HMM
 * would keep, so the stored, renormalised vector r is not the adversary's
 * prior p. Each function that prunes takes the caller's `certified` c (may
 * be NULL for "treat the belief as exact") and keeps the invariant
 * c * r <= p cell by cell: a reset sets c to the mass the pruned initial
 * distribution kept, a product with M multiplies it by the fraction each
 * pruning kept, a posterior by that fraction times the worst case of where
 * the uncertified mass 1 - c could pull the normaliser (see
 * ts_belief_posterior). The delta-set is then chosen so that c times its
 * share of r is >= 1 - delta, which bounds its mass under p from below;
 * when c < 1 - delta no set of stored cells can be certified and
 * ts_belief_delta_set returns 0 (the release is refused).
 *
 * Delta-location set: the fewest cells whose prior mass is >= 1 - delta,
 * taken in the order probability descending, cell index ascending (so ties
 * are broken deterministically). A relative slack of 1e-12 absorbs
 * rounding, so a set whose mass is exactly 1 - delta in exact arithmetic
 * is not enlarged by one more cell.
 *
 * Posterior: p+[i] ∝ p-[i] * Pr(z | s_i) over the cells of the support,
 * with Pr(z | s_i) evaluated at the centre of cell s_i (metres) by the
 * caller's emission callback in log form (see the adaptors at the end). If
 * every likelihood is zero (log = -inf) the observation carries no usable
 * information under the model and the posterior is the prior (status
 * TS_BELIEF_UNINFORMATIVE). A NaN or +inf likelihood is an error.
 */
#ifndef TRACESAN_INFERENCE_BELIEF_H
#define TRACESAN_INFERENCE_BELIEF_H

#include <stddef.h>
#include <stdint.h>

#include "inference/grid.h"
#include "inference/markov.h"
#include "geometry/plane.h"

#define TS_BELIEF_MAX_CAPACITY (1u << 20)
/* Largest max_ticks: a prediction makes up to max_ticks sparse products,
 * each O(belief cells x row length) (about 44 us on the 12 995-cell
 * GeoLife model), so this bounds one release's work. */
#define TS_BELIEF_MAX_TICKS 100000u
/* Relative slack of the delta-set mass test (see above). */
#define TS_BELIEF_DELTA_SLACK 1e-12

typedef struct ts_belief_entry {
    uint32_t cell;
    uint32_t reserved;       /* 0; keeps prob 8-byte aligned */
    double prob;
} ts_belief_entry;

/* A belief with room for `capacity` cells: allocate ts_belief_bytes bytes
 * and call ts_belief_init. count == 0 means "no belief yet". */
typedef struct ts_belief {
    uint32_t capacity;
    uint32_t count;
    ts_belief_entry entry[]; /* count entries, ascending cell */
} ts_belief;

/* 0 when capacity is 0 or above TS_BELIEF_MAX_CAPACITY. */
size_t ts_belief_bytes(uint32_t capacity);
/* -1 when capacity is invalid. */
int ts_belief_init(ts_belief *belief, uint32_t capacity);

/* Probability of a cell (0 when not in the support); O(log count). */
double ts_belief_prob(const ts_belief *belief, uint32_t cell);

typedef struct ts_belief_params {
    double prune_threshold;  /* in [0, 1): relative mass below which a cell
                                is dropped; 0 keeps every positive cell */
    uint32_t max_ticks;      /* gaps of more ticks reset to the initial
                                distribution; <= TS_BELIEF_MAX_TICKS */
} ts_belief_params;

/* -1 with a message when a parameter is out of range. */
int ts_belief_params_check(const ts_belief_params *params, char *err,
                           size_t errlen);

/* Scratch for the functions below, for models of up to cell_count cells
 * and beliefs of up to `capacity` cells. Shared by all users of a thread;
 * the update functions allocate nothing. */
typedef struct ts_belief_workspace ts_belief_workspace;
ts_belief_workspace *ts_belief_workspace_new(uint32_t cell_count,
                                             uint32_t capacity);
void ts_belief_workspace_free(ts_belief_workspace *ws);

enum {
    TS_BELIEF_UPDATED = 0,
    TS_BELIEF_RESET = 1,          /* predict: prior = initial distribution */
    TS_BELIEF_UNINFORMATIVE = 2,  /* posterior: all likelihoods zero */
    TS_BELIEF_ERROR = -1
};

/* Replaces the belief by the pruned, renormalised vector (cells[i],
 * weights[i]) (n may exceed the capacity; cells distinct and below the
 * workspace's cell_count; weights >= 0, not all 0). Returns the fraction
 * of the mass kept by pruning, in (0, 1], or -1 (belief emptied). */
double ts_belief_assign(ts_belief *belief, const uint32_t *cells,
                        const double *weights, size_t n,
                        double prune_threshold, ts_belief_workspace *ws);

/* The model's initial distribution, pruned. TS_BELIEF_RESET or
 * TS_BELIEF_ERROR (belief emptied). O(cell_count). */
int ts_belief_reset(ts_belief *belief, const ts_markov *model,
                    const ts_belief_params *params, ts_belief_workspace *ws,
                    double *certified);

/* Prior for a release `ticks` model ticks after the previous one (see
 * ts_markov_ticks_between): belief <- belief M^ticks, pruned after every
 * product, in place. Resets instead when the belief is empty or
 * ticks > max_ticks; ticks == 0 leaves it unchanged. Returns
 * TS_BELIEF_UPDATED, TS_BELIEF_RESET, or TS_BELIEF_ERROR (model larger
 * than the workspace, corrupt belief; the belief is emptied so the next
 * prediction resets). O(ticks * support * row length). */
int ts_belief_predict(ts_belief *belief, const ts_markov *model,
                      uint64_t ticks, const ts_belief_params *params,
                      ts_belief_workspace *ws, double *certified);

/* Delta-location set of the prior in `belief`: writes its cells to
 * cells[] (room for belief->count) in selection order and returns how
 * many (>= 1), chosen so that certified * (its share of the belief) >= 1 - delta.
 * 0 when the belief is empty, delta is not in [0, 1), certified is not in
 * (0, 1], or certified < 1 - delta (no set can be certified).
 * O(count + |set| log count). */
size_t ts_belief_delta_set(const ts_belief *belief, double delta,
                           double certified, uint32_t *cells,
                           ts_belief_workspace *ws);

/* Drift test: 1 when `cell` is in the set, else 0. Always n comparisons
 * (no early exit), so its time does not tell the cell's rank. */
int ts_delta_set_contains(const uint32_t *cells, size_t n, uint32_t cell);

/* Surrogate (Definition 3.2): the cell of the set whose centre is nearest
 * to `truth` (metres of the grid's plane), ties to the lower cell index.
 * -1 when n == 0 or truth is not finite. O(n), the same work wherever truth
 * lies; the release runs it whether or not the point drifted. */
int ts_delta_set_surrogate(const ts_grid *grid, const uint32_t *cells,
                           size_t n, ts_vec2 truth, uint32_t *surrogate);

/* log Pr(z | s) per square metre for a release z when the user is at s
 * (metres). Must be a pure function of its arguments. */
typedef double (*ts_log_emission_fn)(const void *ctx, ts_vec2 z,
                                     ts_vec2 s);

/* Posterior of Equation (1), in place, pruned with params->prune_threshold.
 * Returns TS_BELIEF_UPDATED, TS_BELIEF_UNINFORMATIVE (belief unchanged) or
 * TS_BELIEF_ERROR (empty belief, non-finite z, NaN or +inf likelihood;
 * belief unchanged). O(count) emission calls. */
int ts_belief_posterior(ts_belief *belief, const ts_grid *grid, ts_vec2 z,
                        ts_log_emission_fn log_emission,
                        const void *emission_ctx,
                        const ts_belief_params *params,
                        ts_belief_workspace *ws, double *certified);

/* The same with the emission evaluated at where[i] for belief entry i
 * instead of its cell's centre (where == NULL: the centres). For a
 * mechanism that releases some cells from another position -- the
 * surrogate of a cell outside the delta-location set -- the likelihood of
 * such a cell is the emission at that position. */
int ts_belief_posterior_at(ts_belief *belief, const ts_grid *grid,
                           const ts_vec2 *where, ts_vec2 z,
                           ts_log_emission_fn log_emission,
                           const void *emission_ctx,
                           const ts_belief_params *params,
                           ts_belief_workspace *ws, double *certified);

/* belief <- weight * belief + (1 - weight) * the model's initial
 * distribution, pruned (weight in [0, 1]; an empty belief or weight 0
 * resets). The prior after a break in a trace when the model says where
 * users resume: mostly where they stopped, otherwise anywhere the
 * initial distribution puts them. TS_BELIEF_UPDATED, TS_BELIEF_RESET or
 * TS_BELIEF_ERROR (belief emptied). O(cell_count). */
int ts_belief_mix_initial(ts_belief *belief, const ts_markov *model,
                          double weight, const ts_belief_params *params,
                          ts_belief_workspace *ws, double *certified);

#endif
