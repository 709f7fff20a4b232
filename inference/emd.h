/* The earth mover's distance between two distributions on the same points
 * (PRIVIC, Definition 2.7), with the Euclidean ground distance in the
 * points' unit (metres of the grid's projection):
 *
 *   EMD(p, q) = min sum_ij f_ij d(i, j)  over couplings f of p and q.
 *
 * Solved exactly as a transportation problem by GLPK's primal simplex. The
 * mass p and q share, min(p_i, q_i), stays in place first: with a metric
 * ground distance an optimal plan never moves it (moving shared mass only
 * adds distance, by the triangle inequality), so only cells where p
 * exceeds q send and only cells where q exceeds p receive. That keeps the
 * program to at most n^2/4 columns, a few tens of thousands on a 408-cell
 * grid, where the dense n^2 formulation would carry 166,464. */
#ifndef TRACESAN_INFERENCE_EMD_H
#define TRACESAN_INFERENCE_EMD_H

#include <stddef.h>

#include "geometry/plane.h"

typedef struct ts_emd_result {
    double distance;              /* in the points' unit */
    unsigned simplex_iterations;
    size_t sources, sinks;        /* cells left sending / receiving */
} ts_emd_result;

/* p and q: n non-negative finite weights each, each summing to 1 within
 * 1e-6 (they are renormalised exactly before solving). -1 with err set on
 * bad input, when memory runs out, or when the solver does not report an
 * optimum. */
int ts_emd(const ts_vec2 *points, size_t n, const double *p, const double *q,
           ts_emd_result *result, char *err, size_t errlen);

#endif
