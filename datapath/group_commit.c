#include "datapath/group_commit.h"

#include <stdio.h>
#include <time.h>

#include "engine/log.h"

#define ERR_MAX 512

long ts_group_commit_next_delay(long ms)
{
    if (ms <= 0)
        return TS_COMMIT_RETRY_FIRST_MS;
    return ms >= TS_COMMIT_RETRY_MAX_MS / 2 ? TS_COMMIT_RETRY_MAX_MS
                                            : ms * 2;
}

/* ------------------------------------------------------- input holds */

enum {
    HOLD_COMMIT_FAILED = 1u,     /* a held group waits for its retry */
    HOLD_WRITER_BACKLOG = 2u,    /* the outbox is full mid-commit */
    HOLD_TURN = 4u,              /* the driver yielded its turn */
};

static void hold_input(ts_group_commit *gc, unsigned cause)
{
    if (gc->input_holds == 0)
        gc->pause_input(gc->input_arg);
    gc->input_holds |= cause;
}

static void release_input(ts_group_commit *gc, unsigned cause)
{
    if (!(gc->input_holds & cause))
        return;
    gc->input_holds &= ~cause;
    if (gc->input_holds == 0)
        gc->resume_input(gc->input_arg);
}

/* ------------------------------------------------------ failure, retry */

static void arm_retry(ts_group_commit *gc)
{
    struct timeval delay = {
        .tv_sec = (time_t)(gc->retry_ms / 1000),
        .tv_usec = (suseconds_t)(gc->retry_ms % 1000) * 1000,
    };
    if (gc->retry_event == NULL || event_add(gc->retry_event, &delay) != 0) {
        /* Without a retry the daemon would stay paused for good; leaving
         * the loop ends in the shutdown path's last attempt. */
        ts_log(TS_LOG_ERROR, "cannot schedule the commit retry; stopping");
        event_base_loopbreak(gc->base);
    }
}

/* The failed group stays unpublished, and its users stay dirty (or in
 * flight) with their in-memory ledgers debited (conservative). Input stops
 * so that nothing new is debited or queued while nothing can be
 * committed. */
static void hold(ts_group_commit *gc, const char *err)
{
    gc->failures++;
    gc->pauses++;
    gc->held = 1;
    gc->retry_ms = TS_COMMIT_RETRY_FIRST_MS;
    char reason[ERR_MAX + 64];
    snprintf(reason, sizeof reason,
             "state store commit failed (%s); input paused", err);
    if (gc->observer != NULL && gc->observer->health != NULL)
        gc->observer->health(gc->observer->arg, reason);
    ts_log(TS_LOG_ERROR, "%s; the batch is not published (%zu outcomes "
           "held), input paused: daemon unhealthy, retrying in %ld ms",
           err, gc->committing.count, gc->retry_ms);
    hold_input(gc, HOLD_COMMIT_FAILED);
    arm_retry(gc);
}

static void retry_failed(ts_group_commit *gc, const char *err)
{
    gc->failures++;
    ts_log(TS_LOG_WARN, "commit retry failed: %s; %zu outcomes still held",
           err, gc->committing.count);
    gc->retry_ms = ts_group_commit_next_delay(gc->retry_ms);
    arm_retry(gc);
}

static void recovered(ts_group_commit *gc)
{
    gc->held = 0;
    if (gc->observer != NULL && gc->observer->health != NULL)
        gc->observer->health(gc->observer->arg, NULL);
    ts_log(TS_LOG_INFO, "commit retry succeeded: held batch published, "
           "input resumed, daemon healthy");
    release_input(gc, HOLD_COMMIT_FAILED);
}

/* ------------------------------------------------- pipelined (writer) */

/* Publishes what `committing` holds; the counters stay on the outbox the
 * rest of the daemon reads. Returns 1 while the output is blocked. */
static int publish_committing(ts_group_commit *gc)
{
    int blocked = ts_outbox_publish(&gc->committing, &gc->publisher);
    gc->outbox->published += gc->committing.published;
    gc->outbox->publish_failures += gc->committing.publish_failures;
    gc->committing.published = gc->committing.publish_failures = 0;
    return blocked;
}

/* Encodes the dirty users of the group in `committing` and hands them to
 * the writer. 0 when submitted or when there was nothing to write (then the
 * group is published at once); -1 with err when encoding failed (the users
 * stay dirty). */
