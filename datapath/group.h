/* The group body: one input message through the whole data path, the
 * same for every driver.
 *
 *   intake (framing, size, update count, decode)
 *     -> per update: admission (the driver's: JetStream's partition check)
 *     -> time checks (the wall clock's bounds on event time)
 *     -> pipeline (validation, user, budget window, mechanism)
 *     -> outcome -> observation (latency, rejection log, population)
 *     -> format (wire/format.h: protobuf or JSON; one message per outcome
 *        or OutcomeBatch messages)
 *     -> sink (the driver's: the ZeroMQ outbox, the JetStream changelog
 *        record)
 *
 * Every update yields exactly one outcome, every message that cannot be
 * decoded one rejection. What happens to a group of messages after the
 * body is the driver's, and always in this order:
 *
 *   commit (the group's debits durable: ts_pipeline_save_dirty into the
 *   store, the changelog append) -> publish (the sink's messages) ->
 *   acknowledge the input
 *
 * so no point is published whose debit a restart could forget (privacy
 * invariant 2), and no input is acknowledged whose outcomes are not
 * published.
 *
 * On the event loop, one message may hold more work than a loop turn
 * should (10 000 `pim` updates are tens of seconds): ts_group_start and
 * ts_group_resume process a message in slices of at most TS_GROUP_TURN_MS
 * each, in order, and the driver pauses its input and lets the loop serve
 * its other events between slices (datapath/group_commit.h,
 * ts_group_commit_yield; docs/architecture.md, "Scheduling"). */
#ifndef TRACESAN_DATAPATH_GROUP_H
#define TRACESAN_DATAPATH_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include <time.h>

#include "datapath/intake.h"
#include "datapath/io.h"
#include "datapath/observer.h"
#include "engine/pipeline.h"
#include "engine/settings.h"
#include "wire/codec.h"
#include "wire/format.h"

/* Where a group's encoded messages go, in order, until its commit. */
typedef struct ts_sink {
    void *arg;
    /* 0, or -1 when the message was lost (the sink counts it). */
    int (*put)(void *arg, const void *topic, size_t topic_len,
               const void *payload, size_t len);
    /* A fresh report a population loop counts once the group is
     * committed; NULL: nothing is kept. 0, or -1 (lost). */
    int (*observe)(void *arg, const ts_observation *observation);
} ts_sink;

/* The driver's say on an update before the pipeline sees it:
 * TS_REASON_NONE admits it, anything else rejects it with `detail`. */
typedef struct ts_admission {
    void *arg;
    ts_reason (*admit)(void *arg, const char *user_id, size_t user_len,
                       char *detail, size_t detail_len);
} ts_admission;

typedef struct ts_group {
    const ts_settings *settings;         /* intake limits, clock bounds */
    const ts_format *format;
    size_t batch_outcomes;               /* 0: one message per outcome */
    const ts_observer *observer;         /* NULL: nobody watches */
    ts_admission admission;              /* admit NULL: all admitted */
    ts_codec_arena arena;                /* input messages unpack here */
    ts_wire_update *wire;                /* input.max_batch_updates */
    ts_buf topic, payload;               /* one message being encoded */
    ts_format_batch batch;               /* the open OutcomeBatch */
    uint64_t messages;
    uint64_t updates;
    /* Updates refused before the pipeline (the clock, admission): still
     * updates for the counters. */
    uint64_t refused_before_pipeline;
    uint64_t encode_failures;            /* outcomes lost to allocation */
    /* The message in hand while a turn ended inside it (NULL: none): its
     * next update and the clock's bounds it was started with. */
    Tracesan__V1__LocationBatch *open;
    size_t next;
    ts_time_bounds open_bounds;
    /* The current loop turn's end (in_turn 0: no turn running). */
    int in_turn;
    struct timespec turn_end;
} ts_group;

/* 0, or -1 when memory ran out. */
int ts_group_init(ts_group *group, const ts_settings *settings,
                  const ts_format_settings *format,
                  const ts_observer *observer);
void ts_group_free(ts_group *group);

/* One input message into `sink` through `pipeline`. Returns the number of
 * updates it held (0 for a refused message). */
size_t ts_group_process(ts_group *group, ts_pipeline *pipeline,
                        const ts_inbound *message, const ts_sink *sink);

/* Processing a loop turn may take before the driver lets the loop serve
 * other events: the ops tick, /healthz, a reload's swap. At least one
 * update runs per turn, so a turn lasts at most this plus one update (a
 * `pim` update is up to ~10 ms). */
#define TS_GROUP_TURN_MS 20

/* ts_group_process on the event loop: starts `message` and processes its
 * updates until they are done or the turn's time is spent (the turn
 * starts here unless one is running). 1 when the message is done; 0 when
 * updates remain: the message stays open, and the driver calls
 * ts_group_resume on a later loop turn with the same pipeline and sink
 * until it returns 1, taking no other input meanwhile. Outcomes go to the
 * sink in update order across slices. */
int ts_group_start(ts_group *group, ts_pipeline *pipeline,
                   const ts_inbound *message, const ts_sink *sink);
int ts_group_resume(ts_group *group, ts_pipeline *pipeline,
                    const ts_sink *sink);
/* 1 while a message is open. */
int ts_group_in_message(const ts_group *group);
/* 1 when the running turn's time is spent: the driver takes no more input
 * until a later loop turn. */
int ts_group_turn_spent(const ts_group *group);
/* A loop turn ended (a readiness callback's end): the next start or
 * resume starts a new one. */
void ts_group_end_turn(ts_group *group);
/* Shutdown inside a message: its remaining updates are dropped
 * unprocessed (they count as updates, none of them as an outcome).
 * Returns how many; 0 when no message was open. */
size_t ts_group_abandon(ts_group *group);

/* The wall clock, in ms since the epoch. */
int64_t ts_wall_clock_ms(void);

#endif
