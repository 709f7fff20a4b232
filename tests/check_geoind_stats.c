/* Statistical and contract tests of the planar Laplace sampler and the
 * geoind mechanism.
 *
 * Tolerances (fixed seeds, so each run is identical; bounds from theory so a
 * correct sampler passes for essentially any seed):
 *   - Kolmogorov-Smirnov: reject when D >= 1.949 / sqrt(n), the asymptotic
 *     critical value at alpha = 0.001 (sqrt(ln(2 / alpha) / 2) = 1.9495).
 *   - Mean radius: the radius is Gamma(2, 1/eps), mean 2/eps, standard
 *     deviation sqrt(2)/eps, so the standard error of the mean of n samples
 *     is sqrt(2)/(eps sqrt(n)): 0.16 % of 2/eps at n = 200k, and the
 *     required 1 % is 6.3 standard errors.
 * Loops count violations and assert once (Check writes a record per passing
 * assertion).
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "mechanisms/geoind.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/planar_laplace.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_params.h"
#include "tests/support/ks.h"

#define DEFAULT_LEVEL 2.302585092994046
#define BEIJING_LAT 39.9042
#define BEIJING_LON 116.4074

enum { N_DIRECT = 200000, N_RELEASE = 100000 };

/* ------------------------------------------------------------- helpers */

static double radius_cdf(double r, double eps)
{
    return ts_planar_laplace_radius_cdf(eps, r);
}

static double uniform_angle_cdf(double a, double unused)
{
    (void)unused;
    return a / (2.0 * M_PI);
}

static int make_profile(const param_entry *items, size_t count, void **profile,
                        char *err, size_t errlen)
{
    param_table table = {.n = 0};
    for (size_t k = 0; k < count; k++)
        param_add(&table, items[k]);
    ts_params params = table_params(&table);
    err[0] = '\0';
    return ts_geoind_ops.profile_new(&params, profile, err, errlen);
}

static void *default_profile(void)
{
    void *profile = NULL;
    char err[256];
    ck_assert_int_eq(make_profile(NULL, 0, &profile, err, sizeof err), 0);
    ck_assert_ptr_nonnull(profile);
    return profile;
}

/* ---------------------------------------------------- sampler directly */

/* Large samples for the KS and tail checks: a longer timeout. */
TS_CASE(statistics, 300, NULL, NULL);

TS_TEST_IN(statistics, test_radius_and_angle_direct)
{
    static double radii[N_DIRECT], angles[N_DIRECT];
    const double eps = DEFAULT_LEVEL / 100.0 / 30.0; /* shipped eps_point */
    ts_rng *rng = ts_rng_new_seeded(20240601);
    double sum = 0.0;
    long bad = 0;
    for (int i = 0; i < N_DIRECT; i++) {
        ts_planar_laplace_sample(rng, eps, &radii[i], &angles[i]);
        bad += !(radii[i] >= 0.0 && isfinite(radii[i]));
        bad += !(angles[i] >= 0.0 && angles[i] < 2.0 * M_PI);
        sum += radii[i];
    }
    ck_assert_int_eq(bad, 0);

    double mean = sum / N_DIRECT, expected = 2.0 / eps;
    double se = sqrt(2.0) / eps / sqrt(N_DIRECT);
    ck_assert_msg(fabs(mean - expected) <= 0.01 * expected,
                  "mean radius %.3f m, expected %.3f m (se %.3f)", mean, expected, se);
    ck_assert_double_le(fabs(mean - expected), 5.0 * se);

    double critical = KS_CRITICAL_001 / sqrt(N_DIRECT);
    double d_radius = ts_ks_statistic(radii, N_DIRECT, radius_cdf, eps);
    ck_assert_msg(d_radius < critical, "radius KS D = %g >= %g", d_radius, critical);
    double d_angle = ts_ks_statistic(angles, N_DIRECT, uniform_angle_cdf, 0.0);
    ck_assert_msg(d_angle < critical, "angle KS D = %g >= %g", d_angle, critical);

    /* Test the test: a 3 % error in eps is detected by the same KS check
     * (the expected D is ~0.012 against a critical value of 0.0044). */
    ck_assert_double_ge(ts_ks_statistic(radii, N_DIRECT, radius_cdf, 1.03 * eps), critical);
    ck_assert_double_ge(ts_ks_statistic(radii, N_DIRECT, radius_cdf, 0.97 * eps), critical);
    ts_rng_free(rng);
}
END_TEST

