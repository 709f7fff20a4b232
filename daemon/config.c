#include "daemon/config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libconfig.h>

#include "daemon/curve_keys.h"
#include "daemon/log.h"
#include "daemon/ops_http.h"
#include "inference/model_file.h"

/* Ten years: generous upper bound for every duration setting, and small
 * enough that millisecond arithmetic on it cannot overflow. */
#define MAX_DURATION_S INT64_C(315360000)
#define MAX_PROFILE_KEYS 32
#define MAX_PARAM_NAME 64

typedef struct profile_desc {
    config_setting_t *group;
    const char *name;
    const ts_mechanism_ops *ops;
    int64_t window_ms;
    ts_on_exhausted on_exhausted;
    /* `model = ""`: shipped in the file but not usable until a model path
     * is set; left out of the pipeline (see ts_config_build_profiles). */
    int disabled;
} profile_desc;

/* Model files named by profiles (key `model`), opened once per path and
 * kept until ts_config_free. Held through a pointer so the scratch views
 * of ts_config_build_profiles share it. */
typedef struct model_entry {
    char *path;
    ts_model *model;
    struct model_entry *next;
} model_entry;

typedef struct model_cache {
    model_entry *head;
} model_cache;

struct ts_config {
    config_t cfg;
    model_cache *models;
    const char *origin;          /* the file path, or "(defaults)" */
    char *path;
    char **overrides;            /* copies: settings' hooks point at them */
    size_t n_overrides;
    ts_settings settings;
    profile_desc *profiles;
    size_t n_profiles;
    size_t default_index;
    ts_curve_allow_list input_allow;   /* security.input_allow_keys_file */
    ts_curve_allow_list output_allow;  /* security.output_allow_keys_file */
    unsigned char *server_secret;      /* settings.curve_server_secret */
    char *err;                   /* first error wins */
    size_t errlen;
    int failed;
};

static const char *const common_profile_keys[] = {
    "mechanism", "budget_window_s", "on_exhausted", NULL
};

/* ------------------------------------------------------------ errors */

/* Where a setting came from: the override that set it or one of its
 * parents, else its file and line, else the nearest parent's. */
static void describe_origin(const ts_config *config,
                            const config_setting_t *setting, char *buf,
                            size_t len)
{
    for (const config_setting_t *s = setting; s != NULL; s = s->parent) {
        if (config_setting_get_hook(s) != NULL) {
            snprintf(buf, len, "override '%s'",
                     (const char *)config_setting_get_hook(s));
            return;
        }
        if (config_setting_source_line(s) > 0) {
            const char *file = config_setting_source_file(s);
            snprintf(buf, len, "%s:%u", file != NULL ? file : config->origin,
                     config_setting_source_line(s));
            return;
        }
    }
    snprintf(buf, len, "%s", config->origin);
}

