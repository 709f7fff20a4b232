/* Configuration: a libconfig file plus `-o path=value` overrides.
 *
 * Overrides use libconfig path syntax (profiles.geoind.radius_m=200). The
 * value is parsed as a libconfig scalar (int, float, bool, "string"); a bare
 * word that is not a scalar is taken as a string. An override of an existing
 * setting must keep a compatible type (an int may set a float); an override
 * of a missing setting creates it and its parent groups.
 *
 * All errors come back as "FILE:LINE: message" (or "override 'x': message"),
 * which is what `--check-config` prints.
 */
#ifndef TRACESAN_DAEMON_CONFIG_H
#define TRACESAN_DAEMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/pipeline.h"

typedef enum ts_socket_kind { TS_SOCKET_PULL = 0, TS_SOCKET_SUB = 1 } ts_socket_kind;
typedef enum ts_socket_mode { TS_SOCKET_BIND = 0, TS_SOCKET_CONNECT = 1 } ts_socket_mode;
/* PUB drops for slow subscribers; PUSH is lossless: when no consumer can
 * take more, the transport stops reading input until one can. */
typedef enum ts_output_kind { TS_OUTPUT_PUB = 0, TS_OUTPUT_PUSH = 1 } ts_output_kind;

#define TS_MAX_SUBSCRIPTIONS 16

typedef struct ts_settings {
    /* input */
    const char *input_endpoint;          /* default tcp://127.0.0.1:7001 */
    ts_socket_kind input_kind;           /* input.type: "pull" | "sub" */
    ts_socket_mode input_mode;           /* input.mode: "bind" | "connect" */
    const char *subscriptions[TS_MAX_SUBSCRIPTIONS]; /* input.subscribe */
    size_t n_subscriptions;              /* default one: "" (everything) */
    int input_hwm;                       /* input.hwm, default 100000 */
    size_t max_message_bytes;            /* input.max_message_bytes, 1 MiB */
    size_t max_batch_updates;            /* input.max_batch_updates, 10000 */
    size_t read_budget;                  /* input.read_budget, 256 msgs/callback */
    int64_t max_future_ms;               /* input.max_future_s * 1000; 0 = off, default 600 s */
    int64_t max_backdate_ms;             /* input.max_backdate_s * 1000; 0 = off, default 86400 s */
    size_t max_queued_mb;                /* input.max_queued_mb, default 64;
                                            0 = bounded by input.hwm only */
    /* output */
    const char *output_endpoint;         /* default tcp://127.0.0.1:7002 */
    ts_socket_mode output_mode;          /* default bind */
    int output_hwm;                      /* default 100000 */
    /* users */
    ts_pipeline_limits limits;           /* users.max_users (1000000),
                                            users.idle_ttl_s (3600),
                                            users.max_user_id_bytes (128) */
    int64_t expire_interval_ms;          /* users.expire_interval_s, default 1 */
    /* log */
    int log_level;                       /* ts_log_level, log.level, default info */
    int log_syslog;                      /* log.syslog, default false */
    /* profiles */
    const char *default_profile;         /* default_profile, default "geoind" */
    /* state (durable store, daemon/store.h) */
    const char *state_dir;               /* state.dir; NULL = in memory only */
    int state_sync;                      /* state.sync: ts_store_sync, "full" */
    size_t state_map_size_mb;            /* state.map_size_mb, default 1024 */
    /* output socket type and transport security (CURVE) */
    ts_output_kind output_kind;          /* output.type: "pub" | "push", default pub */
    int curve_enabled;                   /* security.curve, default false */
    const char *curve_secret_key_file;   /* security.server_secret_key_file */
    const char *curve_public_key_file;   /* security.server_public_key_file */
    const char *curve_input_allow_file;  /* security.input_allow_keys_file */
    const char *curve_output_allow_file; /* security.output_allow_keys_file */
    /* Loaded and checked by ts_config_load when curve_enabled: 32 bytes
     * each. The secret lives on the heap so that copies of the settings do
     * not copy it, and ts_config_free wipes it. curve_output_allow NULL =
     * any CURVE client may subscribe. */
    const unsigned char *curve_server_secret;
    unsigned char curve_server_public[32];
    const struct ts_curve_allow_list *curve_input_allow;
    const struct ts_curve_allow_list *curve_output_allow;
    /* operations (daemon/ops_http.h) */
    const char *http_listen;             /* http.listen "host:port", default
                                            "127.0.0.1:9107"; "" = off */
    size_t http_max_connections;         /* http.max_connections, default 64 */
} ts_settings;

typedef struct ts_config ts_config;

/* Load FILE (NULL = no file, defaults only) and apply overrides in order.
 * Validates every setting and every profile (the mechanism parses its own
 * parameters). Returns NULL and fills err on any problem. */
ts_config *ts_config_load(const char *path, const char *const *overrides,
                          size_t n_overrides, char *err, size_t errlen);
void ts_config_free(ts_config *config);

/* Strings inside point into the config and live as long as it. */
const ts_settings *ts_config_settings(const ts_config *config);
/* The input socket's per-frame cap (ZMQ_MAXMSGSIZE): 2 x
 * input.max_message_bytes. */
size_t ts_input_frame_cap(const ts_settings *settings);
/* The input socket's ZMQ_RCVHWM, in messages per producer connection:
 * input.max_queued_mb over the frame cap, at most input.hwm. */
int ts_input_queue_messages(const ts_settings *settings);

/* Build the profiles array for ts_pipeline_new (ownership passes to the
 * caller). Returns -1 with err filled on failure. */
int ts_config_build_profiles(const ts_config *config, ts_profile **profiles,
                             size_t *n_profiles, size_t *default_index,
                             char *err, size_t errlen);

/* Convenience: profiles + limits -> a pipeline. NULL with err on failure. */
ts_pipeline *ts_config_make_pipeline(const ts_config *config, ts_rng *rng,
                                     char *err, size_t errlen);

#endif
