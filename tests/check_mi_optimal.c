/* The MI-optimal channel: its certificate and constraints on random
 * instances, mirror descent against Frank-Wolfe, the tiny 3-user 3 x 3 instance against an independent solver
 * (exponentiated gradient on the Lagrangian, bisected on the multiplier,
 * with its own gradient code), the two limits (a constant channel when L
 * allows one; the identity at L = 0), the geo-ind ratio checked exactly on
 * every (x, x', z), unvisited cells, and bad input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/mi_optimal.h"
#include "inference/mi_smooth.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/grid_centres.h"
#include "tests/support/mi_joint.h"

static double d2(ts_vec2 a, ts_vec2 b)
{
    return hypot(a.x - b.x, a.y - b.y);
}

/* I(U; X): the MI of the identity channel, from the joint alone. */
static double mi_of_joint_bits(const double *joint, size_t n, size_t k)
{
    double f = 0.0;
    for (size_t u = 0; u < k; u++) {
        double pu = 0.0;
        for (size_t x = 0; x < n; x++)
            pu += joint[u * n + x];
        for (size_t x = 0; x < n; x++) {
            double px = 0.0;
            for (size_t v = 0; v < k; v++)
                px += joint[v * n + x];
            double j = joint[u * n + x];
            if (j > 0.0)
                f += j * log2(j / (pu * px));
        }
    }
    return f;
}

static void assert_stochastic(const double *C, size_t n)
{
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
}

/* Runs the optimizer and checks what every run must give: converged,
 * gap below tolerance, E[d] <= L, stochastic rows, and a result that
 * agrees with the channel it describes. */
static ts_mi_result solve_with(const ts_mi_problem *pb, double tol,
                               double *C, int frank_wolfe_only)
{
    ts_mi_params params = { .gap_tolerance_bits = tol,
                            .max_iterations = 200000,
                            .frank_wolfe_only = frank_wolfe_only };
    ts_mi_result res;
    char err[256] = "";
    ck_assert_msg(ts_mi_optimize(pb, &params, C, &res, err, sizeof err) == 0,
                  "ts_mi_optimize: %s", err);
    ck_assert_msg(res.converged, "not converged: gap %g bits after %u",
                  res.gap_bits, res.iterations);
    ck_assert_msg(res.gap_bits >= 0.0 && res.gap_bits <= tol,
                  "gap %g bits, tolerance %g", res.gap_bits, tol);
    assert_stochastic(C, pb->cells);
    double D = ts_mi_distortion(pb, C);
    ck_assert_msg(D <= pb->distortion_m * (1.0 + 1e-9) + 1e-12,
                  "E[d] %.12g m > L %.12g m", D, pb->distortion_m);
    ck_assert(fabs(D - res.distortion_m) <= 1e-9 * (1.0 + D));
    ck_assert(fabs(ts_mi_bits(pb, C) - res.mi_bits) <= 1e-12);
    ck_assert(res.mi_bits >= 0.0);
    return res;
}

static ts_mi_result solve(const ts_mi_problem *pb, double tol, double *C)
{
    return solve_with(pb, tol, C, 0);
}

TS_TEST(test_certificate_and_constraint_on_random_instances)
{
    enum { COLS = 7, ROWS = 6, N = COLS * ROWS, K = 5 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 200.0, 150.0, c);
    double joint[K * N];
    static double C[N * N];
    ts_rng *rng = ts_rng_new_seeded(1301);
    const double Ls[] = { 30.0, 120.0, 400.0 };
    for (int trial = 0; trial < 3; trial++) {
        ts_test_mi_joint(rng, c, N, K, 300.0, 0.4, joint);
        double mi_x = mi_of_joint_bits(joint, N, K);
        double prev = INFINITY;
        for (size_t l = 0; l < sizeof Ls / sizeof Ls[0]; l++) {
            ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                                 .joint = joint, .distortion_m = Ls[l] };
            ts_mi_result r = solve(&pb, 1e-4, C);
            ck_assert(r.mi_bits <= mi_x + 1e-9);
            /* A looser bound can only help, up to the two gaps. */
            ck_assert_msg(r.mi_bits <= prev + 1e-4, "L %g: %g bits after %g",
                          Ls[l], r.mi_bits, prev);
            prev = r.mi_bits;
        }
    }
    ts_rng_free(rng);
}
END_TEST

/* Mirror descent (the default) and plain Frank-Wolfe certify the same
 * optimum: each I is at least the optimum and at most it plus its gap, so
 * the two differ by no more than the larger gap. */
TS_TEST(test_mirror_descent_and_frank_wolfe_agree)
{
    enum { COLS = 6, ROWS = 5, N = COLS * ROWS, K = 6 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 100.0, 100.0, c);
    double joint[K * N];
    static double A[N * N], B[N * N];
    ts_rng *rng = ts_rng_new_seeded(1303);
    const double Ls[] = { 20.0, 80.0, 150.0 };
    for (int trial = 0; trial < 3; trial++) {
        ts_test_mi_joint(rng, c, N, K, 200.0, 0.5, joint);
        for (size_t l = 0; l < sizeof Ls / sizeof Ls[0]; l++) {
            ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                                 .joint = joint, .distortion_m = Ls[l] };
            ts_mi_result md = solve_with(&pb, 1e-4, A, 0);
            ts_mi_result fw = solve_with(&pb, 1e-4, B, 1);
            ck_assert_msg(md.mi_bits <= fw.mi_bits + md.gap_bits + 1e-12 &&
                          fw.mi_bits <= md.mi_bits + fw.gap_bits + 1e-12,
                          "L %g: mirror descent %.9f (gap %.2g), "
                          "Frank-Wolfe %.9f (gap %.2g)", Ls[l], md.mi_bits,
                          md.gap_bits, fw.mi_bits, fw.gap_bits);
        }
    }
    ts_rng_free(rng);
}
END_TEST

