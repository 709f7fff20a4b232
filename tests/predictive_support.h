/* Shared by the predictive mechanism's tests: a parameter table standing in
 * for a libconfig profile group, and pipelines built from such tables by
 * hand (the real ledger, no configuration file). */
#ifndef TRACESAN_TESTS_PREDICTIVE_SUPPORT_H
#define TRACESAN_TESTS_PREDICTIVE_SUPPORT_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "mechanisms/mechanism.h"
#include "tests/support/fake_params.h"

/* A profile for ts_pipeline_new from a mechanism and its parameters. */
static inline void fill_profile(ts_profile *profile, const char *name,
                                const ts_mechanism_ops *ops, param_table *t,
                                int64_t window_ms, ts_on_exhausted policy)
{
    ts_params params = table_params(t);
    char err[256] = "";
    void *mech = NULL;
    int rc = ops->profile_new(&params, &mech, err, sizeof err);
    ck_assert_msg(rc == 0, "profile %s: %s", name, err);
    profile->name = strdup(name);
    ck_assert_ptr_nonnull(profile->name);
    profile->ops = ops;
    profile->mech = mech;
    profile->window_budget = ops->window_budget(mech);
    profile->window_ms = window_ms;
    profile->on_exhausted = policy;
}

static inline ts_pipeline *single_profile_pipeline(
    const char *name, const ts_mechanism_ops *ops, param_table *t,
    int64_t window_ms, ts_on_exhausted policy, ts_rng *rng)
{
    ts_profile *profiles = calloc(1, sizeof *profiles);
    ck_assert_ptr_nonnull(profiles);
    fill_profile(&profiles[0], name, ops, t, window_ms, policy);
    ts_pipeline_limits limits = {
        .max_users = 100000,
        .idle_ttl_ms = INT64_C(1) << 50,
        .max_user_id_bytes = 64,
    };
    ts_pipeline *pipeline = ts_pipeline_new(profiles, 1, 0, &limits, rng);
    ck_assert_ptr_nonnull(pipeline);
    return pipeline;
}

/* The paper's Section 5 configuration: r* = 100 m, eps* = ln 10. */
#define PAPER_RADIUS_M 100.0
#define PAPER_LEVEL 2.302585092994046
#define PAPER_WINDOW_BUDGET (PAPER_LEVEL / PAPER_RADIUS_M)
#define DAY_MS INT64_C(86400000)

#endif
