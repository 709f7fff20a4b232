#include "drivers/mqtt/mqtt_payload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/json_codec.h"

int ts_mqtt_topic_level(const char *topic, size_t topic_len, int level,
                        const char **user, size_t *len)
{
    size_t start = 0;
    for (int l = 1; l < level; l++) {
        const char *slash = memchr(topic + start, '/', topic_len - start);
        if (slash == NULL)
            return 0;
        start = (size_t)(slash - topic) + 1;
    }
    const char *slash = memchr(topic + start, '/', topic_len - start);
    size_t end = slash != NULL ? (size_t)(slash - topic) : topic_len;
    if (end == start)
        return 0;
    *user = topic + start;
    *len = end - start;
    return 1;
}

/* --------------------------------------------------------- ISO 8601 */

static int digits(const char *s, size_t n, int *value)
{
    *value = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        *value = *value * 10 + (s[i] - '0');
    }
    return 0;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

int ts_mqtt_parse_iso8601(const char *s, size_t n, int64_t *ms)
{
    int y, mo, d, h, mi, sec;
    if (n < 19 || digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) ||
        s[7] != '-' || digits(s + 8, 2, &d) ||
        (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        digits(s + 11, 2, &h) || s[13] != ':' || digits(s + 14, 2, &mi) ||
        s[16] != ':' || digits(s + 17, 2, &sec))
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
        sec > 60)
        return -1;
    size_t i = 19;
    int64_t frac_ms = 0;
    if (i < n && (s[i] == '.' || s[i] == ',')) {
        i++;
        int scale = 100, any = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            frac_ms += (s[i] - '0') * scale;
            scale /= 10;
            i++;
            any = 1;
        }
        if (!any)
            return -1;
    }
    int64_t offset_s = 0;
    if (i < n && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i < n && (s[i] == '+' || s[i] == '-')) {
        int oh, om = 0;
        int sign = s[i] == '-' ? -1 : 1;
        if (n - i < 3 || digits(s + i + 1, 2, &oh))
            return -1;
        i += 3;
        if (i < n && s[i] == ':')
            i++;
        if (n - i >= 2 && digits(s + i, 2, &om) == 0)
            i += 2;
        offset_s = sign * (oh * 3600 + om * 60);
    } else {
        return -1;  /* a local time names no instant */
    }
    if (i != n)
        return -1;
    int64_t days = days_from_civil(y, mo, d);
    *ms = ((days * 86400 + h * 3600 + mi * 60 + sec) - offset_s) * 1000 +
          frac_ms;
    return 0;
}

/* ------------------------------------------------------ JSON members */

static const char *skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* The end of the value at p, or NULL. Nesting is bounded like the codec's
 * (TS_JSON_MAX_DEPTH); the codec checks what is kept. */
static const char *skip_value(const char *p, const char *end)
{
    int depth = 0;
    do {
        p = skip_space(p, end);
        if (p >= end)
            return NULL;
        if (*p == '"') {
            p = skip_string(p, end);
            if (p == NULL)
                return NULL;
        } else if (*p == '{' || *p == '[') {
            if (++depth > TS_JSON_MAX_DEPTH)
                return NULL;
            p++;
        } else if (*p == '}' || *p == ']') {
            if (--depth < 0)
                return NULL;
            p++;
        } else if (*p == ',' || *p == ':') {
            if (depth == 0)
                return NULL;
            p++;
        } else {
            const char *start = p;
            while (p < end && strchr(" \t\r\n,:]}[{\"", *p) == NULL)
                p++;
            if (p == start)
                return NULL;
        }
    } while (depth > 0);
    return p;
}

typedef struct span {
    const char *p;
    size_t len;
    int rank;        /* position of the name in its row; lower wins */
} span;

enum { F_USER, F_LAT, F_LON, F_TIME, F_ACCURACY, F_PROFILE, N_FIELDS };

static const char *const canonical[N_FIELDS] = {
    "user_id", "lat", "lon", "timestamp_ms", "horizontal_accuracy_m",
    "profile",
};

static void match(const ts_mqtt_json_names *names, const char *key,
                  size_t key_len, const char *value, size_t value_len,
                  span found[N_FIELDS])
{
    const char *const *rows[N_FIELDS] = { names->user, names->lat,
                                          names->lon, names->time,
                                          names->accuracy, names->profile };
    size_t counts[N_FIELDS] = { names->n_user, names->n_lat, names->n_lon,
                                names->n_time, names->n_accuracy,
                                names->n_profile };
    for (int f = 0; f < N_FIELDS; f++)
        for (size_t i = 0; i < counts[f]; i++)
            if (strlen(rows[f][i]) == key_len &&
                memcmp(rows[f][i], key, key_len) == 0 &&
                (found[f].p == NULL || (int)i < found[f].rank))
                found[f] = (span){ value, value_len, (int)i };
}

