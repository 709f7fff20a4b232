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
#include "engine/log.h"
#include "engine/profile_params.h"
#include "inference/channel_file.h"
#include "inference/model_cache.h"


typedef struct profile_desc {
    config_setting_t *group;
    const char *name;
    const ts_mechanism_ops *ops;
    ts_profile_settings common;
    /* `model = ""`: shipped in the file but not usable until a model path
     * is set; left out of the pipeline (see ts_config_build_profiles). */
    int disabled;
    /* Built once, when the file is loaded (which is how it is checked),
     * and shared by the pipelines of ts_config_share_profiles: their
     * profiles point at `mech` through `shared_ops`, the mechanism's table
     * without its profile_free, so only ts_config_free frees it. */
    void *mech;
    double window_budget;
    ts_mechanism_ops shared_ops;
} profile_desc;

struct ts_config {
    int refs;                    /* ts_config_ref / ts_config_free */
    config_t cfg;
    /* Model files named by profiles (key `model`); shared by the scratch
     * views of ts_config_build_profiles. */
    ts_model_cache *models;
    const char *origin;          /* the file path, or "(defaults)" */
    char *path;
    char **overrides;            /* copies: settings' hooks point at them */
    size_t n_overrides;
    ts_settings settings;
    /* Every section of the catalog the file was loaded with, and each
     * one's values (the core's are `settings`). */
    const ts_setting_section **sections;
    void **values;
    size_t n_sections;
    profile_desc *profiles;
    size_t n_profiles;
    size_t default_index;
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
    const char *values[TS_SETTING_MAX_LIST];
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

static const ts_setting_def *find_row(const ts_config *config,
                                      const char *key, size_t *section)
{
    const ts_setting_section *found = NULL;
    const ts_setting_def *row = ts_setting_find_in(
        config->sections, config->n_sections, key, &found);
    for (size_t i = 0; row != NULL && i < config->n_sections; i++)
        if (config->sections[i] == found)
            *section = i;
    return row;
}

static int is_settings_group(const ts_config *config, const char *name)
{
    size_t len = strlen(name);
    for (size_t s = 0; s < config->n_sections; s++)
        for (size_t i = 0; i < config->sections[s]->n_rows; i++) {
            const char *key = config->sections[s]->rows[i].key;
            if (strncmp(key, name, len) == 0 && key[len] == '.')
                return 1;
        }
    return 0;
}

/* Every key outside `profiles` must be a row of the table, and the
 * groups the rows live in must be groups. */
static void check_known_settings(ts_config *config, config_setting_t *root)
{
    size_t section;
    for (int i = 0; i < config_setting_length(root) && !config->failed;
         i++) {
        config_setting_t *member = config_setting_get_elem(root, i);
        const char *name = config_setting_name(member);
        if (strcmp(name, "profiles") == 0 ||
            find_row(config, name, &section) != NULL)
            continue;
        if (!is_settings_group(config, name)) {
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
            if (find_row(config, path, &section) == NULL) {
                fail_at(config, key, "unknown setting '%s'", path);
                return;
            }
        }
    }
}

/* ------------------------------------------- what sections' finish see */

static const void *context_values(void *loader,
                                  const ts_setting_section *section)
{
    return ts_config_section(loader, section);
}

static int context_given(void *loader, const char *key)
{
    ts_config *config = loader;
    return config_lookup(&config->cfg, key) != NULL;
}

/* At the key's line; else its group's ("security.curve is on but ... is
 * not set" points at `security`); else the file. */
static void context_fail(void *loader, const char *key, const char *message)
{
    ts_config *config = loader;
    config_setting_t *where = config_lookup(&config->cfg, key);
    const char *dot = strchr(key, '.');
    if (where == NULL && dot != NULL) {
        char group[128];
        snprintf(group, sizeof group, "%.*s", (int)(dot - key), key);
        where = config_lookup(&config->cfg, group);
    }
    fail_at(config, where, "%s", message);
}

static int alloc_sections(ts_config *config,
                          const ts_setting_section *const *sections, size_t n)
{
    config->sections = calloc(n + 1, sizeof *config->sections);
    config->values = calloc(n + 1, sizeof *config->values);
    if (config->sections == NULL || config->values == NULL)
        return -1;
    /* The core rows are always there, whatever the catalog. */
    config->sections[0] = &ts_core_setting_section;
    config->values[0] = &config->settings;
    config->n_sections = 1;
    ts_settings_defaults(&config->settings);
    for (size_t i = 0; i < n; i++) {
        if (sections[i] == &ts_core_setting_section)
            continue;
        void *values = calloc(1, sections[i]->size > 0 ? sections[i]->size
                                                       : 1);
        if (values == NULL)
            return -1;
        ts_setting_section_defaults(sections[i], values);
        config->sections[config->n_sections] = sections[i];
        config->values[config->n_sections++] = values;
    }
    return 0;
}

static void load_settings(ts_config *config)
{
    config_setting_t *root = config_root_setting(&config->cfg);
    check_known_settings(config, root);
    for (size_t s = 0; s < config->n_sections && !config->failed; s++) {
        const ts_setting_section *section = config->sections[s];
        for (size_t i = 0; i < section->n_rows && !config->failed; i++)
            load_value(config, &section->rows[i],
                       config_lookup(&config->cfg, section->rows[i].key),
                       config->values[s], section->rows[i].key);
    }
    /* Checks across rows (and sections), then the files rows name. */
    ts_setting_context context = { config, context_values, context_given,
                                   context_fail };
    for (size_t s = 0; s < config->n_sections && !config->failed; s++)
        if (config->sections[s]->finish != NULL)
            config->sections[s]->finish(config->values[s], &context);
}

/* ---------------------------------------------------------- profiles */

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
    ts_profile_params source = { .group = desc->group,
                                 .models = config->models };
    ts_params params = ts_profile_params_bind(&source);
    char message[256] = "";
    void *mech = NULL;
    int created = desc->ops->profile_new(&params, &mech, message,
                                         sizeof message) >= 0;
    ts_profile_params_close(&source);
    /* The parser opens models after every other row, so a disabled
     * profile's parameters have all been checked. */
    if (!created && source.file_empty) {
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
                "window budget of %g, outside (0, 1e300]", desc->name,
                desc->ops->name, budget);
        goto fail;
    }
    *window_budget = budget;
    return mech;

