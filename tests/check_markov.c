/* Unit tests for inference/markov.c, the prediction step of
 * inference/belief.c and inference/model_file.c:
 * - validation accepts good models and names what is wrong with bad ones;
 * - tick arithmetic;
 * - p M^k by k sparse products equals dense matrix powers on small random
 *   models (no pruning; tolerance 1e-12, far above the ~1e-15 rounding of
 *   a handful of products of probabilities);
 * - the reset rule (empty belief, k > max_ticks);
 * - model files: round trip (file and pipe), personal lookup with
 *   fallback, and rejection of corrupted, truncated, extended, wrong-magic
 *   and newer-version files, and of a well-checksummed but invalid model.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "inference/belief.h"
#include "inference/grid.h"
#include "inference/markov.h"
#include "inference/model_file.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/memory_file.h"

/* A model owning its arrays. */
typedef struct test_model {
    ts_markov m;
    uint64_t *row_start;
    uint32_t *col;
    double *prob;
    double *initial;
    double *dense;            /* n x n, row-major */
} test_model;

static void test_model_free(test_model *t)
{
    free(t->row_start);
    free(t->col);
    free(t->prob);
    free(t->initial);
    free(t->dense);
}

/* Random sparse row-stochastic model: each row has 1 to max_row distinct
 * random destinations with random weights; the initial distribution is
 * random and dense. */
static test_model random_model(ts_rng *rng, uint32_t n, uint32_t max_row)
{
    test_model t;
    t.row_start = malloc((n + 1) * sizeof *t.row_start);
    t.col = malloc((size_t)n * max_row * sizeof *t.col);
    t.prob = malloc((size_t)n * max_row * sizeof *t.prob);
    t.initial = malloc(n * sizeof *t.initial);
    t.dense = calloc((size_t)n * n, sizeof *t.dense);
    uint64_t nnz = 0;
    t.row_start[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = 1 + (uint32_t)(ts_rng_u64(rng) % max_row);
        double sum = 0.0;
        for (uint32_t j = 0; j < n; j++)
            t.dense[(size_t)i * n + j] = 0.0;
        /* Pick distinct columns by marking the dense row. */
        uint32_t picked = 0;
        while (picked < len) {
            uint32_t j = (uint32_t)(ts_rng_u64(rng) % n);
            if (t.dense[(size_t)i * n + j] != 0.0)
                continue;
            double w = 0.05 + ts_rng_uniform_open(rng);
            t.dense[(size_t)i * n + j] = w;
            sum += w;
            picked++;
        }
        for (uint32_t j = 0; j < n; j++) {
            double w = t.dense[(size_t)i * n + j];
            if (w == 0.0)
                continue;
            t.col[nnz] = j;
            t.prob[nnz] = w / sum;
            t.dense[(size_t)i * n + j] = w / sum;
            nnz++;
        }
        t.row_start[i + 1] = nnz;
    }
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        t.initial[i] = ts_rng_uniform_open(rng);
        sum += t.initial[i];
    }
    for (uint32_t i = 0; i < n; i++)
        t.initial[i] /= sum;
    t.m = (ts_markov){.cell_count = n, .tick_s = 60.0, .nnz = nnz,
                      .row_start = t.row_start, .col = t.col,
                      .prob = t.prob, .initial = t.initial};
    return t;
}

/* ------------------------------------------------------------ validation */