static int start_commit(ts_group_commit *gc, char *err, size_t errlen)
{
    gc->batch_submitted = 0;
    if (ts_pipeline_dirty_count(gc->pipeline) == 0) {
        publish_committing(gc);
        return 0;
    }
    ts_record_batch *batch = ts_store_writer_batch(gc->writer);
    ts_record_batch_clear(batch);
    gc->store_backend->batch = batch;
    int saved = ts_pipeline_save_dirty(gc->pipeline);
    gc->store_backend->batch = NULL;
    if (saved != 0) {
        snprintf(err, errlen, "%s", gc->store_backend->err);
        ts_record_batch_clear(batch);
        return -1;
    }
    ts_pipeline_mark_in_flight(gc->pipeline);
    gc->batch_submitted = 1;
    ts_store_writer_submit(gc->writer);
    return 0;
}

/* Moves the accumulated outbox into `committing` (which must be fully
 * published) and starts its commit. */
static void commit_next(ts_group_commit *gc)
{
    ts_outbox_clear(&gc->committing);
    ts_outbox_swap_contents(gc->outbox, &gc->committing);
    char err[ERR_MAX];
    if (start_commit(gc, err, sizeof err) != 0)
        hold(gc, err);
}

static void on_writer_done(void *arg, int ok, const char *err, double seconds)
{
    ts_group_commit *gc = arg;
    if (!ok) {
        if (gc->held)
            retry_failed(gc, err);
        else
            hold(gc, err);
        return;
    }
    gc->batch_submitted = 0;
    ts_record_batch_clear(ts_store_writer_batch(gc->writer));
    ts_pipeline_mark_durable(gc->pipeline);
    if (gc->observer != NULL && gc->observer->commit != NULL)
        gc->observer->commit(gc->observer->arg, seconds,
                             gc->committing.count);
    if (gc->held)
        recovered(gc);
    publish_committing(gc);
    release_input(gc, HOLD_WRITER_BACKLOG);
    ts_group_commit_flush(gc);
}

static void flush_pipelined(ts_group_commit *gc)
{
    if (ts_store_writer_busy(gc->writer) ||
        ts_outbox_unsent(&gc->committing) > 0) {
        /* The group waits for the one ahead of it; past the cap, so does
         * the input. */
        if (gc->outbox->count >= TS_COMMIT_MAX_PENDING)
            hold_input(gc, HOLD_WRITER_BACKLOG);
        return;
    }
    if (gc->outbox->count > 0)
        commit_next(gc);
}

/* --------------------------------------------------------------- API */

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_group_commit *gc = arg;
    if (!gc->held)
        return;
    /* The failed batch is intact: write it again. A group whose encoding
     * failed is encoded again. */
    char err[ERR_MAX];
    if (gc->batch_submitted) {
        ts_store_writer_submit(gc->writer);
    } else if (start_commit(gc, err, sizeof err) != 0) {
        retry_failed(gc, err);
    } else if (!gc->batch_submitted) {
        recovered(gc);  /* nothing needed writing after all */
        ts_group_commit_flush(gc);
    }
}

/* A yielded turn's sequel: the driver goes on, then what is whole is
 * committed and published, and input resumes unless the driver yielded
 * again. */
static void on_next_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_group_commit *gc = arg;
    gc->yielded = 0;
    if (gc->next_turn != NULL)
        gc->next_turn(gc->input_arg);
    ts_group_commit_flush(gc);
    if (!gc->yielded)
        release_input(gc, HOLD_TURN);
}

int ts_group_commit_start(ts_group_commit *gc)
{
    gc->retry_event = event_new(gc->base, -1, 0, on_retry, gc);
    gc->turn_event = event_new(gc->base, -1, 0, on_next_turn, gc);
    if (gc->retry_event == NULL || gc->turn_event == NULL)
        return -1;
    if (gc->store == NULL)
        return 0;
    char err[ERR_MAX];
    gc->writer = ts_store_writer_new(gc->store, gc->base, on_writer_done, gc,
                                     err, sizeof err);
    if (gc->writer == NULL) {
        ts_log(TS_LOG_ERROR, "%s", err);
        return -1;
    }
    /* What `committing` publishes reaches the same hook. */
    gc->committing.on_sent = gc->outbox->on_sent;
    gc->committing.on_sent_arg = gc->outbox->on_sent_arg;
    gc->committing.on_reports_sent = gc->outbox->on_reports_sent;
    gc->committing.on_reports_sent_arg = gc->outbox->on_reports_sent_arg;
    return 0;
}

void ts_group_commit_stop(ts_group_commit *gc)
{
    if (gc->retry_event != NULL)
        event_free(gc->retry_event);
    gc->retry_event = NULL;
    if (gc->turn_event != NULL)
        event_free(gc->turn_event);
    gc->turn_event = NULL;
    ts_store_writer_free(gc->writer);
    gc->writer = NULL;
    ts_outbox_free(&gc->committing);
}

void ts_group_commit_open_message(ts_group_commit *gc)
{
    gc->message_open = 1;
    gc->message_first = gc->outbox->count;
}

void ts_group_commit_close_message(ts_group_commit *gc)
{
    gc->message_open = 0;
}