/* ---------------------------------------------- the independent solver */

/* I(U; Z) in nats and its gradient, written from the definition
 * P(z|u) = sum_x p(x|u) C(x, z), I = sum_u p(u) KL(P(.|u) || P(.)). */
static double ref_mi(const double *joint, size_t n, size_t k,
                     const double *C, double *grad)
{
    double pu[8] = { 0 }, pzu[8 * 16] = { 0 }, pz[16] = { 0 };
    for (size_t u = 0; u < k; u++)
        for (size_t x = 0; x < n; x++)
            pu[u] += joint[u * n + x];
    for (size_t u = 0; u < k; u++)
        for (size_t z = 0; z < n; z++) {
            for (size_t x = 0; x < n; x++)
                pzu[u * n + z] += joint[u * n + x] / pu[u] * C[x * n + z];
            pz[z] += pu[u] * pzu[u * n + z];
        }
    double f = 0.0;
    for (size_t u = 0; u < k; u++)
        for (size_t z = 0; z < n; z++)
            if (pzu[u * n + z] > 0.0)
                f += pu[u] * pzu[u * n + z] * log(pzu[u * n + z] / pz[z]);
    if (grad != NULL)
        for (size_t x = 0; x < n; x++)
            for (size_t z = 0; z < n; z++) {
                double g = 0.0, px = 0.0;
                for (size_t u = 0; u < k; u++) {
                    g += joint[u * n + x] * log(pzu[u * n + z]);
                    px += joint[u * n + x];
                }
                grad[x * n + z] = g - px * log(pz[z]);
            }
    return f;
}

/* Minimises I + mu E[d] over row-stochastic C by exponentiated gradient
 * (mirror descent with the entropy on each row, step scaled by p(x)). */
static void ref_lagrangian(const double *joint, const ts_vec2 *c, size_t n,
                           size_t k, double mu, double *C)
{
    double grad[16 * 16], px[16] = { 0 };
    for (size_t x = 0; x < n; x++)
        for (size_t u = 0; u < k; u++)
            px[x] += joint[u * n + x];
    for (size_t i = 0; i < n * n; i++)
        C[i] = 1.0 / (double)n;
    for (int it = 0; it < 6000; it++) {
        ref_mi(joint, n, k, C, grad);
        double eta = 2.0 / sqrt(1.0 + it / 50.0);
        for (size_t x = 0; x < n; x++) {
            double sum = 0.0;
            for (size_t z = 0; z < n; z++) {
                double g = grad[x * n + z] / px[x] +
                           mu * d2(c[x], c[z]) / 100.0;
                C[x * n + z] *= exp(-eta * g);
                if (C[x * n + z] < 1e-300)
                    C[x * n + z] = 1e-300;
                sum += C[x * n + z];
            }
            for (size_t z = 0; z < n; z++)
                C[x * n + z] /= sum;
        }
    }
}

static double ref_distortion(const double *joint, const ts_vec2 *c,
                             size_t n, size_t k, const double *C)
{
    double D = 0.0;
    for (size_t u = 0; u < k; u++)
        for (size_t x = 0; x < n; x++)
            for (size_t z = 0; z < n; z++)
                D += joint[u * n + x] * C[x * n + z] * d2(c[x], c[z]);
    return D;
}

