/* Unit tests for the noise of mechanisms/pim.c and mechanisms/lm_delta.c.
 *
 * - Emission densities integrate to 1 over the plane (midpoint rule on a
 *   grid that covers all but a stated tail mass).
 * - The released noise has the right law: ||z - x||_K ~ Gamma(2, 1/eps) for
 *   PIM (the K-norm mechanism's radial law in the plane) and
 *   |dx| + |dy| ~ Gamma(2, scale) for LM (sum of two exponentials); checked
 *   with Kolmogorov-Smirnov at alpha = 0.001 (critical value 1.949/sqrt(n)).
 * - Privacy audit: histogram ratios for two secrets of the same set stay
 *   within e^{eps ||s1 - s2||_K} (<= e^eps) up to a Bonferroni margin, and
 *   an under-noised variant fails the same audit.
 * - Degenerate sets (one cell, two cells, collinear cells) and bad input.
 * Fixed seeds throughout; assertions in sampling loops are counted and
 * checked once (Check logs every passing assertion).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gsl/gsl_cdf.h>

#include "mechanisms/hull.h"
#include "mechanisms/lm_delta.h"
#include "mechanisms/pim.h"
#include "mechanisms/polygon.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/ks.h"

#define CELL 340.0 /* metres: the cell size of the paper's GeoLife grid */

/* An irregular delta-location set, in cells of a grid far from the
 * projection origin (as real local coordinates are). */
static const int demo_cells[][2] = {{0, 0}, {1, 0}, {2, 0}, {2, 1}, {0, 2}, {3, 3}, {1, 1}};
#define DEMO_COUNT (sizeof demo_cells / sizeof demo_cells[0])
static const ts_vec2 grid_origin = {23456.0, -9876.0};

static ts_vec2 cell_centre(int i, int j)
{
    return (ts_vec2){grid_origin.x + (i + 0.5) * CELL, grid_origin.y + (j + 0.5) * CELL};
}

