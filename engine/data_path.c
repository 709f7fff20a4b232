/* The data path: each input message through intake, the pipeline and the
 * outbox, and the group's end through the commit that publishes it. The
 * transport calls these with the ts_daemon as its argument. */
#include <string.h>
#include <time.h>

#include "ops/daemon_state.h"
#include "engine/intake.h"

/* Outcomes held before a mid-callback flush. A read budget of full batches
 * could otherwise hold millions of encoded outcomes at once. */
#define OUTBOX_FLUSH_ENTRIES 65536

static void log_rejection(ts_daemon *daemon, const char *user_id,
                          ts_reason reason, const char *detail)
{
    ts_log_rejection(&daemon->log_limiter, user_id, ts_reason_name(reason),
                     detail);
}

static void queue_message_rejection(ts_daemon *daemon, ts_reason reason,
                                    const char *detail)
{
    ts_pipeline_count_rejection(daemon->pipeline, reason);
    log_rejection(daemon, NULL, reason, detail);
    ts_outbox_add_rejection(&daemon->outbox, reason, detail);
}

int ts_daemon_on_output_ready(void *arg)
{
    ts_daemon *daemon = arg;
    return ts_group_commit_output_ready(&daemon->commit);
}

/* ---------------------------------------------------- message handling */

int64_t ts_wall_clock_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Profiles live in one array inside the pipeline, so an outcome's profile
 * pointer gives its index without a name lookup on the hot path; -1 when
 * it has none. */
static long outcome_profile_index(const ts_daemon *daemon,
                                  const ts_outcome *outcome)
{
    if (outcome->profile == NULL)
        return -1;
    const ts_profile *first = ts_pipeline_profile_at(daemon->pipeline, 0);
    size_t count = ts_pipeline_profile_count(daemon->pipeline);
    if (first == NULL || outcome->profile < first ||
        outcome->profile >= first + count)
        return -1;
    return (long)(outcome->profile - first);
}

static void observe_update_latency(ts_daemon *daemon,
                                   const ts_outcome *outcome,
                                   const struct timespec *started)
{
    long index = outcome_profile_index(daemon, outcome);
    if (daemon->metrics == NULL || index < 0)
        return;
    ts_metrics_observe_profile(daemon->metrics, (size_t)index,
                               ts_metrics_seconds_since(started));
}

/* A fresh report of a profile with a PRIVIC loop: counted once its group
 * is committed and the message carrying it sent. A repeat is the previous
 * report again, not a new draw from the channel, so it would bias the
 * estimate. */
static void queue_observation(ts_daemon *daemon, const ts_outcome *outcome)
{
    if (daemon->population == NULL || !outcome->sanitized ||
        outcome->repeated)
        return;
    long index = outcome_profile_index(daemon, outcome);
    if (index < 0 ||
        ts_population_profile_has_loop(daemon->population, (size_t)index) < 0)
        return;
    ts_outbox_observation observation = {
        .profile_index = (uint32_t)index,
        .channel_version = outcome->report.has_channel_version
                               ? outcome->report.channel_version : 1,
        .lat = outcome->report.lat,
        .lon = outcome->report.lon,
        .ts_ms = outcome->ts_ms,
    };
    ts_outbox_add_observation(&daemon->outbox, &observation);
}

static void process_update(ts_daemon *daemon,
                           const Tracesan__V1__LocationUpdate *update,
                           const ts_wire_update *wire,
                           const ts_time_bounds *bounds, ts_outcome *outcome)
{
    ts_input input;
    ts_codec_input_from_update(update, &input);
    ts_codec_input_wire(wire, &input);
    ts_reason reason;
    char detail[sizeof outcome->detail];
    if (ts_intake_check_time(daemon->settings, bounds, input.ts_ms, &reason,
                             detail, sizeof detail) != 0) {
        memset(outcome, 0, sizeof *outcome);
        outcome->user_id = input.user_id != NULL ? input.user_id : "";
        outcome->ts_ms = input.ts_ms;
        outcome->reason = reason;
        memcpy(outcome->detail, detail, sizeof detail);
        ts_pipeline_count_rejection(daemon->pipeline, reason);
        daemon->clock_rejections++;
    } else {
        struct timespec started;
        clock_gettime(CLOCK_MONOTONIC, &started);
        ts_pipeline_process(daemon->pipeline, &input, outcome);
        observe_update_latency(daemon, outcome, &started);
    }
    if (!outcome->sanitized)
        log_rejection(daemon, outcome->user_id, outcome->reason,
                      outcome->detail);
    if (ts_outbox_add_outcome(&daemon->outbox, outcome) == 0)
        queue_observation(daemon, outcome);
}

void ts_daemon_on_message(void *arg, const ts_inbound *message)
{
    ts_daemon *daemon = arg;
    daemon->messages_in++;
    ts_outbox_begin_message(&daemon->outbox);
    Tracesan__V1__LocationBatch *batch;
    ts_reason reason;
    char detail[160];
    if (ts_intake_open(daemon->settings, message, daemon->wire,
                       &daemon->arena, &batch,
                       &reason, detail, sizeof detail) != 0) {
        queue_message_rejection(daemon, reason, detail);
        return;
    }
    ts_time_bounds bounds =
        ts_intake_time_bounds(daemon->settings, ts_wall_clock_ms());
    /* No accepted update can land before earliest_ms any more, so windows
     * that ended before it are dead by the wall clock even when no update
     * moves the event-time watermark. */
    if (bounds.earliest_ms > 0)
        ts_pipeline_set_expiry_floor(daemon->pipeline, bounds.earliest_ms);
    ts_outcome outcome;
    for (size_t i = 0; i < batch->n_updates; i++)
        process_update(daemon, batch->updates[i], &daemon->wire[i], &bounds,
                       &outcome);
    ts_codec_batch_release(&daemon->arena, batch);
    if (daemon->outbox.count >= OUTBOX_FLUSH_ENTRIES)
        ts_group_commit_flush(&daemon->commit);
}

void ts_daemon_on_batch_end(void *arg)
{
    ts_daemon *daemon = arg;
    ts_group_commit_flush(&daemon->commit);
}