/* The inverse CDF is accurate over the whole range: C(icdf(p)) = p to a
 * few ulps, checked on p below the median and on 1 - p above it (where p
 * itself cannot resolve the tail). */
TS_TEST_IN(statistics, test_icdf_accuracy)
{
    const double eps = 0.01;
    long bad = 0;
    double prev = 0.0;
    for (double lp = -300.0; lp < -0.302; lp += 0.01) {
        double p = pow(10.0, lp);
        double r = ts_planar_laplace_radius_icdf(eps, p);
        bad += !(r > prev);
        prev = r;
        bad += !(fabs(ts_planar_laplace_radius_cdf(eps, r) - p) <= 1e-13 * p);
    }
    for (double lq = -0.302; lq > -15.9; lq -= 0.01) {
        double q = pow(10.0, lq);
        double p = 1.0 - q, exact_q = 1.0 - p;
        double r = ts_planar_laplace_radius_icdf(eps, p);
        bad += !(r >= prev && isfinite(r));
        prev = r;
        double x = eps * r;
        bad += !(fabs((1.0 + x) * exp(-x) - exact_q) <= 1e-13 * exact_q);
    }
    ck_assert_int_eq(bad, 0);

    ck_assert(ts_planar_laplace_radius_icdf(eps, 0.0) == 0.0);
    /* The smallest uniform the generator can return: r = sqrt(2p)/eps. */
    ck_assert_double_eq_tol(ts_planar_laplace_radius_icdf(eps, 0x1p-1074),
                            sqrt(0x1p-1073) / eps, 1e-170);
    ck_assert_double_gt(ts_planar_laplace_radius_icdf(eps, 0x1p-1074), 0.0);
    ck_assert(isfinite(ts_planar_laplace_radius_icdf(eps, nextafter(1.0, 0.0))));
    ck_assert(isnan(ts_planar_laplace_radius_icdf(eps, 1.0)));
    ck_assert(isnan(ts_planar_laplace_radius_icdf(eps, -1e-300)));
    ck_assert(isnan(ts_planar_laplace_radius_icdf(eps, NAN)));
    ck_assert(isnan(ts_planar_laplace_radius_icdf(0.0, 0.5)));
    ck_assert(isnan(ts_planar_laplace_radius_icdf(INFINITY, 0.5)));
    ck_assert(ts_planar_laplace_radius_cdf(eps, -1.0) == 0.0);
    ck_assert(ts_planar_laplace_radius_cdf(eps, 0.0) == 0.0);
    ck_assert(ts_planar_laplace_radius_cdf(eps, INFINITY) == 1.0);
    /* Median of Gamma(2, 1/eps): 1.6783469900166608 / eps. */
    ck_assert_double_eq_tol(ts_planar_laplace_radius_icdf(eps, 0.5),
                            1.6783469900166608 / eps, 1e-10);
}
END_TEST

/* The sampler's reachable radii cover the support finely. Mironov's attack
 * needs an output that one secret can produce and a neighbour cannot; after
 * snapping to the 1e-7 degree lattice (about 1.1 cm) that happens only if
 * the continuous sample skips lattice cells, i.e. if neighbouring reachable
 * radii are further apart than a cell somewhere in the support. So check,
 * for eps*r from 1e-3 up to 700, that moving u1 to its neighbouring double
 * moves the radius by at most 2^-51 (1 + eps r) / eps, and that the sampler
 * reaches past 1400/eps. The inverse CDF used before this sampler fails
 * both: its largest radius is 40.5/eps, and above eps*r ~ 28 neighbouring
 * p give radii further apart than the lattice at the shipped eps. */
