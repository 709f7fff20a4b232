/* PRIVIC's grid math: the BA channel's 2 beta d-privacy checked exactly on
 * every pair of cells and every output (not by sampling), IBU and GIBU
 * recovering a known distribution from its exact report distribution, and
 * the alias sampler's frequencies. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/ibu.h"
#include "mechanisms/ba_channel.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/grid_centres.h"

/* The paper's San Francisco grid: 24 x 17 cells of about 500 m x 467 m
 * (lat 37.7228-37.7946, lon -122.5153 to -122.3789). */
#define SF_COLS 24
#define SF_ROWS 17
#define SF_CELL_X 500.0
#define SF_CELL_Y 467.0

/* A lumpy full-support prior: two hot spots over a thin floor, like a city
 * centre and an airport. */
static void lumpy_prior(const ts_vec2 *centres, size_t n, double *prior)
{
    ts_vec2 hot[2] = { { 3000.0, 2500.0 }, { 9500.0, 6000.0 } };
    double total = 0.0;
    for (size_t x = 0; x < n; x++) {
        prior[x] = 1e-4;
        for (int h = 0; h < 2; h++) {
            double d = hypot(centres[x].x - hot[h].x, centres[x].y - hot[h].y);
            prior[x] += exp(-d / (h == 0 ? 800.0 : 400.0));
        }
        total += prior[x];
    }
    for (size_t x = 0; x < n; x++)
        prior[x] /= total;
}

/* The largest log C(x, y) - log C(x', y) - bound * d(x, x') over all x, x',
 * y (d in km): <= 0 means the channel is bound-d-private. */
static double worst_excess(const double *channel, const ts_vec2 *centres,
                           size_t n, double bound)
{
    double *logs = malloc(n * n * sizeof *logs);
    ck_assert_ptr_nonnull(logs);
    for (size_t i = 0; i < n * n; i++) {
        ck_assert_msg(channel[i] > 0.0 && isnormal(channel[i]),
                      "entry %zu is %g: an output some inputs cannot reach",
                      i, channel[i]);
        logs[i] = log(channel[i]);
    }
    double worst = -INFINITY;
    for (size_t x = 0; x < n; x++)
        for (size_t x2 = 0; x2 < n; x2++) {
            if (x == x2)
                continue;
            double allowed =
                bound * hypot(centres[x].x - centres[x2].x,
                              centres[x].y - centres[x2].y) / 1000.0;
            const double *a = logs + x * n, *b = logs + x2 * n;
            for (size_t y = 0; y < n; y++) {
                double excess = a[y] - b[y] - allowed;
                if (excess > worst)
                    worst = excess;
            }
        }
    free(logs);
    return worst;
}

TS_TEST(test_ba_channel_is_2beta_geo_indistinguishable)
{
    static ts_vec2 centres[SF_COLS * SF_ROWS];
    static double prior[SF_COLS * SF_ROWS];
    size_t n = ts_test_grid_centres(SF_COLS, SF_ROWS, SF_CELL_X, SF_CELL_Y,
                                    centres);
    lumpy_prior(centres, n, prior);
    double *channel = malloc(n * n * sizeof *channel);
    ck_assert_ptr_nonnull(channel);
    const double betas[] = { 0.5, 1.0, 4.0 };
    for (size_t b = 0; b < sizeof betas / sizeof betas[0]; b++) {
        ts_ba_params params = { .beta = betas[b], .unit_m = 1000.0,
                                .precision = 1e-7, .max_iterations = 500 };
        ts_ba_result result;
        char err[256];
        ck_assert_msg(ts_ba_channel(centres, n, prior, &params, channel,
                                    NULL, &result, err, sizeof err) == 0,
                      "%s", err);
        for (size_t x = 0; x < n; x++) {
            double sum = 0.0;
            for (size_t y = 0; y < n; y++)
                sum += channel[x * n + y];
            ck_assert_double_eq_tol(sum, 1.0, 1e-12);
        }
        /* Exactly 2 beta d-private, up to the rounding of logs of doubles
         * (a few ulps of values below 2 beta * 12 km). */
        double excess = worst_excess(channel, centres, n, 2.0 * betas[b]);
        ck_assert_msg(excess <= 1e-9, "beta %g: a ratio exceeds "
                      "exp(2 beta d) by exp(%g)", betas[b], excess);
        /* And the check has teeth: the channel is not beta-d-private. */
        ck_assert_msg(worst_excess(channel, centres, n, betas[b]) > 1e-3,
                      "beta %g: the channel is also beta-d-private, so the "
                      "2 beta check cannot tell a wrong bound", betas[b]);
        printf("BA beta %g: %u iterations, last change %.3g, max log ratio "
               "- 2 beta d = %.3g\n", betas[b], result.iterations,
               result.last_change, excess);
    }
    free(channel);
}
END_TEST