TS_TEST(test_tiny_instance_matches_independent_solver)
{
    enum { N = 9, K = 3 };
    ts_vec2 c[N];
    ts_test_grid_centres(3, 3, 100.0, 100.0, c);
    /* Three users on overlapping corners of the 3 x 3 grid. */
    const double w[K][N] = {
        { 4, 3, 0, 3, 2, 0, 0, 0, 0 },
        { 0, 1, 4, 0, 2, 3, 0, 0, 1 },
        { 0, 0, 0, 2, 1, 0, 4, 3, 1 },
    };
    double joint[K * N], total = 0.0;
    for (size_t i = 0; i < K * N; i++)
        total += (&w[0][0])[i];
    for (size_t i = 0; i < K * N; i++)
        joint[i] = (&w[0][0])[i] / total;
    const double Ls[] = { 25.0, 60.0, 110.0 };
    const double tol = 1e-5;
    for (size_t l = 0; l < sizeof Ls / sizeof Ls[0]; l++) {
        double L = Ls[l];
        ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                             .joint = joint, .distortion_m = L };
        double C[N * N], R[N * N], best[N * N];
        ts_mi_result r = solve(&pb, tol, C);
        /* Bisect the multiplier (per 100 m) so that the reference channel
         * meets the bound; the last feasible one is kept. */
        double lo = 0.0, hi = 50.0, f_ref = INFINITY;
        for (int b = 0; b < 30; b++) {
            double mu = 0.5 * (lo + hi);
            ref_lagrangian(joint, c, N, K, mu, R);
            double D = ref_distortion(joint, c, N, K, R);
            if (D <= L) {
                hi = mu;
                double f = ref_mi(joint, N, K, R, NULL) / M_LN2;
                if (f < f_ref) {
                    f_ref = f;
                    memcpy(best, R, sizeof best);
                }
            } else {
                lo = mu;
            }
        }
        ck_assert(isfinite(f_ref));
        /* The certificate says no feasible channel is below
         * mi - gap; the reference is feasible. */
        ck_assert_msg(f_ref >= r.mi_bits - r.gap_bits - 1e-12,
                      "L %g: reference %.9f bits beats %.9f - gap %.2g", L,
                      f_ref, r.mi_bits, r.gap_bits);
        /* And the reference, converged to about 1e-3 bits by its own
         * bisection and step count, finds the same optimum. */
        ck_assert_msg(f_ref <= r.mi_bits + 2e-3,
                      "L %g: reference %.9f bits, optimizer %.9f", L, f_ref,
                      r.mi_bits);
        /* The independent MI of the optimizer's channel agrees. */
        ck_assert(fabs(ref_mi(joint, N, K, C, NULL) / M_LN2 - r.mi_bits) <=
                  1e-12);
    }
}
END_TEST

TS_TEST(test_loose_bound_gives_constant_channel)
{
    enum { COLS = 5, ROWS = 4, N = COLS * ROWS, K = 4 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 100.0, 100.0, c);
    double joint[K * N];
    static double C[N * N];
    ts_rng *rng = ts_rng_new_seeded(7);
    ts_test_mi_joint(rng, c, N, K, 150.0, 0.3, joint);
    double dmax = 0.0;
    for (size_t a = 0; a < N; a++)
        for (size_t b = 0; b < N; b++)
            dmax = fmax(dmax, d2(c[a], c[b]));
    ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                         .joint = joint, .distortion_m = dmax };
    ts_mi_result r = solve(&pb, 1e-7, C);
    ck_assert_msg(r.mi_bits <= 1e-7, "I = %g bits", r.mi_bits);
    /* Every row the same: nothing of X, hence of U, is in Z. */
    for (size_t x = 1; x < N; x++)
        for (size_t z = 0; z < N; z++)
            ck_assert(fabs(C[x * N + z] - C[z]) <= 1e-9);

    /* A bound just above the best constant channel (all to the weighted
     * 1-median) still admits I = 0: the optimum is 0 within the gap. */
    double best = INFINITY;
    for (size_t z = 0; z < N; z++) {
        double D = 0.0;
        for (size_t u = 0; u < K; u++)
            for (size_t x = 0; x < N; x++)
                D += joint[u * N + x] * d2(c[x], c[z]);
        best = fmin(best, D);
    }
    pb.distortion_m = best * 1.0001;
    r = solve(&pb, 1e-5, C);
    ck_assert_msg(r.mi_bits <= r.gap_bits + 1e-12, "I = %g bits, gap %g",
                  r.mi_bits, r.gap_bits);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_zero_bound_gives_identity)
{
    enum { COLS = 4, ROWS = 3, N = COLS * ROWS, K = 3 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 100.0, 120.0, c);
    double joint[K * N];
    double C[N * N];
    ts_rng *rng = ts_rng_new_seeded(8);
    ts_test_mi_joint(rng, c, N, K, 150.0, 0.0, joint);
    ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                         .joint = joint, .distortion_m = 0.0 };
    ts_mi_result r = solve(&pb, 1e-9, C);
    for (size_t x = 0; x < N; x++)
        for (size_t z = 0; z < N; z++)
            ck_assert(C[x * N + z] == (x == z ? 1.0 : 0.0));
    ck_assert(r.gap_bits == 0.0);
    ck_assert(r.distortion_m == 0.0);
    ck_assert(fabs(r.mi_bits - mi_of_joint_bits(joint, N, K)) <= 1e-12);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_unvisited_cells_copy_nearest_visited_row)
{
    enum { COLS = 5, ROWS = 5, N = COLS * ROWS, K = 3 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 100.0, 100.0, c);
    double joint[K * N];
    static double C[N * N];
    ts_rng *rng = ts_rng_new_seeded(9);
    ts_test_mi_joint(rng, c, N, K, 100.0, 0.0, joint);
    /* Nobody visits the right-hand column. */
    double total = 0.0;
    for (size_t u = 0; u < K; u++)
        for (size_t r = 0; r < ROWS; r++)
            joint[u * N + r * COLS + COLS - 1] = 0.0;
    for (size_t i = 0; i < K * N; i++)
        total += joint[i];
    for (size_t i = 0; i < K * N; i++)
        joint[i] /= total;
    ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                         .joint = joint, .distortion_m = 80.0 };
    solve(&pb, 1e-4, C);
    for (size_t r = 0; r < ROWS; r++) {
        size_t x = r * COLS + COLS - 1, nn = x - 1;
        ck_assert(memcmp(C + x * N, C + nn * N, N * sizeof *C) == 0);
    }
    ts_rng_free(rng);
}
END_TEST