static double lattice_gap_m(double (*radius)(double eps, double u1, double u2),
                            double eps, double x_from, double x_to,
                            double *worst_relative)
{
    double worst_m = 0.0;
    *worst_relative = 0.0;
    for (double lx = log10(x_from); lx <= log10(x_to); lx += 0.01) {
        double x = pow(10.0, lx);
        /* u1 such that -log(u1) is about x (u2 near 1 contributes ~0). */
        double u1 = exp(-x), u2 = nextafter(1.0, 0.0);
        if (!(u1 > 0.0 && u1 < 1.0))
            continue;
        double r = radius(eps, u1, u2);
        double r_next = radius(eps, nextafter(u1, u1 < 0.5 ? 0.0 : 1.0), u2);
        double gap = fabs(r_next - r);
        if (gap > worst_m)
            worst_m = gap;
        double relative = gap * eps / (1.0 + eps * r);
        if (relative > *worst_relative)
            *worst_relative = relative;
    }
    return worst_m;
}

/* The widest gap between the radii of neighbouring p for the inverse CDF,
 * which sampled radii before, over eps*r up to x_to. */
static double icdf_gap_m(double eps, double x_to)
{
    double worst_m = 0.0;
    for (double x = 1.0; x <= x_to; x += 0.01) {
        double p = ts_planar_laplace_radius_cdf(1.0, x);
        if (!(p < 1.0))
            break;
        double next = nextafter(p, 1.0);
        if (!(next < 1.0))
            break;
        double gap = ts_planar_laplace_radius_icdf(eps, next) -
                     ts_planar_laplace_radius_icdf(eps, p);
        if (gap > worst_m)
            worst_m = gap;
    }
    return worst_m;
}

TS_TEST_IN(statistics, test_radius_support_resolution)
{
    const double eps = DEFAULT_LEVEL / 100.0 / 30.0; /* shipped eps_point */
    const double lattice_m = TS_GEO_SNAP_DEG * M_PI / 180.0 * TS_EARTH_RADIUS_M;
    double relative;
    double gap_m = lattice_gap_m(ts_planar_laplace_radius_from_uniforms, eps,
                                 1e-3, 700.0, &relative);
    ck_assert_msg(relative <= 0x1p-51, "relative radius gap %g", relative);
    ck_assert_msg(gap_m < 1e-6 * lattice_m, "radius gap %g m", gap_m);
    /* Smallest normal uniforms: the support reaches past 1400/eps. */
    double reach = ts_planar_laplace_radius_from_uniforms(1.0, 0x1p-1022, 0x1p-1022);
    ck_assert_double_gt(reach, 1400.0);
    ck_assert(isnan(ts_planar_laplace_radius_from_uniforms(eps, 0.0, 0.5)));
    ck_assert(isnan(ts_planar_laplace_radius_from_uniforms(eps, 0.5, 1.0)));
    ck_assert(isnan(ts_planar_laplace_radius_from_uniforms(0.0, 0.5, 0.5)));

    /* Test the test: the former sampler has gaps wider than the lattice in
     * its tail, and stops at 40.5/eps. */
    double old_gap_m = icdf_gap_m(eps, 40.0);
    ck_assert_msg(old_gap_m > lattice_m, "icdf gap %g m", old_gap_m);
    ck_assert_double_lt(ts_planar_laplace_radius_icdf(1.0, nextafter(1.0, 0.0)), 41.0);
}
END_TEST

/* The far tail is sampled with its true weight: P(eps r > 10) = 11 e^-10
 * (5.0e-4), 100 of 200 000 draws expected; the count must lie within 5
 * binomial standard deviations. (The former sampler passed this too: its
 * gaps are finer than any sample can see, which is why the test above
 * checks the reachable set directly.) */
