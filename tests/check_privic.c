/* The PRIVIC mechanism (mechanisms/privic.c), the exact planar Laplace grid
 * channel (mechanisms/laplace_channel.c) and the PRIVIC loop
 * (mechanisms/population.c), through their public interfaces.
 *
 * Every statistical check uses a fixed seed and a tolerance derived from
 * the sampling distribution, stated where it is used; each is paired with
 * a check that the same test rejects a wrong answer, so none of them can
 * pass vacuously. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_sf_bessel.h>

#include "geometry/geo.h"
#include "inference/emd.h"
#include "inference/grid.h"
#include "inference/ibu.h"
#include "mechanisms/ba_channel.h"
#include "mechanisms/laplace_channel.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/planar_laplace.h"
#include "mechanisms/population.h"
#include "mechanisms/privic.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_params.h"

/* ------------------------------------------------------------- helpers */

/* Central Paris, about 11.0 km east-west by 11.1 km north-south. */
#define PARIS "48.80,2.25,48.90,2.40"
static const double paris_box[4] = { 48.80, 2.25, 48.90, 2.40 };

static const ts_population_ops *pop(void)
{
    ck_assert_ptr_nonnull(ts_privic_ops.population);
    return ts_privic_ops.population;
}

/* 5 x 4 cells of about 2.2 km x 2.8 km, beta 1 per km. */
static void paris_params(param_table *t)
{
    param_string(t, "region", PARIS);
    param_int(t, "cols", 5);
    param_int(t, "rows", 4);
}