/* Every pair, every output: C(x, z) <= exp(eps d(x, x')) C(x', z), up to
 * the rounding of exp and of one product (1e-12 relative). */
static void assert_geoind(const double *C, const ts_vec2 *c, size_t n,
                          double eps)
{
    for (size_t x = 0; x < n; x++)
        for (size_t y = 0; y < n; y++) {
            double bound = exp(eps * d2(c[x], c[y])) * (1.0 + 1e-12);
            for (size_t z = 0; z < n; z++)
                ck_assert_msg(C[x * n + z] <= bound * C[y * n + z],
                              "C(%zu,%zu) = %.17g > e^(eps d) C(%zu,%zu) = "
                              "%.17g", x, z, C[x * n + z], y, z,
                              bound * C[y * n + z]);
        }
}

TS_TEST(test_geoind_ratio_exact_on_every_triple)
{
    enum { K = 4 };
    static double C[64 * 64];
    double joint[K * 64];
    ts_vec2 c[64];
    ts_rng *rng = ts_rng_new_seeded(1302);
    /* Square cells, rectangular cells (the stretch of the neighbour graph
     * differs) and a looser and a tighter epsilon. */
    const struct {
        size_t cols, rows;
        double dx, dy, eps, L;
    } cases[] = {
        { 4, 4, 100.0, 100.0, 1.0 / 100.0, 150.0 },
        { 5, 4, 100.0, 180.0, 1.0 / 100.0, 250.0 },
        { 5, 4, 150.0, 100.0, 1.0 / 50.0, 100.0 },
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        size_t n = cases[t].cols * cases[t].rows;
        ts_test_grid_centres(cases[t].cols, cases[t].rows, cases[t].dx,
                             cases[t].dy, c);
        ts_test_mi_joint(rng, c, n, K, 150.0, 0.5, joint);
        ts_mi_problem pb = { .cells = n, .centres = c, .users = K,
                             .joint = joint, .distortion_m = cases[t].L,
                             .geoind_epsilon = cases[t].eps };
        ts_mi_result r = solve(&pb, 1e-4, C);
        assert_geoind(C, c, n, cases[t].eps);
        /* Geo-ind only removes channels: never better than without. */
        static double P[64 * 64];
        pb.geoind_epsilon = 0.0;
        ts_mi_result plain = solve(&pb, 1e-5, P);
        ck_assert_msg(r.mi_bits >= plain.mi_bits - plain.gap_bits - 1e-9,
                      "geo-ind %g < plain %g", r.mi_bits, plain.mi_bits);
    }
    ts_rng_free(rng);
}
END_TEST

/* Runs the geo-ind optimizer for a few steps and checks what must hold
 * whether or not it converged: success, stochastic rows, E[d] <= L, a
 * non-negative certificate, and the ratio on every triple. */
static ts_mi_result solve_geoind_briefly(const ts_mi_problem *pb,
                                         unsigned max_it, double *C)
{
    ts_mi_params params = { .gap_tolerance_bits = 1e-6,
                            .max_iterations = max_it };
    ts_mi_result res;
    char err[256] = "";
    ck_assert_msg(ts_mi_optimize(pb, &params, C, &res, err, sizeof err) == 0,
                  "ts_mi_optimize at L %.9g m: %s", pb->distortion_m, err);
    assert_stochastic(C, pb->cells);
    double D = ts_mi_distortion(pb, C);
    ck_assert_msg(D <= pb->distortion_m * (1.0 + 1e-9),
                  "E[d] %.12g m > L %.12g m", D, pb->distortion_m);
    ck_assert(isfinite(res.gap_bits) && res.gap_bits >= 0.0);
    ck_assert(fabs(ts_mi_bits(pb, C) - res.mi_bits) <= 1e-12);
    assert_geoind(C, pb->centres, pb->cells, pb->geoind_epsilon);
    return res;
}

/* The least geo-ind distortion, read from the refusal of a bound below
 * it: the message must carry it as a finite number. */
static double least_geoind_distortion(const ts_mi_problem *good)
{
    ts_mi_problem pb = *good;
    pb.distortion_m = 1e-12;
    ts_mi_params params = { .gap_tolerance_bits = 1e-6,
                            .max_iterations = 10 };
    ts_mi_result res;
    static double C[64 * 64];
    char err[256] = "";
    ck_assert(pb.cells <= 64);
    ck_assert(ts_mi_optimize(&pb, &params, C, &res, err, sizeof err) == -1);
    const char *at = strstr(err, "the least is ");
    ck_assert_msg(at != NULL, "%s", err);
    double least = NAN;
    ck_assert_msg(sscanf(at, "the least is %lf m", &least) == 1, "%s", err);
    ck_assert_msg(isfinite(least) && least >= 0.0, "%s", err);
    return least;
}

/* The shape of a coarse grid under a tight epsilon (eps times a cell of
 * 10 to 25): the least-distortion LP vertex has entries far below GLPK's
 * tolerance, which it returns as zeros next to tiny positives, and most
 * cells carry no training mass. Its repair once collapsed whole rows to
 * 0 / 0 and reported the least distortion as NaN. */
