/* The remapped grid Laplace channel (inference/mi_remap.c): it meets the
 * distortion bound and uses it, it is post-processing of planar Laplace
 * at the scale it reports (so the remap hides nothing less than that
 * Laplace step), the remap lowers the distortion against the same Laplace
 * left where it fell, and the certificate ts_mi_optimize reports with it
 * is a true lower bound on the MI optimum. Also the grid Laplace
 * reference (inference/mi_smooth.h) candidates are judged against. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/mi_optimal.h"
#include "inference/mi_remap.h"
#include "inference/mi_smooth.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/grid_centres.h"
#include "tests/support/mi_joint.h"

enum { MAX_CELLS = 100, K = 4 };

static double dist(ts_vec2 a, ts_vec2 b)
{
    return hypot(a.x - b.x, a.y - b.y);
}

/* S(x) = sum_z exp(-eps d(x, z)): the grid Laplace row's normaliser. */
static double normaliser(const ts_vec2 *c, size_t n, size_t x, double eps)
{
    double s = 0.0;
    for (size_t z = 0; z < n; z++)
        s += exp(-eps * dist(c[x], c[z]));
    return s;
}

static double remap(const ts_mi_problem *pb, double *C)
{
    double eps = 0.0;
    char err[256] = "";
    ck_assert_msg(ts_mi_remap_laplace(pb, C, &eps, err, sizeof err) == 0,
                  "remap: %s", err);
    ck_assert(eps > 0.0 && isfinite(eps));
    return eps;
}

typedef struct remap_case {
    size_t cols, rows;
    double dx, dy, L, spread, zero_share;
} remap_case;

/* The case's grid in c, a random joint of K users in joint, and the
 * problem over them (distortion between centres). */
static ts_mi_problem problem_of(const remap_case *rc, ts_rng *rng,
                                ts_vec2 *c, double *joint)
{
    size_t n = ts_test_grid_centres(rc->cols, rc->rows, rc->dx, rc->dy, c);
    ts_test_mi_joint(rng, c, n, K, rc->spread, rc->zero_share, joint);
    return (ts_mi_problem){ .cells = n, .centres = c, .users = K,
                            .joint = joint, .distortion_m = rc->L };
}

static const remap_case cases[] = {
    { 6, 6, 100.0, 100.0, 150.0, 150.0, 0.0 },
    { 10, 10, 100.0, 100.0, 300.0, 200.0, 0.3 },
    { 8, 5, 120.0, 90.0, 200.0, 100.0, 0.5 },
    { 10, 10, 50.0, 50.0, 60.0, 80.0, 0.0 },
};

/* Stochastic rows, E[d] <= L, and E[d] close to L: the bisection settles
 * at the scale where the bound binds (a target that jumps between cells
 * makes E[d] step in eps, so it lands within a step, not exactly). */
TS_TEST(test_channel_meets_and_uses_the_bound)
{
    static double C[MAX_CELLS * MAX_CELLS];
    double joint[K * MAX_CELLS];
    ts_vec2 c[MAX_CELLS];
    ts_rng *rng = ts_rng_new_seeded(2811);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        ts_mi_problem pb = problem_of(&cases[t], rng, c, joint);
        size_t n = pb.cells;
        remap(&pb, C);
        for (size_t x = 0; x < n; x++) {
            double sum = 0.0;
            for (size_t z = 0; z < n; z++) {
                ck_assert(C[x * n + z] >= 0.0 && isfinite(C[x * n + z]));
                sum += C[x * n + z];
            }
            ck_assert_msg(fabs(sum - 1.0) <= 1e-12, "case %zu row %zu sums "
                          "to %.17g", t, x, sum);
        }
        double D = ts_mi_distortion(&pb, C);
        ck_assert_msg(D <= cases[t].L * (1.0 + 1e-9) && D >= 0.95 * cases[t].L,
                      "case %zu: E[d] %.6f m for L %.1f m", t, D,
                      cases[t].L);
    }
    ts_rng_free(rng);
}
END_TEST

/* Post-processing: each column of the channel is a sum of columns of the
 * grid Laplace K(x, z') = exp(-eps d(x, z')) / S(x), so every ratio
 * C(x, z) / C(x', z) is at most exp(eps d(x, x')) S(x') / S(x). A remap
 * that looked at the true cell (or a channel that was not Laplace at the
 * reported eps) breaks it. And the remap earns its keep: the same Laplace
 * left where it fell has a larger E[d] (an optimal remap can only lower
 * the posterior's expected distance, since leaving a report in place is
 * one of its choices; with users' clouds it lowers it by a margin). */
