/* The identity-protecting channel of Romanelli, Chatzikokolakis,
 * Palamidessi & Piantanida (CSF 2020), solved exactly on a grid: the
 * channel C[x * n + z] = P(report cell z | true cell x) that minimises the
 * mutual information I(U; Z) between a user's identity U and the report Z,
 * subject to the expected distortion E[d(X, Z)] <= L (metres between cell
 * centres), and optionally to epsilon-geo-indistinguishability,
 * C(x, z) <= exp(eps d(x, x')) C(x', z) for all x, x', z.
 *
 * I(U; Z) is convex in C (it is convex in P(Z|U), which is linear in C),
 * and every constraint is linear, so a first-order method with a duality
 * gap reaches the optimum with a certificate: the gap bounds how far the
 * returned I(U; Z) is above the optimum. */
#ifndef TRACESAN_INFERENCE_MI_OPTIMAL_H
#define TRACESAN_INFERENCE_MI_OPTIMAL_H

#include <stddef.h>

#include "inference/mi_problem.h"

/* Writes the n x n channel. Cells no training row visits (P(x) = 0) do not
 * enter I(U; Z) or E[d]. Without geo-ind they get the row of the nearest
 * visited cell (lowest index on ties): their reports are distributed like
 * that cell's, so they add no output and no identifying power. With
 * geo-ind their rows are LP variables like every other, since the
 * constraints tie them to their neighbours; they come out as whatever
 * feasible rows the optimum holds. (No visited cell at all cannot happen:
 * the joint sums to 1.) 0, or -1 with err on bad input, allocation
 * failure, an infeasible or too large geo-ind problem or an LP failure;
 * not converging within max_iterations is not an error
 * (result->converged says it). Deterministic: no randomness is used. */
int ts_mi_optimize(const ts_mi_problem *problem, const ts_mi_params *params,
                   double *channel, ts_mi_result *result, char *err,
                   size_t errlen);

#endif
