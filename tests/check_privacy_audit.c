/* Empirical privacy audit of the geo-indistinguishable mechanism.
 *
 * Geo-indistinguishability promises, for any two secrets x1, x2 and any set
 * S of outputs, P(M(x1) in S) <= e^{eps d(x1, x2)} P(M(x2) in S). We draw
 * N outputs from each of two secrets at distance d, histogram them on a grid
 * (each cell is such a set S), and check every cell with enough mass in both
 * histograms:
 *
 *     ln(n1 / n2) <= eps d + z sqrt(1/n1 + 1/n2)      (and with 1, 2 swapped)
 *
 * sqrt(1/n1 + 1/n2) is the delta-method standard error of the log ratio of
 * two (near-)Poisson counts; with both counts >= 500 the normal
 * approximation is good. z is a Bonferroni bound: every cell of the grid in
 * both directions is one one-sided test (the family is fixed before looking
 * at the data, so selecting cells by count does not bias it), and
 * z = Phi^-1(1 - alpha / (2 cells)) keeps the chance that a correct
 * mechanism fails anywhere below alpha = 0.001 (z ~ 4.9 for 33 x 33 cells).
 *
 * The same audit must reject an under-noised mechanism ("test the test"):
 * with the noise calibrated for 2 eps the worst cells have a log ratio near
 * 2 eps d, far beyond the margin. (With these sample sizes it also catches
 * a radius of 80 m audited as 100 m, i.e. eps 25 % too large.)
 *
 * Geometry: eps d = 1.25, cells of 0.5 / eps, the grid centred between the
 * secrets with one row of cells centred on the axis through them. On that
 * axis, beyond either secret, the density ratio is exactly e^{eps d}, so the
 * audited cells include ones where the bound is nearly tight (asserted
 * below), not only easy ones.
 *
 * The shipped code path is audited: ts_geoind_ops.release on lat/lon
 * secrets, outputs projected to metres with an equirectangular projection
 * around the midpoint. The projection only decides which cell an output
 * falls in; the guarantee holds for every set, so its distortion cannot
 * cause a false failure.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_cdf.h>

#include "geometry/geo.h"
#include "mechanisms/geoind.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/planar_laplace.h"
#include "mechanisms/population.h"
#include "mechanisms/privic.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/dp_audit.h"
#include "tests/support/fake_params.h"

#define DEG (M_PI / 180.0)
#define SAMPLES 200000L
#define MIN_COUNT 500
#define FAMILY_ALPHA 0.001
#define EPS_D 1.25
#define GRID_CELLS 33 /* odd: the middle row is centred on the axis */
#define CELL_EPS_UNITS 0.5 /* cell side, in units of 1/eps */

typedef struct grid {
    double cell;  /* metres */
    long counts[GRID_CELLS][GRID_CELLS];
    long outside;
} grid;

typedef ts_dp_audit audit_result;

static void grid_init(grid *g, double eps)
{
    memset(g, 0, sizeof *g);
    g->cell = CELL_EPS_UNITS / eps;
}

static void grid_add(grid *g, double x, double y)
{
    double half = 0.5 * GRID_CELLS;
    double fx = floor(x / g->cell + half), fy = floor(y / g->cell + half);
    if (fx < 0 || fy < 0 || fx >= GRID_CELLS || fy >= GRID_CELLS) {
        g->outside++;
        return;
    }
    g->counts[(int)fy][(int)fx]++;
}

/* The audit itself: one function for the honest and the broken mechanism. */
static audit_result audit_ratio(const grid *a, const grid *b, double eps_d)
{
    audit_result res = ts_dp_audit_begin(eps_d, GRID_CELLS * GRID_CELLS,
                                         FAMILY_ALPHA, MIN_COUNT);
    for (int i = 0; i < GRID_CELLS; i++)
        for (int j = 0; j < GRID_CELLS; j++)
            ts_dp_audit_cell(&res, a->counts[i][j], b->counts[i][j]);
    return res;
}

/* One line per audit in the test log, for whoever reads a failure. */
static void report(const char *what, const audit_result *r)
{
    fprintf(stderr,
            "%s: %d cells tested, max |ln ratio| %.3f vs eps d %.3f, worst "
            "excess over bound %.3f (z %.2f), %d violations\n",
            what, r->cells_tested, r->max_abs_log_ratio, EPS_D, r->worst_excess, r->z,
            r->violations);
}

