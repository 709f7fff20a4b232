/* The settings, and the one table of rows that describes them.
 *
 * Every key of the configuration file outside `profiles` is one row: where
 * it lives in its module's values struct, its type and bounds, its unit,
 * its default, its choices, whether a SIGHUP reload applies it, and a line
 * of doc. Rows are contributed by the modules that use them, a section
 * each (ts_setting_section): the core rows below (intake limits, users,
 * log, state, default profile), the output format's (wire/format.h), the
 * driver choice and each driver's own (drivers/driver_registry.h, e.g. the
 * ZeroMQ sockets and CURVE, NATS), the HTTP endpoint's (ops/). The
 * catalog of every section (ops/catalog.h) is the one table the loader
 * (engine/config.c), the defaults, the reload diff and the documentation
 * check (tests/check_settings_docs.c) walk, so a new key is one row plus
 * its field, and the shipped file and docs/configuration.md cannot drift
 * from the code unnoticed. A module below another never sees its rows.
 */
#ifndef TRACESAN_ENGINE_SETTINGS_H
#define TRACESAN_ENGINE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"

/* The core rows' values. Defaults, bounds and meaning of each field: see
 * its row in settings.c. */
typedef struct ts_settings {
    size_t max_message_bytes;
    size_t max_batch_updates;
    int64_t max_future_ms;               /* 0 = off */
    int64_t max_backdate_ms;             /* 0 = off */
    int64_t density_publish_ms;          /* 0 = off */
    ts_pipeline_limits limits;
    int64_t expire_interval_ms;
    int log_level;                       /* ts_log_level */
    int log_syslog;
    const char *default_profile;
    const char *state_dir;               /* NULL = in memory only */
    int state_sync;                      /* ts_store_sync */
    size_t state_map_size_mb;
} ts_settings;

/* The loader reads every list into an array of at most this many. */
#define TS_SETTING_MAX_LIST 16

typedef enum ts_setting_type {
    TS_SETTING_INT,          /* int, int64_t or size_t field; see scale */
    TS_SETTING_BOOL,         /* int field, 0 or 1 */
    TS_SETTING_STRING,       /* const char * field */
    TS_SETTING_CHOICE,       /* enum (int) field: index into choices */
    TS_SETTING_STRING_LIST,  /* const char *[] field plus a size_t count */
} ts_setting_type;

/* What a SIGHUP reload does with a changed value. */
typedef enum ts_setting_apply {
    TS_APPLY_RESTART,        /* lives in a socket, table or file opened at
                                start: logged as needing a restart */
    TS_APPLY_RELOAD,         /* applied by the reload */
    TS_APPLY_REFUSED,        /* part of the profile set: the whole reload is
                                refused (engine/pipeline_reload.h) */
} ts_setting_apply;

enum {
    /* "" is a meaningful value (http.listen = "" turns it off); without
     * this flag an empty string is an error. */
    TS_SETTING_EMPTY_OK = 1u << 0,
    /* "" stores NULL, as if the key were absent (state.dir). */
    TS_SETTING_EMPTY_UNSET = 1u << 1,
};

typedef struct ts_setting_def {
    const char *key;                 /* "input.hwm"; one level of group */
    ts_setting_type type;
    size_t offset;                   /* offsetof(its values struct, ...) */
    size_t size;                     /* sizeof the field (INT: 4 or 8) */
    size_t count_offset;             /* STRING_LIST: its size_t count */
    long long min, max;              /* INT: in the file's unit;
                                        STRING_LIST: number of entries */
    long long scale;                 /* INT: stored = value * scale */
    /* The default as the file spells it, without quotes ("100000",
     * "true", "tcp://127.0.0.1:7001", "pull"); NULL = unset. */
    const char *default_value;
    /* What conf/tracesand.conf sets when it is not the default. */
    const char *shipped_value;
    const char *const *choices;      /* CHOICE: NULL-terminated */
    unsigned flags;
    ts_setting_apply apply;
    /* Extra check on a string value: fills problem (worded to follow the
     * key, e.g. "must be a ZeroMQ endpoint ...") and returns -1. */
    int (*check)(const char *value, char *problem, size_t len);
    const char *doc;
} ts_setting_def;

/* The keys every profile has, whatever its mechanism (the mechanism's own
 * parameters are its ops table's parameter rows). */
typedef struct ts_profile_settings {
    const char *mechanism;               /* required */
    int64_t window_ms;                   /* budget_window_s */
    ts_on_exhausted on_exhausted;
} ts_profile_settings;

const ts_setting_def *ts_profile_setting_table(size_t *n_rows);

/* Row helpers for a module's table over its struct `values`. */
#define TS_ROW_FIELD(values, f) offsetof(values, f), sizeof(((values *)0)->f)
#define TS_INT_ROW(values, k, f, lo, hi, unit, def, apply_, doc_)              \
    { .key = k, .type = TS_SETTING_INT, TS_ROW_FIELD(values, f), .min = lo,   \
      .max = hi, .scale = unit, .default_value = def, .apply = apply_,      \
      .doc = doc_ }
