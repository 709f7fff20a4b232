/* Encoded outcomes waiting for their group's commit, then published in
 * order. Topics and payloads are appended to two buffers reused across
 * groups, so the steady state allocates nothing per message. */
#ifndef TRACESAN_ENGINE_OUTBOX_H
#define TRACESAN_ENGINE_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "wire/codec.h"
#include "engine/transport.h"

typedef struct ts_outbox_entry {
    size_t topic_offset;
    size_t topic_len;
    size_t payload_offset;
    size_t payload_len;
} ts_outbox_entry;

/* A sanitized report of a profile with a population loop
 * (ops/population_loop.h): what the loop counts once the message carrying
 * the report was sent. Published values only. */
typedef struct ts_outbox_observation {
    uint32_t profile_index;
    uint32_t channel_version;
    double lat, lon;
    int64_t ts_ms;
    size_t entry;                /* the entry that carries the report */
} ts_outbox_observation;

typedef struct ts_outbox {
    ts_buf topics;
    ts_buf payloads;
    ts_outbox_entry *entries;
    size_t count;
    size_t capacity;
    /* Entries before `sent` are published: a full lossless output stopped
     * the rest, which wait (committed, in order) until it takes more. */
    size_t sent;
    ts_outbox_observation *observations;
    size_t n_observations, observations_cap;
    /* Observations before `observed` were handed to on_observed (their
     * entry was sent) or dropped (it was not). */
    size_t observed;
    /* output.format = "batch" (`batched`): the outcomes of one input
     * message go into one OutcomeBatch entry on topic "batch", framed as
     * its repeated fields; batch_open says the last entry still takes
     * outcomes. The members before `batched` are the queue
     * (ts_outbox_swap_contents); those from it on belong to the outbox. */
    int batch_open;
    int batched;
    ts_buf scratch_topic;
    ts_buf scratch_payload;
    uint64_t encode_failures;    /* outcomes lost to allocation failures */
    uint64_t published;
    uint64_t publish_failures;
    /* Optional: sees each message the transport took, as it was sent (the
     * feed, ops/feed.h). Called on the loop; must not block. */
    void (*on_sent)(void *arg, const void *topic, size_t topic_len,
                    const void *payload, size_t len);
    void *on_sent_arg;
    /* Optional: sees each observation whose entry the transport took, after
     * on_sent, on the loop. One whose entry failed to send, or that a full
     * output still held at shutdown, is never seen: the population loop
     * estimates from what readers received (docs/privic.md). */
    void (*on_observed)(void *arg, const ts_outbox_observation *observation);
    void *on_observed_arg;
} ts_outbox;

/* Encoding fails only on allocation; the outcome is then lost (the
 * fail-closed direction) and counted. 0, or -1 when it was lost. */
int ts_outbox_add_outcome(ts_outbox *box, const ts_outcome *outcome);
/* A rejection not tied to a parsed update (malformed message, ...). */
int ts_outbox_add_rejection(ts_outbox *box, ts_reason reason,
                            const char *detail);

/* Queues the observation of the report the last added outcome carries
 * (its entry is the outbox's last). 0, or -1 when memory ran out or no
 * outcome was added (the observation is lost: the loop then estimates
 * from one report fewer). */
int ts_outbox_add_observation(ts_outbox *box,
                              const ts_outbox_observation *observation);

/* A new input message begins: in batched mode its outcomes go into a new
 * entry. */
static inline void ts_outbox_begin_message(ts_outbox *box)
{
    box->batch_open = 0;
}

/* Publishes from `sent` on. Returns 1 when the output blocked (the rest
 * stays, in order), else 0 and the outbox is empty. */
int ts_outbox_publish(ts_outbox *box, const ts_transport_ops *ops,
                      ts_transport *transport);

static inline size_t ts_outbox_unsent(const ts_outbox *box)
{
    return box->count - box->sent;
}

void ts_outbox_clear(ts_outbox *box);
/* Exchanges the queued outcomes of two outboxes (buffers and entries);
 * each keeps its counters and format. */
void ts_outbox_swap_contents(ts_outbox *a, ts_outbox *b);
void ts_outbox_free(ts_outbox *box);

#endif
