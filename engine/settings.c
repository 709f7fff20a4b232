#include "engine/settings.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_http.h"

/* Ten years: generous upper bound for every duration setting, and small
 * enough that millisecond arithmetic on it cannot overflow. */
#define MAX_DURATION_S 315360000LL

static int check_endpoint(const char *value, char *problem, size_t len)
{
    if (strstr(value, "://") != NULL)
        return 0;
    snprintf(problem, len, "must be a ZeroMQ endpoint such as "
             "tcp://127.0.0.1:7001");
    return -1;
}

static int check_listen(const char *value, char *problem, size_t len)
{
    if (value[0] == '\0')
        return 0;
    char host[256];
    char why[256];
    unsigned port;
    if (ts_ops_http_parse_listen(value, host, sizeof host, &port, why,
                                 sizeof why) == 0)
        return 0;
    snprintf(problem, len, "%s (use \"127.0.0.1:9107\", or \"\" to turn the "
             "endpoint off)", why);
    return -1;
}

/* A Leaflet URL template: fetched by the browser, never by the daemon. */
static int check_tile_url(const char *value, char *problem, size_t len)
{
    if (value[0] == '\0')
        return 0;
    int printable = 1;
    for (const char *p = value; *p != '\0'; p++)
        if (*p < 0x21 || *p > 0x7e || strchr("\"'<>\\", *p) != NULL)
            printable = 0;
    if (printable &&
        (strncmp(value, "https://", 8) == 0 ||
         strncmp(value, "http://", 7) == 0) &&
        strstr(value, "{z}") != NULL && strstr(value, "{x}") != NULL &&
        strstr(value, "{y}") != NULL)
        return 0;
    snprintf(problem, len, "must be an http(s) URL template with {z}, {x} "
             "and {y}, e.g. \"https://tile.example.org/{z}/{x}/{y}.png\", "
             "or \"\" for no tiles");
    return -1;
}

static const char *const socket_types[] = { "pull", "sub", "jetstream",
                                           NULL };
static const char *const socket_modes[] = { "bind", "connect", NULL };
static const char *const output_types[] = { "pub", "push", "jetstream",
                                           NULL };
static const char *const output_formats[] = { "point", "batch", NULL };
static const char *const log_levels[] = { "error", "warn", "info", "debug",
                                          NULL };
/* Same order as ts_store_sync in state/store.h. */
static const char *const store_syncs[] = { "full", "batch", "none", NULL };

#define FIELD(f) offsetof(ts_settings, f), sizeof(((ts_settings *)0)->f)

#define INT_ROW(k, f, lo, hi, unit, def, apply_, doc_)                       \
    { .key = k, .type = TS_SETTING_INT, FIELD(f), .min = lo, .max = hi,     \
      .scale = unit, .default_value = def, .apply = apply_, .doc = doc_ }
#define CHOICE_ROW(k, f, list, def, apply_, doc_)                            \
    { .key = k, .type = TS_SETTING_CHOICE, FIELD(f), .choices = list,       \
      .default_value = def, .apply = apply_, .doc = doc_ }
#define STRING_ROW(k, f, def, flags_, check_, apply_, doc_)                  \
    { .key = k, .type = TS_SETTING_STRING, FIELD(f), .default_value = def,  \
      .flags = flags_, .check = check_, .apply = apply_, .doc = doc_ }
#define BOOL_ROW(k, f, def, apply_, doc_)                                    \
    { .key = k, .type = TS_SETTING_BOOL, FIELD(f), .default_value = def,    \
      .apply = apply_, .doc = doc_ }

#define RESTART TS_APPLY_RESTART
#define RELOAD TS_APPLY_RELOAD