static void *profile_from(param_table *t)
{
    ts_params params = table_params(t);
    void *profile = NULL;
    char err[256];
    ck_assert_msg(ts_privic_ops.profile_new(&params, &profile, err,
                                            sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(profile);
    return profile;
}

/* The profile must be refused, with the error naming `key`. */
static void expect_refused(param_table *t, const char *key)
{
    ts_params params = table_params(t);
    void *profile = NULL;
    char err[256] = "";
    int rc = ts_privic_ops.profile_new(&params, &profile, err, sizeof err);
    if (rc == 0)
        ts_privic_ops.profile_free(profile);
    ck_assert_msg(rc == -1, "a profile with bad %s was accepted", key);
    ck_assert_ptr_null(profile);
    const ts_param_spec *row = ts_mechanism_error_key(&ts_privic_ops, err);
    ck_assert_msg(row != NULL && strcmp(row->key, key) == 0,
                  "expected an error about %s, got \"%s\"", key, err);
}

/* The middle of a cell in degrees: its centre, since the projection is
 * linear in each coordinate. */
static void cell_middle(const void *profile, uint32_t cell, double *lat,
                        double *lon)
{
    double b[4];
    pop()->cell_bounds(profile, cell, b);
    *lat = 0.5 * (b[0] + b[2]);
    *lon = 0.5 * (b[1] + b[3]);
}

static ts_release_status release_at(const void *profile, double lat,
                                    double lon, ts_rng *rng, ts_report *out)
{
    ts_point truth = { .lat = lat, .lon = lon, .ts_ms = 0,
                       .accuracy_m = NAN };
    ts_budget_view budget = { ts_privic_ops.window_budget(profile), 0.0 };
    memset(out, 0, sizeof *out);
    return ts_privic_ops.release(profile, NULL, &truth, &budget, rng, out);
}

static const double *current_matrix(const void *profile, uint32_t *version)
{
    const void *ch = pop()->channel_current(profile, version);
    ck_assert_ptr_nonnull(ch);
    return pop()->channel_matrix(ch);
}

/* Pearson's statistic of `counts` (total N) against the probabilities
 * `p`, cells with an expected count below 5 pooled into one so that the
 * chi-square approximation holds; *df gets the degrees of freedom. */
static double chi_square(const double *counts, const double *p, size_t n,
                         double total, unsigned *df)
{
    double stat = 0.0, pool_obs = 0.0, pool_exp = 0.0;
    unsigned bins = 0;
    for (size_t i = 0; i < n; i++) {
        double e = total * p[i];
        if (e < 5.0) {
            pool_obs += counts[i];
            pool_exp += e;
            continue;
        }
        stat += (counts[i] - e) * (counts[i] - e) / e;
        bins++;
    }
    if (pool_exp >= 5.0) {
        stat += (pool_obs - pool_exp) * (pool_obs - pool_exp) / pool_exp;
        bins++;
    } else {
        /* Too little is pooled to be a bin, but draws far beyond it in
         * cells of probability ~0 are still an error: a Poisson count of
         * mean below 5 exceeds its mean + 6 sd + 10 with probability below
         * 1e-9. */
        ck_assert_msg(pool_obs <= pool_exp + 6.0 * sqrt(pool_exp) + 10.0,
                      "%g draws in cells expecting %g", pool_obs, pool_exp);
    }
    *df = bins - 1;
    return stat;
}

/* Family-wise false-failure rate of every chi-square test below. */
#define CHI_ALPHA 1e-6

/* ------------------------------------------------ parameters, profiles */

TS_TEST(test_profile_accepts_and_derives_budget)
{
    param_table t = { .n = 0 };
    paris_params(&t);
    param_double(&t, "beta", 1.5);
    param_double(&t, "unit_m", 500.0);
    param_int(&t, "points_per_window", 7);
    void *profile = profile_from(&t);
    /* 2 beta / unit_m per metre: 1.5 per 500 m is 0.003 per metre. */
    ck_assert_double_eq_tol(ts_privic_ops.window_budget(profile),
                            7 * 2.0 * 1.5 / 500.0, 1e-15);
    ck_assert_uint_eq(pop()->cells(profile), 20);
    uint32_t cols, rows;
    double w, h;
    pop()->grid_shape(profile, &cols, &rows, &w, &h);
    ck_assert_uint_eq(cols, 5);
    ck_assert_uint_eq(rows, 4);
    /* 0.15 degrees of longitude at 48.85 N over 5 columns, 0.1 degrees of
     * latitude over 4 rows (spherical Earth, 6371.0088 km). */
    double m_per_deg = TS_EARTH_RADIUS_M * M_PI / 180.0;
    ck_assert_double_eq_tol(w, 0.15 * m_per_deg * cos(48.85 * M_PI / 180) / 5,
                            1e-6);
    ck_assert_double_eq_tol(h, 0.1 * m_per_deg / 4, 1e-6);
    ts_population_cycle cycle;
    pop()->cycle(profile, &cycle);
    ck_assert_uint_eq(cycle.reports, 1000);
    ts_privic_ops.profile_free(profile);
}
END_TEST

TS_TEST(test_profile_refuses_bad_parameters)
{
    param_table t;

    t = (param_table){ .n = 0 };       /* no region */
    param_int(&t, "cols", 5);
    param_int(&t, "rows", 4);
    expect_refused(&t, "region");

    t = (param_table){ .n = 0 };
    paris_params(&t);
    param_string(&t, "region", "48.80,2.25,48.90");
    expect_refused(&t, "region");

    t = (param_table){ .n = 0 };
    paris_params(&t);
    param_double(&t, "beta", 0.0);
    expect_refused(&t, "beta");

    t = (param_table){ .n = 0 };
    paris_params(&t);
    param_double(&t, "beta", -1.0);
    expect_refused(&t, "beta");

    /* exp(-beta d) across the grid (about 15.7 km at 100 per km) is far
     * below what BA can keep normal: refused as a beta problem. */
    t = (param_table){ .n = 0 };
    paris_params(&t);
    param_double(&t, "beta", 100.0);
    expect_refused(&t, "beta");

    /* 64 x 64 = 4096 cells, over the 2048-cell cap. */
    t = (param_table){ .n = 0 };
    param_string(&t, "region", PARIS);
    param_int(&t, "cols", 64);
    param_int(&t, "rows", 64);
    expect_refused(&t, "rows");

    /* 100 m cells over 11 km x 11 km: about 12,000 cells. */
    t = (param_table){ .n = 0 };
    param_string(&t, "region", PARIS);
    param_double(&t, "cell_m", 100.0);
    expect_refused(&t, "cell_m");

    /* A single cell leaves nothing to choose between. */
    t = (param_table){ .n = 0 };
    param_string(&t, "region", PARIS);
    param_int(&t, "cols", 1);
    param_int(&t, "rows", 1);
    expect_refused(&t, "rows");

    t = (param_table){ .n = 0 };        /* cols without rows */
    param_string(&t, "region", PARIS);
    param_int(&t, "cols", 5);
    expect_refused(&t, "cell_m");

    t = (param_table){ .n = 0 };        /* both ways of cutting the grid */
    paris_params(&t);
    param_double(&t, "cell_m", 1000.0);
    expect_refused(&t, "cell_m");

    t = (param_table){ .n = 0 };        /* neither */
    param_string(&t, "region", PARIS);
    expect_refused(&t, "cell_m");

    t = (param_table){ .n = 0 };
    paris_params(&t);
    param_string(&t, "on_outside", "bounce");
    expect_refused(&t, "on_outside");

    t = (param_table){ .n = 0 };        /* a cycle that never ends */
    paris_params(&t);
    param_int(&t, "cycle_reports", 0);
    expect_refused(&t, "cycle_reports");

    t = (param_table){ .n = 0 };
    paris_params(&t);
    param_double(&t, "unit_m", 0.0);
    expect_refused(&t, "unit_m");

    /* A key of another mechanism is refused, not ignored. */
    t = (param_table){ .n = 0 };
    paris_params(&t);
    param_double(&t, "radius_m", 100.0);
    ts_params params = table_params(&t);
    void *profile = NULL;
    char err[256];
    ck_assert_int_eq(ts_privic_ops.profile_new(&params, &profile, err,
                                               sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "radius_m"));
}
END_TEST

/* ------------------------------------------------------------ releases */

/* Every release is the centre of one of the grid's cells, recovered by
 * the population interface as that cell, with the promised spend and the
 * first channel's version. */
static void check_releases_on_centres(void *profile, int inside_box)
{
    size_t n = pop()->cells(profile);
    ts_grid plane;
    char err[256];
    /* Same box, so the same equirectangular projection as the profile's. */
    ck_assert_int_eq(ts_grid_init(&plane, paris_box[0], paris_box[1],
                                  paris_box[2], paris_box[3], 1000.0, err,
                                  sizeof err), 0);
    ts_rng *rng = ts_rng_new_seeded(2024);
    double eps = ts_privic_ops.window_budget(profile) / 30.0;
    for (uint32_t x = 0; x < n; x++) {
        double lat, lon;
        cell_middle(profile, x, &lat, &lon);
        for (int k = 0; k < 50; k++) {
            ts_report out;
            ck_assert_int_eq(release_at(profile, lat, lon, rng, &out),
                             TS_RELEASE_OK);
            ck_assert(ts_geo_valid(out.lat, out.lon));
            ck_assert_double_eq(out.eps_point, eps);
            ck_assert_int_eq(out.has_channel_version, 1);
            ck_assert_uint_eq(out.channel_version, 1);
            uint32_t y;
            ck_assert_msg(pop()->cell_of(profile, out.lat, out.lon, &y) == 0,
                          "release %.7f,%.7f from cell %u is in no cell",
                          out.lat, out.lon, x);
            ck_assert_uint_lt(y, n);
            /* On the centre, in metres of the plane: the projection's
             * round trip is exact to well below a millimetre. */
            ts_vec2 xy = ts_grid_project(&plane, out.lat, out.lon);
            ts_vec2 c = pop()->cell_centre(profile, y);
            ck_assert_double_eq_tol(xy.x, c.x, 1e-6);
            ck_assert_double_eq_tol(xy.y, c.y, 1e-6);
            if (inside_box) {
                ck_assert(out.lat > paris_box[0] && out.lat < paris_box[2]);
                ck_assert(out.lon > paris_box[1] && out.lon < paris_box[3]);
            }
        }
    }
    ts_rng_free(rng);
}

TS_TEST(test_release_is_a_cell_centre)
{
    param_table t = { .n = 0 };
    paris_params(&t);
    param_double(&t, "beta", 0.8);
    void *profile = profile_from(&t);
    ck_assert_double_eq_tol(ts_privic_ops.window_budget(profile) / 30.0,
                            2.0 * 0.8 / 1000.0, 1e-18);
    /* rows x cols tile the box exactly: every centre lies inside it. */
    check_releases_on_centres(profile, 1);
    ts_privic_ops.profile_free(profile);
}
END_TEST

/* Square 5 km cells over an 11.0 x 11.1 km box: 3 x 3 cells whose last
 * column and row reach past the box (cols = ceil(width / cell_m)), so
 * five of the nine centres lie outside it. A release of such a cell must
 * still be read back as that cell, or the PRIVIC loop drops every report
 * of the border cells as "outside" and its estimate is biased. */
TS_TEST(test_release_of_overhanging_cell_is_recovered)
{
    param_table t = { .n = 0 };
    param_string(&t, "region", PARIS);
    param_double(&t, "cell_m", 5000.0);
    void *profile = profile_from(&t);
    ck_assert_uint_eq(pop()->cells(profile), 9);
    check_releases_on_centres(profile, 0);
    ts_privic_ops.profile_free(profile);
}
END_TEST

TS_TEST(test_on_outside_clamp_and_reject)
{
    param_table t = { .n = 0 };
    paris_params(&t);
    void *clamp = profile_from(&t);
    param_string(&t, "on_outside", "reject");
    void *reject = profile_from(&t);
    /* West of the box, level with the centre of cell (row 2, col 0); and
     * north-east of the box. */
    double lat20, lon20, lat21, lon21, lat_ne, lon_ne;
    cell_middle(clamp, 2 * 5 + 0, &lat20, &lon20);
    cell_middle(clamp, 2 * 5 + 1, &lat21, &lon21);
    cell_middle(clamp, 3 * 5 + 4, &lat_ne, &lon_ne);
    const double west_lon = paris_box[1] - 0.05;
    /* A release draws from the true cell's row with the generator alone,
     * so the same seed gives the same draws exactly when the row is the
     * same: a clamped point must draw like the nearest cell's centre. */
    enum { DRAWS = 64 };
    struct { double lat, lon, ref_lat, ref_lon; } cases[] = {
        { lat20, west_lon, lat20, lon20 },
        { paris_box[2] + 0.3, paris_box[3] + 0.3, lat_ne, lon_ne },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ts_rng *a = ts_rng_new_seeded(77 + c), *b = ts_rng_new_seeded(77 + c);
        for (int k = 0; k < DRAWS; k++) {
            ts_report ra, rb;
            ck_assert_int_eq(release_at(clamp, cases[c].lat, cases[c].lon, a,
                                        &ra), TS_RELEASE_OK);
            ck_assert_int_eq(release_at(clamp, cases[c].ref_lat,
                                        cases[c].ref_lon, b, &rb),
                             TS_RELEASE_OK);
            ck_assert_double_eq(ra.lat, rb.lat);
            ck_assert_double_eq(ra.lon, rb.lon);
        }
        ts_rng_free(a);
        ts_rng_free(b);
        ts_report out;
        ts_rng *rng = ts_rng_new_seeded(5);
        ck_assert_int_eq(release_at(reject, cases[c].lat, cases[c].lon, rng,
                                    &out), TS_RELEASE_OUTSIDE_REGION);
        ts_rng_free(rng);
    }
    /* The comparison has teeth: the neighbouring cell's row draws
     * differently from the same seed. */
    ts_rng *a = ts_rng_new_seeded(77), *b = ts_rng_new_seeded(77);
    int differ = 0;
    for (int k = 0; k < DRAWS; k++) {
        ts_report ra, rb;
        ck_assert_int_eq(release_at(clamp, lat20, west_lon, a, &ra),
                         TS_RELEASE_OK);
        ck_assert_int_eq(release_at(clamp, lat21, lon21, b, &rb),
                         TS_RELEASE_OK);
        differ += ra.lat != rb.lat || ra.lon != rb.lon;
    }
    ck_assert_int_gt(differ, 0);
    ts_rng_free(a);
    ts_rng_free(b);
    /* Inside, reject releases; on the box's corner too (closed box). */
    ts_rng *rng = ts_rng_new_seeded(6);
    ts_report out;
    ck_assert_int_eq(release_at(reject, lat21, lon21, rng, &out),
                     TS_RELEASE_OK);
    ck_assert_int_eq(release_at(reject, paris_box[2], paris_box[3], rng,
                                &out), TS_RELEASE_OK);
    /* Not a location at all: an error in both modes, never a clamp. */
    ck_assert_int_eq(release_at(clamp, NAN, 2.3, rng, &out),
                     TS_RELEASE_ERROR);
    ck_assert_int_eq(release_at(reject, 48.85, INFINITY, rng, &out),
                     TS_RELEASE_ERROR);
    /* Less budget left than one report: nothing released. */
    ts_point truth = { .lat = lat21, .lon = lon21, .accuracy_m = NAN };
    double total = ts_privic_ops.window_budget(clamp);
    ts_budget_view budget = { total, total - 0.5 * total / 30.0 };
    ck_assert_int_eq(ts_privic_ops.release(clamp, NULL, &truth, &budget, rng,
                                           &out), TS_RELEASE_EXHAUSTED);
    ts_rng_free(rng);
    ts_privic_ops.profile_free(clamp);
    ts_privic_ops.profile_free(reject);
}
END_TEST

/* Releases from one true cell are draws from that cell's channel row:
 * Pearson's chi-square of 100,000 releases against the row stays below
 * its 1 - 1e-6 quantile, and the same counts are rejected against the row
 * of the neighbouring cell (the test can tell rows apart). */
TS_TEST(test_release_frequencies_match_channel_row)
{
    enum { N = 100000 };
    param_table t = { .n = 0 };
    paris_params(&t);
    void *profile = profile_from(&t);
    size_t n = pop()->cells(profile);
    const uint32_t x = 1 * 5 + 2, neighbour = 1 * 5 + 3;
    double lat, lon;
    cell_middle(profile, x, &lat, &lon);
    /* Anywhere in the cell is the same cell: off-centre by a third. */
    double b[4];
    pop()->cell_bounds(profile, x, b);
    lat += (b[2] - b[0]) / 3.0;
    lon -= (b[3] - b[1]) / 3.0;
    double *counts = calloc(n, sizeof *counts);
    ck_assert_ptr_nonnull(counts);
    ts_rng *rng = ts_rng_new_seeded(31337);
    for (int k = 0; k < N; k++) {
        ts_report out;
        ck_assert_int_eq(release_at(profile, lat, lon, rng, &out),
                         TS_RELEASE_OK);
        uint32_t y;
        ck_assert_int_eq(pop()->cell_of(profile, out.lat, out.lon, &y), 0);
        counts[y] += 1.0;
    }
    ts_rng_free(rng);
    uint32_t version;
    const double *m = current_matrix(profile, &version);
    ck_assert_uint_eq(version, 1);
    unsigned df;
    double stat = chi_square(counts, m + (size_t)x * n, n, N, &df);
    double limit = gsl_cdf_chisq_Qinv(CHI_ALPHA, df);
    printf("privic row %u: chi2 %.1f on %u df (limit %.1f)\n", x, stat, df,
           limit);
    ck_assert_msg(stat <= limit, "chi2 %.1f > %.1f on %u df", stat, limit,
                  df);
    double wrong = chi_square(counts, m + (size_t)neighbour * n, n, N, &df);
    ck_assert_msg(wrong > gsl_cdf_chisq_Qinv(CHI_ALPHA, df),
                  "the neighbour's row fits too (chi2 %.1f)", wrong);
    free(counts);
    ts_privic_ops.profile_free(profile);
}
END_TEST

/* ------------------------------------------- the Laplace grid channel */

#define LC_COLS 6
#define LC_ROWS 5
#define LC_N (LC_COLS * LC_ROWS)
#define LC_W 300.0
#define LC_H 200.0
#define LC_EPS (1.0 / 250.0)

static double lc_channel[LC_N * LC_N];

static void lc_build(double eps, double *channel)
{
    char err[256];
    ck_assert_msg(ts_laplace_grid_channel(eps, LC_COLS, LC_ROWS, LC_W, LC_H,
                                          channel, err, sizeof err) == 0,
                  "%s", err);
}

static ts_vec2 lc_centre(size_t cell)
{
    return (ts_vec2){ ((double)(cell % LC_COLS) + 0.5) * LC_W,
                      ((double)(cell / LC_COLS) + 0.5) * LC_H };
}

static double tk1(double t, void *arg)
{
    (void)arg;
    return t == 0.0 ? 1.0 : t * gsl_sf_bessel_K1(t);
}

/* P(X <= u) of the planar Laplace noise's x-coordinate, by another route
 * than the channel's polar quadrature: the marginal density is
 * (eps^2 / pi) |x| K_1(eps |x|), so P(X <= u) = 1/2 + (1/pi)
 * int_0^{eps u} t K_1(t) dt for u >= 0. */
static double marginal_cdf(double eps, double u)
{
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(200);
    gsl_function f = { tk1, NULL };
    double r, abserr;
    ck_assert_int_eq(gsl_integration_qags(&f, 0.0, eps * fabs(u), 1e-13,
                                          1e-11, 200, w, &r, &abserr), 0);
    gsl_integration_workspace_free(w);
    return u >= 0 ? 0.5 + r / M_PI : 0.5 - r / M_PI;
}

TS_TEST(test_laplace_joint_cdf)
{
    const double eps = 0.01;
    ck_assert_double_eq_tol(ts_planar_laplace_joint_cdf(eps, INFINITY,
                                                        INFINITY), 1.0, 1e-14);
    ck_assert_double_eq_tol(ts_planar_laplace_joint_cdf(eps, 0, 0), 0.25,
                            1e-14);
    ck_assert_double_eq_tol(ts_planar_laplace_joint_cdf(eps, 0, INFINITY),
                            0.5, 1e-14);
    ck_assert_double_eq_tol(ts_planar_laplace_joint_cdf(eps, -INFINITY, 30),
                            0.0, 1e-14);
    const double us[] = { -400.0, -75.0, -1.0, 0.0, 20.0, 150.0, 900.0 };
    size_t k = sizeof us / sizeof us[0];
    for (size_t i = 0; i < k; i++) {
        double u = us[i];
        /* The x marginal against the Bessel form (independent path). */
        ck_assert_double_eq_tol(ts_planar_laplace_joint_cdf(eps, u, INFINITY),
                                marginal_cdf(eps, u), 1e-9);
        for (size_t j = 0; j < k; j++) {
            double v = us[j];
            double f = ts_planar_laplace_joint_cdf(eps, u, v);
            /* Isotropy: X and Y are exchangeable. */
            ck_assert_double_eq_tol(f, ts_planar_laplace_joint_cdf(eps, v, u),
                                    1e-12);
            /* Central symmetry: P(X > u, Y > v) = P(X < -u, Y < -v). */
            double survival = 1.0 - ts_planar_laplace_joint_cdf(eps, u,
                                                                INFINITY) -
                              ts_planar_laplace_joint_cdf(eps, INFINITY, v) +
                              f;
            ck_assert_double_eq_tol(survival,
                                    ts_planar_laplace_joint_cdf(eps, -u, -v),
                                    1e-12);
        }
    }
    /* The square [-a, a]^2 holds more than the inscribed disc and less
     * than the circumscribed one (closed-form radius CDF). */
    const double as[] = { 10.0, 100.0, 500.0 };
    for (size_t i = 0; i < 3; i++) {
        double a = as[i];
        double sq = ts_planar_laplace_joint_cdf(eps, a, a) -
                    2.0 * ts_planar_laplace_joint_cdf(eps, -a, a) +
                    ts_planar_laplace_joint_cdf(eps, -a, -a);
        ck_assert_double_gt(sq, ts_planar_laplace_radius_cdf(eps, a));
        ck_assert_double_lt(sq, ts_planar_laplace_radius_cdf(eps, a * M_SQRT2));
    }
}
END_TEST

TS_TEST(test_laplace_channel_rows_and_symmetry)
{
    lc_build(LC_EPS, lc_channel);
    const double *c = lc_channel;
    for (size_t x = 0; x < LC_N; x++) {
        double sum = 0.0;
        for (size_t y = 0; y < LC_N; y++) {
            ck_assert_double_gt(c[x * LC_N + y], 0.0);
            sum += c[x * LC_N + y];
        }
        ck_assert_double_eq_tol(sum, 1.0, 1e-12);
    }
    /* The noise is symmetric under x -> -x and y -> -y, and so is the grid
     * (borders included): mirroring both the true and the reported cell
     * leaves an entry unchanged. The quadrature is good to about 1e-12
     * per CDF value, four of which make an entry. */
    const double tol = 1e-11;
    for (size_t x = 0; x < LC_N; x++) {
        size_t xc = x % LC_COLS, xr = x / LC_COLS;
        size_t x_lr = xr * LC_COLS + (LC_COLS - 1 - xc);
        size_t x_ud = (LC_ROWS - 1 - xr) * LC_COLS + xc;
        for (size_t y = 0; y < LC_N; y++) {
            size_t yc = y % LC_COLS, yr = y / LC_COLS;
            size_t y_lr = yr * LC_COLS + (LC_COLS - 1 - yc);
            size_t y_ud = (LC_ROWS - 1 - yr) * LC_COLS + yc;
            double e = c[x * LC_N + y];
            ck_assert_double_eq_tol(e, c[x_lr * LC_N + y_lr], tol);
            ck_assert_double_eq_tol(e, c[x_ud * LC_N + y_ud], tol);
            /* Between two interior cells of the same shape, cell y seen
             * from x's centre is cell x seen from y's, reflected through
             * the origin: C is symmetric there. Border cells absorb the
             * tails beyond the grid, so it is not symmetric in general. */
            int interior = xc > 0 && xc < LC_COLS - 1 && xr > 0 &&
                           xr < LC_ROWS - 1 && yc > 0 && yc < LC_COLS - 1 &&
                           yr > 0 && yr < LC_ROWS - 1;
            if (interior)
                ck_assert_double_eq_tol(e, c[y * LC_N + x], tol);
        }
    }
    /* ... and asymmetric at a border, as it should be: the corner keeps
     * all the mass beyond it. */
    ck_assert_double_gt(c[0 * LC_N + 0], c[(LC_COLS + 1) * LC_N +
                                           (LC_COLS + 1)] + 0.01);
    /* Square cells on a square grid: also symmetric under swapping axes. */
    enum { S = 4 };
    static double sq[S * S * S * S];
    char err[256];
    ck_assert_int_eq(ts_laplace_grid_channel(LC_EPS, S, S, 250.0, 250.0, sq,
                                             err, sizeof err), 0);
    for (size_t x = 0; x < S * S; x++)
        for (size_t y = 0; y < S * S; y++) {
            size_t xt = (x % S) * S + x / S, yt = (y % S) * S + y / S;
            ck_assert_double_eq_tol(sq[x * S * S + y],
                                    sq[xt * S * S + yt], tol);
        }
    /* Refusals. */
    ck_assert_int_eq(ts_laplace_grid_channel(0.0, 2, 2, 1, 1, sq, err,
                                             sizeof err), -1);
    ck_assert_int_eq(ts_laplace_grid_channel(1.0, 0, 2, 1, 1, sq, err,
                                             sizeof err), -1);
    ck_assert_int_eq(ts_laplace_grid_channel(1.0, 2, 2, NAN, 1, sq, err,
                                             sizeof err), -1);
}
END_TEST

/* Draws of the planar Laplace sampler around the centre of cell x, binned
 * on the grid with everything beyond the border in the nearest border
 * cell: the definition of the channel's row x. */
static void lc_sample_row(size_t x, double eps, long draws, ts_rng *rng,
                          double *counts)
{
    ts_vec2 c = lc_centre(x);
    for (size_t y = 0; y < LC_N; y++)
        counts[y] = 0.0;
    for (long k = 0; k < draws; k++) {
        double r, a;
        ts_planar_laplace_sample(rng, eps, &r, &a);
        double col = floor((c.x + r * cos(a)) / LC_W);
        double row = floor((c.y + r * sin(a)) / LC_H);
        col = fmin(fmax(col, 0.0), LC_COLS - 1);
        row = fmin(fmax(row, 0.0), LC_ROWS - 1);
        counts[(size_t)row * LC_COLS + (size_t)col] += 1.0;
    }
}

/* The exact channel against Monte Carlo: 200,000 draws per row for a
 * corner, an edge and an interior cell. Each cell's count is binomial, so
 * it lies within z sqrt(N p (1 - p)) of N p, z the Bonferroni quantile for
 * 1e-6 over every cell of the three rows (a normal bound; the +1 covers
 * the discreteness of counts whose mean is a few units); and the rows
 * pass Pearson's chi-square. Against the channel for 1.1 eps the same
 * counts fail it: the check resolves a 10 % error in eps. */
TS_TEST(test_laplace_channel_matches_monte_carlo)
{
    enum { DRAWS = 200000 };
    lc_build(LC_EPS, lc_channel);
    static double wrong[LC_N * LC_N];
    lc_build(1.1 * LC_EPS, wrong);
    const size_t rows[] = { 0, 2, 2 * LC_COLS + 3 };
    const size_t n_rows = sizeof rows / sizeof rows[0];
    double z = gsl_cdf_ugaussian_Qinv(CHI_ALPHA / (2.0 * LC_N * n_rows));
    ts_rng *rng = ts_rng_new_seeded(4711);
    double counts[LC_N];
    for (size_t i = 0; i < n_rows; i++) {
        size_t x = rows[i];
        lc_sample_row(x, LC_EPS, DRAWS, rng, counts);
        const double *p = lc_channel + x * LC_N;
        for (size_t y = 0; y < LC_N; y++) {
            double sd = sqrt(DRAWS * p[y] * (1.0 - p[y]));
            ck_assert_msg(fabs(counts[y] - DRAWS * p[y]) <= z * sd + 1.0,
                          "row %zu cell %zu: %g draws, expected %.1f +- %.1f",
                          x, y, counts[y], DRAWS * p[y], sd);
        }
        unsigned df;
        double stat = chi_square(counts, p, LC_N, DRAWS, &df);
        double limit = gsl_cdf_chisq_Qinv(CHI_ALPHA / n_rows, df);
        printf("laplace row %zu: chi2 %.1f on %u df (limit %.1f)\n", x, stat,
               df, limit);
        ck_assert_msg(stat <= limit, "row %zu: chi2 %.1f > %.1f", x, stat,
                      limit);
        double off = chi_square(counts, wrong + x * LC_N, LC_N, DRAWS, &df);
        ck_assert_msg(off > gsl_cdf_chisq_Qinv(CHI_ALPHA / n_rows, df),
                      "row %zu: the 1.1 eps channel fits too (chi2 %.1f)", x,
                      off);
    }
    ts_rng_free(rng);
}
END_TEST

/* The largest ln C(x, y) - ln C(x', y) - bound d(x, x') over pairs of
 * distinct centres and outputs whose entries are both at least `floor`. */
static double lc_worst_excess(const double *c, double bound, double floor_p)
{
    double worst = -INFINITY;
    for (size_t x = 0; x < LC_N; x++)
        for (size_t x2 = 0; x2 < LC_N; x2++) {
            if (x == x2)
                continue;
            ts_vec2 a = lc_centre(x), b = lc_centre(x2);
            double allowed = bound * hypot(a.x - b.x, a.y - b.y);
            for (size_t y = 0; y < LC_N; y++) {
                double p = c[x * LC_N + y], q = c[x2 * LC_N + y];
                if (p < floor_p || q < floor_p)
                    continue;
                worst = fmax(worst, log(p) - log(q) - allowed);
            }
        }
    return worst;
}

/* What is true of the discretised channel, and what is not.
 *
 * Between cell centres it is exactly eps-geo-indistinguishable: row x is
 * the planar Laplace mechanism run at x's centre followed by binning (a
 * post-processing), and the mechanism bounds the ratio of every set's
 * probability, border cells reaching to infinity included. What is only
 * approximate is (a) the computed entries: each is four CDF values near
 * 1/4 to 1 differenced, good to about 1e-12 absolutely (quadrature
 * tolerance), so a ratio is reliable only where both entries are well
 * above that; far cells' entries (down to the 1e-300 floor) carry no
 * relative precision at all; and (b) true points that are not centres:
 * snapping to the centre costs up to a cell diagonal, so two points are
 * only eps (d + diagonal)-indistinguishable.
 *
 * So: every ratio of entries >= 1e-6 (relative error <= 1e-6, i.e. an
 * error of the log ratio below ~2e-6) is within e^{eps d} up to 1e-5. The
 * bound is nearly tight (ratios reach 90 % of eps d: cells beyond a pair
 * on the axis through it see almost the continuous ratio), and the channel
 * is not 0.9 eps-geo-indistinguishable, so a wrong eps fails. */
TS_TEST(test_laplace_channel_geo_indistinguishable_between_centres)
{
    lc_build(LC_EPS, lc_channel);
    double excess = lc_worst_excess(lc_channel, LC_EPS, 1e-6);
    printf("laplace: worst ln ratio - eps d = %.3g\n", excess);
    ck_assert_msg(excess <= 1e-5, "a ratio exceeds e^{eps d} by e^%g",
                  excess);
    ck_assert_double_gt(lc_worst_excess(lc_channel, 0.9 * LC_EPS, 1e-6),
                        0.0);
    /* An adjacent pair along x: the border cell beyond holds the whole
     * half-plane tail, where the ratio approaches e^{eps d}. */
    double r = log(lc_channel[(2 * LC_COLS + 4) * LC_N + 2 * LC_COLS + 5]) -
               log(lc_channel[(2 * LC_COLS + 3) * LC_N + 2 * LC_COLS + 5]);
    ck_assert_double_gt(r, 0.9 * LC_EPS * LC_W);
}
END_TEST

/* ------------------------------------------------ the population loop
 *
 * A stand-in mechanism with a fixed channel (the Laplace grid channel of
 * a 4 x 4 grid of 500 m cells) that is nonetheless "adaptive": every
 * build returns a fresh copy of the same matrix. The loop's bookkeeping
 * (versions, cycles, GIBU sources, stale reports, restore) is then
 * observable while the estimate has a closed-form target. Published
 * points are (row + 0.5, col + 0.5) in place of (lat, lon). */

#define FP_SIDE 4
#define FP_N (FP_SIDE * FP_SIDE)
#define FP_CELL 500.0

typedef struct fake_pop {
    int adaptive;
    double *first;
    const double *current;
    uint32_t version;
    unsigned builds;
    double last_theta[FP_N];
    uint64_t cycle_reports;
    double cycle_s;
    unsigned ibu_steps;          /* ibu_max_steps; 0: converge */
} fake_pop;

static size_t fp_cells(const void *profile)
{
    (void)profile;
    return FP_N;
}

static void fp_grid_shape(const void *profile, uint32_t *cols,
                          uint32_t *rows, double *w, double *h)
{
    (void)profile;
    *cols = *rows = FP_SIDE;
    *w = *h = FP_CELL;
}

static int fp_cell_of(const void *profile, double lat, double lon,
                      uint32_t *cell)
{
    (void)profile;
    if (!(lat >= 0 && lat < FP_SIDE && lon >= 0 && lon < FP_SIDE))
        return -1;
    *cell = (uint32_t)floor(lat) * FP_SIDE + (uint32_t)floor(lon);
    return 0;
}

static void fp_cell_bounds(const void *profile, uint32_t cell, double b[4])
{
    (void)profile;
    b[0] = cell / FP_SIDE;
    b[1] = cell % FP_SIDE;
    b[2] = b[0] + 1;
    b[3] = b[1] + 1;
}

static ts_vec2 fp_centre(const void *profile, uint32_t cell)
{
    (void)profile;
    return (ts_vec2){ (cell % FP_SIDE + 0.5) * FP_CELL,
                      (cell / FP_SIDE + 0.5) * FP_CELL };
}

static void fp_cycle(const void *profile, ts_population_cycle *out)
{
    const fake_pop *f = profile;
    out->reports = f->cycle_reports;
    out->seconds = f->cycle_s;
    out->ibu.precision = 1e-10;
    out->ibu.max_iterations = 200000;
    out->ibu.fixed_steps = f->ibu_steps;
}

static void *fp_build(const void *profile, const double *theta,
                      ts_channel_build_stats *stats, char *err,
                      size_t errlen)
{
    fake_pop *f = (fake_pop *)profile;   /* a test double keeps a log */
    double *m = malloc(FP_N * FP_N * sizeof *m);
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(m, f->first, FP_N * FP_N * sizeof *m);
    f->builds++;
    for (size_t i = 0; i < FP_N; i++)
        f->last_theta[i] = theta != NULL ? theta[i] : NAN;
    if (stats != NULL)
        *stats = (ts_channel_build_stats){ 0, 1, 0.0 };
    return m;
}

static void fp_free(void *channel)
{
    free(channel);
}

static const double *fp_matrix(const void *channel)
{
    return channel;
}

static void fp_install(void *profile, const void *channel, uint32_t version)
{
    fake_pop *f = profile;
    f->current = channel != NULL ? channel : f->first;
    f->version = version;
}

static const void *fp_current(const void *profile, uint32_t *version)
{
    const fake_pop *f = profile;
    if (version != NULL)
        *version = f->version;
    return f->current;
}

static const ts_population_ops fp_ops = {
    .adaptive = 1,
    .cells = fp_cells,
    .grid_shape = fp_grid_shape,
    .cell_of = fp_cell_of,
    .cell_bounds = fp_cell_bounds,
    .cell_centre = fp_centre,
    .cycle = fp_cycle,
    .channel_build = fp_build,
    .channel_free = fp_free,
    .channel_matrix = fp_matrix,
    .channel_install = fp_install,
    .channel_current = fp_current,
};


/* The same stand-in with a fixed channel (geoind's density case): the
 * loop estimates but never rebuilds. */
static ts_population_ops fixed_ops(void)
{
    ts_population_ops ops = fp_ops;
    ops.adaptive = 0;
    return ops;
}

static void fp_init(fake_pop *f, uint64_t cycle_reports)
{
    memset(f, 0, sizeof *f);
    f->first = malloc(FP_N * FP_N * sizeof *f->first);
    ck_assert_ptr_nonnull(f->first);
    char err[256];
    /* eps * cell = 3: about two thirds of an interior row's mass stays in
     * its cell, so the channel is well conditioned (||C^-T||_1 is small)
     * and the estimate's bound below is tight enough to mean something. */
    ck_assert_int_eq(ts_laplace_grid_channel(3.0 / FP_CELL, FP_SIDE, FP_SIDE,
                                             FP_CELL, FP_CELL, f->first, err,
                                             sizeof err), 0);
    f->current = f->first;
    f->version = 1;
    f->cycle_reports = cycle_reports;
}

static void fp_destroy(fake_pop *f)
{
    free(f->first);
}

/* The true distribution: a hot spot at the (1, 1) cell over a floor, full
 * support (every cell >= 1.5 %), so IBU's maximum lies inside the
 * simplex. */
static void fp_truth(double *pi)
{
    double total = 0.0;
    for (size_t x = 0; x < FP_N; x++) {
        ts_vec2 c = fp_centre(NULL, (uint32_t)x);
        pi[x] = 0.05 + exp(-hypot(c.x - 750.0, c.y - 750.0) / 500.0);
        total += pi[x];
    }
    for (size_t x = 0; x < FP_N; x++)
        pi[x] /= total;
}

/* Draws reports: a true cell from pi, a reported cell from that cell's
 * row of `matrix`. */
typedef struct report_source {
    ts_alias_table truth;
    ts_alias_table rows[FP_N];
} report_source;

static void source_init(report_source *s, const double *pi,
                        const double *matrix)
{
    ck_assert_int_eq(ts_alias_build(&s->truth, pi, FP_N), 0);
    for (size_t x = 0; x < FP_N; x++)
        ck_assert_int_eq(ts_alias_build(&s->rows[x], matrix + x * FP_N,
                                        FP_N), 0);
}

static void source_free(report_source *s)
{
    ts_alias_free(&s->truth);
    for (size_t x = 0; x < FP_N; x++)
        ts_alias_free(&s->rows[x]);
}

static uint32_t source_draw(const report_source *s, ts_rng *rng)
{
    uint32_t x = ts_alias_sample(&s->truth, rng);
    return ts_alias_sample(&s->rows[x], rng);
}

/* Observes a report of cell y drawn through `version`. */
static int observe_cell(ts_population_loop *loop, uint32_t y,
                        uint32_t version, int64_t ts_ms)
{
    return ts_population_observe(loop, y / FP_SIDE + 0.5, y % FP_SIDE + 0.5,
                                 version, ts_ms);
}

static double emd_of(const double *p, const double *q)
{
    ts_vec2 points[FP_N];
    for (uint32_t x = 0; x < FP_N; x++)
        points[x] = fp_centre(NULL, x);
    ts_emd_result r;
    char err[256];
    ck_assert_msg(ts_emd(points, FP_N, p, q, &r, err, sizeof err) == 0, "%s",
                  err);
    return r.distance;
}

/* max_y sum_x |A^-1 (x, y)| for A = C^T: the l1 operator norm of the map
 * from report frequencies back to the distribution, ||C^-T||_1. */
static double inverse_l1_norm(const double *c)
{
    gsl_matrix *a = gsl_matrix_alloc(FP_N, FP_N);
    gsl_matrix *inv = gsl_matrix_alloc(FP_N, FP_N);
    gsl_permutation *perm = gsl_permutation_alloc(FP_N);
    for (size_t x = 0; x < FP_N; x++)
        for (size_t y = 0; y < FP_N; y++)
            gsl_matrix_set(a, y, x, c[x * FP_N + y]);
    int sign;
    ck_assert_int_eq(gsl_linalg_LU_decomp(a, perm, &sign), 0);
    ck_assert_int_eq(gsl_linalg_LU_invert(a, perm, inv), 0);
    double norm = 0.0;
    for (size_t col = 0; col < FP_N; col++) {
        double s = 0.0;
        for (size_t row = 0; row < FP_N; row++)
            s += fabs(gsl_matrix_get(inv, row, col));
        norm = fmax(norm, s);
    }
    gsl_matrix_free(a);
    gsl_matrix_free(inv);
    gsl_permutation_free(perm);
    return norm;
}

/* How far the estimate from `reports` reports through channel c may be
 * from pi in EMD (metres), failing with probability below 1e-6.
 *
 * With q = C^T pi and q^ the report frequencies, IBU converges to the
 * maximum-likelihood estimate; when C^-T q^ lies inside the simplex (true
 * here: pi >= 1.5 % per cell and |q^ - q| is a fraction of that), that
 * estimate reproduces q^ exactly, so theta - pi = C^-T (q^ - q) and
 * |theta - pi|_1 <= ||C^-T||_1 |q^ - q|_1. E |q^ - q|_1 <= sum_y
 * sqrt(q_y (1 - q_y) / N) (Jensen), and one report moves |q^ - q|_1 by at
 * most 2 / N, so by McDiarmid it exceeds that mean by t with probability
 * at most exp(-N t^2 / 2): t = sqrt(2 ln(1e6) / N). Finally EMD <=
 * (largest distance) x (total variation = |.|_1 / 2). IBU stops short of
 * the maximum by a little (precision 1e-10 per iteration): 1e-4 of slack
 * in |.|_1 covers it many times over. */
static double emd_bound(const double *c, const double *pi, double reports)
{
    double mean = 0.0;
    for (size_t y = 0; y < FP_N; y++) {
        double q = 0.0;
        for (size_t x = 0; x < FP_N; x++)
            q += pi[x] * c[x * FP_N + y];
        mean += sqrt(q * (1.0 - q) / reports);
    }
    double dev = mean + sqrt(2.0 * log(1e6) / reports);
    double l1 = inverse_l1_norm(c) * dev + 1e-4;
    double diameter = hypot(FP_SIDE - 1, FP_SIDE - 1) * FP_CELL;
    return diameter * 0.5 * l1;
}

/* Observes reports through the current version, 100 ms apart, until the
 * loop says the cycle is due. */
static void fill_cycle(ts_population_loop *loop, const fake_pop *f,
                       const report_source *src, ts_rng *rng, int64_t *ts_ms,
                       uint64_t *observed)
{
    int due = 0;
    while (!due) {
        due = observe_cell(loop, source_draw(src, rng), f->version, *ts_ms);
        *ts_ms += 100;
        (*observed)++;
    }
}

/* Runs one cycle to its end: fills it, then closes, runs and finishes it.
 * Returns what finish returned. */
static int run_cycle(ts_population_loop *loop, fake_pop *f,
                     const report_source *src, ts_rng *rng, int64_t *ts_ms,
                     uint64_t *observed)
{
    fill_cycle(loop, f, src, rng, ts_ms, observed);
    ts_population_job job;
    ck_assert_int_eq(ts_population_close(loop, &job), 0);
    ts_population_run(&job);
    ck_assert_msg(job.ok, "%s", job.err);
    return ts_population_finish(loop, &job);
}

/* Versions advance by one per cycle, the estimate reaches the true PMF
 * within the bound above each cycle (while the uniform start is far
 * outside it), and each new channel is built from the new estimate. */
TS_TEST(test_loop_versions_and_estimate)
{
    enum { CYCLE = 100000, CYCLES = 3 };
    fake_pop f;
    fp_init(&f, CYCLE);
    double pi[FP_N], uniform[FP_N];
    fp_truth(pi);
    for (size_t x = 0; x < FP_N; x++)
        uniform[x] = 1.0 / FP_N;
    double bound = emd_bound(f.first, pi, CYCLE);
    double start = emd_of(uniform, pi);
    printf("loop: EMD bound %.1f m, uniform start %.1f m from the truth\n",
           bound, start);
    /* Otherwise the bound would not show the estimate moved at all. */
    ck_assert_double_lt(bound, 0.5 * start);

    ts_population_loop loop;
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops, &f), 0);
    ck_assert_ptr_null(loop.theta);
    report_source src;
    source_init(&src, pi, f.first);
    ts_rng *rng = ts_rng_new_seeded(8080);
    int64_t ts_ms = 0;
    uint64_t observed = 0;
    for (uint32_t k = 1; k <= CYCLES; k++) {
        ck_assert_int_eq(run_cycle(&loop, &f, &src, rng, &ts_ms, &observed),
                         1);
        ck_assert_uint_eq(observed, (uint64_t)k * CYCLE);
        ck_assert_uint_eq(f.version, k + 1);
        ck_assert_uint_eq(loop.source[1].version, k + 1);
        ck_assert_uint_eq(loop.cycles, k);
        ck_assert_uint_eq(f.builds, k);
        ck_assert_uint_eq(loop.reports_total, observed);
        ck_assert_uint_eq(loop.stale, 0);
        ck_assert_ptr_nonnull(loop.theta);
        double sum = 0.0;
        for (size_t x = 0; x < FP_N; x++) {
            ck_assert_double_eq(f.last_theta[x], loop.theta[x]);
            ck_assert_double_gt(loop.theta[x], 0.0);
            sum += loop.theta[x];
        }
        ck_assert_double_eq_tol(sum, 1.0, 1e-9);
        double emd = emd_of(loop.theta, pi);
        printf("loop cycle %u: EMD(theta, pi) = %.1f m\n", k, emd);
        ck_assert_msg(emd <= bound, "cycle %u: EMD %.1f m > %.1f m", k, emd,
                      bound);
    }
    ts_rng_free(rng);
    source_free(&src);
    /* Freeing the loop hands the profile back its own channel. */
    ck_assert_ptr_ne(f.current, f.first);
    ts_population_loop_free(&loop);
    ck_assert_ptr_eq(f.current, f.first);
    fp_destroy(&f);
}
END_TEST