TS_TEST(test_validate)
{
    ts_rng *rng = ts_rng_new_seeded(1);
    test_model t = random_model(rng, 12, 4);
    char err[200];
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), 0);

    double saved = t.prob[3];
    t.prob[3] += 1e-6;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "sum to 1"));
    t.prob[3] = NAN;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), -1);
    t.prob[3] = saved;

    uint32_t saved_col = t.col[0];
    t.col[0] = 12;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    t.col[0] = saved_col;

    /* Swap two columns of a row with at least two entries. */
    uint32_t r = 0;
    while (t.row_start[r + 1] - t.row_start[r] < 2)
        r++;
    uint64_t e = t.row_start[r];
    uint32_t tmp = t.col[e];
    t.col[e] = t.col[e + 1];
    t.col[e + 1] = tmp;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ascending"));
    t.col[e + 1] = t.col[e];
    t.col[e] = tmp;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), 0);

    t.initial[5] *= 2.0;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "initial"));
    t.initial[5] /= 2.0;

    t.m.tick_s = 0.0;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), -1);
    /* Finer than the timestamps' millisecond: tick indices of ordinary
     * timestamps would not fit 64 bits (issue 25). */
    t.m.tick_s = 1e-9;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "at least 0.001 s"));
    t.m.tick_s = TS_MARKOV_MIN_TICK_S;
    ck_assert_int_eq(ts_markov_validate(&t.m, err, sizeof err), 0);
    t.m.tick_s = 60.0;

    /* An empty row. */
    uint64_t rs[3] = {0, 0, 1};
    uint32_t col[1] = {0};
    double prob[1] = {1.0}, init[2] = {0.5, 0.5};
    ts_markov empty = {.cell_count = 2, .tick_s = 1.0, .nnz = 1,
                       .row_start = rs, .col = col, .prob = prob,
                       .initial = init};
    ck_assert_int_eq(ts_markov_validate(&empty, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "no entries"));
    /* Allowed with a fallback of the same shape, which then supplies the
     * row; not with a fallback of another size or tick. */
    uint64_t frs[3] = {0, 1, 2};
    uint32_t fcol[2] = {1, 0};
    double fprob[2] = {1.0, 1.0};
    ts_markov full = {.cell_count = 2, .tick_s = 1.0, .nnz = 2,
                      .row_start = frs, .col = fcol, .prob = fprob,
                      .initial = init};
    empty.fallback = &full;
    ck_assert_int_eq(ts_markov_validate(&empty, err, sizeof err), 0);
    ts_markov_workspace ws;
    ck_assert_int_eq(ts_markov_workspace_init(&ws, 2), 0);
    uint32_t start = 0;
    double one = 1.0;
    ck_assert_int_eq(ts_markov_step(&empty, &start, &one, 1, &ws), 0);
    ck_assert_uint_eq(ws.touched_count, 1);
    ck_assert_double_eq(ws.acc[1], 1.0); /* the fallback's row 0 */
    ts_markov_workspace_free(&ws);
    full.tick_s = 2.0;
    ck_assert_int_eq(ts_markov_validate(&empty, err, sizeof err), -1);
    full.tick_s = 1.0;
    full.fallback = &full;
    ck_assert_int_eq(ts_markov_validate(&empty, err, sizeof err), -1);
    test_model_free(&t);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_ticks)
{
    ck_assert_int_eq(ts_markov_tick_index(60.0, 0), 0);
    ck_assert_int_eq(ts_markov_tick_index(60.0, 59999), 0);
    ck_assert_int_eq(ts_markov_tick_index(60.0, 60000), 1);
    ck_assert_int_eq(ts_markov_tick_index(60.0, -1), -1);
    /* Boundaries crossed, not elapsed time: 59.999 s -> 60.000 s is one
     * tick, 0 -> 59.999 s none, 30 s -> 150 s two. */
    ck_assert_int_eq(ts_markov_ticks_between(60.0, 59999, 60000), 1);
    ck_assert_int_eq(ts_markov_ticks_between(60.0, 0, 59999), 0);
    ck_assert_int_eq(ts_markov_ticks_between(60.0, 30000, 150000), 2);
    ck_assert_int_eq(ts_markov_ticks_between(60.0, 1224741185000LL,
                                             1224741185000LL + 3600000),
                     60);
    ck_assert_int_eq(ts_markov_ticks_between(60.0, 10, 9), -1);
    ck_assert_int_eq(ts_markov_ticks_between(0.0, 0, 9), -1);
    ck_assert_int_eq(ts_markov_ticks_between(NAN, 0, 9), -1);
    /* Indices beyond int64 clamp instead of overflowing the conversion
     * (which gave INT64_MIN for the end of time). */
    const int64_t limit = (int64_t)1 << 61;
    ck_assert_int_eq(ts_markov_tick_index(TS_MARKOV_MIN_TICK_S, INT64_MAX),
                     limit);
    ck_assert_int_eq(ts_markov_tick_index(1e-300, 1), limit);
    ck_assert_int_eq(ts_markov_tick_index(1e-300, -1), -limit);
    ck_assert_int_ge(ts_markov_ticks_between(1e-300, -1, 1), 0);
}
END_TEST

/* ------------------------------------------------- M^k against dense */

