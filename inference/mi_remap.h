/* An identity channel that generalises by construction: planar Laplace on
 * the grid, each report then moved to the cell the population's posterior
 * puts nearest in expected distance (the optimal remap of
 * Chatzikokolakis, ElSalamouny & Palamidessi, "Efficient utility
 * improvement for location privacy", PETS 2017), with the Laplace scale
 * chosen so that the remapped channel meets the distortion bound.
 *
 * Why it is a candidate next to the MI-optimal channel. The MI optimum
 * is fitted to which user was where in the training trace: on a time
 * split, later check-ins fall where the fitted rows never looked, and its
 * held-out Bayes error drops far below its in-sample one. The remap uses
 * only the population's location distribution, which moves much less
 * between a trace's past and its future. Remapping is post-processing,
 * so it costs nothing in what the Laplace step hides; it cuts the
 * distortion at a given scale, so at equal distortion the Laplace step
 * can be wider, and reports of different users are pooled at the places
 * the population frequents. `tracesan optimize` judges it by the same
 * held-out Bayes error as every smoothing of the MI channel and keeps
 * whichever wins.
 *
 * The channel: K(x, z') = exp(-eps d(x, z')) / sum_z exp(-eps d(x, z))
 * between cell centres, r(z') = argmin_r sum_x p(x) K(x, z') cost(x, r),
 * C(x, z) = sum_{z' : r(z') = z} K(x, z'), with p(x) the problem's
 * location marginal and cost as in ts_mi_problem. The scale eps is found
 * by bisection on log eps: the smallest eps tried whose E[d] <= L.
 *
 * Pure: no I/O, no globals. */
#ifndef TRACESAN_INFERENCE_MI_REMAP_H
#define TRACESAN_INFERENCE_MI_REMAP_H

#include <stddef.h>

#include "inference/mi_problem.h"

/* Writes the n x n channel and the Laplace scale used (per metre).
 * Ignores problem->geoind_epsilon and row_entropy_weight (a remapped grid
 * Laplace is not checked for geo-ind here: only the information-
 * theoretic case uses it). -1 with err on bad input, when memory runs
 * out, or when L is below the least distortion any remap reaches (the
 * message says that least). */
int ts_mi_remap_laplace(const ts_mi_problem *problem, double *channel,
                        double *epsilon_per_m, char *err, size_t errlen);

#endif
