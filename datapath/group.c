#include "datapath/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t ts_wall_clock_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

int ts_group_init(ts_group *group, const ts_settings *settings,
                  const ts_format_settings *format,
                  const ts_observer *observer)
{
    memset(group, 0, sizeof *group);
    group->settings = settings;
    group->format = ts_format_of(format);
    group->batch_outcomes = format->batch ? format->batch_outcomes : 0;
    group->observer = observer;
    ts_codec_arena_init(&group->arena);
    /* input.max_batch_updates is restart-only, so this never resizes;
     * calloc leaves the untouched tail of a large limit unmapped. */
    group->wire = calloc(settings->max_batch_updates, sizeof *group->wire);
    return group->wire != NULL ? 0 : -1;
}

void ts_group_free(ts_group *group)
{
    ts_codec_arena_free(&group->arena);
    free(group->wire);
    group->wire = NULL;
    ts_buf_free(&group->topic);
    ts_buf_free(&group->payload);
    ts_format_batch_free(&group->batch);
}

/* ------------------------------------------------------------- output */

/* The open OutcomeBatch as one message, when it holds any. */
static void flush_batch(ts_group *group, const ts_sink *sink)
{
    size_t held = ts_format_batch_count(&group->batch);
    if (held == 0)
        return;
    const void *payload;
    size_t len;
    if (ts_format_batch_payload(group->format, &group->batch,
                                &group->payload, &payload, &len) != 0 ||
        sink->put(sink->arg, TS_TOPIC_BATCH, sizeof TS_TOPIC_BATCH - 1,
                  payload, len) != 0)
        group->encode_failures += held;
    ts_format_batch_reset(&group->batch);
}

/* The outcome in group->topic and group->payload to the sink. 0, or -1
 * when it was lost (the fail-closed direction). */
static int emit(ts_group *group, const ts_sink *sink, int encoded)
{
    if (encoded == 0 &&
        sink->put(sink->arg, group->topic.data, group->topic.len,
                  group->payload.data, group->payload.len) == 0)
        return 0;
    group->encode_failures += encoded != 0;
    return -1;
}

/* An outcome encoded straight into the open batch, which goes out when
 * it holds output.batch_outcomes. */
static int batch(ts_group *group, const ts_sink *sink, int encoded)
{
    if (encoded != 0) {
        group->encode_failures++;
        return -1;
    }
    if (ts_format_batch_count(&group->batch) >= group->batch_outcomes)
        flush_batch(group, sink);
    return 0;
}

/* One outcome, or a rejection of a whole message (outcome NULL), out. */
static int output(ts_group *group, const ts_sink *sink,
                  const ts_outcome *outcome, ts_reason reason,
                  const char *detail)
{
    if (group->batch_outcomes > 0)
        return batch(group, sink,
                     outcome != NULL
                         ? ts_format_batch_outcome(group->format,
                                                   &group->batch, outcome)
                         : ts_format_batch_rejection(group->format,
                                                     &group->batch, reason,
                                                     detail));
    ts_buf_reset(&group->topic);
    ts_buf_reset(&group->payload);
    return emit(group, sink,
                outcome != NULL
                    ? ts_format_outcome(group->format, outcome, &group->topic,
                                        &group->payload)
                    : ts_format_rejection(group->format, reason, detail,
                                          &group->topic, &group->payload));
}

static void reject_message(ts_group *group, ts_pipeline *pipeline,
                           const ts_sink *sink, ts_reason reason,
                           const char *detail)
{
    ts_pipeline_count_rejection(pipeline, reason);
    const ts_observer *o = group->observer;
    if (o != NULL && o->rejected != NULL)
        o->rejected(o->arg, NULL, reason, detail);
    output(group, sink, NULL, reason, detail);
}

/* Profiles live in one array inside the pipeline, so an outcome's profile
 * pointer gives its index without a name lookup on the hot path; -1 when
 * it has none. */
static long profile_index(const ts_pipeline *pipeline,
                          const ts_outcome *outcome)
{
    if (outcome->profile == NULL)
        return -1;
    const ts_profile *first = ts_pipeline_profile_at(pipeline, 0);
    size_t count = ts_pipeline_profile_count(pipeline);
    if (first == NULL || outcome->profile < first ||
        outcome->profile >= first + count)
        return -1;
    return (long)(outcome->profile - first);
}