/* max over x != x', y of ln(C(x, y) / C(x', y)) / (bound d(x, x')), d in
 * km: the share of the bound the channel uses. */
static double bound_share(const double *channel, const ts_vec2 *centres,
                          size_t n, double bound)
{
    double share = 0.0;
    for (size_t x = 0; x < n; x++)
        for (size_t x2 = 0; x2 < n; x2++) {
            if (x == x2)
                continue;
            double d = hypot(centres[x].x - centres[x2].x,
                             centres[x].y - centres[x2].y) / 1000.0;
            double m = 0.0;
            for (size_t y = 0; y < n; y++)
                m = fmax(m, log(channel[x * n + y] / channel[x2 * n + y]));
            share = fmax(share, m / (bound * d));
        }
    return share;
}

/* BA at beta 1 per km on the SF grid's centres: the channel, malloc'ed. */
static double *sf_ba(const ts_vec2 *centres, size_t n, const double *prior,
                     double precision, unsigned max_iterations,
                     ts_ba_result *result)
{
    double *channel = malloc(n * n * sizeof *channel);
    ck_assert_ptr_nonnull(channel);
    ts_ba_params params = { .beta = 1.0, .unit_m = 1000.0,
                            .precision = precision,
                            .max_iterations = max_iterations };
    char err[256];
    ck_assert_msg(ts_ba_channel(centres, n, prior, &params, channel, NULL,
                                result, err, sizeof err) == 0, "%s", err);
    return channel;
}

/* The 2 beta bound is not a worst case only extreme priors reach: the
 * channel of the uniform prior, the first one the daemon releases
 * through, already uses 98.6 % of it (between two border cells, whose
 * normalisers differ most). docs/privic.md states the figure. */
TS_TEST(test_uniform_prior_channel_nearly_reaches_the_bound)
{
    static ts_vec2 centres[SF_COLS * SF_ROWS];
    static double prior[SF_COLS * SF_ROWS];
    size_t n = ts_test_grid_centres(SF_COLS, SF_ROWS, SF_CELL_X, SF_CELL_Y,
                                    centres);
    for (size_t x = 0; x < n; x++)
        prior[x] = 1.0 / (double)n;
    ts_ba_result result;
    double *channel = sf_ba(centres, n, prior, 1e-6, 10000, &result);
    ck_assert(result.converged);
    double share = bound_share(channel, centres, n, 2.0);
    printf("uniform prior, beta 1: the channel uses %.2f %% of 2 beta d\n",
           100.0 * share);
    ck_assert_double_le(share, 1.0 + 1e-9);
    ck_assert_double_ge(share, 0.985);
    free(channel);
}
END_TEST

/* ba_max_steps: exactly N plain steps of Algorithm 2 from c_0 uniform,
 * against the algorithm written out here (c_t+1(y) = sum_x pi(x)
 * C_t(x, y), C_t of c_t), and IBU's fixed budget runs its N steps even
 * when its precision is met at once. */
