#include "engine/config_override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "profiles.geoind.radius_m" */
void ts_libconfig_setting_path(const config_setting_t *setting, char *buf,
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

const char *ts_libconfig_type_name(int type)
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

int ts_libconfig_is_integer(int type)
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
        if (!ts_libconfig_is_integer(value_type))
            return -1;
        return config_setting_set_int64(target,
                                        config_setting_get_int64(value))
                   ? 0 : -1;
    case CONFIG_TYPE_FLOAT:
        if (value_type == CONFIG_TYPE_FLOAT)
            return config_setting_set_float(target,
                                            config_setting_get_float(value))
                       ? 0 : -1;
        if (ts_libconfig_is_integer(value_type))
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

int ts_config_apply_override(config_t *cfg, char *override, char *err,
                              size_t errlen)
{
    const char *eq = strchr(override, '=');
    if (eq == NULL || eq == override) {
        snprintf(err, errlen, "override '%s': expected path=value", override);
        return -1;
    }
    size_t path_len = (size_t)(eq - override);
    char *path = strndup(override, path_len);
    if (path == NULL) {
        snprintf(err, errlen, "override '%s': out of memory", override);
        return -1;
    }

    int status = -1;
    config_t scratch;
    config_init(&scratch);
    const config_setting_t *value = NULL;
    if (parse_override_value(eq + 1, &scratch, &value) < 0) {
        snprintf(err, errlen, "override '%s': out of memory", override);
        goto done;
    }

    config_setting_t *parent = config_root_setting(cfg);
    char *save = NULL;
    char *name = strtok_r(path, ".:/", &save);
    if (name == NULL) {
        snprintf(err, errlen, "override '%s': empty setting path", override);
        goto done;
    }
    for (;;) {
        if (!valid_setting_name(name)) {
            snprintf(err, errlen, "override '%s': invalid setting name '%s'",
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
                    ts_libconfig_setting_path(existing, where, sizeof where);
                    snprintf(err, errlen, "override '%s': %s is %s, cannot set it "
                             "to %s", override, where,
                             ts_libconfig_type_name(config_setting_type(existing)),
                             ts_libconfig_type_name(config_setting_type(value)));
                    goto done;
                }
                result = existing;
            } else if (config_setting_is_group(existing) &&
                       !config_setting_is_group(value)) {
                char where[256];
                ts_libconfig_setting_path(existing, where, sizeof where);
                snprintf(err, errlen, "override '%s': %s is a group, cannot set "
                         "it to %s", override, where,
                         ts_libconfig_type_name(config_setting_type(value)));
                goto done;
            } else {
                /* A group replaced by a group, a list by a list or value:
                 * the new value replaces the old one wholesale. */
                config_setting_remove(parent, name);
                result = copy_setting(parent, name, value);
            }
            if (result == NULL) {
                snprintf(err, errlen, "override '%s': cannot store the value",
                         override);
                goto done;
            }
            config_setting_set_hook(result, override);
            status = 0;
            break;
        }
        if (existing == NULL) {
            existing = config_setting_add(parent, name, CONFIG_TYPE_GROUP);
            if (existing == NULL) {
                snprintf(err, errlen, "override '%s': cannot create '%s'",
                         override, name);
                goto done;
            }
            config_setting_set_hook(existing, override);
        } else if (!config_setting_is_group(existing)) {
            char where[256];
            ts_libconfig_setting_path(existing, where, sizeof where);
            snprintf(err, errlen, "override '%s': %s is %s, not a group", override,
                     where, ts_libconfig_type_name(config_setting_type(existing)));
            goto done;
        }
        parent = existing;
        name = next;
    }

done:
    config_destroy(&scratch);
    free(path);
    return status;
}

