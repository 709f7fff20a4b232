#include "drivers/zmq/zmq_output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datapath/driver.h"
#include "drivers/zmq/zmq_settings.h"
#include "drivers/zmq/zmq_transport.h"

struct ts_output {
    ts_transport *transport;
    int (*ready)(void *arg);
    void *ready_arg;
};

static int on_output_ready(void *arg)
{
    ts_output *o = arg;
    return o->ready != NULL ? o->ready(o->ready_arg) : 0;
}

static void output_close(ts_output *o)
{
    if (o == NULL)
        return;
    if (o->transport != NULL)
        ts_transport_close(o->transport);
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
    o->ready = env->ready;
    o->ready_arg = env->ready_arg;
    ts_transport_options options = {
        .core = ts_config_settings(env->config),
        .zmq = ts_zmq_settings_of(env->config),
        .format = ts_config_section(env->config, &ts_format_setting_section),
        .push_output = strcmp(env->output_type, "push") == 0,
        .no_input = 1,
    };
    if (ts_transport_open(&o->transport, &options, env->base, err,
                          errlen) != 0) {
        output_close(o);
        return -1;
    }
    ts_transport_start(o->transport, NULL, NULL, on_output_ready, o);
    *out = o;
    return 0;
}

static ts_publish_result output_publish(ts_output *o, const void *topic,
                                        size_t topic_len, const void *payload,
                                        size_t len)
{
    return ts_transport_publish(o->transport, topic, topic_len, payload, len);
}

static void output_describe(const ts_output *o, char *buf, size_t len)
{
    snprintf(buf, len, "%s", ts_transport_output_endpoint(o->transport));
}

static void output_counters(const ts_output *o, ts_transport_counters *out)
{
    ts_transport_get_counters(o->transport, out);
}

/* CURVE's subscriber allow-list, as the ZeroMQ driver reloads it. */
static int output_adopt_config(ts_output *o, const ts_config *fresh,
                               char *err, size_t errlen)
{
    int keys = ts_transport_reload_allow_lists(
        o->transport, ts_zmq_settings_of(fresh), err, errlen);
    return keys < 0 ? -1 : 0;
}

const ts_output_ops ts_zmq_output = {
    .open = output_open,
    .publish = output_publish,
    .describe = output_describe,
    .counters = output_counters,
    .adopt_config = output_adopt_config,
    .close = output_close,
};
