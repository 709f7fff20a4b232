/* Convex hulls and Minkowski sums of planar point sets (PIM geometry).
 *
 * Output convention for every function here: the vertices of a convex
 * polygon in counter-clockwise order, strictly convex (no vertex lies on
 * the segment of its neighbours; no duplicates), starting at the
 * lexicographically smallest (x, then y) vertex. Degenerate results are
 * kept, not rejected: one point gives 1 vertex, collinear points give the
 * 2 endpoints of their segment. Predicates are plain floating-point cross
 * products (exact for integer-valued coordinates below 2^26); a point
 * within rounding of an edge may be kept or dropped, which moves the hull
 * by a few ulps and never more.
 */
#ifndef TRACESAN_MECHANISMS_HULL_H
#define TRACESAN_MECHANISMS_HULL_H

#include <stddef.h>

#include "mechanisms/polygon.h"

/* Andrew's monotone chain, after an Akl-Toussaint filter that drops points
 * strictly inside the octagon of extreme points (n >= 16). Overwrites
 * `points` (filtered, then sorted by x, then y; -0.0 is normalised to +0.0
 * so the order of equal points cannot matter) and writes the hull to
 * `hull`, which needs room for 2 * n points (working stack).
 * Returns the number of hull vertices: 0 when n == 0 or a coordinate is not
 * finite. O(n log n). */
size_t ts_convex_hull(ts_vec2 *points, size_t n, ts_vec2 *hull);

/* Minkowski sum P + Q = { p + q } of two convex polygons in the output
 * convention above (1- and 2-vertex inputs allowed), by merging their edge
 * sequences by angle: O(np + nq). `sum` needs room for np + nq points;
 * returns the vertex count (0 when np or nq is 0). */
size_t ts_minkowski_sum(const ts_vec2 *p, size_t np, const ts_vec2 *q,
                        size_t nq, ts_vec2 *sum);

/* Sensitivity hull K = Conv{ v_i - v_j } = P + (-P) of a convex polygon P
 * given in the output convention: O(h), `k` needs room for 2 h points.
 * Every vertex is computed as one difference v_i - v_j, so the result is
 * exactly centrally symmetric (vertex m + count/2 is the negation of
 * vertex m) and contains the origin. */
size_t ts_sensitivity_hull(const ts_vec2 *hull, size_t h, ts_vec2 *k);

#endif
