/* The exact EMD: checked against closed forms (mass on a line, where the
 * optimum is the L1 distance between the CDFs; a translated distribution,
 * where the centroid lower bound meets the translation plan), against the
 * metric axioms, and between the centroid lower bound and the independent
 * coupling's upper bound on the paper's 24 x 17 grid. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/emd.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"

static void random_pmf(ts_rng *rng, double *w, size_t n, double zero_share)
{
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        w[i] = ts_rng_uniform_open(rng) < zero_share
                   ? 0.0 : ts_rng_uniform_open(rng);
        total += w[i];
    }
    if (total == 0.0) {
        w[0] = 1.0;
        total = 1.0;
    }
    for (size_t i = 0; i < n; i++)
        w[i] /= total;
}

static double emd(const ts_vec2 *points, size_t n, const double *p,
                  const double *q)
{
    ts_emd_result result;
    char err[160] = "";
    ck_assert_msg(ts_emd(points, n, p, q, &result, err, sizeof err) == 0,
                  "ts_emd failed: %s", err);
    ck_assert(result.distance >= 0.0);
    return result.distance;
}

static void grid(size_t cols, size_t rows, double dx, double dy,
                 ts_vec2 *points)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            points[r * cols + c] = (ts_vec2){ (double)c * dx, (double)r * dy };
}

TS_TEST(test_line_matches_cdf_distance)
{
    enum { N = 40 };
    const double spacing = 250.0;
    ts_vec2 points[N];
    double p[N], q[N];
    for (size_t i = 0; i < N; i++)
        points[i] = (ts_vec2){ (double)i * spacing, 0.0 };
    ts_rng *rng = ts_rng_new_seeded(12);
    for (int trial = 0; trial < 20; trial++) {
        random_pmf(rng, p, N, 0.3);
        random_pmf(rng, q, N, 0.3);
        double cdf_gap = 0.0, P = 0.0, Q = 0.0;
        for (size_t i = 0; i + 1 < N; i++) {
            P += p[i];
            Q += q[i];
            cdf_gap += fabs(P - Q) * spacing;
        }
        double got = emd(points, N, p, q);
        ck_assert_msg(fabs(got - cdf_gap) <= 1e-7 * (1.0 + cdf_gap),
                      "trial %d: EMD %.12g, CDF distance %.12g", trial, got,
                      cdf_gap);
    }
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_point_masses)
{
    ts_vec2 points[3] = { { 0, 0 }, { 300, 400 }, { -120, 50 } };
    double a[3] = { 1, 0, 0 }, b[3] = { 0, 1, 0 }, c[3] = { 0.5, 0, 0.5 };
    ck_assert_double_eq_tol(emd(points, 3, a, b), 500.0, 1e-9);
    ck_assert_double_eq_tol(emd(points, 3, b, a), 500.0, 1e-9);
    /* Half the mass stays at the origin, half goes 130 m. */
    ck_assert_double_eq_tol(emd(points, 3, a, c), 65.0, 1e-9);
    ck_assert_double_eq(emd(points, 3, c, c), 0.0);
}
END_TEST

/* q is p moved k columns east on a grid wide enough to hold both: every
 * coupling moves the centroid by exactly k dx, so EMD >= k dx, and moving
 * each cell's mass k columns achieves it. */
TS_TEST(test_translation_is_exact)
{
    enum { COLS = 14, ROWS = 9, SHIFT = 3 };
    const double dx = 500.0, dy = 467.0;
    ts_vec2 points[COLS * ROWS];
    grid(COLS, ROWS, dx, dy, points);
    double p[COLS * ROWS], q[COLS * ROWS];
    ts_rng *rng = ts_rng_new_seeded(99);
    for (int trial = 0; trial < 5; trial++) {
        memset(p, 0, sizeof p);
        memset(q, 0, sizeof q);
        double total = 0.0;
        for (size_t r = 0; r < ROWS; r++)
            for (size_t c = 0; c + SHIFT < COLS; c++) {
                p[r * COLS + c] = ts_rng_uniform_open(rng);
                total += p[r * COLS + c];
            }
        for (size_t r = 0; r < ROWS; r++)
            for (size_t c = 0; c + SHIFT < COLS; c++) {
                p[r * COLS + c] /= total;
                q[r * COLS + c + SHIFT] = p[r * COLS + c];
            }
        double got = emd(points, COLS * ROWS, p, q);
        ck_assert_msg(fabs(got - SHIFT * dx) <= 1e-7 * SHIFT * dx,
                      "trial %d: EMD %.12g, translation %.12g", trial, got,
                      SHIFT * dx);
    }
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_metric_axioms)
{
    enum { COLS = 10, ROWS = 8, N = COLS * ROWS };
    ts_vec2 points[N];
    grid(COLS, ROWS, 400.0, 300.0, points);
    double p[N], q[N], r[N];
    ts_rng *rng = ts_rng_new_seeded(7);
    for (int trial = 0; trial < 10; trial++) {
        random_pmf(rng, p, N, 0.5);
        random_pmf(rng, q, N, 0.5);
        random_pmf(rng, r, N, 0.5);
        double pq = emd(points, N, p, q), qp = emd(points, N, q, p);
        double pr = emd(points, N, p, r), rq = emd(points, N, r, q);
        ck_assert_msg(fabs(pq - qp) <= 1e-7 * (1 + pq),
                      "not symmetric: %.12g vs %.12g", pq, qp);
        ck_assert_msg(pq <= pr + rq + 1e-7 * (1 + pq),
                      "triangle inequality broken: %.12g > %.12g + %.12g",
                      pq, pr, rq);
        ck_assert(pq > 0.0);
        ck_assert_double_eq(emd(points, N, p, p), 0.0);
    }
    ts_rng_free(rng);
}
END_TEST

