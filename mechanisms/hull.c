#include "mechanisms/hull.h"

#include <math.h>
#include <string.h>

/* > 0 when o -> a -> b turns left (counter-clockwise). */
static double turn(ts_vec2 o, ts_vec2 a, ts_vec2 b)
{
    return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

static inline int lex_less(ts_vec2 a, ts_vec2 b)
{
    return a.x < b.x || (a.x == b.x && a.y < b.y);
}

/* Sorts v[0..n) by (x, y) with `tmp` (room for n) as merge buffer: runs
 * of 8 by insertion, then bottom-up merges. Here rather than qsort, whose
 * indirect comparisons cost more than the hull itself; the order is total
 * on finite points with -0.0 normalised, so the result is the same. */
static void sort_lexicographic(ts_vec2 *v, size_t n, ts_vec2 *tmp)
{
    const size_t run = 8;
    for (size_t lo = 0; lo < n; lo += run) {
        size_t hi = lo + run < n ? lo + run : n;
        for (size_t i = lo + 1; i < hi; i++) {
            ts_vec2 e = v[i];
            size_t j = i;
            while (j > lo && lex_less(e, v[j - 1])) {
                v[j] = v[j - 1];
                j--;
            }
            v[j] = e;
        }
    }
    ts_vec2 *from = v, *to = tmp;
    for (size_t width = run; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = mid + width < n ? mid + width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                to[k++] = lex_less(from[j], from[i]) ? from[j++] : from[i++];
            while (i < mid)
                to[k++] = from[i++];
            while (j < hi)
                to[k++] = from[j++];
        }
        ts_vec2 *t = from;
        from = to;
        to = t;
    }
    if (from != v)
        memcpy(v, from, n * sizeof *v);
}

/* Rotate v[0..n) left by `by` places in place (three reversals). */
static void reverse(ts_vec2 *v, size_t lo, size_t hi)
{
    while (lo + 1 < hi) {
        ts_vec2 t = v[lo];
        v[lo++] = v[--hi];
        v[hi] = t;
    }
}

static void rotate_to_smallest(ts_vec2 *v, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (lex_less(v[i], v[best]))
            best = i;
    if (best == 0)
        return;
    reverse(v, 0, best);
    reverse(v, best, n);
    reverse(v, 0, n);
}

/* Akl-Toussaint: drops, in place, points that cannot be hull vertices and
 * returns how many are left (order kept). The extreme points in eight
 * directions, taken in counter-clockwise direction order, span a polygon Q
 * inside the hull; a point strictly left of every edge of Q lies strictly
 * inside the hull and is never a vertex. A delta-set is a compact patch of
 * cells, so mostly its rim is left for the sort. Points within 1e-9 of the
 * extent of Q's edges are kept, a margin far above rounding, so the hull
 * is the one of all the points. Points must be finite. */
static size_t drop_interior_points(ts_vec2 *v, size_t n)
{
    if (n < 16)
        return n;
    /* Directions at multiples of 45 degrees, counter-clockwise from -y. */
    static const ts_vec2 dirs[8] = {{0, -1}, {1, -1}, {1, 0}, {1, 1},
                                     {0, 1},  {-1, 1}, {-1, 0}, {-1, -1}};
    size_t best[8] = {0};
    double top[8];
    for (int d = 0; d < 8; d++)
        top[d] = -INFINITY;
    double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        ts_vec2 p = v[i];
        x_lo = fmin(x_lo, p.x);
        x_hi = fmax(x_hi, p.x);
        y_lo = fmin(y_lo, p.y);
        y_hi = fmax(y_hi, p.y);
        for (int d = 0; d < 8; d++) {
            double h = dirs[d].x * p.x + dirs[d].y * p.y;
            if (h > top[d]) {
                top[d] = h;
                best[d] = i;
            }
        }
    }
    ts_vec2 q[8];
    size_t qn = 0;
    for (int d = 0; d < 8; d++) {
        ts_vec2 p = v[best[d]];
        if (qn == 0 || p.x != q[qn - 1].x || p.y != q[qn - 1].y)
            q[qn++] = p;
    }
    while (qn > 1 && q[qn - 1].x == q[0].x && q[qn - 1].y == q[0].y)
        qn--;
    if (qn < 3)
        return n;
    double span = fmax(x_hi - x_lo, y_hi - y_lo);
    double margin[8];
    for (size_t e = 0; e < qn; e++) {
        ts_vec2 a = q[e], b = q[(e + 1) % qn];
        margin[e] = 1e-9 * span * fmax(fabs(b.x - a.x), fabs(b.y - a.y));
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t e = 0;
        while (e < qn && turn(q[e], q[(e + 1) % qn], v[i]) > margin[e])
            e++;
        if (e < qn)
            v[m++] = v[i];
    }
    return m;
}

