/* Encoded messages waiting for their group's commit, then published in
 * order: the ZeroMQ driver's sink (datapath/group.h). Topics and payloads
 * are appended to two buffers reused across groups, so the steady state
 * allocates nothing per message. */
#ifndef TRACESAN_DATAPATH_OUTBOX_H
#define TRACESAN_DATAPATH_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "datapath/group.h"
#include "datapath/io.h"
#include "datapath/observer.h"
#include "wire/codec.h"

typedef struct ts_outbox_entry {
    size_t topic_offset;
    size_t topic_len;
    size_t payload_offset;
    size_t payload_len;
} ts_outbox_entry;

typedef struct ts_outbox {
    /* The queue (ts_outbox_swap_contents exchanges these): */
    ts_buf topics;
    ts_buf payloads;
    ts_outbox_entry *entries;
    size_t count;
    size_t capacity;
    /* Entries before `sent` are published: a full lossless output stopped
     * the rest, which wait (committed, in order) until it takes more. */
    size_t sent;
    ts_observation *observations;
    size_t n_observations, observations_cap;
    /* Observations before `observed` went to on_reports_sent (their
     * message was sent) or were dropped (it was not). */
    size_t observed;
    /* The outbox's own, from here on: */
    uint64_t encode_failures;    /* messages lost to allocation failures */
    uint64_t published;
    uint64_t publish_failures;
    /* Optional: sees each message the output took, as it was sent (the
     * feed, ops/feed.h). Called on the loop; must not block. */
    void (*on_sent)(void *arg, const void *topic, size_t topic_len,
                    const void *payload, size_t len);
    void *on_sent_arg;
    /* Optional: the reports of the messages it took (the observer's
     * reports_sent, the population loops), after on_sent, on the loop. */
    void (*on_reports_sent)(void *arg, const ts_observation *observations,
                            size_t n);
    void *on_reports_sent_arg;
} ts_outbox;

/* Appends one message. 0, or -1 when memory ran out (the message is lost,
 * the fail-closed direction, and counted). */
int ts_outbox_put(ts_outbox *box, const void *topic, size_t topic_len,
                  const void *payload, size_t len);
/* Queues the observation of the report the last message put carries.
 * 0, or -1 when memory ran out or no message was put (the observation is
 * lost: the loop then estimates from one report fewer). */
int ts_outbox_add_observation(ts_outbox *box,
                              const ts_observation *observation);
/* The outbox as the group body's sink. */
ts_sink ts_outbox_sink(ts_outbox *box);

/* Publishes from `sent` on. Returns 1 when the output blocked (the rest
 * stays, in order), else 0 and the outbox is empty. */
int ts_outbox_publish(ts_outbox *box, const ts_publisher *publisher);

static inline size_t ts_outbox_unsent(const ts_outbox *box)
{
    return box->count - box->sent;
}

void ts_outbox_clear(ts_outbox *box);
/* Drops the messages from entry `count` on (unsent ones only: count >=
 * sent) and their observations. */
void ts_outbox_truncate(ts_outbox *box, size_t count);
/* Exchanges the queued messages of two outboxes (buffers and entries);
 * each keeps its counters and hook. */
void ts_outbox_swap_contents(ts_outbox *a, ts_outbox *b);
void ts_outbox_free(ts_outbox *box);

#endif
