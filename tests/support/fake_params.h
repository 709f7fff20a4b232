/* A parameter table standing in for a libconfig profile group, behind the
 * same ts_params interface the daemon's configuration source implements,
 * with the same typing rules: an integer is accepted where a double is
 * asked, nothing else converts. Later entries win, like a later -o
 * override. */
#ifndef TRACESAN_TESTS_SUPPORT_FAKE_PARAMS_H
#define TRACESAN_TESTS_SUPPORT_FAKE_PARAMS_H

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "mechanisms/mechanism.h"

#define PARAM_MAX 24

typedef enum param_kind {
    PARAM_DOUBLE,
    PARAM_INT,
    PARAM_STRING,
    PARAM_BOOL,
    PARAM_MODEL,
} param_kind;

typedef struct param_entry {
    const char *key;
    param_kind kind;
    double d;
    long long i;            /* PARAM_INT; 0/1 for PARAM_BOOL */
    const char *s;
    const void *model;      /* PARAM_MODEL: an opened ts_model */
} param_entry;

typedef struct param_table {
    param_entry entries[PARAM_MAX];
    size_t n;
} param_table;

static inline void param_add(param_table *t, param_entry entry)
{
    ck_assert_uint_lt(t->n, PARAM_MAX);
    t->entries[t->n++] = entry;
}

static inline void param_double(param_table *t, const char *key, double v)
{
    param_add(t, (param_entry){ .key = key, .kind = PARAM_DOUBLE, .d = v });
}

static inline void param_int(param_table *t, const char *key, long long v)
{
    param_add(t, (param_entry){ .key = key, .kind = PARAM_INT, .i = v });
}

static inline void param_string(param_table *t, const char *key,
                                const char *v)
{
    param_add(t, (param_entry){ .key = key, .kind = PARAM_STRING, .s = v });
}

static inline void param_bool(param_table *t, const char *key, int v)
{
    param_add(t, (param_entry){ .key = key, .kind = PARAM_BOOL, .i = v });
}

static inline void param_model(param_table *t, const char *key,
                               const void *model)
{
    param_add(t, (param_entry){ .key = key, .kind = PARAM_MODEL,
                                .model = model });
}

static inline const param_entry *param_find(const param_table *t,
                                            const char *key)
{
    for (size_t k = t->n; k > 0; k--)
        if (strcmp(t->entries[k - 1].key, key) == 0)
            return &t->entries[k - 1];
    return NULL;
}

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

static inline int table_get_bool(void *ctx, const char *key, int *out)
{
    const param_entry *e = param_find(ctx, key);
    if (e == NULL)
        return 0;
    if (e->kind != PARAM_BOOL)
        return -1;
    *out = e->i != 0;
    return 1;
}

/* A model key names a path in a real configuration; here the entry holds
 * the opened model itself. */
static inline const void *table_get_model(void *ctx, const char *key,
                                          char *err, size_t errlen)
{
    const param_entry *e = param_find(ctx, key);
    if (e == NULL || e->kind != PARAM_MODEL || e->model == NULL) {
        snprintf(err, errlen, "%s is required", key);
        return NULL;
    }
    return e->model;
}

static inline const char *table_key_at(void *ctx, size_t index)
{
    const param_table *t = ctx;
    return index < t->n ? t->entries[index].key : NULL;
}

static inline ts_params table_params(param_table *t)
{
    ts_params params = {
        .ctx = t,
        .get_double = table_get_double,
        .get_int = table_get_int,
        .get_string = table_get_string,
        .get_model = table_get_model,
        .get_bool = table_get_bool,
        .key_at = table_key_at,
    };
    return params;
}

#endif