static void fail_raw(ts_config *config, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail_raw(ts_config *config, const char *fmt, ...)
{
    if (config->failed)
        return;
    config->failed = 1;
    if (config->err == NULL || config->errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(config->err, config->errlen, fmt, ap);
    va_end(ap);
}

static void fail_at(ts_config *config, const config_setting_t *setting,
                    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail_at(ts_config *config, const config_setting_t *setting,
                    const char *fmt, ...)
{
    if (config->failed)
        return;
    char where[512];
    char message[512];
    describe_origin(config, setting, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fail_raw(config, "%s: %s", where, message);
}

/* "profiles.geoind.radius_m" */
static void setting_path(const config_setting_t *setting, char *buf,
                         size_t len)
{
    const char *names[16];
    size_t depth = 0;
    for (const config_setting_t *s = setting; s != NULL && s->parent != NULL;
         s = s->parent) {
        if (depth == sizeof names / sizeof names[0])
            break;
        names[depth++] = config_setting_name(s) != NULL
                             ? config_setting_name(s) : "[]";
    }
    size_t used = 0;
    buf[0] = '\0';
    while (depth > 0 && used < len) {
        int n = snprintf(buf + used, len - used, "%s%s", used > 0 ? "." : "",
                         names[--depth]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static const char *type_name(int type)
{
    switch (type) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT: return "an integer";
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    default: return "nothing";
    }
}

/* --------------------------------------------------------- overrides */

static int valid_setting_name(const char *name)
{
    /* libconfig's rule: [A-Za-z*][-A-Za-z0-9_*]* */
    const unsigned char *p = (const unsigned char *)name;
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '*'))
        return 0;
    for (p++; *p != '\0'; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
              (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '*'))
            return 0;
    return 1;
}

static int is_integer_type(int type)
{
    return type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64;
}

static config_setting_t *copy_setting(config_setting_t *parent,
                                      const char *name,
                                      const config_setting_t *src)
{
    int type = config_setting_type(src);
    config_setting_t *copy = config_setting_add(parent, name, type);
    if (copy == NULL)
        return NULL;
    int ok = CONFIG_TRUE;
    switch (type) {
    case CONFIG_TYPE_INT:
        ok = config_setting_set_int(copy, config_setting_get_int(src));
        break;
    case CONFIG_TYPE_INT64:
        ok = config_setting_set_int64(copy, config_setting_get_int64(src));
        break;
    case CONFIG_TYPE_FLOAT:
        ok = config_setting_set_float(copy, config_setting_get_float(src));
        break;
    case CONFIG_TYPE_STRING:
        ok = config_setting_set_string(copy, config_setting_get_string(src));
        break;
    case CONFIG_TYPE_BOOL:
        ok = config_setting_set_bool(copy, config_setting_get_bool(src));
        break;
    default:
        for (int i = 0; i < config_setting_length(src); i++) {
            const config_setting_t *elem = config_setting_get_elem(src, i);
            if (copy_setting(copy, type == CONFIG_TYPE_GROUP
                                       ? config_setting_name(elem) : NULL,
                             elem) == NULL)
                return NULL;
        }
        break;
    }
    return ok ? copy : NULL;
}

/* Assign a scalar to an existing scalar setting. Returns 0 on success, -1
 * on a type mismatch. */
static int assign_scalar(config_setting_t *target, const config_setting_t *value)
{
    int target_type = config_setting_type(target);
    int value_type = config_setting_type(value);
    switch (target_type) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        if (!is_integer_type(value_type))
            return -1;
        return config_setting_set_int64(target,
                                        config_setting_get_int64(value))
                   ? 0 : -1;
    case CONFIG_TYPE_FLOAT:
        if (value_type == CONFIG_TYPE_FLOAT)
            return config_setting_set_float(target,
                                            config_setting_get_float(value))
                       ? 0 : -1;
        if (is_integer_type(value_type))
            return config_setting_set_float(
                       target, (double)config_setting_get_int64(value))
                       ? 0 : -1;
        return -1;
    case CONFIG_TYPE_STRING:
        if (value_type != CONFIG_TYPE_STRING)
            return -1;
        return config_setting_set_string(target,
                                         config_setting_get_string(value))
                   ? 0 : -1;
    case CONFIG_TYPE_BOOL:
        if (value_type != CONFIG_TYPE_BOOL)
            return -1;
        return config_setting_set_bool(target, config_setting_get_bool(value))
                   ? 0 : -1;
    default:
        return -1;
    }
}

/* Parse the value text as a libconfig value into `scratch` (initialised by
 * the caller); anything that does not parse as exactly one value is taken
 * as a bare string. */
static int parse_override_value(const char *text, config_t *scratch,
                                const config_setting_t **value)
{
    if (strpbrk(text, "\r\n") == NULL) {
        size_t len = strlen(text) + 16;
        char *source = malloc(len);
        if (source == NULL)
            return -1;
        snprintf(source, len, "v = %s;", text);
        int parsed = config_read_string(scratch, source);
        free(source);
        config_setting_t *root = config_root_setting(scratch);
        if (parsed == CONFIG_TRUE && config_setting_length(root) == 1 &&
            config_setting_get_member(root, "v") != NULL) {
            *value = config_setting_get_member(root, "v");
            return 0;
        }
        config_destroy(scratch);
        config_init(scratch);
    }
    config_setting_t *string =
        config_setting_add(config_root_setting(scratch), "v",
                           CONFIG_TYPE_STRING);
    if (string == NULL || !config_setting_set_string(string, text))
        return -1;
    *value = string;
    return 0;
}

static void apply_override(ts_config *config, char *override)
{
    const char *eq = strchr(override, '=');
    if (eq == NULL || eq == override) {
        fail_raw(config, "override '%s': expected path=value", override);
        return;
    }
    size_t path_len = (size_t)(eq - override);
    char *path = strndup(override, path_len);
    if (path == NULL) {
        fail_raw(config, "override '%s': out of memory", override);
        return;
    }

    config_t scratch;
    config_init(&scratch);
    const config_setting_t *value = NULL;
    if (parse_override_value(eq + 1, &scratch, &value) < 0) {
        fail_raw(config, "override '%s': out of memory", override);
        goto done;
    }

    config_setting_t *parent = config_root_setting(&config->cfg);
    char *save = NULL;
    char *name = strtok_r(path, ".:/", &save);
    if (name == NULL) {
        fail_raw(config, "override '%s': empty setting path", override);
        goto done;
    }
    for (;;) {
        if (!valid_setting_name(name)) {
            fail_raw(config, "override '%s': invalid setting name '%s'",
                     override, name);
            goto done;
        }
        char *next = strtok_r(NULL, ".:/", &save);
        config_setting_t *existing = config_setting_get_member(parent, name);
        if (next == NULL) {
            config_setting_t *result = NULL;
            if (existing == NULL) {
                result = copy_setting(parent, name, value);
            } else if (config_setting_is_scalar(existing)) {
                if (!config_setting_is_scalar(value) ||
                    assign_scalar(existing, value) < 0) {
                    char where[256];
                    setting_path(existing, where, sizeof where);
                    fail_raw(config, "override '%s': %s is %s, cannot set it "
                             "to %s", override, where,
                             type_name(config_setting_type(existing)),
                             type_name(config_setting_type(value)));
                    goto done;
                }
                result = existing;
            } else if (config_setting_is_group(existing) &&
                       !config_setting_is_group(value)) {
                char where[256];
                setting_path(existing, where, sizeof where);
                fail_raw(config, "override '%s': %s is a group, cannot set "
                         "it to %s", override, where,
                         type_name(config_setting_type(value)));
                goto done;
            } else {
                /* A group replaced by a group, a list by a list or value:
                 * the new value replaces the old one wholesale. */
                config_setting_remove(parent, name);
                result = copy_setting(parent, name, value);
            }
            if (result == NULL) {
                fail_raw(config, "override '%s': cannot store the value",
                         override);
                goto done;
            }
            config_setting_set_hook(result, override);
            break;
        }
        if (existing == NULL) {
            existing = config_setting_add(parent, name, CONFIG_TYPE_GROUP);
            if (existing == NULL) {
                fail_raw(config, "override '%s': cannot create '%s'",
                         override, name);
                goto done;
            }
            config_setting_set_hook(existing, override);
        } else if (!config_setting_is_group(existing)) {
            char where[256];
            setting_path(existing, where, sizeof where);
            fail_raw(config, "override '%s': %s is %s, not a group", override,
                     where, type_name(config_setting_type(existing)));
            goto done;
        }
        parent = existing;
        name = next;
    }

done:
    config_destroy(&scratch);
    free(path);
}

/* ------------------------------------------------- typed validation */

static int check_known_keys(ts_config *config, const config_setting_t *group,
                            const char *const *known)
{
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *member = config_setting_get_elem(group, i);
        const char *name = config_setting_name(member);
        int found = 0;
        for (size_t k = 0; known[k] != NULL && !found; k++)
            found = strcmp(known[k], name) == 0;
        if (!found) {
            char where[256];
            setting_path(member, where, sizeof where);
            fail_at(config, member, "unknown setting '%s'", where);
            return -1;
        }
    }
    return 0;
}

/* NULL when absent; error when present but not a group. */
static config_setting_t *optional_group(ts_config *config,
                                        config_setting_t *parent,
                                        const char *name)
{
    config_setting_t *group = config_setting_get_member(parent, name);
    if (group != NULL && !config_setting_is_group(group)) {
        fail_at(config, group, "'%s' must be a group { ... }, not %s", name,
                type_name(config_setting_type(group)));
        return NULL;
    }
    return group;
}

static void read_int(ts_config *config, config_setting_t *group,
                     const char *key, long long min, long long max,
                     long long *value)
{
    if (group == NULL)
        return;
    config_setting_t *s = config_setting_get_member(group, key);
    if (s == NULL)
        return;
    char where[256];
    setting_path(s, where, sizeof where);
    if (!is_integer_type(config_setting_type(s))) {
        fail_at(config, s, "%s must be an integer, not %s", where,
                type_name(config_setting_type(s)));
        return;
    }
    long long v = config_setting_get_int64(s);
    if (v < min || v > max) {
        fail_at(config, s, "%s must be between %lld and %lld", where, min,
                max);
        return;
    }
    *value = v;
}

static void read_string(ts_config *config, config_setting_t *group,
                        const char *key, const char **value)
{
    if (group == NULL)
        return;
    config_setting_t *s = config_setting_get_member(group, key);
    if (s == NULL)
        return;
    char where[256];
    setting_path(s, where, sizeof where);
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        fail_at(config, s, "%s must be a string, not %s", where,
                type_name(config_setting_type(s)));
        return;
    }
    const char *v = config_setting_get_string(s);
    if (v[0] == '\0') {
        fail_at(config, s, "%s must not be empty", where);
        return;
    }
    *value = v;
}

static void read_choice(ts_config *config, config_setting_t *group,
                        const char *key, const char *const *choices,
                        const char *choices_text, int *value)
{
    const char *text = NULL;
    read_string(config, group, key, &text);
    if (text == NULL || config->failed)
        return;
    for (int i = 0; choices[i] != NULL; i++) {
        if (strcmp(choices[i], text) == 0) {
            *value = i;
            return;
        }
    }
    config_setting_t *s = config_setting_get_member(group, key);
    char where[256];
    setting_path(s, where, sizeof where);
    fail_at(config, s, "%s must be one of %s", where, choices_text);
}

static void read_bool(ts_config *config, config_setting_t *group,
                      const char *key, int *value)
{
    if (group == NULL)
        return;
    config_setting_t *s = config_setting_get_member(group, key);
    if (s == NULL)
        return;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
        char where[256];
        setting_path(s, where, sizeof where);
        fail_at(config, s, "%s must be true or false, not %s", where,
                type_name(config_setting_type(s)));
        return;
    }
    *value = config_setting_get_bool(s);
}