static void demo_centres(ts_vec2 *out)
{
    for (size_t i = 0; i < DEMO_COUNT; i++)
        out[i] = cell_centre(demo_cells[i][0], demo_cells[i][1]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------ density normalisation */

/* Midpoint rule over the box [c - half, c + half]^2 with n x n cells.
 *
 * Tail: for PIM, ||z - s||_K ~ Gamma(2, 1/eps), so the mass outside
 * {||z - s||_K <= G} is e^{-eps G}(1 + eps G); eps G = 18 gives 2.9e-7.
 * That set is G K + s, inside s + G bbox(K), which we integrate. For LM,
 * |dx| + |dy| ~ Gamma(2, scale): the same 18 scales in the L1 norm, inside
 * the box of half-width 18 scale.
 *
 * Discretisation: the log-density is piecewise linear (cones over the edges
 * of K), and on a cell of side h where it is linear with gradient a the
 * midpoint rule is low by the factor prod_i sinh(a_i h/2)/(a_i h/2)
 * ~ 1 + |a|^2 h^2 / 24; cells crossing a kink add an error of the same
 * order. With |a| <= eps max|form| and h = 2 G half-width / n the relative
 * error is at most about (h eps max|form|)^2 / 24, which we print and
 * require below a fifth of the tolerance. Tolerance 1e-3: above the
 * estimated error plus tail, and far below any plausible normalisation
 * mistake (dropping det T here changes the integral by a factor ~1e-6, a
 * wrong factor 2 or power of eps by 50 % or more). */
#define TAIL_EPS_UNITS 18.0
#define INTEGRATION_TOL 1e-3
#define INTEGRATION_GRID 2500

typedef double (*density_fn)(const void *ctx, ts_vec2 z);

static double integrate(density_fn f, const void *ctx, ts_vec2 centre, double half_x,
                        double half_y, int n)
{
    double hx = 2.0 * half_x / n, hy = 2.0 * half_y / n;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double row = 0.0;
        double y = centre.y - half_y + (i + 0.5) * hy;
        for (int j = 0; j < n; j++)
            row += f(ctx, (ts_vec2){centre.x - half_x + (j + 0.5) * hx, y});
        sum += row;
    }
    return sum * hx * hy;
}

typedef struct pim_at {
    const ts_pim_context *ctx;
    double eps;
    ts_vec2 s;
} pim_at;

static double pim_at_density(const void *p, ts_vec2 z)
{
    const pim_at *a = p;
    return ts_pim_density(a->ctx, a->eps, z, a->s);
}

TS_TEST(test_pim_density_integrates_to_one)
{
    ts_vec2 centres[DEMO_COUNT];
    demo_centres(centres);
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, DEMO_COUNT, CELL), 0);

    double kx = 0.0, ky = 0.0;
    for (size_t i = 0; i < ctx.k_count; i++)
        kx = fmax(kx, fabs(ctx.k[i].x)), ky = fmax(ky, fabs(ctx.k[i].y));
    /* The K-norm's forms in metres: forms of K_I composed with T. */
    double max_form = 0.0;
    ts_vec2 forms[64];
    ck_assert_int_eq(ts_gauge_prepare(ctx.k, ctx.k_count, forms), 0);
    for (size_t i = 0; i < ctx.k_count; i++)
        max_form = fmax(max_form, hypot(forms[i].x, forms[i].y));

    const double eps_values[] = {1.0, 0.3};
    for (size_t e = 0; e < 2; e++) {
        double eps = eps_values[e];
        pim_at at = {&ctx, eps, centres[3]};
        double g = TAIL_EPS_UNITS / eps;
        int n = INTEGRATION_GRID;
        double h = 2.0 * g * fmax(kx, ky) / n;
        double predicted = pow(h * eps * max_form, 2) / 24.0;
        double integral = integrate(pim_at_density, &at, at.s, g * kx, g * ky, n);
        fprintf(stderr,
                "PIM eps %.1f: integral %.8f (|det T| = %.3g, predicted discretisation "
                "error %.1e)\n",
                eps, integral, ctx.det_transform, predicted);
        ck_assert_double_lt(predicted, 0.2 * INTEGRATION_TOL);
        ck_assert_msg(fabs(integral - 1.0) < INTEGRATION_TOL, "eps %g: integral %.8f", eps,
                      integral);
    }

    /* The metre density is the K-norm density of K itself:
     * eps^2 / (2 Area(K)) exp(-eps ||z - s||_K), with ||.||_K from K's own
     * edges (not through T): the Jacobian convention is what we claim. */
    double worst = 0.0;
    for (int i = -20; i <= 20; i++)
        for (int j = -20; j <= 20; j++) {
            ts_vec2 z = {centres[0].x + 97.0 * i, centres[0].y + 61.0 * j};
            ts_vec2 d = {z.x - centres[5].x, z.y - centres[5].y};
            double direct = log(1.5 * 1.5 / (2.0 * ctx.area_k)) -
                            1.5 * ts_gauge_eval(forms, ctx.k_count, d);
            worst = fmax(worst, fabs(ts_pim_log_density(&ctx, 1.5, z, centres[5]) - direct));
        }
    ck_assert_double_lt(worst, 1e-10);
    ck_assert_double_eq_tol(ctx.area_k_iso / (ctx.det_transform * ctx.area_k), 1.0, 1e-12);
    ts_pim_context_free(&ctx);
}
END_TEST

typedef struct lm_at {
    double scale;
    ts_vec2 s;
} lm_at;

static double lm_at_density(const void *p, ts_vec2 z)
{
    const lm_at *a = p;
    return ts_lm_delta_density(a->scale, z, a->s);
}

TS_TEST(test_lm_density_integrates_to_one)
{
    ts_vec2 centres[DEMO_COUNT];
    demo_centres(centres);
    double dx, dy;
    ck_assert_int_eq(ts_lm_delta_sensitivity(centres, DEMO_COUNT, CELL, &dx, &dy), 0);
    /* Extents of the squares: 4 cells wide, 4 cells high. */
    ck_assert_double_eq_tol(dx, 4 * CELL, 1e-9);
    ck_assert_double_eq_tol(dy, 4 * CELL, 1e-9);
    const double eps_values[] = {1.0, 0.3};
    for (size_t e = 0; e < 2; e++) {
        double scale = ts_lm_delta_scale(dx, dy, eps_values[e]);
        ck_assert_double_eq_tol(scale, (dx + dy) / eps_values[e], 1e-9);
        lm_at at = {scale, centres[2]};
        double half = TAIL_EPS_UNITS * scale;
        int n = INTEGRATION_GRID;
        double h = 2.0 * half / n;
        /* Per axis: gradient 1/scale, so (h/scale)^2/24 per axis. */
        double predicted = 2.0 * pow(h / scale, 2) / 24.0;
        double integral = integrate(lm_at_density, &at, at.s, half, half, n);
        fprintf(stderr, "LM eps %.1f: integral %.8f (predicted discretisation error %.1e)\n",
                eps_values[e], integral, predicted);
        ck_assert_double_lt(predicted, 0.2 * INTEGRATION_TOL);
        ck_assert_msg(fabs(integral - 1.0) < INTEGRATION_TOL, "integral %.8f", integral);
    }
}
END_TEST

