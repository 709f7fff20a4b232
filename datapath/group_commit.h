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
 * `committing`; `outbox` takes the next.
 *
 * Long messages (datapath/group.h, TS_GROUP_TURN_MS): the driver brackets
 * each message with open_message / close_message, and no group is cut
 * inside the brackets, so a group is always whole messages whatever the
 * loop turns a message took. Between slices input is paused
 * (ts_group_commit_yield) and `next_turn` resumes the message on a later
 * loop turn. */
#ifndef TRACESAN_DATAPATH_GROUP_COMMIT_H
#define TRACESAN_DATAPATH_GROUP_COMMIT_H

#include <stdint.h>

#include <event2/event.h>

#include "datapath/io.h"
#include "datapath/observer.h"
#include "datapath/outbox.h"
#include "engine/pipeline.h"
#include "state/store.h"
#include "state/store_writer.h"

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
    /* Why input is paused, one bit per cause (held commit, the outbox
     * full mid-commit, a yielded turn): it resumes when none is left. */
    unsigned input_holds;
    ts_pipeline *pipeline;
    ts_outbox *outbox;
    ts_publisher publisher;
    /* The driver's input: stopped while a commit fails or the outbox is
     * full mid-commit, started again once it can go on. */
    void (*pause_input)(void *arg);
    void (*resume_input)(void *arg);
    void *input_arg;
    /* The driver's, called on a later loop turn after
     * ts_group_commit_yield: resume the open message (ts_group_resume),
     * or take input again. NULL for a driver that never yields. */
    void (*next_turn)(void *arg);
    /* May be NULL. Its `committed` runs once per group when the group's
     * ledgers are durable (or, in memory only, when it is about to be
     * published), before it is published, with the group's observations;
     * `commit` times each commit; `health` hears of a held group. */
    const ts_observer *observer;
    struct event_base *base;
    struct event *retry_event;
    long retry_ms;               /* delay before the next retry */
    int held;                    /* a failed commit holds the outbox */
    struct event *turn_event;    /* runs next_turn */
    int yielded;                 /* next_turn is due */
    int message_open;            /* inside open_message / close_message */
    size_t message_first;        /* the open message's first outbox entry */
    uint64_t failures;           /* failed attempts, first and retries */
    uint64_t pauses;             /* times input paused for the store */
    uint64_t dropped_uncommitted; /* held outcomes dropped at shutdown */
    uint64_t dropped_unsent;     /* committed outcomes a full output still
                                    held at shutdown */
} ts_group_commit;

/* The fields above `writer` must be set (observer may be NULL); creates the retry timer and,
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

/* A message begins (before ts_group_start): until close_message no group
 * is committed or published, so none is cut inside it. */
void ts_group_commit_open_message(ts_group_commit *gc);
void ts_group_commit_close_message(ts_group_commit *gc);
/* The driver's turn is spent, inside a message or after one: input
 * pauses, and next_turn runs on a later loop turn, once the loop has
 * polled its sockets and run its due timers. When next_turn returns
 * without yielding again, what is whole is flushed and input resumes. */
void ts_group_commit_yield(ts_group_commit *gc);
/* Shutdown inside a message (after ts_group_abandon, which says how many
 * of its updates were never processed): the outcomes it put in the outbox
 * are dropped unpublished; the debits behind them stay, and
 * ts_group_commit_finish commits them (debited, never released). Logged
 * and counted in dropped_uncommitted. */
void ts_group_commit_drop_message(ts_group_commit *gc, size_t unprocessed);

/* The backoff: the delay after `ms`. */
long ts_group_commit_next_delay(long ms);

#endif
