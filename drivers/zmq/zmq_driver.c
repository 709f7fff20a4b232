#include "drivers/zmq/zmq_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datapath/pipeline_driver.h"
#include "drivers/zmq/zmq_output.h"
#include "drivers/zmq/zmq_settings.h"
#include "drivers/zmq/zmq_transport.h"
#include "engine/log.h"

struct ts_driver {
    ts_pipeline_driver pd;
    const ts_zmq_settings *zmq;
    ts_transport *transport;
};

static const char *const input_types[] = { "pull", "sub", NULL };
static const char *const output_types[] = { "pub", "push", NULL };

/* --------------------------------------------------------- the loop */

static void on_message(void *arg, const ts_inbound *message)
{
    ts_driver *d = arg;
    ts_pipeline_driver_process(&d->pd, message);
}

static void on_batch_end(void *arg)
{
    ts_driver *d = arg;
    ts_pipeline_driver_end_read(&d->pd);
}

static int on_output_ready(void *arg)
{
    ts_driver *d = arg;
    return ts_group_commit_output_ready(&d->pd.commit);
}

static void pause_input(void *arg)
{
    ts_transport_pause_input(((ts_driver *)arg)->transport);
}

static void resume_input(void *arg)
{
    ts_transport_resume_input(((ts_driver *)arg)->transport);
}

/* ------------------------------------------------------------ table */

static void zmq_close(ts_driver *d)
{
    if (d == NULL)
        return;
    ts_pipeline_driver_stop(&d->pd);
    if (d->transport != NULL)
        ts_transport_close(d->transport);
    ts_pipeline_driver_free(&d->pd);
    free(d);
}

static int zmq_open(ts_driver **out, const ts_driver_env *env, char *err,
                    size_t errlen)
{
    *out = NULL;
    ts_driver *d = calloc(1, sizeof *d);
    if (d == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    d->zmq = ts_zmq_settings_of(env->config);
    if (ts_pipeline_driver_init(&d->pd, env, err, errlen) != 0) {
        zmq_close(d);
        return -1;
    }
    /* Without an output of its own (output.type is another driver's) it
     * publishes through that one. */
    ts_transport_options options = {
        .core = d->pd.core,
        .zmq = d->zmq,
        .format = ts_config_section(env->config, &ts_format_setting_section),
        .sub_input = strcmp(env->input_type, "sub") == 0,
        .push_output = strcmp(env->output_type, "push") == 0,
        .no_output = env->output != NULL,
    };
    if (ts_transport_open(&d->transport, &options, env->base, err,
                          errlen) != 0) {
        zmq_close(d);
        return -1;
    }
    ts_publisher publisher = env->output != NULL
                                 ? ts_pipeline_driver_publisher(&d->pd)
                                 : ts_transport_publisher(d->transport);
    ts_driver_input input = { d, pause_input, resume_input, NULL };
    if (ts_pipeline_driver_start(&d->pd, publisher, input, err, errlen) !=
        0) {
        zmq_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

static int zmq_start(ts_driver *d, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    ts_transport_start(d->transport, on_message, on_batch_end,
                       on_output_ready, d);
    return 0;
}

static void zmq_describe(const ts_driver *d, char *buf, size_t len)
{
    ts_pipeline_driver_describe(&d->pd,
                                ts_transport_input_endpoint(d->transport),
                                ts_transport_output_endpoint(d->transport),
                                buf, len);
}

static int zmq_finish(ts_driver *d)
{
    return ts_pipeline_driver_finish(&d->pd);
}

static void zmq_stats(const ts_driver *d, ts_driver_stats *out)
{
    ts_pipeline_driver_stats(&d->pd, out);
    if (d->pd.output == NULL)
        ts_transport_get_counters(d->transport, &out->transport);
}

static int zmq_render_metrics(ts_driver *d, ts_buf *out)
{
    return ts_pipeline_driver_render_metrics(&d->pd, out);
}

/* The profiles are the caller's (ops/reload.c swaps them in the pipeline
 * it gave us); what is the driver's is CURVE's client allow-lists, copied,
 * which apply to the next handshakes while connected peers stay. */
static int zmq_adopt_config(ts_driver *d, ts_config *fresh, char *err,
                            size_t errlen)
{
    if (ts_pipeline_driver_adopt_config(&d->pd, fresh, err, errlen) != 0)
        return -1;
    const ts_zmq_settings *zmq = ts_zmq_settings_of(fresh);
    int keys = ts_transport_reload_allow_lists(d->transport, zmq, err,
                                               errlen);
    if (keys > 0)
        ts_log(TS_LOG_INFO, "reload: client allow-lists reloaded "
               "(input %zu keys, output %s)",
               zmq->curve_input_allow != NULL
                   ? zmq->curve_input_allow->n_keys : (size_t)0,
               zmq->curve_output_allow != NULL ? "restricted"
                                               : "open to any key");
    if (keys < 0) {
        char why[512];
        snprintf(why, sizeof why, "client allow-lists not reloaded, the "
                 "running ones stay: %s", err);
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    return 0;
}

static ts_publish_result zmq_publish(ts_driver *d, const void *topic,
                                     size_t topic_len, const void *payload,
                                     size_t len)
{
    if (d->pd.output != NULL)
        return ts_pipeline_driver_publish_aside(&d->pd, topic, topic_len,
                                                payload, len);
    return ts_transport_publish(d->transport, topic, topic_len, payload,
                                len);
}

const ts_driver_ops ts_zmq_driver = {
    .name = "zmq",
    .input_types = input_types,
    .output_types = output_types,
    /* Its output serves other drivers' input, and its input publishes
     * through theirs (output.type = "mqtt"). */
    .output = &ts_zmq_output,
    .takes_outputs = 1,
    .settings = &ts_zmq_setting_section,
    /* It commits to state.dir's store, and PRIVIC loops run with it. */
    .uses_store = 1,
    .runs_population = 1,
    /* Its life on the loop. */
    .open = zmq_open,
    .start = zmq_start,
    .describe = zmq_describe,
    .finish = zmq_finish,
    .close = zmq_close,
    /* What the operations side reads and asks of it. */
    .stats = zmq_stats,
    .render_metrics = zmq_render_metrics,
    .adopt_config = zmq_adopt_config,
    .publish = zmq_publish,
};