static void dense_step(const double *dense, uint32_t n, const double *in,
                       double *out)
{
    for (uint32_t j = 0; j < n; j++)
        out[j] = 0.0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++)
            out[j] += in[i] * dense[(size_t)i * n + j];
}

TS_TEST(test_power_matches_dense)
{
    ts_rng *rng = ts_rng_new_seeded(2024);
    const uint32_t n = 30;
    ts_belief_workspace *ws = ts_belief_workspace_new(n, n);
    ts_belief *b = malloc(ts_belief_bytes(n));
    ts_belief_params exact = {.prune_threshold = 0.0, .max_ticks = 100};
    for (int trial = 0; trial < 20; trial++) {
        test_model t = random_model(rng, n, 1 + trial % 6);
        /* Start from a random sparse posterior over 1..5 cells. */
        uint32_t cells[5];
        double weights[5], dense_p[30] = {0}, next[30];
        uint32_t support = 1 + (uint32_t)(ts_rng_u64(rng) % 5), picked = 0;
        while (picked < support) {
            uint32_t c = (uint32_t)(ts_rng_u64(rng) % n);
            if (dense_p[c] != 0.0)
                continue;
            cells[picked] = c;
            weights[picked] = ts_rng_uniform_open(rng);
            dense_p[c] = weights[picked];
            picked++;
        }
        double sum = 0.0;
        for (uint32_t i = 0; i < n; i++)
            sum += dense_p[i];
        for (uint32_t i = 0; i < n; i++)
            dense_p[i] /= sum;
        for (uint64_t k = 0; k <= 6; k++) {
            ts_belief_init(b, n);
            ck_assert_double_eq_tol(
                ts_belief_assign(b, cells, weights, support, 0.0, ws), 1.0,
                1e-15);
            int rc = ts_belief_predict(b, &t.m, k, &exact, ws, NULL);
            ck_assert_int_eq(rc, TS_BELIEF_UPDATED);
            /* Entries ascending, every positive dense entry present. */
            double total = 0.0;
            for (uint32_t i = 0; i < b->count; i++) {
                if (i > 0)
                    ck_assert_uint_lt(b->entry[i - 1].cell, b->entry[i].cell);
                total += b->entry[i].prob;
            }
            ck_assert_double_eq_tol(total, 1.0, 1e-12);
            for (uint32_t c = 0; c < n; c++)
                ck_assert_double_eq_tol(ts_belief_prob(b, c), dense_p[c],
                                        1e-12);
            dense_step(t.dense, n, dense_p, next);
            memcpy(dense_p, next, sizeof next);
        }
        /* Reset: too many ticks, or an empty belief, gives the initial
         * distribution whatever the posterior was. */
        ck_assert_int_eq(ts_belief_predict(b, &t.m, 101, &exact, ws, NULL),
                         TS_BELIEF_RESET);
        for (uint32_t c = 0; c < n; c++)
            ck_assert_double_eq_tol(ts_belief_prob(b, c), t.initial[c], 1e-15);
        ts_belief_init(b, n);
        ck_assert_int_eq(ts_belief_predict(b, &t.m, 1, &exact, ws, NULL),
                         TS_BELIEF_RESET);
        ck_assert_double_eq_tol(ts_belief_prob(b, 7), t.initial[7], 1e-15);
        test_model_free(&t);
    }
    free(b);
    ts_belief_workspace_free(ws);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_step_bad_input)
{
    ts_rng *rng = ts_rng_new_seeded(3);
    test_model t = random_model(rng, 10, 3);
    ts_markov_workspace ws;
    ck_assert_int_eq(ts_markov_workspace_init(&ws, 10), 0);
    uint32_t cells[2] = {1, 10};
    double w[2] = {0.5, 0.5};
    ck_assert_int_eq(ts_markov_step(&t.m, cells, w, 2, &ws), -1);
    for (uint32_t c = 0; c < 10; c++) /* cleared after the failure */
        ck_assert_double_eq(ws.acc[c], 0.0);
    ts_markov_workspace_free(&ws);
    /* A model larger than the workspace. */
    ck_assert_int_eq(ts_markov_workspace_init(&ws, 5), 0);
    cells[1] = 2;
    ck_assert_int_eq(ts_markov_step(&t.m, cells, w, 2, &ws), -1);
    ts_markov_workspace_free(&ws);
    ts_belief_workspace *bws = ts_belief_workspace_new(5, 8);
    ts_belief *b = malloc(ts_belief_bytes(8));
    ts_belief_init(b, 8);
    ts_belief_params p = {0.0, 10};
    ck_assert_int_eq(ts_belief_predict(b, &t.m, 1, &p, bws, NULL), TS_BELIEF_ERROR);
    ck_assert_uint_eq(b->count, 0);
    free(b);
    ts_belief_workspace_free(bws);
    test_model_free(&t);
    ts_rng_free(rng);
}
END_TEST

