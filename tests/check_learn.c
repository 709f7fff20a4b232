/* Unit tests for inference/learn.c on synthetic traces whose transitions
 * are known: a user walking a loop of 8 cells, one cell per tick; a walk
 * sampled off the tick boundaries (interpolation); gaps; a GPS glitch
 * beyond the maximum speed; points outside the region; personal models
 * with their fallback; input validation. Every learned model must pass
 * ts_markov_validate (rows sum to 1) and put no mass on unreachable cells.
 *
 * Grid: 6 x 6 cells of 100 m at the equator (0.0052 deg = 578 m).
 * Cells by (col, row): index = row * 6 + col.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/grid.h"
#include "inference/learn.h"
#include "inference/markov.h"
#include "inference/model_file.h"
#include "tests/support/check_run.h"

#define TICK 60.0
#define T0 1200000000.0 /* = 20 000 000 ticks: on a boundary */
#define CELL(col, row) ((uint32_t)((row) * 6 + (col)))

static ts_grid grid6(void)
{
    ts_grid g;
    char err[200];
    ck_assert_int_eq(ts_grid_init(&g, -0.0026, 10.0, 0.0026, 10.0052, 100.0,
                                  err, sizeof err),
                     0);
    ck_assert_uint_eq(g.cols, 6);
    ck_assert_uint_eq(g.rows, 6);
    return g;
}

static ts_learn_point at_cell(const ts_grid *g, uint32_t user, double ts,
                              uint32_t cell)
{
    ts_learn_point p = {.user = user, .ts_s = ts};
    ts_grid_cell_centre_latlon(g, cell, &p.lat, &p.lon);
    return p;
}

/* The loop (1,1) (2,1) (3,1) (3,2) (3,3) (2,3) (1,3) (1,2), then back. */
static const uint32_t loop_cells[8] = {CELL(1, 1), CELL(2, 1), CELL(3, 1),
                                       CELL(3, 2), CELL(3, 3), CELL(2, 3),
                                       CELL(1, 3), CELL(1, 2)};

/* Three laps and the return to the start: 25 fixes on the boundaries. */
static size_t loop_points(const ts_grid *g, uint32_t user, double t0,
                          ts_learn_point *out)
{
    for (int k = 0; k <= 24; k++)
        out[k] = at_cell(g, user, t0 + k * TICK, loop_cells[k % 8]);
    return 25;
}

static double entry(const ts_markov *m, uint32_t i, uint32_t j)
{
    for (uint64_t e = m->row_start[i]; e < m->row_start[i + 1]; e++)
        if (m->col[e] == j)
            return m->prob[e];
    return 0.0;
}

/* Rows sum to 1 (validate) and nothing goes beyond reach_m. */
static void assert_well_formed(const ts_grid *g, const ts_markov *m,
                               double reach_m)
{
    char err[200];
    ck_assert_msg(ts_markov_validate(m, err, sizeof err) == 0, "%s", err);
    for (uint32_t i = 0; i < m->cell_count; i++)
        for (uint64_t e = m->row_start[i]; e < m->row_start[i + 1]; e++)
            ck_assert_msg(ts_learn_reachable(g, reach_m, i, m->col[e]),
                          "mass from %u to unreachable %u", i, m->col[e]);
}

TS_TEST(test_reachable)
{
    ts_grid g = grid6();
    /* 100 m per tick: squares at most 100 m apart, i.e. offsets with
     * (max(0,|dc|-1))^2 + (max(0,|dr|-1))^2 <= 1: |dc|, |dr| <= 2 but not
     * both 2 (the corner gap is sqrt 2 cells). */
    ck_assert(ts_learn_reachable(&g, 100, CELL(2, 2), CELL(2, 2)));
    ck_assert(ts_learn_reachable(&g, 100, CELL(2, 2), CELL(3, 3)));
    ck_assert(ts_learn_reachable(&g, 100, CELL(2, 2), CELL(4, 3)));
    ck_assert(ts_learn_reachable(&g, 100, CELL(2, 2), CELL(0, 2)));
    ck_assert(!ts_learn_reachable(&g, 100, CELL(2, 2), CELL(4, 4)));
    ck_assert(!ts_learn_reachable(&g, 100, CELL(2, 2), CELL(5, 2)));
    /* Neighbours are reachable even at a crawl. */
    ck_assert(ts_learn_reachable(&g, 0.001, CELL(2, 2), CELL(3, 3)));
    ck_assert(!ts_learn_reachable(&g, 0.001, CELL(2, 2), CELL(4, 2)));
}
END_TEST

