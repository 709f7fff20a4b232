/* The per-user pipeline's fixture for check_pipeline.c and
 * check_pipeline_clock.c: three profiles of a deterministic fake
 * mechanism that spends a fixed amount per point and publishes the true
 * point shifted by a fixed offset, so every expected number is exact. */
#ifndef TRACESAN_TESTS_SUPPORT_PIPELINE_FIXTURE_H
#define TRACESAN_TESTS_SUPPORT_PIPELINE_FIXTURE_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "mechanisms/rng.h"
#include "tests/support/fake_mechanism.h"

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

static inline ts_pipeline_limits default_limits(void)
{
    ts_pipeline_limits limits = {
        .max_users = 100,
        .idle_ttl_ms = 1000,
        .max_user_id_bytes = 16,
    };
    return limits;
}

/* Profiles "a" (default, drop), "b" (drop) and "r" (repeat). */
static inline ts_pipeline *make_pipeline(const ts_pipeline_limits *limits)
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

static inline void setup(void)
{
    memset(&seen, 0, sizeof seen);
    rng = ts_rng_new_seeded(42);
    ck_assert_ptr_nonnull(rng);
    ts_pipeline_limits limits = default_limits();
    pipeline = make_pipeline(&limits);
}

static inline void teardown(void)
{
    ts_pipeline_free(pipeline);
    pipeline = NULL;
    ts_rng_free(rng);
    rng = NULL;
}

/* The fixture's pipeline again, with other user-table limits. */
static inline void restart_pipeline(size_t max_users, int64_t idle_ttl_ms)
{
    ts_pipeline_free(pipeline);
    ts_pipeline_limits limits = default_limits();
    limits.max_users = max_users;
    limits.idle_ttl_ms = idle_ttl_ms;
    pipeline = make_pipeline(&limits);
}

static inline ts_input point(const char *user, int64_t ts_ms, const char *profile)
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
static inline ts_outcome run(const ts_input *in)
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

static inline ts_reason rejected_reason(const ts_input *in)
{
    ts_outcome out = run(in);
    ck_assert_msg(!out.sanitized, "expected a rejection");
    return out.reason;
}


#endif