static void read_endpoint(ts_config *config, config_setting_t *group,
                          const char **value)
{
    const char *text = NULL;
    read_string(config, group, "endpoint", &text);
    if (text == NULL || config->failed)
        return;
    if (strstr(text, "://") == NULL) {
        config_setting_t *s = config_setting_get_member(group, "endpoint");
        char where[256];
        setting_path(s, where, sizeof where);
        fail_at(config, s, "%s must be a ZeroMQ endpoint such as "
                "tcp://127.0.0.1:7001", where);
        return;
    }
    *value = text;
}

static const char *const socket_modes[] = { "bind", "connect", NULL };

static void load_input(ts_config *config, config_setting_t *root)
{
    static const char *const known[] = {
        "endpoint", "type", "mode", "subscribe", "hwm", "max_message_bytes",
        "max_batch_updates", "read_budget", "max_future_s", "max_backdate_s",
        "max_queued_mb", NULL
    };
    static const char *const types[] = { "pull", "sub", NULL };
    ts_settings *s = &config->settings;
    config_setting_t *input = optional_group(config, root, "input");
    if (input == NULL || check_known_keys(config, input, known) < 0)
        return;
    read_endpoint(config, input, &s->input_endpoint);
    int kind = (int)s->input_kind;
    read_choice(config, input, "type", types, "\"pull\" or \"sub\"", &kind);
    s->input_kind = (ts_socket_kind)kind;
    int mode = (int)s->input_mode;
    read_choice(config, input, "mode", socket_modes,
                "\"bind\" or \"connect\"", &mode);
    s->input_mode = (ts_socket_mode)mode;

    config_setting_t *sub = config_setting_get_member(input, "subscribe");
    if (sub != NULL && !config->failed) {
        char where[256];
        setting_path(sub, where, sizeof where);
        if (config_setting_type(sub) == CONFIG_TYPE_STRING) {
            s->subscriptions[0] = config_setting_get_string(sub);
            s->n_subscriptions = 1;
        } else if (config_setting_is_array(sub) ||
                   config_setting_is_list(sub)) {
            int n = config_setting_length(sub);
            if (n < 1 || n > TS_MAX_SUBSCRIPTIONS) {
                fail_at(config, sub, "%s must list 1 to %d topic prefixes "
                        "(\"\" subscribes to everything)", where,
                        TS_MAX_SUBSCRIPTIONS);
                return;
            }
            for (int i = 0; i < n; i++) {
                config_setting_t *elem = config_setting_get_elem(sub, i);
                if (config_setting_type(elem) != CONFIG_TYPE_STRING) {
                    fail_at(config, sub, "%s must contain only strings",
                            where);
                    return;
                }
                s->subscriptions[i] = config_setting_get_string(elem);
            }
            s->n_subscriptions = (size_t)n;
        } else {
            fail_at(config, sub, "%s must be a list of strings, e.g. "
                    "[\"sensors\", \"fleet.\"]", where);
            return;
        }
    }

    long long v = s->input_hwm;
    read_int(config, input, "hwm", 0, INT_MAX, &v);
    s->input_hwm = (int)v;
    v = (long long)s->max_message_bytes;
    read_int(config, input, "max_message_bytes", 64, 1LL << 30, &v);
    s->max_message_bytes = (size_t)v;
    v = (long long)s->max_batch_updates;
    read_int(config, input, "max_batch_updates", 1, 10000000, &v);
    s->max_batch_updates = (size_t)v;
    v = (long long)s->read_budget;
    read_int(config, input, "read_budget", 1, 1000000, &v);
    s->read_budget = (size_t)v;
    v = s->max_future_ms / 1000;
    read_int(config, input, "max_future_s", 0, MAX_DURATION_S, &v);
    s->max_future_ms = (int64_t)v * 1000;
    v = s->max_backdate_ms / 1000;
    read_int(config, input, "max_backdate_s", 0, MAX_DURATION_S, &v);
    s->max_backdate_ms = (int64_t)v * 1000;
    v = (long long)s->max_queued_mb;
    read_int(config, input, "max_queued_mb", 0, 1LL << 20, &v);
    s->max_queued_mb = (size_t)v;
}