TS_TEST_IN(statistics, test_radius_tail_mass)
{
    const double eps = 0.01;
    const long n = 200000;
    ts_rng *rng = ts_rng_new_seeded(77);
    long beyond = 0;
    for (long i = 0; i < n; i++) {
        double r, a;
        ts_planar_laplace_sample(rng, eps, &r, &a);
        beyond += eps * r > 10.0;
    }
    double p = 11.0 * exp(-10.0);
    double mean = p * n, sd = sqrt(n * p * (1.0 - p));
    ck_assert_msg(fabs((double)beyond - mean) <= 5.0 * sd,
                  "%ld beyond 10/eps, expected %.1f +- %.1f", beyond, mean, sd);
    ck_assert_double_eq_tol(ts_planar_laplace_radius_tail(eps, 10.0 / eps), p, 1e-18);
    ck_assert_double_eq_tol(ts_planar_laplace_radius_tail(eps, 1e-3 / eps) +
                                ts_planar_laplace_radius_cdf(eps, 1e-3 / eps),
                            1.0, 1e-15);
    ts_rng_free(rng);
}
END_TEST

/* Noise that reaches a sizeable fraction of the way to the antipode is
 * refused: the shipped profile fits, one whose mean displacement is past
 * ~207 km does not, and the boundary is where the tail beyond pi R / 4
 * crosses 2^-64. */
TS_TEST_IN(statistics, test_sphere_bound)
{
    double min_eps = ts_planar_laplace_min_sphere_eps();
    ck_assert_double_eq_tol(ts_planar_laplace_radius_tail(min_eps, TS_GEO_MAX_NOISE_RADIUS_M),
                            0x1p-64, 1e-3 * 0x1p-64);
    ck_assert(ts_planar_laplace_fits_sphere(min_eps * 1.001));
    ck_assert(!ts_planar_laplace_fits_sphere(min_eps * 0.999));
    ck_assert_double_gt(2.0 / min_eps, 200e3);
    ck_assert_double_lt(2.0 / min_eps, 215e3);
    /* Noise far narrower than the bound fits, up to eps * r overflowing
     * (it was refused as "noise with mean 0 km reaches too far"). */
    ck_assert(ts_planar_laplace_radius_tail(1e305, TS_GEO_MAX_NOISE_RADIUS_M) == 0.0);
    ck_assert(ts_planar_laplace_radius_tail(DBL_MAX, 1.0) == 0.0);
    ck_assert(ts_planar_laplace_fits_sphere(1e305));
    ck_assert(ts_planar_laplace_fits_sphere(DBL_MAX));

    /* eps_point = ln 10 / radius_m / 30: radius_m = 5 km is accepted
     * (mean 130 km), 10 km is refused (mean 261 km). */
    param_entry ok = {"radius_m", PARAM_DOUBLE, 5000.0, 0, NULL, NULL};
    param_entry too_wide = {"radius_m", PARAM_DOUBLE, 10000.0, 0, NULL, NULL};
    void *profile = NULL;
    char err[256];
    ck_assert_int_eq(make_profile(&ok, 1, &profile, err, sizeof err), 0);
    ts_geoind_ops.profile_free(profile);
    profile = NULL;
    ck_assert_int_eq(make_profile(&too_wide, 1, &profile, err, sizeof err), -1);
    ck_assert_ptr_null(profile);
    ck_assert_msg(strncmp(err, "radius_m: ", 10) == 0 && strstr(err, "Earth") != NULL,
                  "message '%s'", err);
}
END_TEST

/* ------------------------------------------------ through the mechanism */

/* Releases from Beijing on the shipped defaults: the published point lies
 * at great-circle distance r ~ C with the per-point eps, in a uniform
 * direction. */
