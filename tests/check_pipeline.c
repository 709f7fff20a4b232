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

/* ------------------------------------------------------------ fixture */

#define WINDOW_MS 10000
#define TOTAL 1.0
#define SPEND 0.25           /* four points per window */
#define DLAT 0.01
#define DLON -0.02
/* Distinctive input coordinates, searched for in every rejection detail. */
#define LAT 12.3456789
#define LON 98.7654321

static ts_rng *rng;
static ts_pipeline *pipeline;
static fake_profile *fakes[3];   /* borrowed views of the profiles' mechs */

static ts_pipeline_limits default_limits(void)
{
    ts_pipeline_limits limits = {
        .max_users = 100,
        .idle_ttl_ms = 1000,
        .max_user_id_bytes = 16,
    };
    return limits;
}

/* Profiles "a" (default, drop), "b" (drop) and "r" (repeat). */
static ts_pipeline *make_pipeline(const ts_pipeline_limits *limits)
{
    static const char *const names[] = { "a", "b", "r" };
    ts_profile *profiles = calloc(3, sizeof *profiles);
    ck_assert_ptr_nonnull(profiles);
    for (size_t i = 0; i < 3; i++) {
        fake_profile *mech = malloc(sizeof *mech);
        ck_assert_ptr_nonnull(mech);
        *mech = (fake_profile){ TOTAL, SPEND, DLAT, DLON, FAKE_OFFSET, 0 };
        fakes[i] = mech;
        profiles[i].name = strdup(names[i]);
        profiles[i].ops = &fake_ops;
        profiles[i].mech = mech;
        profiles[i].window_budget = TOTAL;
        profiles[i].window_ms = WINDOW_MS;
        profiles[i].on_exhausted =
            i == 2 ? TS_ON_EXHAUSTED_REPEAT : TS_ON_EXHAUSTED_DROP;
    }
    ts_pipeline *made = ts_pipeline_new(profiles, 3, 0, limits, rng);
    ck_assert_ptr_nonnull(made);
    return made;
}

static void setup(void)
{
    memset(&seen, 0, sizeof seen);
    rng = ts_rng_new_seeded(42);
    ck_assert_ptr_nonnull(rng);
    ts_pipeline_limits limits = default_limits();
    pipeline = make_pipeline(&limits);
}

static void teardown(void)
{
    ts_pipeline_free(pipeline);
    pipeline = NULL;
    ts_rng_free(rng);
    rng = NULL;
}

/* The fixture's pipeline again, with other user-table limits. */
static void restart_pipeline(size_t max_users, int64_t idle_ttl_ms)
{
    ts_pipeline_free(pipeline);
    ts_pipeline_limits limits = default_limits();
    limits.max_users = max_users;
    limits.idle_ttl_ms = idle_ttl_ms;
    pipeline = make_pipeline(&limits);
}

static ts_input point(const char *user, int64_t ts_ms, const char *profile)
{
    ts_input in = {
        .user_id = user,
        .ts_ms = ts_ms,
        .lat = LAT,
        .lon = LON,
        .has_accuracy = 0,
        .accuracy_m = 0.0,
        .profile = profile,
    };
    return in;
}

/* Process and check the invariants every outcome must satisfy. */
static ts_outcome run(const ts_input *in)
{
    ts_outcome out;
    memset(&out, 0xa5, sizeof out);  /* the pipeline must fill everything */
    ts_pipeline_process(pipeline, in, &out);
    ck_assert_ptr_nonnull(out.user_id);
    ck_assert_int_eq(out.ts_ms, in->ts_ms);
    if (out.sanitized) {
        ck_assert_int_eq(out.reason, TS_REASON_NONE);
        ck_assert_ptr_nonnull(out.profile);
        /* never the raw point */
        ck_assert(out.report.lat != in->lat || out.report.lon != in->lon);
        ck_assert(out.report.lat != in->lat);
        ck_assert(out.report.lon != in->lon);
        ck_assert(out.eps_remaining >= 0.0);
    } else {
        ck_assert_int_ne(out.reason, TS_REASON_NONE);
        ck_assert(strlen(out.detail) > 0);
        ck_assert(memchr(out.detail, '\0', sizeof out.detail) != NULL);
        /* details never carry coordinates */
        ck_assert_ptr_null(strstr(out.detail, "12.34"));
        ck_assert_ptr_null(strstr(out.detail, "98.76"));
        ck_assert(out.report.lat == 0.0 && out.report.lon == 0.0);
    }
    return out;
}