/* Parameters: only radius_m is set, everything else is the shipped default. */
static void *profile_with_radius(double radius_m)
{
    param_table table = {.n = 0};
    param_double(&table, "radius_m", radius_m);
    ts_params params = table_params(&table);
    void *profile = NULL;
    char err[256];
    ck_assert_msg(ts_geoind_ops.profile_new(&params, &profile, err, sizeof err) == 0, "%s", err);
    return profile;
}

typedef struct site {
    double lat0, lon0;      /* projection centre: midpoint of the secrets */
    double lat[2], lon[2];  /* the two secrets */
    double d;               /* their great-circle distance, metres */
} site;

/* Two secrets east and west of a centre, d apart along a great circle. */
static site make_site(double lat0, double lon0, double d)
{
    site s = {.lat0 = lat0, .lon0 = lon0};
    ts_geo_destination(lat0, lon0, 0.5 * d, 1.5 * M_PI, &s.lat[0], &s.lon[0]);
    ts_geo_destination(lat0, lon0, 0.5 * d, 0.5 * M_PI, &s.lat[1], &s.lon[1]);
    s.d = ts_geo_distance_m(s.lat[0], s.lon[0], s.lat[1], s.lon[1]);
    return s;
}

/* Releases SAMPLES points from one secret through the mechanism's ops table
 * (a fresh ledger each time: this audits one release, the budget is tested
 * elsewhere) and bins them in local metres. */
static void collect_geoind(const void *profile, const site *s, int which, ts_rng *rng,
                           grid *g)
{
    ts_point truth = {.lat = s->lat[which], .lon = s->lon[which], .ts_ms = 0, .accuracy_m = NAN};
    double metres_per_deg = TS_EARTH_RADIUS_M * DEG;
    double cos_lat0 = cos(s->lat0 * DEG);
    long failed = 0;
    for (long i = 0; i < SAMPLES; i++) {
        ts_budget_view budget = {ts_geoind_ops.window_budget(profile), 0.0};
        ts_report out;
        if (ts_geoind_ops.release(profile, NULL, &truth, &budget, rng, &out) != TS_RELEASE_OK) {
            failed++;
            continue;
        }
        double dlon = ts_geo_normalize_lon(out.lon - s->lon0);
        grid_add(g, dlon * cos_lat0 * metres_per_deg, (out.lat - s->lat0) * metres_per_deg);
    }
    ck_assert_int_eq(failed, 0);
}

static double eps_point_of(const void *profile)
{
    ts_rng *rng = ts_rng_new_seeded(0);
    ts_point truth = {.lat = 0.0, .lon = 0.0, .ts_ms = 0, .accuracy_m = NAN};
    ts_budget_view budget = {ts_geoind_ops.window_budget(profile), 0.0};
    ts_report out;
    ck_assert_int_eq(ts_geoind_ops.release(profile, NULL, &truth, &budget, rng, &out),
                     TS_RELEASE_OK);
    ts_rng_free(rng);
    return out.eps_point;
}

/* Audits `profile` against the privacy claimed by the shipped default
 * profile (radius 100 m, level ln 10, 30 points per window). */
static audit_result audit_geoind(const void *profile, uint64_t seed)
{
    static grid g1, g2;
    void *claimed = profile_with_radius(100.0);
    double eps_claimed = eps_point_of(claimed);
    ts_geoind_ops.profile_free(claimed);

    /* Beijing; d chosen so that eps d = 1.25 for the claimed eps. */
    site s = make_site(39.9042, 116.4074, EPS_D / eps_claimed);
    ts_rng *rng = ts_rng_new_seeded(seed);
    grid_init(&g1, eps_claimed);
    grid_init(&g2, eps_claimed);
    collect_geoind(profile, &s, 0, rng, &g1);
    collect_geoind(profile, &s, 1, rng, &g2);
    ts_rng_free(rng);
    return audit_ratio(&g1, &g2, eps_claimed * s.d);
}