TS_TEST_IN(statistics, test_release_distribution)
{
    static double distances[N_RELEASE], bearings[N_RELEASE];
    void *profile = default_profile();
    const double eps_point = DEFAULT_LEVEL / 100.0 / 30.0;
    ts_rng *rng = ts_rng_new_seeded(777);
    ts_point truth = {.lat = BEIJING_LAT, .lon = BEIJING_LON, .ts_ms = 1700000000000, .accuracy_m = NAN};
    long not_ok = 0, bad_report = 0, equal_truth = 0;

    for (int i = 0; i < N_RELEASE; i++) {
        ts_budget_view budget = {ts_geoind_ops.window_budget(profile), 0.0};
        ts_report out;
        memset(&out, 0xa5, sizeof out);
        if (ts_geoind_ops.release(profile, NULL, &truth, &budget, rng, &out) != TS_RELEASE_OK) {
            not_ok++;
            continue;
        }
        bad_report += !ts_geo_valid(out.lat, out.lon) || out.has_predicted != 0 ||
                      fabs(out.eps_point - eps_point) > 1e-15 * eps_point;
        equal_truth += out.lat == truth.lat || out.lon == truth.lon;
        distances[i] = ts_geo_distance_m(truth.lat, truth.lon, out.lat, out.lon);
        double p1 = truth.lat * M_PI / 180, p2 = out.lat * M_PI / 180;
        double dl = (out.lon - truth.lon) * M_PI / 180;
        double b = atan2(sin(dl) * cos(p2), cos(p1) * sin(p2) - sin(p1) * cos(p2) * cos(dl));
        bearings[i] = b < 0.0 ? b + 2.0 * M_PI : b;
    }
    ck_assert_int_eq(not_ok, 0);
    ck_assert_int_eq(bad_report, 0);
    /* A coordinate equal to the truth would need |r| below ~1e-8 m (one ulp
     * of the degree value), probability ~1e-22 at this eps. */
    ck_assert_int_eq(equal_truth, 0);

    double critical = KS_CRITICAL_001 / sqrt(N_RELEASE);
    double d = ts_ks_statistic(distances, N_RELEASE, radius_cdf, eps_point);
    ck_assert_msg(d < critical, "distance KS D = %g >= %g", d, critical);
    d = ts_ks_statistic(bearings, N_RELEASE, uniform_angle_cdf, 0.0);
    ck_assert_msg(d < critical, "bearing KS D = %g >= %g", d, critical);

    ts_rng_free(rng);
    ts_geoind_ops.profile_free(profile);
}
END_TEST

TS_TEST_IN(statistics, test_release_reproducible)
{
    void *profile = default_profile();
    ts_rng *a = ts_rng_new_seeded(99), *b = ts_rng_new_seeded(99);
    ts_point truth = {.lat = BEIJING_LAT, .lon = BEIJING_LON, .ts_ms = 0, .accuracy_m = NAN};
    ts_budget_view budget = {ts_geoind_ops.window_budget(profile), 0.0};
    long differ = 0;
    for (int i = 0; i < 1000; i++) {
        ts_report x, y;
        ck_assert_int_eq(ts_geoind_ops.release(profile, NULL, &truth, &budget, a, &x), TS_RELEASE_OK);
        ck_assert_int_eq(ts_geoind_ops.release(profile, NULL, &truth, &budget, b, &y), TS_RELEASE_OK);
        differ += x.lat != y.lat || x.lon != y.lon;
    }
    ck_assert_int_eq(differ, 0);
    ts_rng_free(a);
    ts_rng_free(b);
    ts_geoind_ops.profile_free(profile);
}
END_TEST

