/* The iterative Bayesian update (PRIVIC, Definition 2.5) and its
 * generalisation to reports through several channels (GIBU, Definition
 * 2.6): the expectation-maximisation estimate of the true distribution of
 * n cells from counts of reported cells, when each report went through a
 * known channel C[x * n + y] = P(report y | true x).
 *
 *   theta_r+1(x) = theta_r(x) * sum_t sum_y q_t(y) C_t(x, y)
 *                                  / sum_z theta_r(z) C_t(z, y)
 *
 * with q_t the share of all reports that are cell y through channel t. It
 * stops when max_x |theta_r+1(x) - theta_r(x)| <= precision, or after a
 * fixed number of steps (ts_ibu_params.fixed_steps). Only
 * published reports and public channels enter it. */
#ifndef TRACESAN_INFERENCE_IBU_H
#define TRACESAN_INFERENCE_IBU_H

#include <stddef.h>

typedef struct ts_ibu_params {
    double precision;        /* delta_IBU */
    unsigned max_iterations;
    /* 0: iterate until precision, at most max_iterations. N > 0: exactly
     * N steps, a fixed budget whatever the precision (the caller's start
     * then carries the estimate on across calls: PRIVIC's loop starts
     * each cycle from the previous estimate); max_iterations is unused. */
    unsigned fixed_steps;
} ts_ibu_params;

typedef struct ts_ibu_result {
    unsigned iterations;
    double last_change;
    int converged;
} ts_ibu_result;

/* One channel's reports: `counts[y]` reports of cell y (>= 0). */
typedef struct ts_ibu_source {
    const double *channel;   /* n x n, row-major */
    const double *counts;    /* n */
} ts_ibu_source;

/* theta: in, a full-support start (sums to 1); out, the estimate. -1 with
 * err set when there are no reports, a count is negative or not finite,
 * the start is not full-support, or memory ran out. O(n^2) per iteration
 * and source (cells without reports are skipped). */
int ts_gibu(const ts_ibu_source *sources, size_t n_sources, size_t n,
            double *theta, const ts_ibu_params *params,
            ts_ibu_result *result, char *err, size_t errlen);

static inline int ts_ibu(const double *channel, const double *counts,
                         size_t n, double *theta,
                         const ts_ibu_params *params, ts_ibu_result *result,
                         char *err, size_t errlen)
{
    ts_ibu_source source = { channel, counts };
    return ts_gibu(&source, 1, n, theta, params, result, err, errlen);
}

#endif