/* Algorithm 1 step iv: a cycle's IBU result is combined with the earlier
 * estimate in proportion to the reports behind each, so the estimate
 * rests on every cycle, not the last one alone. Checked against IBU run
 * here on the cycle's own counts. */
TS_TEST(test_loop_combines_cycles_by_reports)
{
    enum { FIRST = 3000, SECOND = 1000 };
    fake_pop f;
    fp_init(&f, FIRST);
    double pi[FP_N];
    fp_truth(pi);
    ts_population_loop loop;
    ts_population_ops fp_ops_fixed = fixed_ops();
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops_fixed, &f), 0);
    report_source src;
    source_init(&src, pi, f.first);
    ts_rng *rng = ts_rng_new_seeded(4242);
    int64_t ts_ms = 0;
    uint64_t observed = 0;
    ck_assert_int_eq(run_cycle(&loop, &f, &src, rng, &ts_ms, &observed), 0);
    ck_assert_uint_eq(loop.estimated_reports, FIRST);
    double before[FP_N];
    memcpy(before, loop.theta, sizeof before);

    loop.cycle.reports = SECOND;
    fill_cycle(&loop, &f, &src, rng, &ts_ms, &observed);
    ts_population_job job;
    ck_assert_int_eq(ts_population_close(&loop, &job), 0);
    ck_assert_uint_eq(job.reports, SECOND);
    ck_assert_uint_eq(job.previous_reports, FIRST);
    double mu[FP_N];
    memcpy(mu, job.theta, sizeof mu);
    ts_ibu_result ibu;
    char err[256];
    ck_assert_int_eq(ts_gibu(job.sources, job.n_sources, FP_N, mu,
                             &job.ibu_params, &ibu, err, sizeof err), 0);
    ts_population_run(&job);
    ck_assert_msg(job.ok, "%s", job.err);
    ck_assert_int_eq(ts_population_finish(&loop, &job), 0);
    ck_assert_uint_eq(loop.estimated_reports, FIRST + SECOND);
    double w = (double)SECOND / (FIRST + SECOND);
    double moved = 0.0;
    for (size_t x = 0; x < FP_N; x++) {
        double want = w * mu[x] + (1.0 - w) * before[x];
        /* full support mixes in 1e-9 of uniform */
        ck_assert_msg(fabs(loop.theta[x] - want) <= 2e-9,
                      "cell %zu: %.12g, combination %.12g", x,
                      loop.theta[x], want);
        moved += fabs(mu[x] - before[x]);
    }
    /* The check means something only if the cycle's own estimate differs
     * from the earlier one. */
    ck_assert_double_gt(moved, 1e-3);
    ts_rng_free(rng);
    source_free(&src);
    ts_population_loop_free(&loop);
    fp_destroy(&f);
}
END_TEST

