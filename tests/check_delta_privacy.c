/* Unit tests for mechanisms/delta_privacy.c: the `pim` and `lm-delta`
 * mechanisms of the registry (Algorithm 1 of Xiao & Xiong per release).
 *
 * A tiny model is written with ts_model_write into memory and opened with
 * ts_model_open_buffer: a 3 x 3 grid of 100 m cells at the equator
 *     6 7 8
 *     3 4 5
 *     0 1 2
 * where every cell stays with probability 1/2 and moves to the next index
 * (8 wraps to 0) with probability 1/2. Two initial distributions: a
 * concentrated one (cell 0: 3/4, cell 1: 1/4), whose delta-set for
 * delta = 0.01 is {0, 1} (3/4 < 0.99, 3/4 + 1/4 = 1), and the uniform one,
 * whose delta-set is all 9 cells (8/9 < 0.99).
 *
 * Personal models: "alice" gets a model that differs from the popular one
 * in every respect (stays put with probability 1, starts concentrated on
 * cells 0 and 1), so her prior, delta-set and posterior differ from
 * everyone else's.
 */
#include <check.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inference/belief.h"
#include "inference/grid.h"
#include "inference/markov.h"
#include "inference/model_file.h"
#include "mechanisms/delta_privacy.h"
#include "geometry/geo.h"
#include "mechanisms/lm_delta.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/pim.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_params.h"

#define CELL_M 100.0
#define EARTH_R 6371008.8
#define DEG (180.0 / 3.14159265358979323846)

/* ------------------------------------------------------------ the model */

typedef struct test_model {
    void *buffer;
    ts_model *model;
} test_model;

static const uint64_t ring_rows[10] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18};
static const uint32_t ring_cols[18] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 5,
                                       5, 6, 6, 7, 7, 8, 0, 8};
static const double ring_probs[18] = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
                                      0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
                                      0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
static const double concentrated_initial[9] = {0.75, 0.25, 0, 0, 0,
                                               0,    0,    0, 0};
static const double uniform_initial[9] = {1.0 / 9, 1.0 / 9, 1.0 / 9,
                                          1.0 / 9, 1.0 / 9, 1.0 / 9,
                                          1.0 / 9, 1.0 / 9, 1.0 / 9};

/* 299 m boxes: ceil(2.99) = 3 cells per side whatever the rounding. */
static void make_grid(ts_grid *grid)
{
    char err[256];
    double side_deg = 299.0 / EARTH_R * DEG;
    ck_assert_int_eq(ts_grid_init(grid, 0.0, 0.0, side_deg, side_deg, CELL_M,
                                  err, sizeof err), 0);
    ck_assert_uint_eq(grid->cols, 3);
    ck_assert_uint_eq(grid->rows, 3);
}

