#include "engine/config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libconfig.h>

#include "engine/config_file.h"
#include "engine/config_override.h"
#include "drivers/zmq/curve_keys.h"
#include "ops/http_access.h"
#include "engine/log.h"
#include "inference/channel_file.h"
#include "inference/model_cache.h"

/* Ten years, as for the settings' durations (engine/settings.c). */
#define MAX_DURATION_S INT64_C(315360000)

typedef struct profile_desc {
    config_setting_t *group;
    const char *name;
    const ts_mechanism_ops *ops;
    ts_profile_settings common;
    /* `model = ""`: shipped in the file but not usable until a model path
     * is set; left out of the pipeline (see ts_config_build_profiles). */
    int disabled;
} profile_desc;

struct ts_config {
    config_t cfg;
    /* Model files named by profiles (key `model`); shared by the scratch
     * views of ts_config_build_profiles. */
    ts_model_cache *models;
    const char *origin;          /* the file path, or "(defaults)" */
    char *path;
    char **overrides;            /* copies: settings' hooks point at them */
    size_t n_overrides;
    ts_settings settings;
    profile_desc *profiles;
    size_t n_profiles;
    size_t default_index;
    ts_curve_server_material curve;    /* when security.curve is on */
    char *http_token;                  /* read from http.token_file */
    char *err;                   /* first error wins */
    size_t errlen;
    int failed;
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

/* ------------------------------------------------------ settings table */

static void load_string_list(ts_config *config, const ts_setting_def *row,
                             config_setting_t *s, void *base,
                             const char *key)
{
    const char *values[TS_MAX_SUBSCRIPTIONS];
    if (config_setting_type(s) == CONFIG_TYPE_STRING) {
        values[0] = config_setting_get_string(s);
        ts_setting_store_list(row, base, values, 1);
        return;
    }
    if (!config_setting_is_array(s) && !config_setting_is_list(s)) {
        fail_at(config, s, "%s must be a list of strings, e.g. "
                "[\"sensors\", \"fleet.\"]", key);
        return;
    }
    int n = config_setting_length(s);
    if (n < row->min || n > row->max) {
        fail_at(config, s, "%s must list %lld to %lld entries%s", key,
                row->min, row->max,
                strcmp(key, "input.subscribe") == 0
                    ? " (\"\" subscribes to everything)" : "");
        return;
    }
    for (int i = 0; i < n; i++) {
        config_setting_t *elem = config_setting_get_elem(s, i);
        if (config_setting_type(elem) != CONFIG_TYPE_STRING) {
            fail_at(config, s, "%s must contain only strings", key);
            return;
        }
        values[i] = config_setting_get_string(elem);
    }
    ts_setting_store_list(row, base, values, (size_t)n);
}

/* One row's setting `s` (NULL = absent: the default stays) into `out`;
 * `key` is its path for messages. It must have the row's type, bounds and
 * choices, and pass the row's check. */
static void load_value(ts_config *config, const ts_setting_def *row,
                       config_setting_t *s, void *out, const char *key)
{
    if (s == NULL)
        return;
    int type = config_setting_type(s);
    if (row->type == TS_SETTING_STRING_LIST) {
        load_string_list(config, row, s, out, key);
        return;
    }
    if (row->type == TS_SETTING_INT) {
        if (!ts_libconfig_is_integer(type)) {
            fail_at(config, s, "%s must be an integer, not %s", key,
                    ts_libconfig_type_name(type));
            return;
        }
        long long v = config_setting_get_int64(s);
        if (v < row->min || v > row->max) {
            fail_at(config, s, "%s must be between %lld and %lld",
                    key, row->min, row->max);
            return;
        }
        ts_setting_store_int(row, out, v);
        return;
    }
    if (row->type == TS_SETTING_BOOL) {
        if (type != CONFIG_TYPE_BOOL) {
            fail_at(config, s, "%s must be true or false, not %s", key,
                    ts_libconfig_type_name(type));
            return;
        }
        ts_setting_store_int(row, out, config_setting_get_bool(s) ? 1 : 0);
        return;
    }
    if (type != CONFIG_TYPE_STRING) {
        fail_at(config, s, "%s must be a string, not %s", key,
                ts_libconfig_type_name(type));
        return;
    }
    const char *v = config_setting_get_string(s);
    if (v[0] == '\0' &&
        !(row->flags & (TS_SETTING_EMPTY_OK | TS_SETTING_EMPTY_UNSET))) {
        fail_at(config, s, "%s must not be empty", key);
        return;
    }
    if (row->type == TS_SETTING_CHOICE) {
        for (int i = 0; row->choices[i] != NULL; i++) {
            if (strcmp(row->choices[i], v) == 0) {
                ts_setting_store_int(row, out, i);
                return;
            }
        }
        char choices[256];
        ts_choices_text(row->choices, choices, sizeof choices);
        fail_at(config, s, "%s must be one of %s", key, choices);
        return;
    }
    char problem[384];
    if (row->check != NULL && row->check(v, problem, sizeof problem) != 0) {
        fail_at(config, s, "%s %s", key, problem);
        return;
    }
    ts_setting_store_string(row, out, v);
}

static int is_settings_group(const char *name)
{
    size_t n_rows;
    const ts_setting_def *rows = ts_setting_table(&n_rows);
    size_t len = strlen(name);
    for (size_t i = 0; i < n_rows; i++)
        if (strncmp(rows[i].key, name, len) == 0 && rows[i].key[len] == '.')
            return 1;
    return 0;
}

/* Every key outside `profiles` must be a row of the table, and the
 * groups the rows live in must be groups. */
static void check_known_settings(ts_config *config, config_setting_t *root)
{
    for (int i = 0; i < config_setting_length(root) && !config->failed;
         i++) {
        config_setting_t *member = config_setting_get_elem(root, i);
        const char *name = config_setting_name(member);
        if (strcmp(name, "profiles") == 0 || ts_setting_find(name) != NULL)
            continue;
        if (!is_settings_group(name)) {
            fail_at(config, member, "unknown setting '%s'", name);
            return;
        }
        if (!config_setting_is_group(member)) {
            fail_at(config, member, "'%s' must be a group { ... }, not %s",
                    name, ts_libconfig_type_name(config_setting_type(member)));
            return;
        }
        for (int k = 0; k < config_setting_length(member); k++) {
            config_setting_t *key = config_setting_get_elem(member, k);
            char path[256];
            snprintf(path, sizeof path, "%s.%s", name,
                     config_setting_name(key));
            if (ts_setting_find(path) == NULL) {
                fail_at(config, key, "unknown setting '%s'", path);
                return;
            }
        }
    }
}

/* LMDB refuses keys longer than this (its default build); a user id is the
 * key of the user's record. */
#define MAX_STORE_KEY_BYTES 511

/* Checks that involve more than one row. */
static void check_settings_together(ts_config *config)
{
    ts_settings *s = &config->settings;
    if (s->state_dir != NULL &&
        s->limits.max_user_id_bytes > MAX_STORE_KEY_BYTES)
        fail_at(config, config_lookup(&config->cfg, "state.dir"),
                "state.dir needs users.max_user_id_bytes <= %d (user ids are "
                "store keys)", MAX_STORE_KEY_BYTES);
    /* The JetStream mode consumes and publishes through the same streams
     * (outputs are acknowledged with their inputs); neither side works
     * with a ZeroMQ socket on the other. */
    int js_in = s->input_kind == TS_INPUT_JETSTREAM;
    int js_out = s->output_kind == TS_OUTPUT_JETSTREAM;
    if (js_in != js_out)
        fail_at(config, config_lookup(&config->cfg, js_in ? "input.type"
                                                          : "output.type"),
                js_in ? "input.type = \"jetstream\" needs output.type = "
                        "\"jetstream\""
                      : "output.type = \"jetstream\" needs input.type = "
                        "\"jetstream\"");
    /* Keys that only work in pairs: refused here rather than at the first
     * connection attempt, so --check-config tells. */
    const struct {
        const char *key, *value, *needs, *needed;
        int creds_suffice;   /* a creds file replaces the NKey pair */
    } pairs[] = {
        { "nats.nkey_seed_file", s->nats.nkey_seed_file, "nats.nkey_public",
          s->nats.nkey_public, 1 },
        { "nats.nkey_public", s->nats.nkey_public, "nats.nkey_seed_file",
          s->nats.nkey_seed_file, 1 },
        { "nats.tls_cert_file", s->nats.tls_cert_file, "nats.tls_key_file",
          s->nats.tls_key_file, 0 },
        { "nats.tls_key_file", s->nats.tls_key_file, "nats.tls_cert_file",
          s->nats.tls_cert_file, 0 },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i].value != NULL && pairs[i].needed == NULL &&
            !(pairs[i].creds_suffice && s->nats.creds_file != NULL))
            fail_at(config, config_lookup(&config->cfg, pairs[i].key),
                    "%s needs %s", pairs[i].key, pairs[i].needs);
}