size_t ts_input_frame_cap(const ts_settings *s)
{
    /* Twice the accepted size: a message up to there still arrives and is
     * answered with an `oversized` rejection that says its size; past it
     * libzmq drops the peer's connection without reading on. */
    return s->max_message_bytes * 2;
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

static void load_output(ts_config *config, config_setting_t *root)
{
    static const char *const known[] = { "endpoint", "mode", "hwm", "type",
                                         NULL };
    static const char *const types[] = { "pub", "push", NULL };
    ts_settings *s = &config->settings;
    config_setting_t *output = optional_group(config, root, "output");
    if (output == NULL || check_known_keys(config, output, known) < 0)
        return;
    read_endpoint(config, output, &s->output_endpoint);
    int kind = (int)s->output_kind;
    read_choice(config, output, "type", types, "\"pub\" or \"push\"", &kind);
    s->output_kind = (ts_output_kind)kind;
    int mode = (int)s->output_mode;
    read_choice(config, output, "mode", socket_modes,
                "\"bind\" or \"connect\"", &mode);
    s->output_mode = (ts_socket_mode)mode;
    long long v = s->output_hwm;
    read_int(config, output, "hwm", 0, INT_MAX, &v);
    s->output_hwm = (int)v;
}

static void load_users(ts_config *config, config_setting_t *root)
{
    static const char *const known[] = {
        "max_users", "idle_ttl_s", "max_user_id_bytes", "expire_interval_s",
        NULL
    };
    ts_settings *s = &config->settings;
    config_setting_t *users = optional_group(config, root, "users");
    if (users == NULL || check_known_keys(config, users, known) < 0)
        return;
    long long v = (long long)s->limits.max_users;
    read_int(config, users, "max_users", 1, 1LL << 32, &v);
    s->limits.max_users = (size_t)v;
    v = s->limits.idle_ttl_ms / 1000;
    read_int(config, users, "idle_ttl_s", 0, MAX_DURATION_S, &v);
    s->limits.idle_ttl_ms = (int64_t)v * 1000;
    v = (long long)s->limits.max_user_id_bytes;
    read_int(config, users, "max_user_id_bytes", 1, 4096, &v);
    s->limits.max_user_id_bytes = (size_t)v;
    v = s->expire_interval_ms / 1000;
    read_int(config, users, "expire_interval_s", 1, 86400, &v);
    s->expire_interval_ms = (int64_t)v * 1000;
}

static void load_log(ts_config *config, config_setting_t *root)
{
    static const char *const known[] = { "level", "syslog", NULL };
    static const char *const levels[] = { "error", "warn", "info", "debug",
                                          NULL };
    ts_settings *s = &config->settings;
    config_setting_t *log = optional_group(config, root, "log");
    if (log == NULL || check_known_keys(config, log, known) < 0)
        return;
    read_choice(config, log, "level", levels,
                "\"error\", \"warn\", \"info\" or \"debug\"", &s->log_level);
    read_bool(config, log, "syslog", &s->log_syslog);
}

/* LMDB refuses keys longer than this (its default build); a user id is the
 * key of the user's record. */
#define MAX_STORE_KEY_BYTES 511

static void load_state(ts_config *config, config_setting_t *root)
{
    static const char *const known[] = { "dir", "sync", "map_size_mb", NULL };
    /* Same order as ts_store_sync in daemon/store.h. */
    static const char *const syncs[] = { "full", "batch", "none", NULL };
    ts_settings *s = &config->settings;
    config_setting_t *state = optional_group(config, root, "state");
    if (state == NULL || check_known_keys(config, state, known) < 0)
        return;
    /* "" is the explicit way to run without a store (tests, throwaway
     * runs): the shipped file names a directory, so durability is what an
     * install gets unless someone asks otherwise. */
    config_setting_t *dir = config_setting_get_member(state, "dir");
    if (dir != NULL && config_setting_type(dir) == CONFIG_TYPE_STRING &&
        config_setting_get_string(dir)[0] == '\0')
        s->state_dir = NULL;
    else
        read_string(config, state, "dir", &s->state_dir);
    read_choice(config, state, "sync", syncs,
                "\"full\", \"batch\" or \"none\"", &s->state_sync);
    long long v = (long long)s->state_map_size_mb;
    read_int(config, state, "map_size_mb", 1, 1LL << 24, &v);
    s->state_map_size_mb = (size_t)v;
    if (!config->failed && s->state_dir != NULL &&
        s->limits.max_user_id_bytes > MAX_STORE_KEY_BYTES) {
        config_setting_t *dir = config_setting_get_member(state, "dir");
        fail_at(config, dir, "state.dir needs users.max_user_id_bytes <= %d "
                "(user ids are store keys)", MAX_STORE_KEY_BYTES);
    }
}

static void load_http(ts_config *config, config_setting_t *root)
{
    static const char *const known[] = { "listen", "max_connections", NULL };
    ts_settings *s = &config->settings;
    config_setting_t *http = optional_group(config, root, "http");
    if (http == NULL || check_known_keys(config, http, known) < 0)
        return;
    long long v = (long long)s->http_max_connections;
    read_int(config, http, "max_connections", 1, 65536, &v);
    s->http_max_connections = (size_t)v;
    config_setting_t *listen = config_setting_get_member(http, "listen");
    if (listen == NULL)
        return;
    /* Unlike other strings, "" is meaningful here: the endpoint is off. */
    if (config_setting_type(listen) != CONFIG_TYPE_STRING) {
        fail_at(config, listen, "http.listen must be a string, not %s",
                type_name(config_setting_type(listen)));
        return;
    }
    s->http_listen = config_setting_get_string(listen);
    if (s->http_listen[0] == '\0')
        return;
    char host[256];
    char problem[256];
    unsigned port;
    if (ts_ops_http_parse_listen(s->http_listen, host, sizeof host, &port,
                                 problem, sizeof problem) != 0)
        fail_at(config, listen,
                "http.listen %s (use \"127.0.0.1:9107\", or \"\" to turn "
                "the endpoint off)", problem);
}

/* ---------------------------------------------------------- security */

/* Blames the setting that named the file; the key file's own error (which
 * never quotes key text) follows. */
static void fail_key_file(ts_config *config, config_setting_t *group,
                          const char *key, const char *detail)
{
    config_setting_t *s = config_setting_get_member(group, key);
    char where[256];
    setting_path(s, where, sizeof where);
    fail_at(config, s, "%s: %s", where, detail);
}

static const char *required_key_file(ts_config *config,
                                     config_setting_t *group, const char *key)
{
    const char *path = NULL;
    read_string(config, group, key, &path);
    if (path == NULL && !config->failed)
        fail_at(config, group, "security.curve is on but security.%s is not "
                "set", key);
    return path;
}

static void load_server_keys(ts_config *config, config_setting_t *security)
{
    ts_settings *s = &config->settings;
    char detail[512];
    if (s->curve_secret_key_file == NULL || s->curve_public_key_file == NULL)
        return;
    struct stat st;
    if (stat(s->curve_secret_key_file, &st) == 0 &&
        (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        snprintf(detail, sizeof detail, "%s: a secret key must not be "
                 "accessible by group or others (chmod 600)",
                 s->curve_secret_key_file);
        fail_key_file(config, security, "server_secret_key_file", detail);
        return;
    }
    config->server_secret = calloc(1, TS_CURVE_KEY_BYTES);
    if (config->server_secret == NULL) {
        fail_raw(config, "%s: out of memory", config->origin);
        return;
    }
    s->curve_server_secret = config->server_secret;
    if (ts_curve_read_key_file(s->curve_secret_key_file,
                               config->server_secret, detail,
                               sizeof detail) != 0) {
        fail_key_file(config, security, "server_secret_key_file", detail);
        return;
    }
    if (ts_curve_read_key_file(s->curve_public_key_file,
                               s->curve_server_public, detail,
                               sizeof detail) != 0) {
        fail_key_file(config, security, "server_public_key_file", detail);
        return;
    }
    if (ts_curve_check_pair(s->curve_server_secret,
                            s->curve_server_public) != 0) {
        snprintf(detail, sizeof detail, "%s is not the public key of %s",
                 s->curve_public_key_file, s->curve_secret_key_file);
        fail_key_file(config, security, "server_public_key_file", detail);
    }
}

static void load_security(ts_config *config, config_setting_t *root)
{
    static const char *const known[] = {
        "curve", "server_secret_key_file", "server_public_key_file",
        "input_allow_keys_file", "output_allow_keys_file", NULL
    };
    ts_settings *s = &config->settings;
    config_setting_t *security = optional_group(config, root, "security");
    if (security == NULL || check_known_keys(config, security, known) < 0)
        return;
    read_bool(config, security, "curve", &s->curve_enabled);
    if (config->failed)
        return;
    if (!s->curve_enabled) {
        /* Paths are still type-checked so a typo shows before the switch is
         * flipped; the files are only read when CURVE is on. */
        read_string(config, security, "server_secret_key_file",
                    &s->curve_secret_key_file);
        read_string(config, security, "server_public_key_file",
                    &s->curve_public_key_file);
        read_string(config, security, "input_allow_keys_file",
                    &s->curve_input_allow_file);
        read_string(config, security, "output_allow_keys_file",
                    &s->curve_output_allow_file);
        return;
    }
    s->curve_secret_key_file =
        required_key_file(config, security, "server_secret_key_file");
    if (!config->failed)
        s->curve_public_key_file =
            required_key_file(config, security, "server_public_key_file");
    if (!config->failed)
        s->curve_input_allow_file =
            required_key_file(config, security, "input_allow_keys_file");
    if (!config->failed)
        read_string(config, security, "output_allow_keys_file",
                    &s->curve_output_allow_file);
    if (config->failed)
        return;
    load_server_keys(config, security);
    if (config->failed)
        return;
    char detail[512];
    if (ts_curve_read_allow_list(s->curve_input_allow_file,
                                 &config->input_allow, detail,
                                 sizeof detail) != 0) {
        fail_key_file(config, security, "input_allow_keys_file", detail);
        return;
    }
    s->curve_input_allow = &config->input_allow;
    if (s->curve_output_allow_file != NULL) {
        if (ts_curve_read_allow_list(s->curve_output_allow_file,
                                     &config->output_allow, detail,
                                     sizeof detail) != 0) {
            fail_key_file(config, security, "output_allow_keys_file", detail);
            return;
        }
        s->curve_output_allow = &config->output_allow;
    }
}

/* ---------------------------------------------------------- profiles */

/* ts_params over one profile group; remembers which keys the mechanism
 * asked for, so keys it never reads (typos) can be reported. */
typedef struct param_source {
    config_setting_t *group;
    model_cache *models;
    char asked[MAX_PROFILE_KEYS][MAX_PARAM_NAME];
    size_t n_asked;
    int model_empty;             /* the mechanism asked for a model: "" */
} param_source;

static config_setting_t *param_lookup(param_source *src, const char *key)
{
    if (src->n_asked < MAX_PROFILE_KEYS) {
        snprintf(src->asked[src->n_asked], MAX_PARAM_NAME, "%s", key);
        src->n_asked++;
    }
    return config_setting_get_member(src->group, key);
}

static int param_get_double(void *ctx, const char *key, double *out)
{
    config_setting_t *s = param_lookup(ctx, key);
    if (s == NULL)
        return 0;
    if (config_setting_type(s) == CONFIG_TYPE_FLOAT)
        *out = config_setting_get_float(s);
    else if (is_integer_type(config_setting_type(s)))
        *out = (double)config_setting_get_int64(s);
    else
        return -1;
    return 1;
}

static int param_get_int(void *ctx, const char *key, long long *out)
{
    config_setting_t *s = param_lookup(ctx, key);
    if (s == NULL)
        return 0;
    if (!is_integer_type(config_setting_type(s)))
        return -1;
    *out = config_setting_get_int64(s);
    return 1;
}

static int param_get_bool(void *ctx, const char *key, int *out)
{
    config_setting_t *s = param_lookup(ctx, key);
    if (s == NULL)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL)
        return -1;
    *out = config_setting_get_bool(s) ? 1 : 0;
    return 1;
}

static int param_get_string(void *ctx, const char *key, const char **out)
{
    config_setting_t *s = param_lookup(ctx, key);
    if (s == NULL)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_STRING)
        return -1;
    *out = config_setting_get_string(s);
    return 1;
}

