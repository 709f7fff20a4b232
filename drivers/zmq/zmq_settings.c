#include "drivers/zmq/zmq_settings.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static int check_endpoint(const char *value, char *problem, size_t len)
{
    if (strstr(value, "://") != NULL)
        return 0;
    snprintf(problem, len, "must be a ZeroMQ endpoint such as "
             "tcp://127.0.0.1:7001");
    return -1;
}

static const char *const socket_modes[] = { "bind", "connect", NULL };

#define INT_ROW(...) TS_INT_ROW(ts_zmq_settings, __VA_ARGS__)
#define CHOICE_ROW(...) TS_CHOICE_ROW(ts_zmq_settings, __VA_ARGS__)
#define STRING_ROW(...) TS_STRING_ROW(ts_zmq_settings, __VA_ARGS__)
#define BOOL_ROW(...) TS_BOOL_ROW(ts_zmq_settings, __VA_ARGS__)
#define RESTART TS_APPLY_RESTART

static const ts_setting_def zmq_rows[] = {
    STRING_ROW("input.endpoint", input_endpoint, "tcp://127.0.0.1:7001", 0,
               check_endpoint, RESTART,
               "ZeroMQ endpoint the updates arrive on"),
    CHOICE_ROW("input.mode", input_mode, socket_modes, "bind", RESTART,
               "bind the input endpoint or connect to it"),
    { .key = "input.subscribe", .type = TS_SETTING_STRING_LIST,
      TS_ROW_FIELD(ts_zmq_settings, subscriptions),
      .count_offset = offsetof(ts_zmq_settings, n_subscriptions),
      .min = 1, .max = TS_SETTING_MAX_LIST, .default_value = "",
      .flags = TS_SETTING_EMPTY_OK, .apply = RESTART,
      .doc = "topic prefixes a SUB input subscribes to; \"\" = all" },
    INT_ROW("input.hwm", input_hwm, 0, INT_MAX, 1, "100000", RESTART,
            "receive high-water mark in messages; 0 = unlimited"),
    INT_ROW("input.max_queued_mb", max_queued_mb, 0, 1LL << 20, 1, "64",
            RESTART, "most input queued per producer, in MiB"),
    INT_ROW("input.read_budget", read_budget, 1, 1000000, 1, "256", RESTART,
            "messages read per wake-up before yielding"),
    STRING_ROW("output.endpoint", output_endpoint, "tcp://127.0.0.1:7002", 0,
               check_endpoint, RESTART,
               "ZeroMQ endpoint sanitized points are published on"),
    CHOICE_ROW("output.mode", output_mode, socket_modes, "bind", RESTART,
               "bind the output endpoint or connect to it"),
    INT_ROW("output.hwm", output_hwm, 0, INT_MAX, 1, "100000", RESTART,
            "send high-water mark in outcomes; 0 = unlimited"),
    BOOL_ROW("security.curve", curve_enabled, "false", RESTART,
             "CURVE encryption and client authentication on both sockets"),
    STRING_ROW("security.server_secret_key_file", curve_secret_key_file,
               NULL, 0, NULL, RESTART, "the daemon's secret key (Z85)"),
    STRING_ROW("security.server_public_key_file", curve_public_key_file,
               NULL, 0, NULL, RESTART, "the daemon's public key (Z85)"),
    /* The allow-lists are read again on every reload. */
    STRING_ROW("security.input_allow_keys_file", curve_input_allow_file,
               NULL, 0, NULL, TS_APPLY_RELOAD,
               "publishers allowed on the input"),
    STRING_ROW("security.output_allow_keys_file", curve_output_allow_file,
               NULL, 0, NULL, TS_APPLY_RELOAD,
               "subscribers allowed on the output"),
};

/* With security.curve on, the key files are read now, so that a bad one
 * fails --check-config and the start rather than the first handshake.
 * With it off the paths are only type-checked by their rows. */