/* ------------------------------------------------------------ model file */

/* A model for a grid: a random sparse model with cell_count cells. */
typedef struct file_fixture {
    ts_grid grid;
    test_model popular;
    test_model personal[3];
    const char *users[3];
} file_fixture;

static void fixture_init(file_fixture *f)
{
    char err[200];
    ck_assert_int_eq(ts_grid_init(&f->grid, 39.9, 116.3, 39.93, 116.34,
                                  500.0, err, sizeof err),
                     0);
    ts_rng *rng = ts_rng_new_seeded(77);
    f->popular = random_model(rng, f->grid.cell_count, 5);
    for (int i = 0; i < 3; i++)
        f->personal[i] = random_model(rng, f->grid.cell_count, 3);
    f->users[0] = "zoe";
    f->users[1] = "alice";
    f->users[2] = "al";
    ts_rng_free(rng);
}

static void fixture_free(file_fixture *f)
{
    test_model_free(&f->popular);
    for (int i = 0; i < 3; i++)
        test_model_free(&f->personal[i]);
}

static void fixture_sources(const file_fixture *f, ts_model_source *pop,
                            ts_model_source per[3])
{
    *pop = (ts_model_source){.markov = &f->popular.m, .transitions = 1234};
    for (int i = 0; i < 3; i++)
        per[i] = (ts_model_source){.user = f->users[i],
                                   .user_len = strlen(f->users[i]),
                                   .markov = &f->personal[i].m,
                                   .transitions = 10 + (uint64_t)i};
}

static void assert_same_markov(const ts_markov *a, const ts_markov *b)
{
    ck_assert_uint_eq(a->cell_count, b->cell_count);
    ck_assert_uint_eq(a->nnz, b->nnz);
    ck_assert_double_eq(a->tick_s, b->tick_s);
    ck_assert_int_eq(memcmp(a->row_start, b->row_start,
                            (a->cell_count + 1) * sizeof *a->row_start),
                     0);
    ck_assert_int_eq(memcmp(a->col, b->col, a->nnz * sizeof *a->col), 0);
    ck_assert_int_eq(memcmp(a->prob, b->prob, a->nnz * sizeof *a->prob), 0);
    ck_assert_int_eq(memcmp(a->initial, b->initial,
                            a->cell_count * sizeof *a->initial),
                     0);
}

static int write_fixture(FILE *out, const void *ctx, uint64_t *bytes,
                         char *err, size_t errlen)
{
    const file_fixture *f = ctx;
    ts_model_source pop, per[3];
    fixture_sources(f, &pop, per);
    return ts_model_write(out, &f->grid, 120 / 3.6, &pop, per, 3, bytes, err,
                          errlen);
}

/* The fixture's file in memory, 8-byte aligned. */
static unsigned char *write_to_buffer(file_fixture *f, size_t *len)
{
    return ts_test_memory_file(write_fixture, f, len);
}

