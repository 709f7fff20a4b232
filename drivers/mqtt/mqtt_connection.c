#include "drivers/mqtt/mqtt_connection.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/log.h"

#define RETRY_FIRST_MS 200

void ts_mqtt_connection_config(const ts_mqtt_settings *s,
                               const ts_settings *core, int subscribe,
                               ts_mqtt_client_config *out)
{
    *out = (ts_mqtt_client_config){
        .urls = s->urls,
        .n_urls = s->n_urls,
        .client_id = s->client_id,
        .username = s->username,
        .password = s->password,
        .password_len = s->password_len,
        .ca_file = s->tls_ca_file,
        .cert_file = s->tls_cert_file,
        .key_file = s->tls_key_file,
        .version = ts_mqtt_protocol_level(s),
        .keepalive_s = (int)(s->keepalive_ms / 1000),
        .clean_start = s->clean_session,
        .session_expiry_s = (uint32_t)(s->session_expiry_ms / 1000),
        .max_inflight_in = (uint16_t)s->max_inflight,
        .max_payload = core->max_message_bytes,
        .filters = subscribe ? s->topics : NULL,
        .n_filters = subscribe ? s->n_topics : 0,
        .qos = s->qos,
        .max_inflight_out = (size_t)s->output_max_inflight,
        .retry_first_ms = RETRY_FIRST_MS,
        .retry_max_ms = (int)s->retry_max_ms,
    };
}

/* ---------------------------------------------------------- up, down */

static void set_health(const ts_mqtt_link *link, const char *reason)
{
    const ts_observer *o = link->observer;
    if (o != NULL && o->health != NULL)
        o->health(o->arg, reason);
}

void ts_mqtt_link_starting(ts_mqtt_link *link)
{
    set_health(link, "not connected to the MQTT broker yet");
}

void ts_mqtt_link_up(ts_mqtt_link *link, int session_present)
{
    ts_log(TS_LOG_INFO, "mqtt: connected to %s (%s session)",
           ts_mqtt_client_url(link->client),
           session_present ? "resumed" : "new");
    link->down_reason[0] = '\0';
    set_health(link, NULL);
}

void ts_mqtt_link_down(ts_mqtt_link *link, const char *why, int refused)
{
    /* Every attempt fails the same way while the broker is away: say it
     * once per cause. */
    if (strcmp(why, link->down_reason) != 0)
        ts_log(refused ? TS_LOG_ERROR : TS_LOG_WARN, "mqtt: %s; %s", why,
               "reconnecting with backoff");
    snprintf(link->down_reason, sizeof link->down_reason, "%s", why);
    char health[320];
    snprintf(health, sizeof health, "not connected to the MQTT broker: %s",
             why);
    set_health(link, health);
}

/* ------------------------------------------------------------ metrics */

int ts_mqtt_connection_render_metrics(const ts_mqtt_client *client,
                                      ts_buf *out)
{
    ts_mqtt_client_stats c;
    ts_mqtt_client_get_stats(client, &c);
    char line[512];
    int rc = 0;
#define SERIES(name, type, help, value)                                     \
    do {                                                                    \
        int n_ = snprintf(line, sizeof line,                                \
                          "# HELP tracesand_mqtt_" name " " help "\n"       \
                          "# TYPE tracesand_mqtt_" name " " type "\n"       \
                          "tracesand_mqtt_" name " %" PRIu64 "\n",          \
                          (uint64_t)(value));                               \
        if (rc == 0 && ts_buf_append(out, line, (size_t)n_) != 0)           \
            rc = -1;                                                        \
    } while (0)
    SERIES("connected", "gauge", "1 while connected and subscribed",
           c.connected);
    SERIES("connections_total", "counter", "connections accepted (CONNACK)",
           c.connections);
    SERIES("reconnects_total", "counter",
           "connections lost or refused, each followed by a retry",
           c.disconnects);
    SERIES("messages_total", "counter", "PUBLISH packets received",
           c.messages);
    SERIES("dup_flag_total", "counter",
           "messages received with the DUP flag", c.duplicates);
    SERIES("acks_total", "counter", "PUBACKs sent after commit and publish",
           c.acks_sent);
    SERIES("acks_lost_total", "counter",
           "PUBACKs not sent: their connection was gone (the broker "
           "delivers those messages again)", c.acks_lost);
    SERIES("published_total", "counter",
           "output messages acknowledged by the broker (QoS 1) or written "
           "(QoS 0)", c.published);
    SERIES("publish_refused_total", "counter",
           "output messages the broker refused (PUBACK >= 0x80)",
           c.publish_refused);
    SERIES("resent_total", "counter",
           "output messages sent again after a reconnection", c.resent);
    SERIES("output_unacknowledged", "gauge",
           "output messages waiting for their PUBACK",
           ts_mqtt_client_unacknowledged(client));
    SERIES("over_receive_maximum_total", "counter",
           "messages the broker sent with mqtt.max_inflight already "
           "unacknowledged, held unprocessed", c.over_receive_maximum);
    SERIES("dropped_qos0_total", "counter",
           "QoS 0 input dropped while input was paused and 32 MiB waited",
           c.dropped_qos0);
#undef SERIES
    return rc;
}
