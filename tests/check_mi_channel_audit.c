/* Black-box DP audit of `mi-channel` releases through a channel that
 * `tracesan optimize --geoind-epsilon` would write: the optimizer's
 * channel for three users on a 4 x 4 grid of central Paris, written to a
 * channel file, loaded by the mechanism as the daemon loads it, and
 * sampled through the shipped release path.
 *
 * The file claims eps-geo-indistinguishability between cell centres, so
 * for two secrets at adjacent centres d apart and every reported cell
 * (each one set S of outputs):
 *
 *     |ln(n1 / n2)| <= eps d + z sqrt(1/n1 + 1/n2),
 *
 * sqrt(1/n1 + 1/n2) the delta-method standard error of a log ratio of two
 * near-Poisson counts (both >= 500), z the Bonferroni quantile over both
 * directions of all 16 cells at a family-wise alpha of 0.001 (as in
 * check_privacy_audit.c).
 *
 * Not vacuous: the distortion bound is set just above the least any
 * eps-geo-indistinguishable channel can reach, where the optimizer must
 * use the whole of its privacy room, so the exact ratio between the two
 * secrets reaches a large share of eps d (asserted). The under-noised twin
 * is the same optimization at 3 eps, honestly labelled 3 eps (a file that
 * lies about its epsilon does not load), audited against eps: it must
 * fail.
 *
 * On continuous locations (tests/support/grid_pair_audit.h): the same
 * optimizer at 0.01 per metre on a 6 x 6 grid of 200 m cells, two true
 * points 1 m apart across a cell edge and across a corner, 200,000
 * releases each. The channel is metric-private between centres only, so
 * the points, a metre apart, are told apart as cells 200 m (283 m) apart
 * are: the log-ratio's lower confidence bound must stay within what a
 * report books, eps d + eps_floor (0.01 + 2.83 nats), and must exceed
 * what eps d alone would book by a wide margin. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inference/channel_file.h"
#include "inference/mi_optimal.h"
#include "mechanisms/cell_grid.h"
#include "mechanisms/mi_channel.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/dp_audit.h"
#include "tests/support/fake_params.h"
#include "tests/support/grid_pair_audit.h"

static const double paris_box[4] = { 48.80, 2.25, 48.90, 2.40 };
#define SIDE 4u
#define N (SIDE * SIDE)
#define USERS 3u
#define SAMPLES 200000L
#define MIN_COUNT 500
#define FAMILY_ALPHA 0.001
/* eps d = 1.2 between horizontal neighbours (cells about 2.75 km wide) */
#define EPS_D 1.2

/* The grid a channel is optimized on: square cells of cell_m over box,
 * or rows x cols. */
typedef struct audit_grid {
    const double *box;
    double cell_m;
    uint32_t rows, cols;
} audit_grid;

static const audit_grid paris_4x4 = { paris_box, 0.0, SIDE, SIDE };

/* About 1.19 km x 1.19 km of central Paris: 6 x 6 cells of 200 m. */
static const double small_box[4] = { 48.8500, 2.3400, 48.8607, 2.3562 };
static const audit_grid small_200m = { small_box, 200.0, 0, 0 };
#define SMALL_EPS 0.01

static ts_cell_grid grid_of(const audit_grid *spec)
{
    ts_cell_grid g;
    char err[256];
    ck_assert_msg(ts_cell_grid_init(&g, spec->box, spec->cell_m, spec->rows,
                                    spec->cols, 4096, err, sizeof err) == 0,
                  "%s", err);
    return g;
}

static ts_cell_grid paris_grid(void)
{
    return grid_of(&paris_4x4);
}

/* Three users, each around its own corner of the grid (length scale
 * `scale_m`), full support. */
static double *three_users(const ts_cell_grid *g, double scale_m)
{
    size_t n = g->cells;
    double *joint = malloc(USERS * n * sizeof *joint);
    ck_assert_ptr_nonnull(joint);
    const ts_vec2 home[USERS] = { g->centres[0], g->centres[g->cols - 1],
                                  g->centres[n - 1] };
    double total = 0.0;
    for (size_t u = 0; u < USERS; u++)
        for (size_t x = 0; x < n; x++) {
            double d = hypot(g->centres[x].x - home[u].x,
                             g->centres[x].y - home[u].y);
            joint[u * n + x] = exp(-d / scale_m);
            total += joint[u * n + x];
        }
    for (size_t i = 0; i < USERS * n; i++)
        joint[i] /= total;
    return joint;
}