static int members(const ts_mqtt_json_names *names, const char *p,
                   const char *end, span found[N_FIELDS])
{
    p = skip_space(p, end);
    if (p >= end || *p != '{')
        return -1;
    p = skip_space(p + 1, end);
    if (p < end && *p == '}')
        return skip_space(p + 1, end) == end ? 0 : -1;
    for (;;) {
        if (p >= end || *p != '"')
            return -1;
        const char *key_end = skip_string(p, end);
        if (key_end == NULL)
            return -1;
        const char *key = p + 1;
        size_t key_len = (size_t)(key_end - 1 - key);
        p = skip_space(key_end, end);
        if (p >= end || *p != ':')
            return -1;
        const char *value = skip_space(p + 1, end);
        const char *value_end = skip_value(value, end);
        if (value_end == NULL)
            return -1;
        match(names, key, key_len, value, (size_t)(value_end - value), found);
        p = skip_space(value_end, end);
        if (p < end && *p == ',') {
            p = skip_space(p + 1, end);
            continue;
        }
        if (p < end && *p == '}')
            return skip_space(p + 1, end) == end ? 0 : -1;
        return -1;
    }
}

/* The time value as integer milliseconds text. */
static int time_ms(const span *v, int unit, int64_t *ms)
{
    char text[64];
    if (v->len == 0 || v->len >= sizeof text)
        return -1;
    const char *s = v->p;
    size_t n = v->len;
    int quoted = s[0] == '"';
    if (quoted) {
        s++;
        n -= 2;
    }
    memcpy(text, s, n);
    text[n] = '\0';
    if (unit == TS_MQTT_TIME_ISO8601 ||
        (unit == TS_MQTT_TIME_AUTO && quoted && strchr(text, '-') != NULL &&
         n >= 19))
        return ts_mqtt_parse_iso8601(text, n, ms);
    char *end;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(value) || value <= 0)
        return -1;
    int seconds = unit == TS_MQTT_TIME_S ||
                  (unit == TS_MQTT_TIME_AUTO && value < 1e11);
    double scaled = seconds ? value * 1000.0 : value;
    if (scaled >= 9.2e18)
        return -1;
    *ms = (int64_t)llround(scaled);
    return 0;
}

static int put(ts_buf *b, const char *text, size_t len)
{
    return ts_buf_append(b, text, len);
}

/* The canonical LocationUpdate JSON of the members found. */
static int canonical_json(const span found[N_FIELDS], int unit, ts_buf *json,
                          const char **bad_field)
{
    int first = 1;
    put(json, "{", 1);
    for (int f = 0; f < N_FIELDS; f++) {
        if (found[f].p == NULL)
            continue;
        if (!first)
            put(json, ",", 1);
        first = 0;
        put(json, "\"", 1);
        put(json, canonical[f], strlen(canonical[f]));
        put(json, "\":", 2);
        if (f == F_TIME) {
            int64_t ms;
            char text[32];
            if (time_ms(&found[f], unit, &ms) != 0) {
                *bad_field = "time";
                return -1;
            }
            int n = snprintf(text, sizeof text, "%lld", (long long)ms);
            put(json, text, (size_t)n);
        } else if ((f == F_USER || f == F_PROFILE) && found[f].p[0] != '"') {
            /* A numeric device id is an id all the same. */
            put(json, "\"", 1);
            put(json, found[f].p, found[f].len);
            put(json, "\"", 1);
        } else {
            put(json, found[f].p, found[f].len);
        }
    }
    return put(json, "}", 1);
}

static int json_update(const ts_mqtt_json_names *names, const char *text,
                       size_t len, ts_buf *scratch,
                       Tracesan__V1__LocationUpdate **update, char *detail,
                       size_t detail_len)
{
    span found[N_FIELDS];
    memset(found, 0, sizeof found);
    if (members(names, text, text + len, found) != 0) {
        snprintf(detail, detail_len, "payload is not one JSON object");
        return -1;
    }
    const char *bad = NULL;
    ts_buf_reset(scratch);
    if (canonical_json(found, names->time_unit, scratch, &bad) != 0) {
        snprintf(detail, detail_len, "JSON %s is not a time in the unit of "
                 "mqtt.json_time_unit", bad != NULL ? bad : "member");
        return -1;
    }
    char why[160];
    ProtobufCMessage *message = NULL;
    if (ts_json_to_message(&tracesan__v1__location_update__descriptor,
                           (const char *)scratch->data, scratch->len, NULL,
                           &message, why, sizeof why) != 0) {
        /* The codec's words name the canonical field, never its value. */
        snprintf(detail, detail_len, "JSON: %s", why);
        return -1;
    }
    *update = (Tracesan__V1__LocationUpdate *)message;
    return 0;
}

