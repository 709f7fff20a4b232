#include "drivers/mqtt/mqtt_topics.h"

#include <stdio.h>
#include <string.h>

static int put_escaped(ts_buf *out, const char *s, size_t len)
{
    if (len == 0)
        return ts_buf_append(out, "_", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                   c == '-';
        char hex[4];
        if (safe) {
            if (ts_buf_append(out, &s[i], 1) != 0)
                return -1;
        } else {
            snprintf(hex, sizeof hex, "%%%02X", c);
            if (ts_buf_append(out, hex, 3) != 0)
                return -1;
        }
    }
    return 0;
}

/* The user id an outcome's payload names ("" when none). */
static int payload_user(const ts_format *format, int rejected,
                        const void *payload, size_t len, ts_buf *out)
{
    const ProtobufCMessageDescriptor *d =
        rejected ? &tracesan__v1__rejection__descriptor
                 : &tracesan__v1__sanitized_location__descriptor;
    ProtobufCMessage *message = NULL;
    if (format->read(d, payload, len, NULL, &message) != 0)
        return put_escaped(out, "", 0);
    const char *user =
        rejected ? ((Tracesan__V1__Rejection *)message)->user_id
                 : ((Tracesan__V1__SanitizedLocation *)message)->user_id;
    int rc = put_escaped(out, user != NULL ? user : "",
                         user != NULL ? strlen(user) : 0);
    protobuf_c_message_free_unpacked(message, NULL);
    return rc;
}

static int starts(const void *topic, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(topic, prefix, n) == 0;
}

int ts_mqtt_output_topic(const ts_mqtt_settings *s, const ts_format *format,
                         const void *topic, size_t topic_len,
                         const void *payload, size_t len, ts_buf *out)
{
    const char *template;
    const char *profile = "";
    size_t profile_len = 0;
    int rejected = 0;
    if (starts(topic, topic_len, TS_TOPIC_SANITIZED_PREFIX)) {
        template = s->output_topic;
        profile = (const char *)topic + strlen(TS_TOPIC_SANITIZED_PREFIX);
        profile_len = topic_len - strlen(TS_TOPIC_SANITIZED_PREFIX);
    } else if (starts(topic, topic_len, TS_TOPIC_DENSITY_PREFIX)) {
        template = s->density_topic;
        profile = (const char *)topic + strlen(TS_TOPIC_DENSITY_PREFIX);
        profile_len = topic_len - strlen(TS_TOPIC_DENSITY_PREFIX);
    } else if (starts(topic, topic_len, TS_TOPIC_BATCH)) {
        template = s->batch_topic;
    } else {
        template = s->rejected_topic;
        rejected = 1;
    }
    for (const char *p = template; *p != '\0';) {
        int rc;
        if (strncmp(p, "{profile}", 9) == 0) {
            rc = put_escaped(out, profile, profile_len);
            p += 9;
        } else if (strncmp(p, "{user}", 6) == 0) {
            rc = payload_user(format, rejected, payload, len, out);
            p += 6;
        } else {
            rc = ts_buf_append(out, p, 1);
            p++;
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Whether topic fits template, a placeholder standing for one level. */
static int fits(const char *template, const char *topic, size_t len)
{
    size_t t = 0;
    for (const char *p = template; *p != '\0';) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (close == NULL)
                return 0;
            p = close + 1;
            while (t < len && topic[t] != '/')
                t++;
        } else {
            if (t >= len || topic[t] != *p)
                return 0;
            p++;
            t++;
        }
    }
    return t == len;
}

ts_mqtt_kind ts_mqtt_topic_kind(const ts_mqtt_settings *s, const char *topic,
                                size_t len)
{
    if (fits(s->output_topic, topic, len))
        return TS_MQTT_KIND_SANITIZED;
    if (fits(s->rejected_topic, topic, len))
        return TS_MQTT_KIND_REJECTED;
    if (fits(s->density_topic, topic, len))
        return TS_MQTT_KIND_DENSITY;
    if (fits(s->batch_topic, topic, len))
        return TS_MQTT_KIND_BATCH;
    return TS_MQTT_KIND_UNKNOWN;
}