TS_TEST(test_geoind_tight_epsilon_on_coarse_sparse_grid)
{
    enum { K = 5 };
    static double C[64 * 64];
    double joint[K * 64];
    ts_vec2 c[64];
    ts_rng *rng = ts_rng_new_seeded(1303);
    const struct {
        size_t cols, rows;
        double dx, dy, eps, L;
    } cases[] = {
        { 4, 5, 2500.0, 2500.0, 0.01, 200.0 },
        { 5, 4, 2500.0, 1800.0, 0.01, 50.0 },
        { 4, 4, 1000.0, 2500.0, 0.006, 300.0 },
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        size_t n = cases[t].cols * cases[t].rows;
        ts_test_grid_centres(cases[t].cols, cases[t].rows, cases[t].dx,
                             cases[t].dy, c);
        ts_test_mi_joint(rng, c, n, K, 1500.0, 0.7, joint);
        ts_mi_problem pb = { .cells = n, .centres = c, .users = K,
                             .joint = joint, .distortion_m = cases[t].L,
                             .geoind_epsilon = cases[t].eps };
        double least = least_geoind_distortion(&pb);
        ck_assert_msg(least < cases[t].L, "least %g m", least);
        solve_geoind_briefly(&pb, 200, C);
        /* Just above the least it reported: accepted. */
        pb.distortion_m = least * (1.0 + 1e-7) + 1e-12;
        solve_geoind_briefly(&pb, 50, C);
    }
    ts_rng_free(rng);
}
END_TEST

/* The shape where GLPK's slips cost more distortion than the LP's room
 * for the repair (moderate epsilon on coarse, rectangular cells, cells
 * without mass), and bounds just above the least distortion, where there
 * is no room at all: every vertex must still be repaired within L, and
 * just below the least, L is refused with the number. */
TS_TEST(test_geoind_repair_within_bound_near_least)
{
    enum { K = 6 };
    static double C[64 * 64];
    double joint[K * 64];
    ts_vec2 c[64];
    ts_rng *rng = ts_rng_new_seeded(1304);
    const struct {
        size_t cols, rows;
        double dx, dy, eps;
    } cases[] = {
        { 4, 5, 2500.0, 2200.0, 0.002 },
        { 3, 4, 3000.0, 2600.0, 0.002 },
        { 3, 3, 4000.0, 3500.0, 0.002 },
        { 6, 4, 400.0, 250.0, 0.004 },
    };
    const double above[] = { 1e-7, 1e-4, 0.05 };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        size_t n = cases[t].cols * cases[t].rows;
        ts_test_grid_centres(cases[t].cols, cases[t].rows, cases[t].dx,
                             cases[t].dy, c);
        ts_test_mi_joint(rng, c, n, K, 2.0 * cases[t].dx, 0.5, joint);
        ts_mi_problem pb = { .cells = n, .centres = c, .users = K,
                             .joint = joint, .distortion_m = 1.0,
                             .geoind_epsilon = cases[t].eps };
        double least = least_geoind_distortion(&pb);
        for (size_t a = 0; a < sizeof above / sizeof above[0]; a++) {
            pb.distortion_m = least * (1.0 + above[a]);
            solve_geoind_briefly(&pb, 60, C);
        }
        pb.distortion_m = least * (1.0 - 1e-6);
        ts_mi_params params = { .gap_tolerance_bits = 1e-6,
                                .max_iterations = 10 };
        ts_mi_result res;
        char err[256] = "";
        ck_assert(ts_mi_optimize(&pb, &params, C, &res, err, sizeof err) ==
                  -1);
        ck_assert_msg(strstr(err, "least") != NULL, "%s", err);
    }
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_bad_input)
{
    enum { N = 4, K = 2 };
    ts_vec2 c[N];
    ts_test_grid_centres(2, 2, 100.0, 100.0, c);
    double joint[K * N] = { 0.25, 0.25, 0, 0, 0, 0, 0.25, 0.25 };
    double C[N * N];
    ts_mi_params params = { .gap_tolerance_bits = 1e-6,
                            .max_iterations = 1000 };
    ts_mi_result r;
    char err[256];
    ts_mi_problem good = { .cells = N, .centres = c, .users = K,
                           .joint = joint, .distortion_m = 50.0 };
    ck_assert(ts_mi_optimize(&good, &params, C, &r, err, sizeof err) == 0);

    ts_mi_problem pb = good;
    ck_assert(ts_mi_optimize(NULL, &params, C, &r, err, sizeof err) == -1);
    ck_assert(ts_mi_optimize(&pb, NULL, C, &r, err, sizeof err) == -1);
    ck_assert(ts_mi_optimize(&pb, &params, NULL, &r, err, sizeof err) == -1);
    ck_assert(ts_mi_optimize(&pb, &params, C, NULL, err, sizeof err) == -1);
    pb.cells = 0;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    pb = good;
    pb.users = 0;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    pb = good;
    pb.distortion_m = -1.0;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    ck_assert(strstr(err, "distortion") != NULL);
    pb.distortion_m = NAN;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    pb = good;
    pb.geoind_epsilon = -0.1;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    pb.geoind_epsilon = INFINITY;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);

    double bad[K * N];
    memcpy(bad, joint, sizeof bad);
    bad[0] = 0.5;   /* sums to 1.25 */
    pb = good;
    pb.joint = bad;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    ck_assert(strstr(err, "sums") != NULL);
    bad[0] = -0.25;
    bad[1] = 0.75;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    bad[0] = NAN;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);

    ts_vec2 nan_c[N];
    memcpy(nan_c, c, sizeof nan_c);
    nan_c[2].y = NAN;
    pb = good;
    pb.centres = nan_c;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);

    ts_mi_params bad_params = params;
    bad_params.gap_tolerance_bits = 0.0;
    ck_assert(ts_mi_optimize(&good, &bad_params, C, &r, err, sizeof err) ==
              -1);

    /* Geo-ind with a bound below the least geo-ind distortion, and at
     * zero: refused with the reason. */
    pb = good;
    pb.geoind_epsilon = 1.0 / 1000.0;
    pb.distortion_m = 1.0;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "least") != NULL, "%s", err);
    pb.distortion_m = 0.0;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);

    /* Geo-ind above the LP solver's size limit, that solver asked for:
     * refused, naming the limit (auto takes the first-order solver there,
     * tests/check_mi_geoind_pd). */
    params.geoind_solver = TS_MI_GEOIND_LP;
    enum { BIG = TS_MI_GEOIND_MAX_CELLS + 1 };
    ts_vec2 *bc = malloc(BIG * sizeof *bc);
    double *bj = calloc(BIG, sizeof *bj);
    ck_assert(bc != NULL && bj != NULL);
    ts_test_grid_centres(BIG, 1, 100.0, 100.0, bc);
    bj[0] = 1.0;
    ts_mi_problem big = { .cells = BIG, .centres = bc, .users = 1,
                          .joint = bj, .distortion_m = 100.0,
                          .geoind_epsilon = 0.01 };
    ck_assert(ts_mi_optimize(&big, &params, NULL, &r, err, sizeof err) ==
              -1);
    double *bC = malloc((size_t)BIG * BIG * sizeof *bC);
    ck_assert(bC != NULL);
    ck_assert(ts_mi_optimize(&big, &params, bC, &r, err, sizeof err) == -1);
    char limit[32];
    snprintf(limit, sizeof limit, "%u", (unsigned)TS_MI_GEOIND_MAX_CELLS);
    ck_assert_msg(strstr(err, limit) != NULL, "%s", err);
    free(bc);
    free(bj);
    free(bC);
}
END_TEST

