/* The per-user pipeline against a deterministic fake mechanism: validation
 * reasons, ordering, budget windows, exhaustion policies, profile binding,
 * the user table's capacity and expiry, fail-closed behaviour and stats.
 *
 * The fake spends a fixed amount per point and publishes the true point
 * shifted by a fixed offset, so every expected number is exact. */
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


/* ------------------------------------------------------- validation */

TS_TEST(test_missing_user_id)
{
    ts_input in = point(NULL, 1000, NULL);
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_MISSING_USER_ID);
    in.user_id = "";
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_MISSING_USER_ID);
    ck_assert_str_eq(out.user_id, "");
    ck_assert_int_eq(seen.calls, 0);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 0);
}
END_TEST

TS_TEST(test_invalid_user_id)
{
    static const char *const bad[] = {
        "seventeen-bytes-x",   /* limit is 16 */
        "tab\there",
        "del\x7f",
        "nl\n",
        "\xff\xfe",            /* not UTF-8 */
        "\xc0\xaf",            /* overlong encoding of '/' */
        "\xed\xa0\x80",        /* UTF-16 surrogate */
        "trunc\xe2\x82",       /* truncated sequence */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_input in = point(bad[i], 1000, NULL);
        ts_outcome out = run(&in);
        ck_assert_int_eq(out.reason, TS_REASON_INVALID_USER_ID);
        /* an invalid id is not echoed into the outcome */
        ck_assert_str_eq(out.user_id, "");
    }
    ck_assert_int_eq(seen.calls, 0);

    /* exactly at the limit, and multi-byte UTF-8, are fine */
    ts_input ok = point("sixteen-bytes-xx", 1000, NULL);
    ck_assert(run(&ok).sanitized);
    ok = point("caf\xc3\xa9-\xe2\x82\xac", 1000, NULL);
    ts_outcome out = run(&ok);
    ck_assert(out.sanitized);
    ck_assert_str_eq(out.user_id, "caf\xc3\xa9-\xe2\x82\xac");
}
END_TEST

TS_TEST(test_invalid_timestamp)
{
    ts_input in = point("u", 0, NULL);
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_TIMESTAMP);
    in.ts_ms = -5;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_TIMESTAMP);
    in.ts_ms = INT64_MAX;  /* would overflow window arithmetic */
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_TIMESTAMP);
    in.ts_ms = 1;
    ck_assert(run(&in).sanitized);
}
END_TEST

TS_TEST(test_invalid_coordinate)
{
    const double bad[][2] = {
        { NAN, 0.0 }, { 0.0, NAN }, { INFINITY, 0.0 }, { 0.0, -INFINITY },
        { 90.000001, 0.0 }, { -90.5, 0.0 }, { 0.0, 180.1 }, { 0.0, -181.0 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_input in = point("u", 1000, NULL);
        in.lat = bad[i][0];
        in.lon = bad[i][1];
        ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_COORDINATE);
    }
    ck_assert_int_eq(seen.calls, 0);
    ts_input edge = point("u", 1000, NULL);
    edge.lat = -89.0;
    edge.lon = 179.0;  /* + offset stays valid */
    ck_assert(run(&edge).sanitized);
}
END_TEST

TS_TEST(test_invalid_accuracy)
{
    const double bad[] = { -1.0, NAN, INFINITY };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_input in = point("u", 1000, NULL);
        in.has_accuracy = 1;
        in.accuracy_m = bad[i];
        ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_ACCURACY);
    }
    /* ignored unless present */
    ts_input in = point("u", 1000, NULL);
    in.accuracy_m = -1.0;
    ck_assert(run(&in).sanitized);
    ck_assert(isnan(seen.truth.accuracy_m));
    in.has_accuracy = 1;
    in.accuracy_m = 12.5;
    ck_assert(run(&in).sanitized);
    ck_assert(seen.truth.accuracy_m == 12.5);
    ck_assert(seen.truth.lat == LAT && seen.truth.lon == LON);
    ck_assert_int_eq(seen.truth.ts_ms, 1000);
}
END_TEST