/* Errors start with the key name so blamed_setting points at the
 * profile's `model` line. */
static const void *param_get_model(void *ctx, const char *key, char *err,
                                   size_t errlen)
{
    param_source *src = ctx;
    const char *path = NULL;
    int found = param_get_string(ctx, key, &path);
    if (found <= 0) {
        snprintf(err, errlen, found < 0 ? "%s must be a string (a model "
                 "file path)" : "%s is required (a model file path, see "
                 "`tracesan learn`)", key);
        return NULL;
    }
    if (path[0] == '\0') {
        /* The shipped configuration lists the model-based profiles with
         * an empty path so that `-o profiles.NAME.model=PATH` can enable
         * them; the caller turns this failure into a disabled profile. */
        src->model_empty = 1;
        snprintf(err, errlen, "%s is empty (no model configured)", key);
        return NULL;
    }
    if (src->models == NULL) {
        snprintf(err, errlen, "%s: out of memory", key);
        return NULL;
    }
    for (model_entry *e = src->models->head; e != NULL; e = e->next)
        if (strcmp(e->path, path) == 0)
            return e->model;
    model_entry *entry = calloc(1, sizeof *entry);
    char reason[256] = "";
    if (entry == NULL || (entry->path = strdup(path)) == NULL) {
        free(entry);
        snprintf(err, errlen, "%s: out of memory", key);
        return NULL;
    }
    if (ts_model_open(path, &entry->model, reason, sizeof reason) < 0) {
        free(entry->path);
        free(entry);
        snprintf(err, errlen, "%s: %s", key, reason);
        return NULL;
    }
    entry->next = src->models->head;
    src->models->head = entry;
    return entry->model;
}