TS_TEST(test_loop_unsmoothed)
{
    ts_grid g = grid6();
    ts_learn_point pts[25];
    size_t n = loop_points(&g, 0, T0, pts);
    ts_learn_params p = {.tick_s = TICK, .max_speed_mps = 100.0 / TICK,
                         .max_gap_s = 120.0, .alpha = 0.0};
    ts_learned l;
    ts_learn_stats st;
    char err[200];
    ck_assert_msg(ts_learn_popular(&g, &p, pts, n, &l, &st, err, sizeof err) == 0,
                  "%s", err);
    assert_well_formed(&g, &l.markov, 100.0);
    ck_assert_uint_eq(st.points, 25);
    ck_assert_uint_eq(st.positions, 25);
    ck_assert_uint_eq(st.transitions, 24);
    ck_assert_uint_eq(st.unreachable, 0);
    ck_assert_uint_eq(st.users, 1);
    ck_assert_uint_eq(l.transitions, 24);
    /* Deterministic loop: each loop cell moves to the next with
     * probability 1; every other row is a pure self-loop. */
    for (int k = 0; k < 8; k++)
        ck_assert_double_eq(entry(&l.markov, loop_cells[k], loop_cells[(k + 1) % 8]),
                            1.0);
    ck_assert_double_eq(entry(&l.markov, CELL(5, 5), CELL(5, 5)), 1.0);
    ck_assert_uint_eq(l.markov.nnz, 36);
    /* Initial: 25 visits, the start 4 times (3 laps + return), the other
     * loop cells 3 times each. */
    ck_assert_double_eq_tol(l.markov.initial[CELL(1, 1)], 4.0 / 25, 1e-15);
    ck_assert_double_eq_tol(l.markov.initial[CELL(3, 3)], 3.0 / 25, 1e-15);
    ck_assert_double_eq(l.markov.initial[CELL(0, 0)], 0.0);
    ts_learned_free(&l);
}
END_TEST

TS_TEST(test_loop_smoothed)
{
    ts_grid g = grid6();
    ts_learn_point pts[25];
    size_t n = loop_points(&g, 0, T0, pts);
    ts_learn_params p = {.tick_s = TICK, .max_speed_mps = 100.0 / TICK,
                         .max_gap_s = 120.0, .alpha = 0.5};
    ts_learned l;
    char err[200];
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &l, NULL, err, sizeof err), 0);
    assert_well_formed(&g, &l.markov, 100.0);
    /* Row (1,1): reachable are dc in -1..2 and dr in -1..2 (clipped by the
     * grid's edge) minus the corner (+2, +2): 16 - 1 = 15 cells. Three
     * observed moves to (2,1):
     *   (3 + 0.5) / (3 + 0.5 * 15) = 3.5 / 10.5 = 1/3,
     *   any other reachable cell: 0.5 / 10.5 = 1/21. */
    uint32_t i = CELL(1, 1);
    ck_assert_uint_eq(l.markov.row_start[i + 1] - l.markov.row_start[i], 15);
    ck_assert_double_eq_tol(entry(&l.markov, i, CELL(2, 1)), 1.0 / 3, 1e-15);
    ck_assert_double_eq_tol(entry(&l.markov, i, CELL(1, 1)), 1.0 / 21, 1e-15);
    ck_assert_double_eq_tol(entry(&l.markov, i, CELL(0, 0)), 1.0 / 21, 1e-15);
    ck_assert_double_eq(entry(&l.markov, i, CELL(3, 3)), 0.0); /* corner */
    ck_assert_double_eq(entry(&l.markov, i, CELL(4, 1)), 0.0); /* 3 cols */
    /* Row (5,5) has no data: one pseudo-count of staying. Reachable: dc,
     * dr in -2..0 minus (-2,-2): 8 cells.
     *   stay: (1 + 0.5) / (1 + 0.5 * 8) = 1.5 / 5 = 0.3; others 0.1. */
    i = CELL(5, 5);
    ck_assert_uint_eq(l.markov.row_start[i + 1] - l.markov.row_start[i], 8);
    ck_assert_double_eq_tol(entry(&l.markov, i, i), 0.3, 1e-15);
    ck_assert_double_eq_tol(entry(&l.markov, i, CELL(4, 4)), 0.1, 1e-15);
    ck_assert_double_eq(entry(&l.markov, i, CELL(3, 3)), 0.0);
    /* Initial: (visits + 0.5) / (25 + 0.5 * 36) = (4.5, 3.5, 0.5) / 43. */
    ck_assert_double_eq_tol(l.markov.initial[CELL(1, 1)], 4.5 / 43, 1e-15);
    ck_assert_double_eq_tol(l.markov.initial[CELL(2, 1)], 3.5 / 43, 1e-15);
    ck_assert_double_eq_tol(l.markov.initial[CELL(5, 0)], 0.5 / 43, 1e-15);
    ts_learned_free(&l);
}
END_TEST

