/* The per-user pipeline's processing clock (engine/pipeline.c): budget
 * windows close by the owner's clock as well as by event time, so a
 * producer cannot overspend in real time (issue 24), against the fake
 * mechanism of the pipeline fixture. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine/config.h"
#include "ops/catalog.h"
#include "engine/pipeline.h"
#include "inference/model_file.h"
#include "mechanisms/rng.h"
#include "state/changelog.h"
#include "state/store.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_mechanism.h"
#include "tests/support/pipeline_fixture.h"

/* -------------------------------------------------- the processing clock
 *
 * Issue 24, item 5: budget windows on event time alone let a producer
 * overspend in real time. A window dated 86 100 s back and one 301 s ahead
 * gave two windows' budget at one instant; a watermark moved ahead made
 * expiry forget a user whose window was still open, and the user came back
 * for a third. A window now also has to be W old by the clock the owner
 * passes in before it closes. */

#define CLOCK0 INT64_C(1700000000000)

static ts_outcome at(int64_t clock_ms, const char *user, int64_t ts_ms)
{
    ts_pipeline_set_clock(pipeline, clock_ms);
    ts_input in = point(user, ts_ms, NULL);
    return run(&in);
}

TS_TEST(test_clock_window_needs_both_ends)
{
    ts_outcome out = at(CLOCK0, "u", 1000);
    ck_assert(out.sanitized);
    ck_assert_int_eq(out.window_start_ms, 1000);
    /* Past the window's end in event time, not by the clock: the update
     * stays in the window and spends from it. */
    out = at(CLOCK0 + 1, "u", 1000 + WINDOW_MS);
    ck_assert(out.sanitized);
    ck_assert_int_eq(out.window_start_ms, 1000);
    ck_assert_double_eq_tol(out.eps_spent_window, 2 * SPEND, 1e-12);
    out = at(CLOCK0 + WINDOW_MS - 1, "u", 1000 + 50 * WINDOW_MS);
    ck_assert_int_eq(out.window_start_ms, 1000);
    ck_assert(at(CLOCK0 + WINDOW_MS - 1, "u", 1000 + 50 * WINDOW_MS).sanitized);
    out = at(CLOCK0 + WINDOW_MS - 1, "u", 1000 + 50 * WINDOW_MS);
    ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
    /* The detail gives both ends. */
    char want[128];
    snprintf(want, sizeof want, "until event time %d ms and clock %lld ms",
             1000 + WINDOW_MS, (long long)(CLOCK0 + WINDOW_MS));
    ck_assert_msg(strstr(out.detail, want) != NULL, "%s", out.detail);

    /* Both ends passed: a new window, opened by the clock now. */
    out = at(CLOCK0 + WINDOW_MS, "u", 1000 + 50 * WINDOW_MS);
    ck_assert(out.sanitized);
    ck_assert_int_eq(out.window_start_ms, 1000 + 50 * WINDOW_MS);
    ck_assert_double_eq_tol(out.eps_spent_window, SPEND, 1e-12);

    /* The clock end alone does not close it either. */
    out = at(CLOCK0 + 10 * WINDOW_MS, "u", 1000 + 51 * WINDOW_MS - 1);
    ck_assert_int_eq(out.window_start_ms, 1000 + 50 * WINDOW_MS);
    ck_assert_double_eq_tol(out.eps_spent_window, 2 * SPEND, 1e-12);
    out = at(CLOCK0 + 10 * WINDOW_MS + 1, "u", 1000 + 51 * WINDOW_MS);
    ck_assert_int_eq(out.window_start_ms, 1000 + 51 * WINDOW_MS);
}
END_TEST

/* The LMDB attack of the issue, in one message (one clock reading): a
 * window dated a day back, then one past its end. */
