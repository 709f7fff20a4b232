/* The planar Laplace distribution of geo-indistinguishability:
 * density D_eps(x0)(x) = eps^2 / (2 pi) * exp(-eps * d(x0, x)).
 * Sampled in polar coordinates: angle uniform, radius from the exact inverse
 * CDF  C^-1(p) = -(1/eps) (W_-1((p - 1)/e) + 1), W_-1 the lower branch of
 * Lambert W (GSL). */
#ifndef TRACESAN_MECHANISMS_PLANAR_LAPLACE_H
#define TRACESAN_MECHANISMS_PLANAR_LAPLACE_H

#include "mechanisms/rng.h"

/* C(r) = 1 - (1 + eps r) e^{-eps r}. */
double ts_planar_laplace_radius_cdf(double eps, double r);

/* Inverse of the radius CDF for p in [0, 1). */
double ts_planar_laplace_radius_icdf(double eps, double p);

/* One sample: radius (same unit as 1/eps) and angle in [0, 2 pi). */
void ts_planar_laplace_sample(ts_rng *rng, double eps, double *radius,
                              double *angle);

#endif