TS_TEST(test_remap_is_post_processing_of_laplace)
{
    static double C[MAX_CELLS * MAX_CELLS], lap[MAX_CELLS * MAX_CELLS];
    double joint[K * MAX_CELLS];
    ts_vec2 c[MAX_CELLS];
    ts_rng *rng = ts_rng_new_seeded(2812);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        ts_mi_problem pb = problem_of(&cases[t], rng, c, joint);
        size_t n = pb.cells;
        double eps = remap(&pb, C);
        double S[MAX_CELLS];
        for (size_t x = 0; x < n; x++)
            S[x] = normaliser(c, n, x, eps);
        size_t binding = 0;
        for (size_t x = 0; x < n; x++)
            for (size_t y = 0; y < n; y++) {
                double bound = exp(eps * dist(c[x], c[y])) * S[y] / S[x];
                for (size_t z = 0; z < n; z++) {
                    ck_assert_msg(C[x * n + z] <=
                                  bound * C[y * n + z] * (1.0 + 1e-12),
                                  "case %zu: C(%zu,%zu) %.17g above the "
                                  "Laplace ratio from C(%zu,%zu) %.17g", t,
                                  x, z, C[x * n + z], y, z, C[y * n + z]);
                    binding += C[x * n + z] >=
                               bound * C[y * n + z] * (1.0 - 1e-9);
                }
            }
        ck_assert_msg(binding > 0, "case %zu: no ratio reaches the bound", t);
        for (size_t x = 0; x < n; x++)
            for (size_t z = 0; z < n; z++)
                lap[x * n + z] = exp(-eps * dist(c[x], c[z])) / S[x];
        double D = ts_mi_distortion(&pb, C), D_lap = ts_mi_distortion(&pb, lap);
        /* The last case's scale is within a cell: little to remap. */
        double margin = t + 1 < sizeof cases / sizeof cases[0] ? 1.05 : 1.0;
        ck_assert_msg(D_lap >= margin * D * (1.0 - 1e-12), "case %zu: "
                      "Laplace %.3f m against remapped %.3f m at eps %.6g",
                      t, D_lap, D, eps);
    }
    ts_rng_free(rng);
}
END_TEST

/* ts_mi_optimize with the remapped family: its gap is a true bound, so
 * the MI optimum (bracketed by its own certificate) is neither below the
 * remap's lower bound nor above the remap's I(U; Z). Bounds tight enough
 * that the optimum is well above 0. */
TS_TEST(test_certificate_bounds_the_mi_optimum)
{
    static double C[MAX_CELLS * MAX_CELLS];
    double joint[K * MAX_CELLS];
    ts_vec2 c[MAX_CELLS];
    ts_rng *rng = ts_rng_new_seeded(2813);
    static const remap_case tight[] = {
        { 6, 6, 100.0, 100.0, 70.0, 150.0, 0.0 },
        { 8, 5, 120.0, 90.0, 90.0, 100.0, 0.5 },
        { 10, 10, 100.0, 100.0, 100.0, 200.0, 0.3 },
    };
    for (size_t t = 0; t < sizeof tight / sizeof tight[0]; t++) {
        ts_mi_problem pb = problem_of(&tight[t], rng, c, joint);
        ts_mi_params params = { .gap_tolerance_bits = 1e-6,
                                .max_iterations = 20000 };
        ts_mi_result opt, rm;
        char err[256] = "";
        ck_assert_msg(ts_mi_optimize(&pb, &params, C, &opt, err, sizeof err)
                      == 0, "%s", err);
        params.family = TS_MI_REMAPPED_LAPLACE;
        ck_assert_msg(ts_mi_optimize(&pb, &params, C, &rm, err, sizeof err)
                      == 0, "%s", err);
        ck_assert(rm.laplace_epsilon_per_m > 0.0);
        ck_assert(fabs(ts_mi_bits(&pb, C) - rm.mi_bits) <= 1e-12);
        ck_assert_msg(rm.mi_bits - rm.gap_bits <= opt.mi_bits + 1e-9,
                      "case %zu: remap's lower bound %.9f above the optimum "
                      "%.9f", t, rm.mi_bits - rm.gap_bits, opt.mi_bits);
        ck_assert_msg(rm.mi_bits >= opt.mi_bits - opt.gap_bits - 1e-9,
                      "case %zu: remap %.9f bits below the optimum %.9f", t,
                      rm.mi_bits, opt.mi_bits);
        ck_assert_msg(opt.mi_bits - opt.gap_bits > 0.01, "case %zu: optimum "
                      "%.6f bits, gap %.3g: too loose a case", t, opt.mi_bits,
                      opt.gap_bits);
    }
    ts_rng_free(rng);
}
END_TEST