/* ------------------------------------------------------- noise laws */

static double gamma2_cdf(double x, double scale)
{
    return gsl_cdf_gamma_P(x, 2.0, scale);
}

#define KS_SAMPLES 100000

TS_TEST(test_pim_noise_law)
{
    ts_vec2 centres[DEMO_COUNT];
    demo_centres(centres);
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, DEMO_COUNT, CELL), 0);
    ts_rng *rng = ts_rng_new_seeded(2001);
    double *norms = malloc(KS_SAMPLES * sizeof *norms);
    double eps = 0.7, sx = 0.0, sy = 0.0, sq = 0.0, sq2 = 0.0;
    ts_vec2 x = centres[4];
    int failed = 0;
    for (size_t i = 0; i < KS_SAMPLES; i++) {
        ts_vec2 z;
        failed += ts_pim_sample(&ctx, x, eps, rng, &z) != 0;
        ts_vec2 d = {z.x - x.x, z.y - x.y};
        norms[i] = ts_pim_k_norm(&ctx, d);
        sx += d.x, sy += d.y;
        double r2 = d.x * d.x + d.y * d.y;
        sq += r2, sq2 += r2 * r2;
    }
    ck_assert_int_eq(failed, 0);
    /* Mean squared error (the paper's Theorem 5.10): the noise is r u with
     * u = T^-1 z' uniform on K, so E|z - x|^2 = E[r^2] tr E[u u^T]
     * = 12 / eps^2 * tr(moment). Within 5 standard errors. */
    double mse = sq / KS_SAMPLES;
    double mse_se = sqrt((sq2 / KS_SAMPLES - mse * mse) / KS_SAMPLES);
    double mse_exact = 12.0 / (eps * eps) * (ctx.moment.xx + ctx.moment.yy);
    fprintf(stderr, "PIM mean squared error %.6g m^2, theory %.6g (SE %.2g)\n", mse, mse_exact,
            mse_se);
    ck_assert_double_lt(fabs(mse - mse_exact), 5.0 * mse_se);
    double critical = KS_CRITICAL_001 / sqrt((double)KS_SAMPLES);
    double d = ts_ks_statistic(norms, KS_SAMPLES, gamma2_cdf, 1.0 / eps);
    fprintf(stderr, "PIM ||z - x||_K vs Gamma(2, 1/eps): D = %.4f (critical %.4f)\n", d,
            critical);
    ck_assert_msg(d < critical, "D = %.4f", d);
    /* Noise with the claimed law of eps / 2 must be rejected. */
    double d_wrong = ts_ks_statistic(norms, KS_SAMPLES, gamma2_cdf, 2.0 / eps);
    ck_assert_double_gt(d_wrong, critical);
    /* Zero mean (K is symmetric): |mean| < 5 SE per axis, with
     * Var(noise_x) = E[r^2] E[z'_x^2] in T^-1 coordinates; bound it by
     * E[r^2] = 12 / eps^2 times the largest moment of K. */
    double sd = sqrt(12.0 / (eps * eps) * fmax(ctx.moment.xx, ctx.moment.yy));
    ck_assert_double_lt(fabs(sx / KS_SAMPLES), 5.0 * sd / sqrt((double)KS_SAMPLES));
    ck_assert_double_lt(fabs(sy / KS_SAMPLES), 5.0 * sd / sqrt((double)KS_SAMPLES));
    free(norms);
    ts_rng_free(rng);
    ts_pim_context_free(&ctx);
}
END_TEST

