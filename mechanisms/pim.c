#include "mechanisms/pim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sizes for n cells: the centres' hull needs a 2n stack, the squares' hull
 * has at most n + 4 vertices, and K at most twice that. */
#define HULL_ROOM(n) ((n) + 4)
#define K_ROOM(n) (2 * ((n) + 4))

void pim_context_init(pim_context *ctx)
{
    memset(ctx, 0, sizeof *ctx);
}

void pim_context_free(pim_context *ctx)
{
    free(ctx->hull);
    free(ctx->k);
    free(ctx->k_iso);
    free(ctx->k_iso_forms);
    free(ctx->k_iso_fan);
    free(ctx->scratch);
    pim_context_init(ctx);
}

static int reserve(pim_context *ctx, size_t n)
{
    if (n <= ctx->capacity)
        return 0;
    /* 3n scratch: n sorted centres followed by the 2n hull stack. */
    if (n > (SIZE_MAX / sizeof(pim_vec2) - 8) / 3)
        return -1;
    pim_context_free(ctx);
    ctx->scratch = malloc(3 * n * sizeof *ctx->scratch);
    ctx->hull = malloc(HULL_ROOM(n) * sizeof *ctx->hull);
    ctx->k = malloc(K_ROOM(n) * sizeof *ctx->k);
    ctx->k_iso = malloc(K_ROOM(n) * sizeof *ctx->k_iso);
    ctx->k_iso_forms = malloc(K_ROOM(n) * sizeof *ctx->k_iso_forms);
    ctx->k_iso_fan = malloc(K_ROOM(n) * sizeof *ctx->k_iso_fan);
    if (!ctx->scratch || !ctx->hull || !ctx->k || !ctx->k_iso ||
        !ctx->k_iso_forms || !ctx->k_iso_fan) {
        pim_context_free(ctx);
        return -1;
    }
    ctx->capacity = n;
    return 0;
}