TS_TEST(test_fixed_steps_are_the_paper_s_algorithm)
{
    enum { STEPS = 5 };
    static ts_vec2 centres[SF_COLS * SF_ROWS];
    static double prior[SF_COLS * SF_ROWS];
    size_t n = ts_test_grid_centres(SF_COLS, SF_ROWS, SF_CELL_X, SF_CELL_Y,
                                    centres);
    lumpy_prior(centres, n, prior);
    double *channel = malloc(n * n * sizeof *channel);
    double *mine = malloc(n * n * sizeof *mine);
    double *c = malloc(n * sizeof *c);
    double *next = malloc(n * sizeof *next);
    ck_assert(channel && mine && c && next);
    ts_ba_params params = { .beta = 1.0, .unit_m = 1000.0, .precision = 0.5,
                            .max_iterations = 1, .plain_steps = STEPS };
    ts_ba_result result;
    char err[256];
    ck_assert_msg(ts_ba_channel(centres, n, prior, &params, channel, NULL,
                                &result, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(result.iterations, STEPS);
    for (size_t y = 0; y < n; y++)
        c[y] = 1.0 / (double)n;
    for (int t = 0; t <= STEPS; t++) {
        for (size_t x = 0; x < n; x++) {
            double sum = 0.0;
            for (size_t y = 0; y < n; y++) {
                double d = hypot(centres[x].x - centres[y].x,
                                 centres[x].y - centres[y].y) / 1000.0;
                mine[x * n + y] = c[y] * exp(-d);
                sum += mine[x * n + y];
            }
            for (size_t y = 0; y < n; y++)
                mine[x * n + y] /= sum;
        }
        if (t == STEPS)
            break;
        for (size_t y = 0; y < n; y++) {
            next[y] = 0.0;
            for (size_t x = 0; x < n; x++)
                next[y] += prior[x] * mine[x * n + y];
        }
        memcpy(c, next, n * sizeof *c);
    }
    double worst = 0.0;
    for (size_t i = 0; i < n * n; i++)
        worst = fmax(worst, fabs(channel[i] - mine[i]) / mine[i]);
    ck_assert_msg(worst < 1e-9, "relative difference %g", worst);

    double counts[SF_COLS * SF_ROWS], theta[SF_COLS * SF_ROWS];
    for (size_t y = 0; y < n; y++) {
        counts[y] = 1.0 + (double)(y % 5);
        theta[y] = 1.0 / (double)n;
    }
    ts_ibu_params ibu = { .precision = 1.0, .max_iterations = 1,
                          .fixed_steps = 7 };
    ts_ibu_result ibu_result;
    ck_assert_msg(ts_ibu(channel, counts, n, theta, &ibu, &ibu_result, err,
                         sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ibu_result.iterations, 7);
    free(channel);
    free(mine);
    free(c);
    free(next);
}
END_TEST

/* Issue 25's rule: every iteration stops at its cap. A precision no
 * double reaches makes BA and IBU run to their caps and report it; what
 * they return is still a channel of the elastic form and a distribution
 * (the guarantee never depended on convergence). */
TS_TEST(test_ba_and_ibu_stop_at_their_caps)
{
    static ts_vec2 centres[SF_COLS * SF_ROWS];
    static double prior[SF_COLS * SF_ROWS];
    size_t n = ts_test_grid_centres(SF_COLS, SF_ROWS, SF_CELL_X, SF_CELL_Y,
                                    centres);
    lumpy_prior(centres, n, prior);
    ts_ba_result result;
    double *channel = sf_ba(centres, n, prior, 1e-300, 41, &result);
    ck_assert_uint_eq(result.iterations, 41);
    ck_assert(!result.converged);
    ck_assert_double_le(worst_excess(channel, centres, n, 2.0), 1e-9);

    double counts[SF_COLS * SF_ROWS];
    for (size_t y = 0; y < n; y++)
        counts[y] = 1.0 + (double)(y % 7);
    double theta[SF_COLS * SF_ROWS];
    for (size_t x = 0; x < n; x++)
        theta[x] = 1.0 / (double)n;
    ts_ibu_params ibu = { .precision = 1e-300, .max_iterations = 13 };
    ts_ibu_result ibu_result;
    char err[256];
    ck_assert_msg(ts_ibu(channel, counts, n, theta, &ibu, &ibu_result, err,
                         sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(ibu_result.iterations, 13);
    ck_assert(!ibu_result.converged);
    double total = 0.0;
    for (size_t x = 0; x < n; x++) {
        ck_assert(theta[x] > 0.0 && isfinite(theta[x]));
        total += theta[x];
    }
    ck_assert_double_eq_tol(total, 1.0, 1e-12);
    free(channel);
}
END_TEST

TS_TEST(test_ba_refuses_what_it_cannot_represent)
{
    ts_vec2 centres[4];
    size_t n = ts_test_grid_centres(2, 2, 1000.0, 1000.0, centres);
    double prior[4] = { 0.25, 0.25, 0.25, 0.25 };
    double channel[16];
    ts_ba_result result;
    char err[256];
    ts_ba_params params = { .beta = 1.0, .unit_m = 1000.0,
                            .precision = 1e-9, .max_iterations = 100 };
    double bad_prior[4] = { 0.5, 0.5, 0.0, 0.0 };
    ck_assert_int_eq(ts_ba_channel(centres, n, bad_prior, &params, channel,
                                   NULL, &result, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "full-support"));
    /* exp(-beta d) would leave the normal range across this grid. */
    params.beta = 500.0;
    ck_assert_int_eq(ts_ba_channel(centres, n, prior, &params, channel, NULL,
                                   &result, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "beta"));
}
END_TEST

/* The exact report distribution of `prior` through `channel`, as counts. */
static void expected_counts(const double *channel, const double *prior,
                            size_t n, double reports, double *counts)
{
    for (size_t y = 0; y < n; y++) {
        counts[y] = 0.0;
        for (size_t x = 0; x < n; x++)
            counts[y] += reports * prior[x] * channel[x * n + y];
    }
}

static double max_abs_difference(const double *a, const double *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(a[i] - b[i]));
    return worst;
}

/* A BA channel is invertible, so the MLE from the exact report
 * distribution is the prior itself (PRIVIC, Theorem 3): IBU from a uniform
 * start must get there. */
TS_TEST(test_ibu_recovers_the_prior_from_exact_reports)
{
    enum { COLS = 8, ROWS = 6, N = COLS * ROWS };
    ts_vec2 centres[N];
    double prior[N], channel[N * N], counts[N], theta[N];
    ts_test_grid_centres(COLS, ROWS, 500.0, 500.0, centres);
    ts_rng *rng = ts_rng_new_seeded(12);
    double total = 0.0;
    for (size_t x = 0; x < N; x++) {
        prior[x] = 0.05 + ts_rng_uniform_open(rng);
        total += prior[x];
    }
    for (size_t x = 0; x < N; x++)
        prior[x] /= total;
    ts_ba_params ba = { .beta = 8.0, .unit_m = 1000.0, .precision = 1e-10,
                        .max_iterations = 1000 };
    ts_ba_result ba_result;
    char err[256];
    ck_assert_int_eq(ts_ba_channel(centres, N, prior, &ba, channel, NULL,
                                   &ba_result, err, sizeof err), 0);
    expected_counts(channel, prior, N, 1e6, counts);
    for (size_t x = 0; x < N; x++)
        theta[x] = 1.0 / N;
    ts_ibu_params ibu = { .precision = 1e-12, .max_iterations = 200000 };
    ts_ibu_result result;
    ck_assert_int_eq(ts_ibu(channel, counts, N, theta, &ibu, &result, err,
                            sizeof err), 0);
    double off = max_abs_difference(theta, prior, N);
    printf("IBU: %u iterations, converged %d, max |theta - pi| = %.3g\n",
           result.iterations, result.converged, off);
    ck_assert_msg(off < 1e-5, "IBU ended %g from the prior", off);

    /* GIBU over two channels (beta 8 and beta 4) of the same prior. */
    double channel2[N * N], counts2[N];
    ba.beta = 4.0;
    ck_assert_int_eq(ts_ba_channel(centres, N, prior, &ba, channel2, NULL,
                                   &ba_result, err, sizeof err), 0);
    expected_counts(channel2, prior, N, 3e5, counts2);
    ts_ibu_source sources[2] = { { channel, counts }, { channel2, counts2 } };
    for (size_t x = 0; x < N; x++)
        theta[x] = 1.0 / N;
    ck_assert_int_eq(ts_gibu(sources, 2, N, theta, &ibu, &result, err,
                             sizeof err), 0);
    off = max_abs_difference(theta, prior, N);
    printf("GIBU: %u iterations, max |theta - pi| = %.3g\n",
           result.iterations, off);
    ck_assert_msg(off < 1e-5, "GIBU ended %g from the prior", off);

    /* Refusals: no reports, a start without full support. */
    double none[N] = { 0 };
    ck_assert_int_eq(ts_ibu(channel, none, N, theta, &ibu, &result, err,
                            sizeof err), -1);
    theta[3] = 0.0;
    ck_assert_int_eq(ts_ibu(channel, counts, N, theta, &ibu, &result, err,
                            sizeof err), -1);
    ts_rng_free(rng);
}
END_TEST

/* Each outcome's frequency over 1e6 draws lies within 5 standard errors of
 * its probability (a false failure has probability below 1e-5 per
 * outcome); a zero weight is never drawn. */
TS_TEST(test_alias_frequencies)
{
    enum { K = 7, DRAWS = 1000000 };
    const double weights[K] = { 5.0, 0.0, 1e-3, 2.0, 2.0, 0.5, 30.0 };
    ts_alias_table table;
    ck_assert_int_eq(ts_alias_build(&table, weights, K), 0);
    ts_rng *rng = ts_rng_new_seeded(99);
    static unsigned counts[K];
    for (int i = 0; i < DRAWS; i++) {
        uint32_t k = ts_alias_sample(&table, rng);
        ck_assert_uint_lt(k, K);
        counts[k]++;
    }
    double total = 0.0;
    for (int k = 0; k < K; k++)
        total += weights[k];
    for (int k = 0; k < K; k++) {
        double p = weights[k] / total;
        double sd = sqrt(DRAWS * p * (1.0 - p));
        ck_assert_msg(fabs(counts[k] - DRAWS * p) <= 5.0 * sd + 1e-9,
                      "outcome %d: %u draws, expected %.1f +- %.1f", k,
                      counts[k], DRAWS * p, sd);
    }
    ck_assert_uint_eq(counts[1], 0);
    ts_alias_free(&table);
    const double bad[2] = { 1.0, NAN };
    ck_assert_int_eq(ts_alias_build(&table, bad, 2), -1);
    const double zeros[2] = { 0.0, 0.0 };
    ck_assert_int_eq(ts_alias_build(&table, zeros, 2), -1);
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    /* The exact check visits 408^3 triples: generous for sanitizers. */
    return ts_check_main("privic_math", 300, NULL, NULL);
}