TS_TEST(test_interpolation_and_gaps)
{
    ts_grid g = grid6();
    /* Walk east along row 0 at 100 m per tick, with fixes every 40 s (off
     * the boundaries). At each boundary the interpolated position is a
     * cell centre: (0,0) (1,0) ... (5,0). */
    ts_learn_point pts[16];
    ts_vec2 start = ts_grid_cell_centre(&g, CELL(0, 0));
    size_t n = 0;
    for (int j = 0; j <= 7; j++) {
        double t = 40.0 * j;
        ts_vec2 xy = {start.x + 100.0 * t / TICK, start.y};
        ts_learn_point q = {.user = 0, .ts_s = T0 + t};
        ts_grid_unproject(&g, xy, &q.lat, &q.lon);
        pts[n++] = q;
    }
    ts_learn_params p = {.tick_s = TICK, .max_speed_mps = 100.0 / TICK,
                         .max_gap_s = 50.0, .alpha = 0.0};
    ts_learned l;
    ts_learn_stats st;
    char err[200];
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &l, &st, err, sizeof err), 0);
    /* Fixes at 0..280 s: boundaries 0, 60, ..., 240 -> 5 positions, 4
     * transitions (0,0)->(1,0)->...->(4,0). */
    ck_assert_uint_eq(st.positions, 5);
    ck_assert_uint_eq(st.transitions, 4);
    for (uint32_t c = 0; c < 4; c++)
        ck_assert_double_eq(entry(&l.markov, CELL(c, 0), CELL(c + 1, 0)), 1.0);
    ts_learned_free(&l);

    /* Remove the fixes at 120 s and 160 s: 80 -> 200 s is a gap above
     * 50 s, so the boundaries at 120 and 180 s have no position and the
     * transitions (1,0)->(2,0), (2,0)->(3,0), (3,0)->(4,0) are lost. */
    ts_learn_point gap[6] = {pts[0], pts[1], pts[2], pts[5], pts[6], pts[7]};
    ck_assert_int_eq(ts_learn_popular(&g, &p, gap, 6, &l, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.gaps, 1);
    ck_assert_uint_eq(st.positions, 3); /* 0, 60, 240 s */
    ck_assert_uint_eq(st.transitions, 1);
    ck_assert_double_eq(entry(&l.markov, CELL(0, 0), CELL(1, 0)), 1.0);
    ck_assert_double_eq(entry(&l.markov, CELL(1, 0), CELL(1, 0)), 1.0);
    ts_learned_free(&l);
}
END_TEST

TS_TEST(test_unreachable_and_outside)
{
    ts_grid g = grid6();
    ts_learn_point pts[8];
    size_t n = 0;
    pts[n++] = at_cell(&g, 0, T0, CELL(1, 1));
    pts[n++] = at_cell(&g, 0, T0 + 60, CELL(5, 5));  /* glitch: too fast */
    pts[n++] = at_cell(&g, 0, T0 + 120, CELL(5, 4));
    /* Outside the box, then back: no transition through the outside. */
    pts[n] = at_cell(&g, 0, T0 + 180, CELL(5, 4));
    pts[n++].lat += 0.01;
    pts[n++] = at_cell(&g, 0, T0 + 240, CELL(4, 4));
    pts[n++] = at_cell(&g, 0, T0 + 300, CELL(3, 4));
    ts_learn_params p = {.tick_s = TICK, .max_speed_mps = 100.0 / TICK,
                         .max_gap_s = 120.0, .alpha = 0.25};
    ts_learned l;
    ts_learn_stats st;
    char err[200];
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &l, &st, err, sizeof err), 0);
    assert_well_formed(&g, &l.markov, 100.0);
    ck_assert_uint_eq(st.unreachable, 1);
    ck_assert_uint_eq(st.outside, 1);
    /* Counted: (5,5)->(5,4), (4,4)->(3,4). */
    ck_assert_uint_eq(st.transitions, 2);
    ck_assert_double_eq(entry(&l.markov, CELL(1, 1), CELL(5, 5)), 0.0);
    /* (1,1) has no counted transition: self-loop row. */
    ck_assert_double_gt(entry(&l.markov, CELL(1, 1), CELL(1, 1)),
                        entry(&l.markov, CELL(1, 1), CELL(2, 1)));
    /* (5,4) -> (4,4) went through the outside: not counted, so row (5,4)
     * is a smoothed self-loop too. */
    ck_assert_double_gt(entry(&l.markov, CELL(5, 4), CELL(5, 4)),
                        entry(&l.markov, CELL(5, 4), CELL(4, 4)));
    ts_learned_free(&l);

    /* No position in the region at all, unsmoothed: an error. */
    for (size_t i = 0; i < n; i++)
        pts[i].lat += 1.0;
    p.alpha = 0.0;
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &l, &st, err, sizeof err), -1);
}
END_TEST