TS_TEST(test_clock_two_windows_at_one_instant_refused)
{
    int64_t day = INT64_C(86400000);
    int64_t now = CLOCK0;
    double released = 0.0;
    for (int i = 0; i < 8; i++) {
        ts_outcome out = at(now, "v", now - day + 300000 + i);
        released += out.sanitized ? out.report.eps_point : 0.0;
    }
    for (int i = 0; i < 8; i++) {
        ts_outcome out = at(now, "v", now + 301000 + i);
        released += out.sanitized ? out.report.eps_point : 0.0;
    }
    ck_assert_double_eq_tol(released, TOTAL, 1e-12);
}
END_TEST

/* Both ends passed, but the window accepted an update at this very clock
 * instant: the next window waits for the next instant, so no instant
 * holds two windows' budget. */
TS_TEST(test_clock_one_window_per_instant)
{
    ck_assert(at(CLOCK0, "u", 1000).sanitized);
    int64_t later = CLOCK0 + WINDOW_MS;
    ts_outcome out = at(later, "u", 1000 + WINDOW_MS - 1);
    ck_assert_int_eq(out.window_start_ms, 1000);
    out = at(later, "u", 1000 + WINDOW_MS);
    ck_assert(out.sanitized);
    ck_assert_int_eq(out.window_start_ms, 1000);
    ck_assert_double_eq_tol(out.eps_spent_window, 3 * SPEND, 1e-12);
    out = at(later + 1, "u", 1000 + WINDOW_MS);
    ck_assert_int_eq(out.window_start_ms, 1000 + WINDOW_MS);
    ck_assert_double_eq_tol(out.eps_spent_window, SPEND, 1e-12);
}
END_TEST

/* The memory-only attack: another user's timestamp moves the watermark
 * past the victim's window; expiry must still keep the victim until its
 * window is W old by the clock. */
TS_TEST(test_clock_expiry_waits_for_the_clock)
{
    ck_assert(at(CLOCK0, "v", 1000).sanitized);
    for (int i = 0; i < 3; i++)
        ck_assert(at(CLOCK0, "v", 1000).sanitized);
    ck_assert(at(CLOCK0 + 1, "mover", 1000 + 100 * WINDOW_MS).sanitized);
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 100), 0);
    ts_pipeline_set_expiry_floor(pipeline, 1000 + 200 * WINDOW_MS);
    ts_pipeline_set_clock(pipeline, CLOCK0 + WINDOW_MS - 1);
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 100), 0);
    /* Back inside the open window: still exhausted. */
    ck_assert_int_eq(at(CLOCK0 + WINDOW_MS - 1, "v", 2000).reason,
                     TS_REASON_BUDGET_EXHAUSTED);

    ts_pipeline_set_clock(pipeline, CLOCK0 + WINDOW_MS);
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 100), 1);
    ts_outcome out = at(CLOCK0 + WINDOW_MS, "v", 3000);
    ck_assert(out.sanitized);
    ck_assert_int_eq(out.window_start_ms, 3000);
}
END_TEST

TS_TEST(test_clock_never_moves_back)
{
    ck_assert(at(CLOCK0, "u", 1000).sanitized);
    ts_pipeline_set_clock(pipeline, CLOCK0 + WINDOW_MS);
    ts_pipeline_set_clock(pipeline, CLOCK0);
    ts_pipeline_set_clock(pipeline, 0);
    ts_pipeline_set_clock(pipeline, -5);
    ts_input in = point("u", 1000 + WINDOW_MS, NULL);
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.window_start_ms, 1000 + WINDOW_MS);
}
END_TEST

/* A backend over an in-memory map of encoded records, as the JetStream
 * mode keeps them: a forgotten user comes back with its ledger. */
typedef struct map_backend {
    ts_state_backend backend;
    ts_record_map *map;
    unsigned char buf[512];
} map_backend;

static int map_load(void *ctx, const char *id, size_t id_len,
                    ts_user_record *record)
{
    map_backend *mb = ctx;
    const void *bytes;
    size_t len;
    if (ts_record_map_get(mb->map, id, id_len, &bytes, &len) == 0)
        return 0;
    return ts_record_decode(bytes, len, record) == 0 ? 1 : -1;
}