/* With security.curve on, the key files are read now, so that a bad one
 * fails --check-config and the start rather than the first handshake.
 * With it off the paths are only type-checked by their rows. */
static void load_curve_keys(ts_config *config)
{
    static const char *const required[] = {
        "server_secret_key_file", "server_public_key_file",
        "input_allow_keys_file"
    };
    ts_settings *s = &config->settings;
    if (!s->curve_enabled)
        return;
    config_setting_t *security = config_lookup(&config->cfg, "security");
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "security.%s", required[i]);
        if (config_lookup(&config->cfg, key) == NULL) {
            fail_at(config, security, "security.curve is on but %s is not "
                    "set", key);
            return;
        }
    }
    const char *blamed = NULL;
    char detail[512];
    if (ts_curve_load_server_material(
            s->curve_secret_key_file, s->curve_public_key_file,
            s->curve_input_allow_file, s->curve_output_allow_file,
            &config->curve, &blamed, detail, sizeof detail) != 0) {
        char key[64];
        snprintf(key, sizeof key, "security.%s", blamed);
        fail_at(config, config_lookup(&config->cfg, key), "%s: %s", key,
                detail);
        return;
    }
    s->curve_server_secret = config->curve.secret;
    memcpy(s->curve_server_public, config->curve.public_key,
           sizeof s->curve_server_public);
    s->curve_input_allow = &config->curve.input_allow;
    s->curve_output_allow = config->curve.has_output_allow
                                ? &config->curve.output_allow : NULL;
}