/* The batch again with every update's user `user`, made of the fields
 * the intake reads and nothing else: protobuf-c keeps unknown fields and
 * writes them back in a form it does not always read again (a key of
 * field 0 spelled in two bytes comes back as one byte, then refused), so
 * a message the intake would take must not become one it refuses.
 * 0, or -1 (memory). */
static int repack_with_user(const Tracesan__V1__LocationBatch *batch,
                            char *user, ts_buf *out)
{
    size_t n = batch->n_updates;
    Tracesan__V1__LocationUpdate *copies = calloc(n, sizeof *copies);
    Tracesan__V1__LocationUpdate **list = calloc(n, sizeof *list);
    int rc = -1;
    if (copies != NULL && list != NULL) {
        for (size_t i = 0; i < n; i++) {
            const Tracesan__V1__LocationUpdate *u = batch->updates[i];
            Tracesan__V1__LocationUpdate *c = &copies[i];
            tracesan__v1__location_update__init(c);
            c->user_id = user;
            c->has_timestamp_ms = u->has_timestamp_ms;
            c->timestamp_ms = u->timestamp_ms;
            c->has_lat = u->has_lat;
            c->lat = u->lat;
            c->has_lon = u->has_lon;
            c->lon = u->lon;
            c->has_horizontal_accuracy_m = u->has_horizontal_accuracy_m;
            c->horizontal_accuracy_m = u->horizontal_accuracy_m;
            c->profile = u->profile;
            list[i] = c;
        }
        Tracesan__V1__LocationBatch fresh = TRACESAN__V1__LOCATION_BATCH__INIT;
        fresh.n_updates = n;
        fresh.updates = list;
        rc = ts_codec_pack(&fresh.base, out);
    }
    free(copies);
    free(list);
    return rc;
}

int ts_mqtt_payload_to_batch(ts_mqtt_payload format,
                             const ts_mqtt_json_names *names,
                             const void *payload, size_t len,
                             const char *user, size_t user_len, ts_buf *out,
                             ts_reason *reason, char *detail,
                             size_t detail_len)
{
    ts_buf_reset(out);
    char *user_text = NULL;
    if (user != NULL) {
        user_text = malloc(user_len + 1);
        if (user_text == NULL) {
            *reason = TS_REASON_INTERNAL_ERROR;
            snprintf(detail, detail_len, "out of memory");
            return -1;
        }
        memcpy(user_text, user, user_len);
        user_text[user_len] = '\0';
    }
    int rc = 0;
    if (format == TS_MQTT_PAYLOAD_JSON) {
        ts_buf scratch = { 0 };
        Tracesan__V1__LocationUpdate *update = NULL;
        rc = json_update(names, payload, len, &scratch, &update, detail,
                         detail_len);
        ts_buf_free(&scratch);
        if (rc == 0) {
            char *own = update->user_id;
            if (user_text != NULL)
                update->user_id = user_text;
            Tracesan__V1__LocationBatch batch =
                TRACESAN__V1__LOCATION_BATCH__INIT;
            batch.n_updates = 1;
            batch.updates = &update;
            rc = ts_codec_pack(&batch.base, out);
            update->user_id = own;
            protobuf_c_message_free_unpacked(&update->base, NULL);
            if (rc != 0)
                snprintf(detail, detail_len, "out of memory");
        }
        if (rc != 0)
            *reason = TS_REASON_MALFORMED;
    } else if (user_text == NULL) {
        rc = ts_buf_append(out, payload, len);
    } else {
        Tracesan__V1__LocationBatch *batch =
            ts_codec_decode_batch(payload, len);
        if (batch == NULL || batch->n_updates == 0) {
            /* Left to the intake, which says why. */
            rc = ts_buf_append(out, payload, len);
        } else {
            rc = repack_with_user(batch, user_text, out);
            if (rc != 0) {
                *reason = TS_REASON_INTERNAL_ERROR;
                snprintf(detail, detail_len, "out of memory");
            }
        }
        ts_codec_batch_free(batch);
    }
    free(user_text);
    return rc;
}
