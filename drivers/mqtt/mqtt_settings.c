#include "drivers/mqtt/mqtt_settings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drivers/mqtt/mqtt_client.h"
#include "drivers/mqtt/mqtt_packet.h"

/* A password longer than this is not a password but a mistake (a key
 * file named by accident). */
#define PASSWORD_MAX 4096

static int check_url(const char *value, char *problem, size_t len)
{
    int tls, port;
    char host[256];
    return ts_mqtt_parse_url(value, &tls, host, sizeof host, &port, problem,
                             len);
}

static int check_filter(const char *value, char *problem, size_t len)
{
    size_t n = strlen(value);
    for (size_t i = 0; i < n; i++) {
        int starts = i == 0 || value[i - 1] == '/';
        int ends = i + 1 == n || value[i + 1] == '/';
        if ((value[i] == '+' && !(starts && ends)) ||
            (value[i] == '#' && !(starts && i + 1 == n))) {
            snprintf(problem, len, "must be an MQTT topic filter: + and # "
                     "stand for whole levels, # only last");
            return -1;
        }
    }
    if (!ts_mqtt_topic_is_valid(value, n)) {
        snprintf(problem, len, "must be non-empty UTF-8");
        return -1;
    }
    return 0;
}

/* Output topics: levels of text and the placeholders {profile} and
 * {user}; no wildcards (a PUBLISH to one is a protocol error). */
static int check_template(const char *value, char *problem, size_t len)
{
    for (const char *p = value; *p != '\0'; p++) {
        if (*p == '+' || *p == '#') {
            snprintf(problem, len, "must not hold + or # (a topic name, "
                     "not a filter)");
            return -1;
        }
        if (*p == '{' && strncmp(p, "{profile}", 9) != 0 &&
            strncmp(p, "{user}", 6) != 0) {
            snprintf(problem, len, "may hold only the placeholders "
                     "{profile} and {user}");
            return -1;
        }
    }
    return value[0] != '\0' ? 0 : -1;
}

static int check_payload(const char *value, char *problem, size_t len)
{
    if (strcmp(value, "protobuf") == 0 || strcmp(value, "json") == 0)
        return 0;
    snprintf(problem, len, "must be \"protobuf\" or \"json\"");
    return -1;
}

static const char *const protocols[] = { "3.1.1", "5", NULL };
static const char *const time_units[] = { "auto", "s", "ms", "iso8601",
                                          NULL };