#define TS_CHOICE_ROW(values, k, f, list, def, apply_, doc_)                   \
    { .key = k, .type = TS_SETTING_CHOICE, TS_ROW_FIELD(values, f),           \
      .choices = list, .default_value = def, .apply = apply_, .doc = doc_ }
#define TS_STRING_ROW(values, k, f, def, flags_, check_, apply_, doc_)         \
    { .key = k, .type = TS_SETTING_STRING, TS_ROW_FIELD(values, f),           \
      .default_value = def, .flags = flags_, .check = check_,               \
      .apply = apply_, .doc = doc_ }
#define TS_BOOL_ROW(values, k, f, def, apply_, doc_)                           \
    { .key = k, .type = TS_SETTING_BOOL, TS_ROW_FIELD(values, f),             \
      .default_value = def, .apply = apply_, .doc = doc_ }
/* `.rows` and `.n_rows` of a section from a static array of rows. */
#define TS_SECTION_ROWS(rows_)                                               \
    .rows = (rows_), .n_rows = sizeof(rows_) / sizeof((rows_)[0])
/* Ten years: generous upper bound for every duration setting, and small
 * enough that millisecond arithmetic on it cannot overflow. */
#define TS_MAX_DURATION_S 315360000LL

/* ------------------------------------------------------------ sections */

typedef struct ts_setting_section ts_setting_section;

/* What a section's finish sees, provided by the loader (engine/config.c):
 * the other sections' values and a way to report a problem at a key's
 * place in the file. Sections use the three functions below. */
typedef struct ts_setting_context {
    void *loader;
    const void *(*values)(void *loader, const ts_setting_section *section);
    int (*given)(void *loader, const char *key);
    void (*fail)(void *loader, const char *key, const char *message);
} ts_setting_context;

struct ts_setting_section {
    const char *name;                /* the module, for messages */
    const ts_setting_def *rows;
    size_t n_rows;
    size_t size;                     /* bytes of the values struct */
    /* Optional: checks across rows and reading the files rows name (key
     * files, token files), once every row of every section is read. A
     * problem goes through ts_setting_fail, which fails the load. */
    void (*finish)(void *values, ts_setting_context *context);
    /* Optional: frees (and wipes) what finish loaded. */
    void (*release)(void *values);
    /* Optional, for the reload log: restart-only changes the rows cannot
     * see (a key file's new content under the same path). Calls report
     * for each; returns how many. */
    size_t (*restart_changes)(const void *old, const void *new,
                              void (*report)(const char *key, void *arg),
                              void *arg);
};

/* Another section's values during finish (NULL when the catalog has no
 * such section). */
const void *ts_setting_context_values(const ts_setting_context *context,
                                      const ts_setting_section *section);
/* Fails the load with "WHERE: message", WHERE the place of `key` in the
 * file or overrides (its group's, or the file's, when it is absent). */
void ts_setting_fail(ts_setting_context *context, const char *key,
                     const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether `key` is given (by the file or an override). */
int ts_setting_given(const ts_setting_context *context, const char *key);

/* The core rows (engine). */
extern const ts_setting_section ts_core_setting_section;

/* The row of `key` among `n` sections, and its section in *section (may
 * be NULL); NULL when no section has it. */
const ts_setting_def *ts_setting_find_in(const ts_setting_section *const
                                             *sections,
                                         size_t n, const char *key,
                                         const ts_setting_section **section);

/* Every field from its row's default. */
void ts_settings_defaults(ts_settings *settings);

/* The operations below work on any struct described by rows (`base` is
 * the struct; the profile keys common to every mechanism use them too). */
void ts_setting_defaults(const ts_setting_def *rows, size_t n_rows,
                         void *base);
/* A section's values struct from its rows' defaults (zeroed first). */
void ts_setting_section_defaults(const ts_setting_section *section,
                                 void *values);

/* The loader's stores, for values already checked against the row:
 * an INT in the file's unit (scaled here), a BOOL or CHOICE index, a
 * string ("" is NULL for EMPTY_UNSET rows), or a list of at most
 * row->max strings. */
void ts_setting_store_int(const ts_setting_def *row, void *base,
                          long long file_value);
void ts_setting_store_string(const ts_setting_def *row, void *base,
                             const char *value);
void ts_setting_store_list(const ts_setting_def *row, void *base,
                           const char *const *values, size_t n);

/* Writes the row's value as the file spells it (`100000`, `"pull"`,
 * `[ "a", "b" ]`, `true`); an unset string is written as "". */
void ts_setting_format(const ts_setting_def *row, const void *base,
                       char *buf, size_t len);

/* Whether the row's value differs between two values structs. */
int ts_setting_differs(const ts_setting_def *row, const void *a,
                       const void *b);

/* Calls report(key) for each TS_APPLY_RESTART row of the section whose
 * value differs, then the section's own restart_changes. Returns how many
 * were reported. */
size_t ts_setting_section_restart_changes(const ts_setting_section *section,
                                          const void *old, const void *new,
                                          void (*report)(const char *key,
                                                         void *arg),
                                          void *arg);

#endif
