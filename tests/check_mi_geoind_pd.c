/* The first-order geo-ind solver (inference/mi_geoind_pd.c): its channel
 * is exactly feasible (the ratio bound on every (x, x', z), stochastic
 * rows, E[d] <= L) whether or not it converged, and its certificate is a
 * true bound: against the exact LP solver's optimum on small instances,
 * each result lies within the other's gap. A repair that let the iterate
 * through unrepaired breaks the first test (the iterates of a primal-dual
 * method hold the edges only in the limit). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/mi_optimal.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/grid_centres.h"
#include "tests/support/mi_joint.h"

enum { MAX_CELLS = 64 };

static double dist(ts_vec2 a, ts_vec2 b)
{
    return hypot(a.x - b.x, a.y - b.y);
}

/* What the loader checks: every entry finite and >= 0, rows summing to 1,
 * and C(x, z) <= exp(eps d(x, x')) C(x', z) on every triple (up to the
 * rounding of exp and one product, 1e-12 relative). */
static void assert_feasible(const ts_mi_problem *pb, const double *C)
{
    size_t n = pb->cells;
    for (size_t x = 0; x < n; x++) {
        double sum = 0.0;
        for (size_t z = 0; z < n; z++) {
            ck_assert_msg(C[x * n + z] >= 0.0 && isfinite(C[x * n + z]),
                          "C(%zu, %zu) = %g", x, z, C[x * n + z]);
            sum += C[x * n + z];
        }
        ck_assert_msg(fabs(sum - 1.0) <= 1e-9, "row %zu sums to %.15g", x,
                      sum);
    }
    for (size_t x = 0; x < n; x++)
        for (size_t y = 0; y < n; y++) {
            double bound = exp(pb->geoind_epsilon *
                               dist(pb->centres[x], pb->centres[y])) *
                           (1.0 + 1e-12);
            for (size_t z = 0; z < n; z++)
                ck_assert_msg(C[x * n + z] <= bound * C[y * n + z],
                              "C(%zu,%zu) = %.17g > e^(eps d) C(%zu,%zu) = "
                              "%.17g", x, z, C[x * n + z], y, z,
                              bound * C[y * n + z]);
        }
    double D = ts_mi_distortion(pb, C);
    ck_assert_msg(D <= pb->distortion_m * (1.0 + 1e-9),
                  "E[d] %.12g m > L %.12g m", D, pb->distortion_m);
}

static ts_mi_result solve(const ts_mi_problem *pb, ts_mi_geoind_solver which,
                          unsigned max_it, double tol, double *C)
{
    ts_mi_params params = { .gap_tolerance_bits = tol,
                            .max_iterations = max_it,
                            .geoind_solver = which };
    ts_mi_result res;
    char err[256] = "";
    ck_assert_msg(ts_mi_optimize(pb, &params, C, &res, err, sizeof err) == 0,
                  "ts_mi_optimize: %s", err);
    ck_assert(isfinite(res.gap_bits) && res.gap_bits >= 0.0);
    ck_assert(fabs(ts_mi_bits(pb, C) - res.mi_bits) <= 1e-12);
    ck_assert(res.solver_first_order ==
              (which == TS_MI_GEOIND_FIRST_ORDER));
    return res;
}

/* Square and rectangular cells (the neighbour graph's stretch differs),
 * a looser and a tighter epsilon, and cells nobody visits; after a few
 * steps (far from converged) and after many. */
TS_TEST(test_first_order_channel_is_exactly_feasible)
{
    enum { K = 4 };
    static double C[MAX_CELLS * MAX_CELLS];
    double joint[K * MAX_CELLS];
    ts_vec2 c[MAX_CELLS];
    ts_rng *rng = ts_rng_new_seeded(2801);
    const struct {
        size_t cols, rows;
        double dx, dy, eps, L, zero_share;
    } cases[] = {
        { 6, 6, 100.0, 100.0, 0.01, 150.0, 0.0 },
        { 5, 4, 100.0, 180.0, 0.01, 250.0, 0.5 },
        { 5, 4, 150.0, 100.0, 0.02, 120.0, 0.5 },
        { 8, 8, 100.0, 100.0, 0.01, 250.0, 0.3 },
    };
    const unsigned steps[] = { 20, 400 };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        size_t n = cases[t].cols * cases[t].rows;
        ts_test_grid_centres(cases[t].cols, cases[t].rows, cases[t].dx,
                             cases[t].dy, c);
        ts_test_mi_joint(rng, c, n, K, 150.0, cases[t].zero_share, joint);
        ts_mi_problem pb = { .cells = n, .centres = c, .users = K,
                             .joint = joint, .distortion_m = cases[t].L,
                             .geoind_epsilon = cases[t].eps };
        for (size_t s = 0; s < 2; s++) {
            solve(&pb, TS_MI_GEOIND_FIRST_ORDER, steps[s], 1e-6, C);
            assert_feasible(&pb, C);
        }
    }
    ts_rng_free(rng);
}
END_TEST