static void model_cache_free(model_cache *cache)
{
    if (cache == NULL)
        return;
    while (cache->head != NULL) {
        model_entry *e = cache->head;
        cache->head = e->next;
        ts_model_close(e->model);
        free(e->path);
        free(e);
    }
    free(cache);
}

static int is_common_key(const char *name)
{
    for (size_t i = 0; common_profile_keys[i] != NULL; i++)
        if (strcmp(common_profile_keys[i], name) == 0)
            return 1;
    return 0;
}

static int is_name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* The mechanism's message names the offending key; point at the key named
 * first when the profile has it, else at the profile. */
static const config_setting_t *blamed_setting(const config_setting_t *group,
                                              const char *message)
{
    const config_setting_t *blamed = group;
    const char *earliest = NULL;
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *member = config_setting_get_elem(group, i);
        const char *name = config_setting_name(member);
        size_t len = strlen(name);
        for (const char *hit = strstr(message, name); hit != NULL;
             hit = strstr(hit + 1, name)) {
            if ((hit == message || !is_name_char(hit[-1])) &&
                !is_name_char(hit[len])) {
                if (earliest == NULL || hit < earliest) {
                    earliest = hit;
                    blamed = member;
                }
                break;
            }
        }
    }
    return blamed;
}

/* Run the mechanism's parser on a profile. Returns the context (caller
 * frees) or NULL with the error recorded -- or NULL with *disabled set and
 * no error when the profile's model is the empty string. */
static void *instantiate_profile(ts_config *config, const profile_desc *desc,
                                 double *window_budget, int *disabled)
{
    *disabled = 0;
    param_source source = { .group = desc->group,
                            .models = config->models };
    ts_params params = {
        .ctx = &source,
        .get_double = param_get_double,
        .get_int = param_get_int,
        .get_bool = param_get_bool,
        .get_string = param_get_string,
        .get_model = param_get_model,
    };
    char message[256] = "";
    void *mech = NULL;
    int created = desc->ops->profile_new(&params, &mech, message,
                                         sizeof message) >= 0;
    /* The delta mechanisms ask for their model after every other
     * parameter, so a disabled profile's parameters are all checked and
     * the unknown-key check below still catches its typos before it is
     * enabled. (A mechanism asking for the model first would see its other
     * keys reported unknown: an error, never a silently accepted file.) */
    if (!created && source.model_empty) {
        *disabled = 1;
    } else if (!created) {
        if (message[0] == '\0')
            snprintf(message, sizeof message, "invalid parameters");
        fail_at(config, blamed_setting(desc->group, message),
                "profile '%s' (mechanism %s): %s", desc->name,
                desc->ops->name, message);
        return NULL;
    }
    for (int i = 0; i < config_setting_length(desc->group); i++) {
        const config_setting_t *member =
            config_setting_get_elem(desc->group, i);
        const char *name = config_setting_name(member);
        int used = is_common_key(name);
        for (size_t k = 0; k < source.n_asked && !used; k++)
            used = strcmp(source.asked[k], name) == 0;
        if (!used) {
            char where[256];
            setting_path(member, where, sizeof where);
            fail_at(config, member, "unknown setting '%s' (not a parameter "
                    "of mechanism %s)", where, desc->ops->name);
            goto fail;
        }
    }
    if (*disabled)
        return NULL;
    double budget = desc->ops->window_budget != NULL
                        ? desc->ops->window_budget(mech) : 0.0;
    if (!(budget > 0.0) || budget > 1e300) {
        fail_at(config, desc->group, "profile '%s': mechanism %s reports a "
                "window budget that is not a positive number", desc->name,
                desc->ops->name);
        goto fail;
    }
    *window_budget = budget;
    return mech;

fail:
    if (mech != NULL && desc->ops->profile_free != NULL)
        desc->ops->profile_free(mech);
    return NULL;
}

static int valid_profile_name(const char *name)
{
    for (const char *p = name; *p != '\0'; p++)
        if (!is_name_char(*p))
            return 0;
    return 1;
}

static void load_profile(ts_config *config, config_setting_t *group,
                         profile_desc *desc)
{
    static const char *const policies[] = { "drop", "repeat", NULL };
    const char *name = config_setting_name(group);
    desc->group = group;
    desc->name = name;
    desc->window_ms = 86400 * INT64_C(1000);
    desc->on_exhausted = TS_ON_EXHAUSTED_DROP;
    if (!config_setting_is_group(group)) {
        fail_at(config, group, "profile '%s' must be a group { mechanism = "
                "\"...\"; ... }, not %s", name,
                type_name(config_setting_type(group)));
        return;
    }
    if (!valid_profile_name(name)) {
        fail_at(config, group, "profile name '%s' may only contain letters, "
                "digits, '-' and '_'", name);
        return;
    }

    config_setting_t *mechanism = config_setting_get_member(group,
                                                            "mechanism");
    if (mechanism == NULL) {
        fail_at(config, group, "profile '%s' has no 'mechanism'", name);
        return;
    }
    const char *mechanism_name = NULL;
    read_string(config, group, "mechanism", &mechanism_name);
    if (config->failed)
        return;
    desc->ops = ts_mechanism_find(mechanism_name);
    if (desc->ops == NULL) {
        char known[256] = "";
        size_t used = 0;
        for (const ts_mechanism_ops *const *all = ts_mechanism_all();
             *all != NULL && used < sizeof known; all++) {
            int n = snprintf(known + used, sizeof known - used, "%s%s",
                             used > 0 ? ", " : "", (*all)->name);
            if (n > 0)
                used += (size_t)n;
        }
        fail_at(config, mechanism, "profile '%s': unknown mechanism '%s' "
                "(known: %s)", name, mechanism_name, known);
        return;
    }
    if (desc->ops->profile_new == NULL || desc->ops->release == NULL) {
        fail_at(config, mechanism, "profile '%s': mechanism '%s' is not "
                "available in this build", name, mechanism_name);
        return;
    }

    long long window_s = desc->window_ms / 1000;
    read_int(config, group, "budget_window_s", 1, MAX_DURATION_S, &window_s);
    desc->window_ms = (int64_t)window_s * 1000;
    int policy = (int)desc->on_exhausted;
    read_choice(config, group, "on_exhausted", policies,
                "\"drop\" or \"repeat\"", &policy);
    desc->on_exhausted = (ts_on_exhausted)policy;
    if (config->failed)
        return;

    double budget;
    void *mech = instantiate_profile(config, desc, &budget, &desc->disabled);
    if (mech != NULL && desc->ops->profile_free != NULL)
        desc->ops->profile_free(mech);
    /* Logged at every load, so the daemon's start, each SIGHUP reload,
     * `--check-config` and `tracesan sanitize` all say it. */
    if (desc->disabled && !config->failed)
        ts_log(TS_LOG_INFO, "profile '%s' (mechanism %s) is disabled: its "
               "model is \"\" (no model configured); updates addressed to "
               "it are rejected as unknown_profile; enable it with "
               "-o profiles.%s.model=PATH", name, desc->ops->name, name);
}