static int map_save(void *ctx, const char *id, size_t id_len,
                    const ts_user_record *record)
{
    map_backend *mb = ctx;
    size_t len = ts_record_encode(record, mb->buf, sizeof mb->buf);
    if (len == 0 || len > sizeof mb->buf)
        return -1;
    return ts_record_map_put(mb->map, id, id_len, mb->buf, len);
}

typedef struct debit {
    int user;
    int64_t clock_ms;
    int opens;                   /* the first debit of a window */
    double eps;
} debit;

#define SEARCH_USERS 6

/* One user's debits (in clock order) against the bound of
 * docs/operations.md: at most one window's budget at one clock instant,
 * windows opening at least W apart and after the last debit of the one
 * before, and at most (1 + ceil(T / W)) budgets within any closed clock
 * interval of length T. Returns the number of windows. (Plain conditions
 * in the loops: every ck_assert costs a write to check's pipe.) */
static size_t check_debits(const debit *d, size_t n)
{
    size_t windows = 0;
    int64_t opened = 0, last = 0;
    double in_window = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (windows == 0 && !d[i].opens)
            ck_abort_msg("a debit outside any window");
        if (d[i].opens) {
            if (windows > 0 && d[i].clock_ms - opened < WINDOW_MS)
                ck_abort_msg("windows opened %lld ms apart",
                             (long long)(d[i].clock_ms - opened));
            if (windows > 0 && d[i].clock_ms <= last)
                ck_abort_msg("a window opened at the instant of the last "
                             "debit of the one before");
            windows++;
            opened = d[i].clock_ms;
            in_window = 0.0;
        }
        in_window += d[i].eps;
        last = d[i].clock_ms;
        if (in_window > TOTAL + 1e-9)
            ck_abort_msg("a window spent %.3f", in_window);
    }
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && d[i - 1].clock_ms == d[i].clock_ms)
            continue;
        double sum = 0.0;
        for (size_t j = i; j < n; j++) {
            sum += d[j].eps;
            if (j + 1 < n && d[j + 1].clock_ms == d[j].clock_ms)
                continue;  /* the interval ends after the whole instant */
            int64_t span = d[j].clock_ms - d[i].clock_ms;
            double windows_allowed =
                1.0 + (double)((span + WINDOW_MS - 1) / WINDOW_MS);
            if (sum > windows_allowed * TOTAL + 1e-9)
                ck_abort_msg("%.3f over %lld ms of clock", sum,
                             (long long)span);
        }
    }
    return windows;
}

/* A seeded search over hostile timestamps, clock steps, expiry sweeps, a
 * full table and a watermark mover, with or without a state backend. */
