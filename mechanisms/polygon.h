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

#include "mechanisms/rng.h"

typedef struct pim_vec2 {
    double x, y;
} pim_vec2;

/* Row-major 2x2 matrix [[a, b], [c, d]]. */
typedef struct pim_mat2 {
    double a, b, c, d;
} pim_mat2;

/* Symmetric 2x2 matrix [[xx, xy], [xy, yy]] (second moments). */
typedef struct pim_sym2 {
    double xx, xy, yy;
} pim_sym2;

pim_vec2 pim_mat2_apply(pim_mat2 m, pim_vec2 v);
double pim_mat2_det(pim_mat2 m);

/* Shoelace area: positive for counter-clockwise vertices. 0 for n < 3. */
double pim_polygon_signed_area(const pim_vec2 *v, size_t n);
double pim_polygon_area(const pim_vec2 *v, size_t n);

/* Centroid of the region. -1 when the area is zero (n < 3 or collinear). */
int pim_polygon_centroid(const pim_vec2 *v, size_t n, pim_vec2 *centroid);

/* Exact E[y y^T] about the ORIGIN for y uniform on the polygon (for a
 * centrally symmetric polygon centred at 0 this is the covariance).
 * -1 when the area is zero. */
int pim_polygon_second_moment(const pim_vec2 *v, size_t n, pim_sym2 *moment);

/* T = sigma^{-1/2} (symmetric positive definite) and its inverse
 * T^{-1} = sigma^{1/2}, so that T sigma T^T = I. -1 when sigma is not
 * positive definite or not finite. */
int pim_isotropic_transform(pim_sym2 sigma, pim_mat2 *transform,
                            pim_mat2 *inverse);

/* Triangle-fan table for pim_uniform_in_polygon: cumulative[k] is the area
 * of the triangles (v0, v1, v2) ... (v0, v_{k+1}, v_{k+2}); n - 2 entries
 * (the last one is the polygon's area). Requires a counter-clockwise convex
 * polygon with n >= 3; -1 otherwise (or if the area is zero). */
int pim_polygon_fan_table(const pim_vec2 *v, size_t n, double *cumulative);

/* One point uniform on the polygon, using the table above (so n >= 3 and a
 * successful pim_polygon_fan_table): O(log n). */
pim_vec2 pim_uniform_in_polygon(const pim_vec2 *v, size_t n,
                                const double *cumulative, ts_rng *rng);

/* Gauge (Minkowski functional) of a convex counter-clockwise polygon with
 * the origin strictly inside: ||p|| = min { t >= 0 : p in t * polygon }.
 * For a centrally symmetric polygon this is the norm whose unit ball is
 * the polygon (the K-norm).
 *
 * pim_gauge_prepare writes one linear form per edge, forms[i] = n_i / h_i
 * for the edge line n_i . x = h_i (n_i the outward normal), so that
 * pim_gauge_eval(p) = max_i forms[i] . p. -1 when n < 3 or the origin is
 * not strictly inside. */
int pim_gauge_prepare(const pim_vec2 *v, size_t n, pim_vec2 *forms);
double pim_gauge_eval(const pim_vec2 *forms, size_t n, pim_vec2 p);

#endif