/* The paper's 24 x 17 San Francisco grid of 500 x 467 m cells, for the
 * tests of its case. */
enum { SF_COLS = 24, SF_ROWS = 17, SF_N = SF_COLS * SF_ROWS };
static ts_vec2 sf_points[SF_N];

static void sf_setup(void)
{
    grid(SF_COLS, SF_ROWS, 500.0, 467.0, sf_points);
}

TS_CASE(sf_grid, 120, sf_setup, NULL);

/* The distance between the centroids of p and q: no plan moves the mass
 * less far. */
static double centroid_distance(const ts_vec2 *points, size_t n,
                                const double *p, const double *q)
{
    ts_vec2 mp = { 0, 0 }, mq = { 0, 0 };
    for (size_t i = 0; i < n; i++) {
        mp.x += p[i] * points[i].x;
        mp.y += p[i] * points[i].y;
        mq.x += q[i] * points[i].x;
        mq.y += q[i] * points[i].y;
    }
    return hypot(mp.x - mq.x, mp.y - mq.y);
}

/* On the paper's 24 x 17 San Francisco grid with dense random
 * distributions (the largest program the offline tool solves): the
 * optimum lies between the centroid distance and the cost of the
 * independent coupling p x q. */
TS_TEST_IN(sf_grid, test_paper_grid_bounds)
{
    const ts_vec2 *points = sf_points;
    double p[SF_N], q[SF_N];
    ts_rng *rng = ts_rng_new_seeded(2024);
    for (int trial = 0; trial < 3; trial++) {
        random_pmf(rng, p, SF_N, 0.0);
        random_pmf(rng, q, SF_N, 0.0);
        double independent = 0.0;
        for (size_t i = 0; i < SF_N; i++)
            for (size_t j = 0; j < SF_N; j++)
                independent += p[i] * q[j] *
                               hypot(points[i].x - points[j].x,
                                     points[i].y - points[j].y);
        ts_emd_result result;
        char err[160] = "";
        ck_assert_msg(ts_emd(points, SF_N, p, q, &result, err,
                             sizeof err) == 0,
                      "%s", err);
        double centroid = centroid_distance(points, SF_N, p, q);
        ck_assert_msg(result.distance >= centroid - 1e-6,
                      "EMD %.9g below the centroid bound %.9g",
                      result.distance, centroid);
        ck_assert_msg(result.distance <= independent,
                      "EMD %.9g above the independent coupling's %.9g",
                      result.distance, independent);
        ck_assert_uint_eq(result.sources + result.sinks <= SF_N, 1);
        ck_assert_uint_gt(result.simplex_iterations, 0);
    }
    ts_rng_free(rng);
}
END_TEST

/* Two estimates a cycle apart: every cell differs by ~1e-9 relative,
 * some cells hold 1e-11 next to others' 0.1. GLPK's absolute tolerance
 * once left its simplex cycling on such input for minutes; the answer
 * must come back, and lie between the centroid distance and the moved
 * mass times the grid's diameter. */
TS_TEST_IN(sf_grid, test_nearly_identical_distributions)
{
    enum { N = SF_N };
    double p[N], q[N];
    ts_rng *rng = ts_rng_new_seeded(77);
    random_pmf(rng, p, N, 0.0);
    for (size_t i = 0; i < N; i += 7)
        p[i] *= 1e-9;   /* dust next to heavy cells */
    double total = 0.0;
    for (size_t i = 0; i < N; i++)
        total += p[i];
    double moved = 0.0;
    for (size_t i = 0; i < N; i++) {
        p[i] /= total;
        q[i] = p[i] * (1.0 + 1e-9 * (ts_rng_uniform_open(rng) - 0.5));
    }
    double q_total = 0.0;
    for (size_t i = 0; i < N; i++)
        q_total += q[i];
    for (size_t i = 0; i < N; i++) {
        q[i] /= q_total;
        moved += fabs(p[i] - q[i]) / 2.0;
    }
    double diameter = hypot(23 * 500.0, 16 * 467.0);
    double got = emd(sf_points, N, p, q);
    ck_assert_msg(got <= moved * diameter * (1 + 1e-6),
                  "EMD %.6g above moved mass x diameter %.6g", got,
                  moved * diameter);
    ck_assert_msg(got >= centroid_distance(sf_points, N, p, q) * (1 - 1e-6),
                  "EMD %.6g below the centroid bound", got);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_bad_input)
{
    ts_vec2 points[2] = { { 0, 0 }, { 1, 0 } };
    double good[2] = { 0.5, 0.5 };
    double negative[2] = { 1.5, -0.5 };
    double unnormalised[2] = { 0.5, 0.6 };
    double not_a_number[2] = { NAN, 1.0 };
    ts_vec2 bad_points[2] = { { 0, 0 }, { INFINITY, 0 } };
    ts_emd_result result;
    char err[160];
    ck_assert_int_eq(ts_emd(points, 2, good, negative, &result, err,
                            sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "q[1]"));
    ck_assert_int_eq(ts_emd(points, 2, unnormalised, good, &result, err,
                            sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "sums to"));
    ck_assert_int_eq(ts_emd(points, 2, not_a_number, good, &result, err,
                            sizeof err), -1);
    ck_assert_int_eq(ts_emd(bad_points, 2, good, good, &result, err,
                            sizeof err), -1);
    ck_assert_int_eq(ts_emd(points, 0, good, good, &result, NULL, 0), -1);
}
END_TEST

int main(void)
{
    return ts_check_main("emd", 120, NULL, NULL);
}