TS_TEST(test_audit_shipped_geoind)
{
    void *profile = profile_with_radius(100.0);
    audit_result r = audit_geoind(profile, 424242);
    ts_geoind_ops.profile_free(profile);
    report("geoind radius 100 m", &r);

    ck_assert_msg(r.violations == 0,
                  "%d of %d cells exceed e^{eps d} (worst excess %.3f, z %.2f)",
                  r.violations, r.cells_tested, r.worst_excess, r.z);
    /* Not vacuous: many cells, including ones near the tight region. */
    ck_assert_int_ge(r.cells_tested, 50);
    ck_assert_msg(r.max_abs_log_ratio >= 0.85 * EPS_D, "max |ln ratio| %.3f",
                  r.max_abs_log_ratio);
}
END_TEST

/* The same audit on a mechanism with half the claimed radius (twice the
 * claimed eps, i.e. half the noise) must fail. */
TS_TEST(test_audit_detects_halved_radius)
{
    void *profile = profile_with_radius(50.0);
    audit_result r = audit_geoind(profile, 424242);
    ts_geoind_ops.profile_free(profile);
    report("geoind radius 50 m audited as 100 m", &r);

    ck_assert_msg(r.violations > 0, "under-noised mechanism passed the audit "
                  "(max |ln ratio| %.3f over %d cells)", r.max_abs_log_ratio, r.cells_tested);
    ck_assert_double_gt(r.worst_excess, 0.5);
}
END_TEST

/* The planar sampler alone, in the Euclidean plane: secrets at (+-d/2, 0).
 * Honest noise passes; noise drawn with 2 eps fails. */
static audit_result audit_planar(double eps_claimed, double eps_used, uint64_t seed)
{
    static grid g1, g2;
    grid *g[2] = {&g1, &g2};
    double d = EPS_D / eps_claimed;
    ts_rng *rng = ts_rng_new_seeded(seed);
    for (int k = 0; k < 2; k++) {
        grid_init(g[k], eps_claimed);
        double x0 = k == 0 ? -0.5 * d : 0.5 * d;
        for (long i = 0; i < SAMPLES; i++) {
            double r, a;
            ts_planar_laplace_sample(rng, eps_used, &r, &a);
            grid_add(g[k], x0 + r * cos(a), r * sin(a));
        }
    }
    ts_rng_free(rng);
    return audit_ratio(&g1, &g2, EPS_D);
}

TS_TEST(test_audit_planar_sampler)
{
    const double eps = 0.02; /* per metre */
    audit_result honest = audit_planar(eps, eps, 515);
    report("planar eps", &honest);
    ck_assert_msg(honest.violations == 0, "%d violations (worst excess %.3f)",
                  honest.violations, honest.worst_excess);
    ck_assert_int_ge(honest.cells_tested, 50);

    audit_result broken = audit_planar(eps, 2.0 * eps, 515);
    report("planar 2 eps audited as eps", &broken);
    ck_assert_msg(broken.violations > 0, "2 eps noise passed (max |ln ratio| %.3f)",
                  broken.max_abs_log_ratio);
}
END_TEST

/* ------------------------------------------------------------- PRIVIC
 *
 * The same audit for `privic`, whose outputs are already cells: each
 * reported cell is one set S. PRIVIC claims 2 beta d-privacy between cell
 * centres (d in units of unit_m), whatever the channel, so two secrets at
 * adjacent cell centres d apart must give, for every reported cell,
 *
 *     |ln(n1 / n2)| <= 2 beta d + z sqrt(1/n1 + 1/n2),
 *
 * z the Bonferroni quantile over both directions of every cell of the
 * grid (alpha 0.001 in all), as above.
 *
 * How tight the claim is decides what an under-noised twin must look
 * like. A BA row is c(y) e^{-beta d(x, y)} / Z(x); for a cell y beyond the
 * pair on its axis the exponentials differ by exactly e^{beta d} and the
 * rest is Z(x') / Z(x), near 1 for neighbours under the uniform prior of
 * a fresh profile. So the fresh channel's largest ratio is about e^{beta
 * d}, half the claimed exponent (the other half is the slack the bound
 * keeps for priors that make Z(x') / Z(x) approach e^{beta d}), and a
 * channel built with beta doubled would reach only about the claimed
 * bound itself: not a reliable failure. The twin is built with beta
 * tripled, whose largest ratio is near 3 beta d, 1.5 times the claim. The
 * honest run is also checked against the channel's exact largest ratio,
 * so the audit is seen to reach the cells where the channel is tightest. */
