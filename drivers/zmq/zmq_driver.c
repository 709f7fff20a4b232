#include "drivers/zmq/zmq_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "datapath/group.h"
#include "datapath/group_commit.h"
#include "datapath/outbox.h"
#include "drivers/zmq/zmq_settings.h"
#include "drivers/zmq/zmq_transport.h"
#include "engine/log.h"

/* Outcomes held before a mid-callback flush. A read budget of full batches
 * could otherwise hold millions of encoded outcomes at once. */
#define OUTBOX_FLUSH_ENTRIES 65536
/* Users visited per expiry tick: bounded so a huge table never stalls the
 * loop; the pipeline resumes where the previous tick stopped. */
#define EXPIRE_SCAN_PER_TICK 10000

struct ts_driver {
    ts_driver_env env;
    const ts_settings *core;
    const ts_zmq_settings *zmq;
    ts_pipeline *pipeline;
    ts_transport *transport;
    ts_group group;
    ts_outbox outbox;
    ts_sink sink;
    ts_group_commit commit;
    ts_store_backend store_backend;
    struct event *expire_event;
};

static const char *const input_types[] = { "pull", "sub", NULL };
static const char *const output_types[] = { "pub", "push", NULL };

/* --------------------------------------------------------- the loop */

/* A message is done: it may join a group now, and a long turn lets the
 * loop serve its other events before more input is read. */
static void message_done(ts_driver *d)
{
    ts_group_commit_close_message(&d->commit);
    if (d->outbox.count >= OUTBOX_FLUSH_ENTRIES)
        ts_group_commit_flush(&d->commit);
    if (ts_group_turn_spent(&d->group))
        ts_group_commit_yield(&d->commit);
}

static void on_message(void *arg, const ts_inbound *message)
{
    ts_driver *d = arg;
    ts_group_commit_open_message(&d->commit);
    if (ts_group_start(&d->group, d->pipeline, message, &d->sink))
        message_done(d);
    else
        ts_group_commit_yield(&d->commit);
}

/* A later loop turn after a yield: the open message goes on. */
static void next_turn(void *arg)
{
    ts_driver *d = arg;
    ts_group_end_turn(&d->group);
    if (!ts_group_in_message(&d->group))
        return;
    if (ts_group_resume(&d->group, d->pipeline, &d->sink))
        message_done(d);
    else
        ts_group_commit_yield(&d->commit);
}

/* The end of a readiness callback's messages: commit, then publish (a
 * message still open waits for its close). */
static void on_batch_end(void *arg)
{
    ts_driver *d = arg;
    ts_group_end_turn(&d->group);
    ts_group_commit_flush(&d->commit);
}

static int on_output_ready(void *arg)
{
    ts_driver *d = arg;
    return ts_group_commit_output_ready(&d->commit);
}

static void pause_input(void *arg)
{
    ts_transport_pause_input(((ts_driver *)arg)->transport);
}

static void resume_input(void *arg)
{
    ts_transport_resume_input(((ts_driver *)arg)->transport);
}

static void on_expire_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_driver *d = arg;
    ts_pipeline_set_clock(d->pipeline, ts_wall_clock_ms());
    if (d->core->max_backdate_ms > 0)
        ts_pipeline_set_expiry_floor(d->pipeline,
                                     ts_wall_clock_ms() -
                                         d->core->max_backdate_ms);
    size_t forgotten = ts_pipeline_expire(d->pipeline, EXPIRE_SCAN_PER_TICK);
    if (forgotten > 0)
        ts_log(TS_LOG_DEBUG, "expired %zu idle users", forgotten);
}

/* ------------------------------------------------------------ table */

