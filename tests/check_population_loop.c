/* The PRIVIC loop (mechanisms/population.c) and its records, through
 * their public interfaces: versions, cycles combined by reports, the IBU
 * warm start, stale reports, restore and exact resumption.
 *
 * Every statistical check uses a fixed seed and a tolerance derived from
 * the sampling distribution, stated where it is used. */
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

#include "tests/support/fake_population.h"

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

static void setup(void)
{
    /* As tracesand and tracesan do: a failed quadrature is an error
     * return, not an abort. */
    gsl_set_error_handler_off();
}

int main(void)
{
    return ts_check_main("population_loop", 300, setup, NULL);
}
