/* The Blahut–Arimoto elastic mechanism on a grid (Biswas & Palamidessi,
 * PRIVIC, Definition 2.9 and Algorithm 2), and O(1) sampling from a row of
 * any channel through Walker's alias tables.
 *
 * A channel maps n input cells to the same n cells as outputs:
 * C[x * n + y] = P(report y | true x). BA with loss parameter beta over the
 * Euclidean distance d (in the caller's unit) iterates
 *
 *   C_t+1(x, y) = c_t(y) exp(-beta d(x, y)) / sum_z c_t(z) exp(-beta d(x, z))
 *   c_t+1(y)    = sum_x pi(x) C_t+1(x, y)
 *
 * from c_0 uniform until max_y |c_t+1(y) - c_t(y)| <= precision. Whatever
 * the prior pi and however many iterations ran, every channel of that form
 * satisfies 2 beta d-privacy: the numerators of two rows differ by at most
 * exp(beta d(x, x')) (triangle inequality) and so do their normalisers. The
 * channel is computed in the log domain so that no entry underflows to 0:
 * a zero would be an output some inputs cannot reach. */
#ifndef TRACESAN_MECHANISMS_BA_CHANNEL_H
#define TRACESAN_MECHANISMS_BA_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "geometry/plane.h"
#include "mechanisms/rng.h"

/* beta * (largest distance) above this makes exp(-beta d) too small to
 * keep every entry of a row a normal double, so such grids are refused. */
#define TS_BA_MAX_EXPONENT 600.0

typedef struct ts_ba_params {
    double beta;            /* per unit of distance, > 0 */
    double unit_m;          /* the distance unit in metres (1000: km) */
    double precision;       /* delta_BA on the output marginal */
    unsigned max_iterations;
    /* 0: converge, accelerated (SQUAREM), to `precision` within
     * max_iterations steps. N > 0: exactly N plain steps from c_0 uniform,
     * Algorithm 2 as the paper runs it (5 a cycle on SF), whatever the
     * precision; max_iterations is then unused. */
    unsigned plain_steps;
} ts_ba_params;

typedef struct ts_ba_result {
    unsigned iterations;
    double last_change;     /* max_y |c_t+1(y) - c_t(y)| at the end */
    int converged;          /* last_change <= precision */
} ts_ba_result;

/* BA for the n cell centres `centres` (metres of a plane) and the prior
 * `prior` (n entries summing to 1, all > 0). Writes the n x n channel into
 * `channel` (row-major) and the final output marginal into `marginal` (may
 * be NULL). -1 with err set for bad parameters or a grid too wide for
 * beta (TS_BA_MAX_EXPONENT); O(n^2) time per iteration, O(n^2) memory in
 * `channel`, O(n) scratch allocated here. */
int ts_ba_channel(const ts_vec2 *centres, size_t n, const double *prior,
                  const ts_ba_params *params, double *channel,
                  double *marginal, ts_ba_result *result, char *err,
                  size_t errlen);

/* Walker's alias table for one distribution over n outcomes: a draw is one
 * uniform index and one uniform comparison, O(1) whatever n. */
typedef struct ts_alias_table {
    size_t n;
    double *accept;         /* probability of keeping column i */
    uint32_t *alias;        /* the outcome drawn otherwise */
} ts_alias_table;

/* Builds the table for weights w[0..n) (>= 0, finite, not all 0; they need
 * not sum to 1). -1 on bad weights or allocation failure. */
int ts_alias_build(ts_alias_table *table, const double *weights, size_t n);
void ts_alias_free(ts_alias_table *table);
uint32_t ts_alias_sample(const ts_alias_table *table, ts_rng *rng);

#endif
