#include "engine/settings.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const log_levels[] = { "error", "warn", "info", "debug",
                                          NULL };
/* Same order as ts_store_sync in state/store.h. */
static const char *const store_syncs[] = { "full", "batch", "none", NULL };

#define INT_ROW(...) TS_INT_ROW(ts_settings, __VA_ARGS__)
#define CHOICE_ROW(...) TS_CHOICE_ROW(ts_settings, __VA_ARGS__)
#define STRING_ROW(...) TS_STRING_ROW(ts_settings, __VA_ARGS__)
#define BOOL_ROW(...) TS_BOOL_ROW(ts_settings, __VA_ARGS__)
#define MAX_DURATION_S TS_MAX_DURATION_S

#define RESTART TS_APPLY_RESTART
#define RELOAD TS_APPLY_RELOAD

/* What every driver's data path obeys: the intake's limits, the users'
 * table, logging, the store and the default profile. */
static const ts_setting_def setting_table[] = {
    INT_ROW("input.max_message_bytes", max_message_bytes, 64, 1LL << 30, 1,
            "1048576", RESTART, "largest accepted message, in bytes"),
    INT_ROW("input.max_batch_updates", max_batch_updates, 1, 10000000, 1,
            "10000", RESTART, "most updates in one LocationBatch"),
    INT_ROW("input.max_future_s", max_future_ms, 0, MAX_DURATION_S, 1000,
            "600", RESTART, "reject timestamps this far ahead; 0 = off"),
    INT_ROW("input.max_backdate_s", max_backdate_ms, 0, MAX_DURATION_S, 1000,
            "86400", RESTART, "reject timestamps this far behind; 0 = off"),
    INT_ROW("output.density_publish_s", density_publish_ms, 0,
            MAX_DURATION_S, 1000, "10", RESTART,
            "period of the density.<profile> estimates; 0 = off"),
    INT_ROW("users.max_users", limits.max_users, 1, 1LL << 32, 1, "1000000",
            RESTART, "capacity of the per-user table"),
    INT_ROW("users.idle_ttl_s", limits.idle_ttl_ms, 0, MAX_DURATION_S, 1000,
            "3600", RESTART, "event-time idleness before a user may go"),
    INT_ROW("users.max_user_id_bytes", limits.max_user_id_bytes, 1, 4096, 1,
            "128", RESTART, "longest accepted user id, in bytes"),
    INT_ROW("users.expire_interval_s", expire_interval_ms, 1, 86400, 1000,
            "1", RESTART, "wall-clock seconds between expiry sweeps"),
    CHOICE_ROW("log.level", log_level, log_levels, "info", RELOAD,
               "lowest level written"),
    BOOL_ROW("log.syslog", log_syslog, "false", RESTART,
             "log to syslog instead of stderr"),
    { .key = "state.dir", .type = TS_SETTING_STRING,
      TS_ROW_FIELD(ts_settings, state_dir),
      .shipped_value = "/var/lib/tracesand", .flags = TS_SETTING_EMPTY_UNSET,
      .apply = RESTART,
      .doc = "directory of the durable LMDB store; unset = in memory" },
    CHOICE_ROW("state.sync", state_sync, store_syncs, "full", RESTART,
               "what a group commit fsyncs"),
    INT_ROW("state.map_size_mb", state_map_size_mb, 1, 1LL << 24, 1, "1024",
            RESTART, "LMDB map size (the store's maximum), in MiB"),
    STRING_ROW("default_profile", default_profile, "geoind", 0, NULL,
               TS_APPLY_REFUSED, "profile of updates that name none"),
};

const void *ts_setting_context_values(const ts_setting_context *context,
                                      const ts_setting_section *section)
{
    return context->values(context->loader, section);
}

int ts_setting_given(const ts_setting_context *context, const char *key)
{
    return context->given(context->loader, key);
}