static void load_profiles(ts_config *config, config_setting_t *root)
{
    config_setting_t *profiles = optional_group(config, root, "profiles");
    if (config->failed)
        return;
    /* ts_config_load adds the built-in profile when `profiles` is absent,
     * so only an explicitly empty group gets here without members. */
    int n = profiles != NULL ? config_setting_length(profiles) : 0;
    if (n == 0) {
        fail_at(config, profiles != NULL ? profiles : root,
                "'profiles' defines no profile");
        return;
    }
    config->profiles = calloc((size_t)n, sizeof *config->profiles);
    if (config->profiles == NULL) {
        fail_raw(config, "%s: out of memory", config->origin);
        return;
    }
    for (int i = 0; i < n && !config->failed; i++) {
        load_profile(config, config_setting_get_elem(profiles, i),
                     &config->profiles[i]);
        config->n_profiles = (size_t)i + 1;
    }
    if (config->failed)
        return;

    const char *wanted = config->settings.default_profile;
    config_setting_t *setting = config_setting_get_member(root,
                                                          "default_profile");
    for (size_t i = 0; i < config->n_profiles; i++) {
        if (strcmp(config->profiles[i].name, wanted) != 0)
            continue;
        /* Updates that name no profile must have somewhere to go. */
        if (config->profiles[i].disabled)
            fail_at(config, setting != NULL ? setting
                                            : config->profiles[i].group,
                    "default_profile '%s' is disabled (its model is \"\"); "
                    "set profiles.%s.model or choose another default", wanted,
                    wanted);
        config->default_index = i;
        return;
    }
    if (setting != NULL)
        fail_at(config, setting, "default_profile '%s' is not defined under "
                "'profiles'", wanted);
    else
        fail_at(config, profiles, "default_profile is not set and the "
                "default '%s' is not defined under 'profiles'", wanted);
}

static void set_defaults(ts_settings *s)
{
    memset(s, 0, sizeof *s);
    s->input_endpoint = "tcp://127.0.0.1:7001";
    s->input_kind = TS_SOCKET_PULL;
    s->input_mode = TS_SOCKET_BIND;
    s->subscriptions[0] = "";
    s->n_subscriptions = 1;
    s->input_hwm = 100000;
    s->max_message_bytes = 1u << 20;
    s->max_batch_updates = 10000;
    s->read_budget = 256;
    s->max_future_ms = 600 * INT64_C(1000);
    s->max_backdate_ms = 86400 * INT64_C(1000);
    s->max_queued_mb = 64;
    s->output_endpoint = "tcp://127.0.0.1:7002";
    s->output_mode = TS_SOCKET_BIND;
    s->output_hwm = 100000;
    s->limits.max_users = 1000000;
    s->limits.idle_ttl_ms = 3600 * INT64_C(1000);
    s->limits.max_user_id_bytes = 128;
    s->expire_interval_ms = 1000;
    s->log_level = TS_LOG_INFO;
    s->log_syslog = 0;
    s->default_profile = "geoind";
    s->http_listen = "127.0.0.1:9107";
    s->http_max_connections = 64;
    s->state_dir = NULL;
    s->state_sync = 0;
    s->state_map_size_mb = 1024;
}

/* With no `profiles` group (in particular with no file at all) there is one
 * profile, `geoind`, with the mechanism's default parameters, so that
 * `-o profiles.geoind.radius_m=200` works without a file. */
static void add_builtin_profile(ts_config *config)
{
    config_setting_t *root = config_root_setting(&config->cfg);
    if (config_setting_get_member(root, "profiles") != NULL)
        return;
    config_setting_t *profiles =
        config_setting_add(root, "profiles", CONFIG_TYPE_GROUP);
    config_setting_t *geoind =
        profiles != NULL ? config_setting_add(profiles, "geoind",
                                              CONFIG_TYPE_GROUP)
                         : NULL;
    config_setting_t *mechanism =
        geoind != NULL ? config_setting_add(geoind, "mechanism",
                                            CONFIG_TYPE_STRING)
                       : NULL;
    if (mechanism == NULL || !config_setting_set_string(mechanism, "geoind"))
        fail_raw(config, "%s: out of memory", config->origin);
}

static void read_file(ts_config *config, const char *path)
{
    /* Open it ourselves first: libconfig reports a missing file without
     * saying why. */
    FILE *probe = fopen(path, "r");
    if (probe == NULL) {
        fail_raw(config, "%s: cannot read: %s", path, strerror(errno));
        return;
    }
    fclose(probe);
    char *dir = strdup(path);
    if (dir == NULL) {
        fail_raw(config, "%s: out of memory", path);
        return;
    }
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
        config_set_include_dir(&config->cfg, dir[0] != '\0' ? dir : "/");
    }
    free(dir);
    if (config_read_file(&config->cfg, path) != CONFIG_TRUE) {
        if (config_error_type(&config->cfg) == CONFIG_ERR_FILE_IO)
            fail_raw(config, "%s: cannot read: %s", path,
                     config_error_text(&config->cfg) != NULL
                         ? config_error_text(&config->cfg) : "I/O error");
        else
            fail_raw(config, "%s:%d: %s",
                     config_error_file(&config->cfg) != NULL
                         ? config_error_file(&config->cfg) : path,
                     config_error_line(&config->cfg),
                     config_error_text(&config->cfg) != NULL
                         ? config_error_text(&config->cfg) : "syntax error");
    }
}