/* A fresh report of a profile with a population loop: kept with the group
 * and counted once the group is committed. A repeat is the previous report
 * again, not a new draw from the channel, so it would bias the
 * estimate. */
static void observe_report(const ts_group *group, const ts_sink *sink,
                           const ts_outcome *outcome, long index)
{
    const ts_observer *o = group->observer;
    if (sink->observe == NULL || o == NULL || o->counts_reports == NULL ||
        !outcome->sanitized || outcome->repeated || index < 0 ||
        !o->counts_reports(o->arg, (size_t)index))
        return;
    ts_observation observation = {
        .profile_index = (uint32_t)index,
        .channel_version = outcome->report.has_channel_version
                               ? outcome->report.channel_version : 1,
        .lat = outcome->report.lat,
        .lon = outcome->report.lon,
        .ts_ms = outcome->ts_ms,
    };
    sink->observe(sink->arg, &observation);
}

/* ------------------------------------------------------------ updates */

static void refuse(ts_group *group, ts_pipeline *pipeline,
                   const ts_input *input, ts_reason reason,
                   const char *detail, ts_outcome *outcome)
{
    memset(outcome, 0, sizeof *outcome);
    outcome->user_id = input->user_id != NULL ? input->user_id : "";
    outcome->ts_ms = input->ts_ms;
    outcome->reason = reason;
    snprintf(outcome->detail, sizeof outcome->detail, "%s", detail);
    ts_pipeline_count_rejection(pipeline, reason);
    group->refused_before_pipeline++;
}

static ts_reason admit(const ts_group *group, const ts_input *input,
                       char *detail, size_t detail_len)
{
    if (group->admission.admit == NULL || input->user_id == NULL ||
        input->user_id[0] == '\0')
        return TS_REASON_NONE;
    size_t len = input->has_wire_lengths &&
                         input->user_id_wire_len != SIZE_MAX
                     ? input->user_id_wire_len
                     : strlen(input->user_id);
    return group->admission.admit(group->admission.arg, input->user_id, len,
                                  detail, detail_len);
}

static void process_update(ts_group *group, ts_pipeline *pipeline,
                           const Tracesan__V1__LocationUpdate *update,
                           const ts_wire_update *wire,
                           const ts_time_bounds *bounds, const ts_sink *sink)
{
    ts_input input;
    ts_outcome outcome;
    ts_codec_input_from_update(update, &input);
    ts_codec_input_wire(wire, &input);
    ts_reason reason;
    char detail[sizeof outcome.detail];
    const ts_observer *o = group->observer;
    if ((reason = admit(group, &input, detail, sizeof detail)) !=
            TS_REASON_NONE ||
        ts_intake_check_time(group->settings, bounds, input.ts_ms, &reason,
                             detail, sizeof detail) != 0) {
        refuse(group, pipeline, &input, reason, detail, &outcome);
    } else if (o != NULL && o->latency != NULL) {
        struct timespec started, ended;
        clock_gettime(CLOCK_MONOTONIC, &started);
        ts_pipeline_process(pipeline, &input, &outcome);
        clock_gettime(CLOCK_MONOTONIC, &ended);
        long index = profile_index(pipeline, &outcome);
        if (index >= 0)
            o->latency(o->arg, (size_t)index,
                       (double)(ended.tv_sec - started.tv_sec) +
                           (double)(ended.tv_nsec - started.tv_nsec) / 1e9);
    } else {
        ts_pipeline_process(pipeline, &input, &outcome);
    }
    if (!outcome.sanitized && o != NULL && o->rejected != NULL)
        o->rejected(o->arg, outcome.user_id, outcome.reason, outcome.detail);
    if (output(group, sink, &outcome, TS_REASON_NONE, NULL) == 0)
        observe_report(group, sink, &outcome,
                       profile_index(pipeline, &outcome));
}

/* Decodes `message` and opens it (the message's bytes are not needed
 * after this); a message refused whole gets its rejection here. 1 when
 * opened, 0 when refused. */
