/* MQTT as an output: outcomes under their format topics
 * ("sanitized.<profile>", ...) published on the topics of the
 * mqtt.*_topic templates at mqtt.output_qos. The MQTT driver publishes
 * so on its own connection; ts_mqtt_output is the same for another
 * driver's input (output.type = "mqtt" with input.type = "pull" or
 * "sub", datapath/output.h), on a connection of its own that subscribes
 * to nothing. At QoS 1 a publish the broker has not acknowledged is sent
 * again after a reconnection; while the broker is away or
 * mqtt.output_max_inflight publishes wait for their PUBACK, publishing
 * answers BLOCKED and the outbox waits. */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_OUTPUT_H
#define TRACESAN_DRIVERS_MQTT_MQTT_OUTPUT_H

#include <stddef.h>

#include "datapath/io.h"
#include "datapath/output.h"
#include "drivers/mqtt/mqtt_client.h"
#include "drivers/mqtt/mqtt_settings.h"
#include "wire/codec.h"
#include "wire/format.h"

/* One outcome through `client`, its topic made in `scratch`. FAILED when
 * no topic can be made (memory). */
ts_publish_result ts_mqtt_publish_outcome(ts_mqtt_client *client,
                                          const ts_mqtt_settings *settings,
                                          const ts_format *format,
                                          ts_buf *scratch, const void *topic,
                                          size_t topic_len,
                                          const void *payload, size_t len);

extern const ts_output_ops ts_mqtt_output;

#endif