/* A bound below what any remap reaches is refused with that least; the
 * family is refused with geo-ind (it is not checked for it). */
TS_TEST(test_refusals)
{
    static double C[MAX_CELLS * MAX_CELLS];
    double joint[K * MAX_CELLS];
    ts_vec2 c[MAX_CELLS];
    ts_rng *rng = ts_rng_new_seeded(2814);
    size_t n = ts_test_grid_centres(6, 6, 100.0, 100.0, c);
    ts_test_mi_joint(rng, c, n, K, 150.0, 0.0, joint);
    double cost[36 * 36];
    for (size_t x = 0; x < n; x++)
        for (size_t z = 0; z < n; z++)
            cost[x * n + z] = dist(c[x], c[z]) + 30.0;
    ts_mi_problem pb = { .cells = n, .centres = c, .users = K,
                         .joint = joint, .distortion_m = 20.0,
                         .cost = cost };
    double eps;
    char err[256] = "";
    ck_assert(ts_mi_remap_laplace(&pb, C, &eps, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "30.0 m") != NULL, "%s", err);
    pb.distortion_m = 150.0;
    pb.geoind_epsilon = 0.01;
    ts_mi_params params = { .gap_tolerance_bits = 1e-3, .max_iterations = 10,
                            .family = TS_MI_REMAPPED_LAPLACE };
    ts_mi_result res;
    ck_assert(ts_mi_optimize(&pb, &params, C, &res, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "geoind") != NULL, "%s", err);
    ts_rng_free(rng);
}
END_TEST

/* The reference candidates are judged against: planar Laplace on the
 * grid at the distortion asked (to 1e-6 relative), its figures those of
 * the grid Laplace at the eps it reports (recomputed here, rows of the
 * visited cells), and more distortion buys more Bayes error. */
TS_TEST(test_laplace_reference_at_equal_distortion)
{
    static double C[MAX_CELLS * MAX_CELLS];
    double joint[K * MAX_CELLS];
    ts_vec2 c[MAX_CELLS];
    ts_rng *rng = ts_rng_new_seeded(2815);
    size_t n = ts_test_grid_centres(10, 10, 100.0, 100.0, c);
    ts_test_mi_joint(rng, c, n, K, 150.0, 0.3, joint);
    char err[256] = "";
    double last = -1.0;
    for (double D = 100.0; D <= 400.0; D += 100.0) {
        ts_mi_figures ref, mine;
        double eps = 0.0;
        ck_assert_msg(ts_mi_laplace_reference(joint, n, K, c, NULL, D, &ref,
                                              &eps, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(fabs(ref.distortion_m - D) <= 1e-6 * D,
                      "reference at %.1f m has E[d] %.9f m", D,
                      ref.distortion_m);
        for (size_t x = 0; x < n; x++) {
            double S = normaliser(c, n, x, eps);
            for (size_t z = 0; z < n; z++)
                C[x * n + z] = exp(-eps * dist(c[x], c[z])) / S;
        }
        ck_assert(ts_mi_figures_of(joint, n, K, c, NULL, C, &mine, err,
                                   sizeof err) == 0);
        ck_assert_msg(fabs(mine.bayes_error - ref.bayes_error) <= 1e-12 &&
                      fabs(mine.mi_bits - ref.mi_bits) <= 1e-12,
                      "reference %.12f / %.12f against Laplace at its eps "
                      "%.12f / %.12f", ref.bayes_error, ref.mi_bits,
                      mine.bayes_error, mine.mi_bits);
        ck_assert_msg(ref.bayes_error > last, "Bayes error %.6f at %.0f m, "
                      "%.6f at less", ref.bayes_error, D, last);
        last = ref.bayes_error;
    }
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    return ts_check_main("mi_remap", 120, NULL, NULL);
}
