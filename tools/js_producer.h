/* The producer of `tracesan replay --jetstream`: LocationBatch messages to
 * TRACESAN_IN, one subject per partition (tracesan.in.<p>), each
 * partition's messages stored in the order they were made.
 *
 * Per-user order is what the daemon relies on (a user's updates arrive on
 * one partition, and an update older than the user's last is rejected as
 * time_went_backwards), and a failover breaks it for a producer that
 * retries out of band: a publish refused while a stream leader is being
 * elected, or one whose acknowledgement was lost with a server, would be
 * stored after later messages of its partition. So each partition has at
 * most one message unacknowledged at any time: the next is published only
 * once JetStream acknowledged the one before it as stored (or as a
 * duplicate of a stored copy), and a refused or unanswered message is
 * published again, with its message id, before anything after it. The
 * stream's duplicate window drops the copy of a message that was stored
 * although its acknowledgement was lost; the producer gives up on a
 * partition well inside that window (TS_JS_PRODUCER_GIVE_UP_MS).
 *
 * Partitions proceed in parallel, so throughput is about P messages per
 * acknowledgement round trip. One thread calls every function here; the
 * acknowledgements arrive on libnats' threads.
 */
#ifndef TRACESAN_TOOLS_JS_PRODUCER_H
#define TRACESAN_TOOLS_JS_PRODUCER_H

#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#include "tools/replay_batch.h"

/* A partition whose message has been refused or unanswered for this long
 * stops the run: below the 2-minute duplicate window TRACESAN_IN gets by
 * default, so a late copy can never be stored twice. */
#define TS_JS_PRODUCER_GIVE_UP_MS 90000

typedef struct ts_js_producer ts_js_producer;

typedef struct ts_js_producer_stats {
    uint64_t messages;       /* acknowledged */
    uint64_t updates;        /* in the acknowledged messages */
    uint64_t resent;         /* publishes made again after a refusal or a
                                lost acknowledgement */
} ts_js_producer_stats;

/* Publishes on `nc` (its own JetStream context) to `partitions`
 * partitions; messages of at most max_updates updates and max_bytes
 * bytes; message ids "<run>.<p>.<k>". NULL with err on failure. */
ts_js_producer *ts_js_producer_new(natsConnection *nc, uint32_t partitions,
                                   size_t max_updates, size_t max_bytes,
                                   const char *run, char *err, size_t errlen);
void ts_js_producer_free(ts_js_producer *producer);

/* The batch partition p's next update is appended to. */
ts_replay_batch *ts_js_producer_batch(ts_js_producer *producer, uint32_t p);

/* After appending one update to partition p's batch at offset `before`:
 * TS_BATCH_ADDED or TS_BATCH_SEND (a message was queued; this may wait
 * while the partition is behind), TS_BATCH_TOO_LARGE (the update was
 * taken out; *update_bytes says its size), or -1 with err when a
 * partition gave up. */
int ts_js_producer_added(ts_js_producer *producer, uint32_t p, size_t before,
                         size_t *update_bytes, char *err, size_t errlen);

/* Queues every partial batch and waits until every message is
 * acknowledged. 0, or -1 with err. */
int ts_js_producer_finish(ts_js_producer *producer, char *err,
                          size_t errlen);

ts_js_producer_stats ts_js_producer_get_stats(ts_js_producer *producer);

#endif
