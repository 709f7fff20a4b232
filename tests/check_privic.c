/* The PRIVIC mechanism (mechanisms/privic.c), the exact planar Laplace grid
 * channel (mechanisms/laplace_channel.c), through their public
 * interfaces; the PRIVIC loop is in check_population_loop.c.
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
#include "tests/support/privic_fixture.h"

/* ------------------------------------------------------------- helpers */

static const double paris_box[4] = { 48.80, 2.25, 48.90, 2.40 };

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