TS_TEST(test_personal)
{
    ts_grid g = grid6();
    ts_learn_point pts[40];
    size_t n = loop_points(&g, 0, T0, pts);
    /* User 1 walks row 5 east then back: (0,5) .. (5,5) .. (0,5). */
    for (int k = 0; k <= 10; k++) {
        int col = k <= 5 ? k : 10 - k;
        pts[n++] = at_cell(&g, 1, T0 + k * TICK, CELL(col, 5));
    }
    /* User 2 has a single fix: no transition, no personal model. */
    pts[n++] = at_cell(&g, 2, T0, CELL(0, 0));
    ts_learn_params p = {.tick_s = TICK, .max_speed_mps = 100.0 / TICK,
                         .max_gap_s = 120.0, .alpha = 0.5};
    ts_learned pop, per[3];
    ts_learn_stats st;
    char err[200];
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &pop, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.users, 3);
    ck_assert_uint_eq(st.transitions, 24 + 10);
    ck_assert_int_eq(ts_learn_personal(&g, &p, pts, n, 3, &pop.markov, per,
                                       err, sizeof err),
                     0);
    ck_assert_uint_eq(per[0].transitions, 24);
    ck_assert_uint_eq(per[1].transitions, 10);
    ck_assert_uint_eq(per[2].transitions, 0);
    ck_assert_uint_eq(per[2].markov.cell_count, 0);
    for (int u = 0; u < 2; u++)
        assert_well_formed(&g, &per[u].markov, 100.0);
    /* User 0's row (1,1) is its own (the same numbers as in the popular
     * model, since only user 0 passes there); user 0 has no data in row
     * (2,5): the row is empty and a product reads the popular row. */
    const ts_markov *m0 = &per[0].markov, *pm = &pop.markov;
    ck_assert_ptr_eq(m0->fallback, pm);
    uint32_t i = CELL(2, 5);
    ck_assert_uint_eq(m0->row_start[i + 1] - m0->row_start[i], 0);
    ts_markov_workspace ws;
    ck_assert_int_eq(ts_markov_workspace_init(&ws, 36), 0);
    const double one = 1.0;
    ck_assert_int_eq(ts_markov_step(m0, &i, &one, 1, &ws), 0);
    ck_assert_uint_eq(ws.touched_count, pm->row_start[i + 1] - pm->row_start[i]);
    for (uint64_t e = pm->row_start[i]; e < pm->row_start[i + 1]; e++)
        ck_assert_double_eq(ws.acc[pm->col[e]], pm->prob[e]);
    ts_markov_workspace_clear(&ws);
    ts_markov_workspace_free(&ws);
    ck_assert_double_eq_tol(entry(m0, CELL(1, 1), CELL(2, 1)), 1.0 / 3, 1e-15);
    /* Only the 8 loop rows are stored. */
    uint32_t stored = 0;
    for (uint32_t c = 0; c < 36; c++)
        stored += m0->row_start[c + 1] > m0->row_start[c];
    ck_assert_uint_eq(stored, 8);
    /* User 1's row (2,5): 1 move east, 1 west, 13 reachable cells (dc
     * -2..2 times dr -2..0 is 15, minus the corners (-2,-2) and (2,-2)):
     *   (1 + 0.5) / (2 + 0.5 * 13) = 1.5 / 8.5 for each move. */
    const ts_markov *m1 = &per[1].markov;
    ck_assert_uint_eq(m1->row_start[i + 1] - m1->row_start[i], 13);
    ck_assert_double_eq_tol(entry(m1, i, CELL(3, 5)), 1.5 / 8.5, 1e-15);
    /* Personal initial: (visits + alpha * cells * popular initial) /
     * (V + alpha * cells); user 1 visits (2,5) twice in 11 positions. */
    double expect = (2.0 + 0.5 * 36 * pm->initial[i]) / (11.0 + 0.5 * 36);
    ck_assert_double_eq_tol(m1->initial[i], expect, 1e-15);

    /* Into a model file and back, with the fallback at lookup. */
    ts_model_source src = {.markov = pm, .transitions = pop.transitions};
    ts_model_source users[2] = {
        {.user = "walker", .user_len = 6, .markov = m0, .transitions = 24},
        {.user = "east-west", .user_len = 9, .markov = m1, .transitions = 10}};
    char *mem = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&mem, &len);
    ck_assert_int_eq(ts_model_write(out, &g, p.max_speed_mps, &src, users, 2,
                                    NULL, err, sizeof err),
                     0);
    fclose(out);
    void *buf = aligned_alloc(8, (len + 7) / 8 * 8);
    memcpy(buf, mem, len);
    free(mem);
    ts_model *model = NULL;
    ck_assert_msg(ts_model_open_buffer(buf, len, &model, err, sizeof err) == 0,
                  "%s", err);
    const ts_markov *w = ts_model_for_user(model, "walker", 6);
    ck_assert_ptr_ne(w, &model->popular);
    ck_assert_double_eq_tol(entry(w, CELL(1, 1), CELL(2, 1)), 1.0 / 3, 1e-15);
    ck_assert_ptr_eq(ts_model_for_user(model, "nobody", 6), &model->popular);
    ts_model_close(model);
    free(buf);
    for (int u = 0; u < 3; u++)
        ts_learned_free(&per[u]);
    ts_learned_free(&pop);
}
END_TEST