TS_TEST(test_unknown_profile)
{
    ts_input in = point("u", 1000, "nope");
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_ptr_null(out.profile);
    ck_assert_ptr_nonnull(strstr(out.detail, "'nope'"));
    /* a name with control bytes is not echoed */
    in.profile = "bad\nname";
    out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_ptr_null(strchr(out.detail, '\n'));
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 0);

    /* NULL and "" both mean the default profile */
    in.profile = NULL;
    out = run(&in);
    ck_assert(out.sanitized);
    ck_assert_str_eq(out.profile->name, "a");
    in.profile = "";
    out = run(&in);
    ck_assert(out.sanitized);
    ck_assert_ptr_eq(out.profile, ts_pipeline_default_profile(pipeline));
}
END_TEST

TS_TEST(test_validation_order)
{
    /* Each input also has every later problem; the first one wins. */
    ts_input in = point("bad\x01", -1, "nope");
    in.lat = NAN;
    in.has_accuracy = 1;
    in.accuracy_m = -1.0;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_USER_ID);
    in.user_id = "u";
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_TIMESTAMP);
    in.ts_ms = 1000;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_COORDINATE);
    in.lat = LAT;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_INVALID_ACCURACY);
    in.has_accuracy = 0;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_UNKNOWN_PROFILE);
}
END_TEST

/* ----------------------------------------------------------- ordering */

TS_TEST(test_equal_timestamps_allowed)
{
    ts_input in = point("u", 5000, NULL);
    ck_assert(run(&in).sanitized);
    ts_outcome out = run(&in);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.eps_spent_window, 2 * SPEND, 1e-12);
}
END_TEST

TS_TEST(test_backwards_rejected_ledger_unchanged)
{
    ts_input in = point("u", 5000, NULL);
    ts_outcome first = run(&in);
    ck_assert(first.sanitized);
    int calls = seen.calls;

    in.ts_ms = 4999;
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_TIME_WENT_BACKWARDS);
    ck_assert_str_eq(out.user_id, "u");
    ck_assert_int_eq(seen.calls, calls);  /* mechanism not consulted */

    /* last_ts stayed 5000: 4000 is still backwards */
    in.ts_ms = 4000;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_TIME_WENT_BACKWARDS);

    in.ts_ms = 5000;
    out = run(&in);
    ck_assert(out.sanitized);
    /* the ledger saw exactly one earlier point */
    ck_assert_double_eq_tol(seen.budget.spent, SPEND, 1e-12);
    ck_assert_double_eq_tol(out.eps_spent_window, 2 * SPEND, 1e-12);
    ck_assert_int_eq(out.window_start_ms, 5000);
    ck_assert_uint_eq(seen.state_counter, 1);
}
END_TEST

/* ------------------------------------------------------------- budget */

TS_TEST(test_exhaustion_drop)
{
    ts_input in = point("u", 1000, "a");
    for (int i = 0; i < 4; i++) {
        in.ts_ms = 1000 + i;
        ts_outcome out = run(&in);
        ck_assert(out.sanitized);
        ck_assert_double_eq_tol(out.eps_spent_window, (i + 1) * SPEND, 1e-12);
        ck_assert_double_eq_tol(out.eps_remaining, TOTAL - (i + 1) * SPEND,
                                1e-12);
        ck_assert_int_eq(out.window_start_ms, 1000);
    }
    for (int i = 0; i < 3; i++) {
        in.ts_ms = 2000 + i;
        ts_outcome out = run(&in);
        ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
        ck_assert_ptr_eq(out.profile, ts_pipeline_find_profile(pipeline, "a"));
    }
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(pipeline);
    ck_assert_uint_eq(stats->rejected[TS_REASON_BUDGET_EXHAUSTED], 3);
    /* counted once per user and window */
    ck_assert_uint_eq(stats->budget_exhaustions, 1);

    /* a dropped update did not advance last_ts: 1003..1999 still accepted
     * for ordering purposes (and still exhausted) */
    in.ts_ms = 1500;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_BUDGET_EXHAUSTED);
}
END_TEST