/* The certificate against the exact solver: with f_lp within gap_lp of
 * the optimum and f_fo within gap_fo of it, f_fo >= f_lp - gap_lp and
 * f_fo - gap_fo <= f_lp. The first fails if the first-order channel were
 * infeasible (better than possible), the second if its lower bound were
 * not one. The tolerances are the certificates themselves (plus the
 * rounding of I, 1e-12). */
TS_TEST(test_certificate_brackets_the_lp_optimum)
{
    enum { K = 4 };
    static double C[MAX_CELLS * MAX_CELLS];
    double joint[K * MAX_CELLS];
    ts_vec2 c[MAX_CELLS];
    ts_rng *rng = ts_rng_new_seeded(2802);
    const struct {
        size_t cols, rows;
        double cell, eps, L, spread;
    } cases[] = {
        { 6, 6, 100.0, 0.01, 150.0, 200.0 },
        { 5, 5, 100.0, 0.01, 140.0, 300.0 },
        { 6, 4, 120.0, 0.015, 150.0, 200.0 },
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        size_t n = cases[t].cols * cases[t].rows;
        ts_test_grid_centres(cases[t].cols, cases[t].rows, cases[t].cell,
                             cases[t].cell, c);
        ts_test_mi_joint(rng, c, n, K, cases[t].spread, 0.0, joint);
        ts_mi_problem pb = { .cells = n, .centres = c, .users = K,
                             .joint = joint, .distortion_m = cases[t].L,
                             .geoind_epsilon = cases[t].eps };
        ts_mi_result lp = solve(&pb, TS_MI_GEOIND_LP, 2000, 1e-4, C);
        ts_mi_result fo = solve(&pb, TS_MI_GEOIND_FIRST_ORDER, 1500, 1e-4, C);
        assert_feasible(&pb, C);
        ck_assert_msg(fo.mi_bits >= lp.mi_bits - lp.gap_bits - 1e-12,
                      "case %zu: first-order %.9f bits below the LP's "
                      "optimum bracket %.9f - %.3g", t, fo.mi_bits,
                      lp.mi_bits, lp.gap_bits);
        ck_assert_msg(fo.mi_bits - fo.gap_bits <= lp.mi_bits + 1e-12,
                      "case %zu: first-order lower bound %.9f above the "
                      "LP's feasible %.9f", t, fo.mi_bits - fo.gap_bits,
                      lp.mi_bits);
        ck_assert(fabs(fo.lower_bound_bits - (fo.mi_bits - fo.gap_bits)) <=
                  1e-9);
        /* Not a vacuous bracket: the lower bound says more than I >= 0. */
        ck_assert_msg(fo.gap_bits < fo.mi_bits || fo.converged,
                      "case %zu: gap %.3g of %.3g bits", t, fo.gap_bits,
                      fo.mi_bits);
    }
    ts_rng_free(rng);
}
END_TEST

/* The LP solver refuses beyond its size; auto takes the first-order one
 * there, and the first-order one has a size limit of its own. */
TS_TEST(test_solver_choice_by_size)
{
    enum { SIDE = 13, N = SIDE * SIDE, K = 2 };
    ck_assert(N > TS_MI_GEOIND_MAX_CELLS);
    static double C[N * N], joint[K * N];
    static ts_vec2 c[N];
    ts_test_grid_centres(SIDE, SIDE, 100.0, 100.0, c);
    for (size_t i = 0; i < K * N; i++)
        joint[i] = 1.0 / (K * N);
    ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                         .joint = joint, .distortion_m = 400.0,
                         .geoind_epsilon = 0.01 };
    ts_mi_params params = { .gap_tolerance_bits = 1e-3, .max_iterations = 5,
                            .geoind_solver = TS_MI_GEOIND_LP };
    ts_mi_result res;
    char err[256] = "";
    ck_assert(ts_mi_optimize(&pb, &params, C, &res, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "first-order") != NULL, "%s", err);
    params.geoind_solver = TS_MI_GEOIND_AUTO;
    ck_assert_msg(ts_mi_optimize(&pb, &params, C, &res, err, sizeof err) == 0,
                  "%s", err);
    ck_assert(res.solver_first_order);
    assert_feasible(&pb, C);
}
END_TEST

int main(void)
{
    return ts_check_main("mi_geoind_pd", 120, NULL, NULL);
}