/* ------------------------------------------------ smoothing (issue 28) */

/* The smoothed joint keeps every user's mass, is the plain one at h = 0
 * and b = 0, and gives a cell that no kernel reaches the population's
 * identity distribution P(u) exactly. */
TS_TEST(test_smooth_keeps_mass_and_backs_off_to_the_population)
{
    enum { COLS = 12, ROWS = 6, N = COLS * ROWS, K = 3 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 100.0, 100.0, c);
    double counts[K * N] = { 0 }, out[K * N];
    /* Users on the west side only: columns 0-2; the east is empty. */
    counts[0 * N + 0] = 5;
    counts[0 * N + 13] = 3;
    counts[1 * N + 2] = 4;
    counts[1 * N + 26] = 2;
    counts[2 * N + 1] = 6;
    double total = 20.0, pu[K] = { 8 / total, 6 / total, 6 / total };
    char err[256];
    ck_assert(ts_mi_smooth_joint(c, N, K, counts, 0.0, 0.0, out, err,
                                 sizeof err) == 0);
    for (size_t i = 0; i < K * N; i++)
        ck_assert(fabs(out[i] - counts[i] / total) <= 1e-15);
    const double b = 0.1, h = 100.0;
    ck_assert(ts_mi_smooth_joint(c, N, K, counts, h, b, out, err,
                                 sizeof err) == 0);
    double sum = 0.0;
    for (size_t u = 0; u < K; u++) {
        double mass = 0.0;
        for (size_t x = 0; x < N; x++) {
            ck_assert(out[u * N + x] > 0.0);   /* every cell has mass */
            mass += out[u * N + x];
        }
        ck_assert_msg(fabs(mass - pu[u]) <= 1e-12, "user %zu: %g vs %g", u,
                      mass, pu[u]);
        sum += mass;
    }
    ck_assert(fabs(sum - 1.0) <= 1e-12);
    /* Column 11 is 800 m from every count, beyond 3 h = 300 m: only the
     * back-off reaches it, and P_s(u | x) = P(u) there. */
    for (size_t r = 0; r < ROWS; r++) {
        size_t x = r * COLS + 11;
        double px = 0.0;
        for (size_t u = 0; u < K; u++)
            px += out[u * N + x];
        for (size_t u = 0; u < K; u++)
            ck_assert_msg(fabs(out[u * N + x] / px - pu[u]) <= 1e-12,
                          "cell %zu user %zu: %g vs %g", x, u,
                          out[u * N + x] / px, pu[u]);
    }
    ck_assert(ts_mi_smooth_joint(c, N, K, counts, -1.0, 0.0, out, err,
                                 sizeof err) == -1);
    ck_assert(ts_mi_smooth_joint(c, N, K, counts, 0.0, 1.5, out, err,
                                 sizeof err) == -1);
}
END_TEST