TS_TEST(test_file_round_trip)
{
    file_fixture f;
    fixture_init(&f);
    ts_model_source pop, per[3];
    fixture_sources(&f, &pop, per);
    char path[] = "/tmp/check_markov_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[300];
    uint64_t bytes = 0;
    ck_assert_msg(ts_model_write_file(path, &f.grid, 120 / 3.6, &pop, per, 3,
                                      &bytes, err, sizeof err) == 0,
                  "%s", err);
    ts_model *m = NULL;
    ck_assert_msg(ts_model_open(path, &m, err, sizeof err) == 0, "%s", err);
    unlink(path);
    ck_assert_uint_eq(m->file_bytes, bytes);
    ck_assert_uint_eq(m->grid.cell_count, f.grid.cell_count);
    ck_assert_uint_eq(m->grid.cols, f.grid.cols);
    ck_assert_double_eq(m->grid.lat_min, 39.9);
    ck_assert_double_eq(m->grid.lon_max, 116.34);
    ck_assert_double_eq(m->grid.cell_m, 500.0);
    ck_assert_double_eq(m->tick_s, 60.0);
    ck_assert_double_eq(m->max_speed_mps, 120 / 3.6);
    ck_assert_uint_eq(m->popular_transitions, 1234);
    assert_same_markov(&m->popular, &f.popular.m);
    ck_assert_uint_eq(m->user_count, 3);
    /* Sorted by id: "al" < "alice" < "zoe". */
    size_t len;
    const char *id = ts_model_user_id(m, 0, &len);
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(memcmp(id, "al", 2), 0);
    for (int i = 0; i < 3; i++) {
        const ts_markov *p = ts_model_personal(m, f.users[i], strlen(f.users[i]));
        ck_assert_ptr_nonnull(p);
        assert_same_markov(p, &f.personal[i].m);
        ck_assert_ptr_eq(ts_model_for_user(m, f.users[i], strlen(f.users[i])), p);
    }
    ck_assert_ptr_null(ts_model_personal(m, "ali", 3));
    ck_assert_ptr_null(ts_model_personal(m, "zoey", 4));
    ck_assert_ptr_null(ts_model_personal(m, "", 0));
    ck_assert_ptr_eq(ts_model_for_user(m, "bob", 3), &m->popular);
    ck_assert_ptr_eq(ts_model_for_user(m, NULL, 0), &m->popular);
    ts_model_close(m);

    /* The same bytes through a stream. */
    size_t blen;
    unsigned char *buf = write_to_buffer(&f, &blen);
    ck_assert_uint_eq(blen, bytes);
    ck_assert_int_eq(ts_model_open_buffer(buf, blen, &m, err, sizeof err), 0);
    assert_same_markov(&m->popular, &f.popular.m);
    ts_model_close(m);
    free(buf);
    fixture_free(&f);
}
END_TEST

static void fix_crcs(unsigned char *buf, size_t len)
{
    uint32_t payload = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf + 128,
                                       (uInt)(len - 128));
    memcpy(buf + 120, &payload, 4);
    uint32_t header = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, 124);
    memcpy(buf + 124, &header, 4);
}

static void expect_rejected(const unsigned char *buf, size_t len,
                            const char *needle)
{
    ts_model *m = (ts_model *)1;
    char err[300] = "";
    ck_assert_int_eq(ts_model_open_buffer(buf, len, &m, err, sizeof err), -1);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, needle) != NULL, "'%s' lacks '%s'", err, needle);
}