#define PRIVIC_SAMPLES 200000L
#define PRIVIC_SIDE 8
#define PRIVIC_N (PRIVIC_SIDE * PRIVIC_SIDE)
#define PRIVIC_BETA 0.5 /* per km: 2 beta d ~ 1.37 for 1.37 km cells */

typedef struct privic_audit {
    audit_result r;
    double claimed;         /* 2 beta d */
    double exact_max;       /* the installed channel's max |ln ratio| */
    double exact_audited;   /* the same over the audited cells */
    int miscalibrated;      /* audited cells whose |ln ratio| is more than
                             * z SE from the channel's exact value */
} privic_audit;

static void *privic_profile(double beta)
{
    param_table table = {.n = 0};
    /* Central Paris, 8 x 8 cells of about 1.37 x 1.39 km. */
    param_string(&table, "region", "48.80,2.25,48.90,2.40");
    param_int(&table, "cols", PRIVIC_SIDE);
    param_int(&table, "rows", PRIVIC_SIDE);
    param_double(&table, "beta", beta);
    ts_params params = table_params(&table);
    void *profile = NULL;
    char err[256];
    ck_assert_msg(ts_privic_ops.profile_new(&params, &profile, err, sizeof err) == 0, "%s",
                  err);
    return profile;
}

static privic_audit audit_privic(const void *profile, double claimed_beta, uint64_t seed)
{
    const ts_population_ops *pop = ts_privic_ops.population;
    /* Adjacent cells in the middle row: (3, 3) and (3, 4). */
    const uint32_t secret[2] = {3 * PRIVIC_SIDE + 3, 3 * PRIVIC_SIDE + 4};
    static long counts[2][PRIVIC_N];
    memset(counts, 0, sizeof counts);
    ts_rng *rng = ts_rng_new_seeded(seed);
    for (int k = 0; k < 2; k++) {
        double b[4];
        pop->cell_bounds(profile, secret[k], b);
        ts_point truth = {.lat = 0.5 * (b[0] + b[2]), .lon = 0.5 * (b[1] + b[3]),
                          .ts_ms = 0, .accuracy_m = NAN};
        for (long i = 0; i < PRIVIC_SAMPLES; i++) {
            ts_budget_view budget = {ts_privic_ops.window_budget(profile), 0.0};
            ts_report out;
            ck_assert_int_eq(ts_privic_ops.release(profile, NULL, &truth, &budget, rng, &out),
                             TS_RELEASE_OK);
            uint32_t y;
            ck_assert_int_eq(pop->cell_of(profile, out.lat, out.lon, &y), 0);
            counts[k][y]++;
        }
    }
    ts_rng_free(rng);

    ts_vec2 c0 = pop->cell_centre(profile, secret[0]), c1 = pop->cell_centre(profile, secret[1]);
    privic_audit a = {.claimed = 2.0 * claimed_beta * hypot(c0.x - c1.x, c0.y - c1.y) / 1000.0};
    a.r = ts_dp_audit_begin(a.claimed, PRIVIC_N, FAMILY_ALPHA, MIN_COUNT);
    const double *m = pop->channel_matrix(pop->channel_current(profile, NULL));
    for (uint32_t y = 0; y < PRIVIC_N; y++) {
        double exact = fabs(log(m[(size_t)secret[0] * PRIVIC_N + y]) -
                            log(m[(size_t)secret[1] * PRIVIC_N + y]));
        a.exact_max = fmax(a.exact_max, exact);
        long n1 = counts[0][y], n2 = counts[1][y];
        double log_ratio = ts_dp_audit_cell(&a.r, n1, n2);
        if (log_ratio < 0.0)
            continue;
        /* Two-sided, at the same Bonferroni z (one family of 2 n tests
         * for the bound, another for this). */
        a.exact_audited = fmax(a.exact_audited, exact);
        if (fabs(log_ratio - exact) > a.r.z * sqrt(1.0 / n1 + 1.0 / n2))
            a.miscalibrated++;
    }
    fprintf(stderr,
            "privic: %d cells tested, max |ln ratio| %.3f (channel's exact %.3f, %.3f over "
            "audited cells) vs claimed 2 beta d %.3f, worst excess %.3f (z %.2f), %d "
            "violations, %d cells off the channel\n",
            a.r.cells_tested, a.r.max_abs_log_ratio, a.exact_max, a.exact_audited, a.claimed,
            a.r.worst_excess, a.r.z, a.r.violations, a.miscalibrated);
    return a;
}