/* Algorithm 1 as written: each cycle's IBU starts from the previous
 * estimate (theta_t), not from uniform. With a fixed budget of 3 IBU
 * steps (ibu_max_steps) the start shows in the result: the loop's
 * estimate is the combination of 3 steps from the previous estimate, and
 * not that of 3 steps from uniform. */
TS_TEST(test_loop_ibu_starts_from_previous_estimate)
{
    enum { CYCLE = 2000, STEPS = 3 };
    fake_pop f;
    fp_init(&f, CYCLE);
    f.ibu_steps = STEPS;
    double pi[FP_N];
    fp_truth(pi);
    ts_population_loop loop;
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops, &f), 0);
    report_source src;
    source_init(&src, pi, f.first);
    ts_rng *rng = ts_rng_new_seeded(2828);
    int64_t ts_ms = 0;
    uint64_t observed = 0;
    ck_assert_int_eq(run_cycle(&loop, &f, &src, rng, &ts_ms, &observed), 1);
    double before[FP_N];
    memcpy(before, loop.theta, sizeof before);

    fill_cycle(&loop, &f, &src, rng, &ts_ms, &observed);
    ts_population_job job;
    ck_assert_int_eq(ts_population_close(&loop, &job), 0);
    ck_assert_int_eq(memcmp(job.theta, before, sizeof before), 0);
    ck_assert_uint_eq(job.ibu_params.fixed_steps, STEPS);
    double warm[FP_N], cold[FP_N];
    memcpy(warm, before, sizeof warm);
    for (size_t x = 0; x < FP_N; x++)
        cold[x] = 1.0 / FP_N;
    ts_ibu_result ibu;
    char err[256];
    ck_assert_int_eq(ts_gibu(job.sources, job.n_sources, FP_N, warm,
                             &job.ibu_params, &ibu, err, sizeof err), 0);
    ck_assert_uint_eq(ibu.iterations, STEPS);
    ck_assert_int_eq(ts_gibu(job.sources, job.n_sources, FP_N, cold,
                             &job.ibu_params, &ibu, err, sizeof err), 0);
    ts_population_run(&job);
    ck_assert_msg(job.ok, "%s", job.err);
    ck_assert_uint_eq(job.ibu.iterations, STEPS);
    ck_assert_int_eq(ts_population_finish(&loop, &job), 1);
    double w = (double)CYCLE / (2.0 * CYCLE);
    double off_cold = 0.0;
    for (size_t x = 0; x < FP_N; x++) {
        double want = w * warm[x] + (1.0 - w) * before[x];
        ck_assert_msg(fabs(loop.theta[x] - want) <= 2e-9,
                      "cell %zu: %.12g, warm-started combination %.12g", x,
                      loop.theta[x], want);
        off_cold += fabs(loop.theta[x] - (w * cold[x] + (1.0 - w) *
                                          before[x]));
    }
    /* Three steps from uniform end elsewhere: the test tells the starts
     * apart. */
    ck_assert_double_gt(off_cold, 1e-3);
    ts_rng_free(rng);
    source_free(&src);
    ts_population_loop_free(&loop);
    fp_destroy(&f);
}
END_TEST