static const ts_setting_def setting_table[] = {
    STRING_ROW("input.endpoint", input_endpoint, "tcp://127.0.0.1:7001", 0,
               check_endpoint, RESTART,
               "ZeroMQ endpoint the updates arrive on"),
    CHOICE_ROW("input.type", input_kind, socket_types, "pull", RESTART,
               "PULL socket (producers PUSH), SUB socket (producers PUB) "
               "or JetStream partitions (docs/scale-out.md)"),
    CHOICE_ROW("input.mode", input_mode, socket_modes, "bind", RESTART,
               "bind the input endpoint or connect to it"),
    { .key = "input.subscribe", .type = TS_SETTING_STRING_LIST,
      FIELD(subscriptions),
      .count_offset = offsetof(ts_settings, n_subscriptions),
      .min = 1, .max = TS_MAX_SUBSCRIPTIONS, .default_value = "",
      .flags = TS_SETTING_EMPTY_OK, .apply = RESTART,
      .doc = "topic prefixes a SUB input subscribes to; \"\" = all" },
    INT_ROW("input.hwm", input_hwm, 0, INT_MAX, 1, "100000", RESTART,
            "receive high-water mark in messages; 0 = unlimited"),
    INT_ROW("input.max_queued_mb", max_queued_mb, 0, 1LL << 20, 1, "64",
            RESTART, "most input queued per producer, in MiB"),
    INT_ROW("input.max_message_bytes", max_message_bytes, 64, 1LL << 30, 1,
            "1048576", RESTART, "largest accepted message, in bytes"),
    INT_ROW("input.max_batch_updates", max_batch_updates, 1, 10000000, 1,
            "10000", RESTART, "most updates in one LocationBatch"),
    INT_ROW("input.read_budget", read_budget, 1, 1000000, 1, "256", RESTART,
            "messages read per wake-up before yielding"),
    INT_ROW("input.max_future_s", max_future_ms, 0, MAX_DURATION_S, 1000,
            "600", RESTART, "reject timestamps this far ahead; 0 = off"),
    INT_ROW("input.max_backdate_s", max_backdate_ms, 0, MAX_DURATION_S, 1000,
            "86400", RESTART, "reject timestamps this far behind; 0 = off"),
    STRING_ROW("output.endpoint", output_endpoint, "tcp://127.0.0.1:7002", 0,
               check_endpoint, RESTART,
               "ZeroMQ endpoint sanitized points are published on"),
    CHOICE_ROW("output.mode", output_mode, socket_modes, "bind", RESTART,
               "bind the output endpoint or connect to it"),
    INT_ROW("output.hwm", output_hwm, 0, INT_MAX, 1, "100000", RESTART,
            "send high-water mark in outcomes; 0 = unlimited"),
    CHOICE_ROW("output.type", output_kind, output_types, "pub", RESTART,
               "PUB (best effort), PUSH (lossless, pauses input) or "
               "JetStream (with input.type jetstream)"),
    CHOICE_ROW("output.format", output_format, output_formats, "point",
               RESTART, "one message per outcome, or one OutcomeBatch per "
               "input message"),
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
    { .key = "state.dir", .type = TS_SETTING_STRING, FIELD(state_dir),
      .shipped_value = "/var/lib/tracesand", .flags = TS_SETTING_EMPTY_UNSET,
      .apply = RESTART,
      .doc = "directory of the durable LMDB store; unset = in memory" },
    CHOICE_ROW("state.sync", state_sync, store_syncs, "full", RESTART,
               "what a group commit fsyncs"),
    INT_ROW("state.map_size_mb", state_map_size_mb, 1, 1LL << 24, 1, "1024",
            RESTART, "LMDB map size (the store's maximum), in MiB"),
    STRING_ROW("http.listen", http_listen, "127.0.0.1:9107",
               TS_SETTING_EMPTY_OK, check_listen, RESTART,
               "operator HTTP endpoint host:port; \"\" = off"),
    INT_ROW("http.max_connections", http_max_connections, 1, 65536, 1, "64",
            RESTART, "most HTTP connections open at once"),
    STRING_ROW("http.dashboard_dir", http_dashboard_dir, "",
               TS_SETTING_EMPTY_OK, NULL, RESTART,
               "the dashboard's files; \"\" = the installed copy"),
    STRING_ROW("http.leaflet_dir", http_leaflet_dir,
               "/usr/share/javascript/leaflet", 0, NULL, RESTART,
               "Leaflet's files (Debian package libjs-leaflet)"),
    STRING_ROW("http.tile_url", http_tile_url, "", TS_SETTING_EMPTY_OK,
               check_tile_url, RESTART,
               "map tile URL template for the dashboard; \"\" = none"),
    STRING_ROW("http.tile_attribution", http_tile_attribution, "",
               TS_SETTING_EMPTY_OK, NULL, RESTART,
               "attribution text the tile server requires"),
    STRING_ROW("http.token", http_token, NULL, TS_SETTING_EMPTY_UNSET, NULL,
               RESTART, "bearer token the dashboard's data, the feed and "
               "/metrics require; unset = none"),
    STRING_ROW("http.token_file", http_token_file, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "file holding the bearer token (mode 0600)"),
    { .key = "http.cors_origins", .type = TS_SETTING_STRING_LIST,
      FIELD(http_cors_origins),
      .count_offset = offsetof(ts_settings, n_http_cors_origins),
      .min = 0, .max = TS_MAX_CORS_ORIGINS, .apply = RESTART,
      .doc = "origins whose pages may read the endpoint (CORS)" },
    INT_ROW("http.feed_max_streams", http_feed_max_streams, 0, 4096, 1,
            "16", RESTART, "most /feed streams open at once; 0 = no feed"),
    INT_ROW("http.feed_buffer_kb", http_feed_buffer_kb, 1, 65536, 1, "1024",
            RESTART, "events queued per feed stream, in KiB"),
    INT_ROW("http.feed_stall_timeout_s", http_feed_stall_ms, 1, 3600, 1000,
            "10", RESTART, "a stream behind this long is cut off"),
    INT_ROW("http.feed_max_rate", http_feed_max_rate, 0, 10000000, 1,
            "20000", RESTART, "events the feed encodes per second; 0 = any"),
    BOOL_ROW("security.curve", curve_enabled, "false", RESTART,
             "CURVE encryption and client authentication on both sockets"),
    STRING_ROW("security.server_secret_key_file", curve_secret_key_file,
               NULL, 0, NULL, RESTART, "the daemon's secret key (Z85)"),
    STRING_ROW("security.server_public_key_file", curve_public_key_file,
               NULL, 0, NULL, RESTART, "the daemon's public key (Z85)"),
    /* The allow-lists are read again on every reload. */
    STRING_ROW("security.input_allow_keys_file", curve_input_allow_file,
               NULL, 0, NULL, RELOAD, "publishers allowed on the input"),
    STRING_ROW("security.output_allow_keys_file", curve_output_allow_file,
               NULL, 0, NULL, RELOAD, "subscribers allowed on the output"),
    /* Scale-out on NATS JetStream (drivers/jetstream/jetstream_mode.h). */
    STRING_ROW("nats.servers", nats.servers, "nats://127.0.0.1:4222", 0,
               NULL, RESTART, "NATS server URLs, comma-separated"),
    INT_ROW("nats.partitions", nats.partitions, 1, 4096, 1, "16", RESTART,
            "input partitions P (subjects tracesan.in.<p>)"),
    INT_ROW("nats.replicas", nats.replicas, 1, 5, 1, "1", RESTART,
            "replicas of the streams and the lease bucket"),
    STRING_ROW("nats.instance_id", nats.instance_id, "",
               TS_SETTING_EMPTY_OK, NULL, RESTART,
               "this instance's name in leases; \"\" = host name and pid"),
    INT_ROW("nats.lease_ttl_s", nats.lease_ttl_ms, 1, 3600, 1000, "10",
            RESTART, "a partition lease not renewed this long is free"),
    INT_ROW("nats.fetch_batch", nats.fetch_batch, 1, 100000, 1, "256",
            RESTART, "input messages fetched per partition per group"),
    INT_ROW("nats.max_ack_pending", nats.max_ack_pending, 1, 1000000, 1,
            "4096", RESTART, "unacknowledged input messages per partition"),
    INT_ROW("nats.dedupe_window_s", nats.dedupe_window_ms, 1, 604800, 1000,
            "600", RESTART, "output stream duplicate window"),
    INT_ROW("nats.snapshot_every", nats.snapshot_every, 1, 1000000, 1,
            "256", RESTART, "changelog records between two snapshots"),
    STRING_ROW("nats.creds_file", nats.creds_file, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "NATS credentials file (JWT and NKey seed)"),
    STRING_ROW("nats.nkey_seed_file", nats.nkey_seed_file, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "NKey seed file (without a creds file)"),
    STRING_ROW("nats.nkey_public", nats.nkey_public, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "the user's public NKey, with nkey_seed_file"),
    STRING_ROW("nats.tls_ca_file", nats.tls_ca_file, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "CA certificates: set, the connection requires TLS"),
    STRING_ROW("nats.tls_cert_file", nats.tls_cert_file, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "client certificate chain for TLS"),
    STRING_ROW("nats.tls_key_file", nats.tls_key_file, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "client private key for TLS"),
    STRING_ROW("default_profile", default_profile, "geoind", 0, NULL,
               TS_APPLY_REFUSED, "profile of updates that name none"),
};