void ts_group_commit_yield(ts_group_commit *gc)
{
    if (gc->yielded)
        return;
    gc->yielded = 1;
    hold_input(gc, HOLD_TURN);
    /* A timer, not event_active: an event activated from a callback runs
     * in the same pass, before the loop polls its sockets again; a due
     * timer waits for the poll, so /healthz and the ops tick get their
     * turn first. */
    static const struct timeval now = { 0, 0 };
    if (event_add(gc->turn_event, &now) != 0) {
        ts_log(TS_LOG_ERROR, "cannot schedule the next turn; stopping");
        event_base_loopbreak(gc->base);
    }
}

void ts_group_commit_drop_message(ts_group_commit *gc, size_t unprocessed)
{
    if (!gc->message_open)
        return;
    size_t processed = gc->outbox->count - gc->message_first;
    ts_outbox_truncate(gc->outbox, gc->message_first);
    gc->message_open = 0;
    gc->dropped_uncommitted += processed;
    ts_log(TS_LOG_WARN, "shutting down inside a message: %zu outcomes not "
           "published (their debits are committed), %zu updates not "
           "processed", processed, unprocessed);
}

void ts_group_commit_flush(ts_group_commit *gc)
{
    /* A held group leaves only through the retry; an open message's
     * outcomes only once it is whole. */
    if (gc->held || gc->message_open)
        return;
    if (gc->writer != NULL)
        flush_pipelined(gc);
    else if (gc->outbox->count > 0) { /* memory only: nothing to commit */
        ts_outbox_publish(gc->outbox, &gc->publisher);
    }
}

int ts_group_commit_output_ready(ts_group_commit *gc)
{
    if (gc->held)
        return 0;
    if (gc->writer == NULL && gc->message_open)
        return ts_outbox_unsent(gc->outbox) > 0;  /* at close_message */
    if (gc->writer == NULL)
        return ts_outbox_unsent(gc->outbox) > 0
                   ? ts_outbox_publish(gc->outbox, &gc->publisher)
                   : 0;
    if (ts_store_writer_busy(gc->writer))
        return 0;  /* `done` publishes the group */
    int blocked = ts_outbox_unsent(&gc->committing) > 0
                      ? publish_committing(gc)
                      : 0;
    if (!blocked)
        ts_group_commit_flush(gc);
    return blocked;
}

/* Shutdown with a writer: let the commit under way finish (its `done`
 * publishes it and may start the next group's), give a held group one
 * more attempt, and commit the ledgers of what is left even when a full
 * output keeps it from being published. */
static void finish_pipelined(ts_group_commit *gc)
{
    while (ts_store_writer_busy(gc->writer))
        ts_store_writer_wait(gc->writer);
    if (gc->held) {
        on_retry(-1, 0, gc);
        while (ts_store_writer_busy(gc->writer))
            ts_store_writer_wait(gc->writer);
    }
    if (!gc->held && ts_pipeline_dirty_count(gc->pipeline) > 0) {
        /* Outcomes that could not move on because `committing` is still
         * unsent: commit their ledgers anyway; they count as unsent. */
        char err[ERR_MAX];
        if (start_commit(gc, err, sizeof err) != 0)
            hold(gc, err);
        while (ts_store_writer_busy(gc->writer))
            ts_store_writer_wait(gc->writer);
    }
}

static void clear_both(ts_outbox *ahead, ts_outbox *behind)
{
    ts_outbox_clear(ahead);
    if (behind != NULL)
        ts_outbox_clear(behind);
}

int ts_group_commit_finish(ts_group_commit *gc)
{
    if (gc->writer != NULL)
        finish_pipelined(gc);
    else
        ts_group_commit_flush(gc);
    /* Memory only, the outbox is all there is; with a store, `committing`
     * holds the group ahead of it. */
    ts_outbox *ahead = gc->writer != NULL ? &gc->committing : gc->outbox;
    ts_outbox *behind = gc->writer != NULL ? gc->outbox : NULL;
    if (gc->held) {
        size_t lost = ahead->count + (behind != NULL ? behind->count : 0);
        ts_log(TS_LOG_ERROR, "shutting down with an uncommitted batch: %zu "
               "outcomes not published", lost);
        gc->dropped_uncommitted += lost;
        clear_both(ahead, behind);
    }
    size_t unsent = ts_outbox_unsent(ahead) +
                    (behind != NULL ? ts_outbox_unsent(behind) : 0);
    if (unsent > 0) {
        ts_log(TS_LOG_WARN, "shutting down with the output full: %zu "
               "committed outcomes not published", unsent);
        gc->dropped_unsent += unsent;
        clear_both(ahead, behind);
    }
    return gc->held ? 1 : 0;
}