TS_TEST(test_input_validation)
{
    ts_grid g = grid6();
    ts_learn_point pts[25];
    size_t n = loop_points(&g, 0, T0, pts);
    ts_learn_params p = {.tick_s = TICK, .max_speed_mps = 100.0 / TICK,
                         .max_gap_s = 120.0, .alpha = 0.5};
    ts_learned l;
    char err[200];
    /* Time going backwards within a user. */
    ts_learn_point t = pts[5];
    pts[5] = pts[6];
    pts[6] = t;
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &l, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "sorted by time"));
    pts[6] = pts[5];
    pts[5] = t;
    /* Users out of order. */
    pts[3].user = 1;
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &l, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "sorted by user"));
    pts[3].user = 0;
    /* Non-finite fixes are skipped, not fatal. */
    pts[4].lat = NAN;
    ts_learn_stats st;
    ck_assert_int_eq(ts_learn_popular(&g, &p, pts, n, &l, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.skipped, 1);
    /* The boundary of the NaN fix is interpolated from its neighbours. */
    ck_assert_uint_eq(st.positions, 25);
    ts_learned_free(&l);
    /* Parameters. */
    ts_learn_params bad = p;
    bad.tick_s = 0;
    ck_assert_int_eq(ts_learn_popular(&g, &bad, pts, n, &l, NULL, err, sizeof err), -1);
    bad = p;
    bad.alpha = -1;
    ck_assert_int_eq(ts_learn_popular(&g, &bad, pts, n, &l, NULL, err, sizeof err), -1);
    bad = p;
    bad.max_speed_mps = NAN;
    ck_assert_int_eq(ts_learn_popular(&g, &bad, pts, n, &l, NULL, err, sizeof err), -1);
    /* Iterations bounded up front (issue 25): a tick finer than the
     * millisecond, and a gap that would resample into billions of
     * positions, are refused before any resampling. */
    bad = p;
    bad.tick_s = 1e-6;
    ck_assert_int_eq(ts_learn_params_check(&bad, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "at least"));
    bad = p;
    bad.max_gap_s = TICK * 2e6;
    ck_assert_int_eq(ts_learn_params_check(&bad, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "positions"));
    bad.max_gap_s = TICK * 1e6;
    ck_assert_int_eq(ts_learn_params_check(&bad, err, sizeof err), 0);
    /* A fix at the end of time (its tick index does not fit 64 bits) is
     * skipped like a NaN, not converted. */
    ts_learn_point late[26];
    memcpy(late, pts, n * sizeof *pts);
    late[n] = pts[n - 1];
    late[n].ts_s = 1e300;
    ck_assert_int_eq(ts_learn_popular(&g, &p, late, n + 1, &l, &st, err,
                                      sizeof err), 0);
    ck_assert_uint_eq(st.skipped, 2);
    ck_assert_uint_eq(st.gaps, 0);
    ts_learned_free(&l);
    /* Too large a model: a 1e5 km/h maximum speed on a big grid. */
    ts_grid big;
    ck_assert_int_eq(ts_grid_init(&big, 39.75, 116.15, 40.10, 116.60, 100.0,
                                  err, sizeof err),
                     0);
    bad = p;
    bad.max_speed_mps = 3e4;
    ck_assert_int_eq(ts_learn_popular(&big, &bad, pts, n, &l, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "maximum speed"));
}
END_TEST