TS_TEST(test_exhaustion_repeat)
{
    ts_input in = point("u", 1000, "r");
    ts_outcome last = { 0 };
    for (int i = 0; i < 4; i++) {
        in.ts_ms = 1000 + 10 * i;
        in.lat = LAT + 0.001 * i;  /* different truths, different outputs */
        last = run(&in);
        ck_assert(last.sanitized);
        ck_assert(!last.repeated);
    }
    int calls = seen.calls;
    for (int i = 0; i < 3; i++) {
        in.ts_ms = 2000 + i;
        in.lat = LAT - 1.0;
        ts_outcome out = run(&in);
        ck_assert(out.sanitized);
        ck_assert(out.repeated);
        /* exactly the previous sanitized coordinates, for free */
        ck_assert(out.report.lat == last.report.lat);
        ck_assert(out.report.lon == last.report.lon);
        ck_assert(out.report.eps_point == 0.0);
        ck_assert_double_eq_tol(out.eps_spent_window, TOTAL, 1e-12);
        ck_assert(out.eps_remaining == 0.0);
        ck_assert_int_eq(out.window_start_ms, 1000);
        ck_assert_str_eq(out.profile->name, "r");
    }
    ck_assert_int_eq(seen.calls, calls + 3);  /* asked, and it refused */
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(pipeline);
    ck_assert_uint_eq(stats->sanitized, 7);
    ck_assert_uint_eq(stats->repeated, 3);
    ck_assert_uint_eq(stats->budget_exhaustions, 1);
    /* a repeat is an accepted update: it advanced last_ts */
    in.ts_ms = 2001;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_TIME_WENT_BACKWARDS);
}
END_TEST

TS_TEST(test_repeat_without_previous_point)
{
    /* a window that cannot pay for even one point: nothing to repeat, and
     * the rejected first update does not create the user */
    fakes[2]->spend = 2 * TOTAL;
    ts_input in = point("u", 1000, "r");
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_BUDGET_EXHAUSTED);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 0);
    ck_assert_uint_eq(ts_pipeline_get_stats(pipeline)->users_created, 0);
}
END_TEST

TS_TEST(test_window_rollover)
{
    ts_input in = point("u", 1000, NULL);
    for (int i = 0; i < 4; i++)
        ck_assert(run(&in).sanitized);
    ck_assert_uint_eq(seen.state_counter, 3);
    in.ts_ms = 1000 + WINDOW_MS - 1;
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_BUDGET_EXHAUSTED);

    in.ts_ms = 1000 + WINDOW_MS;  /* the window is [start, start + length) */
    ts_outcome out = run(&in);
    ck_assert(out.sanitized);
    ck_assert_int_eq(out.window_start_ms, 1000 + WINDOW_MS);
    ck_assert_double_eq_tol(out.eps_spent_window, SPEND, 1e-12);
    ck_assert_double_eq_tol(out.eps_remaining, TOTAL - SPEND, 1e-12);
    /* fresh budget and zeroed mechanism state */
    ck_assert(seen.budget.spent == 0.0);
    ck_assert(seen.budget.total == TOTAL);
    ck_assert_uint_eq(seen.state_counter, 0);
    ck_assert_uint_eq(ts_pipeline_get_stats(pipeline)->users_created, 1);

    /* after exhausting the second window too, the counter says 2 */
    for (int i = 0; i < 3; i++)
        ck_assert(run(&in).sanitized);
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_BUDGET_EXHAUSTED);
    ck_assert_uint_eq(ts_pipeline_get_stats(pipeline)->budget_exhaustions, 2);
}
END_TEST

TS_TEST(test_profile_conflict)
{
    ts_input in = point("u", 1000, "a");
    ck_assert(run(&in).sanitized);
    in.profile = "b";
    in.ts_ms = 2000;
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_PROFILE_CONFLICT);
    ck_assert_ptr_nonnull(strstr(out.detail, "'a'"));
    /* the default profile is "a": no conflict */
    in.profile = NULL;
    ck_assert(run(&in).sanitized);

    /* a different user may use "b" meanwhile */
    ts_input other = point("v", 2000, "b");
    ck_assert(run(&other).sanitized);

    /* after the window closes the user may switch */
    in.profile = "b";
    in.ts_ms = 1000 + WINDOW_MS;
    out = run(&in);
    ck_assert(out.sanitized);
    ck_assert_str_eq(out.profile->name, "b");
    ck_assert_double_eq_tol(out.eps_spent_window, SPEND, 1e-12);
    /* and is now bound to "b" */
    in.profile = "a";
    ck_assert_int_eq(rejected_reason(&in), TS_REASON_PROFILE_CONFLICT);
}
END_TEST