TS_TEST(test_lm_noise_law)
{
    ts_rng *rng = ts_rng_new_seeded(2002);
    double *l1 = malloc(KS_SAMPLES * sizeof *l1);
    double scale = 1234.5;
    ts_vec2 x = {100.0, -200.0};
    int failed = 0;
    for (size_t i = 0; i < KS_SAMPLES; i++) {
        ts_vec2 z;
        failed += ts_lm_delta_sample(x, scale, rng, &z) != 0;
        l1[i] = fabs(z.x - x.x) + fabs(z.y - x.y);
    }
    ck_assert_int_eq(failed, 0);
    double critical = KS_CRITICAL_001 / sqrt((double)KS_SAMPLES);
    double d = ts_ks_statistic(l1, KS_SAMPLES, gamma2_cdf, scale);
    fprintf(stderr, "LM |dx| + |dy| vs Gamma(2, scale): D = %.4f (critical %.4f)\n", d,
            critical);
    ck_assert_msg(d < critical, "D = %.4f", d);
    ck_assert_double_gt(ts_ks_statistic(l1, KS_SAMPLES, gamma2_cdf, 0.5 * scale), critical);
    free(l1);
    ts_rng_free(rng);
}
END_TEST

/* -------------------------------------------------------- privacy audit */

/* For secrets s1, s2 and any set S of outputs the mechanism promises
 * P(z in S | s1) <= e^{eps ||s1 - s2||_K} P(z in S | s2) (<= e^eps since
 * s1 - s2 is in K). We draw AUDIT_SAMPLES outputs from each secret,
 * histogram them on a fixed grid (each bin is such an S) and require, for
 * every bin where both counts are >= MIN_COUNT,
 *
 *     |ln(n1 / n2)| <= bound + z sqrt(1/n1 + 1/n2)
 *
 * (delta-method standard error of the log ratio of two near-Poisson counts;
 * normal approximation good at >= 500). z is Bonferroni over every bin of
 * the grid in both directions (the family is fixed before the data are
 * seen): z = Phi^-1(1 - alpha / (2 bins)), alpha = 0.001.
 *
 * Bins are squares of the isotropic coordinates T (z - midpoint), where
 * K_I is round-ish, so bins are comparable in every direction. The grid is
 * centred between the secrets; along the ray beyond either secret the
 * density ratio is exactly e^{eps ||s1 - s2||_K}, so the audited bins
 * include nearly tight ones (asserted). An under-noised PIM (eps doubled,
 * i.e. the Gamma scale halved) must fail. */
#define AUDIT_SAMPLES 250000L
#define MIN_COUNT 500
#define FAMILY_ALPHA 0.001
#define AUDIT_BINS 33
#define AUDIT_BIN_SIDE 0.6 /* isotropic units, divided by eps */

typedef struct audit_grid {
    long counts[AUDIT_BINS][AUDIT_BINS];
} audit_grid;

typedef struct audit_result {
    int bins_tested, violations;
    double z, max_abs_log_ratio, worst_excess;
} audit_result;

typedef int (*release_fn)(const void *mech, ts_vec2 secret, ts_rng *rng, ts_vec2 *z);

typedef struct audit_setup {
    ts_mat2 to_bins; /* metres -> bin coordinates (before scaling) */
    ts_vec2 centre;
    double side;
} audit_setup;

static void collect(const audit_setup *a, release_fn release, const void *mech,
                    ts_vec2 secret, ts_rng *rng, audit_grid *g)
{
    memset(g, 0, sizeof *g);
    int failed = 0;
    double half = 0.5 * AUDIT_BINS;
    for (long i = 0; i < AUDIT_SAMPLES; i++) {
        ts_vec2 z;
        failed += release(mech, secret, rng, &z) != 0;
        ts_vec2 u = ts_mat2_apply(a->to_bins, (ts_vec2){z.x - a->centre.x, z.y - a->centre.y});
        double fx = floor(u.x / a->side + half), fy = floor(u.y / a->side + half);
        if (fx >= 0 && fy >= 0 && fx < AUDIT_BINS && fy < AUDIT_BINS)
            g->counts[(int)fy][(int)fx]++;
    }
    ck_assert_int_eq(failed, 0);
}

static audit_result audit_ratio(const audit_grid *a, const audit_grid *b, double bound)
{
    audit_result r = {0, 0, 0.0, 0.0, -INFINITY};
    r.z = gsl_cdf_ugaussian_Qinv(FAMILY_ALPHA / (2.0 * AUDIT_BINS * AUDIT_BINS));
    for (int i = 0; i < AUDIT_BINS; i++)
        for (int j = 0; j < AUDIT_BINS; j++) {
            long n1 = a->counts[i][j], n2 = b->counts[i][j];
            if (n1 < MIN_COUNT || n2 < MIN_COUNT)
                continue;
            r.bins_tested++;
            double lr = fabs(log((double)n1 / (double)n2));
            double limit = bound + r.z * sqrt(1.0 / n1 + 1.0 / n2);
            r.max_abs_log_ratio = fmax(r.max_abs_log_ratio, lr);
            r.worst_excess = fmax(r.worst_excess, lr - limit);
            r.violations += lr > limit;
        }
    return r;
}