size_t ts_convex_hull(ts_vec2 *points, size_t n, ts_vec2 *hull)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(points[i].x) || !isfinite(points[i].y))
            return 0;
        points[i].x += 0.0; /* -0.0 + 0.0 == +0.0 */
        points[i].y += 0.0;
    }
    n = drop_interior_points(points, n);
    sort_lexicographic(points, n, hull);
    /* Exact duplicates would otherwise survive as a zero-length edge when
     * every point is the same one. */
    size_t m = 1;
    for (size_t i = 1; i < n; i++)
        if (points[i].x != points[m - 1].x || points[i].y != points[m - 1].y)
            points[m++] = points[i];
    if (m == 1) {
        hull[0] = points[0];
        return 1;
    }

    /* Lower chain left to right, then upper chain right to left; popping
     * on turn <= 0 drops collinear points. The first point is pushed again
     * at the end and then discarded. */
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        while (k >= 2 && turn(hull[k - 2], hull[k - 1], points[i]) <= 0.0)
            k--;
        hull[k++] = points[i];
    }
    size_t lower = k + 1;
    for (size_t i = m - 1; i-- > 0;) {
        while (k >= lower && turn(hull[k - 2], hull[k - 1], points[i]) <= 0.0)
            k--;
        hull[k++] = points[i];
    }
    /* The sorted order starts the lower chain at the smallest point, which
     * is the output convention already. */
    return k - 1;
}

/* Angular order of edge directions in [0, 2 pi) without atan2: upper half
 * (angle in [0, pi)) first, then by cross product within a half. */
static int upper_half(ts_vec2 d)
{
    return d.y > 0.0 || (d.y == 0.0 && d.x > 0.0);
}

/* -1, 0, 1 as the angle of a is smaller, equal, larger than that of b. */
static int angle_compare(ts_vec2 a, ts_vec2 b)
{
    int ha = upper_half(a), hb = upper_half(b);
    if (ha != hb)
        return ha ? -1 : 1;
    double c = a.x * b.y - a.y * b.x;
    return c > 0.0 ? -1 : (c < 0.0 ? 1 : 0);
}

/* Index of the vertex with the smallest y (then smallest x) of sign * v:
 * the walk along the boundary from there visits edges in increasing angle
 * from 0 to 2 pi. */
static size_t bottom_index(const ts_vec2 *v, size_t n, double sign)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++) {
        double y = sign * v[i].y, by = sign * v[best].y;
        if (y < by || (y == by && sign * v[i].x < sign * v[best].x))
            best = i;
    }
    return best;
}

typedef struct chain {
    const ts_vec2 *v;
    size_t n, start, edges;
    double sign;
} chain;

static chain chain_of(const ts_vec2 *v, size_t n, double sign)
{
    return (chain){v, n, bottom_index(v, n, sign), n >= 2 ? n : 0, sign};
}

/* Vertex reached after `step` edges, without the sign applied. */
static ts_vec2 chain_vertex(const chain *c, size_t step)
{
    return c->v[(c->start + step) % c->n];
}

static ts_vec2 chain_edge(const chain *c, size_t step)
{
    ts_vec2 a = chain_vertex(c, step), b = chain_vertex(c, step + 1);
    /* For sign -1 this is a - b: the exact negation of b - a. */
    return c->sign > 0 ? (ts_vec2){b.x - a.x, b.y - a.y}
                       : (ts_vec2){a.x - b.x, a.y - b.y};
}

/* P + sign * Q by merging the two edge sequences. Each output vertex is
 * formed by a single addition or subtraction of two input vertices, never
 * by accumulating edges, so rounding does not build up around the loop. */
static size_t merge(const ts_vec2 *p, size_t np, const ts_vec2 *q, size_t nq,
                    double sign, ts_vec2 *out)
{
    if (np == 0 || nq == 0)
        return 0;
    chain cp = chain_of(p, np, 1.0), cq = chain_of(q, nq, sign);
    size_t i = 0, j = 0, count = 0;
    for (;;) {
        ts_vec2 a = chain_vertex(&cp, i), b = chain_vertex(&cq, j);
        out[count++] = sign > 0 ? (ts_vec2){a.x + b.x, a.y + b.y}
                                : (ts_vec2){a.x - b.x, a.y - b.y};
        if (i == cp.edges && j == cq.edges)
            break;
        int order;
        if (j == cq.edges)
            order = -1;
        else if (i == cp.edges)
            order = 1;
        else
            order = angle_compare(chain_edge(&cp, i), chain_edge(&cq, j));
        /* Parallel edges of the same direction become one edge of the sum:
         * advancing both keeps the output free of collinear vertices. */
        if (order <= 0)
            i++;
        if (order >= 0)
            j++;
        if (i == cp.edges && j == cq.edges)
            break; /* back at the start vertex */
    }
    rotate_to_smallest(out, count);
    return count;
}

size_t ts_minkowski_sum(const ts_vec2 *p, size_t np, const ts_vec2 *q,
                        size_t nq, ts_vec2 *sum)
{
    return merge(p, np, q, nq, 1.0, sum);
}

size_t ts_sensitivity_hull(const ts_vec2 *hull, size_t h, ts_vec2 *k)
{
    return merge(hull, h, hull, h, -1.0, k);
}
