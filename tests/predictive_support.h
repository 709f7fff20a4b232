/* Shared by the predictive mechanism's tests: a parameter table standing in
 * for a libconfig profile group, and pipelines built from such tables by
 * hand (the real ledger, no configuration file). */
#ifndef TRACESAN_TESTS_PREDICTIVE_SUPPORT_H
#define TRACESAN_TESTS_PREDICTIVE_SUPPORT_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline.h"
#include "mechanisms/mechanism.h"

#define PARAM_MAX 24

typedef enum param_kind { PARAM_DOUBLE, PARAM_INT, PARAM_STRING } param_kind;

typedef struct param_entry {
    const char *key;
    param_kind kind;
    double d;
    long long i;
    const char *s;
} param_entry;

typedef struct param_table {
    param_entry entries[PARAM_MAX];
    size_t n;
} param_table;

static inline void param_double(param_table *t, const char *key, double v)
{
    ck_assert_uint_lt(t->n, PARAM_MAX);
    t->entries[t->n++] = (param_entry){ key, PARAM_DOUBLE, v, 0, NULL };
}

static inline void param_int(param_table *t, const char *key, long long v)
{
    ck_assert_uint_lt(t->n, PARAM_MAX);
    t->entries[t->n++] = (param_entry){ key, PARAM_INT, 0.0, v, NULL };
}

static inline void param_string(param_table *t, const char *key,
                                const char *v)
{
    ck_assert_uint_lt(t->n, PARAM_MAX);
    t->entries[t->n++] = (param_entry){ key, PARAM_STRING, 0.0, 0, v };
}

/* Last entry wins, like a later -o override. */
static inline const param_entry *param_find(const param_table *t,
                                            const char *key)
{
    for (size_t k = t->n; k > 0; k--)
        if (strcmp(t->entries[k - 1].key, key) == 0)
            return &t->entries[k - 1];
    return NULL;
}

/* Same typing rules as the daemon's libconfig source: integers are
 * accepted for doubles, nothing else converts. */
static inline int table_get_double(void *ctx, const char *key, double *out)
{
    const param_entry *e = param_find(ctx, key);
    if (e == NULL)
        return 0;
    if (e->kind == PARAM_DOUBLE)
        *out = e->d;
    else if (e->kind == PARAM_INT)
        *out = (double)e->i;
    else
        return -1;
    return 1;
}

static inline int table_get_int(void *ctx, const char *key, long long *out)
{
    const param_entry *e = param_find(ctx, key);
    if (e == NULL)
        return 0;
    if (e->kind != PARAM_INT)
        return -1;
    *out = e->i;
    return 1;
}

static inline int table_get_string(void *ctx, const char *key,
                                   const char **out)
{
    const param_entry *e = param_find(ctx, key);
    if (e == NULL)
        return 0;
    if (e->kind != PARAM_STRING)
        return -1;
    *out = e->s;
    return 1;
}

static inline ts_params table_params(param_table *t)
{
    ts_params params = {
        .ctx = t,
        .get_double = table_get_double,
        .get_int = table_get_int,
        .get_string = table_get_string,
    };
    return params;
}

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
