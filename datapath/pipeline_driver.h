/* What a driver that runs one pipeline on the event loop shares with the
 * others of its kind (the ZeroMQ and MQTT drivers): the group body with
 * the outbox as its sink, the group commit over the state.dir store, the
 * expiry timer, the output output.type names when it is another driver's
 * (ts_driver_env.output), and the counters /metrics reads. The driver
 * keeps its transport, its input and what acknowledging means.
 *
 *   init (group, outbox, store backend, the other driver's output)
 *   -> the driver opens its transport
 *   -> start (the commit with the driver's publisher, the expiry timer)
 *   -> per message: ts_pipeline_driver_process (or the driver's own
 *      bracket: ts_group_commit_open_message, ts_group_start into `sink`,
 *      ts_pipeline_driver_message_done); per read: end_read
 *   -> a message longer than a loop turn (datapath/group.h) stays open,
 *      input pauses, and next_turn continues it on a later loop turn
 *   -> finish -> stop -> the driver closes its transport -> free */
#ifndef TRACESAN_DATAPATH_PIPELINE_DRIVER_H
#define TRACESAN_DATAPATH_PIPELINE_DRIVER_H

#include <stddef.h>

#include "datapath/driver.h"
#include "datapath/group.h"
#include "datapath/group_commit.h"
#include "datapath/outbox.h"
#include "datapath/output.h"
#include "state/store.h"

/* The driver's input as the commit and the output stop and start it.
 * next_turn (may be NULL: ts_pipeline_driver_next_turn) runs on a later
 * loop turn after a yield; a driver that holds messages of its own behind
 * the open one (MQTT) takes them there. */
typedef struct ts_driver_input {
    void *arg;
    void (*pause)(void *arg);
    void (*resume)(void *arg);
    void (*next_turn)(void *arg);
} ts_driver_input;

typedef struct ts_pipeline_driver {
    ts_driver_env env;
    const ts_settings *core;
    ts_pipeline *pipeline;
    ts_group group;
    ts_outbox outbox;
    ts_sink sink;                    /* the outbox */
    ts_group_commit commit;
    ts_store_backend store_backend;  /* set on the pipeline with a store */
    /* env->output's, opened by init; NULL: the driver publishes through
     * its own output. */
    ts_output *output;
    struct event *expire_event;
    ts_driver_input input;
    unsigned paused;                 /* why input is stopped (bits) */
} ts_pipeline_driver;

/* The group body, the outbox with the observer's hooks, the store backend
 * (set on env->pipeline when env->store is set) and env->output's output.
 * 0, or -1 with err (then free). */
int ts_pipeline_driver_init(ts_pipeline_driver *pd, const ts_driver_env *env,
                            char *err, size_t errlen);
/* The commit, publishing through `publisher` (the driver's own output, or
 * one that hands outcomes to ts_pipeline_driver_publish), and the expiry
 * timer. 0, or -1 with err. */
int ts_pipeline_driver_start(ts_pipeline_driver *pd, ts_publisher publisher,
                             ts_driver_input input, char *err, size_t errlen);

/* Publishes through the other driver's output (pd->output must be set).
 * A blocked output stops the input until it takes the held messages. */
ts_publish_result ts_pipeline_driver_publish(ts_pipeline_driver *pd,
                                             const void *topic,
                                             size_t topic_len,
                                             const void *payload, size_t len);
/* ts_pipeline_driver_publish as a publisher. */
ts_publisher ts_pipeline_driver_publisher(ts_pipeline_driver *pd);

/* Out of band (the density feed): to the other driver's output, nothing
 * held or paused. */
ts_publish_result ts_pipeline_driver_publish_aside(ts_pipeline_driver *pd,
                                                   const void *topic,
                                                   size_t topic_len,
                                                   const void *payload,
                                                   size_t len);

/* One input message through the group body on the event loop: 1 when
 * it is done, 0 when it stays open for a later loop turn (input paused). */
int ts_pipeline_driver_process(ts_pipeline_driver *pd,
                               const ts_inbound *message);
/* After each input message is done: the message may join a group now, a
 * read of many messages commits and publishes part way when the outbox
 * grows large, and a spent turn lets the loop serve its other events
 * before more input is read. */
void ts_pipeline_driver_message_done(ts_pipeline_driver *pd);
/* The default next turn: continues the open message, if any. 1 when no
 * message is open afterwards. */
int ts_pipeline_driver_next_turn(ts_pipeline_driver *pd);
/* The end of a readiness callback's messages: commit, then publish (a
 * message still open waits for its close). */
void ts_pipeline_driver_end_read(ts_pipeline_driver *pd);

/* "input=<input> output=<own_output, or the other driver's output>". */
void ts_pipeline_driver_describe(const ts_pipeline_driver *pd,
                                 const char *input, const char *own_output,
                                 char *buf, size_t len);
/* The counters every such driver has (the driver adds its transport's). */
void ts_pipeline_driver_stats(const ts_pipeline_driver *pd,
                              ts_driver_stats *out);
/* The other driver's output's series, if any. 0, or -1. */
int ts_pipeline_driver_render_metrics(ts_pipeline_driver *pd, ts_buf *out);

/* SIGHUP: what applies to the other driver's output. 0, or -1 with err. */
int ts_pipeline_driver_adopt_config(ts_pipeline_driver *pd,
                                    const ts_config *fresh, char *err,
                                    size_t errlen);

/* The loop has ended: a message still open is dropped unfinished (its
 * debits stay, see ts_group_commit_drop_message), then what is in hand
 * is committed and published. 0, or 1 when something stayed
 * uncommitted. */
int ts_pipeline_driver_finish(ts_pipeline_driver *pd);
/* Stops the timers and the commit's writer; the driver then closes its
 * transport, and frees. */
void ts_pipeline_driver_stop(ts_pipeline_driver *pd);
void ts_pipeline_driver_free(ts_pipeline_driver *pd);

#endif