static void report(const char *what, const audit_result *r, double bound)
{
    fprintf(stderr,
            "%s: %d bins tested, max |ln ratio| %.3f vs bound %.3f, worst excess %.3f "
            "(z %.2f), %d violations\n",
            what, r->bins_tested, r->max_abs_log_ratio, bound, r->worst_excess, r->z,
            r->violations);
}

typedef struct pim_mech {
    const ts_pim_context *ctx;
    double eps;
} pim_mech;

static int pim_release(const void *m, ts_vec2 secret, ts_rng *rng, ts_vec2 *z)
{
    const pim_mech *p = m;
    return ts_pim_sample(p->ctx, secret, p->eps, rng, z);
}

typedef struct lm_mech {
    double scale;
} lm_mech;

static int lm_release(const void *m, ts_vec2 secret, ts_rng *rng, ts_vec2 *z)
{
    return ts_lm_delta_sample(secret, ((const lm_mech *)m)->scale, rng, z);
}

TS_TEST(test_pim_privacy_audit)
{
    static audit_grid g1, g2;
    ts_vec2 centres[DEMO_COUNT];
    demo_centres(centres);
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, DEMO_COUNT, CELL), 0);

    /* The two farthest cells of the set: (0, 0) and (3, 3). */
    ts_vec2 s1 = centres[0], s2 = centres[5];
    double k_dist = ts_pim_k_norm(&ctx, (ts_vec2){s1.x - s2.x, s1.y - s2.y});
    ck_assert_double_le(k_dist, 1.0); /* same delta-set: eps-neighbours */
    ck_assert_double_ge(k_dist, 0.5);
    double eps = 1.25 / k_dist; /* eps ||s1 - s2||_K = 1.25, as in the geoind audit */
    double bound = eps * k_dist;

    audit_setup a = {ctx.transform, {0.5 * (s1.x + s2.x), 0.5 * (s1.y + s2.y)},
                     AUDIT_BIN_SIDE / eps};
    ts_rng *rng = ts_rng_new_seeded(2003);
    pim_mech honest = {&ctx, eps};
    collect(&a, pim_release, &honest, s1, rng, &g1);
    collect(&a, pim_release, &honest, s2, rng, &g2);
    audit_result r = audit_ratio(&g1, &g2, bound);
    report("PIM", &r, bound);
    ck_assert_msg(r.violations == 0, "%d of %d bins exceed the bound (worst excess %.3f)",
                  r.violations, r.bins_tested, r.worst_excess);
    ck_assert_int_ge(r.bins_tested, 50);
    ck_assert_msg(r.max_abs_log_ratio >= 0.85 * bound, "max |ln ratio| %.3f",
                  r.max_abs_log_ratio);

    /* Under-noised: Gamma scale halved (noise drawn for 2 eps). */
    pim_mech broken = {&ctx, 2.0 * eps};
    collect(&a, pim_release, &broken, s1, rng, &g1);
    collect(&a, pim_release, &broken, s2, rng, &g2);
    audit_result rb = audit_ratio(&g1, &g2, bound);
    report("PIM with half the noise", &rb, bound);
    ck_assert_msg(rb.violations > 0, "under-noised PIM passed (max |ln ratio| %.3f)",
                  rb.max_abs_log_ratio);
    ck_assert_double_gt(rb.worst_excess, 0.5);

    /* Under-noised in shape: K built from a subset of the cells that omits
     * s2's cell does not contain s1 - s2 (||s1 - s2||_K > 1 there), so the
     * same audit must catch it too. */
    ts_pim_context small;
    ts_pim_context_init(&small);
    ts_vec2 partial[4] = {centres[0], centres[1], centres[2], centres[3]};
    ck_assert_int_eq(ts_pim_context_build(&small, partial, 4, CELL), 0);
    pim_mech shrunk = {&small, eps};
    collect(&a, pim_release, &shrunk, s1, rng, &g1);
    collect(&a, pim_release, &shrunk, s2, rng, &g2);
    audit_result rs = audit_ratio(&g1, &g2, bound);
    report("PIM on a set missing the far cell", &rs, bound);
    ck_assert_msg(rs.violations > 0, "PIM with a too small K passed");

    ts_pim_context_free(&small);
    ts_pim_context_free(&ctx);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_lm_privacy_audit)
{
    static audit_grid g1, g2;
    ts_vec2 centres[DEMO_COUNT];
    demo_centres(centres);
    double dx, dy;
    ck_assert_int_eq(ts_lm_delta_sensitivity(centres, DEMO_COUNT, CELL, &dx, &dy), 0);
    ts_vec2 s1 = centres[0], s2 = centres[5];
    double eps = 2.0;
    double scale = ts_lm_delta_scale(dx, dy, eps);
    /* Exact worst ratio for these two secrets: the L1 distance / scale. */
    double bound = (fabs(s1.x - s2.x) + fabs(s1.y - s2.y)) / scale;
    ck_assert_double_le(bound, eps);
    /* Bins in units of the scale, on the axes. */
    audit_setup a = {{1.0 / scale, 0, 0, 1.0 / scale},
                     {0.5 * (s1.x + s2.x), 0.5 * (s1.y + s2.y)},
                     0.35};
    ts_rng *rng = ts_rng_new_seeded(2004);
    lm_mech honest = {scale};
    collect(&a, lm_release, &honest, s1, rng, &g1);
    collect(&a, lm_release, &honest, s2, rng, &g2);
    audit_result r = audit_ratio(&g1, &g2, bound);
    report("LM", &r, bound);
    ck_assert_msg(r.violations == 0, "%d violations (worst excess %.3f)", r.violations,
                  r.worst_excess);
    ck_assert_int_ge(r.bins_tested, 50);
    ck_assert_double_ge(r.max_abs_log_ratio, 0.85 * bound);

    lm_mech broken = {0.5 * scale};
    collect(&a, lm_release, &broken, s1, rng, &g1);
    collect(&a, lm_release, &broken, s2, rng, &g2);
    audit_result rb = audit_ratio(&g1, &g2, bound);
    report("LM with half the scale", &rb, bound);
    ck_assert_msg(rb.violations > 0, "under-noised LM passed");
    ts_rng_free(rng);
}
END_TEST

