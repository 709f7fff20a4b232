#include "mechanisms/mechanism.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const ts_report_extra_def ts_report_extras[] = {
    { "predicted", TS_EXTRA_BOOL, offsetof(ts_report, has_predicted),
      offsetof(ts_report, predicted) },
    { "delta_set_size", TS_EXTRA_UINT32,
      offsetof(ts_report, has_delta_set_size),
      offsetof(ts_report, delta_set_size) },
    { "channel_version", TS_EXTRA_UINT32,
      offsetof(ts_report, has_channel_version),
      offsetof(ts_report, channel_version) },
    { "information_theoretic", TS_EXTRA_BOOL,
      offsetof(ts_report, has_information_theoretic),
      offsetof(ts_report, information_theoretic) },
    { "sigma_z_m", TS_EXTRA_DOUBLE, offsetof(ts_report, has_sigma_z_m),
      offsetof(ts_report, sigma_z_m) },
    { "eps_floor", TS_EXTRA_DOUBLE, offsetof(ts_report, has_eps_floor),
      offsetof(ts_report, eps_floor) },
};
const size_t ts_report_n_extras =
    sizeof ts_report_extras / sizeof ts_report_extras[0];

int ts_report_extra_get(const ts_report *report,
                        const ts_report_extra_def *extra, double *value)
{
    const char *base = (const char *)report;
    int has;
    memcpy(&has, base + extra->has_offset, sizeof has);
    if (!has)
        return 0;
    if (extra->type == TS_EXTRA_BOOL) {
        int flag;
        memcpy(&flag, base + extra->value_offset, sizeof flag);
        *value = flag != 0;
    } else if (extra->type == TS_EXTRA_UINT32) {
        unsigned number;
        memcpy(&number, base + extra->value_offset, sizeof number);
        *value = number;
    } else {
        memcpy(value, base + extra->value_offset, sizeof *value);
    }
    return 1;
}

void ts_report_extra_set(ts_report *report, const ts_report_extra_def *extra,
                         double value)
{
    char *base = (char *)report;
    int has = 1;
    memcpy(base + extra->has_offset, &has, sizeof has);
    if (extra->type == TS_EXTRA_BOOL) {
        int flag = value != 0;
        memcpy(base + extra->value_offset, &flag, sizeof flag);
    } else if (extra->type == TS_EXTRA_UINT32) {
        unsigned number = value >= 0 && value <= UINT32_MAX ? (unsigned)value
                                                            : 0;
        memcpy(base + extra->value_offset, &number, sizeof number);
    } else {
        memcpy(base + extra->value_offset, &value, sizeof value);
    }
}

int ts_budget_allows(const ts_budget_view *budget, double amount)
{
    if (!(amount >= 0.0) || !isfinite(amount))
        return 0;
    if (!(budget->total > 0.0) || !isfinite(budget->spent))
        return 0;
    return budget->spent + amount <=
           budget->total * (1.0 + TS_BUDGET_RELATIVE_SLACK);
}

/* ------------------------------------------------------ parameter rows */

static void *param_field(const ts_param_spec *row, void *profile)
{
    return (char *)profile + row->offset;
}

/* "in (0, 1]", "> 0", ">= 1" */
static void range_text(const ts_param_spec *row, char *buf, size_t len)
{
    int min_open = (row->bounds & TS_PARAM_MIN_EXCLUSIVE) != 0;
    int max_open = (row->bounds & TS_PARAM_MAX_EXCLUSIVE) != 0;
    if (isinf(row->max))
        snprintf(buf, len, "%s %.15g", min_open ? ">" : ">=", row->min);
    else
        snprintf(buf, len, "in %c%.15g, %.15g%c", min_open ? '(' : '[',
                 row->min, row->max, max_open ? ')' : ']');
}

static int in_range(const ts_param_spec *row, double v)
{
    int min_open = (row->bounds & TS_PARAM_MIN_EXCLUSIVE) != 0;
    int max_open = (row->bounds & TS_PARAM_MAX_EXCLUSIVE) != 0;
    if (min_open ? !(v > row->min) : !(v >= row->min))
        return 0;
    return max_open ? v < row->max : v <= row->max;
}

