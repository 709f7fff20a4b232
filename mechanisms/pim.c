#include "mechanisms/pim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sizes for n cells: the centres' hull needs a 2n stack, the squares' hull
 * has at most n + 4 vertices, and K at most twice that. */
#define HULL_ROOM(n) ((n) + 4)
#define K_ROOM(n) (2 * ((n) + 4))

void ts_pim_context_init(ts_pim_context *ctx)
{
    memset(ctx, 0, sizeof *ctx);
}

void ts_pim_context_free(ts_pim_context *ctx)
{
    free(ctx->hull);
    free(ctx->k);
    free(ctx->k_iso);
    free(ctx->k_iso_forms);
    free(ctx->k_forms);
    free(ctx->k_iso_fan);
    free(ctx->scratch);
    ts_pim_context_init(ctx);
}

static int reserve(ts_pim_context *ctx, size_t n)
{
    if (n <= ctx->capacity)
        return 0;
    /* 3n scratch: n sorted centres followed by the 2n hull stack. */
    if (n > (SIZE_MAX / sizeof(ts_vec2) - 8) / 3)
        return -1;
    ts_pim_context_free(ctx);
    ctx->scratch = malloc(3 * n * sizeof *ctx->scratch);
    ctx->hull = malloc(HULL_ROOM(n) * sizeof *ctx->hull);
    ctx->k = malloc(K_ROOM(n) * sizeof *ctx->k);
    ctx->k_iso = malloc(K_ROOM(n) * sizeof *ctx->k_iso);
    ctx->k_iso_forms = malloc(K_ROOM(n) * sizeof *ctx->k_iso_forms);
    ctx->k_forms = malloc(K_ROOM(n) * sizeof *ctx->k_forms);
    ctx->k_iso_fan = malloc(K_ROOM(n) * sizeof *ctx->k_iso_fan);
    if (!ctx->scratch || !ctx->hull || !ctx->k || !ctx->k_iso ||
        !ctx->k_iso_forms || !ctx->k_forms || !ctx->k_iso_fan) {
        ts_pim_context_free(ctx);
        return -1;
    }
    ctx->capacity = n;
    return 0;
}

static int build(ts_pim_context *ctx, const ts_vec2 *centres, size_t n,
                 double cell_m)
{
    if (n == 0 || !(cell_m > 0.0) || !isfinite(cell_m))
        return -1;
    if (reserve(ctx, n) != 0)
        return -1;

    ts_vec2 *sorted = ctx->scratch, *stack = ctx->scratch + n;
    memcpy(sorted, centres, n * sizeof *sorted);
    size_t centre_count = ts_convex_hull(sorted, n, stack);
    if (centre_count == 0)
        return -1;

    /* Conv(centres + square) = Conv(centres) + square: the same hull as of
     * the 4n corners, in O(h) instead of sorting 4n points, and without
     * near-duplicate corners of neighbouring cells. */
    double half = 0.5 * cell_m;
    const ts_vec2 square[4] = {
        {-half, -half}, {half, -half}, {half, half}, {-half, half}};
    ctx->hull_count =
        ts_minkowski_sum(stack, centre_count, square, 4, ctx->hull);
    size_t count = ts_sensitivity_hull(ctx->hull, ctx->hull_count, ctx->k);
    if (count < 4) /* K contains [-cell, cell]^2: at least a quadrilateral */
        return -1;

    ctx->area_k = ts_polygon_area(ctx->k, count);
    if (ts_polygon_second_moment(ctx->k, count, &ctx->moment) != 0 ||
        ts_isotropic_transform(ctx->moment, &ctx->transform,
                               &ctx->inverse) != 0)
        return -1;
    ctx->det_transform = ts_mat2_det(ctx->transform);

    /* T is symmetric positive definite, so it preserves orientation and
     * K_I stays counter-clockwise and convex. */
    for (size_t i = 0; i < count; i++)
        ctx->k_iso[i] = ts_mat2_apply(ctx->transform, ctx->k[i]);
    if (ts_polygon_fan_table(ctx->k_iso, count, ctx->k_iso_fan) != 0 ||
        ts_gauge_prepare(ctx->k_iso, count, ctx->k_iso_forms) != 0)
        return -1;
    ctx->area_k_iso = ctx->k_iso_fan[count - 3];
    if (!(ctx->det_transform > 0.0) || !isfinite(ctx->area_k) ||
        !(ctx->area_k > 0.0) || !(ctx->area_k_iso > 0.0))
        return -1;
    /* The gauge's forms pulled back to metres, ||T v||_{K_I} =
     * max_i f_i . T v = max_i (T^T f_i) . v, so that a norm (evaluated for
     * every belief cell in a posterior) skips the transform. */
    ts_mat2 t = ctx->transform;
    for (size_t i = 0; i < count; i++) {
        ts_vec2 f = ctx->k_iso_forms[i];
        ctx->k_forms[i] = (ts_vec2){t.a * f.x + t.c * f.y,
                                     t.b * f.x + t.d * f.y};
    }
    /* K is centrally symmetric (vertex i + count/2 = -vertex i exactly,
     * mechanisms/hull.h), so its forms come in exact +- pairs and
     * max_i f_i . v = max over half of |f_i . v|: half the work. Checked,
     * not assumed. */
    size_t pairs = count / 2;
    ctx->k_forms_paired = count % 2 == 0;
    for (size_t i = 0; i < pairs && ctx->k_forms_paired; i++)
        ctx->k_forms_paired = ctx->k_forms[i + pairs].x == -ctx->k_forms[i].x &&
                              ctx->k_forms[i + pairs].y == -ctx->k_forms[i].y;
    ctx->log_norm_unit = log(ctx->det_transform) - log(2.0 * ctx->area_k_iso);
    ctx->k_count = count;
    return 0;
}