#define S ts_mqtt_settings
#define INT_ROW(...) TS_INT_ROW(S, __VA_ARGS__)
#define STRING_ROW(...) TS_STRING_ROW(S, __VA_ARGS__)
#define BOOL_ROW(...) TS_BOOL_ROW(S, __VA_ARGS__)
#define CHOICE_ROW(...) TS_CHOICE_ROW(S, __VA_ARGS__)
#define RESTART TS_APPLY_RESTART
#define UNSET TS_SETTING_EMPTY_UNSET
#define LIST_ROW(k, f, lo, def, check_, doc_)                                \
    { .key = k, .type = TS_SETTING_STRING_LIST, TS_ROW_FIELD(S, f),         \
      .count_offset = offsetof(S, n_##f), .min = lo,                       \
      .max = TS_SETTING_MAX_LIST, .default_value = def, .check = check_,  \
      .apply = RESTART, .doc = doc_ }
#define NAMES_ROW(k, f, def, doc_)                                           \
    { .key = k, .type = TS_SETTING_STRING_LIST, TS_ROW_FIELD(S, json.f),    \
      .count_offset = offsetof(S, json.n_##f), .min = 1,                   \
      .max = TS_SETTING_MAX_LIST, .default_value = def, .apply = RESTART,  \
      .doc = doc_ }

static const ts_setting_def mqtt_rows[] = {
    LIST_ROW("mqtt.url", urls, 1, "mqtt://127.0.0.1:1883", check_url,
             "broker URLs, tried in order: mqtt://host:port or "
             "mqtts://host:port (TLS)"),
    STRING_ROW("mqtt.client_id", client_id, "tracesand", 0, NULL, RESTART,
               "client identifier; the persistent session is kept under it"),
    STRING_ROW("mqtt.username", username, NULL, UNSET, NULL, RESTART,
               "user name sent in CONNECT"),
    STRING_ROW("mqtt.password_file", password_file, NULL, UNSET, NULL,
               RESTART, "file holding the password (mode 0600)"),
    STRING_ROW("mqtt.tls_ca_file", tls_ca_file, NULL, UNSET, NULL, RESTART,
               "CA certificates the broker's certificate is checked against"),
    STRING_ROW("mqtt.tls_cert_file", tls_cert_file, NULL, UNSET, NULL,
               RESTART, "client certificate (PEM)"),
    STRING_ROW("mqtt.tls_key_file", tls_key_file, NULL, UNSET, NULL, RESTART,
               "client certificate's private key (PEM)"),
    CHOICE_ROW("mqtt.protocol", protocol, protocols, "5", RESTART,
               "MQTT protocol version"),
    INT_ROW("mqtt.keepalive_s", keepalive_ms, 5, 3600, 1000, "30", RESTART,
            "keep-alive interval"),
    BOOL_ROW("mqtt.clean_session", clean_session, "false", RESTART,
             "start a fresh session on every connection (loses the "
             "broker's queue of unacknowledged input)"),
    INT_ROW("mqtt.session_expiry_s", session_expiry_ms, 0, 4294967, 1000,
            "86400", RESTART,
            "MQTT 5: how long the broker keeps the session while "
            "disconnected"),
    LIST_ROW("mqtt.topics", topics, 1, "tracesan/input/#", check_filter,
             "topic filters subscribed for input"),
    LIST_ROW("mqtt.topic_formats", topic_formats, 1, "protobuf",
             check_payload,
             "payload format per topic filter (protobuf or json); one entry "
             "applies to all"),
    INT_ROW("mqtt.qos", qos, 0, 1, 1, "1", RESTART,
            "QoS of the input subscriptions"),
    INT_ROW("mqtt.max_inflight", max_inflight, 1, 65535, 1, "100", RESTART,
            "input messages received and not yet acknowledged, at most"),
    INT_ROW("mqtt.user_from_topic", user_from_topic, 0, 64, 1, "0", RESTART,
            "take the user id from this topic level (1 = the first); 0 "
            "off"),
    STRING_ROW("mqtt.output_topic", output_topic,
               "tracesan/sanitized/{profile}/{user}", 0, check_template,
               RESTART, "topic of sanitized points"),
    STRING_ROW("mqtt.rejected_topic", rejected_topic,
               "tracesan/rejected/{user}", 0, check_template, RESTART,
               "topic of rejections"),
    STRING_ROW("mqtt.density_topic", density_topic,
               "tracesan/density/{profile}", 0, check_template, RESTART,
               "topic of density estimates"),
    STRING_ROW("mqtt.batch_topic", batch_topic, "tracesan/batch", 0,
               check_template, RESTART,
               "topic of OutcomeBatch messages (output.format = batch)"),
    INT_ROW("mqtt.output_qos", output_qos, 0, 1, 1, "1", RESTART,
            "QoS of the output"),
    INT_ROW("mqtt.output_max_inflight", output_max_inflight, 1, 65535, 1,
            "1000", RESTART,
            "output publishes not yet acknowledged before the outbox waits"),
    INT_ROW("mqtt.retry_max_s", retry_max_ms, 1, 3600, 1000, "30", RESTART,
            "longest pause between reconnection attempts"),
    NAMES_ROW("mqtt.json_user", user, "user_id",
              "JSON member names of the user id, tried in order"),
    NAMES_ROW("mqtt.json_lat", lat, "lat", "JSON member names of latitude"),
    NAMES_ROW("mqtt.json_lon", lon, "lon", "JSON member names of longitude"),
    NAMES_ROW("mqtt.json_time", time, "timestamp_ms",
              "JSON member names of the time of the fix"),
    CHOICE_ROW("mqtt.json_time_unit", json.time_unit, time_units, "auto",
               RESTART, "unit of the JSON time: s, ms, iso8601, or auto"),
    NAMES_ROW("mqtt.json_accuracy", accuracy, "horizontal_accuracy_m",
              "JSON member names of the horizontal accuracy in metres"),
    NAMES_ROW("mqtt.json_profile", profile, "profile",
              "JSON member names of the profile"),
};

char *ts_mqtt_read_password(const char *path, size_t *len, char *problem,
                            size_t problem_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0) {
        snprintf(problem, problem_len, "'%s': cannot read: %s", path,
                 strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        snprintf(problem, problem_len, "'%s' must be a regular file no one "
                 "but its owner can read (chmod 600)", path);
        close(fd);
        return NULL;
    }
    char *text = calloc(1, PASSWORD_MAX + 2);
    size_t used = 0;
    ssize_t n = 1;
    while (text != NULL && used <= PASSWORD_MAX && n > 0) {
        n = read(fd, text + used, PASSWORD_MAX + 1 - used);
        if (n < 0 && errno == EINTR)
            n = 1;
        else if (n > 0)
            used += (size_t)n;
    }
    close(fd);
    if (text == NULL || n < 0 || used > PASSWORD_MAX) {
        snprintf(problem, problem_len, "'%s': %s", path,
                 text == NULL ? "out of memory"
                 : n < 0      ? "cannot read"
                              : "longer than a password");
        if (text != NULL) {
            memset(text, 0, PASSWORD_MAX + 2);
            free(text);
        }
        return NULL;
    }
    while (used > 0 && (text[used - 1] == '\n' || text[used - 1] == '\r'))
        text[--used] = '\0';
    *len = used;
    return text;
}

static void finish_mqtt(void *values, ts_setting_context *context)
{
    ts_mqtt_settings *s = values;
    if (s->n_topic_formats != 1 && s->n_topic_formats != s->n_topics) {
        ts_setting_fail(context, "mqtt.topic_formats", "mqtt.topic_formats "
                        "has %zu entries: give one, or one per entry of "
                        "mqtt.topics (%zu)", s->n_topic_formats,
                        s->n_topics);
        return;
    }
    for (size_t i = 0; i < s->n_topics; i++) {
        const char *f = s->topic_formats[s->n_topic_formats == 1 ? 0 : i];
        s->formats[i] = strcmp(f, "json") == 0 ? TS_MQTT_PAYLOAD_JSON
                                               : TS_MQTT_PAYLOAD_PROTOBUF;
    }
    if ((s->tls_cert_file == NULL) != (s->tls_key_file == NULL)) {
        ts_setting_fail(context, "mqtt.tls_cert_file", "mqtt.tls_cert_file "
                        "and mqtt.tls_key_file go together");
        return;
    }
    if (s->password_file != NULL && s->username == NULL) {
        ts_setting_fail(context, "mqtt.password_file", "mqtt.password_file "
                        "needs mqtt.username");
        return;
    }
    for (size_t i = 0; i < s->n_urls; i++) {
        int tls = strncmp(s->urls[i], "mqtts://", 8) == 0;
        if (!tls && (s->tls_cert_file != NULL || s->tls_ca_file != NULL)) {
            /* TLS settings with a clear-text URL would be ignored there:
             * the operator who set them means every connection to be
             * secure. */
            ts_setting_fail(context, "mqtt.url", "mqtt.url %s is clear text "
                            "while mqtt.tls_* are set: use mqtts://",
                            s->urls[i]);
            return;
        }
    }
    if (s->password_file != NULL) {
        char problem[512];
        s->password = ts_mqtt_read_password(s->password_file,
                                            &s->password_len, problem,
                                            sizeof problem);
        if (s->password == NULL)
            ts_setting_fail(context, "mqtt.password_file",
                            "mqtt.password_file %s", problem);
    }
}

void ts_mqtt_free_password(char *password, size_t len)
{
    if (password == NULL)
        return;
    memset(password, 0, len);
    free(password);
}

static void release_mqtt(void *values)
{
    ts_mqtt_settings *s = values;
    ts_mqtt_free_password(s->password, s->password_len);
    s->password = NULL;
}

const ts_setting_section ts_mqtt_setting_section = {
    .name = "mqtt",
    .rows = mqtt_rows,
    .n_rows = sizeof mqtt_rows / sizeof mqtt_rows[0],
    .size = sizeof(ts_mqtt_settings),
    .finish = finish_mqtt,
    .release = release_mqtt,
};

const ts_mqtt_settings *ts_mqtt_settings_of(const ts_config *config)
{
    return ts_config_section(config, &ts_mqtt_setting_section);
}

int ts_mqtt_protocol_level(const ts_mqtt_settings *settings)
{
    return settings->protocol == 0 ? TS_MQTT_V311 : TS_MQTT_V5;
}