TS_TEST(test_eps_accounting)
{
    /* Mixed sequence over three users and several windows, with repeats:
     * in every window the published eps_point values add up to the
     * reported eps_spent_window. */
    fakes[2]->spend = 0.3;  /* not a divisor of the total */
    const char *users[] = { "x", "y", "z" };
    double sum[3] = { 0, 0, 0 };
    int64_t window[3] = { -1, -1, -1 };
    int repeats = 0;
    for (int step = 0; step < 300; step++) {
        int u = (step * 7) % 3;
        ts_input in = point(users[u], 1000 + step * 97, "r");
        ts_outcome out = run(&in);
        ck_assert(out.sanitized);
        if (out.window_start_ms != window[u]) {
            window[u] = out.window_start_ms;
            sum[u] = 0.0;
        }
        sum[u] += out.report.eps_point;
        repeats += out.repeated;
        ck_assert_double_eq_tol(out.eps_spent_window, sum[u], 1e-12);
        ck_assert(out.eps_spent_window <= TOTAL * (1 + 1e-9));
        ck_assert_double_eq_tol(out.eps_remaining,
                                fmax(0.0, TOTAL - out.eps_spent_window),
                                1e-12);
    }
    ck_assert_int_gt(repeats, 0);
}
END_TEST

/* ------------------------------------------------------- fail closed */

/* After user in->user_id's second update (ts 2000) was refused: nothing
 * of it stuck -- ledger, mechanism state and last timestamp are as before
 * (an update at 1500 is still in order) -- and a new user whose first
 * update is refused the same way is not kept. */
static void assert_refusal_left_no_trace(ts_input *in, fake_mode failing_mode,
                                         ts_reason reason)
{
    fakes[0]->mode = FAKE_OFFSET;
    in->ts_ms = 1500;
    ts_outcome out = run(in);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(seen.budget.spent, SPEND, 1e-12);
    ck_assert_uint_eq(seen.state_counter, 1);

    fakes[0]->mode = failing_mode;
    ts_input fresh = point("new", 1000, NULL);
    ck_assert_int_eq(rejected_reason(&fresh), reason);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 1);
}

TS_TEST(test_internal_error)
{
    ts_input in = point("u", 1000, NULL);
    ck_assert(run(&in).sanitized);

    fakes[0]->mode = FAKE_ERROR;
    in.ts_ms = 2000;
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_INTERNAL_ERROR);
    ck_assert(!out.sanitized);
    ck_assert_uint_eq(seen.state_counter, 1);

    assert_refusal_left_no_trace(&in, FAKE_ERROR, TS_REASON_INTERNAL_ERROR);
}
END_TEST

/* The mechanism sees the user's pseudonym (for a personal model), not a
 * copy: same bytes, exact length, no terminator needed. */
TS_TEST(test_user_passed_to_mechanism)
{
    ts_input in = point("alice", 1000, NULL);
    ck_assert(run(&in).sanitized);
    ck_assert_ptr_eq(seen.truth.user, in.user_id);
    ck_assert_uint_eq(seen.truth.user_len, 5);
}
END_TEST

TS_TEST(test_outside_region)
{
    ts_input in = point("u", 1000, NULL);
    ck_assert(run(&in).sanitized);

    fakes[0]->mode = FAKE_OUTSIDE;
    in.ts_ms = 2000;
    ts_outcome out = run(&in);
    ck_assert(!out.sanitized);
    ck_assert_int_eq(out.reason, TS_REASON_OUTSIDE_REGION);
    ck_assert_str_eq(ts_reason_name(out.reason), "outside_region");
    ck_assert_ptr_nonnull(strstr(out.detail, "region"));
    ck_assert_uint_eq(
        ts_pipeline_get_stats(pipeline)->rejected[TS_REASON_OUTSIDE_REGION],
        1);
    ck_assert_uint_eq(
        ts_pipeline_get_stats(pipeline)->rejected[TS_REASON_INTERNAL_ERROR],
        0);

    assert_refusal_left_no_trace(&in, FAKE_OUTSIDE, TS_REASON_OUTSIDE_REGION);
}
END_TEST

TS_TEST(test_misbehaving_mechanism_refused)
{
    const fake_mode modes[] = { FAKE_BAD_COORDINATE, FAKE_OVERSPEND };
    ts_input in = point("u", 1000, NULL);
    ck_assert(run(&in).sanitized);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        fakes[0]->mode = modes[i];
        ts_outcome out;
        ts_pipeline_process(pipeline, &in, &out);
        ck_assert(!out.sanitized);
        ck_assert_int_eq(out.reason, TS_REASON_INTERNAL_ERROR);
        ck_assert(out.report.lat == 0.0 && out.report.lon == 0.0);
    }
    fakes[0]->mode = FAKE_OFFSET;
    ts_outcome out = run(&in);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.eps_spent_window, 2 * SPEND, 1e-12);
    ck_assert_uint_eq(
        ts_pipeline_get_stats(pipeline)->rejected[TS_REASON_INTERNAL_ERROR], 2);
}
END_TEST

