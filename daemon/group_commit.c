#include "daemon/group_commit.h"

#include <stdio.h>
#include <time.h>

#include "daemon/log.h"

#define ERR_MAX 512

/* Every user whose ledger changed in the group is written in one
 * transaction. 0 on success; -1 with err filled, the transaction aborted
 * and the users still dirty, so the same group can be retried. */
static int commit_group(ts_group_commit *gc, char *err, size_t errlen)
{
    if (gc->store == NULL || ts_pipeline_dirty_count(gc->pipeline) == 0)
        return 0;
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    if (ts_store_begin(gc->store, err, errlen) != 0)
        return -1;
    if (ts_pipeline_save_dirty(gc->pipeline) != 0) {
        snprintf(err, errlen, "%s", gc->store_backend->err);
        ts_store_abort(gc->store);
        return -1;
    }
    if (ts_store_commit(gc->store, err, errlen) != 0)
        return -1;
    ts_pipeline_mark_clean(gc->pipeline);
    if (gc->metrics != NULL)
        ts_metrics_observe_commit(gc->metrics, ts_metrics_seconds_since(&started),
                                  gc->outbox->count);
    return 0;
}

long ts_group_commit_next_delay(long ms)
{
    if (ms <= 0)
        return TS_COMMIT_RETRY_FIRST_MS;
    return ms >= TS_COMMIT_RETRY_MAX_MS / 2 ? TS_COMMIT_RETRY_MAX_MS
                                            : ms * 2;
}

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

/* The failed group stays in the outbox, unpublished, and its users stay
 * dirty with their in-memory ledgers debited (conservative). Input stops so
 * that nothing new is debited or queued while nothing can be committed. */
static void hold(ts_group_commit *gc, const char *err)
{
    gc->failures++;
    gc->pauses++;
    gc->held = 1;
    gc->retry_ms = TS_COMMIT_RETRY_FIRST_MS;
    char reason[ERR_MAX + 64];
    snprintf(reason, sizeof reason,
             "state store commit failed (%s); input paused", err);
    ts_metrics_set_unhealthy(reason);
    ts_log(TS_LOG_ERROR, "%s; the batch is not published (%zu outcomes "
           "held), input paused: daemon unhealthy, retrying in %ld ms",
           err, gc->outbox->count, gc->retry_ms);
    gc->transport_ops->pause_input(gc->transport);
    arm_retry(gc);
}

/* 0 when the held group is now committed and published. */
static int retry(ts_group_commit *gc)
{
    char err[ERR_MAX];
    if (commit_group(gc, err, sizeof err) != 0) {
        gc->failures++;
        ts_log(TS_LOG_WARN, "commit retry failed: %s; %zu outcomes still "
               "held", err, gc->outbox->count);
        return -1;
    }
    gc->held = 0;
    ts_outbox_publish(gc->outbox, gc->transport_ops, gc->transport);
    ts_metrics_set_healthy();
    ts_log(TS_LOG_INFO, "commit retry succeeded: held batch published, "
           "input resumed, daemon healthy");
    return 0;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_group_commit *gc = arg;
    if (!gc->held)
        return;
    if (retry(gc) == 0) {
        gc->transport_ops->resume_input(gc->transport);
        return;
    }
    gc->retry_ms = ts_group_commit_next_delay(gc->retry_ms);
    arm_retry(gc);
}

int ts_group_commit_start(ts_group_commit *gc)
{
    gc->retry_event = event_new(gc->base, -1, 0, on_retry, gc);
    return gc->retry_event != NULL ? 0 : -1;
}

void ts_group_commit_stop(ts_group_commit *gc)
{
    if (gc->retry_event != NULL)
        event_free(gc->retry_event);
    gc->retry_event = NULL;
}

void ts_group_commit_flush(ts_group_commit *gc)
{
    if (gc->outbox->count == 0 || gc->held)
        return; /* a held group leaves only through the retry */
    char err[ERR_MAX];
    if (commit_group(gc, err, sizeof err) != 0) {
        hold(gc, err);
        return;
    }
    ts_outbox_publish(gc->outbox, gc->transport_ops, gc->transport);
}

int ts_group_commit_output_ready(ts_group_commit *gc)
{
    if (gc->held || gc->outbox->sent == 0)
        return 0;
    return ts_outbox_publish(gc->outbox, gc->transport_ops, gc->transport);
}

int ts_group_commit_finish(ts_group_commit *gc)
{
    ts_group_commit_flush(gc);
    if (gc->held && retry(gc) != 0) {
        ts_log(TS_LOG_ERROR, "shutting down with an uncommitted batch: %zu "
               "outcomes not published", gc->outbox->count);
        gc->dropped_uncommitted += gc->outbox->count;
        ts_outbox_clear(gc->outbox);
    }
    if (gc->outbox->count > 0) {
        size_t unsent = ts_outbox_unsent(gc->outbox);
        ts_log(TS_LOG_WARN, "shutting down with the output full: %zu "
               "committed outcomes not published", unsent);
        gc->dropped_unsent += unsent;
        ts_outbox_clear(gc->outbox);
    }
    return gc->held ? 1 : 0;
}