/* ------------------------------------------------------ degenerate sets */

static void check_finite_samples(const ts_pim_context *ctx, ts_vec2 x)
{
    ts_rng *rng = ts_rng_new_seeded(2005);
    int bad = 0;
    for (int i = 0; i < 10000; i++) {
        ts_vec2 z;
        bad += ts_pim_sample(ctx, x, 0.5, rng, &z) != 0 || !isfinite(z.x) || !isfinite(z.y);
        double ld = ts_pim_log_density(ctx, 0.5, z, x);
        bad += !isfinite(ld);
    }
    ts_rng_free(rng);
    ck_assert_int_eq(bad, 0);
}

TS_TEST(test_degenerate_sets)
{
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    const double c = CELL;

    /* One cell: the hull is the cell's square, K = [-c, c]^2. */
    ts_vec2 one = cell_centre(4, 7);
    ck_assert_int_eq(ts_pim_context_build(&ctx, &one, 1, c), 0);
    ck_assert_uint_eq(ctx.hull_count, 4);
    ck_assert_uint_eq(ctx.k_count, 4);
    ck_assert_double_eq_tol(ctx.area_k, 4 * c * c, 1e-6);
    for (size_t i = 0; i < 4; i++)
        ck_assert(fabs(fabs(ctx.k[i].x) - c) < 1e-9 && fabs(fabs(ctx.k[i].y) - c) < 1e-9);
    /* Isotropic transform of a square: T = sqrt(3)/c I. */
    ck_assert_double_eq_tol(ctx.transform.a * c, sqrt(3.0), 1e-12);
    ck_assert_double_eq_tol(ctx.transform.b, 0.0, 1e-18);
    check_finite_samples(&ctx, one);

    /* The same cell several times is still one cell. */
    ts_vec2 same[3] = {one, one, one};
    ck_assert_int_eq(ts_pim_context_build(&ctx, same, 3, c), 0);
    ck_assert_uint_eq(ctx.k_count, 4);

    /* Two adjacent cells: K = [-2c, 2c] x [-c, c]. */
    ts_vec2 two[2] = {cell_centre(0, 0), cell_centre(1, 0)};
    ck_assert_int_eq(ts_pim_context_build(&ctx, two, 2, c), 0);
    ck_assert_uint_eq(ctx.k_count, 4);
    ck_assert_double_eq_tol(ctx.area_k, 8 * c * c, 1e-6);
    check_finite_samples(&ctx, two[1]);

    /* Five collinear cells on a diagonal: segment (8c, 8c) + [-c, c]^2, a
     * hexagon of area 4c^2 + |w| * width = 4c^2 + 8 sqrt2 c * 2 sqrt2 c. */
    ts_vec2 diag[5];
    for (int i = 0; i < 5; i++)
        diag[i] = cell_centre(i, i);
    ck_assert_int_eq(ts_pim_context_build(&ctx, diag, 5, c), 0);
    ck_assert_uint_eq(ctx.k_count, 6);
    ck_assert_double_eq_tol(ctx.area_k / (36 * c * c), 1.0, 1e-12);
    check_finite_samples(&ctx, diag[2]);

    /* Ten collinear cells in a row: a 20c x 2c rectangle. */
    ts_vec2 row[10];
    for (int i = 0; i < 10; i++)
        row[i] = cell_centre(i, 3);
    ck_assert_int_eq(ts_pim_context_build(&ctx, row, 10, c), 0);
    ck_assert_uint_eq(ctx.k_count, 4);
    ck_assert_double_eq_tol(ctx.area_k / (40 * c * c), 1.0, 1e-12);
    check_finite_samples(&ctx, row[9]);
    /* Every pair of cells of the set is within K-distance 1. */
    for (int i = 0; i < 10; i++)
        ck_assert_double_le(ts_pim_k_norm(&ctx, (ts_vec2){row[i].x - row[0].x, 0.0}), 1.0);

    /* LM on one cell: extents c, scale 2c / eps. */
    double dx, dy;
    ck_assert_int_eq(ts_lm_delta_sensitivity(&one, 1, c, &dx, &dy), 0);
    ck_assert_double_eq(dx, c);
    ck_assert_double_eq_tol(ts_lm_delta_scale(dx, dy, 2.0), c, 1e-12);
    ts_pim_context_free(&ctx);
}
END_TEST