/* Issue 10, item 3: a report equal to the input is a legitimate sample
 * (noise can be zero); refusing it would make the rejection depend on the
 * secret. It is published and spends like any other. */
TS_TEST(test_report_equal_to_truth_published)
{
    ts_input in = point("u", 1000, NULL);
    fakes[0]->mode = FAKE_IDENTITY;
    ts_outcome out;
    ts_pipeline_process(pipeline, &in, &out);
    ck_assert(out.sanitized);
    ck_assert(out.report.lat == in.lat && out.report.lon == in.lon);
    ck_assert_double_eq_tol(out.eps_spent_window, SPEND, 1e-12);
    ck_assert_uint_eq(
        ts_pipeline_get_stats(pipeline)->rejected[TS_REASON_INTERNAL_ERROR], 0);
    fakes[0]->mode = FAKE_OFFSET;
}
END_TEST

TS_TEST(test_output_never_equals_input)
{
    /* Every sanitized outcome of a sweep over many points, users, windows
     * and both policies differs from its input in both coordinates (run()
     * asserts it); repeats included. */
    int sanitized = 0;
    for (int i = 0; i < 2000; i++) {
        char user[8];
        snprintf(user, sizeof user, "u%d", i % 13);
        ts_input in = point(user, 1000 + i * 37, (i % 13) % 2 ? "r" : NULL);
        in.lat = -80.0 + (i % 160);
        in.lon = -170.0 + (i * 7 % 340);
        ts_outcome out = run(&in);
        sanitized += out.sanitized;
    }
    ck_assert_int_gt(sanitized, 800);
}
END_TEST

/* ------------------------------------------------- table and expiry */

TS_TEST(test_table_full_and_expiry)
{
    restart_pipeline(2, 1000);

    ts_input a = point("a", 1000, NULL);
    ts_input b = point("b", 1000, NULL);
    ts_input c = point("c", 1000, NULL);
    ck_assert(run(&a).sanitized);
    ck_assert(run(&b).sanitized);
    ts_outcome out = run(&c);
    ck_assert_int_eq(out.reason, TS_REASON_USER_TABLE_FULL);
    ck_assert_str_eq(out.user_id, "c");
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 2);

    /* b idles far past the TTL, but its window [1000, 11000) is open:
     * forgetting it would refund its budget */
    a.ts_ms = 10999;
    ck_assert(run(&a).sanitized);
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 100), 0);
    c.ts_ms = 10999;
    ck_assert_int_eq(rejected_reason(&c), TS_REASON_USER_TABLE_FULL);

    /* the watermark reaches the end of b's window: the insertion of c
     * expires b on its own */
    a.ts_ms = 11000;
    ck_assert(run(&a).sanitized);
    c.ts_ms = 11000;
    ck_assert(run(&c).sanitized);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 2);
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(pipeline);
    ck_assert_uint_eq(stats->users_expired, 1);
    ck_assert_uint_eq(stats->users_created, 3);
    ck_assert_uint_eq(stats->rejected[TS_REASON_USER_TABLE_FULL], 2);

    /* a and c are active, so the forgotten b now finds the table full */
    b.ts_ms = 11000;
    ck_assert_int_eq(rejected_reason(&b), TS_REASON_USER_TABLE_FULL);
}
END_TEST

/* Issue 10, item 10: a table full of users whose windows closed long ago
 * (by the wall clock) admitted nobody new, because only accepted updates
 * moved the watermark and every update was now a new user's. The daemon's
 * wall-clock floor (no update may be dated before it) lets expiry see that
 * those windows can never be written again. */
/* Issue 10, item 9: an id whose wire bytes hold a NUL ("alice\0evil"
 * arrives as the C string "alice"); the wire length gives it away, and it
 * is refused instead of being debited and published as "alice". The same
 * for a profile name ("geoind\0junk" would have resolved to "geoind"). */
