#include "drivers/mqtt/mqtt_output.h"

#include <stdio.h>
#include <stdlib.h>

#include "datapath/driver.h"
#include "drivers/mqtt/mqtt_connection.h"
#include "drivers/mqtt/mqtt_topics.h"

ts_publish_result ts_mqtt_publish_outcome(ts_mqtt_client *client,
                                          const ts_mqtt_settings *settings,
                                          const ts_format *format,
                                          ts_buf *scratch, const void *topic,
                                          size_t topic_len,
                                          const void *payload, size_t len)
{
    ts_buf_reset(scratch);
    if (ts_mqtt_output_topic(settings, format, topic, topic_len, payload,
                             len, scratch) != 0)
        return TS_PUBLISH_FAILED;
    return ts_mqtt_client_publish(client, (const char *)scratch->data,
                                  scratch->len, payload, len,
                                  settings->output_qos);
}

/* ------------------------------------------------- another's output */

struct ts_output {
    const ts_mqtt_settings *mqtt;
    const ts_format *format;
    ts_mqtt_client *client;
    ts_mqtt_link link;
    ts_buf topic;
    int (*ready)(void *arg);
    void *ready_arg;
};

static void on_up(void *arg, int session_present)
{
    ts_mqtt_link_up(&((ts_output *)arg)->link, session_present);
}

static void on_down(void *arg, const char *why, int refused)
{
    ts_mqtt_link_down(&((ts_output *)arg)->link, why, refused);
}

static void on_writable(void *arg)
{
    ts_output *o = arg;
    if (o->ready != NULL)
        o->ready(o->ready_arg);
}

static void output_close(ts_output *o)
{
    if (o == NULL)
        return;
    ts_mqtt_client_free(o->client);
    ts_buf_free(&o->topic);
    free(o);
}

static int output_open(ts_output **out, const ts_output_env *env, char *err,
                       size_t errlen)
{
    *out = NULL;
    ts_output *o = calloc(1, sizeof *o);
    if (o == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    o->mqtt = ts_mqtt_settings_of(env->config);
    o->format = ts_format_of(
        ts_config_section(env->config, &ts_format_setting_section));
    o->ready = env->ready;
    o->ready_arg = env->ready_arg;
    ts_mqtt_client_config config;
    ts_mqtt_connection_config(o->mqtt, ts_config_settings(env->config), 0,
                              &config);
    ts_mqtt_client_events events = {
        .arg = o, .up = on_up, .down = on_down, .writable = on_writable,
    };
    o->client = ts_mqtt_client_new(&config, &events, env->base, err, errlen);
    if (o->client == NULL) {
        output_close(o);
        return -1;
    }
    o->link = (ts_mqtt_link){ .observer = env->observer,
                              .client = o->client };
    ts_mqtt_link_starting(&o->link);
    /* Connecting is under way before the input starts: outcomes wait in
     * the outbox until the session is up. */
    ts_mqtt_client_start(o->client);
    *out = o;
    return 0;
}

static ts_publish_result output_publish(ts_output *o, const void *topic,
                                        size_t topic_len, const void *payload,
                                        size_t len)
{
    return ts_mqtt_publish_outcome(o->client, o->mqtt, o->format, &o->topic,
                                   topic, topic_len, payload, len);
}

static void output_describe(const ts_output *o, char *buf, size_t len)
{
    snprintf(buf, len, "%s", o->mqtt->urls[0]);
}

static void output_counters(const ts_output *o, ts_transport_counters *out)
{
    ts_mqtt_client_stats stats;
    ts_mqtt_client_get_stats(o->client, &stats);
    *out = (ts_transport_counters){
        .publish_dropped_error = stats.publish_refused,
    };
}

static int output_render_metrics(ts_output *o, ts_buf *out)
{
    return ts_mqtt_connection_render_metrics(o->client, out);
}

const ts_output_ops ts_mqtt_output = {
    .open = output_open,
    .publish = output_publish,
    .describe = output_describe,
    .counters = output_counters,
    .render_metrics = output_render_metrics,
    .close = output_close,
};