TS_TEST(test_invalid_input_fails_closed)
{
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    ts_rng *rng = ts_rng_new_seeded(2006);
    ts_vec2 z = {7.0, 7.0}, x = {0.0, 0.0};

    /* Not built yet. */
    ck_assert_int_eq(ts_pim_sample(&ctx, x, 1.0, rng, &z), -1);
    ck_assert(isnan(ts_pim_log_density(&ctx, 1.0, z, x)));

    ts_vec2 centres[DEMO_COUNT];
    demo_centres(centres);
    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, 0, CELL), -1);
    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, DEMO_COUNT, 0.0), -1);
    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, DEMO_COUNT, NAN), -1);
    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, DEMO_COUNT, INFINITY), -1);
    ts_vec2 with_nan[2] = {centres[0], {NAN, 0.0}};
    ck_assert_int_eq(ts_pim_context_build(&ctx, with_nan, 2, CELL), -1);
    ck_assert_int_eq(ts_pim_sample(&ctx, x, 1.0, rng, &z), -1); /* a failed build is unusable */

    ck_assert_int_eq(ts_pim_context_build(&ctx, centres, DEMO_COUNT, CELL), 0);
    ck_assert_int_eq(ts_pim_sample(&ctx, x, 0.0, rng, &z), -1);
    ck_assert_int_eq(ts_pim_sample(&ctx, x, -1.0, rng, &z), -1);
    ck_assert_int_eq(ts_pim_sample(&ctx, x, NAN, rng, &z), -1);
    ck_assert_int_eq(ts_pim_sample(&ctx, x, INFINITY, rng, &z), -1);
    ck_assert_int_eq(ts_pim_sample(&ctx, (ts_vec2){NAN, 0.0}, 1.0, rng, &z), -1);
    ck_assert(z.x == 7.0 && z.y == 7.0); /* untouched on failure */
    ck_assert(isnan(ts_pim_log_density(&ctx, 0.0, z, x)));

    double dx, dy;
    ck_assert_int_eq(ts_lm_delta_sensitivity(centres, 0, CELL, &dx, &dy), -1);
    ck_assert_int_eq(ts_lm_delta_sensitivity(centres, DEMO_COUNT, -1.0, &dx, &dy), -1);
    ck_assert_int_eq(ts_lm_delta_sensitivity(with_nan, 2, CELL, &dx, &dy), -1);
    ck_assert(isnan(ts_lm_delta_scale(1.0, 1.0, 0.0)));
    ck_assert(isnan(ts_lm_delta_scale(1.0, NAN, 1.0)));
    ck_assert_int_eq(ts_lm_delta_sample(x, 0.0, rng, &z), -1);
    ck_assert_int_eq(ts_lm_delta_sample(x, INFINITY, rng, &z), -1);
    ck_assert(isnan(ts_lm_delta_log_density(-1.0, z, x)));
    ck_assert(z.x == 7.0 && z.y == 7.0);

    ts_pim_context_free(&ctx);
    ts_pim_context_free(&ctx); /* idempotent */
    ts_rng_free(rng);
}
END_TEST