static const uint64_t still_rows[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint32_t still_cols[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
static const double still_probs[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};

static char *model_bytes(const double *initial, int with_alice,
                         size_t *len)
{
    ts_grid grid;
    make_grid(&grid);
    ts_markov markov = {
        .cell_count = 9, .tick_s = 60.0, .nnz = 18,
        .row_start = ring_rows, .col = ring_cols, .prob = ring_probs,
        .initial = initial, .fallback = NULL,
    };
    ts_markov alice = {
        .cell_count = 9, .tick_s = 60.0, .nnz = 9,
        .row_start = still_rows, .col = still_cols, .prob = still_probs,
        .initial = concentrated_initial, .fallback = NULL,
    };
    ts_model_source popular = { .markov = &markov, .transitions = 1 };
    ts_model_source personal = { .user = "alice", .user_len = 5,
                                 .markov = &alice, .transitions = 1 };
    char *data = NULL;
    FILE *out = open_memstream(&data, len);
    ck_assert_ptr_nonnull(out);
    char err[256] = "";
    ck_assert_msg(ts_model_write(out, &grid, 10.0, &popular, &personal,
                                 with_alice ? 1 : 0, NULL, err,
                                 sizeof err) == 0, "%s", err);
    fclose(out);
    return data;
}

static test_model make_model_with(const double *initial, int with_alice)
{
    size_t len = 0;
    char *data = model_bytes(initial, with_alice, &len);
    test_model t = { .buffer = malloc(len), .model = NULL };
    ck_assert_ptr_nonnull(t.buffer);
    memcpy(t.buffer, data, len);
    free(data);
    char err[256] = "";
    ck_assert_msg(ts_model_open_buffer(t.buffer, len, &t.model, err,
                                       sizeof err) == 0, "%s", err);
    return t;
}

static test_model make_model(const double *initial)
{
    return make_model_with(initial, 0);
}

static void free_model(test_model *t)
{
    ts_model_close(t->model);
    free(t->buffer);
}

/* ----------------------------------------------------------- parameters */

typedef struct table {
    const ts_model *model;
    double epsilon, delta, prune;
    long long points, capacity;
    const char *outside;
    long long personal;          /* -1: key absent */
    int personal_bool;           /* -1: no boolean; else the key as one */
    const char *personal_text;   /* the key as a string, when not NULL */
    const char *likelihood;      /* NULL: key absent */
    const char *delta_set;       /* NULL: key absent */
    long long break_ticks;       /* -1: key absent */
} table;

/* The typed table as the entries a configuration file would hold; rebuilt
 * on each call so that a test can change the table between profiles. */
static ts_params *params_of(const table *t)
{
    static param_table entries;
    static ts_params params;
    entries.n = 0;
    if (t->model != NULL)
        param_model(&entries, "model", t->model);
    param_double(&entries, "epsilon", t->epsilon);
    param_double(&entries, "delta", t->delta);
    param_double(&entries, "prune_threshold", t->prune);
    param_int(&entries, "points_per_window", t->points);
    param_int(&entries, "belief_capacity", t->capacity);
    if (t->outside != NULL)
        param_string(&entries, "outside_region", t->outside);
    if (t->personal >= 0)
        param_int(&entries, "personal_models", t->personal);
    if (t->personal_bool >= 0)
        param_bool(&entries, "personal_models", t->personal_bool);
    if (t->personal_text != NULL)
        param_string(&entries, "personal_models", t->personal_text);
    if (t->likelihood != NULL)
        param_string(&entries, "likelihood", t->likelihood);
    if (t->break_ticks >= 0)
        param_int(&entries, "break_ticks", t->break_ticks);
    if (t->delta_set != NULL)
        param_string(&entries, "delta_set", t->delta_set);
    params = table_params(&entries);
    return &params;
}

static table default_table(const ts_model *model)
{
    table t = { .model = model, .epsilon = 1.0, .delta = 0.01,
                .prune = 0.0, .points = 5, .capacity = 64,
                .outside = NULL, .personal = -1, .personal_bool = -1,
                .personal_text = NULL, .likelihood = NULL,
                .break_ticks = -1, .delta_set = NULL };
    return t;
}

static void *new_profile(const ts_mechanism_ops *ops, table *t)
{
    void *profile = NULL;
    char err[256] = "";
    ck_assert_msg(ops->profile_new(params_of(t), &profile, err, sizeof err) == 0,
                  "%s", err);
    return profile;
}

/* Centre of a cell in degrees. */
static ts_point cell_point(const ts_model *model, uint32_t cell,
                           int64_t ts_ms)
{
    ts_point p = { .ts_ms = ts_ms, .accuracy_m = NAN };
    ts_grid_cell_centre_latlon(&model->grid, cell, &p.lat, &p.lon);
    return p;
}

/* ---------------------------------------------------------------- tests */

TS_TEST(registered_and_validated)
{
    const ts_mechanism_ops *pim = ts_mechanism_find("pim");
    const ts_mechanism_ops *lm = ts_mechanism_find("lm-delta");
    ck_assert_ptr_eq(pim, &ts_pim_ops);
    ck_assert_ptr_eq(lm, &ts_lm_delta_ops);

    test_model m = make_model(uniform_initial);
    char err[256];
    void *profile = NULL;

    /* No model getter, no model, bad delta, unknown outside policy. */
    table t = default_table(m.model);
    ts_params no_getter = *params_of(&t);
    no_getter.get_model = NULL;
    err[0] = '\0';
    ck_assert_int_eq(pim->profile_new(&no_getter, &profile, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "model"));

    t.model = NULL;
    err[0] = '\0';
    ck_assert_int_eq(lm->profile_new(params_of(&t), &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "model"));

    t = default_table(m.model);
    t.delta = 1.0;
    err[0] = '\0';
    ck_assert_int_eq(pim->profile_new(params_of(&t), &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "delta"));

    t = default_table(m.model);
    t.outside = "clamp";
    err[0] = '\0';
    ck_assert_int_eq(pim->profile_new(params_of(&t), &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "outside_region"));

    /* break_ticks is capped with max_ticks (a release's products). */
    t = default_table(m.model);
    t.break_ticks = TS_BELIEF_MAX_TICKS + 1;
    err[0] = '\0';
    ck_assert_int_eq(pim->profile_new(params_of(&t), &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "break_ticks"));

    /* A capacity that cannot hold 1 - delta of the initial distribution
     * (uniform over 9 cells: 4 cells hold 4/9) is refused at load, with
     * the capacity that would do; 9 cells fit. */
    t = default_table(m.model);
    t.capacity = 4;
    err[0] = '\0';
    ck_assert_int_eq(pim->profile_new(params_of(&t), &profile, err, sizeof err), -1);
    ck_assert_msg(strncmp(err, "belief_capacity: ", 17) == 0 &&
                      strstr(err, "0.4444") != NULL &&
                      strstr(err, "at least 9 cells") != NULL,
                  "%s", err);
    t.capacity = 9;
    profile = new_profile(pim, &t);
    pim->profile_free(profile);

    t = default_table(m.model);
    t.outside = "reject";
    t.epsilon = 0.5;
    t.points = 7;
    profile = new_profile(pim, &t);
    ck_assert_double_eq_tol(pim->window_budget(profile), 3.5, 1e-12);
    ck_assert_uint_eq(pim->user_state_size(profile),
                      16 + ts_belief_bytes(64));
    pim->profile_free(profile);
    free_model(&m);
}
END_TEST

/* Spend accounting: every release costs epsilon; a window of 5 points
 * allows exactly 5 releases; the sixth is refused without state change. */
static void check_spend(const ts_mechanism_ops *ops)
{
    test_model m = make_model(uniform_initial);
    table t = default_table(m.model);
    t.epsilon = 0.7;
    void *profile = new_profile(ops, &t);
    size_t size = ops->user_state_size(profile);
    unsigned char *state = calloc(1, size);
    unsigned char *before = malloc(size);
    ts_rng *rng = ts_rng_new_seeded(11);
    ts_budget_view budget = { .total = ops->window_budget(profile),
                              .spent = 0.0 };
    for (int i = 0; i < 5; i++) {
        ts_point p = cell_point(m.model, 4, 1000000 + i * 60000);
        ts_report out;
        ck_assert_int_eq(ops->release(profile, state, &p, &budget, rng,
                                      &out), TS_RELEASE_OK);
        ck_assert_double_eq(out.eps_point, 0.7);
        ck_assert_int_eq(out.has_delta_set_size, 1);
        ck_assert_int_eq(out.has_predicted, 0);
        budget.spent += out.eps_point;
    }
    memcpy(before, state, size);
    ts_point p = cell_point(m.model, 4, 2000000);
    ts_report out;
    ck_assert_int_eq(ops->release(profile, state, &p, &budget, rng, &out),
                     TS_RELEASE_EXHAUSTED);
    ck_assert_int_eq(memcmp(before, state, size), 0);
    ts_rng_free(rng);
    free(before);
    free(state);
    ops->profile_free(profile);
    free_model(&m);
}

TS_TEST(spend_accounting)
{
    check_spend(&ts_pim_ops);
    check_spend(&ts_lm_delta_ops);
}
END_TEST

/* First release: the prior is the initial distribution, so |Delta X| is 9
 * for the uniform model and 2 for the concentrated one. */
TS_TEST(delta_set_size_published)
{
    const double *initials[2] = { uniform_initial, concentrated_initial };
    const unsigned expected[2] = { 9, 2 };
    for (int k = 0; k < 2; k++) {
        test_model m = make_model(initials[k]);
        table t = default_table(m.model);
        const ts_mechanism_ops *ops[2] = { &ts_pim_ops, &ts_lm_delta_ops };
        for (int j = 0; j < 2; j++) {
            void *profile = new_profile(ops[j], &t);
            unsigned char *state = calloc(1, ops[j]->user_state_size(profile));
            ts_rng *rng = ts_rng_new_seeded(3);
            ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
            ts_point p = cell_point(m.model, 0, 600000);
            ts_report out;
            ck_assert_int_eq(ops[j]->release(profile, state, &p, &budget, rng,
                                             &out), TS_RELEASE_OK);
            ck_assert_uint_eq(out.delta_set_size, expected[k]);
            ck_assert(isfinite(out.lat) && isfinite(out.lon));
            /* Published coordinates are on the 1e-7 degree grid. */
            double lat = out.lat, lon = out.lon;
            ts_geo_snap(&lat, &lon);
            ck_assert_double_eq(lat, out.lat);
            ck_assert_double_eq(lon, out.lon);
            ts_rng_free(rng);
            free(state);
            ops[j]->profile_free(profile);
        }
        free_model(&m);
    }
}
END_TEST

/* The state is what an observer computes from the model and the published
 * points: replay the releases with the belief functions, emission at the
 * SNAPPED published point projected back to the plane, and compare the
 * stored belief byte for byte. Releases at irregular gaps (0, 1, 3 ticks)
 * exercise the prior M^k. */
/* Where the mechanism releases a user in each belief cell from, computed
 * apart from delta_privacy.c: the cell itself inside the set, its
 * surrogate (ts_delta_set_surrogate of the cell's centre) outside. */
static int release_positions_of(const ts_grid *grid, const ts_belief *b,
                                const uint32_t *cells, size_t n,
                                ts_vec2 *where)
{
    int outside = 0;
    for (uint32_t i = 0; i < b->count; i++) {
        uint32_t cell = b->entry[i].cell, surrogate;
        if (!ts_delta_set_contains(cells, n, cell)) {
            ck_assert_int_eq(ts_delta_set_surrogate(grid, cells, n,
                                                    ts_grid_cell_centre(grid, cell),
                                                    &surrogate), 0);
            cell = surrogate;
            outside = 1;
        }
        where[i] = ts_grid_cell_centre(grid, cell);
    }
    return outside;
}

/* The stored state is the belief an observer computes from the published
 * points alone: the paper's rules (paper = 1: M^k across every gap, the
 * emission at each cell's centre) or the defaults with break_ticks = 2 (a
 * gap of more than 2 ticks is a break, moved 2 ticks with resume weight 1;
 * the emission of a cell outside the set at its surrogate). */
static void check_public_state(const ts_mechanism_ops *ops, int use_pim,
                               int paper)
{
    test_model m = make_model(concentrated_initial);
    const ts_model *model = m.model;
    table t = default_table(model);
    if (paper) {
        t.likelihood = "paper";
        t.break_ticks = 0;
    } else {
        t.delta = 0.3; /* leaves belief cells outside the set */
        t.break_ticks = 2; /* so that the 3- and 10-tick gaps are breaks */
    }
    void *profile = new_profile(ops, &t);
    size_t size = ops->user_state_size(profile);
    unsigned char *state = calloc(1, size);
    ts_rng *rng = ts_rng_new_seeded(42);
    ts_budget_view budget = { .total = 5.0, .spent = 0.0 };

    ts_belief *replay = malloc(ts_belief_bytes(64));
    ck_assert_int_eq(ts_belief_init(replay, 64), 0);
    ts_belief_workspace *ws = ts_belief_workspace_new(9, 64);
    ts_belief_params bp = { .prune_threshold = 0.0, .max_ticks = 1000 };
    uint32_t cells[64];
    ts_vec2 centres[64], where[64];
    ts_pim_context pim;
    ts_pim_context_init(&pim);

    /* 0, 0, 1 and 3 ticks apart, then 10: breaks for the defaults. */
    const int64_t times[5] = { 600000, 610000, 660000, 840000, 1440000 };
    const uint32_t truth_cells[5] = { 0, 1, 1, 3, 8 };
    int64_t last = 0;
    int changed = 0, outside_seen = 0;
    for (int i = 0; i < 5; i++) {
        ts_point p = cell_point(model, truth_cells[i], times[i]);
        ts_report out;
        ck_assert_int_eq(ops->release(profile, state, &p, &budget, rng, &out),
                         TS_RELEASE_OK);

        uint64_t ticks = i == 0 ? 0
            : (uint64_t)ts_markov_ticks_between(60.0, last, times[i]);
        if (!paper && ticks > 2)
            ticks = 2;
        ck_assert_int_ne(ts_belief_predict(replay, &model->popular, ticks,
                                           &bp, ws, NULL), TS_BELIEF_ERROR);
        size_t n = ts_belief_delta_set(replay, t.delta, 1.0, cells, ws);
        ck_assert_uint_eq(n, out.delta_set_size);
        ts_grid_cell_centres(&model->grid, cells, n, centres);
        ts_vec2 z = ts_grid_project(&model->grid, out.lat, out.lon);
        const ts_vec2 *at = NULL;
        if (!paper) {
            outside_seen |= release_positions_of(&model->grid, replay, cells,
                                                 n, where);
            at = where;
        }
        if (use_pim) {
            ck_assert_int_eq(ts_pim_context_build(&pim, centres, n, CELL_M), 0);
            ts_pim_emission e = ts_pim_emission_make(&pim, 1.0);
            ck_assert_int_ne(ts_belief_posterior_at(replay, &model->grid, at,
                                                    z, ts_pim_log_emission,
                                                    &e, &bp, ws, NULL),
                             TS_BELIEF_ERROR);
        } else {
            double dx, dy;
            ck_assert_int_eq(ts_lm_delta_sensitivity(centres, n, CELL_M, &dx,
                                                  &dy), 0);
            ts_lm_emission e = { .scale = ts_lm_delta_scale(dx, dy, 1.0) };
            ck_assert_int_ne(ts_belief_posterior_at(replay, &model->grid, at,
                                                    z, ts_lm_log_emission,
                                                    &e, &bp, ws, NULL),
                             TS_BELIEF_ERROR);
        }
        const ts_belief *stored = (const ts_belief *)(state + 16);
        ck_assert_uint_eq(stored->count, replay->count);
        ck_assert_int_eq(memcmp(stored, replay, sizeof(ts_belief) +
                                replay->count * sizeof(ts_belief_entry)), 0);
        /* Nothing but the live entries is stored. */
        const unsigned char *tail = (const unsigned char *)
            &stored->entry[stored->count];
        for (size_t b = 0; b < (64 - stored->count) * sizeof(ts_belief_entry);
             b++)
            ck_assert_uint_eq(tail[b], 0);
        /* The belief evolves: it is not the initial distribution forever. */
        if (fabs(ts_belief_prob(stored, 0) - 0.75) > 1e-6)
            changed = 1;
        last = times[i];
        budget.spent += out.eps_point;
    }
    ck_assert(changed);
    /* The defaults' case met a belief cell outside the set. */
    ck_assert(paper || outside_seen);
    ts_pim_context_free(&pim);
    ts_belief_workspace_free(ws);
    free(replay);
    ts_rng_free(rng);
    free(state);
    ops->profile_free(profile);
    free_model(&m);
}

TS_TEST(state_is_public)
{
    check_public_state(&ts_pim_ops, 1, 1);
    check_public_state(&ts_lm_delta_ops, 0, 1);
    check_public_state(&ts_pim_ops, 1, 0);
    check_public_state(&ts_lm_delta_ops, 0, 0);
}
END_TEST

/* Drift: the delta-set of the concentrated prior is {0, 1}; a user truly
 * in cell 8 is released around the surrogate, cell 1 (nearest centre:
 * 223.6 m against 282.8 m for cell 0), and never around the truth. Both
 * noises are centrally symmetric, so the mean of N fresh releases
 * estimates the released centre with standard error s / sqrt(N) per axis;
 * the test allows 5 standard errors (a false failure rate below 1e-6). */
static void check_drift(const ts_mechanism_ops *ops)
{
    test_model m = make_model(concentrated_initial);
    const ts_model *model = m.model;
    table t = default_table(model);
    void *profile = new_profile(ops, &t);
    size_t size = ops->user_state_size(profile);
    unsigned char *state = malloc(size);
    ts_rng *rng = ts_rng_new_seeded(7);
    enum { N = 4000 };
    double sum[2] = {0, 0}, sum2[2] = {0, 0};
    for (int i = 0; i < N; i++) {
        memset(state, 0, size);
        ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
        ts_point p = cell_point(model, 8, 600000);
        ts_report out;
        ck_assert_int_eq(ops->release(profile, state, &p, &budget, rng, &out),
                         TS_RELEASE_OK);
        ck_assert_uint_eq(out.delta_set_size, 2);
        ts_vec2 z = ts_grid_project(&model->grid, out.lat, out.lon);
        sum[0] += z.x;
        sum[1] += z.y;
        sum2[0] += z.x * z.x;
        sum2[1] += z.y * z.y;
    }
    ts_vec2 surrogate = ts_grid_cell_centre(&model->grid, 1);
    ts_vec2 truth = ts_grid_cell_centre(&model->grid, 8);
    double target[2] = { surrogate.x, surrogate.y };
    double away[2] = { truth.x, truth.y };
    for (int a = 0; a < 2; a++) {
        double mean = sum[a] / N;
        double sd = sqrt(sum2[a] / N - mean * mean);
        double se = sd / sqrt((double)N);
        ck_assert_msg(fabs(mean - target[a]) < 5 * se,
                      "axis %d: mean %.2f, surrogate %.2f, se %.2f", a, mean,
                      target[a], se);
        if (a == 1)   /* truth is 200 m north of the surrogate */
            ck_assert(fabs(mean - away[a]) > 10 * se);
    }
    ts_rng_free(rng);
    free(state);
    ops->profile_free(profile);
    free_model(&m);
}

TS_TEST(drift_uses_surrogate)
{
    check_drift(&ts_pim_ops);
    check_drift(&ts_lm_delta_ops);
}
END_TEST

/* The work a release does must not depend on where the true point lies
 * (issue 10, item 4). With a uniform prior on the ring and delta = 0.12 the
 * set is cells 0..7 in rank order (ties by index), so cell 0 is rank 0,
 * cell 7 the last rank, cell 8 a drift, and a point 1.1 km south of the
 * box lies outside it. TS_WORK_PROBE names one of them and makes this case
 * release only that point: tests/delta_work.sh runs it under callgrind and
 * compares the instructions spent in the membership test and the
 * surrogate search. Without it, all four are released. */
TS_TEST(release_work_probe)
{
    static const struct {
        const char *name;
        int cell;              /* -1: outside the box */
    } probes[] = {
        {"rank0", 0}, {"last", 7}, {"drift", 8}, {"outside", -1},
    };
    const char *only = getenv("TS_WORK_PROBE");
    test_model m = make_model(uniform_initial);
    table t = default_table(m.model);
    t.delta = 0.12;
    void *profile = new_profile(&ts_pim_ops, &t);
    size_t size = ts_pim_ops.user_state_size(profile);
    unsigned char *state = malloc(size);
    int ran = 0;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        if (only != NULL && strcmp(only, probes[i].name) != 0)
            continue;
        ts_point p = cell_point(m.model, 0, 600000);
        if (probes[i].cell >= 0)
            p = cell_point(m.model, (uint32_t)probes[i].cell, 600000);
        else
            p.lat -= 1100.0 / EARTH_R * DEG;
        memset(state, 0, size);
        ts_rng *rng = ts_rng_new_seeded(11);
        ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
        ts_report out;
        ck_assert_int_eq(ts_pim_ops.release(profile, state, &p, &budget, rng,
                                            &out), TS_RELEASE_OK);
        ck_assert_uint_eq(out.delta_set_size, 8);
        ts_rng_free(rng);
        ran++;
    }
    ck_assert_int_gt(ran, 0);
    free(state);
    ts_pim_ops.profile_free(profile);
    free_model(&m);
}
END_TEST

/* outside_region = "surrogate" (the default): a true point outside the box
 * is released as a drift from the delta-set cell nearest to it, so with the
 * same generator it gives exactly the output and the state of a user
 * standing at that cell's centre; the observer's replay calls it drifted.
 * The delta-set of concentrated_initial is cells 0 and 1 (row 0, columns
 * 0 and 1); a point 1.1 km south of cell 1 is nearest to cell 1, a point
 * 1.1 km west of cell 0 nearest to cell 0. */
static void check_outside_surrogate(const ts_mechanism_ops *ops)
{
    test_model m = make_model(concentrated_initial);
    table t = default_table(m.model);
    void *profile = new_profile(ops, &t);
    size_t size = ops->user_state_size(profile);
    unsigned char *state_far = calloc(1, size), *state_cell = calloc(1, size);
    unsigned char *observer = calloc(1, size);
    ts_vec2 c1 = ts_grid_cell_centre(&m.model->grid, 1);
    ts_vec2 c0 = ts_grid_cell_centre(&m.model->grid, 0);
    struct { ts_vec2 plane; uint32_t nearest; } cases[2] = {
        { { c1.x, c1.y - 1100.0 }, 1 },
        { { c0.x - 1100.0, c0.y }, 0 },
    };
    for (int k = 0; k < 2; k++) {
        ts_point far = { .ts_ms = 600000, .accuracy_m = NAN };
        ts_grid_unproject(&m.model->grid, cases[k].plane, &far.lat, &far.lon);
        uint32_t cell;
        ck_assert_int_lt(ts_grid_cell_of_latlon(&m.model->grid, far.lat,
                                                far.lon, &cell), 0);
        ts_point at = cell_point(m.model, cases[k].nearest, 600000);
        ts_report out_far, out_cell;
        ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
        memset(state_far, 0, size);
        memset(state_cell, 0, size);
        ts_rng *rng = ts_rng_new_seeded(23);
        ck_assert_int_eq(ops->release(profile, state_far, &far, &budget, rng,
                                      &out_far), TS_RELEASE_OK);
        ts_rng_free(rng);
        rng = ts_rng_new_seeded(23);
        ck_assert_int_eq(ops->release(profile, state_cell, &at, &budget, rng,
                                      &out_cell), TS_RELEASE_OK);
        ts_rng_free(rng);
        ck_assert_uint_eq(out_far.delta_set_size, 2);
        ck_assert_double_eq(out_far.lat, out_cell.lat);
        ck_assert_double_eq(out_far.lon, out_cell.lon);
        ck_assert_double_eq(out_far.eps_point, out_cell.eps_point);
        ck_assert_int_eq(memcmp(state_far, state_cell, size), 0);

        ts_point published = { .lat = out_far.lat, .lon = out_far.lon,
                               .ts_ms = far.ts_ms, .accuracy_m = NAN };
        int drifted = -1;
        memset(observer, 0, size);
        ck_assert_int_eq(ts_delta_replay(profile, observer, &published, &far,
                                         &drifted, NULL), 0);
        ck_assert_int_eq(drifted, 1);
        ck_assert_int_eq(memcmp(observer, state_far, size), 0);
    }
    free(observer);
    free(state_cell);
    free(state_far);
    ops->profile_free(profile);
    free_model(&m);
}

TS_TEST(outside_region_surrogate_by_default)
{
    check_outside_surrogate(&ts_pim_ops);
    check_outside_surrogate(&ts_lm_delta_ops);
}
END_TEST

/* outside_region = "reject": TS_RELEASE_OUTSIDE_REGION before any state
 * change, also for a user with a belief. */
TS_TEST(outside_region_rejected)
{
    test_model m = make_model(uniform_initial);
    table t = default_table(m.model);
    t.outside = "reject";
    void *profile = new_profile(&ts_pim_ops, &t);
    size_t size = ts_pim_ops.user_state_size(profile);
    unsigned char *state = calloc(1, size);
    unsigned char *zero = calloc(1, size);
    ts_rng *rng = ts_rng_new_seeded(5);
    ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
    ts_point far = { .lat = 1.0, .lon = 1.0, .ts_ms = 600000,
                     .accuracy_m = NAN };
    ts_report out;
    ck_assert_int_eq(ts_pim_ops.release(profile, state, &far, &budget, rng,
                                        &out), TS_RELEASE_OUTSIDE_REGION);
    ck_assert_int_eq(memcmp(state, zero, size), 0);

    ts_point inside = cell_point(m.model, 4, 600000);
    ck_assert_int_eq(ts_pim_ops.release(profile, state, &inside, &budget, rng,
                                        &out), TS_RELEASE_OK);
    memcpy(zero, state, size);
    far.ts_ms = 900000;
    ck_assert_int_eq(ts_pim_ops.release(profile, state, &far, &budget, rng,
                                        &out), TS_RELEASE_OUTSIDE_REGION);
    ck_assert_int_eq(memcmp(state, zero, size), 0);
    ts_rng_free(rng);
    free(zero);
    free(state);
    ts_pim_ops.profile_free(profile);
    free_model(&m);
}
END_TEST

/* The profile holds a reference to the caller's mapped model: after the
 * caller drops its own (a daemon reload frees the config that opened the
 * file) the mapping stays until the profile is freed. Under ASan an early
 * unmap or free fails this test. */
TS_TEST(profile_outlives_model)
{
    size_t len = 0;
    char *data = model_bytes(uniform_initial, 0, &len);
    char path[] = "/tmp/check_delta_privacy_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    free(data);
    ts_model *model = NULL;
    char err[256] = "";
    ck_assert_msg(ts_model_open(path, &model, err, sizeof err) == 0, "%s",
                  err);
    unlink(path);
    ck_assert_uint_eq(atomic_load(&model->refs), 1);

    table t = default_table(model);
    void *profile = new_profile(&ts_lm_delta_ops, &t);
    void *second = new_profile(&ts_pim_ops, &t);
    ck_assert_uint_eq(atomic_load(&model->refs), 3);
    ts_point p = cell_point(model, 4, 600000);
    ts_model_close(model);
    ts_pim_ops.profile_free(second);

    unsigned char *state = calloc(1, ts_lm_delta_ops.user_state_size(profile));
    ts_rng *rng = ts_rng_new_seeded(9);
    ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
    ts_report out;
    ck_assert_int_eq(ts_lm_delta_ops.release(profile, state, &p, &budget, rng,
                                             &out), TS_RELEASE_OK);
    ck_assert_uint_eq(out.delta_set_size, 9);
    ts_rng_free(rng);
    free(state);
    ts_lm_delta_ops.profile_free(profile);
}
END_TEST

/* ts_delta_replay on a zeroed block, fed the published outputs of real
 * releases, reproduces the mechanism's state byte for byte after every
 * step, and the same |Delta X|. Several users (one with a personal model),
 * seeds, irregular gaps (0, 1, 3, 7 ticks; two releases in one tick) and
 * truths that drift (cells far from the set). */
static void check_replay_matches(const ts_mechanism_ops *ops,
                                 const char *delta_set)
{
    test_model m = make_model_with(concentrated_initial, 1);
    table t = default_table(m.model);
    t.delta_set = delta_set;
    void *profile = new_profile(ops, &t);
    void *observer = new_profile(ops, &t);   /* its own scratch */
    size_t size = ops->user_state_size(profile);
    unsigned char *state = malloc(size);
    unsigned char *replayed = malloc(size);
    static const char *const users[3] = { "alice", "bob", NULL };
    enum { STEPS = 10 };
    const int64_t times[STEPS] = { 600000, 610000, 615000, 660000, 840000,
                                   1260000, 1270000, 1330000, 1500000,
                                   1900000 };
    const uint32_t truth_cells[STEPS] = { 0, 1, 1, 3, 8, 4, 4, 0, 6, 2 };
    int saw_drift = 0, saw_no_drift = 0;
    for (int u = 0; u < 3; u++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            memset(state, 0, size);
            memset(replayed, 0, size);
            ts_rng *rng = ts_rng_new_seeded(seed * 100 + (uint64_t)u);
            ts_budget_view budget = { .total = 100.0, .spent = 0.0 };
            for (int i = 0; i < STEPS; i++) {
                ts_point truth = cell_point(m.model, truth_cells[i],
                                            times[i]);
                truth.user = users[u];
                truth.user_len = users[u] != NULL ? strlen(users[u]) : 0;
                ts_report out;
                ck_assert_int_eq(ops->release(profile, state, &truth,
                                              &budget, rng, &out),
                                 TS_RELEASE_OK);
                budget.spent += out.eps_point;

                ts_point published = { .lat = out.lat, .lon = out.lon,
                                       .ts_ms = times[i], .accuracy_m = NAN,
                                       .user = truth.user,
                                       .user_len = truth.user_len };
                int drifted = -1;
                unsigned n = 0;
                ck_assert_int_eq(ts_delta_replay(observer, replayed,
                                                 &published, &truth,
                                                 &drifted, &n), 0);
                ck_assert_uint_eq(n, out.delta_set_size);
                ck_assert_msg(memcmp(state, replayed, size) == 0,
                              "user %d seed %d step %d: states differ", u,
                              (int)seed, i);
                ck_assert(drifted == 0 || drifted == 1);
                if (drifted)
                    saw_drift = 1;
                else
                    saw_no_drift = 1;
            }
            ts_rng_free(rng);
        }
    }
    /* The sequence exercises both branches of the release. */
    ck_assert(saw_drift && saw_no_drift);
    free(replayed);
    free(state);
    ops->profile_free(observer);
    ops->profile_free(profile);
    free_model(&m);
}