/* A job runs while reports go on: those drawn through the current version
 * are kept for the next cycle, which then has two channel versions (GIBU
 * sources); reports of a version two back, or of none, are stale; points
 * in no cell are counted as outside. A cycle may also end on event time. */
TS_TEST(test_loop_sources_stale_and_time)
{
    fake_pop f;
    fp_init(&f, 10);
    ts_population_loop loop;
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops, &f), 0);
    ts_population_job job;
    ck_assert_int_eq(ts_population_close(&loop, &job), -1); /* nothing yet */
    for (int k = 0; k < 9; k++)
        ck_assert_int_eq(observe_cell(&loop, (uint32_t)k, 1, k), 0);
    ck_assert_int_eq(observe_cell(&loop, 3, 1, 9), 1);
    ck_assert_int_eq(ts_population_close(&loop, &job), 0);
    ck_assert_uint_eq(job.n_sources, 1);
    ck_assert_uint_eq(job.reports, 10);
    /* While it runs: more version-1 reports, never "due". */
    for (int k = 0; k < 12; k++)
        ck_assert_int_eq(observe_cell(&loop, 5, 1, 100 + k), 0);
    ck_assert_int_eq(ts_population_close(&loop, &job), -1); /* one job */
    ts_population_run(&job);
    ck_assert_msg(job.ok, "%s", job.err);
    ck_assert_int_eq(ts_population_finish(&loop, &job), 1);
    ck_assert_uint_eq(f.version, 2);
    /* Late version-1 reports still count; version 2 is current. The 12
     * reports kept from the job's time already make the next cycle due. */
    ck_assert_int_eq(observe_cell(&loop, 6, 1, 200), 1);
    ck_assert_int_eq(observe_cell(&loop, 7, 2, 201), 1);
    ck_assert_int_eq(observe_cell(&loop, 7, 99, 202), 0);     /* unknown */
    ck_assert_int_eq(ts_population_observe(&loop, -1.0, 2.0, 2, 203), 0);
    ck_assert_uint_eq(loop.stale, 1);
    ck_assert_uint_eq(loop.outside, 1);
    ck_assert_int_eq(ts_population_close(&loop, &job), 0);
    ck_assert_uint_eq(job.n_sources, 2);
    ck_assert_uint_eq(job.reports, 12 + 1 + 1);
    ts_population_run(&job);
    ck_assert_msg(job.ok, "%s", job.err);
    ck_assert_int_eq(ts_population_finish(&loop, &job), 1);
    ck_assert_uint_eq(f.version, 3);
    ck_assert_uint_eq(loop.cycles, 2);
    ck_assert_uint_eq(loop.reports_total, 10 + 12 + 2);
    /* Version 1 is now two back: dropped. */
    ck_assert_int_eq(observe_cell(&loop, 1, 1, 300), 0);
    ck_assert_uint_eq(loop.stale, 2);
    ck_assert_int_eq(observe_cell(&loop, 1, 2, 301), 0);
    ck_assert_uint_eq(loop.stale, 2);
    /* Reports of version 2 that arrive while the job for version 4 runs
     * are dropped when it finishes: they become stale, leave the total,
     * and do not make a cycle of their own (there is nothing to close). */
    ck_assert_int_eq(observe_cell(&loop, 2, 3, 302), 0);
    ck_assert_int_eq(ts_population_close(&loop, &job), 0);
    ck_assert_uint_eq(job.n_sources, 2);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(observe_cell(&loop, 4, 2, 303 + k), 0);
    uint64_t total = loop.reports_total;
    ts_population_run(&job);
    ck_assert_msg(job.ok, "%s", job.err);
    ck_assert_int_eq(ts_population_finish(&loop, &job), 1);
    ck_assert_uint_eq(f.version, 4);
    ck_assert_uint_eq(loop.stale, 2 + 3);
    ck_assert_uint_eq(loop.reports_total, total - 3);
    ck_assert_uint_eq(loop.cycle_reports, 0);
    ck_assert_int_eq(ts_population_close(&loop, &job), -1);
    ts_population_loop_free(&loop);
    fp_destroy(&f);

    /* Event time: a 10 s cycle with no report limit. */
    fp_init(&f, 0);
    f.cycle_s = 10.0;
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops, &f), 0);
    ck_assert_int_eq(observe_cell(&loop, 0, 1, 50000), 0);
    ck_assert_int_eq(observe_cell(&loop, 1, 1, 55000), 0);
    ck_assert_int_eq(observe_cell(&loop, 2, 1, 59999), 0);
    ck_assert_int_eq(observe_cell(&loop, 3, 1, 60000), 1);
    ts_population_loop_free(&loop);
    fp_destroy(&f);

    /* A fixed (non-adaptive) mechanism: the estimate moves, the channel
     * and its version do not. */
    fp_init(&f, 5);
    ts_population_ops fp_ops_fixed = fixed_ops();
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops_fixed, &f), 0);
    for (uint32_t k = 0; k < 5; k++)
        observe_cell(&loop, k, 1, k);
    ck_assert_int_eq(ts_population_close(&loop, &job), 0);
    ts_population_run(&job);
    ck_assert_int_eq(ts_population_finish(&loop, &job), 0);
    ck_assert_uint_eq(f.version, 1);
    ck_assert_uint_eq(f.builds, 0);
    ck_assert_uint_eq(loop.cycles, 1);
    ck_assert_ptr_nonnull(loop.theta);
    ts_population_loop_free(&loop);
    fp_destroy(&f);
}
END_TEST