/* The geometry is a function of the SET: order and duplicates of the
 * centres do not change a single bit, and a reused context (grown, then
 * shrunk) gives the same result as a fresh one. */
TS_TEST(test_context_deterministic_and_reusable)
{
    ts_rng *rng = ts_rng_new_seeded(2007);
    ts_pim_context reused, fresh;
    ts_pim_context_init(&reused);
    int differ = 0;
    for (int trial = 0; trial < 50; trial++) {
        size_t n = 1 + (size_t)(ts_rng_u64(rng) % 60);
        ts_vec2 centres[120];
        for (size_t i = 0; i < n; i++)
            centres[i] = cell_centre((int)(ts_rng_u64(rng) % 20), (int)(ts_rng_u64(rng) % 20));
        /* Reversed with duplicates appended. */
        ts_vec2 shuffled[120];
        for (size_t i = 0; i < n; i++)
            shuffled[i] = centres[n - 1 - i];
        memcpy(shuffled + n, centres, n * sizeof *centres);

        ts_pim_context_init(&fresh);
        ck_assert_int_eq(ts_pim_context_build(&fresh, centres, n, CELL), 0);
        ck_assert_int_eq(ts_pim_context_build(&reused, shuffled, 2 * n, CELL), 0);
        differ += fresh.k_count != reused.k_count || fresh.hull_count != reused.hull_count ||
                  memcmp(fresh.k, reused.k, fresh.k_count * sizeof *fresh.k) != 0 ||
                  memcmp(fresh.k_iso, reused.k_iso, fresh.k_count * sizeof *fresh.k) != 0 ||
                  memcmp(&fresh.transform, &reused.transform, sizeof fresh.transform) != 0;
        ts_pim_context_free(&fresh);
    }
    ts_pim_context_free(&reused);
    ts_rng_free(rng);
    ck_assert_int_eq(differ, 0);
}
END_TEST

/* Not a pass/fail benchmark: timings for the report, plus a sanity bound
 * far above the design target (O(n log n) build, O(log h) per sample). */
TS_TEST(test_cost_report)
{
    ts_rng *rng = ts_rng_new_seeded(2008);
    ts_vec2 centres[400];
    for (int i = 0; i < 400; i++)
        centres[i] = cell_centre((int)(ts_rng_u64(rng) % 40), (int)(ts_rng_u64(rng) % 40));
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    const int builds = 2000, samples = 200000;
    double t0 = now_s();
    int failed = 0;
    for (int i = 0; i < builds; i++)
        failed += ts_pim_context_build(&ctx, centres, 100, CELL) != 0;
    double t1 = now_s();
    ts_vec2 z = {0, 0}, acc = {0, 0};
    for (int i = 0; i < samples; i++) {
        ts_pim_sample(&ctx, centres[0], 1.0, rng, &z);
        acc.x += z.x;
    }
    double t2 = now_s();
    double dens = 0.0;
    for (int i = 0; i < samples; i++)
        dens += ts_pim_log_density(&ctx, 1.0, z, centres[i % 100]);
    double t3 = now_s();
    fprintf(stderr,
            "cost: build (100 cells, K with %zu vertices) %.2f us, sample %.3f us, "
            "log density %.3f us\n",
            ctx.k_count, 1e6 * (t1 - t0) / builds, 1e6 * (t2 - t1) / samples,
            1e6 * (t3 - t2) / samples);
    ck_assert_int_eq(failed, 0);
    ck_assert(isfinite(acc.x) && isfinite(dens));
    ck_assert_double_lt((t1 - t0) / builds, 1e-3);
    ck_assert_double_lt((t2 - t1) / samples, 1e-4);
    ts_pim_context_free(&ctx);
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    return ts_check_main("pim_noise", 300, NULL, NULL);
}