/* What the audit of an honest channel shows: no cell above the claim,
 * the channel itself within it exactly (no sampling), the audited cells'
 * ratios in agreement with the channel's exact ones within sampling
 * error, and at least min_cells cells tested (not vacuous). */
static void assert_honest(const privic_audit *a, int min_cells)
{
    ck_assert_msg(a->r.violations == 0, "%d of %d cells exceed e^{2 beta d} (worst excess %.3f)",
                  a->r.violations, a->r.cells_tested, a->r.worst_excess);
    ck_assert_double_le(a->exact_max, a->claimed * (1.0 + 1e-9));
    ck_assert_int_eq(a->miscalibrated, 0);
    ck_assert_int_ge(a->r.cells_tested, min_cells);
}

TS_TEST(test_audit_privic)
{
    void *profile = privic_profile(PRIVIC_BETA);
    privic_audit a = audit_privic(profile, PRIVIC_BETA, 8675309);
    ts_privic_ops.profile_free(profile);
    /* BA under a uniform prior puts most of its output on a few dozen of
     * the 64 cells, so that is how many reach MIN_COUNT; the audited ones
     * include one at the channel's largest ratio, about half the claim
     * (see above). */
    assert_honest(&a, 20);
    ck_assert_double_ge(a.exact_max, 0.45 * a.claimed);
    ck_assert_double_ge(a.exact_audited, a.exact_max - 1e-9);
}
END_TEST

/* The claim holds for every channel version, and later versions can be
 * tighter: a channel re-fitted to an estimate that falls off from west to
 * east, theta ~ e^{-kappa x} (kappa = 0.4 beta), has roughly Z(x) ~
 * e^{-kappa x} too, so across the pair the normalisers add up to kappa d
 * to the exponent: ratios near (beta + kappa) d. The audit runs on such a channel installed as the
 * profile's next version (what the PRIVIC loop does after a cycle). */
TS_TEST(test_audit_privic_adapted_channel)
{
    const ts_population_ops *pop = ts_privic_ops.population;
    void *profile = privic_profile(PRIVIC_BETA);
    double theta[PRIVIC_N], total = 0.0;
    for (uint32_t x = 0; x < PRIVIC_N; x++) {
        theta[x] = exp(-0.4 * PRIVIC_BETA * pop->cell_centre(profile, x).x / 1000.0);
        total += theta[x];
    }
    for (uint32_t x = 0; x < PRIVIC_N; x++)
        theta[x] /= total;
    char err[256];
    void *channel = pop->channel_build(profile, theta, NULL, err, sizeof err);
    ck_assert_msg(channel != NULL, "%s", err);
    pop->channel_install(profile, channel, 2);
    privic_audit a = audit_privic(profile, PRIVIC_BETA, 8675310);
    pop->channel_install(profile, NULL, 1);
    pop->channel_free(channel);
    ts_privic_ops.profile_free(profile);
    /* BA puts its output on fewer cells for a skewed prior (fewer reach
     * MIN_COUNT), and the very tightest ratios are in cells it nearly
     * abandons; but the audited ones reach well past the fresh channel's
     * ~beta d (half the claim), towards (beta + kappa) d = 0.7 of it. */
    assert_honest(&a, 10);
    ck_assert_double_ge(a.exact_max, 0.7 * a.claimed);
    ck_assert_double_ge(a.exact_audited, 0.6 * a.claimed);
}
END_TEST

TS_TEST(test_audit_detects_sharpened_privic)
{
    void *profile = privic_profile(3.0 * PRIVIC_BETA);
    privic_audit a = audit_privic(profile, PRIVIC_BETA, 8675309);
    ts_privic_ops.profile_free(profile);
    ck_assert_msg(a.r.violations > 0, "a beta x 3 channel passed the audit at beta (max |ln "
                  "ratio| %.3f over %d cells)", a.r.max_abs_log_ratio, a.r.cells_tested);
    ck_assert_double_gt(a.r.worst_excess, 0.2);
}
END_TEST

int main(void)
{
    return ts_check_main("privacy_audit", 300, NULL, NULL);
}
