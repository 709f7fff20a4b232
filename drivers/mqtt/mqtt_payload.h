/* An MQTT message as the LocationBatch the group body reads: the user
 * taken from a topic level (mqtt.user_from_topic), a tracker's JSON
 * object mapped to a LocationUpdate by the member names of the mqtt.json_*
 * rows (its values read by the JSON codec, wire/json_codec.h), a protobuf
 * LocationBatch passed on (its users replaced by the topic's when the
 * topic names the user). Errors never repeat a value: they are raw
 * coordinates. */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_PAYLOAD_H
#define TRACESAN_DRIVERS_MQTT_MQTT_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "drivers/mqtt/mqtt_settings.h"
#include "engine/pipeline.h"
#include "wire/codec.h"

/* The user level of `topic` (level `level`, 1-based): 1 with *user and
 * *len set, 0 when the topic has no such level or it is empty. */
int ts_mqtt_topic_level(const char *topic, size_t topic_len, int level,
                        const char **user, size_t *len);

/* Milliseconds since the epoch of an ISO 8601 / RFC 3339 date-time
 * (YYYY-MM-DDTHH:MM:SS[.fff](Z|+HH:MM|-HH:MM); a space may stand for T).
 * 0, or -1. */
int ts_mqtt_parse_iso8601(const char *text, size_t len, int64_t *ms);

/* The message's LocationBatch into `out` (reset first). `user` (NULL:
 * none) replaces every update's user id. 0, or -1 with *reason and
 * detail when the payload cannot become one. */
int ts_mqtt_payload_to_batch(ts_mqtt_payload format,
                             const ts_mqtt_json_names *names,
                             const void *payload, size_t len,
                             const char *user, size_t user_len, ts_buf *out,
                             ts_reason *reason, char *detail,
                             size_t detail_len);

#endif
