#include "engine/profile_params.h"

#include <stdio.h>

#include "engine/config_override.h"

static config_setting_t *param_lookup(ts_profile_params *src, const char *key)
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
    ts_profile_params *src = ctx;
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
        src->file_empty = 1;
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
    ts_profile_params *src = ctx;
    const char *path = NULL;
    int found = param_get_string(ctx, key, &path);
    if (found <= 0) {
        snprintf(err, errlen, found < 0 ? "%s must be a string (a channel "
                 "file path)" : "%s is required (a channel file of `tracesan "
                 "optimize`)", key);
        return NULL;
    }
    if (path[0] == '\0') {
        src->file_empty = 1;
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

ts_params ts_profile_params_bind(ts_profile_params *source)
{
    return (ts_params){
        .ctx = source,
        .get_double = param_get_double,
        .get_int = param_get_int,
        .get_bool = param_get_bool,
        .get_string = param_get_string,
        .get_model = param_get_model,
        .get_channel = param_get_channel,
    };
}

void ts_profile_params_close(ts_profile_params *source)
{
    ts_channel_close(source->channel);
    source->channel = NULL;
}