/* Truths at the poles and on the antimeridian still give valid WGS84. */
TS_TEST_IN(statistics, test_release_edges_valid)
{
    const double edges[][2] = {{90.0, 0.0}, {-90.0, 45.0}, {89.99, 179.99},
                               {0.0, 180.0}, {0.0, -180.0}, {-45.0, 179.9999}};
    void *profile = default_profile();
    ts_rng *rng = ts_rng_new_seeded(5);
    long bad = 0;
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
        ts_point truth = {.lat = edges[e][0], .lon = edges[e][1], .ts_ms = 0, .accuracy_m = NAN};
        for (int i = 0; i < 20000; i++) {
            ts_budget_view budget = {ts_geoind_ops.window_budget(profile), 0.0};
            ts_report out;
            bad += ts_geoind_ops.release(profile, NULL, &truth, &budget, rng, &out) != TS_RELEASE_OK;
            bad += !ts_geo_valid(out.lat, out.lon) || out.lon >= 180.0;
        }
    }
    ck_assert_int_eq(bad, 0);
    ts_rng_free(rng);
    ts_geoind_ops.profile_free(profile);
}
END_TEST

/* --------------------------------------------------------- the contract */

TS_TEST(test_registry_and_defaults)
{
    ck_assert_ptr_eq(ts_mechanism_find("geoind"), &ts_geoind_ops);
    ck_assert_str_eq(ts_geoind_ops.name, "geoind");

    void *profile = default_profile();
    /* Window budget in eps per metre: ln 10 over 100 m. */
    ck_assert_double_eq_tol(ts_geoind_ops.window_budget(profile), DEFAULT_LEVEL / 100.0, 1e-18);
    ck_assert_uint_eq(ts_geoind_ops.user_state_size(profile), 0);
    ts_geoind_ops.profile_free(profile);
}
END_TEST

TS_TEST(test_custom_parameters)
{
    const param_entry items[] = {
        {"radius_m", PARAM_DOUBLE, 250.0, 0, NULL, NULL},
        {"level", PARAM_INT, 0, 2, NULL, NULL}, /* an integer where a double is asked */
        {"points_per_window", PARAM_INT, 0, 8, NULL, NULL},
    };
    void *profile = NULL;
    char err[256];
    ck_assert_int_eq(make_profile(items, 3, &profile, err, sizeof err), 0);
    ck_assert_double_eq_tol(ts_geoind_ops.window_budget(profile), 2.0 / 250.0, 1e-18);

    ts_rng *rng = ts_rng_new_seeded(3);
    ts_point truth = {.lat = BEIJING_LAT, .lon = BEIJING_LON, .ts_ms = 0, .accuracy_m = NAN};
    ts_budget_view budget = {2.0 / 250.0, 0.0};
    ts_report out;
    ck_assert_int_eq(ts_geoind_ops.release(profile, NULL, &truth, &budget, rng, &out), TS_RELEASE_OK);
    ck_assert_double_eq_tol(out.eps_point, 2.0 / 250.0 / 8.0, 1e-18);
    ts_rng_free(rng);
    ts_geoind_ops.profile_free(profile);
}
END_TEST

typedef struct bad_case {
    param_entry item;
    const char *key;
} bad_case;

