/* What the MQTT driver and the MQTT output (drivers/mqtt/mqtt_output.h)
 * share about their one connection: the client's configuration from the
 * mqtt.* rows, what a connection going up or down tells the log and
 * /healthz, and the connection's /metrics series (tracesand_mqtt_*). */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_CONNECTION_H
#define TRACESAN_DRIVERS_MQTT_MQTT_CONNECTION_H

#include <stddef.h>

#include "datapath/observer.h"
#include "drivers/mqtt/mqtt_client.h"
#include "drivers/mqtt/mqtt_settings.h"
#include "engine/settings.h"
#include "wire/codec.h"

/* The client's configuration (pointing into `settings`), subscribing to
 * mqtt.topics when `subscribe`, to nothing otherwise (an output alone). */
void ts_mqtt_connection_config(const ts_mqtt_settings *settings,
                               const ts_settings *core, int subscribe,
                               ts_mqtt_client_config *out);

/* The connection as the log and /healthz see it. */
typedef struct ts_mqtt_link {
    const ts_observer *observer;     /* its health hook; may be NULL */
    const ts_mqtt_client *client;
    char down_reason[256];           /* the last cause logged */
} ts_mqtt_link;

/* Not connected yet: unhealthy until the first CONNACK. */
void ts_mqtt_link_starting(ts_mqtt_link *link);
void ts_mqtt_link_up(ts_mqtt_link *link, int session_present);
/* Logged once per cause while the broker stays away. */
void ts_mqtt_link_down(ts_mqtt_link *link, const char *why, int refused);

/* The connection's series. 0, or -1. */
int ts_mqtt_connection_render_metrics(const ts_mqtt_client *client,
                                      ts_buf *out);

#endif
