#include "datapath/pipeline_driver.h"

#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "engine/log.h"

/* Outcomes held before a mid-read flush. A read budget of full batches
 * could otherwise hold millions of encoded outcomes at once. */
#define OUTBOX_FLUSH_ENTRIES 65536
/* Users visited per expiry tick: bounded so a huge table never stalls the
 * loop; the pipeline resumes where the previous tick stopped. */
#define EXPIRE_SCAN_PER_TICK 10000

/* Why input is stopped: the commit (a failed commit, a full outbox while
 * one is under way) and the other driver's output (blocked) each start
 * it again only for themselves. */
enum { PAUSED_COMMIT = 1u, PAUSED_OUTPUT = 2u };

static void pause_for(ts_pipeline_driver *pd, unsigned why)
{
    unsigned before = pd->paused;
    pd->paused |= why;
    if (before == 0 && pd->input.pause != NULL)
        pd->input.pause(pd->input.arg);
}

static void resume_for(ts_pipeline_driver *pd, unsigned why)
{
    if ((pd->paused & why) == 0)
        return;
    pd->paused &= ~why;
    if (pd->paused == 0 && pd->input.resume != NULL)
        pd->input.resume(pd->input.arg);
}

static void commit_pause(void *arg)
{
    pause_for(arg, PAUSED_COMMIT);
}

static void commit_resume(void *arg)
{
    resume_for(arg, PAUSED_COMMIT);
}

static void commit_next_turn(void *arg)
{
    ts_pipeline_driver *pd = arg;
    if (pd->input.next_turn != NULL)
        pd->input.next_turn(pd->input.arg);
    else
        ts_pipeline_driver_next_turn(pd);
}

/* ------------------------------------------------ the other's output */

static int on_output_ready(void *arg)
{
    ts_pipeline_driver *pd = arg;
    int blocked = ts_group_commit_output_ready(&pd->commit);
    if (!blocked)
        resume_for(pd, PAUSED_OUTPUT);
    return blocked;
}

ts_publish_result ts_pipeline_driver_publish(ts_pipeline_driver *pd,
                                             const void *topic,
                                             size_t topic_len,
                                             const void *payload, size_t len)
{
    ts_publish_result result = pd->env.output->publish(
        pd->output, topic, topic_len, payload, len);
    if (result == TS_PUBLISH_BLOCKED)
        pause_for(pd, PAUSED_OUTPUT);
    return result;
}

ts_publish_result ts_pipeline_driver_publish_aside(ts_pipeline_driver *pd,
                                                   const void *topic,
                                                   size_t topic_len,
                                                   const void *payload,
                                                   size_t len)
{
    return pd->env.output->publish(pd->output, topic, topic_len, payload,
                                   len);
}

static ts_publish_result publish_to_output(void *arg, const void *topic,
                                           size_t topic_len,
                                           const void *payload, size_t len)
{
    return ts_pipeline_driver_publish(arg, topic, topic_len, payload, len);
}

ts_publisher ts_pipeline_driver_publisher(ts_pipeline_driver *pd)
{
    return (ts_publisher){ pd, publish_to_output };
}

/* ------------------------------------------------------------ expiry */

static void on_expire_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_pipeline_driver *pd = arg;
    int64_t now = ts_wall_clock_ms();
    ts_pipeline_set_clock(pd->pipeline, now);
    if (pd->core->max_backdate_ms > 0)
        ts_pipeline_set_expiry_floor(pd->pipeline,
                                     now - pd->core->max_backdate_ms);
    size_t forgotten = ts_pipeline_expire(pd->pipeline, EXPIRE_SCAN_PER_TICK);
    if (forgotten > 0)
        ts_log(TS_LOG_DEBUG, "expired %zu idle users", forgotten);
}

/* ---------------------------------------------------------------- life */