TS_TEST(test_invalid_parameters)
{
    const bad_case cases[] = {
        {{"radius_m", PARAM_DOUBLE, 0.0, 0, NULL, NULL}, "radius_m"},
        {{"radius_m", PARAM_DOUBLE, -5.0, 0, NULL, NULL}, "radius_m"},
        {{"radius_m", PARAM_DOUBLE, INFINITY, 0, NULL, NULL}, "radius_m"},
        {{"radius_m", PARAM_DOUBLE, NAN, 0, NULL, NULL}, "radius_m"},
        {{"radius_m", PARAM_INT, 0, 0, NULL, NULL}, "radius_m"},
        {{"radius_m", PARAM_STRING, 0, 0, "100", NULL}, "radius_m"},
        {{"radius_m", PARAM_DOUBLE, 1e-320, 0, NULL, NULL}, "radius_m"}, /* eps overflows */
        {{"level", PARAM_DOUBLE, -1.0, 0, NULL, NULL}, "level"},
        {{"level", PARAM_DOUBLE, 0.0, 0, NULL, NULL}, "level"},
        {{"level", PARAM_DOUBLE, NAN, 0, NULL, NULL}, "level"},
        {{"level", PARAM_STRING, 0, 0, "ln10", NULL}, "level"},
        {{"points_per_window", PARAM_INT, 0, 0, NULL, NULL}, "points_per_window"},
        {{"points_per_window", PARAM_INT, 0, -3, NULL, NULL}, "points_per_window"},
        {{"points_per_window", PARAM_DOUBLE, 2.5, 0, NULL, NULL}, "points_per_window"},
        {{"points_per_window", PARAM_STRING, 0, 0, "thirty", NULL}, "points_per_window"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *profile = (void *)&cases[i]; /* must be reset to NULL */
        char err[256];
        ck_assert_msg(make_profile(&cases[i].item, 1, &profile, err, sizeof err) == -1,
                      "case %zu accepted", i);
        ck_assert_ptr_null(profile);
        ck_assert_msg(strstr(err, cases[i].key) != NULL, "case %zu: message '%s' lacks '%s'",
                      i, err, cases[i].key);
    }
}
END_TEST

/* Driven like the pipeline: after each release the ledger is debited with
 * the report's eps_point. Exactly points_per_window releases fit. */
TS_TEST(test_budget_exhaustion)
{
    const long long windows[] = {1, 7, 30, 1000};
    ts_rng *rng = ts_rng_new_seeded(8);
    ts_point truth = {.lat = BEIJING_LAT, .lon = BEIJING_LON, .ts_ms = 0, .accuracy_m = NAN};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
        const param_entry items[] = {{"points_per_window", PARAM_INT, 0, windows[w], NULL, NULL}};
        void *profile = NULL;
        char err[256];
        ck_assert_int_eq(make_profile(items, 1, &profile, err, sizeof err), 0);
        ts_budget_view budget = {ts_geoind_ops.window_budget(profile), 0.0};
        long long released = 0;
        ts_release_status status;
        ts_report out;
        while ((status = ts_geoind_ops.release(profile, NULL, &truth, &budget, rng, &out)) ==
               TS_RELEASE_OK) {
            budget.spent += out.eps_point;
            if (++released > windows[w] + 1)
                break;
        }
        ck_assert_int_eq(status, TS_RELEASE_EXHAUSTED);
        ck_assert_int_eq(released, windows[w]);
        /* Never more than the window budget (within the documented slack). */
        ck_assert_double_le(budget.spent, budget.total * (1.0 + TS_BUDGET_RELATIVE_SLACK));
        ts_geoind_ops.profile_free(profile);
    }
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_fail_closed)
{
    void *profile = default_profile();
    ts_rng *rng = ts_rng_new_seeded(9);
    ts_budget_view budget = {ts_geoind_ops.window_budget(profile), 0.0};
    ts_report out;
    const double bad_truths[][2] = {{NAN, 0.0}, {0.0, NAN}, {91.0, 0.0},
                                    {0.0, -181.0}, {INFINITY, 0.0}};
    for (size_t i = 0; i < sizeof bad_truths / sizeof bad_truths[0]; i++) {
        ts_point truth = {.lat = bad_truths[i][0], .lon = bad_truths[i][1], .ts_ms = 0, .accuracy_m = NAN};
        ck_assert_int_eq(ts_geoind_ops.release(profile, NULL, &truth, &budget, rng, &out),
                         TS_RELEASE_ERROR);
    }
    /* A ledger that cannot be trusted releases nothing. */
    ts_point truth = {.lat = BEIJING_LAT, .lon = BEIJING_LON, .ts_ms = 0, .accuracy_m = NAN};
    ts_budget_view broken[] = {{0.0, 0.0}, {budget.total, NAN}, {NAN, 0.0},
                               {budget.total, budget.total}};
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++)
        ck_assert_int_eq(ts_geoind_ops.release(profile, NULL, &truth, &broken[i], rng, &out),
                         TS_RELEASE_EXHAUSTED);
    ts_rng_free(rng);
    ts_geoind_ops.profile_free(profile);
}
END_TEST

int main(void)
{
    return ts_check_main("geoind", 0, NULL, NULL);
}