/* > 0 when o -> a -> b turns left (counter-clockwise). */
static double turn(pim_vec2 o, pim_vec2 a, pim_vec2 b)
{
    return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

/* Copies to `out` the centres that may be vertices of their convex hull
 * and returns how many (Akl-Toussaint): the extreme points in eight
 * directions, taken in counter-clockwise direction order, span a polygon Q
 * inside the hull, and a point strictly left of every edge of Q lies
 * inside Q (its winding number is positive), hence strictly inside the
 * hull, and is never a vertex. A delta-set is a compact patch of cells,
 * so this leaves mostly its rim and the sort in pim_convex_hull gets far
 * fewer points. Points within 1e-9 of the extent of Q's edges are kept, a
 * margin far above rounding, so the hull is the one of all the centres;
 * with a non-finite centre everything is kept (and the hull refuses it). */
static size_t hull_candidates(const pim_vec2 *v, size_t n, pim_vec2 *out)
{
    /* Directions at multiples of 45 degrees, counter-clockwise from -y. */
    static const pim_vec2 dirs[8] = {{0, -1}, {1, -1}, {1, 0}, {1, 1},
                                     {0, 1},  {-1, 1}, {-1, 0}, {-1, -1}};
    size_t best[8] = {0};
    double top[8];
    for (int d = 0; d < 8; d++)
        top[d] = -INFINITY;
    double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
    int finite = 1;
    for (size_t i = 0; i < n && n >= 16; i++) {
        pim_vec2 p = v[i];
        if (!isfinite(p.x) || !isfinite(p.y)) {
            finite = 0;
            break;
        }
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
    pim_vec2 q[8];
    size_t qn = 0;
    if (n >= 16 && finite) {
        for (int d = 0; d < 8; d++) {
            pim_vec2 p = v[best[d]];
            if (qn == 0 || p.x != q[qn - 1].x || p.y != q[qn - 1].y)
                q[qn++] = p;
        }
        while (qn > 1 && q[qn - 1].x == q[0].x && q[qn - 1].y == q[0].y)
            qn--;
    }
    if (qn < 3) {
        memcpy(out, v, n * sizeof *out);
        return n;
    }
    double span = fmax(x_hi - x_lo, y_hi - y_lo);
    double margin[8];
    for (size_t e = 0; e < qn; e++) {
        pim_vec2 a = q[e], b = q[(e + 1) % qn];
        margin[e] = 1e-9 * span * fmax(fabs(b.x - a.x), fabs(b.y - a.y));
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t e = 0;
        while (e < qn && turn(q[e], q[(e + 1) % qn], v[i]) > margin[e])
            e++;
        if (e < qn)
            out[m++] = v[i];
    }
    return m;
}

static int build(pim_context *ctx, const pim_vec2 *centres, size_t n,
                 double cell_m)
{
    if (n == 0 || !(cell_m > 0.0) || !isfinite(cell_m))
        return -1;
    if (reserve(ctx, n) != 0)
        return -1;

    pim_vec2 *sorted = ctx->scratch, *stack = ctx->scratch + n;
    size_t candidates = hull_candidates(centres, n, sorted);
    size_t centre_count = pim_convex_hull(sorted, candidates, stack);
    if (centre_count == 0)
        return -1;

    /* Conv(centres + square) = Conv(centres) + square: the same hull as of
     * the 4n corners, in O(h) instead of sorting 4n points, and without
     * near-duplicate corners of neighbouring cells. */
    double half = 0.5 * cell_m;
    const pim_vec2 square[4] = {
        {-half, -half}, {half, -half}, {half, half}, {-half, half}};
    ctx->hull_count = pim_minkowski_sum(stack, centre_count, square, 4, ctx->hull);
    size_t count = pim_sensitivity_hull(ctx->hull, ctx->hull_count, ctx->k);
    if (count < 4) /* K contains [-cell, cell]^2: at least a quadrilateral */
        return -1;

    ctx->area_k = pim_polygon_area(ctx->k, count);
    if (pim_polygon_second_moment(ctx->k, count, &ctx->moment) != 0 ||
        pim_isotropic_transform(ctx->moment, &ctx->transform, &ctx->inverse) != 0)
        return -1;
    ctx->det_transform = pim_mat2_det(ctx->transform);

    /* T is symmetric positive definite, so it preserves orientation and
     * K_I stays counter-clockwise and convex. */
    for (size_t i = 0; i < count; i++)
        ctx->k_iso[i] = pim_mat2_apply(ctx->transform, ctx->k[i]);
    if (pim_polygon_fan_table(ctx->k_iso, count, ctx->k_iso_fan) != 0 ||
        pim_gauge_prepare(ctx->k_iso, count, ctx->k_iso_forms) != 0)
        return -1;
    ctx->area_k_iso = ctx->k_iso_fan[count - 3];
    if (!(ctx->det_transform > 0.0) || !isfinite(ctx->area_k) ||
        !(ctx->area_k > 0.0) || !(ctx->area_k_iso > 0.0))
        return -1;
    ctx->k_count = count;
    return 0;
}

int pim_context_build(pim_context *ctx, const pim_vec2 *centres, size_t n,
                      double cell_m)
{
    ctx->k_count = 0;
    ctx->hull_count = 0;
    if (build(ctx, centres, n, cell_m) != 0) {
        ctx->k_count = 0;
        return -1;
    }
    return 0;
}

static int usable(const pim_context *ctx, double eps)
{
    return ctx->k_count >= 4 && eps > 0.0 && isfinite(eps);
}

int pim_sample(const pim_context *ctx, pim_vec2 released, double eps,
               ts_rng *rng, pim_vec2 *z)
{
    if (!usable(ctx, eps) || !isfinite(released.x) || !isfinite(released.y))
        return -1;
    pim_vec2 direction = pim_uniform_in_polygon(ctx->k_iso, ctx->k_count,
                                                ctx->k_iso_fan, rng);
    double radius = ts_rng_gamma_int(rng, 3, 1.0 / eps);
    pim_vec2 offset = pim_mat2_apply(ctx->inverse, direction);
    pim_vec2 out = {released.x + radius * offset.x, released.y + radius * offset.y};
    if (!isfinite(out.x) || !isfinite(out.y))
        return -1;
    *z = out;
    return 0;
}

double pim_k_norm(const pim_context *ctx, pim_vec2 v)
{
    if (ctx->k_count < 4)
        return NAN;
    return pim_gauge_eval(ctx->k_iso_forms, ctx->k_count,
                          pim_mat2_apply(ctx->transform, v));
}

double pim_log_density(const pim_context *ctx, double eps, pim_vec2 z,
                       pim_vec2 s)
{
    if (!usable(ctx, eps))
        return NAN;
    pim_vec2 d = {z.x - s.x, z.y - s.y};
    /* Paper's isotropic-space density times the Jacobian det T of
     * z -> T z, so that this is a density per square metre. */
    double log_norm = 2.0 * log(eps) + log(ctx->det_transform) -
                      log(2.0 * ctx->area_k_iso);
    return log_norm - eps * pim_k_norm(ctx, d);
}

double pim_density(const pim_context *ctx, double eps, pim_vec2 z, pim_vec2 s)
{
    return exp(pim_log_density(ctx, eps, z, s));
}