int ts_pipeline_driver_init(ts_pipeline_driver *pd, const ts_driver_env *env,
                            char *err, size_t errlen)
{
    memset(pd, 0, sizeof *pd);
    pd->env = *env;
    pd->core = ts_config_settings(env->config);
    pd->pipeline = env->pipeline;
    const ts_format_settings *format =
        ts_config_section(env->config, &ts_format_setting_section);
    if (ts_group_init(&pd->group, pd->core, format, env->observer) != 0) {
        snprintf(err, errlen, "out of memory for input.max_batch_updates");
        return -1;
    }
    pd->sink = ts_outbox_sink(&pd->outbox);
    const ts_observer *o = env->observer;
    if (o != NULL && o->published != NULL) {
        pd->outbox.on_sent = o->published;
        pd->outbox.on_sent_arg = o->arg;
    }
    if (o != NULL && o->reports_sent != NULL) {
        pd->outbox.on_reports_sent = o->reports_sent;
        pd->outbox.on_reports_sent_arg = o->arg;
    }
    if (env->store != NULL) {
        ts_store_backend_init(&pd->store_backend, env->store);
        ts_pipeline_set_state_backend(pd->pipeline,
                                      &pd->store_backend.backend);
    }
    if (env->output != NULL) {
        ts_output_env output_env = {
            .config = env->config,
            .output_type = env->output_type,
            .base = env->base,
            .observer = env->observer,
            .ready = on_output_ready,
            .ready_arg = pd,
        };
        if (env->output->open(&pd->output, &output_env, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int ts_pipeline_driver_start(ts_pipeline_driver *pd, ts_publisher publisher,
                             ts_driver_input input, char *err, size_t errlen)
{
    pd->input = input;
    pd->commit = (ts_group_commit){
        .store = pd->env.store,
        .store_backend = &pd->store_backend,
        .pipeline = pd->pipeline,
        .outbox = &pd->outbox,
        .publisher = publisher,
        .pause_input = commit_pause,
        .resume_input = commit_resume,
        .input_arg = pd,
        .next_turn = commit_next_turn,
        .observer = pd->env.observer,
        .base = pd->env.base,
    };
    int64_t interval_ms = pd->core->expire_interval_ms > 0
                              ? pd->core->expire_interval_ms : 1000;
    struct timeval interval = {
        .tv_sec = (time_t)(interval_ms / 1000),
        .tv_usec = (suseconds_t)(interval_ms % 1000) * 1000,
    };
    pd->expire_event = event_new(pd->env.base, -1, EV_PERSIST,
                                 on_expire_tick, pd);
    if (pd->expire_event == NULL || ts_group_commit_start(&pd->commit) != 0 ||
        event_add(pd->expire_event, &interval) != 0) {
        snprintf(err, errlen, "cannot set up the commit and expiry timers");
        return -1;
    }
    return 0;
}

int ts_pipeline_driver_process(ts_pipeline_driver *pd,
                               const ts_inbound *message)
{
    ts_group_commit_open_message(&pd->commit);
    if (ts_group_start(&pd->group, pd->pipeline, message, &pd->sink)) {
        ts_pipeline_driver_message_done(pd);
        return 1;
    }
    ts_group_commit_yield(&pd->commit);
    return 0;
}

void ts_pipeline_driver_message_done(ts_pipeline_driver *pd)
{
    ts_group_commit_close_message(&pd->commit);
    if (pd->outbox.count >= OUTBOX_FLUSH_ENTRIES)
        ts_group_commit_flush(&pd->commit);
    if (ts_group_turn_spent(&pd->group))
        ts_group_commit_yield(&pd->commit);
}

int ts_pipeline_driver_next_turn(ts_pipeline_driver *pd)
{
    ts_group_end_turn(&pd->group);
    if (!ts_group_in_message(&pd->group))
        return 1;
    if (ts_group_resume(&pd->group, pd->pipeline, &pd->sink)) {
        ts_pipeline_driver_message_done(pd);
        return 1;
    }
    ts_group_commit_yield(&pd->commit);
    return 0;
}

void ts_pipeline_driver_end_read(ts_pipeline_driver *pd)
{
    ts_group_end_turn(&pd->group);
    ts_group_commit_flush(&pd->commit);
}

int ts_pipeline_driver_finish(ts_pipeline_driver *pd)
{
    if (ts_group_in_message(&pd->group))
        ts_group_commit_drop_message(&pd->commit,
                                     ts_group_abandon(&pd->group));
    return ts_group_commit_finish(&pd->commit);
}

void ts_pipeline_driver_stop(ts_pipeline_driver *pd)
{
    if (pd->expire_event != NULL)
        event_free(pd->expire_event);
    pd->expire_event = NULL;
    ts_group_commit_stop(&pd->commit);
}

void ts_pipeline_driver_free(ts_pipeline_driver *pd)
{
    ts_pipeline_driver_stop(pd);
    if (pd->output != NULL)
        pd->env.output->close(pd->output);
    pd->output = NULL;
    ts_outbox_free(&pd->outbox);
    ts_group_free(&pd->group);
    if (pd->pipeline != NULL)
        ts_pipeline_set_state_backend(pd->pipeline, NULL);
    ts_store_backend_free(&pd->store_backend);
}

/* ------------------------------------------------- what others read */

void ts_pipeline_driver_describe(const ts_pipeline_driver *pd,
                                 const char *input, const char *own_output,
                                 char *buf, size_t len)
{
    char output[256];
    if (pd->output != NULL)
        pd->env.output->describe(pd->output, output, sizeof output);
    else
        snprintf(output, sizeof output, "%s", own_output);
    snprintf(buf, len, "input=%s output=%s", input, output);
}

void ts_pipeline_driver_stats(const ts_pipeline_driver *pd,
                              ts_driver_stats *out)
{
    memset(out, 0, sizeof *out);
    ts_driver_stats_add_pipeline(out, pd->pipeline);
    out->updates_before_pipeline = pd->group.refused_before_pipeline;
    out->messages_in = pd->group.messages;
    out->published = pd->outbox.published;
    out->publish_failures = pd->outbox.publish_failures;
    out->encode_failures = pd->group.encode_failures +
                           pd->outbox.encode_failures +
                           pd->commit.committing.encode_failures;
    out->dropped_output_hwm = pd->commit.dropped_unsent;
    out->dropped_uncommitted = pd->commit.dropped_uncommitted;
    out->input_pauses_store = pd->commit.pauses;
    out->store_commit_failures = pd->commit.failures;
    if (pd->output != NULL)
        pd->env.output->counters(pd->output, &out->transport);
}

int ts_pipeline_driver_render_metrics(ts_pipeline_driver *pd, ts_buf *out)
{
    if (pd->output == NULL || pd->env.output->render_metrics == NULL)
        return 0;
    return pd->env.output->render_metrics(pd->output, out);
}

int ts_pipeline_driver_adopt_config(ts_pipeline_driver *pd,
                                    const ts_config *fresh, char *err,
                                    size_t errlen)
{
    if (pd->output == NULL || pd->env.output->adopt_config == NULL)
        return 0;
    return pd->env.output->adopt_config(pd->output, fresh, err, errlen);
}
