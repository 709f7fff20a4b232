/* The continuous-pair audit of a grid mechanism (privic, mi-channel): two
 * true points a metre apart in the grid's plane, on either side of a cell
 * edge or diagonally across a cell corner, each released `releases` times
 * through the mechanism's own release path with a seeded generator. The
 * reports are cells; their histograms go through the suite's black-box
 * check (dp_audit.h) against what the ledger books for one report:
 *
 *     eps_point * d + eps_floor      (eps_floor 0 when a report has none)
 *
 * read from the reports themselves (family-wise alpha 0.001, cells with
 * at least 1,000 reports from each point in ts_pair_audit_widest). The
 * largest lower bound, `lower_bound`, is the largest
 * |ln(n1 / n2)| - z sqrt(1/n1 + 1/n2) over the frequent cells: with
 * family-wise confidence 1 - alpha, the mechanism's true log-ratio on
 * some output is at least that, so lower_bound > booked proves the ledger
 * under-books. A grid channel is metric-private between cell centres
 * only: the two points lie in cells a whole cell apart, and nothing in
 * the channel knows they are a metre apart. */
#ifndef TRACESAN_TESTS_SUPPORT_GRID_PAIR_AUDIT_H
#define TRACESAN_TESTS_SUPPORT_GRID_PAIR_AUDIT_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/grid.h"
#include "mechanisms/cell_grid.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/rng.h"
#include "tests/support/dp_audit.h"

typedef enum ts_pair_across {
    TS_PAIR_EDGE,     /* cell (col, row) and (col + 1, row), east-west */
    TS_PAIR_CORNER,   /* cell (col, row) and (col + 1, row + 1) */
} ts_pair_across;

typedef struct ts_pair_audit {
    ts_dp_audit audit;       /* claimed: the booked log-ratio */
    uint32_t cell[2];        /* the true points' cells */
    double d_m;              /* their distance in the plane */
    double booked;           /* eps_point d + eps_floor, per report */
    double lower_bound;      /* see above; -INFINITY when no cell tested */
} ts_pair_audit;

/* The two true points, in degrees, and their distance in the plane after
 * the round trip through degrees. */
static inline double ts_pair_points(const ts_cell_grid *g, uint32_t col,
                                    uint32_t row, ts_pair_across across,
                                    double lat[2], double lon[2])
{
    double bx = g->projection.x_min + (col + 1) * g->cell_w;
    double by = across == TS_PAIR_CORNER
                    ? g->projection.y_min + (row + 1) * g->cell_h
                    : g->projection.y_min + (row + 0.5) * g->cell_h;
    double step = across == TS_PAIR_CORNER ? 0.5 / sqrt(2.0) : 0.5;
    ts_vec2 p[2] = {
        { bx - step, across == TS_PAIR_CORNER ? by - step : by },
        { bx + step, across == TS_PAIR_CORNER ? by + step : by },
    };
    for (int k = 0; k < 2; k++)
        ts_grid_unproject(&g->projection, p[k], &lat[k], &lon[k]);
    ts_vec2 a = ts_grid_project(&g->projection, lat[0], lon[0]);
    ts_vec2 b = ts_grid_project(&g->projection, lat[1], lon[1]);
    return hypot(a.x - b.x, a.y - b.y);
}

/* Outputs the audit can see: expected at least 2,000 times from each
 * point at 200,000 releases. */
#define TS_PAIR_FREQUENT 0.01

/* The cell (col + row * cols) of the pair of neighbours, across an edge
 * or a corner, whose rows the channel c (n x n) tells apart most on
 * outputs both reach with probability >= TS_PAIR_FREQUENT: where the
 * audit has the most to find. *exact gets that largest
 * |ln c(x, y) - ln c(x', y)|. */
static inline uint32_t ts_pair_widest(const ts_cell_grid *g, const double *c,
                                      ts_pair_across across, double *exact)
{
    size_t n = g->cells;
    uint32_t best = 0;
    *exact = -1.0;
    uint32_t up = across == TS_PAIR_CORNER;
    for (uint32_t r = 0; r + up < g->rows; r++)
        for (uint32_t col = 0; col + 1 < g->cols; col++) {
            size_t x = (size_t)r * g->cols + col;
            size_t xp = x + 1 + (up ? g->cols : 0);
            for (size_t y = 0; y < n; y++) {
                if (c[x * n + y] < TS_PAIR_FREQUENT ||
                    c[xp * n + y] < TS_PAIR_FREQUENT)
                    continue;
                double l = fabs(log(c[x * n + y]) - log(c[xp * n + y]));
                if (l > *exact) {
                    *exact = l;
                    best = (uint32_t)x;
                }
            }
        }
    return best;
}