/* restore() resumes where a persisted loop stopped: its version, cycles,
 * report count and estimate (the channel rebuilt from it), and the next
 * cycle goes one version on. An estimate of another length (the grid
 * changed) is dropped but the version still installed, and the loop must
 * go on working on the profile's own channel. */
TS_TEST(test_loop_restore)
{
    fake_pop f;
    fp_init(&f, 50);
    double pi[FP_N];
    fp_truth(pi);
    report_source src;
    source_init(&src, pi, f.first);
    ts_rng *rng = ts_rng_new_seeded(99);
    int64_t ts_ms = 0;
    uint64_t observed = 0;
    char err[256];

    ts_population_loop loop;
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops, &f), 0);
    ck_assert_int_eq(ts_population_restore(&loop, 7, 3, 1234, pi, FP_N, err,
                                           sizeof err), 0);
    ck_assert_uint_eq(loop.cycles, 3);
    ck_assert_uint_eq(loop.reports_total, 1234);
    ck_assert_uint_eq(f.version, 7);
    ck_assert_uint_eq(f.builds, 1);
    /* Up to the loop's 1e-9 full-support mix. */
    for (size_t x = 0; x < FP_N; x++) {
        ck_assert_double_eq_tol(f.last_theta[x], pi[x], 1e-9);
        ck_assert_double_eq(loop.theta[x], f.last_theta[x]);
    }
    /* Reports of the version before the restore are not counted. */
    ck_assert_int_eq(observe_cell(&loop, 0, 1, 0), 0);
    ck_assert_uint_eq(loop.stale, 1);
    ck_assert_int_eq(run_cycle(&loop, &f, &src, rng, &ts_ms, &observed), 1);
    ck_assert_uint_eq(f.version, 8);
    ck_assert_uint_eq(loop.cycles, 4);
    ck_assert_uint_eq(loop.reports_total, 1234 + observed);
    ts_population_loop_free(&loop);

    /* The grid changed: a theta of the wrong length. */
    double longer[FP_N + 1];
    for (size_t x = 0; x <= FP_N; x++)
        longer[x] = 1.0 / (FP_N + 1);
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops, &f), 0);
    unsigned builds = f.builds;
    ck_assert_int_eq(ts_population_restore(&loop, 12, 0, 0, longer,
                                           FP_N + 1, err, sizeof err), 0);
    ck_assert_uint_eq(f.version, 12);
    ck_assert_uint_eq(f.builds, builds);
    ck_assert_ptr_eq(f.current, f.first);
    ck_assert_ptr_null(loop.theta);
    observed = 0;
    ck_assert_int_eq(run_cycle(&loop, &f, &src, rng, &ts_ms, &observed), 1);
    ck_assert_uint_eq(f.version, 13);
    ck_assert_uint_eq(loop.cycles, 1);
    ts_population_loop_free(&loop);

    /* No estimate at all (a fresh store record). */
    ck_assert_int_eq(ts_population_loop_init(&loop, &fp_ops, &f), 0);
    ck_assert_int_eq(ts_population_restore(&loop, 20, 0, 0, NULL, 0, err,
                                           sizeof err), 0);
    ck_assert_uint_eq(f.version, 20);
    ck_assert_int_eq(run_cycle(&loop, &f, &src, rng, &ts_ms, &observed), 1);
    ck_assert_uint_eq(f.version, 21);
    ts_population_loop_free(&loop);

    ts_rng_free(rng);
    source_free(&src);
    fp_destroy(&f);
}
END_TEST

/* The real thing end to end: releases of privic from true points drawn
 * from a known PMF, fed back through the loop. Every cycle installs a new
 * BA channel one version on, releases carry it, and the estimate after
 * each cycle is within the same MLE bound, computed for the channel that
 * cycle's reports went through (every report of a cycle went through one
 * version, since each job finishes before the next report). */