/* Displacement back-off on the loop: 24 transitions, 6 each one cell
 * east, north, west and south. With 100 m of reach there are 21 offsets
 * (|dc|, |dr| <= 2, not both 2), so the kernel is (6 + a) / (24 + 21 a)
 * on those four and a / (24 + 21 a) elsewhere. An unvisited cell whose
 * offsets all lie on the grid gets the kernel; a loop cell gets its counts
 * plus b pseudo-counts spread by the kernel clipped to the grid. The fit
 * of the model on its own traces counts every transition as possible, a
 * jump beyond the reach as impossible. */
TS_TEST(test_displacement_kernel)
{
    ts_grid g = grid6();
    ts_learn_point pts[27];
    size_t n = loop_points(&g, 0, T0, pts);
    const double a = 0.5, b = 2.0, total = 24.0 + 21.0 * a;
    ts_learn_params p = {.tick_s = TICK, .max_speed_mps = 100.0 / TICK,
                         .max_gap_s = 120.0, .alpha = a,
                         .smoothing = TS_LEARN_SMOOTH_DISPLACEMENT,
                         .backoff = b};
    ts_learned l;
    char err[200];
    ck_assert_msg(ts_learn_popular(&g, &p, pts, n, &l, NULL, err,
                                   sizeof err) == 0, "%s", err);
    assert_well_formed(&g, &l.markov, 100.0);
    const ts_markov *m = &l.markov;
    ck_assert_double_eq_tol(entry(m, CELL(2, 2), CELL(3, 2)),
                            (6.0 + a) / total, 1e-12);
    ck_assert_double_eq_tol(entry(m, CELL(2, 2), CELL(2, 2)), a / total,
                            1e-12);
    ck_assert_double_eq_tol(entry(m, CELL(2, 2), CELL(4, 3)), a / total,
                            1e-12);
    /* From (1, 1): 15 offsets on the grid, the four moves among them. */
    double clipped = (4.0 * (6.0 + a) + 11.0 * a) / total;
    ck_assert_double_eq_tol(entry(m, CELL(1, 1), CELL(2, 1)),
                            (3.0 + b * (6.0 + a) / total / clipped) / (3.0 + b),
                            1e-12);
    ck_assert_double_eq_tol(entry(m, CELL(1, 1), CELL(0, 0)),
                            b * a / total / clipped / (3.0 + b), 1e-12);

    ts_learn_fit fit;
    ck_assert_int_eq(ts_learn_fit_model(&g, &p, m, pts, n, &fit, err,
                                        sizeof err), 0);
    ck_assert_uint_eq(fit.transitions, 24);
    ck_assert_uint_eq(fit.impossible, 0);
    ck_assert_uint_eq(fit.visits, 25);
    double want = 0.0;
    for (int k = 0; k < 24; k++)
        want += log(entry(m, loop_cells[k % 8], loop_cells[(k + 1) % 8]));
    ck_assert_double_eq_tol(fit.log_lik, want, 1e-9);
    ck_assert(isfinite(fit.initial_log_lik) && fit.initial_log_lik < 0.0);

    ts_learn_point jump[2] = {at_cell(&g, 0, T0, CELL(0, 0)),
                              at_cell(&g, 0, T0 + TICK, CELL(5, 5))};
    ck_assert_int_eq(ts_learn_fit_model(&g, &p, m, jump, 2, &fit, err,
                                        sizeof err), 0);
    ck_assert_uint_eq(fit.transitions, 1);
    ck_assert_uint_eq(fit.impossible, 1);
    ck_assert_double_eq(fit.log_lik, 0.0);

    ts_learned_free(&l);
    ts_learn_params bad = p;
    bad.backoff = -1.0;
    ck_assert_int_eq(ts_learn_popular(&g, &bad, pts, n, &l, NULL, err,
                                      sizeof err), -1);
}
END_TEST

int main(void)
{
    return ts_check_main("learn", 60, NULL, NULL);
}
