/* The MQTT driver's setting rows, mqtt.*: the broker and the session
 * (URLs, client id, protocol, keep-alive, session persistence), TLS and
 * the password file (read when the configuration loads, so a bad one
 * fails --check-config; mode 600 or stricter; never logged), the input
 * topic filters with their payload format and QoS, the user taken from a
 * topic level, the JSON field names of common trackers, and the output
 * topic templates. docs/mqtt.md. */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_SETTINGS_H
#define TRACESAN_DRIVERS_MQTT_MQTT_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/config.h"

typedef enum ts_mqtt_payload {
    TS_MQTT_PAYLOAD_PROTOBUF = 0,    /* a LocationBatch */
    TS_MQTT_PAYLOAD_JSON = 1,        /* one JSON object, one update */
} ts_mqtt_payload;

typedef enum ts_mqtt_time_unit {
    TS_MQTT_TIME_AUTO = 0,   /* numbers below 1e11 are s, else ms; strings
                                ISO 8601 */
    TS_MQTT_TIME_S = 1,
    TS_MQTT_TIME_MS = 2,
    TS_MQTT_TIME_ISO8601 = 3,
} ts_mqtt_time_unit;

/* JSON member names, each row a list tried in order. */
typedef struct ts_mqtt_json_names {
    const char *user[TS_SETTING_MAX_LIST];
    size_t n_user;
    const char *lat[TS_SETTING_MAX_LIST];
    size_t n_lat;
    const char *lon[TS_SETTING_MAX_LIST];
    size_t n_lon;
    const char *time[TS_SETTING_MAX_LIST];
    size_t n_time;
    const char *accuracy[TS_SETTING_MAX_LIST];
    size_t n_accuracy;
    const char *profile[TS_SETTING_MAX_LIST];
    size_t n_profile;
    int time_unit;                       /* ts_mqtt_time_unit */
} ts_mqtt_json_names;

typedef struct ts_mqtt_settings {
    const char *urls[TS_SETTING_MAX_LIST];
    size_t n_urls;
    const char *client_id;
    const char *username;
    const char *password_file;
    const char *tls_ca_file, *tls_cert_file, *tls_key_file;
    int protocol;                        /* 0: 3.1.1, 1: 5 */
    int64_t keepalive_ms;
    int clean_session;
    int64_t session_expiry_ms;
    const char *topics[TS_SETTING_MAX_LIST];
    size_t n_topics;
    const char *topic_formats[TS_SETTING_MAX_LIST];
    size_t n_topic_formats;
    int qos;
    int max_inflight;
    int user_from_topic;                 /* 0 off, else the level (1-based) */
    const char *output_topic;
    const char *rejected_topic;
    const char *density_topic;
    const char *batch_topic;
    int output_qos;
    int output_max_inflight;
    int64_t retry_max_ms;
    ts_mqtt_json_names json;
    /* Read by finish: */
    ts_mqtt_payload formats[TS_SETTING_MAX_LIST];  /* one per topic */
    char *password;                      /* NULL without a file; wiped */
    size_t password_len;
} ts_mqtt_settings;

extern const ts_setting_section ts_mqtt_setting_section;

const ts_mqtt_settings *ts_mqtt_settings_of(const ts_config *config);

/* The password of a password file: a regular file no one but its owner
 * can read (chmod 600), one line (a trailing newline is not part of it).
 * Read by the configuration (mqtt.password_file) and by the tools
 * (--password-file), so both refuse the same files. NULL with a problem
 * worded to follow "<key> ", e.g. "'/x' must be a regular file no one but
 * its owner can read (chmod 600)". */
char *ts_mqtt_read_password(const char *path, size_t *len, char *problem,
                            size_t problem_len);
/* Wipes and frees what ts_mqtt_read_password returned. */
void ts_mqtt_free_password(char *password, size_t len);

/* The protocol level mqtt.protocol names (TS_MQTT_V311 or TS_MQTT_V5). */
int ts_mqtt_protocol_level(const ts_mqtt_settings *settings);

#endif