TS_TEST(test_privic_loop_end_to_end)
{
    enum { CYCLE = 40000 };
    param_table t = { .n = 0 };
    param_string(&t, "region", PARIS);
    param_int(&t, "cols", FP_SIDE);
    param_int(&t, "rows", FP_SIDE);
    param_double(&t, "beta", 1.0);
    param_int(&t, "cycle_reports", CYCLE);
    param_double(&t, "ibu_precision", 1e-10);
    param_int(&t, "ibu_max_iterations", 200000);
    void *profile = profile_from(&t);
    ck_assert_uint_eq(pop()->cells(profile), FP_N);
    double pi[FP_N];
    fp_truth(pi);
    ts_alias_table truth;
    ck_assert_int_eq(ts_alias_build(&truth, pi, FP_N), 0);
    double lat[FP_N], lon[FP_N];
    for (uint32_t x = 0; x < FP_N; x++)
        cell_middle(profile, x, &lat[x], &lon[x]);
    ts_vec2 points[FP_N];
    for (uint32_t x = 0; x < FP_N; x++)
        points[x] = pop()->cell_centre(profile, x);

    ts_population_loop loop;
    ck_assert_int_eq(ts_population_loop_init(&loop, pop(), profile), 0);
    ts_rng *rng = ts_rng_new_seeded(1234);
    const void *first = pop()->channel_current(profile, NULL);
    for (uint32_t k = 1; k <= 3; k++) {
        uint32_t version;
        const double *used = current_matrix(profile, &version);
        ck_assert_uint_eq(version, k);
        /* The bound, as in emd_bound, for this channel and these cells. */
        double mean = 0.0;
        for (size_t y = 0; y < FP_N; y++) {
            double q = 0.0;
            for (size_t x = 0; x < FP_N; x++)
                q += pi[x] * used[x * FP_N + y];
            mean += sqrt(q * (1.0 - q) / CYCLE);
        }
        double l1 = inverse_l1_norm(used) *
                        (mean + sqrt(2.0 * log(1e6) / CYCLE)) + 1e-4;
        double diameter = 0.0;
        for (size_t a = 0; a < FP_N; a++)
            for (size_t b = 0; b < FP_N; b++)
                diameter = fmax(diameter, hypot(points[a].x - points[b].x,
                                                points[a].y - points[b].y));
        double bound = diameter * 0.5 * l1;
        double uniform[FP_N];
        for (size_t x = 0; x < FP_N; x++)
            uniform[x] = 1.0 / FP_N;
        ts_emd_result start;
        char err[256];
        ck_assert_int_eq(ts_emd(points, FP_N, uniform, pi, &start, err,
                                sizeof err), 0);
        /* Otherwise the bound would not show the estimate moved. */
        ck_assert_double_lt(bound, 0.5 * start.distance);

        int due = 0;
        for (int64_t i = 0; !due; i++) {
            uint32_t x = ts_alias_sample(&truth, rng);
            ts_report out;
            ck_assert_int_eq(release_at(profile, lat[x], lon[x], rng, &out),
                             TS_RELEASE_OK);
            ck_assert_uint_eq(out.channel_version, k);
            due = ts_population_observe(&loop, out.lat, out.lon,
                                        out.channel_version, i * 1000);
        }
        ts_population_job job;
        ck_assert_int_eq(ts_population_close(&loop, &job), 0);
        ts_population_run(&job);
        ck_assert_msg(job.ok, "%s", job.err);
        ck_assert_int_eq(ts_population_finish(&loop, &job), 1);
        ck_assert_uint_eq(loop.outside, 0);
        ts_emd_result r;
        ck_assert_int_eq(ts_emd(points, FP_N, loop.theta, pi, &r, err,
                                sizeof err), 0);
        printf("privic cycle %u: EMD(theta, pi) %.1f m (bound %.1f m)\n", k,
               r.distance, bound);
        ck_assert_msg(r.distance <= bound, "cycle %u: EMD %.1f > %.1f", k,
                      r.distance, bound);
    }
    uint32_t version;
    ck_assert_ptr_ne(pop()->channel_current(profile, &version), first);
    ck_assert_uint_eq(version, 4);
    ts_report out;
    ck_assert_int_eq(release_at(profile, lat[0], lon[0], rng, &out),
                     TS_RELEASE_OK);
    ck_assert_uint_eq(out.channel_version, 4);
    ts_population_loop_free(&loop);
    /* The profile's own channel again, never freed under it. */
    ck_assert_ptr_eq(pop()->channel_current(profile, NULL), first);
    ck_assert_int_eq(release_at(profile, lat[0], lon[0], rng, &out),
                     TS_RELEASE_OK);
    ts_rng_free(rng);
    ts_alias_free(&truth);
    ts_privic_ops.profile_free(profile);
}
END_TEST

/* Real populations leave cells empty (water, parks). Reports all of one
 * cell, and IBU run to a tight precision, drive the estimate of the other
 * cells to exactly 0 by underflow; BA refuses a prior without full
 * support, so unless the loop keeps its estimate full-support every
 * later cycle fails and the channel never changes again. The same for an
 * estimate with zeros restored from the store. */
TS_TEST(test_privic_loop_survives_empty_cells)
{
    param_table t = { .n = 0 };
    paris_params(&t);
    param_int(&t, "cycle_reports", 500);
    param_double(&t, "ibu_precision", 1e-15);
    param_int(&t, "ibu_max_iterations", 1000000);
    void *profile = profile_from(&t);
    size_t n = pop()->cells(profile);
    double lat, lon;
    cell_middle(profile, 7, &lat, &lon);
    ts_population_loop loop;
    ck_assert_int_eq(ts_population_loop_init(&loop, pop(), profile), 0);
    ts_rng *rng = ts_rng_new_seeded(3);
    for (uint32_t k = 1; k <= 2; k++) {
        int due = 0;
        while (!due) {
            ts_report out;
            ck_assert_int_eq(release_at(profile, lat, lon, rng, &out),
                             TS_RELEASE_OK);
            uint32_t cell;
            ck_assert_int_eq(pop()->cell_of(profile, out.lat, out.lon, &cell),
                             0);
            /* Only the true cell's reports are kept: the other cells'
             * reports would leave them some support. */
            if (cell != 7)
                continue;
            due = ts_population_observe(&loop, out.lat, out.lon,
                                        out.channel_version, 0);
        }
        ts_population_job job;
        ck_assert_int_eq(ts_population_close(&loop, &job), 0);
        ts_population_run(&job);
        ck_assert_msg(job.ok, "cycle %u: %s", k, job.err);
        ck_assert_int_eq(ts_population_finish(&loop, &job), 1);
        uint32_t version;
        pop()->channel_current(profile, &version);
        ck_assert_uint_eq(version, k + 1);
        for (size_t x = 0; x < n; x++)
            ck_assert_double_gt(loop.theta[x], 0.0);
        ck_assert_double_gt(loop.theta[7], 0.99);
    }
    ts_population_loop_free(&loop);

    double *point_mass = calloc(n, sizeof *point_mass);
    ck_assert_ptr_nonnull(point_mass);
    point_mass[7] = 1.0;
    char err[256];
    ck_assert_int_eq(ts_population_loop_init(&loop, pop(), profile), 0);
    ck_assert_msg(ts_population_restore(&loop, 9, 2, 1000, point_mass, n,
                                        err, sizeof err) == 0, "%s", err);
    uint32_t version;
    pop()->channel_current(profile, &version);
    ck_assert_uint_eq(version, 9);
    ts_population_loop_free(&loop);
    free(point_mass);
    ts_rng_free(rng);
    ts_privic_ops.profile_free(profile);
}
END_TEST

/* ------------------------------------------- records and resuming */

static int records_equal(const ts_population_record *a,
                         const ts_population_record *b)
{
    if (a->format != b->format || a->version != b->version ||
        a->cycles != b->cycles || a->reports_total != b->reports_total ||
        a->n != b->n || (a->theta == NULL) != (b->theta == NULL))
        return 0;
    if (a->theta != NULL &&
        memcmp(a->theta, b->theta, a->n * sizeof *a->theta) != 0)
        return 0;
    if (a->format == 1)
        return 1;
    return a->previous_kind == b->previous_kind &&
           (a->previous_kind != TS_PRIOR_ESTIMATE ||
            memcmp(a->previous, b->previous, a->n * sizeof *a->previous) ==
                0) &&
           a->stale == b->stale && a->outside == b->outside &&
           a->estimated_reports == b->estimated_reports &&
           a->last_reports == b->last_reports &&
           a->estimated_at_ms == b->estimated_at_ms &&
           a->out_seq == b->out_seq;
}

/* Encodes, decodes and compares; every shorter prefix and one longer
 * buffer must be refused (a record cut short by a lost byte is never
 * taken for another one). */
static void check_round_trip(const ts_population_record *r)
{
    size_t len = ts_population_record_size(r);
    unsigned char *bytes = malloc(len + 1);
    ck_assert_ptr_nonnull(bytes);
    ts_population_record_encode(r, bytes);
    ts_population_record back;
    int oom;
    ck_assert_int_eq(ts_population_record_decode(bytes, len, &back, &oom), 0);
    ck_assert_msg(records_equal(r, &back), "format %d: not the same record",
                  r->format);
    ts_population_record_free(&back);
    for (size_t cut = 0; cut < len; cut++)
        ck_assert_msg(ts_population_record_decode(bytes, cut, &back, &oom) !=
                          0, "format %d: a %zu-byte prefix of %zu decoded",
                      r->format, cut, len);
    bytes[len] = 0;
    ck_assert_int_ne(ts_population_record_decode(bytes, len + 1, &back, &oom),
                     0);
    free(bytes);
}

