#include "mechanisms/polygon.h"

#include <math.h>

static double cross(ts_vec2 a, ts_vec2 b)
{
    return a.x * b.y - a.y * b.x;
}

static ts_vec2 sub(ts_vec2 a, ts_vec2 b)
{
    return (ts_vec2){a.x - b.x, a.y - b.y};
}

/* Twice the signed area, as a fan from v[0]: relative coordinates keep the
 * products small when the polygon sits far from the origin, where the
 * textbook sum of cross(v_i, v_{i+1}) would cancel catastrophically. */
static double twice_signed_area(const ts_vec2 *v, size_t n)
{
    double sum = 0.0;
    for (size_t i = 1; i + 1 < n; i++)
        sum += cross(sub(v[i], v[0]), sub(v[i + 1], v[0]));
    return sum;
}

double ts_polygon_signed_area(const ts_vec2 *v, size_t n)
{
    return n < 3 ? 0.0 : 0.5 * twice_signed_area(v, n);
}

double ts_polygon_area(const ts_vec2 *v, size_t n)
{
    return fabs(ts_polygon_signed_area(v, n));
}

int ts_polygon_centroid(const ts_vec2 *v, size_t n, ts_vec2 *centroid)
{
    if (n < 3)
        return -1;
    /* Area-weighted centroids of the fan triangles, in coordinates relative
     * to v[0] for the same reason as the area. */
    double total = 0.0, sx = 0.0, sy = 0.0;
    for (size_t i = 1; i + 1 < n; i++) {
        ts_vec2 b = sub(v[i], v[0]), c = sub(v[i + 1], v[0]);
        double w = cross(b, c);
        total += w;
        sx += w * (b.x + c.x);
        sy += w * (b.y + c.y);
    }
    if (!(total != 0.0) || !isfinite(total))
        return -1;
    centroid->x = v[0].x + sx / (3.0 * total);
    centroid->y = v[0].y + sy / (3.0 * total);
    return 0;
}

/* For a triangle with vertices a, b, c and (signed) area A,
 *
 *     integral over the triangle of y y^T dy
 *         = A / 12 * (a a^T + b b^T + c c^T + (a + b + c)(a + b + c)^T).
 *
 * (Map the reference triangle {u, v >= 0, u + v <= 1} affinely onto it:
 * y = a + u (b - a) + v (c - a); the reference moments are
 * E[u^2] = E[v^2] = 1/6, E[u v] = 1/12, E[u] = E[v] = 1/3, and expanding
 * E[y y^T] gives the symmetric form above divided by 12.) The fan from v[0]
 * covers a convex polygon exactly, and with signed areas the sum is right
 * for any vertex order; dividing by the total area gives the moment of the
 * uniform distribution. */
int ts_polygon_second_moment(const ts_vec2 *v, size_t n, ts_sym2 *moment)
{
    if (n < 3)
        return -1;
    double total = 0.0, xx = 0.0, xy = 0.0, yy = 0.0;
    ts_vec2 a = v[0];
    for (size_t i = 1; i + 1 < n; i++) {
        ts_vec2 b = v[i], c = v[i + 1];
        double w = 0.5 * cross(sub(b, a), sub(c, a));
        ts_vec2 s = {a.x + b.x + c.x, a.y + b.y + c.y};
        total += w;
        xx += w * (a.x * a.x + b.x * b.x + c.x * c.x + s.x * s.x);
        xy += w * (a.x * a.y + b.x * b.y + c.x * c.y + s.x * s.y);
        yy += w * (a.y * a.y + b.y * b.y + c.y * c.y + s.y * s.y);
    }
    if (!(total != 0.0) || !isfinite(total))
        return -1;
    double scale = 1.0 / (12.0 * total);
    moment->xx = xx * scale;
    moment->xy = xy * scale;
    moment->yy = yy * scale;
    return 0;
}

/* xx * yy - xy^2 with Kahan's fma trick: exact up to one rounding, so a
 * long thin polygon (nearly singular moment) still gets a determinant with
 * full relative accuracy given its moment. */
static double sym2_det(ts_sym2 s)
{
    double w = s.xy * s.xy;
    double err = fma(-s.xy, s.xy, w);
    return fma(s.xx, s.yy, -w) + err;
}