static inline ts_pair_audit ts_pair_audit_run(const ts_mechanism_ops *ops,
                                              const void *profile,
                                              const ts_cell_grid *g,
                                              uint32_t col, uint32_t row,
                                              ts_pair_across across,
                                              long releases, uint64_t seed,
                                              double family_alpha,
                                              long min_count)
{
    ts_pair_audit r;
    memset(&r, 0, sizeof r);
    double lat[2], lon[2];
    r.d_m = ts_pair_points(g, col, row, across, lat, lon);
    ck_assert_double_lt(fabs(r.d_m - 1.0), 1e-6);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(ts_cell_grid_locate(g, lat[k], lon[k], 0,
                                             &r.cell[k]), 0);
    uint32_t want = across == TS_PAIR_CORNER ? r.cell[0] + g->cols + 1
                                             : r.cell[0] + 1;
    ck_assert_uint_eq(r.cell[0], row * g->cols + col);
    ck_assert_uint_eq(r.cell[1], want);

    long *counts = calloc(2 * g->cells, sizeof *counts);
    ck_assert_ptr_nonnull(counts);
    ts_rng *rng = ts_rng_new_seeded(seed);
    ck_assert_ptr_nonnull(rng);
    r.booked = NAN;
    ts_budget_view budget = { ops->window_budget(profile), 0.0 };
    /* No assertion inside the loop: Check reports every one to its parent
     * process through a pipe. */
    long failed = 0, off_grid = 0, rebooked = 0;
    for (int k = 0; k < 2; k++) {
        ts_point truth = { .lat = lat[k], .lon = lon[k], .ts_ms = 0,
                           .accuracy_m = NAN };
        for (long i = 0; i < releases; i++) {
            ts_report out;
            memset(&out, 0, sizeof out);
            if (ops->release(profile, NULL, &truth, &budget, rng, &out) !=
                TS_RELEASE_OK) {
                failed++;
                continue;
            }
            double booked = out.eps_point * r.d_m +
                            (out.has_eps_floor ? out.eps_floor : 0.0);
            if (isnan(r.booked))
                r.booked = booked;
            if (booked != r.booked)
                rebooked++;
            uint32_t y;
            if (ts_cell_grid_locate(g, out.lat, out.lon, 0, &y) != 0) {
                off_grid++;
                continue;
            }
            counts[(size_t)k * g->cells + y]++;
        }
    }
    ts_rng_free(rng);
    ck_assert_int_eq(failed, 0);
    ck_assert_int_eq(off_grid, 0);
    ck_assert_int_eq(rebooked, 0);
    r.audit = ts_dp_audit_begin(r.booked, g->cells, family_alpha, min_count);
    for (size_t y = 0; y < g->cells; y++)
        ts_dp_audit_cell(&r.audit, counts[y], counts[g->cells + y]);
    free(counts);
    r.lower_bound = r.audit.worst_excess + r.audit.claimed;
    fprintf(stderr, "pair audit (%s, cells %u|%u, %.3f m): %d cells tested, "
            "max |ln ratio| %.3f, lower bound %.3f, booked %.4f\n",
            across == TS_PAIR_CORNER ? "corner" : "edge", r.cell[0],
            r.cell[1], r.d_m, r.audit.cells_tested,
            r.audit.max_abs_log_ratio, r.lower_bound, r.booked);
    return r;
}

/* The audit at the pair ts_pair_widest picks from the channel c the
 * mechanism releases through, asserted: no violation (the lower bound
 * stays within the booking), and, so that it cannot pass vacuously, a
 * lower bound above `must_exceed` over at least two outputs. */
static inline ts_pair_audit ts_pair_audit_widest(const ts_mechanism_ops *ops,
                                                 const void *profile,
                                                 const ts_cell_grid *g,
                                                 const double *c,
                                                 ts_pair_across across,
                                                 long releases, uint64_t seed,
                                                 double must_exceed)
{
    double exact;
    uint32_t x = ts_pair_widest(g, c, across, &exact);
    ts_pair_audit r = ts_pair_audit_run(ops, profile, g, x % g->cols,
                                        x / g->cols, across, releases, seed,
                                        0.001, 1000);
    fprintf(stderr, "  the channel's exact |ln ratio| on that pair's "
            "frequent outputs: %.3f\n", exact);
    ck_assert_msg(r.audit.violations == 0,
                  "%d cells: the log-ratio's lower bound %.3f exceeds the "
                  "booked %.4f", r.audit.violations, r.lower_bound, r.booked);
    ck_assert_double_gt(r.lower_bound, must_exceed);
    ck_assert_int_ge(r.audit.cells_tested, 2);
    return r;
}

#endif