static void finish_zmq(void *values, ts_setting_context *context)
{
    static const char *const required[] = {
        "security.server_secret_key_file", "security.server_public_key_file",
        "security.input_allow_keys_file"
    };
    ts_zmq_settings *s = values;
    if (!s->curve_enabled)
        return;
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        if (!ts_setting_given(context, required[i])) {
            ts_setting_fail(context, "security", "security.curve is on but "
                            "%s is not set", required[i]);
            return;
        }
    }
    const char *blamed = NULL;
    char detail[512];
    if (ts_curve_load_server_material(
            s->curve_secret_key_file, s->curve_public_key_file,
            s->curve_input_allow_file, s->curve_output_allow_file,
            &s->curve, &blamed, detail, sizeof detail) != 0) {
        char key[64];
        snprintf(key, sizeof key, "security.%s", blamed);
        ts_setting_fail(context, key, "%s: %s", key, detail);
        return;
    }
    s->curve_server_secret = s->curve.secret;
    memcpy(s->curve_server_public, s->curve.public_key,
           sizeof s->curve_server_public);
    s->curve_input_allow = &s->curve.input_allow;
    s->curve_output_allow = s->curve.has_output_allow
                                ? &s->curve.output_allow : NULL;
}

static void release_zmq(void *values)
{
    ts_zmq_settings *s = values;
    ts_curve_server_material_free(&s->curve);
}

/* The same path may hold a new key: the sockets keep the old one. */
static size_t zmq_restart_changes(const void *old_values,
                                  const void *new_values,
                                  void (*report)(const char *key, void *arg),
                                  void *arg)
{
    const ts_zmq_settings *old = old_values, *new = new_values;
    const char *path_old = old->curve_public_key_file;
    const char *path_new = new->curve_public_key_file;
    int same_path = path_old != NULL && path_new != NULL &&
                    strcmp(path_old, path_new) == 0;
    if (same_path && old->curve_enabled && new->curve_enabled &&
        memcmp(old->curve_server_public, new->curve_server_public,
               sizeof old->curve_server_public) != 0) {
        report("the server key in security.server_public_key_file", arg);
        return 1;
    }
    return 0;
}

const ts_setting_section ts_zmq_setting_section = {
    .name = "zmq",
    TS_SECTION_ROWS(zmq_rows),
    .size = sizeof(ts_zmq_settings),
    .finish = finish_zmq,
    .release = release_zmq,
    .restart_changes = zmq_restart_changes,
};

const ts_zmq_settings *ts_zmq_settings_of(const ts_config *config)
{
    return ts_config_section(config, &ts_zmq_setting_section);
}

size_t ts_input_frame_cap(const ts_settings *core)
{
    /* Twice the accepted size: a message up to there still arrives and is
     * answered with an `oversized` rejection that says its size; past it
     * libzmq drops the peer's connection without reading on. */
    return core->max_message_bytes * 2;
}

int ts_output_queue_messages(const ts_zmq_settings *zmq,
                             const ts_format_settings *format)
{
    size_t per_message = ts_format_outcomes_per_message(format);
    if (per_message <= 1 || zmq->output_hwm == 0)
        return zmq->output_hwm;
    size_t messages = (size_t)zmq->output_hwm / per_message;
    return messages > 0 ? (int)messages : 1;
}

int ts_input_queue_messages(const ts_settings *core,
                            const ts_zmq_settings *zmq)
{
    if (zmq->max_queued_mb == 0)
        return zmq->input_hwm;
    /* ZeroMQ's HWM counts messages; the bound wanted is in bytes. Sized
     * for the largest frame the socket lets in, the byte bound holds
     * whatever the producers send. */
    size_t n = (zmq->max_queued_mb << 20) / ts_input_frame_cap(core);
    if (n < 1)
        n = 1;
    if (zmq->input_hwm > 0 && (size_t)zmq->input_hwm < n)
        n = (size_t)zmq->input_hwm;
    return n > INT_MAX ? INT_MAX : (int)n;
}