TS_TEST(test_nul_inside_ids_refused)
{
    ts_input in = point("alice", 1000, NULL);
    in.has_wire_lengths = 1;
    in.user_id_wire_len = 10;
    in.profile_wire_len = SIZE_MAX;
    ts_outcome out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_INVALID_USER_ID);
    ck_assert_str_eq(out.user_id, "");
    ck_assert_ptr_nonnull(strstr(out.detail, "NUL"));

    in = point("alice", 1000, "r");
    in.has_wire_lengths = 1;
    in.user_id_wire_len = 5;
    in.profile_wire_len = 6;
    out = run(&in);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_ptr_nonnull(strstr(out.detail, "NUL"));
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 0);

    /* Matching lengths pass. */
    in.profile_wire_len = 1;
    ck_assert(run(&in).sanitized);
}
END_TEST

TS_TEST(test_dead_table_admits_new_users)
{
    restart_pipeline(3, 1000);

    const char *const dead[] = {"a", "b", "c"};
    for (size_t i = 0; i < 3; i++) {
        ts_input in = point(dead[i], 1000, NULL);
        ck_assert(run(&in).sanitized);
    }
    ts_input newcomer = point("d", 1000 + 10 * WINDOW_MS, NULL);
    ck_assert_int_eq(rejected_reason(&newcomer), TS_REASON_USER_TABLE_FULL);
    ck_assert_int_eq(rejected_reason(&newcomer), TS_REASON_USER_TABLE_FULL);

    /* A floor inside the dead windows changes nothing: they may still be
     * written. */
    ts_pipeline_set_expiry_floor(pipeline, 1000 + WINDOW_MS / 2);
    ck_assert_int_eq(rejected_reason(&newcomer), TS_REASON_USER_TABLE_FULL);
    /* Past their end (and the idle TTL) they are dead: d gets in. */
    ts_pipeline_set_expiry_floor(pipeline, 1000 + 2 * WINDOW_MS);
    ck_assert(run(&newcomer).sanitized);
    ck_assert_uint_eq(ts_pipeline_get_stats(pipeline)->users_expired, 3);
    /* The floor never moves back. */
    ts_pipeline_set_expiry_floor(pipeline, 0);
    ts_input another = point("e", 1000 + 10 * WINDOW_MS, NULL);
    ck_assert(run(&another).sanitized);
}
END_TEST

TS_TEST(test_expire_requires_idle_and_closed_window)
{
    ts_input a = point("a", 1000, NULL);
    ts_input b = point("b", 1000, NULL);
    ck_assert(run(&a).sanitized);
    ck_assert(run(&b).sanitized);
    /* a keeps being active past the end of its first window */
    for (int64_t t = 2000; t <= 11500; t += 500) {
        a.ts_ms = t;
        run(&a);
    }
    /* watermark 11500: b idle 10.5 s and its window closed at 11000; a's
     * second window opened at 11000 and a is active */
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 10), 1);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 1);
    /* b starts over: window starts now, nothing spent */
    b.ts_ms = 11500;
    ts_outcome out = run(&b);
    ck_assert(out.sanitized);
    ck_assert_int_eq(out.window_start_ms, 11500);
    ck_assert_double_eq_tol(out.eps_spent_window, SPEND, 1e-12);
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 10), 0);
}
END_TEST

TS_TEST(test_expire_scan_budget)
{
    /* 50 users expirable at watermark 20000; a budget of 8 per call removes
     * at most 8, and repeated calls eventually remove all of them. */
    for (int i = 0; i < 50; i++) {
        char user[8];
        snprintf(user, sizeof user, "u%d", i);
        ts_input in = point(user, 1000, NULL);
        ck_assert(run(&in).sanitized);
    }
    ts_input late = point("late", 20000, NULL);
    ck_assert(run(&late).sanitized);
    size_t total = 0;
    for (int round = 0; round < 20; round++) {
        size_t removed = ts_pipeline_expire(pipeline, 8);
        ck_assert_uint_le(removed, 8);
        total += removed;
    }
    ck_assert_uint_eq(total, 50);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 1);
    ck_assert_uint_eq(ts_pipeline_get_stats(pipeline)->users_expired, 50);
}
END_TEST

TS_TEST(test_rejections_create_no_users)
{
    /* a flood of distinct new ids whose updates all get rejected leaves the
     * table empty */
    fakes[0]->mode = FAKE_ERROR;
    for (int i = 0; i < 500; i++) {
        char user[12];
        snprintf(user, sizeof user, "f%d", i);
        ts_input in = point(user, 1000 + i, NULL);
        ck_assert_int_eq(rejected_reason(&in), TS_REASON_INTERNAL_ERROR);
    }
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 0);
}
END_TEST

