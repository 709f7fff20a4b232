/* The group commit: a group of outcomes (one transport readiness callback)
 * is published only after every ledger it debited is committed to the
 * store (privacy invariant 2). A failed commit holds the group unpublished,
 * pauses input and marks the daemon unhealthy; a timer retries with
 * exponential backoff until the commit succeeds.
 *
 * With a store, the commit runs on the store writer's thread
 * (state/store_writer.h), pipelined one deep: while group N is written,
 * the loop keeps processing into the outbox, and group N+1 is committed
 * when N is done and published. The group being committed waits in
 * `committing`; `outbox` takes the next. */
#ifndef TRACESAN_ENGINE_GROUP_COMMIT_H
#define TRACESAN_ENGINE_GROUP_COMMIT_H

#include <stdint.h>

#include <event2/event.h>

#include "ops/metrics.h"
#include "engine/outbox.h"
#include "engine/pipeline.h"
#include "state/store.h"
#include "state/store_writer.h"
#include "engine/transport.h"

/* A failed commit is retried after 1 s, doubling to at most 30 s: quick
 * enough to recover soon after an operator frees space, slow enough not to
 * hammer a broken disk or flood the log. */
#define TS_COMMIT_RETRY_FIRST_MS 1000
#define TS_COMMIT_RETRY_MAX_MS 30000
/* Outcomes the outbox may hold while a commit is under way before input
 * pauses: memory stays bounded when the store is slower than the input. */
#define TS_COMMIT_MAX_PENDING 65536

typedef struct ts_group_commit {
    ts_store *store;             /* NULL: memory only, commits are no-ops */
    ts_store_backend *store_backend;
    /* Set by ts_group_commit_start when there is a store. */
    ts_store_writer *writer;
    ts_outbox committing;        /* the group in (or after) its commit */
    int batch_submitted;         /* a held group's batch reached the writer */
    int paused_for_writer;       /* input paused: outbox full mid-commit */
    ts_pipeline *pipeline;
    ts_outbox *outbox;
    const ts_transport_ops *transport_ops;
    ts_transport *transport;
    ts_metrics *metrics;         /* may be NULL */
    struct event_base *base;
    struct event *retry_event;
    long retry_ms;               /* delay before the next retry */
    int held;                    /* a failed commit holds the outbox */
    uint64_t failures;           /* failed attempts, first and retries */
    uint64_t pauses;             /* times input paused for the store */
    uint64_t dropped_uncommitted; /* held outcomes dropped at shutdown */
    uint64_t dropped_unsent;     /* committed outcomes a full output still
                                    held at shutdown */
} ts_group_commit;

/* The fields above `writer` must be set; creates the retry timer and,
 * with a store, the writer thread. 0, or -1 (logged) when either cannot be
 * created. */
int ts_group_commit_start(ts_group_commit *gc);
void ts_group_commit_stop(ts_group_commit *gc);

/* End of a group: commit, then publish. */
void ts_group_commit_flush(ts_group_commit *gc);
/* The transport's on_output_ready: publish what a full output stopped.
 * Returns 1 while the output is still blocked. */
int ts_group_commit_output_ready(ts_group_commit *gc);
/* Shutdown: a held group gets one last attempt, then is dropped (its
 * users' committed ledgers are what survives); committed outcomes a full
 * output still holds are dropped too. Both are logged and counted.
 * Returns 0, or 1 when a held group could not be committed. */
int ts_group_commit_finish(ts_group_commit *gc);

/* The backoff: the delay after `ms`. */
long ts_group_commit_next_delay(long ms);

#endif