static void zmq_close(ts_driver *d)
{
    if (d == NULL)
        return;
    if (d->expire_event != NULL)
        event_free(d->expire_event);
    ts_group_commit_stop(&d->commit);
    if (d->transport != NULL)
        ts_transport_close(d->transport);
    ts_outbox_free(&d->outbox);
    ts_group_free(&d->group);
    if (d->pipeline != NULL)
        ts_pipeline_set_state_backend(d->pipeline, NULL);
    ts_store_backend_free(&d->store_backend);
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
    d->env = *env;
    d->core = ts_config_settings(env->config);
    d->zmq = ts_zmq_settings_of(env->config);
    d->pipeline = env->pipeline;
    const ts_format_settings *format =
        ts_config_section(env->config, &ts_format_setting_section);
    if (ts_group_init(&d->group, d->core, format, env->observer) != 0) {
        snprintf(err, errlen, "out of memory for input.max_batch_updates");
        zmq_close(d);
        return -1;
    }
    d->sink = ts_outbox_sink(&d->outbox);
    if (env->observer != NULL && env->observer->published != NULL) {
        d->outbox.on_sent = env->observer->published;
        d->outbox.on_sent_arg = env->observer->arg;
    }
    if (env->observer != NULL && env->observer->reports_sent != NULL) {
        d->outbox.on_reports_sent = env->observer->reports_sent;
        d->outbox.on_reports_sent_arg = env->observer->arg;
    }
    if (env->store != NULL) {
        ts_store_backend_init(&d->store_backend, env->store);
        ts_pipeline_set_state_backend(d->pipeline,
                                      &d->store_backend.backend);
    }
    ts_transport_options options = {
        .core = d->core,
        .zmq = d->zmq,
        .format = format,
        .sub_input = strcmp(env->input_type, "sub") == 0,
        .push_output = strcmp(env->output_type, "push") == 0,
    };
    if (ts_transport_open(&d->transport, &options, env->base, err,
                          errlen) != 0) {
        zmq_close(d);
        return -1;
    }
    d->commit = (ts_group_commit){
        .store = env->store,
        .store_backend = &d->store_backend,
        .pipeline = d->pipeline,
        .outbox = &d->outbox,
        .publisher = ts_transport_publisher(d->transport),
        .pause_input = pause_input,
        .resume_input = resume_input,
        .input_arg = d,
        .next_turn = next_turn,
        .observer = env->observer,
        .base = env->base,
    };
    int64_t interval_ms = d->core->expire_interval_ms > 0
                              ? d->core->expire_interval_ms : 1000;
    struct timeval interval = {
        .tv_sec = (time_t)(interval_ms / 1000),
        .tv_usec = (suseconds_t)(interval_ms % 1000) * 1000,
    };
    d->expire_event = event_new(env->base, -1, EV_PERSIST, on_expire_tick, d);
    if (d->expire_event == NULL || ts_group_commit_start(&d->commit) != 0 ||
        event_add(d->expire_event, &interval) != 0) {
        snprintf(err, errlen, "cannot set up the commit and expiry timers");
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
    snprintf(buf, len, "input=%s output=%s",
             ts_transport_input_endpoint(d->transport),
             ts_transport_output_endpoint(d->transport));
}

static int zmq_finish(ts_driver *d)
{
    /* A message still open when the loop ended is not finished: see
     * ts_group_commit_drop_message. */
    if (ts_group_in_message(&d->group))
        ts_group_commit_drop_message(&d->commit,
                                     ts_group_abandon(&d->group));
    return ts_group_commit_finish(&d->commit);
}

static void zmq_stats(const ts_driver *d, ts_driver_stats *out)
{
    memset(out, 0, sizeof *out);
    ts_driver_stats_add_pipeline(out, d->pipeline);
    out->updates_before_pipeline = d->group.refused_before_pipeline;
    out->messages_in = d->group.messages;
    out->published = d->outbox.published;
    out->publish_failures = d->outbox.publish_failures;
    out->encode_failures = d->group.encode_failures +
                           d->outbox.encode_failures +
                           d->commit.committing.encode_failures;
    out->dropped_output_hwm = d->commit.dropped_unsent;
    out->dropped_uncommitted = d->commit.dropped_uncommitted;
    out->input_pauses_store = d->commit.pauses;
    out->store_commit_failures = d->commit.failures;
    ts_transport_get_counters(d->transport, &out->transport);
}

/* The profiles are the caller's (ops/reload.c swaps them in the pipeline
 * it gave us); what is the driver's is CURVE's client allow-lists, copied,
 * which apply to the next handshakes while connected peers stay. */
static int zmq_adopt_config(ts_driver *d, ts_config *fresh, char *err,
                            size_t errlen)
{
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
    return ts_transport_publish(d->transport, topic, topic_len, payload,
                                len);
}

const ts_driver_ops ts_zmq_driver = {
    .name = "zmq",
    .input_types = input_types,
    .output_types = output_types,
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
    .adopt_config = zmq_adopt_config,
    .publish = zmq_publish,
};
