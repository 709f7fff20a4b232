/* Baseline Laplace mechanism on a delta-location set (Xiao & Xiong,
 * CCS 2015, Section 10.1, Algorithm 3): independent Laplace noise on each
 * axis with scale (delta_x + delta_y) / eps, where delta_x and delta_y are
 * the extents of the set along the axes.
 *
 * Same conventions as mechanisms/pim.h: metres of a local planar
 * projection, unitless eps, and each cell stands for its square, so the
 * extents are (max - min of the centres) + cell_m on each axis. Any two
 * points s1, s2 inside the squares then differ by at most delta_x and
 * delta_y per axis, and
 *     f(z | s1) / f(z | s2) <= exp((|dx| + |dy|) / scale) <= e^eps.
 * One cell still gets noise of scale 2 cell_m / eps.
 */
#ifndef TRACESAN_MECHANISMS_LM_DELTA_H
#define TRACESAN_MECHANISMS_LM_DELTA_H

#include <stddef.h>

#include "mechanisms/polygon.h"
#include "mechanisms/rng.h"

/* Axis extents of the cells' squares, metres. -1 on n == 0, a non-finite
 * centre or a cell size that is not positive and finite. O(n). */
int ts_lm_delta_sensitivity(const ts_vec2 *centres, size_t n, double cell_m,
                            double *delta_x, double *delta_y);

/* Per-axis Laplace scale (delta_x + delta_y) / eps, metres; NaN when an
 * argument is not positive and finite. */
double ts_lm_delta_scale(double delta_x, double delta_y, double eps);

/* z = released + (Lap(scale), Lap(scale)). -1 (z untouched) when scale is
 * not positive and finite or the result is not finite. */
int ts_lm_delta_sample(ts_vec2 released, double scale, ts_rng *rng,
                       ts_vec2 *z);

/* Emission density per square metre: product of the two Laplace densities
 *     f(z | s) = (1 / (2 scale))^2 exp(-(|z.x - s.x| + |z.y - s.y|) / scale),
 * and its logarithm. NaN when scale is not positive and finite. */
double ts_lm_delta_log_density(double scale, ts_vec2 z, ts_vec2 s);
double ts_lm_delta_density(double scale, ts_vec2 z, ts_vec2 s);

/* ts_lm_delta_log_density with the scale used for the release, as
 * inference/belief.h's ts_log_emission_fn. */
typedef struct ts_lm_emission {
    double scale;
} ts_lm_emission;
double ts_lm_log_emission(const void *ctx, ts_vec2 z, ts_vec2 s);

#endif