/* KL(P(U | z) || P(U)) and max_u P(u | z) per output under a joint. */
static void posteriors(const double *joint, size_t n, size_t k,
                       const double *C, double *D, double *V, double *I,
                       double *Vbar)
{
    double pu[8] = { 0 };
    *I = *Vbar = 0.0;
    for (size_t u = 0; u < k; u++)
        for (size_t x = 0; x < n; x++)
            pu[u] += joint[u * n + x];
    for (size_t z = 0; z < n; z++) {
        double J[8] = { 0 }, pz = 0.0;
        for (size_t u = 0; u < k; u++) {
            for (size_t x = 0; x < n; x++)
                J[u] += joint[u * n + x] * C[x * n + z];
            pz += J[u];
        }
        D[z] = V[z] = 0.0;
        for (size_t u = 0; u < k && pz > 0.0; u++) {
            double post = J[u] / pz;
            if (post > 0.0)
                D[z] += post * log(post / pu[u]);
            V[z] = post > V[z] ? post : V[z];
        }
        *I += pz * D[z];
        *Vbar += pz * V[z];
    }
}

/* Rows of cells no training row visited: the optimizer copies the nearest
 * visited cell's row, and where that cell is one user's, the row points at
 * that user: a report from it tells more about who sent it than the
 * population's reports do. The guard mixes such rows until they tell no
 * more (KL to the prior and Bayes vulnerability, on average over the row),
 * and leaves visited rows alone. The first check fails on the channel
 * before the guard, which is what ts_mi_optimize alone gave. */
TS_TEST(test_guard_empty_rows_no_more_identifying_than_population)
{
    enum { COLS = 8, ROWS = 4, N = COLS * ROWS, K = 3 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 100.0, 100.0, c);
    /* Three users, each at home in one corner, and a shared cell. */
    double joint[K * N] = { 0 };
    joint[0 * N + 0] = 0.30;
    joint[1 * N + 7] = 0.30;
    joint[2 * N + 31] = 0.30;
    joint[0 * N + 12] = 0.04;
    joint[1 * N + 12] = 0.03;
    joint[2 * N + 12] = 0.03;
    static double C[N * N], before[N * N];
    ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                         .joint = joint, .distortion_m = 60.0 };
    solve(&pb, 1e-6, C);
    memcpy(before, C, sizeof before);
    double D[N], V[N], I, Vbar;
    posteriors(joint, N, K, C, D, V, &I, &Vbar);
    int worse = 0;
    for (size_t x = 0; x < N; x++) {
        if (x == 0 || x == 7 || x == 12 || x == 31)
            continue;
        double dx = 0.0;
        for (size_t z = 0; z < N; z++)
            dx += C[x * N + z] * D[z];
        worse |= dx > I * (1.0 + 1e-9);
    }
    ck_assert_msg(worse, "no empty-cell row was more identifying than the "
                  "population's before the guard");
    size_t fixed = 0;
    char err[256];
    ck_assert_msg(ts_mi_guard_rows(joint, N, K, c, C, &fixed, err,
                                   sizeof err) == 0, "%s", err);
    ck_assert(fixed > 0);
    assert_stochastic(C, N);
    posteriors(joint, N, K, C, D, V, &I, &Vbar);
    for (size_t x = 0; x < N; x++) {
        if (x == 0 || x == 7 || x == 12 || x == 31) {
            ck_assert(memcmp(C + x * N, before + x * N,
                             N * sizeof *C) == 0);
            continue;
        }
        double dx = 0.0, vx = 0.0;
        for (size_t z = 0; z < N; z++) {
            dx += C[x * N + z] * D[z];
            vx += C[x * N + z] * V[z];
        }
        ck_assert_msg(dx <= I * (1.0 + 1e-9), "row %zu: KL %g > I %g", x,
                      dx, I);
        ck_assert_msg(vx <= Vbar * (1.0 + 1e-9), "row %zu: V %g > %g", x,
                      vx, Vbar);
    }
}
END_TEST

/* --distortion-on points: with the cost matrix of the true points, the
 * bound holds over the points themselves; between centres it does not
 * (points off-centre add their offset), which is what the optimizer did
 * before the cost matrix. */
