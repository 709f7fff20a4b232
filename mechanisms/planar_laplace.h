/* The planar Laplace distribution of geo-indistinguishability:
 * density D_eps(x0)(x) = eps^2 / (2 pi) * exp(-eps * d(x0, x)).
 * Sampled in polar coordinates: angle uniform, radius Gamma(2, 1/eps) as the
 * sum of two exponentials, which keeps a fine resolution over the whole
 * support (docs/geoind.md, "Sampling"). The exact inverse CDF
 * C^-1(p) = -(1/eps) (W_-1((p - 1)/e) + 1) is kept for quantiles; it is not
 * a sampler, because near p = 1 consecutive doubles p map to radii far
 * apart and it never reaches past 40.5/eps. */
#ifndef TRACESAN_MECHANISMS_PLANAR_LAPLACE_H
#define TRACESAN_MECHANISMS_PLANAR_LAPLACE_H

#include "geometry/geo.h"
#include "mechanisms/rng.h"

/* C(r) = 1 - (1 + eps r) e^{-eps r}. */
double ts_planar_laplace_radius_cdf(double eps, double r);

/* Inverse of the radius CDF for p in [0, 1). */
double ts_planar_laplace_radius_icdf(double eps, double p);

/* 1 - C(r) = (1 + eps r) e^{-eps r}, accurate in the far tail. */
double ts_planar_laplace_radius_tail(double eps, double r);

/* The sampler's deterministic core: the radius for two uniforms in (0, 1),
 * NaN outside that domain or for eps not positive and finite. Reachable
 * radii reach past 1400/eps and are at most about 2^-52 (1 + eps r) / eps
 * apart everywhere. */
double ts_planar_laplace_radius_from_uniforms(double eps, double u1,
                                              double u2);

/* Tail mass the mechanisms accept beyond TS_GEO_MAX_NOISE_RADIUS_M: where
 * the displacement nears the antipode the spherical density is singular, so
 * what lands there is the delta of an (eps, delta) statement. */
#define TS_PLANAR_LAPLACE_SPHERE_TAIL 0x1p-64

/* 1 when noise at eps (per metre) puts at most TS_PLANAR_LAPLACE_SPHERE_TAIL
 * of its mass beyond TS_GEO_MAX_NOISE_RADIUS_M, i.e. the mean displacement
 * 2/eps is at most about 208 km; 0 otherwise (profiles are refused). */
int ts_planar_laplace_fits_sphere(double eps);
/* The smallest eps that fits (for messages and docs). */
double ts_planar_laplace_min_sphere_eps(void);

/* One sample: radius (same unit as 1/eps) and angle in [0, 2 pi). */
void ts_planar_laplace_sample(ts_rng *rng, double eps, double *radius,
                              double *angle);

#endif
