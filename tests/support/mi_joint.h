/* Random training joints P(U, X) for the MI-optimal channel's tests: each
 * user a cloud of visits around its own home cell. */
#ifndef TRACESAN_TESTS_SUPPORT_MI_JOINT_H
#define TRACESAN_TESTS_SUPPORT_MI_JOINT_H

#include <math.h>
#include <stddef.h>

#include "geometry/plane.h"
#include "mechanisms/rng.h"

/* k x n, row-major, summing to 1: user u's weight at cell x falls as
 * exp(-d(x, home) / spread_m), times a uniform factor in [0.2, 1.2); a
 * share `zero_share` of the cells other than the home is never visited. */
static inline void ts_test_mi_joint(ts_rng *rng, const ts_vec2 *c, size_t n,
                                    size_t k, double spread_m,
                                    double zero_share, double *joint)
{
    double total = 0.0;
    for (size_t u = 0; u < k; u++) {
        size_t home = (size_t)(ts_rng_uniform_open(rng) * (double)n) % n;
        for (size_t x = 0; x < n; x++) {
            double w = exp(-hypot(c[x].x - c[home].x, c[x].y - c[home].y) /
                           spread_m) *
                       (0.2 + ts_rng_uniform_open(rng));
            if (x != home && ts_rng_uniform_open(rng) < zero_share)
                w = 0.0;
            joint[u * n + x] = w;
            total += w;
        }
    }
    for (size_t i = 0; i < n * k; i++)
        joint[i] /= total;
}

#endif
