/* Output topics: an outcome's topic in the format table's words
 * ("sanitized.<profile>", "rejected", "density.<profile>", "batch") as an
 * MQTT topic from the mqtt.*_topic templates, and back (the tail tool
 * tells an output message's kind by the template its topic fits). */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_TOPICS_H
#define TRACESAN_DRIVERS_MQTT_MQTT_TOPICS_H

#include <stddef.h>

#include "drivers/mqtt/mqtt_settings.h"
#include "wire/codec.h"
#include "wire/format.h"

typedef enum ts_mqtt_kind {
    TS_MQTT_KIND_UNKNOWN = 0,
    TS_MQTT_KIND_SANITIZED,
    TS_MQTT_KIND_REJECTED,
    TS_MQTT_KIND_DENSITY,
    TS_MQTT_KIND_BATCH,
} ts_mqtt_kind;

/* Appends the MQTT topic of the message (format topic, payload) to out.
 * {user} is read from the payload through `format` when the template
 * holds it; a user or profile byte outside [A-Za-z0-9._-] is written as
 * %XX (so "/", "+", "#" and invalid UTF-8 cannot make another topic or
 * an invalid one), and an empty one as "_". 0, or -1. */
int ts_mqtt_output_topic(const ts_mqtt_settings *settings,
                         const ts_format *format, const void *topic,
                         size_t topic_len, const void *payload, size_t len,
                         ts_buf *out);

/* The kind of output message an MQTT topic is by the templates. */
ts_mqtt_kind ts_mqtt_topic_kind(const ts_mqtt_settings *settings,
                                const char *topic, size_t topic_len);

#endif