/* The token file is read now, like the CURVE keys, so that a missing or
 * empty one fails --check-config and the start. */
static void load_http_access(ts_config *config)
{
    const char *blamed = NULL;
    char problem[640];
    if (ts_http_access_load(&config->settings, &config->http_token, &blamed,
                            problem, sizeof problem) != 0)
        fail_at(config, config_lookup(&config->cfg, blamed), "%s %s",
                blamed, problem);
}

static void load_settings(ts_config *config)
{
    config_setting_t *root = config_root_setting(&config->cfg);
    check_known_settings(config, root);
    size_t n_rows;
    const ts_setting_def *rows = ts_setting_table(&n_rows);
    for (size_t i = 0; i < n_rows && !config->failed; i++)
        load_value(config, &rows[i], config_lookup(&config->cfg, rows[i].key),
                   &config->settings, rows[i].key);
    if (!config->failed)
        check_settings_together(config);
    if (!config->failed)
        load_curve_keys(config);
    if (!config->failed)
        load_http_access(config);
}

/* ---------------------------------------------------------- profiles */

/* ts_params over one profile group. */
typedef struct param_source {
    config_setting_t *group;
    ts_model_cache *models;
    int model_empty;             /* the mechanism asked for a file: "" */
    ts_channel_file *channel;    /* opened for profile_new, closed after */
} param_source;

static config_setting_t *param_lookup(param_source *src, const char *key)
{
    return config_setting_get_member(src->group, key);
}

