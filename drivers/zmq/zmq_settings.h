/* The ZeroMQ driver's setting rows: its sockets (input.endpoint, .mode,
 * .subscribe, .hwm, .max_queued_mb, .read_budget; output.endpoint, .mode,
 * .hwm) and CURVE (security.*), whose key files are read when the
 * configuration loads so that a bad one fails --check-config. */
#ifndef TRACESAN_DRIVERS_ZMQ_ZMQ_SETTINGS_H
#define TRACESAN_DRIVERS_ZMQ_ZMQ_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "drivers/zmq/curve_keys.h"
#include "engine/config.h"
#include "wire/format.h"

typedef enum ts_socket_mode {
    TS_SOCKET_BIND = 0,
    TS_SOCKET_CONNECT = 1
} ts_socket_mode;

typedef struct ts_zmq_settings {
    const char *input_endpoint;
    ts_socket_mode input_mode;
    const char *subscriptions[TS_SETTING_MAX_LIST];
    size_t n_subscriptions;
    int input_hwm;
    size_t max_queued_mb;                /* 0 = bounded by input_hwm only */
    size_t read_budget;
    const char *output_endpoint;
    ts_socket_mode output_mode;
    int output_hwm;
    int curve_enabled;
    const char *curve_secret_key_file;
    const char *curve_public_key_file;
    const char *curve_input_allow_file;
    const char *curve_output_allow_file;
    /* Read when security.curve is on: 32 bytes each. The secret lives on
     * the heap (`curve`) so that copies of the settings do not copy it,
     * and the release wipes it. curve_output_allow NULL = any CURVE client
     * may subscribe. */
    const unsigned char *curve_server_secret;
    unsigned char curve_server_public[32];
    const ts_curve_allow_list *curve_input_allow;
    const ts_curve_allow_list *curve_output_allow;
    ts_curve_server_material curve;
} ts_zmq_settings;

extern const ts_setting_section ts_zmq_setting_section;

/* The rows' values in a configuration loaded with the section. */
const ts_zmq_settings *ts_zmq_settings_of(const ts_config *config);

/* The input socket's per-frame cap (ZMQ_MAXMSGSIZE): 2 x
 * input.max_message_bytes. */
size_t ts_input_frame_cap(const ts_settings *core);
/* The input socket's ZMQ_RCVHWM, in messages per producer connection:
 * input.max_queued_mb over the frame cap, at most input.hwm. */
int ts_input_queue_messages(const ts_settings *core,
                            const ts_zmq_settings *zmq);
/* The output socket's high-water mark in messages. output.hwm counts
 * outcomes, and a message holds at most
 * ts_format_outcomes_per_message of them (1 per point, else
 * output.batch_outcomes), so a slow subscriber may queue
 * output.hwm / that many messages (at least 1), never more outcomes than
 * output.hwm. 0 stays 0 (unlimited). */
int ts_output_queue_messages(const ts_zmq_settings *zmq,
                             const ts_format_settings *format);

#endif