TS_TEST(replay_matches_release)
{
    check_replay_matches(&ts_pim_ops, NULL);
    check_replay_matches(&ts_lm_delta_ops, NULL);
    check_replay_matches(&ts_pim_ops, "compact");
    check_replay_matches(&ts_lm_delta_ops, "compact");
}
END_TEST

/* Drift in replay: the first delta-set of the concentrated prior is
 * {0, 1}. A truth in cell 1 is inside (0), in cell 8 outside (1), outside
 * the region counts as drifted, no truth reports 0. */
TS_TEST(replay_reports_drift)
{
    test_model m = make_model(concentrated_initial);
    table t = default_table(m.model);
    void *profile = new_profile(&ts_pim_ops, &t);
    size_t size = ts_pim_ops.user_state_size(profile);
    unsigned char *state = malloc(size);
    ts_point published = cell_point(m.model, 4, 600000);
    ts_point far = { .lat = 1.0, .lon = 1.0, .ts_ms = 600000,
                     .accuracy_m = NAN };
    const ts_point truths[4] = { cell_point(m.model, 1, 600000),
                                 cell_point(m.model, 8, 600000), far,
                                 cell_point(m.model, 0, 600000) };
    const int expected[4] = { 0, 1, 1, 0 };
    for (int i = 0; i < 5; i++) {
        memset(state, 0, size);
        int drifted = -1;
        unsigned n = 0;
        ck_assert_int_eq(ts_delta_replay(profile, state, &published,
                                         i < 4 ? &truths[i] : NULL, &drifted,
                                         &n), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_int_eq(drifted, i < 4 ? expected[i] : 0);
    }
    ts_pim_ops.profile_free(profile);
    free(state);
    free_model(&m);
}
END_TEST

/* Invalid input: -1 and the state untouched. */
TS_TEST(replay_rejects_invalid_input)
{
    test_model m = make_model(uniform_initial);
    table t = default_table(m.model);
    void *profile = new_profile(&ts_lm_delta_ops, &t);
    size_t size = ts_lm_delta_ops.user_state_size(profile);
    unsigned char *state = calloc(1, size);
    unsigned char *before = malloc(size);
    ts_point published = cell_point(m.model, 4, 900000);
    int drifted;
    unsigned n;
    ck_assert_int_eq(ts_delta_replay(profile, state, &published, NULL,
                                     &drifted, &n), 0);
    memcpy(before, state, size);

    ts_point bad = published;
    bad.ts_ms = 600000;                 /* before the last release */
    ck_assert_int_eq(ts_delta_replay(profile, state, &bad, NULL, NULL, NULL),
                     -1);
    bad = published;
    bad.lat = NAN;
    ck_assert_int_eq(ts_delta_replay(profile, state, &bad, NULL, NULL, NULL),
                     -1);
    bad = published;
    bad.lon = 181.0;
    ck_assert_int_eq(ts_delta_replay(profile, state, &bad, NULL, NULL, NULL),
                     -1);
    ts_point truth = published;
    truth.lon = INFINITY;
    ck_assert_int_eq(ts_delta_replay(profile, state, &published, &truth,
                                     &drifted, &n), -1);
    ck_assert_int_eq(ts_delta_replay(profile, state, NULL, NULL, NULL, NULL),
                     -1);
    ck_assert_int_eq(ts_delta_replay(profile, NULL, &published, NULL, NULL,
                                     NULL), -1);
    ck_assert_int_eq(ts_delta_replay(NULL, state, &published, NULL, NULL,
                                     NULL), -1);
    ck_assert_int_eq(memcmp(before, state, size), 0);

    /* Same timestamp again is valid (k = 0), and changes the state. */
    ck_assert_int_eq(ts_delta_replay(profile, state, &published, NULL, NULL,
                                     NULL), 0);
    ck_assert_int_ne(memcmp(before, state, size), 0);
    ck_assert(ts_pim_ops.replay == ts_delta_replay);
    ck_assert(ts_lm_delta_ops.replay == ts_delta_replay);
    ck_assert(ts_mechanism_find("geoind")->replay == NULL);
    ck_assert(ts_mechanism_find("predictive")->replay == NULL);
    free(before);
    free(state);
    ts_lm_delta_ops.profile_free(profile);
    free_model(&m);
}
END_TEST

/* Personal models: the same public history gives alice (personal model:
 * concentrated start, |Delta X| = 2) other delta-sets and beliefs than bob
 * (popular: uniform start, |Delta X| = 9), and bob's state is byte for
 * byte the one of a file without personal models. With personal_models
 * off, or without a pseudonym, alice is treated like bob. */
static void replay_history(void *profile, const ts_model *model,
                           const char *user, unsigned char *state,
                           size_t size, unsigned *sizes)
{
    const int64_t times[4] = { 600000, 660000, 780000, 960000 };
    const uint32_t cells[4] = { 4, 0, 2, 7 };
    memset(state, 0, size);
    for (int i = 0; i < 4; i++) {
        ts_point published = cell_point(model, cells[i], times[i]);
        published.user = user;
        published.user_len = user != NULL ? strlen(user) : 0;
        ck_assert_int_eq(ts_delta_replay(profile, state, &published, NULL,
                                         NULL, &sizes[i]), 0);
    }
}

TS_TEST(personal_models_by_pseudonym)
{
    test_model m = make_model_with(uniform_initial, 1);
    test_model plain = make_model(uniform_initial);
    table t = default_table(m.model);
    table tp = default_table(plain.model);
    void *profile = new_profile(&ts_pim_ops, &t);
    void *popular_only = new_profile(&ts_pim_ops, &tp);
    t.personal = 0;
    void *off = new_profile(&ts_pim_ops, &t);
    t.personal = -1;
    t.personal_bool = 0;
    void *off_bool = new_profile(&ts_pim_ops, &t);
    t.personal_bool = -1;
    size_t size = ts_pim_ops.user_state_size(profile);
    unsigned char *alice = malloc(size), *bob = malloc(size);
    unsigned char *reference = malloc(size), *other = malloc(size);
    unsigned alice_n[4], bob_n[4], ref_n[4], other_n[4];

    replay_history(profile, m.model, "alice", alice, size, alice_n);
    replay_history(profile, m.model, "bob", bob, size, bob_n);
    replay_history(popular_only, plain.model, "bob", reference, size, ref_n);
    ck_assert_uint_eq(alice_n[0], 2);
    ck_assert_uint_eq(bob_n[0], 9);
    ck_assert_int_ne(memcmp(alice, bob, size), 0);
    ck_assert_int_eq(memcmp(bob, reference, size), 0);
    ck_assert_int_eq(memcmp(bob_n, ref_n, sizeof ref_n), 0);
    /* alice's chain never moves: her belief stays inside cells {0, 1}. */
    const ts_belief *belief = (const ts_belief *)(alice + 16);
    for (uint32_t i = 0; i < belief->count; i++)
        ck_assert_uint_le(belief->entry[i].cell, 1);

    void *switched_off[2] = { off, off_bool };
    for (int k = 0; k < 2; k++) {
        replay_history(switched_off[k], m.model, "alice", other, size,
                       other_n);
        ck_assert_int_eq(memcmp(other, reference, size), 0);
    }
    replay_history(profile, m.model, NULL, other, size, other_n);
    ck_assert_int_eq(memcmp(other, reference, size), 0);

    /* The release path picks the model the same way. */
    ts_rng *rng = ts_rng_new_seeded(21);
    ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
    ts_point truth = cell_point(m.model, 0, 600000);
    ts_report out;
    memset(other, 0, size);
    truth.user = "alice";
    truth.user_len = 5;
    ck_assert_int_eq(ts_pim_ops.release(profile, other, &truth, &budget, rng,
                                        &out), TS_RELEASE_OK);
    ck_assert_uint_eq(out.delta_set_size, 2);
    memset(other, 0, size);
    truth.user = "bob";
    truth.user_len = 3;
    ck_assert_int_eq(ts_pim_ops.release(profile, other, &truth, &budget, rng,
                                        &out), TS_RELEASE_OK);
    ck_assert_uint_eq(out.delta_set_size, 9);

    /* Only a boolean or 0/1: a string is refused, as is 2. */
    char err[256] = "";
    void *rejected = NULL;
    t.personal_text = "yes";
    ck_assert_int_eq(ts_pim_ops.profile_new(params_of(&t), &rejected, err,
                                            sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "personal_models"));
    t.personal_text = NULL;
    t.personal = 2;
    ck_assert_int_eq(ts_pim_ops.profile_new(params_of(&t), &rejected, err,
                                            sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "personal_models"));

    ts_rng_free(rng);
    free(alice);
    free(bob);
    free(reference);
    free(other);
    ts_pim_ops.profile_free(off_bool);
    ts_pim_ops.profile_free(off);
    ts_pim_ops.profile_free(popular_only);
    ts_pim_ops.profile_free(profile);
    free_model(&plain);
    free_model(&m);
}
END_TEST

/* delta_set = "compact". Initial distribution: cell 0 1/2, cells 1 and 3
 * 1/5 each, the far corner 8 0.03, cells 2, 4, 5, 6, 7 0.014 each. At
 * delta = 0.05 the fewest cells are 0, 1, 3, 8, 2, 4 (0.958; ties by
 * index), reaching the far corner; the cells nearest the mean holding
 * 0.95 are 0, 1, 3, 4, 2, 6 and one of 5, 7 (0.956): seven cells, every one
 * nearer the mean than cell 8. So compact publishes 7, fewest 6, and a
 * truth in cell 8 drifts only with compact. Both sets hold >= 0.95. */
TS_TEST(compact_delta_set)
{
    static const double hotspot_initial[9] = {0.5,   0.2,   0.014,
                                              0.2,   0.014, 0.014,
                                              0.014, 0.014, 0.03};
    test_model m = make_model(hotspot_initial);
    const char *const rules[2] = { "fewest", "compact" };
    const unsigned want[2] = { 6, 7 };
    for (int r = 0; r < 2; r++) {
        table t = default_table(m.model);
        t.delta = 0.05;
        t.delta_set = rules[r];
        void *profile = new_profile(&ts_pim_ops, &t);
        size_t size = ts_pim_ops.user_state_size(profile);
        unsigned char *state = calloc(1, size);
        ts_rng *rng = ts_rng_new_seeded(7);
        ts_budget_view budget = { .total = 5.0, .spent = 0.0 };
        ts_point truth = cell_point(m.model, 8, 600000);
        ts_report out;
        ck_assert_int_eq(ts_pim_ops.release(profile, state, &truth, &budget,
                                            rng, &out),
                         TS_RELEASE_OK);
        ck_assert_uint_eq(out.delta_set_size, want[r]);

        unsigned char *observer = calloc(1, size);
        ts_point published = { .lat = out.lat, .lon = out.lon,
                               .ts_ms = 600000, .accuracy_m = NAN };
        int drifted = -1;
        ck_assert_int_eq(ts_delta_replay(profile, observer, &published,
                                         &truth, &drifted, NULL), 0);
        ck_assert_int_eq(drifted, r == 1);
        ck_assert_int_eq(memcmp(observer, state, size), 0);
        free(observer);
        ts_rng_free(rng);
        free(state);
        ts_pim_ops.profile_free(profile);
    }
    free_model(&m);
}
END_TEST

int main(void)
{
    return ts_check_main("delta_privacy", 60, NULL, NULL);
}