static int param_get_double(void *ctx, const char *key, double *out)
{
    config_setting_t *s = param_lookup(ctx, key);
    if (s == NULL)
        return 0;
    if (config_setting_type(s) == CONFIG_TYPE_FLOAT)
        *out = config_setting_get_float(s);
    else if (ts_libconfig_is_integer(config_setting_type(s)))
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
    if (!ts_libconfig_is_integer(config_setting_type(s)))
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

/* Errors start with the key name so the error points at the
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
    char reason[256] = "";
    const ts_model *model =
        src->models != NULL
            ? ts_model_cache_get(src->models, path, reason, sizeof reason)
            : NULL;
    if (model == NULL)
        snprintf(err, errlen, "%s: %s", key,
                 reason[0] != '\0' ? reason : "out of memory");
    return model;
}

/* A channel file is opened for the mechanism to copy from and closed as
 * soon as profile_new returns; unlike models, nothing shares it. */
static const void *param_get_channel(void *ctx, const char *key, char *err,
                                     size_t errlen)
{
    param_source *src = ctx;
    const char *path = NULL;
    int found = param_get_string(ctx, key, &path);
    if (found <= 0) {
        snprintf(err, errlen, found < 0 ? "%s must be a string (a channel "
                 "file path)" : "%s is required (a channel file of `tracesan "
                 "optimize`)", key);
        return NULL;
    }
    if (path[0] == '\0') {
        src->model_empty = 1;
        snprintf(err, errlen, "%s is empty (no channel configured)", key);
        return NULL;
    }
    if (src->channel != NULL) {
        snprintf(err, errlen, "%s: one channel file per profile", key);
        return NULL;
    }
    char reason[512];
    if (ts_channel_open(path, &src->channel, reason, sizeof reason) != 0) {
        snprintf(err, errlen, "%s: %s", key, reason);
        return NULL;
    }
    return src->channel;
}

/* The key of a mechanism's file parameter (model or channel): what a
 * disabled profile's messages tell the operator to set. */
static const char *file_key(const ts_mechanism_ops *ops)
{
    for (size_t i = 0; i < ops->n_params; i++)
        if (ops->params[i].type == TS_PARAM_MODEL ||
            ops->params[i].type == TS_PARAM_CHANNEL)
            return ops->params[i].key;
    return "model";
}

static int is_common_key(const char *name)
{
    size_t n_rows;
    const ts_setting_def *rows = ts_profile_setting_table(&n_rows);
    for (size_t i = 0; i < n_rows; i++)
        if (strcmp(rows[i].key, name) == 0)
            return 1;
    return 0;
}

static int is_name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Every key of a profile is a common key or a row of its mechanism's
 * parameter spec. */
static int check_profile_keys(ts_config *config, const profile_desc *desc)
{
    for (int i = 0; i < config_setting_length(desc->group); i++) {
        const config_setting_t *member =
            config_setting_get_elem(desc->group, i);
        const char *name = config_setting_name(member);
        if (is_common_key(name) ||
            ts_mechanism_param_find(desc->ops, name) != NULL)
            continue;
        char where[256];
        ts_libconfig_setting_path(member, where, sizeof where);
        fail_at(config, member, "unknown setting '%s' (not a parameter of "
                "mechanism %s)", where, desc->ops->name);
        return -1;
    }
    return 0;
}

/* Run the mechanism's parser on a profile. Returns the context (caller
 * frees) or NULL with the error recorded -- or NULL with *disabled set and
 * no error when the profile's model is the empty string. */
static void *instantiate_profile(ts_config *config, const profile_desc *desc,
                                 double *window_budget, int *disabled)
{
    *disabled = 0;
    if (check_profile_keys(config, desc) < 0)
        return NULL;
    param_source source = { .group = desc->group,
                            .models = config->models };
    ts_params params = {
        .ctx = &source,
        .get_double = param_get_double,
        .get_int = param_get_int,
        .get_bool = param_get_bool,
        .get_string = param_get_string,
        .get_model = param_get_model,
        .get_channel = param_get_channel,
    };
    char message[256] = "";
    void *mech = NULL;
    int created = desc->ops->profile_new(&params, &mech, message,
                                         sizeof message) >= 0;
    ts_channel_close(source.channel);
    /* The parser opens models after every other row, so a disabled
     * profile's parameters have all been checked. */
    if (!created && source.model_empty) {
        *disabled = 1;
    } else if (!created) {
        if (message[0] == '\0')
            snprintf(message, sizeof message, "invalid parameters");
        const ts_param_spec *row = ts_mechanism_error_key(desc->ops, message);
        const config_setting_t *blamed =
            row != NULL ? config_setting_get_member(desc->group, row->key)
                        : NULL;
        fail_at(config, blamed != NULL ? blamed : desc->group,
                "profile '%s' (mechanism %s): %s", desc->name,
                desc->ops->name, message);
        return NULL;
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
    const char *name = config_setting_name(group);
    desc->group = group;
    desc->name = name;
    size_t n_rows;
    const ts_setting_def *rows = ts_profile_setting_table(&n_rows);
    ts_setting_defaults(rows, n_rows, &desc->common);
    if (!config_setting_is_group(group)) {
        fail_at(config, group, "profile '%s' must be a group { mechanism = "
                "\"...\"; ... }, not %s", name,
                ts_libconfig_type_name(config_setting_type(group)));
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
    for (size_t i = 0; i < n_rows && !config->failed; i++) {
        config_setting_t *s = config_setting_get_member(group, rows[i].key);
        char where[256];
        if (s != NULL)
            ts_libconfig_setting_path(s, where, sizeof where);
        load_value(config, &rows[i], s, &desc->common, where);
    }
    if (config->failed)
        return;
    const char *mechanism_name = desc->common.mechanism;
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

    double budget;
    void *mech = instantiate_profile(config, desc, &budget, &desc->disabled);
    if (mech != NULL && desc->ops->profile_free != NULL)
        desc->ops->profile_free(mech);
    /* Logged at every load, so the daemon's start, each SIGHUP reload,
     * `--check-config` and `tracesan sanitize` all say it. */
    if (desc->disabled && !config->failed) {
        const char *key = file_key(desc->ops);
        ts_log(TS_LOG_INFO, "profile '%s' (mechanism %s) is disabled: its "
               "%s is \"\" (no %s configured); updates addressed to it are "
               "rejected as unknown_profile; enable it with "
               "-o profiles.%s.%s=PATH", name, desc->ops->name, key, key,
               name, key);
    }
}

static void load_profiles(ts_config *config, config_setting_t *root)
{
    config_setting_t *profiles = config_setting_get_member(root, "profiles");
    if (profiles != NULL && !config_setting_is_group(profiles)) {
        fail_at(config, profiles, "'profiles' must be a group { ... }, not %s",
                ts_libconfig_type_name(config_setting_type(profiles)));
        return;
    }
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
                    "default_profile '%s' is disabled (its %s is \"\"); "
                    "set profiles.%s.%s or choose another default", wanted,
                    file_key(config->profiles[i].ops), wanted,
                    file_key(config->profiles[i].ops));
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
    char why[1024];
    if (ts_config_file_read(&config->cfg, path, why, sizeof why) != 0)
        fail_raw(config, "%s", why);
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
    config->models = ts_model_cache_new();
    config_init(&config->cfg);
    ts_settings_defaults(&config->settings);
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
    char message[512];
    for (size_t i = 0; i < n_overrides && !config->failed; i++) {
        config->overrides[i] = strdup(overrides[i] != NULL ? overrides[i] : "");
        config->n_overrides = i + 1;
        if (config->overrides[i] == NULL) {
            fail_raw(config, "override: out of memory");
            break;
        }
        if (ts_config_apply_override(&config->cfg, config->overrides[i],
                                     message, sizeof message) != 0)
            fail_raw(config, "%s", message);
    }
    if (config->failed)
        goto fail;

    config_setting_t *root = config_root_setting(&config->cfg);
    load_settings(config);
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
    ts_curve_server_material_free(&config->curve);
    ts_http_token_free(config->http_token);
    config_destroy(&config->cfg);
    ts_model_cache_free(config->models);
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
        profile->window_ms = desc->common.window_ms;
        profile->on_exhausted = desc->common.on_exhausted;
        made++;
    }
    if (!complete || made == 0) {
        if (complete)
            fail_raw(&view, "%s: every profile is disabled", config->origin);
        ts_profiles_free(built, made);
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