static int open_message(ts_group *group, ts_pipeline *pipeline,
                        const ts_inbound *message, const ts_sink *sink)
{
    group->messages++;
    ts_format_batch_reset(&group->batch);
    Tracesan__V1__LocationBatch *batch;
    ts_reason reason;
    char detail[160];
    if (ts_intake_open(group->settings, message, group->wire, &group->arena,
                       &batch, &reason, detail, sizeof detail) != 0) {
        reject_message(group, pipeline, sink, reason, detail);
        flush_batch(group, sink);
        return 0;
    }
    /* The whole message is one instant of the daemon's clock: budget
     * windows close by it as well as by event time (engine/pipeline.h). */
    int64_t now_ms = ts_wall_clock_ms();
    ts_pipeline_set_clock(pipeline, now_ms);
    group->open_bounds = ts_intake_time_bounds(group->settings, now_ms);
    /* No accepted update can land before earliest_ms any more, so windows
     * that ended before it are dead by the wall clock even when no update
     * moves the event-time watermark. */
    if (group->open_bounds.earliest_ms > 0)
        ts_pipeline_set_expiry_floor(pipeline, group->open_bounds.earliest_ms);
    group->open = batch;
    group->next = 0;
    return 1;
}

static void close_message(ts_group *group, const ts_sink *sink)
{
    group->updates += group->open->n_updates;
    ts_codec_batch_release(&group->arena, group->open);
    group->open = NULL;
    group->next = 0;
    flush_batch(group, sink);
}

static int turn_over(const struct timespec *end)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > end->tv_sec ||
           (now.tv_sec == end->tv_sec && now.tv_nsec >= end->tv_nsec);
}

/* The open message's updates, in order: all of them (`bounded` 0), or
 * at least one and then until the turn's time is spent. 1 when the
 * message is done. */
static int run_updates(ts_group *group, ts_pipeline *pipeline,
                       const ts_sink *sink, int bounded)
{
    Tracesan__V1__LocationBatch *batch = group->open;
    size_t n = batch->n_updates;
    while (group->next < n) {
        size_t i = group->next++;
        process_update(group, pipeline, batch->updates[i], &group->wire[i],
                       &group->open_bounds, sink);
        if (bounded && group->next < n && turn_over(&group->turn_end))
            return 0;
    }
    close_message(group, sink);
    return 1;
}

static void start_turn(ts_group *group)
{
    if (group->in_turn)
        return;
    group->in_turn = 1;
    clock_gettime(CLOCK_MONOTONIC, &group->turn_end);
    group->turn_end.tv_nsec += TS_GROUP_TURN_MS * 1000000L;
    if (group->turn_end.tv_nsec >= 1000000000L) {
        group->turn_end.tv_sec++;
        group->turn_end.tv_nsec -= 1000000000L;
    }
}

size_t ts_group_process(ts_group *group, ts_pipeline *pipeline,
                        const ts_inbound *message, const ts_sink *sink)
{
    if (!open_message(group, pipeline, message, sink))
        return 0;
    size_t n = group->open->n_updates;
    run_updates(group, pipeline, sink, 0);
    return n;
}

int ts_group_start(ts_group *group, ts_pipeline *pipeline,
                   const ts_inbound *message, const ts_sink *sink)
{
    start_turn(group);
    if (!open_message(group, pipeline, message, sink))
        return 1;
    return run_updates(group, pipeline, sink, 1);
}

int ts_group_resume(ts_group *group, ts_pipeline *pipeline,
                    const ts_sink *sink)
{
    if (group->open == NULL)
        return 1;
    start_turn(group);
    return run_updates(group, pipeline, sink, 1);
}

int ts_group_in_message(const ts_group *group)
{
    return group->open != NULL;
}

int ts_group_turn_spent(const ts_group *group)
{
    return group->in_turn && turn_over(&group->turn_end);
}

void ts_group_end_turn(ts_group *group)
{
    group->in_turn = 0;
}

size_t ts_group_abandon(ts_group *group)
{
    if (group->open == NULL)
        return 0;
    size_t left = group->open->n_updates - group->next;
    group->updates += group->open->n_updates;
    ts_codec_batch_release(&group->arena, group->open);
    group->open = NULL;
    group->next = 0;
    ts_format_batch_reset(&group->batch);
    return left;
}
