/* The daemon's settings, and the one table that describes them.
 *
 * Every key of the configuration file outside `profiles` is one row of
 * ts_setting_table: where it lives in ts_settings, its type and bounds, its
 * unit, its default, its choices, whether a SIGHUP reload applies it, and a
 * line of doc. The loader (engine/config.c), the defaults, the reload diff
 * and the documentation check (tests/check_settings_docs.c) all walk the
 * same rows, so a new key is one row plus its field, and the shipped file
 * and docs/configuration.md cannot drift from the code unnoticed.
 */
#ifndef TRACESAN_ENGINE_SETTINGS_H
#define TRACESAN_ENGINE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"

typedef enum ts_socket_kind {
    TS_SOCKET_PULL = 0,
    TS_SOCKET_SUB = 1,
    TS_INPUT_JETSTREAM = 2,  /* partitioned, docs/scale-out.md */
} ts_socket_kind;
typedef enum ts_socket_mode { TS_SOCKET_BIND = 0, TS_SOCKET_CONNECT = 1 } ts_socket_mode;
/* PUB drops for slow subscribers; PUSH is lossless: when no consumer can
 * take more, the transport stops reading input until one can. */
typedef enum ts_output_kind {
    TS_OUTPUT_PUB = 0,
    TS_OUTPUT_PUSH = 1,
    TS_OUTPUT_JETSTREAM = 2,
} ts_output_kind;
/* One message per outcome on its own topic, or one OutcomeBatch per input
 * message on topic "batch" (docs/wire-format.md). */
typedef enum ts_output_format {
    TS_OUTPUT_PER_POINT = 0,
    TS_OUTPUT_BATCH = 1,
} ts_output_format;

#define TS_MAX_SUBSCRIPTIONS 16
/* The loader reads every list into an array of TS_MAX_SUBSCRIPTIONS. */
#define TS_MAX_CORS_ORIGINS TS_MAX_SUBSCRIPTIONS

/* Defaults, bounds and meaning of each field: see its row in settings.c. */
typedef struct ts_settings {
    const char *input_endpoint;
    ts_socket_kind input_kind;
    ts_socket_mode input_mode;
    const char *subscriptions[TS_MAX_SUBSCRIPTIONS];
    size_t n_subscriptions;
    int input_hwm;
    size_t max_message_bytes;
    size_t max_batch_updates;
    size_t read_budget;
    int64_t max_future_ms;               /* 0 = off */
    int64_t max_backdate_ms;             /* 0 = off */
    size_t max_queued_mb;                /* 0 = bounded by input_hwm only */
    const char *output_endpoint;
    ts_socket_mode output_mode;
    int output_hwm;
    ts_output_kind output_kind;
    ts_output_format output_format;
    int64_t density_publish_ms;          /* 0 = off */
    ts_pipeline_limits limits;
    int64_t expire_interval_ms;
    int log_level;                       /* ts_log_level */
    int log_syslog;
    const char *default_profile;
    const char *state_dir;               /* NULL = in memory only */
    int state_sync;                      /* ts_store_sync */
    size_t state_map_size_mb;
    int curve_enabled;
    const char *curve_secret_key_file;
    const char *curve_public_key_file;
    const char *curve_input_allow_file;
    const char *curve_output_allow_file;
    /* Loaded and checked by ts_config_load when curve_enabled: 32 bytes
     * each. The secret lives on the heap so that copies of the settings do
     * not copy it, and ts_config_free wipes it. curve_output_allow NULL =
     * any CURVE client may subscribe. */
    const unsigned char *curve_server_secret;
    unsigned char curve_server_public[32];
    const struct ts_curve_allow_list *curve_input_allow;
    const struct ts_curve_allow_list *curve_output_allow;
    const char *http_listen;             /* "" = off */
    size_t http_max_connections;
    /* The dashboard and the feed (docs/operations.md, "Dashboard and
     * feed"). */
    const char *http_dashboard_dir;      /* "" = the installed copy */
    const char *http_leaflet_dir;
    const char *http_tile_url;           /* "" = no tiles, graticule only */
    const char *http_tile_attribution;
    const char *http_token;              /* NULL = no authentication */
    const char *http_token_file;
    const char *http_cors_origins[TS_MAX_CORS_ORIGINS];
    size_t n_http_cors_origins;
    size_t http_feed_max_streams;        /* 0 = no /feed */
    size_t http_feed_buffer_kb;
    int64_t http_feed_stall_ms;
    size_t http_feed_max_rate;           /* 0 = no limit */
    /* input.type = output.type = "jetstream" (docs/scale-out.md). */
    struct ts_nats_settings {
        const char *servers;             /* comma-separated URLs */
        size_t partitions;
        size_t replicas;
        const char *instance_id;         /* "" = host name and pid */
        int64_t lease_ttl_ms;
        size_t fetch_batch;
        size_t max_ack_pending;
        int64_t dedupe_window_ms;
        size_t snapshot_every;
        const char *creds_file;          /* NULL = none */
        const char *nkey_seed_file;
        const char *nkey_public;         /* with nkey_seed_file */
        const char *tls_ca_file;
        const char *tls_cert_file;
        const char *tls_key_file;
    } nats;
} ts_settings;

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
    size_t offset;                   /* offsetof(ts_settings, ...) */
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

const ts_setting_def *ts_setting_table(size_t *n_rows);
const ts_setting_def *ts_setting_find(const char *key);

/* The keys every profile has, whatever its mechanism (the mechanism's own
 * parameters are its ops table's parameter rows). */
typedef struct ts_profile_settings {
    const char *mechanism;               /* required */
    int64_t window_ms;                   /* budget_window_s */
    ts_on_exhausted on_exhausted;
} ts_profile_settings;

const ts_setting_def *ts_profile_setting_table(size_t *n_rows);

/* Every field from its row's default (secrets and allow-lists NULL). */
void ts_settings_defaults(ts_settings *settings);

/* The operations below work on any struct described by rows (`base` is
 * the struct; the profile keys common to every mechanism use them too). */
void ts_setting_defaults(const ts_setting_def *rows, size_t n_rows,
                         void *base);

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

/* Whether the row's value differs between two settings. */
int ts_setting_differs(const ts_setting_def *row, const void *a,
                       const void *b);

/* Calls report(key) for each TS_APPLY_RESTART row whose value differs,
 * and for the server key when its file's content changed under the same
 * path. Returns how many were reported. */
size_t ts_settings_restart_changes(const ts_settings *old,
                                   const ts_settings *new,
                                   void (*report)(const char *key,
                                                  void *arg),
                                   void *arg);

/* The input socket's per-frame cap (ZMQ_MAXMSGSIZE): 2 x
 * input.max_message_bytes. */
size_t ts_input_frame_cap(const ts_settings *settings);
/* The input socket's ZMQ_RCVHWM, in messages per producer connection:
 * input.max_queued_mb over the frame cap, at most input.hwm. */
int ts_input_queue_messages(const ts_settings *settings);
/* The output socket's high-water mark in messages. output.hwm counts
 * outcomes: with output.format = "batch" a message holds up to
 * input.max_batch_updates of them, so a slow subscriber may queue at most
 * output.hwm / max_batch_updates batches (at least 1), no more outcomes
 * than with per-point output. 0 stays 0 (unlimited). */
int ts_output_queue_messages(const ts_settings *settings);

#endif