TS_TEST(test_population_records_round_trip)
{
    double theta[FP_N], previous[FP_N];
    for (size_t x = 0; x < FP_N; x++) {
        theta[x] = (x + 1.0) / (FP_N * (FP_N + 1) / 2.0);
        previous[x] = 1.0 / FP_N + (x % 2 ? 1e-3 : -1e-3);
    }
    /* Format 1, the single-node store's record, byte for byte as before
     * (version 1 byte, u32 version, u32 cycles, u64 reports, u32 cells,
     * f64 estimate: the records of stores written by older versions). */
    ts_population_record one = {
        .format = 1, .version = 7, .cycles = 3, .reports_total = 1234,
        .n = FP_N, .theta = theta,
    };
    ck_assert_uint_eq(ts_population_record_size(&one), 21 + 8 * FP_N);
    unsigned char bytes[21 + 8 * FP_N];
    ts_population_record_encode(&one, bytes);
    ck_assert_uint_eq(bytes[0], 1);
    ck_assert_uint_eq(bytes[1], 7);
    ck_assert_uint_eq(bytes[5], 3);
    ck_assert_uint_eq(bytes[9] | bytes[10] << 8, 1234);
    ck_assert_uint_eq(bytes[17], FP_N);
    double first;
    memcpy(&first, bytes + 21, sizeof first);  /* little-endian host */
    ck_assert_double_eq(first, theta[0]);
    check_round_trip(&one);
    one.theta = NULL;  /* no estimate: no cells */
    one.n = 0;
    ck_assert_uint_eq(ts_population_record_size(&one), 21);
    check_round_trip(&one);

    ts_population_record two = {
        .format = 2, .version = 12, .cycles = 11, .reports_total = 5000,
        .n = FP_N, .theta = theta, .previous_kind = TS_PRIOR_ESTIMATE,
        .previous = previous, .stale = 17, .outside = 2,
        .estimated_reports = 4900, .last_reports = 450,
        .estimated_at_ms = -5, .out_seq = 987654321012ull,
    };
    check_round_trip(&two);
    two.previous_kind = TS_PRIOR_UNIFORM;
    two.previous = NULL;
    check_round_trip(&two);
    two.theta = NULL;
    two.previous_kind = TS_PRIOR_NONE;
    check_round_trip(&two);

    /* Not a record: another format byte, or a kind out of range. */
    size_t len = ts_population_record_size(&two);
    unsigned char *b = malloc(len);
    ck_assert_ptr_nonnull(b);
    ts_population_record_encode(&two, b);
    ts_population_record back;
    int oom;
    b[0] = 3;
    ck_assert_int_ne(ts_population_record_decode(b, len, &back, &oom), 0);
    b[0] = 2;
    b[21] = 7;
    ck_assert_int_ne(ts_population_record_decode(b, len, &back, &oom), 0);
    free(b);
}
END_TEST

/* A stream of published reports as the cluster's holder reads it: each
 * drawn through the version its instance had installed, which lags the
 * newest by 0, 1 or 2 (an instance that had not adopted it yet). */
typedef struct published {
    uint32_t cell;
    uint32_t version;
} published;

/* Holds the channels of every version (a detached loop borrows them). */
typedef struct version_channels {
    const void *of[64];
    void *owned[64];
} version_channels;

static published draw_published(ts_rng *rng, uint32_t newest)
{
    double u = ts_rng_uniform_open(rng);
    uint32_t lag = u < 0.7 ? 0 : u < 0.9 ? 1 : 2;
    published p = { (uint32_t)(ts_rng_uniform_open(rng) * FP_N),
                    newest > lag ? newest - lag : 1 };
    return p;
}

/* The record a holder writes for `job`, closed at out_seq with the
 * loop's counters at that moment. */
static ts_population_record record_of_job(const ts_population_loop *loop,
                                          const ts_population_job *job,
                                          uint64_t out_seq,
                                          uint64_t reports_total,
                                          uint64_t stale, uint64_t outside)
{
    return (ts_population_record){
        .format = 2, .version = loop->source[1].version + 1,
        .cycles = loop->cycles + 1, .reports_total = reports_total,
        .n = loop->n, .theta = job->theta,
        .previous_kind = loop->theta != NULL ? TS_PRIOR_ESTIMATE
                                             : TS_PRIOR_UNIFORM,
        .previous = loop->theta, .stale = stale, .outside = outside,
        .estimated_reports = loop->estimated_reports + job->reports,
        .last_reports = job->reports, .out_seq = out_seq,
    };
}

static void assert_same_loop(const ts_population_loop *a,
                             const ts_population_loop *b)
{
    ck_assert_uint_eq(a->cycles, b->cycles);
    ck_assert_uint_eq(a->reports_total, b->reports_total);
    ck_assert_uint_eq(a->stale, b->stale);
    ck_assert_uint_eq(a->outside, b->outside);
    ck_assert_uint_eq(a->estimated_reports, b->estimated_reports);
    ck_assert_uint_eq(a->cycle_reports, b->cycle_reports);
    ck_assert_int_eq(a->theta != NULL, b->theta != NULL);
    if (a->theta != NULL)
        ck_assert(memcmp(a->theta, b->theta, a->n * sizeof *a->theta) == 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(a->source[i].version, b->source[i].version);
        ck_assert_uint_eq(a->source[i].reports, b->source[i].reports);
        ck_assert_ptr_eq(a->source[i].channel, b->source[i].channel);
        ck_assert_int_eq(a->source[i].counts != NULL,
                         b->source[i].counts != NULL);
        if (a->source[i].counts != NULL)
            ck_assert(memcmp(a->source[i].counts, b->source[i].counts,
                             a->n * sizeof *a->source[i].counts) == 0);
    }
}

/* A holder's job between its close and its write, and the loop's
 * counters at the close (what the record will say it accounts for). */
typedef struct job_in_flight {
    ts_population_job job;
    int open;
    uint64_t out_seq, total, stale, outside, finish_at;
} job_in_flight;

static void job_closed(job_in_flight *j, const ts_population_loop *loop,
                       uint64_t seq, uint64_t lag)
{
    ts_population_run(&j->job);
    ck_assert_msg(j->job.ok, "%s", j->job.err);
    j->open = 1;
    j->out_seq = seq;
    j->total = loop->reports_total;
    j->stale = loop->stale;
    j->outside = loop->outside;
    j->finish_at = seq + lag;
}

/* What a failover relies on: a holder that resumes from the last record
 * and reads the stream again from the position after it is, report for
 * report, the holder that went on. Holder A counts a stream whose reports
 * lag the newest version, closes cycles, writes each result once the
 * reports that arrived while its job ran were counted (as the cluster's
 * job thread lets them), and shifts; at each write, a fresh holder B is
 * resumed from that record alone and fed the stream after its out_seq.
 * Both must agree on every counter and count, and then on the next
 * cycle's estimate. The accounting of every record is checked too: each
 * report up to out_seq counted, stale or outside exactly once. */
TS_TEST(test_population_resume_goes_on_exactly)
{
    enum { CYCLE = 60, STREAM = 2000, JOB_LAG = 25 };
    fake_pop f;
    fp_init(&f, CYCLE);
    version_channels ch = { .of = { [1] = f.first } };
    static published stream[STREAM + 1];
    ts_rng *rng = ts_rng_new_seeded(2626);
    ts_population_loop a;
    ck_assert_int_eq(ts_population_loop_init_detached(&a, &fp_ops, &f,
                                                      f.first, 1), 0);
    uint32_t newest = 1;
    job_in_flight j = { .open = 0 };
    unsigned resumed = 0;
    for (uint64_t seq = 1; seq <= STREAM; seq++) {
        stream[seq] = draw_published(rng, newest);
        ts_population_observe(&a, stream[seq].cell / FP_SIDE + 0.5,
                              stream[seq].cell % FP_SIDE + 0.5,
                              stream[seq].version, (int64_t)seq);
        if (j.open && seq == j.finish_at) {
            ts_population_record r = record_of_job(&a, &j.job, j.out_seq,
                                                   j.total, j.stale,
                                                   j.outside);
            /* Every report up to out_seq is accounted for once. */
            ck_assert_uint_eq(r.reports_total + r.stale + r.outside,
                              j.out_seq);
            ts_population_record copy;
            size_t len = ts_population_record_size(&r);
            unsigned char *bytes = malloc(len);
            ck_assert_ptr_nonnull(bytes);
            ts_population_record_encode(&r, bytes);
            int oom;
            ck_assert_int_eq(ts_population_record_decode(bytes, len, &copy,
                                                         &oom), 0);
            free(bytes);
            void *next = j.job.channel;
            j.job.channel = NULL;
            ck_assert_int_eq(ts_population_finish(&a, &j.job), 0);
            ck_assert_int_eq(ts_population_shift(&a, next, r.version), 0);
            ch.of[r.version] = ch.owned[r.version] = next;
            newest = r.version;
            j.open = 0;

            /* B: the record and the stream after out_seq, nothing else. */
            ts_population_loop b;
            memset(&b, 0, sizeof b);
            ck_assert_int_eq(ts_population_resume(&b, &fp_ops, &f, &copy,
                                                  ch.of[copy.version],
                                                  ch.of[copy.version - 1]),
                             0);
            for (uint64_t k = copy.out_seq + 1; k <= seq; k++)
                ts_population_observe(&b, stream[k].cell / FP_SIDE + 0.5,
                                      stream[k].cell % FP_SIDE + 0.5,
                                      stream[k].version, (int64_t)k);
            assert_same_loop(&a, &b);
            /* And both make the same next estimate. */
            if (ts_population_due(&a)) {
                ts_population_job jb;
                ck_assert_int_eq(ts_population_close(&a, &j.job), 0);
                ck_assert_int_eq(ts_population_close(&b, &jb), 0);
                job_closed(&j, &a, seq, JOB_LAG);
                ts_population_run(&jb);
                ck_assert(jb.ok);
                ck_assert(memcmp(j.job.theta, jb.theta,
                                 FP_N * sizeof *jb.theta) == 0);
                ts_population_job_free(&jb);
            }
            ts_population_record_free(&copy);
            ts_population_loop_free(&b);
            resumed++;
        }
        if (!j.open && ts_population_due(&a)) {
            ck_assert_int_eq(ts_population_close(&a, &j.job), 0);
            job_closed(&j, &a, seq, JOB_LAG);
        }
    }
    printf("resume: %u resumes agreed; %" PRIu64 " reports counted, %"
           PRIu64 " stale, version %u\n", resumed, a.reports_total, a.stale,
           newest);
    ck_assert_uint_ge(resumed, 10);
    ck_assert_uint_gt(a.stale, 0);   /* the lag reached beyond two */
    if (j.open)
        ts_population_job_free(&j.job);
    ts_population_loop_free(&a);
    for (size_t v = 0; v < 64; v++)
        if (ch.owned[v] != NULL)
            fp_free(ch.owned[v]);
    ts_rng_free(rng);
    fp_destroy(&f);
}
END_TEST

static void setup(void)
{
    /* As tracesand and tracesan do: a failed quadrature is an error
     * return, not an abort. */
    gsl_set_error_handler_off();
}

int main(void)
{
    return ts_check_main("privic", 300, setup, NULL);
}