TS_TEST(test_file_rejections)
{
    file_fixture f;
    fixture_init(&f);
    size_t len;
    unsigned char *good = write_to_buffer(&f, &len);
    unsigned char *buf = aligned_alloc(8, (len + 64 + 7) / 8 * 8);

    /* One flipped payload bit. */
    memcpy(buf, good, len);
    buf[len - 3] ^= 0x10;
    expect_rejected(buf, len, "payload checksum");
    /* One flipped header bit (the cell size). */
    memcpy(buf, good, len);
    buf[72] ^= 0x01;
    expect_rejected(buf, len, "header checksum");
    /* Truncated, by a little and to the header only, and too short. */
    memcpy(buf, good, len);
    expect_rejected(buf, len - 8, "truncated");
    expect_rejected(buf, 128, "truncated");
    expect_rejected(buf, 100, "shorter than the header");
    /* Extended. */
    memcpy(buf, good, len);
    memset(buf + len, 0, 16);
    expect_rejected(buf, len + 16, "extended");
    /* Wrong magic. */
    memcpy(buf, good, len);
    memcpy(buf, "TSMARKOX", 8);
    expect_rejected(buf, len, "magic");
    /* A newer version, with valid checksums: refused with a clear word. */
    memcpy(buf, good, len);
    uint32_t v2 = 2;
    memcpy(buf + 8, &v2, 4);
    fix_crcs(buf, len);
    expect_rejected(buf, len, "newer than this build reads");
    /* A model that is well checksummed but not stochastic: double the
     * last probability of the popular model and fix the checksums. */
    memcpy(buf, good, len);
    uint64_t prob_off, nnz;
    memcpy(&nnz, buf + 128 + 0, 8);
    memcpy(&prob_off, buf + 128 + 24, 8);
    double p;
    memcpy(&p, buf + prob_off + (nnz - 1) * 8, 8);
    p = p * 0.5 + 0.25;
    memcpy(buf + prob_off + (nnz - 1) * 8, &p, 8);
    fix_crcs(buf, len);
    expect_rejected(buf, len, "does not sum to 1");
    /* A column index out of range, checksums fixed. */
    memcpy(buf, good, len);
    uint64_t col_off;
    memcpy(&col_off, buf + 128 + 16, 8);
    uint32_t big = f.grid.cell_count;
    memcpy(buf + col_off, &big, 4);
    fix_crcs(buf, len);
    expect_rejected(buf, len, "out of range");
    /* An array offset pointing past the end. */
    memcpy(buf, good, len);
    uint64_t far = len;
    memcpy(buf + 128 + 32, &far, 8);
    fix_crcs(buf, len);
    expect_rejected(buf, len, "outside the file");
    /* Grid dimensions that do not match the region. */
    memcpy(buf, good, len);
    uint32_t cols = f.grid.cols + 1;
    memcpy(buf + 28, &cols, 4);
    fix_crcs(buf, len);
    expect_rejected(buf, len, "grid of");
    /* A cell count that does not match the dimensions: named as such, not
     * as dimensions that differ from themselves (issue 25, item 14). */
    memcpy(buf, good, len);
    uint32_t cells = f.grid.cell_count + 1;
    memcpy(buf + 24, &cells, 4);
    fix_crcs(buf, len);
    char wrong_count[160];
    snprintf(wrong_count, sizeof wrong_count,
             "%u cells in the header, but its grid of %u x %u has %u", cells,
             f.grid.cols, f.grid.rows, f.grid.cell_count);
    expect_rejected(buf, len, wrong_count);
    /* The unmodified copy still loads (the harness is not at fault). */
    memcpy(buf, good, len);
    ts_model *m = NULL;
    char err[300];
    ck_assert_int_eq(ts_model_open_buffer(buf, len, &m, err, sizeof err), 0);
    ts_model_close(m);

    /* Files: truncated on disk, missing, not a model. */
    char path[] = "/tmp/check_markov_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, good, len - 1), (ssize_t)(len - 1));
    close(fd);
    ck_assert_int_eq(ts_model_open(path, &m, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
    unlink(path);
    ck_assert_int_eq(ts_model_open(path, &m, err, sizeof err), -1);
    ck_assert_int_eq(ts_model_open("/dev/null", &m, err, sizeof err), -1);

    free(buf);
    free(good);
    fixture_free(&f);
}
END_TEST

TS_TEST(test_write_rejections)
{
    file_fixture f;
    fixture_init(&f);
    ts_model_source pop, per[3];
    fixture_sources(&f, &pop, per);
    FILE *out = fopen("/dev/null", "wb");
    char err[300];
    /* Duplicate user ids. */
    per[2].user = "zoe";
    per[2].user_len = 3;
    ck_assert_int_eq(ts_model_write(out, &f.grid, 0, &pop, per, 3, NULL, err,
                                    sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "duplicate"));
    /* Empty user id. */
    per[2].user_len = 0;
    ck_assert_int_eq(ts_model_write(out, &f.grid, 0, &pop, per, 3, NULL, err,
                                    sizeof err),
                     -1);
    /* A model that does not fit the grid. */
    ts_rng *rng = ts_rng_new_seeded(5);
    test_model small = random_model(rng, 4, 2);
    ts_model_source bad = {.markov = &small.m};
    ck_assert_int_eq(ts_model_write(out, &f.grid, 0, &bad, NULL, 0, NULL, err,
                                    sizeof err),
                     -1);
    /* An invalid model is not written. */
    f.popular.prob[0] += 0.5;
    ck_assert_int_eq(ts_model_write(out, &f.grid, 0, &pop, NULL, 0, NULL, err,
                                    sizeof err),
                     -1);
    f.popular.prob[0] -= 0.5;
    ck_assert_int_eq(ts_model_write(out, &f.grid, 0, &pop, NULL, 0, NULL, err,
                                    sizeof err),
                     0);
    fclose(out);
    test_model_free(&small);
    ts_rng_free(rng);
    fixture_free(&f);
}
END_TEST

int main(void)
{
    return ts_check_main("markov", 60, NULL, NULL);
}