static ts_reason rejected_reason(const ts_input *in)
{
    ts_outcome out = run(in);
    ck_assert_msg(!out.sanitized, "expected a rejection");
    return out.reason;
}

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

/* ------------------------------------------- a real pim profile (model) */

#define PIM_CELL_M 100.0
#define PIM_EARTH_R 6371008.8
#define PIM_DEG (180.0 / 3.14159265358979323846)

/* A 3 x 3 grid of 100 m cells at (0, 0) whose chain jumps anywhere
 * uniformly: enough for the mechanism to run; the test is about the
 * pipeline around it. Written to a temporary file; the caller unlinks.
 * With `stay` the chain never moves (each row is its own cell), so the
 * belief narrows with every release instead of returning to uniform. */
static void write_pim_model_chain(char *path, size_t path_len, int stay)
{
    snprintf(path, path_len, "%s/check_pipeline_model.XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *out = fdopen(fd, "wb");
    ck_assert_ptr_nonnull(out);

    char err[256] = "";
    ts_grid grid;
    double side_deg = 299.0 / PIM_EARTH_R * PIM_DEG;  /* 3 cells a side */
    ck_assert_msg(ts_grid_init(&grid, 0.0, 0.0, side_deg, side_deg,
                               PIM_CELL_M, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(grid.cols * grid.rows, 9);
    static uint64_t row_start[10];
    static uint32_t col[81];
    static double prob[81];
    static double initial[9];
    for (uint32_t from = 0; from < 9; from++) {
        initial[from] = 1.0 / 9;
        if (stay) {
            row_start[from + 1] = from + 1;
            col[from] = from;
            prob[from] = 1.0;
            continue;
        }
        row_start[from + 1] = 9 * (from + 1);
        for (uint32_t to = 0; to < 9; to++) {
            col[9 * from + to] = to;
            prob[9 * from + to] = 1.0 / 9;
        }
    }
    ts_markov markov = {
        .cell_count = 9, .tick_s = 60.0, .nnz = stay ? 9 : 81,
        .row_start = row_start,
        .col = col, .prob = prob, .initial = initial, .fallback = NULL,
    };
    ts_model_source popular = { .markov = &markov, .transitions = 1 };
    ck_assert_msg(ts_model_write(out, &grid, 10.0, &popular, NULL, 0, NULL,
                                 err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(fclose(out), 0);
}

/* The model file's path, and the same as a configuration string literal. */
typedef struct model_file {
    char path[512];
    char literal[600];
} model_file;

static void write_model_file(model_file *file, int stay)
{
    write_pim_model_chain(file->path, sizeof file->path, stay);
    snprintf(file->literal, sizeof file->literal, "\"%s\"", file->path);
}

/* A pipeline from the built-in defaults plus these overrides. */
static ts_pipeline *pipeline_with_overrides(const char *const *overrides,
                                            size_t n, ts_rng *source)
{
    char err[512] = "";
    ts_config *config = ts_config_load(NULL, overrides, n, err, sizeof err);
    ck_assert_msg(config != NULL, "%s", err);
    ts_pipeline *made = ts_config_make_pipeline(config, source, err,
                                                sizeof err);
    ck_assert_msg(made != NULL, "%s", err);
    ts_config_free(config);
    return made;
}

/* Profile "pim" with the given model path (a libconfig string literal)
 * and outside_region policy (NULL: the default). */
static ts_pipeline *pim_pipeline_with(const char *model_literal,
                                      const char *outside, ts_rng *source)
{
    char model_override[640], outside_override[100];
    snprintf(model_override, sizeof model_override, "profiles.pim.model=%s",
             model_literal);
    snprintf(outside_override, sizeof outside_override,
             "profiles.pim.outside_region=\"%s\"", outside ? outside : "");
    const char *overrides[] = { "profiles.pim.mechanism=pim", model_override,
                                "profiles.pim.points_per_window=100",
                                outside_override };
    return pipeline_with_overrides(overrides, outside ? 4 : 3, source);
}

static ts_pipeline *pim_pipeline(const char *model_literal, ts_rng *source)
{
    return pim_pipeline_with(model_literal, NULL, source);
}

static ts_outcome pim_point(ts_pipeline *p, const char *user, int64_t ts_ms,
                            double lat, double lon)
{
    ts_input in = { .user_id = user, .ts_ms = ts_ms, .lat = lat, .lon = lon,
                    .profile = "pim" };
    ts_outcome out;
    ts_pipeline_process(p, &in, &out);
    return out;
}

/* The pim profile's tests build their pipeline from a model file of their
 * own, without the fake mechanism's fixture. */
TS_CASE(pim, 0, NULL, NULL);

/* outside_region = "reject": an out-of-region point is refused as
 * outside_region, counted, and changes nothing: the same seeded run without
 * it publishes exactly the same next point (belief, ledger and rng stream
 * all untouched). */
TS_TEST_IN(pim, test_pim_outside_region)
{
    model_file model;
    write_model_file(&model, 0);
    ts_rng *rng_a = ts_rng_new_seeded(7);
    ts_rng *rng_b = ts_rng_new_seeded(7);
    ck_assert_ptr_nonnull(rng_a);
    ck_assert_ptr_nonnull(rng_b);
    ts_pipeline *with = pim_pipeline_with(model.literal, "reject", rng_a);
    ts_pipeline *without = pim_pipeline_with(model.literal, "reject", rng_b);
    unlink(model.path);

    const double inside = 150.0 / PIM_EARTH_R * PIM_DEG;   /* centre cell */
    const double outside_lat = 0.5, outside_lon = 0.25;    /* ~55 km off */
    ts_outcome a1 = pim_point(with, "u", 1000, inside, inside);
    ts_outcome b1 = pim_point(without, "u", 1000, inside, inside);
    ck_assert_msg(a1.sanitized, "%s", a1.detail);
    ck_assert(b1.sanitized);

    ts_outcome refused = pim_point(with, "u", 61000, outside_lat,
                                   outside_lon);
    ck_assert(!refused.sanitized);
    ck_assert_msg(refused.reason == TS_REASON_OUTSIDE_REGION,
                  "reason %s: %s", ts_reason_name(refused.reason),
                  refused.detail);
    ck_assert_ptr_null(strstr(refused.detail, "0.5"));
    ck_assert_ptr_null(strstr(refused.detail, "0.25"));
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(with);
    ck_assert_uint_eq(stats->rejected[TS_REASON_OUTSIDE_REGION], 1);
    ck_assert_uint_eq(stats->sanitized, 1);

    /* a fresh user whose first point is outside is not kept */
    refused = pim_point(with, "fresh", 61000, outside_lat, outside_lon);
    ck_assert_int_eq(refused.reason, TS_REASON_OUTSIDE_REGION);
    ck_assert_uint_eq(ts_pipeline_user_count(with), 1);

    ts_outcome a2 = pim_point(with, "u", 121000, inside, inside);
    ts_outcome b2 = pim_point(without, "u", 121000, inside, inside);
    ck_assert(a2.sanitized);
    ck_assert(b2.sanitized);
    ck_assert(a2.report.lat == b2.report.lat);
    ck_assert(a2.report.lon == b2.report.lon);
    ck_assert_uint_eq(a2.report.delta_set_size, b2.report.delta_set_size);
    ck_assert_double_eq(a2.eps_spent_window, b2.eps_spent_window);
    ck_assert_double_eq_tol(a2.eps_spent_window, 2.0, 1e-12);

    ts_pipeline_free(with);
    ts_pipeline_free(without);
    ts_rng_free(rng_a);
    ts_rng_free(rng_b);
}
END_TEST

/* The default, outside_region = "surrogate": an out-of-region point is an
 * ordinary release -- sanitized, spent, counted as sanitized, with nothing
 * in the outcome that differs in kind from an in-region point. */
TS_TEST_IN(pim, test_pim_outside_region_default)
{
    model_file model;
    write_model_file(&model, 0);
    ts_rng *rng = ts_rng_new_seeded(7);
    ck_assert_ptr_nonnull(rng);
    ts_pipeline *p = pim_pipeline(model.literal, rng);
    unlink(model.path);

    const double inside = 150.0 / PIM_EARTH_R * PIM_DEG;
    ts_outcome first = pim_point(p, "u", 1000, inside, inside);
    ck_assert_msg(first.sanitized, "%s", first.detail);
    ts_outcome away = pim_point(p, "u", 61000, 0.5, 0.25);
    ck_assert_msg(away.sanitized, "%s", away.detail);
    ck_assert_uint_gt(away.report.delta_set_size, 0);
    ck_assert_double_eq_tol(away.eps_spent_window, 2.0, 1e-12);
    ts_outcome fresh = pim_point(p, "fresh", 61000, 0.5, 0.25);
    ck_assert_msg(fresh.sanitized, "%s", fresh.detail);
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(p);
    ck_assert_uint_eq(stats->sanitized, 3);
    ck_assert_uint_eq(stats->rejected[TS_REASON_OUTSIDE_REGION], 0);
    ts_pipeline_free(p);
    ts_rng_free(rng);
}
END_TEST

/* pim's state (belief, last release time) follows published points only,
 * so a user's next budget window carries it over (window_keeps_belief,
 * the default): with the same seed, a run whose window ends after three
 * releases publishes exactly what a run with one long window does, while
 * its ledger starts again. With window_keeps_belief = false the new window
 * starts from the initial distribution, whose set is all 9 cells. */
static ts_pipeline *pim_window_pipeline(const char *literal, int window_s,
                                        int keep, ts_rng *source)
{
    char model[640], window[100], keeps[100];
    snprintf(model, sizeof model, "profiles.pim.model=%s", literal);
    snprintf(window, sizeof window, "profiles.pim.budget_window_s=%d",
             window_s);
    snprintf(keeps, sizeof keeps, "profiles.pim.window_keeps_belief=%s",
             keep ? "true" : "false");
    const char *overrides[] = { "profiles.pim.mechanism=pim", model,
                                "profiles.pim.points_per_window=100",
                                "profiles.pim.epsilon=8", window, keeps };
    return pipeline_with_overrides(overrides, 6, source);
}

TS_TEST_IN(pim, test_pim_belief_crosses_windows)
{
    model_file model;
    write_model_file(&model, 1);
    ts_rng *rng[3];
    ts_pipeline *p[3];
    /* 0: one long window; 1: 150 s windows, carried; 2: 150 s, reset */
    for (int i = 0; i < 3; i++) {
        rng[i] = ts_rng_new_seeded(11);
        ck_assert_ptr_nonnull(rng[i]);
        p[i] = pim_window_pipeline(model.literal, i == 0 ? 86400 : 150, i != 2,
                                   rng[i]);
    }
    unlink(model.path);

    const double inside = 150.0 / PIM_EARTH_R * PIM_DEG;   /* centre cell */
    ts_outcome out[3];
    for (int step = 0; step < 12; step++) {
        int64_t ts_ms = 1000 + 60000 * (int64_t)step;
        for (int i = 0; i < 3; i++) {
            out[i] = pim_point(p[i], "u", ts_ms, inside, inside);
            ck_assert_msg(out[i].sanitized, "%s", out[i].detail);
        }
        ck_assert(out[1].report.lat == out[0].report.lat);
        ck_assert(out[1].report.lon == out[0].report.lon);
        ck_assert_uint_eq(out[1].report.delta_set_size,
                          out[0].report.delta_set_size);
        /* the ledger is per window all the same: 150 s holds 3 releases */
        ck_assert_double_eq_tol(out[1].eps_spent_window, 8.0 * (step % 3 + 1),
                                1e-12);
        ck_assert_double_eq_tol(out[0].eps_spent_window, 8.0 * (step + 1),
                                1e-12);
        if (step % 3 == 0)
            ck_assert_uint_eq(out[2].report.delta_set_size, 9);
    }
    /* Otherwise the comparison above could not tell carrying from
     * resetting: the belief did narrow. */
    ck_assert_uint_lt(out[0].report.delta_set_size, 9);
    for (int i = 0; i < 3; i++) {
        ts_pipeline_free(p[i]);
        ts_rng_free(rng[i]);
    }
}
END_TEST

/* model = "": the profile is configured but disabled; its updates are
 * rejected as unknown_profile with a detail saying why, and the other
 * profiles run. */
TS_TEST_IN(pim, test_disabled_profile_rejected)
{
    ts_rng *source = ts_rng_new_seeded(9);
    ck_assert_ptr_nonnull(source);
    ts_pipeline *p = pim_pipeline("\"\"", source);
    ck_assert_ptr_null(ts_pipeline_find_profile(p, "pim"));
    ck_assert_uint_eq(ts_pipeline_profile_count(p), 1);

    ts_outcome out = pim_point(p, "u", 1000, 1.0, 1.0);
    ck_assert(!out.sanitized);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_ptr_nonnull(strstr(out.detail, "'pim' is disabled"));
    ck_assert_ptr_nonnull(strstr(out.detail, "no model"));
    ck_assert_uint_eq(ts_pipeline_user_count(p), 0);

    ts_input other = { .user_id = "u", .ts_ms = 1000, .lat = 1.0,
                       .lon = 1.0, .profile = "nope" };
    ts_pipeline_process(p, &other, &out);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_str_eq(out.detail, "unknown profile 'nope'");

    other.profile = NULL;  /* the default, geoind, still works */
    ts_pipeline_process(p, &other, &out);
    ck_assert(out.sanitized);
    ts_pipeline_free(p);
    ts_rng_free(source);
}
END_TEST

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
    return ts_check_main("pipeline", 0, setup, teardown);
}
