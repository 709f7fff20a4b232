/* Convex polygons in the plane: the measure-theoretic pieces PIM needs.
 *
 * Everything here works on a polygon given as its vertices in
 * counter-clockwise order (as produced by mechanisms/hull.h), in whatever
 * planar unit the caller uses (PIM uses metres of a local projection). The
 * uniform distribution on the polygon is the common thread: its area, its
 * exact second moment E[y y^T] (closed form, no sampling), the isotropic
 * transform that turns that moment into the identity, a sampler, and the
 * gauge (Minkowski functional) that the K-norm mechanism's density uses.
 */
#ifndef TRACESAN_MECHANISMS_POLYGON_H
#define TRACESAN_MECHANISMS_POLYGON_H

#include <stddef.h>

#include "geometry/plane.h"
#include "mechanisms/rng.h"


/* Shoelace area: positive for counter-clockwise vertices. 0 for n < 3. */
double ts_polygon_signed_area(const ts_vec2 *v, size_t n);
double ts_polygon_area(const ts_vec2 *v, size_t n);

/* Centroid of the region. -1 when the area is zero (n < 3 or collinear). */
int ts_polygon_centroid(const ts_vec2 *v, size_t n, ts_vec2 *centroid);

/* Exact E[y y^T] about the ORIGIN for y uniform on the polygon (for a
 * centrally symmetric polygon centred at 0 this is the covariance).
 * -1 when the area is zero. */
int ts_polygon_second_moment(const ts_vec2 *v, size_t n, ts_sym2 *moment);

/* T = sigma^{-1/2} (symmetric positive definite) and its inverse
 * T^{-1} = sigma^{1/2}, so that T sigma T^T = I. -1 when sigma is not
 * positive definite or not finite. */
int ts_isotropic_transform(ts_sym2 sigma, ts_mat2 *transform,
                           ts_mat2 *inverse);

/* Triangle-fan table for ts_uniform_in_polygon: cumulative[k] is the area
 * of the triangles (v0, v1, v2) ... (v0, v_{k+1}, v_{k+2}); n - 2 entries
 * (the last one is the polygon's area). Requires a counter-clockwise convex
 * polygon with n >= 3; -1 otherwise (or if the area is zero). */
int ts_polygon_fan_table(const ts_vec2 *v, size_t n, double *cumulative);

/* One point uniform on the polygon, using the table above (so n >= 3 and a
 * successful ts_polygon_fan_table): O(log n). */
ts_vec2 ts_uniform_in_polygon(const ts_vec2 *v, size_t n,
                              const double *cumulative, ts_rng *rng);

/* Gauge (Minkowski functional) of a convex counter-clockwise polygon with
 * the origin strictly inside: ||p|| = min { t >= 0 : p in t * polygon }.
 * For a centrally symmetric polygon this is the norm whose unit ball is
 * the polygon (the K-norm).
 *
 * ts_gauge_prepare writes one linear form per edge, forms[i] = n_i / h_i
 * for the edge line n_i . x = h_i (n_i the outward normal), so that
 * ts_gauge_eval(p) = max_i forms[i] . p. -1 when n < 3 or the origin is
 * not strictly inside. */
int ts_gauge_prepare(const ts_vec2 *v, size_t n, ts_vec2 *forms);
double ts_gauge_eval(const ts_vec2 *forms, size_t n, ts_vec2 p);

#endif