fail:
    if (mech != NULL && desc->ops->profile_free != NULL)
        desc->ops->profile_free(mech);
    return NULL;
}

int ts_config_plain_name(const char *name)
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
    if (!ts_config_plain_name(name)) {
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

    desc->mech = instantiate_profile(config, desc, &desc->window_budget,
                                     &desc->disabled);
    desc->shared_ops = *desc->ops;
    desc->shared_ops.profile_free = NULL;
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

ts_config *ts_config_load_sections(const ts_setting_section *const *sections,
                                   size_t n_sections, const char *path,
                                   const char *const *overrides,
                                   size_t n_overrides, char *err,
                                   size_t errlen)
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
    config->refs = 1;
    config->err = err;
    config->errlen = errlen;
    config->models = ts_model_cache_new();
    config_init(&config->cfg);
    config->origin = path != NULL ? path : "(defaults)";
    if (alloc_sections(config, sections, n_sections) != 0) {
        fail_raw(config, "%s: out of memory", config->origin);
        goto fail;
    }
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

ts_config *ts_config_ref(const ts_config *config)
{
    /* The count is the only thing a holder of a const configuration
     * changes. */
    ts_config *counted = (ts_config *)config;
    __atomic_add_fetch(&counted->refs, 1, __ATOMIC_RELAXED);
    return counted;
}

void ts_config_free(ts_config *config)
{
    if (config == NULL ||
        __atomic_sub_fetch(&config->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (size_t i = 0; i < config->n_profiles; i++) {
        const profile_desc *desc = &config->profiles[i];
        if (desc->mech != NULL && desc->ops->profile_free != NULL)
            desc->ops->profile_free(desc->mech);
    }
    for (size_t i = config->n_sections; i-- > 1;) {
        if (config->sections[i]->release != NULL)
            config->sections[i]->release(config->values[i]);
        free(config->values[i]);
    }
    free(config->values);
    free(config->sections);
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

const void *ts_config_section(const ts_config *config,
                              const ts_setting_section *section)
{
    for (size_t i = 0; i < config->n_sections; i++)
        if (config->sections[i] == section)
            return config->values[i];
    return NULL;
}

const ts_setting_section *const *ts_config_sections(const ts_config *config,
                                                    size_t *n)
{
    *n = config->n_sections;
    return config->sections;
}

size_t ts_config_restart_changes(const ts_config *old, const ts_config *new,
                                 void (*report)(const char *key, void *arg),
                                 void *arg)
{
    size_t n = 0;
    for (size_t i = 0; i < old->n_sections; i++) {
        const void *fresh = ts_config_section(new, old->sections[i]);
        if (fresh != NULL)
            n += ts_setting_section_restart_changes(
                old->sections[i], old->values[i], fresh, report, arg);
    }
    return n;
}

/* The enabled profiles as a pipeline takes them: each mechanism built
 * anew (`share` 0), or the ones the load built, borrowed (`share` 1). */
static int collect_profiles(const ts_config *config, int share,
                            ts_profile **profiles, size_t *n_profiles,
                            size_t *default_index, char *err, size_t errlen)
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
        int disabled = 0;
        if (share) {
            profile->ops = &desc->shared_ops;
            profile->mech = desc->mech;
            profile->window_budget = desc->window_budget;
        } else {
            profile->ops = desc->ops;
            profile->mech = instantiate_profile(&view, desc,
                                                &profile->window_budget,
                                                &disabled);
        }
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

int ts_config_build_profiles(const ts_config *config, ts_profile **profiles,
                             size_t *n_profiles, size_t *default_index,
                             char *err, size_t errlen)
{
    return collect_profiles(config, 0, profiles, n_profiles, default_index,
                            err, errlen);
}

int ts_config_share_profiles(const ts_config *config, ts_profile **profiles,
                             size_t *n_profiles, size_t *default_index,
                             char *err, size_t errlen)
{
    return collect_profiles(config, 1, profiles, n_profiles, default_index,
                            err, errlen);
}

static ts_pipeline *make_pipeline(const ts_config *config, int share,
                                  ts_rng *rng, char *err, size_t errlen)
{
    ts_profile *profiles = NULL;
    size_t n_profiles = 0;
    size_t default_index = 0;
    if (collect_profiles(config, share, &profiles, &n_profiles,
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

ts_pipeline *ts_config_make_pipeline(const ts_config *config, ts_rng *rng,
                                     char *err, size_t errlen)
{
    return make_pipeline(config, 0, rng, err, errlen);
}

ts_pipeline *ts_config_make_shared_pipeline(const ts_config *config,
                                            ts_rng *rng, char *err,
                                            size_t errlen)
{
    return make_pipeline(config, 1, rng, err, errlen);
}