/* Closed-form square root of a 2x2 SPD matrix: with s = sqrt(det S) and
 * t = sqrt(tr S + 2 s), Cayley-Hamilton gives (S + s I)^2 = t^2 S, so
 *     S^{1/2} = (S + s I) / t,
 *     S^{-1/2} = adj(S + s I) / (s t)      (det(S + s I) = s t^2).
 * Every entry is a sum of same-signed terms or a copy of xy: no cancellation
 * beyond the determinant, which sym2_det computes accurately. Equivalent to
 * the eigen-decomposition V diag(lambda^{-1/2}) V^T without an angle. */
int ts_isotropic_transform(ts_sym2 sigma, ts_mat2 *transform, ts_mat2 *inverse)
{
    if (!isfinite(sigma.xx) || !isfinite(sigma.xy) || !isfinite(sigma.yy) ||
        !(sigma.xx > 0.0) || !(sigma.yy > 0.0))
        return -1;
    double det = sym2_det(sigma);
    if (!(det > 0.0) || !isfinite(det))
        return -1;
    double s = sqrt(det);
    double t = sqrt(sigma.xx + sigma.yy + 2.0 * s);
    double st = s * t;
    if (!(st > 0.0) || !isfinite(st))
        return -1;
    *transform = (ts_mat2){(sigma.yy + s) / st, -sigma.xy / st,
                            -sigma.xy / st, (sigma.xx + s) / st};
    *inverse = (ts_mat2){(sigma.xx + s) / t, sigma.xy / t, sigma.xy / t,
                          (sigma.yy + s) / t};
    return 0;
}

int ts_polygon_fan_table(const ts_vec2 *v, size_t n, double *cumulative)
{
    if (n < 3)
        return -1;
    double sum = 0.0;
    for (size_t i = 1; i + 1 < n; i++) {
        double w = 0.5 * cross(sub(v[i], v[0]), sub(v[i + 1], v[0]));
        if (w < 0.0 || !isfinite(w))
            return -1; /* not counter-clockwise convex */
        sum += w;
        cumulative[i - 1] = sum;
    }
    return sum > 0.0 ? 0 : -1;
}

ts_vec2 ts_uniform_in_polygon(const ts_vec2 *v, size_t n,
                              const double *cumulative, ts_rng *rng)
{
    size_t triangles = n - 2;
    double target = ts_rng_uniform_open(rng) * cumulative[triangles - 1];
    /* First triangle whose cumulative area exceeds the target: triangle k
     * is hit with probability area_k / total. */
    size_t lo = 0, hi = triangles - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cumulative[mid] > target)
            hi = mid;
        else
            lo = mid + 1;
    }
    ts_vec2 a = v[0], b = v[lo + 1], c = v[lo + 2];
    /* (u, w) uniform on the unit square; the half with u + w > 1 is the
     * reflection of the reference triangle through (1/2, 1/2), so folding it
     * back gives a uniform point of the triangle with no rejection. */
    double u = ts_rng_uniform_open(rng), w = ts_rng_uniform_open(rng);
    if (u + w > 1.0) {
        u = 1.0 - u;
        w = 1.0 - w;
    }
    return (ts_vec2){a.x + u * (b.x - a.x) + w * (c.x - a.x),
                      a.y + u * (b.y - a.y) + w * (c.y - a.y)};
}

/* Edge i runs from v_i to v_{i+1}; its outward normal (counter-clockwise
 * order: interior on the left) is n = (e.y, -e.x) and its line is
 * n . x = h with h = n . v_i = cross(v_i, v_{i+1}), which is positive
 * exactly when the origin is strictly on the inner side. For a convex
 * polygon every edge line supports it, so p / t is inside iff
 * n_i . p <= t h_i for all i, i.e. gauge(p) = max_i n_i . p / h_i. */
int ts_gauge_prepare(const ts_vec2 *v, size_t n, ts_vec2 *forms)
{
    if (n < 3)
        return -1;
    for (size_t i = 0; i < n; i++) {
        ts_vec2 p = v[i], q = v[(i + 1) % n];
        double h = cross(p, q);
        if (!(h > 0.0) || !isfinite(h))
            return -1;
        forms[i] = (ts_vec2){(q.y - p.y) / h, -(q.x - p.x) / h};
    }
    return 0;
}

double ts_gauge_eval(const ts_vec2 *forms, size_t n, ts_vec2 p)
{
    if (isnan(p.x) || isnan(p.y))
        return NAN;
    if (isinf(p.x) || isinf(p.y))
        return INFINITY; /* inf * 0 in a form would give NaN instead */
    double best = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double g = forms[i].x * p.x + forms[i].y * p.y;
        if (g > best)
            best = g;
    }
    return best;
}