/* The optimizer's channel at `eps` on `spec`, with the least distortion
 * bound of a ladder from `first_l` it accepts (just above the least
 * eps-geo-ind distortion), written to a channel file. Returns the path
 * (caller unlinks and frees). */
static char *optimized_channel_file_on(const audit_grid *spec, double eps,
                                       double scale_m, double first_l)
{
    ts_cell_grid g = grid_of(spec);
    size_t n = g.cells;
    double *joint = three_users(&g, scale_m);
    double *channel = malloc(n * n * sizeof *channel);
    ck_assert_ptr_nonnull(channel);
    ts_mi_problem problem = { .cells = n, .centres = g.centres,
                              .users = USERS, .joint = joint,
                              .geoind_epsilon = eps };
    ts_mi_params params = { .gap_tolerance_bits = 1e-3,
                            .max_iterations = 300 };
    ts_mi_result result;
    char err[512] = "";
    int solved = 0;
    for (double l = first_l; l <= 32.0 * first_l && !solved; l *= 1.25) {
        problem.distortion_m = l;
        solved = ts_mi_optimize(&problem, &params, channel, &result, err,
                                sizeof err) == 0;
    }
    ck_assert_msg(solved, "no distortion bound accepted: %s", err);
    ts_channel_meta meta = {
        .cell_m = spec->cell_m, .rows = g.rows, .cols = g.cols,
        .cell_w_m = g.cell_w, .cell_h_m = g.cell_h,
        .distortion_m = problem.distortion_m, .geoind_epsilon = eps,
        .mi_bits = result.mi_bits,
        .expected_distortion_m = result.distortion_m,
        .gap_bits = result.gap_bits, .iterations = result.iterations,
        .users = USERS, .converged = result.converged,
    };
    memcpy(meta.region, spec->box, sizeof meta.region);
    char *path = strdup("/tmp/tracesan-mi-audit-XXXXXX");
    ck_assert_ptr_nonnull(path);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(ts_channel_write_file(path, &meta, channel, NULL, err,
                                        sizeof err) == 0, "%s", err);
    free(channel);
    free(joint);
    ts_cell_grid_free(&g);
    return path;
}

static char *optimized_channel_file(double eps)
{
    return optimized_channel_file_on(&paris_4x4, eps, 3000.0, 250.0);
}

/* As the daemon resolves a `channel` key: opened for profile_new, closed
 * when it returns. */
static ts_channel_file *opened;
static const void *open_channel(void *ctx, const char *key, char *err,
                                size_t errlen)
{
    const char *path = NULL;
    if (table_get_string(ctx, key, &path) <= 0 ||
        ts_channel_open(path, &opened, err, errlen) != 0)
        return NULL;
    return opened;
}

static void *mi_profile(const char *path)
{
    param_table table = { .n = 0 };
    param_string(&table, "channel", path);
    param_int(&table, "points_per_window", 1000000000);
    ts_params params = table_params(&table);
    params.get_channel = open_channel;
    void *profile = NULL;
    char err[512] = "";
    opened = NULL;
    int rc = ts_mi_channel_ops.profile_new(&params, &profile, err,
                                           sizeof err);
    ts_channel_close(opened);
    opened = NULL;
    ck_assert_msg(rc == 0, "%s", err);
    return profile;
}

typedef struct audit {
    ts_dp_audit r;         /* claimed: eps d */
    double exact_max;      /* the file's channel, between the secrets */
} audit;

/* Secrets at the centres of cells (1, 1) and (1, 2); the claim is
 * eps_claimed per metre. */