int ts_pim_context_build(ts_pim_context *ctx, const ts_vec2 *centres, size_t n,
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

static int usable(const ts_pim_context *ctx, double eps)
{
    return ctx->k_count >= 4 && eps > 0.0 && isfinite(eps);
}

int ts_pim_sample(const ts_pim_context *ctx, ts_vec2 released, double eps,
                  ts_rng *rng, ts_vec2 *z)
{
    if (!usable(ctx, eps) || !isfinite(released.x) || !isfinite(released.y))
        return -1;
    ts_vec2 direction =
        ts_uniform_in_polygon(ctx->k_iso, ctx->k_count, ctx->k_iso_fan, rng);
    double radius = ts_rng_gamma_int(rng, 3, 1.0 / eps);
    ts_vec2 offset = ts_mat2_apply(ctx->inverse, direction);
    ts_vec2 out = {released.x + radius * offset.x, released.y + radius * offset.y};
    if (!isfinite(out.x) || !isfinite(out.y))
        return -1;
    *z = out;
    return 0;
}

double ts_pim_log_norm(const ts_pim_context *ctx, double eps)
{
    if (!usable(ctx, eps))
        return NAN;
    /* Paper's isotropic-space density times the Jacobian det T of
     * z -> T z, so that this is a density per square metre. */
    return 2.0 * log(eps) + ctx->log_norm_unit;
}

double ts_pim_k_norm(const ts_pim_context *ctx, ts_vec2 v)
{
    if (ctx->k_count < 4)
        return NAN;
    if (!ctx->k_forms_paired || !isfinite(v.x) || !isfinite(v.y))
        return ts_gauge_eval(ctx->k_forms, ctx->k_count, v);
    double best = 0.0;
    for (size_t i = 0; i < ctx->k_count / 2; i++) {
        double g = fabs(ctx->k_forms[i].x * v.x + ctx->k_forms[i].y * v.y);
        best = g > best ? g : best;
    }
    return best;
}

double ts_pim_log_density(const ts_pim_context *ctx, double eps, ts_vec2 z,
                          ts_vec2 s)
{
    if (!usable(ctx, eps))
        return NAN;
    ts_vec2 d = {z.x - s.x, z.y - s.y};
    return ts_pim_log_norm(ctx, eps) - eps * ts_pim_k_norm(ctx, d);
}

double ts_pim_density(const ts_pim_context *ctx, double eps, ts_vec2 z,
                      ts_vec2 s)
{
    return exp(ts_pim_log_density(ctx, eps, z, s));
}

ts_pim_emission ts_pim_emission_make(const ts_pim_context *pim, double eps)
{
    return (ts_pim_emission){
        .pim = pim, .eps = eps, .log_norm = ts_pim_log_norm(pim, eps)};
}

double ts_pim_log_emission(const void *ctx, ts_vec2 z, ts_vec2 s)
{
    const ts_pim_emission *e = ctx;
    return e->log_norm -
           e->eps * ts_pim_k_norm(e->pim, (ts_vec2){z.x - s.x, z.y - s.y});
}
