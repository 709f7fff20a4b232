/* Identity channels that generalise: the smoothed joint P(U, X) a channel
 * is fitted to, the figures that judge a channel on a set of true points
 * it was or was not fitted on, and the guard on the rows of cells the
 * training trace never visited.
 *
 * Why smooth. The exact MI-optimal channel fits the training joint: cells
 * with little or no training mass get rows that were never constrained,
 * or rows tuned to the few training users seen there, and a user who
 * later visits the next street over is released through a row that
 * points at him. The seed paper (Romanelli et al., CSF 2020) learns its
 * channel and judges it on held-out data for this reason.
 *
 * The smoothed joint, for a bandwidth h (metres) and a back-off weight b:
 *
 *   P_s(u, x) = (1 - b) K_h[P(u, .)](x) + b P(u) Q(x),
 *
 * K_h spreads each (user, cell) count over the cells within 3 h of it with
 * Gaussian weights exp(-d^2 / 2 h^2) (normalised per source cell, so a
 * user's mass is kept); h = 0 leaves the counts. Q is the population's
 * smoothed location distribution mixed half and half with the uniform one
 * over the grid, so that every cell carries mass and gets a row fitted
 * to it. A cell that no kernel reaches has P_s(u | x) = P(u): the
 * population's identity distribution, no more identifying than knowing
 * nothing.
 *
 * Pure: no I/O, no globals. */
#ifndef TRACESAN_INFERENCE_MI_SMOOTH_H
#define TRACESAN_INFERENCE_MI_SMOOTH_H

#include <stddef.h>

#include "geometry/plane.h"

/* counts: users x cells, non-negative, not all zero; out: users x cells,
 * sums to 1. bandwidth_m >= 0, 0 <= backoff <= 1. -1 with err on bad
 * input or when memory runs out. */
int ts_mi_smooth_joint(const ts_vec2 *centres, size_t cells, size_t users,
                       const double *counts, double bandwidth_m,
                       double backoff, double *out, char *err,
                       size_t errlen);

/* How a channel does on a joint of true points: I(U; Z) in bits, the
 * Bayes error of the adversary who knows that joint and the channel
 * (1 - sum_z max_u P(u, z): the best any guess from the report can do),
 * and the mean distortion over the points (metres; cost as in
 * ts_mi_problem, NULL: between centres). joint: users x cells, sums to 1
 * (it need not be the joint the channel was fitted on). */
typedef struct ts_mi_figures {
    double mi_bits;
    double bayes_error;
    double distortion_m;
} ts_mi_figures;

int ts_mi_figures_of(const double *joint, size_t cells, size_t users,
                     const ts_vec2 *centres, const double *cost,
                     const double *channel, ts_mi_figures *out, char *err,
                     size_t errlen);

/* The reference a channel is judged against at equal distortion: planar
 * Laplace on the grid (rows exp(-eps d(x, z)) normalised over the cells)
 * at the eps whose mean distortion over the joint's points (cost as for
 * ts_mi_figures_of) is distortion_m (or the nearest it reaches), and its
 * figures on that joint. epsilon_per_m may be NULL. -1 with err on bad
 * input or when memory runs out. */
int ts_mi_laplace_reference(const double *joint, size_t cells, size_t users,
                            const ts_vec2 *centres, const double *cost,
                            double distortion_m, ts_mi_figures *out,
                            double *epsilon_per_m, char *err, size_t errlen);

/* The guard on rows of cells without training mass (train_joint(., x) all
 * 0): such a row must tell an adversary who knows the training joint and
 * the channel no more about who sent a report, on average, than a report
 * of the training population does. With D(z) = KL(P(U | z) || P(U)) and
 * V(z) = max_u P(u | z) under the training joint:
 *
 *   sum_z C(x, z) D(z) <= sum_z P(z) D(z) = I(U; Z),
 *   sum_z C(x, z) V(z) <= sum_z P(z) V(z) = 1 - Bayes error.
 *
 * A row that breaks either is mixed with the report of the output nearest
 * to x whose D is at most half the population's and whose V at most the
 * population's (its posterior is close to the prior), else of the nearest
 * output within the population's on both, else with P(Z) itself (which
 * meets both with equality), by the least weight that restores both. The
 * rows of cells without training mass do not change P(U | z) (they carry
 * no training mass), so the fix is exact and one row at a time.
 * rows_fixed: how many rows were mixed. -1 with err on bad input or when
 * memory runs out. */
int ts_mi_guard_rows(const double *train_joint, size_t cells, size_t users,
                     const ts_vec2 *centres, double *channel,
                     size_t *rows_fixed, char *err, size_t errlen);

#endif