#define N_ROWS (sizeof setting_table / sizeof setting_table[0])

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

const ts_setting_def *ts_setting_table(size_t *n_rows)
{
    *n_rows = N_ROWS;
    return setting_table;
}

const ts_setting_def *ts_setting_find(const char *key)
{
    for (size_t i = 0; i < N_ROWS; i++)
        if (strcmp(setting_table[i].key, key) == 0)
            return &setting_table[i];
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

void ts_settings_defaults(ts_settings *s)
{
    memset(s, 0, sizeof *s);
    ts_setting_defaults(setting_table, N_ROWS, s);
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

size_t ts_settings_restart_changes(const ts_settings *old,
                                   const ts_settings *new,
                                   void (*report)(const char *key, void *arg),
                                   void *arg)
{
    size_t n = 0;
    int key_file_changed = 0;
    for (size_t i = 0; i < N_ROWS; i++) {
        const ts_setting_def *row = &setting_table[i];
        if (row->apply != TS_APPLY_RESTART ||
            !ts_setting_differs(row, old, new))
            continue;
        if (strcmp(row->key, "security.server_public_key_file") == 0)
            key_file_changed = 1;
        report(row->key, arg);
        n++;
    }
    /* The same path may hold a new key: the sockets keep the old one. */
    if (!key_file_changed && old->curve_enabled && new->curve_enabled &&
        memcmp(old->curve_server_public, new->curve_server_public,
               sizeof old->curve_server_public) != 0) {
        report("the server key in security.server_public_key_file", arg);
        n++;
    }
    return n;
}

size_t ts_input_frame_cap(const ts_settings *s)
{
    /* Twice the accepted size: a message up to there still arrives and is
     * answered with an `oversized` rejection that says its size; past it
     * libzmq drops the peer's connection without reading on. */
    return s->max_message_bytes * 2;
}

int ts_output_queue_messages(const ts_settings *s)
{
    if (s->output_format != TS_OUTPUT_BATCH || s->output_hwm == 0)
        return s->output_hwm;
    size_t batches = (size_t)s->output_hwm / s->max_batch_updates;
    return batches > 0 ? (int)batches : 1;
}

int ts_input_queue_messages(const ts_settings *s)
{
    if (s->max_queued_mb == 0)
        return s->input_hwm;
    /* ZeroMQ's HWM counts messages; the bound wanted is in bytes. Sized
     * for the largest frame the socket lets in, the byte bound holds
     * whatever the producers send. */
    size_t n = (s->max_queued_mb << 20) / ts_input_frame_cap(s);
    if (n < 1)
        n = 1;
    if (s->input_hwm > 0 && (size_t)s->input_hwm < n)
        n = (size_t)s->input_hwm;
    return n > INT_MAX ? INT_MAX : (int)n;
}