static void hostile_search(uint64_t seed, int with_backend)
{
    restart_pipeline(4, 0);    /* new users force expiry on insertion */
    map_backend mb = { .backend = { .ctx = &mb, .load = map_load,
                                    .save = map_save } };
    if (with_backend) {
        mb.map = ts_record_map_new();
        ck_assert_ptr_nonnull(mb.map);
        ts_pipeline_set_state_backend(pipeline, &mb.backend);
    }
    ts_rng *dice = ts_rng_new_seeded(seed);
    ck_assert_ptr_nonnull(dice);
    static const char *const ids[SEARCH_USERS] = { "h0", "h1", "h2",
                                                   "h3", "h4", "h5" };
    static const int64_t steps[] = { 0, 0, 0, 1, WINDOW_MS / 7,
                                     WINDOW_MS / 2, WINDOW_MS - 1, WINDOW_MS };
    enum { STEPS = 1500, MAX_UPDATES = 12, MAX_DEBITS = STEPS * MAX_UPDATES };
    debit *debits = calloc(MAX_DEBITS, sizeof *debits);
    ck_assert_ptr_nonnull(debits);
    size_t n_debits = 0;
    int64_t last_ts[SEARCH_USERS], start_seen[SEARCH_USERS];
    int64_t clock = CLOCK0;
    for (int u = 0; u < SEARCH_USERS; u++)
        last_ts[u] = start_seen[u] = clock;

    for (int step = 0; step < STEPS; step++) {
        clock += steps[ts_rng_u64(dice) % (sizeof steps / sizeof *steps)];
        ts_pipeline_set_clock(pipeline, clock);
        ts_pipeline_set_expiry_floor(pipeline, clock - INT64_C(86400000));
        if (ts_rng_u64(dice) % 4 == 0)
            ts_pipeline_expire(pipeline, 16);
        int updates = 1 + (int)(ts_rng_u64(dice) % MAX_UPDATES);
        for (int k = 0; k < updates; k++) {
            int u = (int)(ts_rng_u64(dice) % SEARCH_USERS);
            int64_t ts;
            switch (ts_rng_u64(dice) % 8) {
            case 0: ts = clock - INT64_C(86400000) +
                         (int64_t)(ts_rng_u64(dice) % 60000); break;
            case 1: ts = clock + 600000 -
                         (int64_t)(ts_rng_u64(dice) % 60000); break;
            case 2: case 3: ts = start_seen[u] + WINDOW_MS +
                                 (int64_t)(ts_rng_u64(dice) % 2); break;
            case 4: ts = last_ts[u] + steps[ts_rng_u64(dice) % 8]; break;
            case 5: ts = last_ts[u] - (int64_t)(ts_rng_u64(dice) % 5000);
                    break;
            case 6: ts = clock + 590000; break;  /* watermark mover */
            default: ts = clock; break;
            }
            last_ts[u] = ts;
            ts_input in = point(ids[u], ts, NULL);
            ts_outcome out;
            ts_pipeline_process(pipeline, &in, &out);
            if (out.sanitized && out.report.eps_point > 0.0) {
                /* A window is known by its first debit, not its start: a
                 * forgotten user may open the next at the same time. */
                int opens = fabs(out.eps_spent_window -
                                 out.report.eps_point) < 1e-12;
                debits[n_debits++] = (debit){ u, clock, opens,
                                              out.report.eps_point };
                start_seen[u] = out.window_start_ms;
            }
        }
        if (with_backend && ts_rng_u64(dice) % 2 == 0) {
            ck_assert_int_eq(ts_pipeline_save_dirty(pipeline), 0);
            ts_pipeline_mark_in_flight(pipeline);
            ts_pipeline_mark_durable(pipeline);
        }
    }

    size_t windows = 0;
    debit *mine = calloc(MAX_DEBITS, sizeof *mine);
    ck_assert_ptr_nonnull(mine);
    for (int u = 0; u < SEARCH_USERS; u++) {
        size_t n = 0;
        for (size_t i = 0; i < n_debits; i++)
            if (debits[i].user == u)
                mine[n++] = debits[i];
        windows += check_debits(mine, n);
    }
    /* Not vacuous: windows rolled over, users were forgotten, and budgets
     * ran out. */
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(pipeline);
    ck_assert_uint_gt(windows, 5 * SEARCH_USERS);
    ck_assert_uint_gt(stats->users_expired, 10);
    ck_assert_uint_gt(stats->rejected[TS_REASON_BUDGET_EXHAUSTED], 50);
    free(mine);
    free(debits);
    ts_rng_free(dice);
    ts_pipeline_free(pipeline);
    pipeline = NULL;
    ts_record_map_free(mb.map);
}

TS_TEST(test_clock_hostile_search_memory)
{
    for (uint64_t seed = 1; seed <= 3; seed++)
        hostile_search(seed, 0);
}
END_TEST

TS_TEST(test_clock_hostile_search_backend)
{
    for (uint64_t seed = 11; seed <= 13; seed++)
        hostile_search(seed, 1);
}
END_TEST

/* Without a clock (`tracesan sanitize`), windows follow event time alone,
 * as before. */
TS_TEST(test_unclocked_is_event_time)
{
    ts_input in = point("u", 1000, NULL);
    ck_assert(run(&in).sanitized);
    in.ts_ms = 1000 + WINDOW_MS;
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.window_start_ms, 1000 + WINDOW_MS);
}
END_TEST

int main(void)
{
    return ts_check_main("pipeline_clock", 0, setup, teardown);
}