static audit run_audit(const char *path, double eps_claimed, uint64_t seed)
{
    ts_cell_grid g = paris_grid();
    const uint32_t secret[2] = { 1 * SIDE + 1, 1 * SIDE + 2 };
    void *profile = mi_profile(path);
    static long counts[2][N];
    memset(counts, 0, sizeof counts);
    ts_rng *rng = ts_rng_new_seeded(seed);
    for (int k = 0; k < 2; k++) {
        ts_point truth = { .ts_ms = 0, .accuracy_m = NAN };
        ts_cell_grid_centre_latlon(&g, secret[k], &truth.lat, &truth.lon);
        for (long i = 0; i < SAMPLES; i++) {
            ts_budget_view budget = {
                ts_mi_channel_ops.window_budget(profile), 0.0 };
            ts_report out;
            memset(&out, 0, sizeof out);
            ck_assert_int_eq(ts_mi_channel_ops.release(profile, NULL, &truth,
                                                       &budget, rng, &out),
                             TS_RELEASE_OK);
            uint32_t y;
            ck_assert_int_eq(ts_cell_grid_locate(&g, out.lat, out.lon, 0, &y),
                             0);
            counts[k][y]++;
        }
    }
    ts_rng_free(rng);
    ts_mi_channel_ops.profile_free(profile);

    ts_channel_file *file = NULL;
    char err[512];
    ck_assert_msg(ts_channel_open(path, &file, err, sizeof err) == 0, "%s",
                  err);
    double d = hypot(g.centres[secret[0]].x - g.centres[secret[1]].x,
                     g.centres[secret[0]].y - g.centres[secret[1]].y);
    audit a = { .r = ts_dp_audit_begin(eps_claimed * d, N, FAMILY_ALPHA,
                                       MIN_COUNT) };
    for (uint32_t y = 0; y < N; y++) {
        a.exact_max = fmax(a.exact_max,
                           fabs(log(file->channel[secret[0] * N + y]) -
                                log(file->channel[secret[1] * N + y])));
        ts_dp_audit_cell(&a.r, counts[0][y], counts[1][y]);
    }
    ts_channel_close(file);
    ts_cell_grid_free(&g);
    fprintf(stderr, "mi-channel audit: %d cells tested, max |ln ratio| %.3f "
            "(channel's exact %.3f) vs claimed eps d %.3f, worst excess "
            "%.3f, %d violations\n", a.r.cells_tested, a.r.max_abs_log_ratio,
            a.exact_max, a.r.claimed, a.r.worst_excess, a.r.violations);
    return a;
}

static double eps_for_audit(void)
{
    ts_cell_grid g = paris_grid();
    double eps = EPS_D / g.cell_w;
    ts_cell_grid_free(&g);
    return eps;
}

TS_TEST(test_audit_geoind_channel)
{
    double eps = eps_for_audit();
    char *path = optimized_channel_file(eps);
    audit a = run_audit(path, eps, 20261125);
    unlink(path);
    free(path);
    ck_assert_msg(a.r.violations == 0, "%d of %d cells exceed e^{eps d} "
                  "(worst excess %.3f)", a.r.violations, a.r.cells_tested,
                  a.r.worst_excess);
    ck_assert_double_le(a.exact_max, a.r.claimed * (1.0 + 1e-6));
    /* The privacy room is used: the bound is nearly reached between the
     * secrets, and the audit sees enough cells to notice a breach. */
    ck_assert_double_ge(a.exact_max, 0.5 * a.r.claimed);
    ck_assert_int_ge(a.r.cells_tested, 4);
}
END_TEST

TS_TEST(test_audit_detects_under_noised_channel)
{
    double eps = eps_for_audit();
    char *path = optimized_channel_file(3.0 * eps);
    audit a = run_audit(path, eps, 20261126);
    unlink(path);
    free(path);
    ck_assert_msg(a.r.violations > 0, "a 3 eps channel passed the audit at "
                  "eps (max |ln ratio| %.3f over %d cells)",
                  a.r.max_abs_log_ratio, a.r.cells_tested);
}
END_TEST

/* The continuous-pair audit on the 200 m grid. Not vacuous: eps d alone
 * would book 0.01. */
static void audit_continuous_pair(const char *path, ts_pair_across across,
                                  uint64_t seed)
{
    ts_cell_grid g = grid_of(&small_200m);
    ck_assert_uint_eq(g.cells, 36);
    ts_channel_file *file = NULL;
    char err[512];
    ck_assert_msg(ts_channel_open(path, &file, err, sizeof err) == 0, "%s",
                  err);
    void *profile = mi_profile(path);
    ts_pair_audit_widest(&ts_mi_channel_ops, profile, &g, file->channel,
                         across, SAMPLES, seed, 1.0);
    ts_channel_close(file);
    ts_mi_channel_ops.profile_free(profile);
    ts_cell_grid_free(&g);
}

TS_TEST(test_continuous_pair_across_an_edge_and_a_corner)
{
    /* The least 0.01-geo-ind distortion on this grid is about 110 m. */
    char *path = optimized_channel_file_on(&small_200m, SMALL_EPS, 400.0,
                                           100.0);
    audit_continuous_pair(path, TS_PAIR_EDGE, 20261204);
    audit_continuous_pair(path, TS_PAIR_CORNER, 20261205);
    unlink(path);
    free(path);
}
END_TEST

int main(void)
{
    return ts_check_main("mi_channel_audit", 300, NULL, NULL);
}
