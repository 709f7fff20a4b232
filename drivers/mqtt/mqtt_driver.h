/* The MQTT driver (input.type = "mqtt", output.type = "mqtt"): vehicles'
 * and gateways' own topics in, sanitized points, rejections and density
 * estimates out on topics from templates, over one connection
 * (drivers/mqtt/mqtt_client.h). docs/mqtt.md.
 *
 * Delivery: a QoS 1 message's PUBACK follows its outcomes through the
 * outbox, after the group commit made its debits durable and after the
 * outcomes themselves were written to the broker: commit, publish,
 * acknowledge, in that order on one TCP stream. A daemon killed before
 * the PUBACK gets the message again; its outcomes, kept in the same
 * commit (drivers/mqtt/mqtt_recent.h), are published again unchanged,
 * and nothing is released or debited twice. */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_DRIVER_H
#define TRACESAN_DRIVERS_MQTT_MQTT_DRIVER_H

#include "datapath/driver.h"

extern const ts_driver_ops ts_mqtt_driver;

#endif