TS_TEST(test_distortion_bound_holds_over_true_points)
{
    enum { COLS = 6, ROWS = 6, N = COLS * ROWS, K = 4, P = 400 };
    ts_vec2 c[N];
    ts_test_grid_centres(COLS, ROWS, 100.0, 100.0, c);
    ts_rng *rng = ts_rng_new_seeded(2801);
    static double cost[N * N], C[N * N];
    double joint[K * N] = { 0 };
    size_t per_cell[N] = { 0 };
    ts_vec2 pts[P];
    size_t cell_of[P];
    for (size_t i = 0; i < P; i++) {
        size_t u = i % K;
        /* Users around four homes, points anywhere in their cells. */
        double hx = u % 2 ? 450.0 : 150.0, hy = u / 2 ? 450.0 : 150.0;
        double x = hx + 150.0 * (ts_rng_uniform_open(rng) - 0.5) * 2.0;
        double y = hy + 150.0 * (ts_rng_uniform_open(rng) - 0.5) * 2.0;
        pts[i] = (ts_vec2){ x, y };
        size_t cx = (size_t)(x / 100.0), cy = (size_t)(y / 100.0);
        cell_of[i] = cy * COLS + cx;
        joint[u * N + cell_of[i]] += 1.0 / P;
        per_cell[cell_of[i]]++;
    }
    for (size_t i = 0; i < P; i++)
        for (size_t z = 0; z < N; z++)
            cost[cell_of[i] * N + z] += d2(pts[i], c[z]) /
                                        (double)per_cell[cell_of[i]];
    for (size_t x = 0; x < N; x++)
        if (per_cell[x] == 0)
            for (size_t z = 0; z < N; z++)
                cost[x * N + z] = d2(c[x], c[z]);
    const double L = 120.0;
    ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                         .joint = joint, .distortion_m = L };
    /* The mean distance over the points, of channel C. */
    double on_points;
    solve(&pb, 1e-5, C);
    on_points = 0.0;
    for (size_t i = 0; i < P; i++)
        for (size_t z = 0; z < N; z++)
            on_points += C[cell_of[i] * N + z] * d2(pts[i], c[z]) / P;
    ck_assert_msg(on_points > L * 1.05, "between centres: %g m over the "
                  "points, L %g m", on_points, L);
    pb.cost = cost;
    solve(&pb, 1e-5, C);
    on_points = 0.0;
    for (size_t i = 0; i < P; i++)
        for (size_t z = 0; z < N; z++)
            on_points += C[cell_of[i] * N + z] * d2(pts[i], c[z]) / P;
    ck_assert_msg(on_points <= L * (1.0 + 1e-9), "on points: %g m > L %g",
                  on_points, L);
    ts_mi_figures fig;
    char err[256];
    ck_assert(ts_mi_figures_of(joint, N, K, c, cost, C, &fig, err,
                               sizeof err) == 0);
    ck_assert(fabs(fig.distortion_m - on_points) <= 1e-9 * L);
    ck_assert(fabs(fig.mi_bits - ts_mi_bits(&pb, C)) <= 1e-9);
    /* Below the least distortion (every point at its nearest centre):
     * refused with that least. */
    pb.distortion_m = 5.0;
    ts_mi_params params = { .gap_tolerance_bits = 1e-4,
                            .max_iterations = 100 };
    ts_mi_result r;
    ck_assert(ts_mi_optimize(&pb, &params, C, &r, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "the least is") != NULL, "%s", err);
    ts_rng_free(rng);
}
END_TEST

/* Rows regularised towards spread (--row-entropy): the entropic dual
 * certifies the regularised objective, the bound holds, and the channel
 * is no worse for that objective than the unregularised optimum (up to
 * the gap), while its rows carry more entropy. */
TS_TEST(test_row_entropy_certified_and_spreads_rows)
{
    enum { N = 25, K = 4 };
    ts_vec2 c[N];
    ts_test_grid_centres(5, 5, 100.0, 100.0, c);
    ts_rng *rng = ts_rng_new_seeded(2802);
    double joint[K * N];
    ts_test_mi_joint(rng, c, N, K, 150.0, 0.3, joint);
    static double C0[N * N], Ct[N * N];
    ts_mi_problem pb = { .cells = N, .centres = c, .users = K,
                         .joint = joint, .distortion_m = 120.0 };
    solve(&pb, 1e-6, C0);
    const double tau = 0.2, tol = 1e-4;
    pb.row_entropy_weight = tau;
    ts_mi_params params = { .gap_tolerance_bits = tol,
                            .max_iterations = 20000 };
    ts_mi_result r;
    char err[256];
    ck_assert_msg(ts_mi_optimize(&pb, &params, Ct, &r, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(r.converged && r.gap_bits <= tol, "gap %g", r.gap_bits);
    assert_stochastic(Ct, N);
    ck_assert(ts_mi_distortion(&pb, Ct) <= pb.distortion_m * (1.0 + 1e-9));
    double px[N] = { 0 };
    for (size_t u = 0; u < K; u++)
        for (size_t x = 0; x < N; x++)
            px[x] += joint[u * N + x];
    double ent0 = 0.0, entt = 0.0;
    for (size_t x = 0; x < N; x++)
        for (size_t z = 0; z < N; z++) {
            if (C0[x * N + z] > 0.0)
                ent0 += px[x] * C0[x * N + z] * log(C0[x * N + z]);
            if (Ct[x * N + z] > 0.0)
                entt += px[x] * Ct[x * N + z] * log(Ct[x * N + z]);
        }
    pb.row_entropy_weight = 0.0;
    double f0 = ts_mi_bits(&pb, C0) * M_LN2 + tau * ent0;
    double ft = ts_mi_bits(&pb, Ct) * M_LN2 + tau * entt;
    ck_assert_msg(ft <= f0 + 1e-9, "regularised %g > plain optimum's %g",
                  ft, f0);
    ck_assert_msg(entt < ent0, "rows no more spread: %g vs %g", entt, ent0);
    /* With geo-ind it is refused. */
    pb.row_entropy_weight = tau;
    pb.geoind_epsilon = 0.01;
    ck_assert(ts_mi_optimize(&pb, &params, Ct, &r, err, sizeof err) == -1);
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    return ts_check_main("mi_optimal", 60, NULL, NULL);
}