void ts_setting_fail(ts_setting_context *context, const char *key,
                     const char *fmt, ...)
{
    char message[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    context->fail(context->loader, key, message);
}

/* LMDB refuses keys longer than this (its default build); a user id is the
 * key of the user's record. */
#define MAX_STORE_KEY_BYTES 511

static void finish_core(void *values, ts_setting_context *context)
{
    const ts_settings *s = values;
    if (s->state_dir != NULL &&
        s->limits.max_user_id_bytes > MAX_STORE_KEY_BYTES)
        ts_setting_fail(context, "state.dir", "state.dir needs "
                        "users.max_user_id_bytes <= %d (user ids are store "
                        "keys)", MAX_STORE_KEY_BYTES);
}

const ts_setting_section ts_core_setting_section = {
    .name = "core",
    TS_SECTION_ROWS(setting_table),
    .size = sizeof(ts_settings),
    .finish = finish_core,
};

static const char *const exhausted_policies[] = { "drop", "repeat", NULL };

#define PROFILE_FIELD(f)                                                     \
    offsetof(ts_profile_settings, f),                                        \
        sizeof(((ts_profile_settings *)0)->f)

static const ts_setting_def profile_setting_table[] = {
    { .key = "mechanism", .type = TS_SETTING_STRING,
      PROFILE_FIELD(mechanism), .apply = TS_APPLY_REFUSED,
      .doc = "registered mechanism name (required)" },
    { .key = "budget_window_s", .type = TS_SETTING_INT,
      PROFILE_FIELD(window_ms), .min = 1, .max = MAX_DURATION_S,
      .scale = 1000, .default_value = "86400", .apply = TS_APPLY_RELOAD,
      .doc = "length of a user's budget window, from each user's next" },
    { .key = "on_exhausted", .type = TS_SETTING_CHOICE,
      PROFILE_FIELD(on_exhausted), .choices = exhausted_policies,
      .default_value = "drop", .apply = TS_APPLY_RELOAD,
      .doc = "reject, or repeat the last point, once the budget is spent" },
};

const ts_setting_def *ts_profile_setting_table(size_t *n_rows)
{
    *n_rows = sizeof profile_setting_table / sizeof profile_setting_table[0];
    return profile_setting_table;
}

const ts_setting_def *ts_setting_find_in(const ts_setting_section *const
                                             *sections,
                                         size_t n, const char *key,
                                         const ts_setting_section **section)
{
    for (size_t s = 0; s < n; s++)
        for (size_t i = 0; i < sections[s]->n_rows; i++)
            if (strcmp(sections[s]->rows[i].key, key) == 0) {
                if (section != NULL)
                    *section = sections[s];
                return &sections[s]->rows[i];
            }
    return NULL;
}

static void *field_of(const ts_setting_def *row, void *base)
{
    return (char *)base + row->offset;
}

static const void *const_field_of(const ts_setting_def *row,
                                  const void *base)
{
    return (const char *)base + row->offset;
}

/* Integer fields are int, int64_t or size_t; the bounds keep every value
 * non-negative and representable in each. */
static long long read_integer(const ts_setting_def *row, const void *s)
{
    const void *field = const_field_of(row, s);
    if (row->size == sizeof(int)) {
        int v;
        memcpy(&v, field, sizeof v);
        return v;
    }
    int64_t v;
    memcpy(&v, field, sizeof v);
    return (long long)v;
}

static void write_integer(const ts_setting_def *row, void *s,
                          long long value)
{
    void *field = field_of(row, s);
    if (row->size == sizeof(int)) {
        int v = (int)value;
        memcpy(field, &v, sizeof v);
    } else {
        int64_t v = (int64_t)value;
        memcpy(field, &v, sizeof v);
    }
}

void ts_setting_store_int(const ts_setting_def *row, void *s,
                          long long file_value)
{
    write_integer(row, s, file_value * (row->scale > 0 ? row->scale : 1));
}

void ts_setting_store_string(const ts_setting_def *row, void *s,
                             const char *value)
{
    if (value != NULL && value[0] == '\0' &&
        (row->flags & TS_SETTING_EMPTY_UNSET))
        value = NULL;
    memcpy(field_of(row, s), &value, sizeof value);
}

void ts_setting_store_list(const ts_setting_def *row, void *s,
                           const char *const *values, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memcpy((char *)field_of(row, s) + i * sizeof values[i], &values[i],
               sizeof values[i]);
    memcpy((char *)s + row->count_offset, &n, sizeof n);
}

static const char *read_string_field(const ts_setting_def *row,
                                     const void *s)
{
    const char *v;
    memcpy(&v, const_field_of(row, s), sizeof v);
    return v;
}

static int choice_index(const ts_setting_def *row, const char *text)
{
    for (int i = 0; row->choices[i] != NULL; i++)
        if (strcmp(row->choices[i], text) == 0)
            return i;
    return -1;
}

void ts_setting_defaults(const ts_setting_def *rows, size_t n_rows,
                         void *s)
{
    for (size_t i = 0; i < n_rows; i++) {
        const ts_setting_def *row = &rows[i];
        const char *def = row->default_value;
        if (def == NULL)
            continue;
        switch (row->type) {
        case TS_SETTING_INT:
            ts_setting_store_int(row, s, strtoll(def, NULL, 10));
            break;
        case TS_SETTING_BOOL:
            write_integer(row, s, strcmp(def, "true") == 0);
            break;
        case TS_SETTING_CHOICE:
            write_integer(row, s, choice_index(row, def));
            break;
        case TS_SETTING_STRING:
            ts_setting_store_string(row, s, def);
            break;
        case TS_SETTING_STRING_LIST:
            ts_setting_store_list(row, s, &def, 1);
            break;
        }
    }
}

static size_t list_count(const ts_setting_def *row, const void *s)
{
    size_t n;
    memcpy(&n, (const char *)s + row->count_offset, sizeof n);
    return n;
}

static const char *list_entry(const ts_setting_def *row, const void *s,
                              size_t i)
{
    const char *v;
    memcpy(&v, (const char *)const_field_of(row, s) + i * sizeof v,
           sizeof v);
    return v;
}

void ts_setting_format(const ts_setting_def *row, const void *s,
                       char *buf, size_t len)
{
    switch (row->type) {
    case TS_SETTING_INT: {
        long long scale = row->scale > 0 ? row->scale : 1;
        snprintf(buf, len, "%lld", read_integer(row, s) / scale);
        return;
    }
    case TS_SETTING_BOOL:
        snprintf(buf, len, "%s", read_integer(row, s) ? "true" : "false");
        return;
    case TS_SETTING_CHOICE:
        snprintf(buf, len, "\"%s\"", row->choices[read_integer(row, s)]);
        return;
    case TS_SETTING_STRING: {
        const char *v = read_string_field(row, s);
        if (v == NULL)
            snprintf(buf, len, "%s", "");
        else
            snprintf(buf, len, "\"%s\"", v);
        return;
    }
    case TS_SETTING_STRING_LIST: {
        size_t used = (size_t)snprintf(buf, len, "[");
        size_t n = list_count(row, s);
        for (size_t i = 0; i < n && used < len; i++)
            used += (size_t)snprintf(buf + used, len - used, "%s \"%s\"",
                                     i > 0 ? "," : "", list_entry(row, s, i));
        if (used < len)
            snprintf(buf + used, len - used, " ]");
        return;
    }
    }
}

void ts_setting_section_defaults(const ts_setting_section *section,
                                 void *values)
{
    memset(values, 0, section->size);
    ts_setting_defaults(section->rows, section->n_rows, values);
}

void ts_settings_defaults(ts_settings *s)
{
    ts_setting_section_defaults(&ts_core_setting_section, s);
}

static int same_text(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

int ts_setting_differs(const ts_setting_def *row, const void *a,
                       const void *b)
{
    switch (row->type) {
    case TS_SETTING_INT:
    case TS_SETTING_BOOL:
    case TS_SETTING_CHOICE:
        return read_integer(row, a) != read_integer(row, b);
    case TS_SETTING_STRING:
        return !same_text(read_string_field(row, a),
                          read_string_field(row, b));
    case TS_SETTING_STRING_LIST:
        if (list_count(row, a) != list_count(row, b))
            return 1;
        for (size_t i = 0; i < list_count(row, a); i++)
            if (!same_text(list_entry(row, a, i), list_entry(row, b, i)))
                return 1;
        return 0;
    }
    return 1;
}

size_t ts_setting_section_restart_changes(const ts_setting_section *section,
                                          const void *old, const void *new,
                                          void (*report)(const char *key,
                                                         void *arg),
                                          void *arg)
{
    size_t n = 0;
    for (size_t i = 0; i < section->n_rows; i++) {
        const ts_setting_def *row = &section->rows[i];
        if (row->apply != TS_APPLY_RESTART ||
            !ts_setting_differs(row, old, new))
            continue;
        report(row->key, arg);
        n++;
    }
    if (section->restart_changes != NULL)
        n += section->restart_changes(old, new, report, arg);
    return n;
}