/* --------------------------------------------------------- bookkeeping */

TS_TEST(test_stats)
{
    ts_input ok = point("u", 1000, NULL);
    ts_input bad = point("", 1000, NULL);
    ts_input unknown = point("u", 1000, "nope");
    run(&ok);
    run(&ok);
    run(&bad);
    run(&unknown);
    run(&unknown);
    ts_pipeline_count_rejection(pipeline, TS_REASON_MALFORMED);
    ts_pipeline_count_rejection(pipeline, TS_REASON_OVERSIZED);
    ts_pipeline_count_rejection(pipeline, TS_REASON_OVERSIZED);

    const ts_pipeline_stats *stats = ts_pipeline_get_stats(pipeline);
    ck_assert_uint_eq(stats->updates, 5);
    ck_assert_uint_eq(stats->sanitized, 2);
    ck_assert_uint_eq(stats->repeated, 0);
    ck_assert_uint_eq(stats->rejected[TS_REASON_MISSING_USER_ID], 1);
    ck_assert_uint_eq(stats->rejected[TS_REASON_UNKNOWN_PROFILE], 2);
    ck_assert_uint_eq(stats->rejected[TS_REASON_MALFORMED], 1);
    ck_assert_uint_eq(stats->rejected[TS_REASON_OVERSIZED], 2);
    ck_assert_uint_eq(stats->rejected[TS_REASON_NONE], 0);
    ck_assert_uint_eq(stats->users_created, 1);
    uint64_t rejected = 0;
    for (int r = 0; r < TS_REASON_COUNT; r++)
        rejected += stats->rejected[r];
    ck_assert_uint_eq(rejected, 6);
}
END_TEST

TS_TEST(test_reason_names)
{
    static const char *const expected[TS_REASON_COUNT] = {
        "none", "malformed", "oversized", "batch_too_large", "empty_batch",
        "missing_user_id", "invalid_user_id", "invalid_coordinate",
        "invalid_timestamp", "time_went_backwards", "unknown_profile",
        "profile_conflict", "budget_exhausted", "user_table_full",
        "invalid_accuracy", "internal_error", "outside_region", "too_old",
        "delta_uncertified", "cadence_too_fast",
    };
    for (int r = 0; r < TS_REASON_COUNT; r++)
        ck_assert_str_eq(ts_reason_name((ts_reason)r), expected[r]);
    ck_assert_ptr_nonnull(ts_reason_name(TS_REASON_COUNT));
}
END_TEST

TS_TEST(test_profile_accessors)
{
    ck_assert_uint_eq(ts_pipeline_profile_count(pipeline), 3);
    ck_assert_str_eq(ts_pipeline_profile_at(pipeline, 2)->name, "r");
    ck_assert_ptr_null(ts_pipeline_profile_at(pipeline, 3));
    ck_assert_ptr_eq(ts_pipeline_find_profile(pipeline, "b"),
                     ts_pipeline_profile_at(pipeline, 1));
    ck_assert_ptr_null(ts_pipeline_find_profile(pipeline, "zz"));
    ck_assert_str_eq(ts_pipeline_default_profile(pipeline)->name, "a");
}
END_TEST

TS_TEST(test_new_rejects_bad_arguments)
{
    /* ownership passes even on failure: ASan/valgrind catch leaks */
    ts_pipeline_limits limits = default_limits();
    ts_profile *profiles = calloc(1, sizeof *profiles);
    ck_assert_ptr_nonnull(profiles);
    profiles[0].name = strdup("p");
    profiles[0].ops = &fake_ops;
    profiles[0].mech = malloc(sizeof(fake_profile));
    profiles[0].window_budget = 1.0;
    profiles[0].window_ms = 1000;
    ck_assert_ptr_null(ts_pipeline_new(profiles, 1, 1, &limits, rng));

    profiles = calloc(1, sizeof *profiles);
    ck_assert_ptr_nonnull(profiles);
    profiles[0].name = strdup("p");
    profiles[0].ops = &fake_ops;
    profiles[0].mech = malloc(sizeof(fake_profile));
    profiles[0].window_budget = 0.0;  /* unusable budget */
    profiles[0].window_ms = 1000;
    ck_assert_ptr_null(ts_pipeline_new(profiles, 1, 0, &limits, rng));
}
END_TEST

int main(void)
{
    return ts_check_main("pipeline", 0, setup, teardown);
}