void ts_choices_text(const char *const *choices, char *buf, size_t len)
{
    size_t n = 0, used = 0;
    while (choices[n] != NULL)
        n++;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s\"%s\"",
                         i == 0 ? "" : i + 1 == n ? " or " : ", ", choices[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static int choice_index(const ts_param_spec *row, const char *text)
{
    for (int i = 0; row->choices[i] != NULL; i++)
        if (strcmp(row->choices[i], text) == 0)
            return i;
    return -1;
}

static void store_default(const ts_param_spec *row, void *profile)
{
    void *field = param_field(row, profile);
    const char *def = row->default_value;
    switch (row->type) {
    case TS_PARAM_NUMBER: {
        double v = def != NULL ? strtod(def, NULL) : 0.0;
        memcpy(field, &v, sizeof v);
        break;
    }
    case TS_PARAM_INT: {
        long long v = def != NULL ? strtoll(def, NULL, 10) : 0;
        memcpy(field, &v, sizeof v);
        break;
    }
    case TS_PARAM_CHOICE:
    case TS_PARAM_SWITCH: {
        int v = def == NULL ? 0
                : row->type == TS_PARAM_SWITCH ? strcmp(def, "true") == 0
                                               : choice_index(row, def);
        memcpy(field, &v, sizeof v);
        break;
    }
    case TS_PARAM_MODEL:
    case TS_PARAM_CHANNEL: {
        const void *none = NULL;
        memcpy(field, &none, sizeof none);
        break;
    }
    case TS_PARAM_BOX: {
        double box[4] = { NAN, NAN, NAN, NAN };
        if (def != NULL)
            ts_parse_box(def, box);
        memcpy(field, box, sizeof box);
        break;
    }
    }
}

int ts_parse_box(const char *text, double box[4])
{
    double v[4];
    const char *p = text;
    for (int i = 0; i < 4; i++) {
        char *end;
        v[i] = strtod(p, &end);
        if (end == p || !isfinite(v[i]))
            return -1;
        while (*end == ' ')
            end++;
        if (i < 3 && *end != ',')
            return -1;
        if (i == 3 && *end != '\0')
            return -1;
        p = end + 1;
    }
    if (!(v[0] >= -90.0 && v[2] <= 90.0 && v[1] >= -180.0 &&
          v[3] <= 180.0 && v[0] < v[2] && v[1] < v[3]))
        return -1;
    memcpy(box, v, sizeof v);
    return 0;
}

static int parse_row(const ts_param_spec *row, const ts_params *src,
                     void *profile, char *err, size_t errlen)
{
    void *field = param_field(row, profile);
    char text[256];
    switch (row->type) {
    case TS_PARAM_NUMBER: {
        double v;
        int found = src->get_double(src->ctx, row->key, &v);
        if (found == 0)
            return 0;
        if (found < 0 || !isfinite(v)) {
            snprintf(err, errlen, "%s: must be a finite number", row->key);
            return -1;
        }
        if (!in_range(row, v)) {
            range_text(row, text, sizeof text);
            snprintf(err, errlen, "%s: must be %s", row->key, text);
            return -1;
        }
        memcpy(field, &v, sizeof v);
        return 0;
    }
    case TS_PARAM_INT: {
        long long v;
        int found = src->get_int(src->ctx, row->key, &v);
        if (found == 0)
            return 0;
        if (found < 0 || !in_range(row, (double)v)) {
            range_text(row, text, sizeof text);
            snprintf(err, errlen, "%s: must be an integer %s", row->key,
                     text);
            return -1;
        }
        memcpy(field, &v, sizeof v);
        return 0;
    }
    case TS_PARAM_CHOICE: {
        const char *v;
        int found = src->get_string(src->ctx, row->key, &v);
        if (found == 0)
            return 0;
        int index = found > 0 ? choice_index(row, v) : -1;
        if (index < 0) {
            ts_choices_text(row->choices, text, sizeof text);
            snprintf(err, errlen, "%s: must be %s", row->key, text);
            return -1;
        }
        memcpy(field, &index, sizeof index);
        return 0;
    }
    case TS_PARAM_SWITCH: {
        int v = 0;
        if (src->get_bool != NULL && src->get_bool(src->ctx, row->key, &v) > 0) {
            memcpy(field, &v, sizeof v);
            return 0;
        }
        long long number = 0;
        int found = src->get_int(src->ctx, row->key, &number);
        if (found == 0)
            return 0;
        if (found > 0 && (number == 0 || number == 1)) {
            v = (int)number;
            memcpy(field, &v, sizeof v);
            return 0;
        }
        snprintf(err, errlen, "%s: must be true or false (or 0/1)", row->key);
        return -1;
    }
    case TS_PARAM_MODEL:
    case TS_PARAM_CHANNEL: {
        int channel = row->type == TS_PARAM_CHANNEL;
        const void *(*get)(void *, const char *, char *, size_t) =
            channel ? src->get_channel : src->get_model;
        if (get == NULL) {
            snprintf(err, errlen, "%s: this caller cannot open %s files",
                     row->key, channel ? "channel" : "model");
            return -1;
        }
        err[0] = '\0';
        const void *model = get(src->ctx, row->key, err, errlen);
        if (model == NULL) {
            if (err[0] == '\0')
                snprintf(err, errlen, "%s: is required", row->key);
            return -1;
        }
        memcpy(field, &model, sizeof model);
        return 0;
    }
    case TS_PARAM_BOX: {
        const char *v;
        double box[4];
        int found = src->get_string(src->ctx, row->key, &v);
        if (found == 0)
            return 0;
        if (found < 0 || ts_parse_box(v, box) != 0) {
            snprintf(err, errlen, "%s: must be \"LAT_MIN,LON_MIN,LAT_MAX,"
                     "LON_MAX\" in degrees, min < max, inside WGS84",
                     row->key);
            return -1;
        }
        memcpy(field, box, sizeof box);
        return 0;
    }
    }
    return -1;
}

const ts_param_spec *ts_mechanism_param_find(const ts_mechanism_ops *ops,
                                             const char *key)
{
    for (size_t i = 0; i < ops->n_params; i++)
        if (strcmp(ops->params[i].key, key) == 0)
            return &ops->params[i];
    return NULL;
}

int ts_mechanism_parse_params(const ts_mechanism_ops *ops,
                              const ts_params *src, void *profile, char *err,
                              size_t errlen)
{
    for (size_t i = 0; i < ops->n_params; i++)
        store_default(&ops->params[i], profile);
    if (src->key_at != NULL) {
        const char *key;
        for (size_t i = 0; (key = src->key_at(src->ctx, i)) != NULL; i++) {
            if (ts_mechanism_param_find(ops, key) != NULL)
                continue;
            snprintf(err, errlen, "%s: not a parameter of mechanism %s", key,
                     ops->name);
            return -1;
        }
    }
    /* Two passes: a file is opened only once every other key is valid. */
    for (int files = 0; files <= 1; files++)
        for (size_t i = 0; i < ops->n_params; i++)
            if ((ops->params[i].type == TS_PARAM_MODEL ||
                 ops->params[i].type == TS_PARAM_CHANNEL) == files &&
                parse_row(&ops->params[i], src, profile, err, errlen) < 0)
                return -1;
    return 0;
}

const ts_param_spec *ts_mechanism_error_key(const ts_mechanism_ops *ops,
                                            const char *err)
{
    char key[64];
    size_t n = 0;
    while (n + 1 < sizeof key &&
           ((err[n] >= 'a' && err[n] <= 'z') || err[n] == '_' ||
            (err[n] >= '0' && err[n] <= '9')))
        n++;
    memcpy(key, err, n);
    key[n] = '\0';
    if (err[n] != ':' && err[n] != ' ')
        return NULL;
    return ts_mechanism_param_find(ops, key);
}

void ts_mechanism_param_help(const ts_mechanism_ops *ops, char *buf,
                             size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ops->n_params && used < len; i++) {
        const ts_param_spec *row = &ops->params[i];
        char kind[256];
        switch (row->type) {
        case TS_PARAM_NUMBER:
        case TS_PARAM_INT: {
            char range[128];
            range_text(row, range, sizeof range);
            snprintf(kind, sizeof kind, "%s %s",
                     row->type == TS_PARAM_INT ? "integer" : "number", range);
            break;
        }
        case TS_PARAM_CHOICE: {
            char choices[200];
            ts_choices_text(row->choices, choices, sizeof choices);
            snprintf(kind, sizeof kind, "%s", choices);
            break;
        }
        case TS_PARAM_SWITCH:
            snprintf(kind, sizeof kind, "true or false");
            break;
        case TS_PARAM_MODEL:
            snprintf(kind, sizeof kind, "model file path");
            break;
        case TS_PARAM_CHANNEL:
            snprintf(kind, sizeof kind, "channel file path");
            break;
        case TS_PARAM_BOX:
            snprintf(kind, sizeof kind, "LAT_MIN,LON_MIN,LAT_MAX,LON_MAX");
            break;
        }
        int w = snprintf(buf + used, len - used,
                         "    %-22s %s; %s%s. %s\n", row->key, kind,
                         row->default_value != NULL ? "default " : "required",
                         row->default_value != NULL ? row->default_value : "",
                         row->doc != NULL ? row->doc : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
}