ts_config *ts_config_load(const char *path, const char *const *overrides,
                          size_t n_overrides, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    ts_config *config = calloc(1, sizeof *config);
    if (config == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: out of memory",
                     path != NULL ? path : "configuration");
        return NULL;
    }
    config->err = err;
    config->errlen = errlen;
    config->models = calloc(1, sizeof *config->models);
    config_init(&config->cfg);
    set_defaults(&config->settings);
    if (path != NULL) {
        config->path = strdup(path);
        if (config->path == NULL) {
            fail_raw(config, "%s: out of memory", path);
            goto fail;
        }
        config->origin = config->path;
        read_file(config, path);
    } else {
        config->origin = "(defaults)";
    }
    if (config->failed)
        goto fail;
    add_builtin_profile(config);

    if (n_overrides > 0) {
        config->overrides = calloc(n_overrides, sizeof *config->overrides);
        if (config->overrides == NULL) {
            fail_raw(config, "%s: out of memory", config->origin);
            goto fail;
        }
    }
    for (size_t i = 0; i < n_overrides && !config->failed; i++) {
        config->overrides[i] = strdup(overrides[i] != NULL ? overrides[i] : "");
        config->n_overrides = i + 1;
        if (config->overrides[i] == NULL) {
            fail_raw(config, "override: out of memory");
            break;
        }
        apply_override(config, config->overrides[i]);
    }
    if (config->failed)
        goto fail;

    static const char *const known_top[] = {
        "input", "output", "users", "log", "default_profile", "profiles", "http",
        "state", "security", NULL
    };
    config_setting_t *root = config_root_setting(&config->cfg);
    check_known_keys(config, root, known_top);
    if (!config->failed)
        load_input(config, root);
    if (!config->failed)
        load_output(config, root);
    if (!config->failed)
        load_users(config, root);
    if (!config->failed)
        load_log(config, root);
    if (!config->failed)
        load_http(config, root);
    if (!config->failed)
        load_state(config, root);
    if (!config->failed)
        load_security(config, root);
    if (!config->failed)
        read_string(config, root, "default_profile",
                    &config->settings.default_profile);
    if (!config->failed)
        load_profiles(config, root);
    if (config->failed)
        goto fail;
    config->err = NULL;
    config->errlen = 0;
    return config;

fail:
    if (err != NULL && errlen > 0 && err[0] == '\0')
        snprintf(err, errlen, "%s: invalid configuration", config->origin);
    ts_config_free(config);
    return NULL;
}

void ts_config_free(ts_config *config)
{
    if (config == NULL)
        return;
    if (config->server_secret != NULL)
        ts_curve_wipe(config->server_secret, TS_CURVE_KEY_BYTES);
    free(config->server_secret);
    ts_curve_allow_list_free(&config->input_allow);
    ts_curve_allow_list_free(&config->output_allow);
    config_destroy(&config->cfg);
    model_cache_free(config->models);
    for (size_t i = 0; i < config->n_overrides; i++)
        free(config->overrides[i]);
    free(config->overrides);
    free(config->profiles);
    free(config->path);
    free(config);
}

const ts_settings *ts_config_settings(const ts_config *config)
{
    return &config->settings;
}

int ts_config_build_profiles(const ts_config *config, ts_profile **profiles,
                             size_t *n_profiles, size_t *default_index,
                             char *err, size_t errlen)
{
    /* Disabled profiles are left out: the pipeline only knows them by name
     * (ts_pipeline_add_disabled_profile). */
    size_t n_enabled = 0;
    for (size_t i = 0; i < config->n_profiles; i++)
        n_enabled += !config->profiles[i].disabled;
    ts_profile *built = calloc(n_enabled > 0 ? n_enabled : 1, sizeof *built);
    if (built == NULL) {
        snprintf(err, errlen, "%s: out of memory", config->origin);
        return -1;
    }
    /* Errors are recorded through a scratch view of the config: the loaded
     * config itself stays immutable. */
    ts_config view = *config;
    view.err = err;
    view.errlen = errlen;
    view.failed = 0;
    size_t made = 0;
    size_t default_built = 0;
    int complete = 1;
    for (size_t i = 0; i < config->n_profiles; i++) {
        const profile_desc *desc = &config->profiles[i];
        if (desc->disabled)
            continue;
        if (i == config->default_index)
            default_built = made;
        ts_profile *profile = &built[made];
        profile->name = strdup(desc->name);
        if (profile->name == NULL) {
            fail_raw(&view, "%s: out of memory", config->origin);
            complete = 0;
            break;
        }
        profile->ops = desc->ops;
        int disabled = 0;
        profile->mech = instantiate_profile(&view, desc,
                                            &profile->window_budget,
                                            &disabled);
        if (profile->mech == NULL) {
            /* The model was non-empty at load; reaching "disabled" now
             * would be a bug, and fails like any other error. */
            if (!view.failed)
                fail_raw(&view, "%s: profile '%s' could not be rebuilt",
                         config->origin, desc->name);
            free(profile->name);
            complete = 0;
            break;
        }
        profile->window_ms = desc->window_ms;
        profile->on_exhausted = desc->on_exhausted;
        made++;
    }
    if (!complete || made == 0) {
        if (complete)
            fail_raw(&view, "%s: every profile is disabled", config->origin);
        for (size_t i = 0; i < made; i++) {
            if (built[i].ops->profile_free != NULL)
                built[i].ops->profile_free(built[i].mech);
            free(built[i].name);
        }
        free(built);
        return -1;
    }
    *profiles = built;
    *n_profiles = made;
    *default_index = default_built;
    return 0;
}

ts_pipeline *ts_config_make_pipeline(const ts_config *config, ts_rng *rng,
                                     char *err, size_t errlen)
{
    ts_profile *profiles = NULL;
    size_t n_profiles = 0;
    size_t default_index = 0;
    if (ts_config_build_profiles(config, &profiles, &n_profiles,
                                 &default_index, err, errlen) < 0)
        return NULL;
    ts_pipeline *pipeline =
        ts_pipeline_new(profiles, n_profiles, default_index,
                        &config->settings.limits, rng);
    if (pipeline == NULL) {
        snprintf(err, errlen, "%s: cannot create the pipeline (out of memory)",
                 config->origin);
        return NULL;
    }
    for (size_t i = 0; i < config->n_profiles; i++) {
        if (config->profiles[i].disabled &&
            ts_pipeline_add_disabled_profile(pipeline,
                                             config->profiles[i].name) != 0) {
            snprintf(err, errlen, "%s: out of memory", config->origin);
            ts_pipeline_free(pipeline);
            return NULL;
        }
    }
    return pipeline;
}
