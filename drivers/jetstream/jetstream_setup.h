/* What the daemon and the CLI share of the JetStream mode: the connection
 * (servers, credentials, TLS from the nats.* settings), the names of the
 * streams and the lease bucket, creating them, and reading a stream back
 * in order. Every call here blocks (libnats' synchronous API); the daemon
 * makes them on its JetStream thread, never on the event loop. */
#ifndef TRACESAN_DRIVERS_JETSTREAM_JETSTREAM_SETUP_H
#define TRACESAN_DRIVERS_JETSTREAM_JETSTREAM_SETUP_H

#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#include "drivers/jetstream/sub_graveyard.h"

#include "drivers/jetstream/nats_settings.h"

#define TS_JS_STREAM_IN "TRACESAN_IN"
#define TS_JS_STREAM_OUT "TRACESAN_OUT"
#define TS_JS_STREAM_STATE "TRACESAN_STATE"
#define TS_JS_LEASE_BUCKET "tracesan_leases"
/* The cluster-wide population loops' records (js_population.h), one key
 * per profile; its history keeps the last versions for inspection. */
#define TS_JS_POPULATION_BUCKET "tracesan_population"
#define TS_JS_POPULATION_HISTORY 64
#define TS_JS_SUBJECT_IN "tracesan.in"
#define TS_JS_SUBJECT_STATE "tracesan.state"
/* The durable consumer of partition p: TS_JS_CONSUMER_PREFIX "<p>". */
#define TS_JS_CONSUMER_PREFIX "tracesan-p"
/* JetStream API calls wait this long for an answer. */
#define TS_JS_WAIT_MS 5000

typedef struct ts_js_conn {
    natsConnection *nc;
    jsCtx *js;
} ts_js_conn;

/* Connects with the nats.* settings and reconnects for ever afterwards.
 * 0, or -1 with err filled (credential texts are never quoted). */
int ts_js_connect(ts_js_conn *conn, const struct ts_nats_settings *nats,
                  const char *name, jsPubAckErrHandler on_publish_error,
                  void *closure, char *err, size_t errlen);
void ts_js_close(ts_js_conn *conn);

/* Creates the three streams, the lease bucket and the population bucket
 * when absent (existing ones are left as they are, but for subjects a
 * newer version publishes on, which are added, and TRACESAN_IN's subjects,
 * which are set to exactly tracesan.in.0 ... tracesan.in.<P-1>: a message
 * on a subject with no partition is refused at once instead of stored
 * unanswered). TRACESAN_IN is created as a work queue, so an input leaves
 * the stream when its partition acknowledges it, after its outcomes are
 * published; *input_work_queue (may be NULL) says whether the existing
 * stream is one (JetStream cannot change an existing stream's retention).
 * 0, or -1 with err. */
int ts_js_ensure_streams(ts_js_conn *conn, const struct ts_nats_settings *nats,
                         int *input_work_queue, char *err, size_t errlen);

/* Inputs of each partition not yet acknowledged, into backlog[0 .. P-1]:
 * with a work queue, the messages stored on tracesan.in.<p> (one
 * request for all); else the consumer's pending and unacknowledged
 * deliveries (0 without a consumer). 0, or -1 with err. */
int ts_js_partition_backlog(jsCtx *js, uint32_t partitions, int work_queue,
                            uint64_t *backlog, char *err, size_t errlen);

/* The text of a failed call: libnats' status and JetStream error code. */
void ts_js_describe(char *err, size_t errlen, const char *what,
                    natsStatus status, jsErrCode code);

/* After a compare-and-set renewal of lease `key`, expecting revision
 * `expect`, was refused: whether the lease reads back as `owner`'s at a
 * newer revision, i.e. the owner's own earlier renewal, stored with its
 * answer lost (only the owner writes its name, and of its renewals
 * expecting one revision only the first is stored). 1 with *revision,
 * 0 when it is someone else's or gone, -1 when it cannot be read. */
int ts_js_lease_reads_own(kvStore *kv, const char *key, const char *owner,
                          uint64_t expect, uint64_t *revision);

/* The next message of an ordered consumer's subscription, with its stream
 * sequence and how many are still pending; heartbeats and flow-control
 * messages are skipped. NATS_OK with *msg (the caller destroys it), or
 * NextMsg's status (NATS_TIMEOUT: none within timeout_ms). */
natsStatus ts_js_next_stream_msg(natsSubscription *sub, int64_t timeout_ms,
                                 natsMsg **msg, uint64_t *seq,
                                 uint64_t *pending);

/* Visits every message of `stream` on `subject` (a filter; NULL = all)
 * from stream sequence from_seq on (0 or 1: from the first), in sequence
 * order, up to the stream's last sequence when the call starts. A nonzero
 * return from visit stops and is returned; -1 on an error. The reading
 * subscription goes to `graveyard` when the connection lives on (NULL:
 * destroyed at once, for a caller that closes the connection next). */
typedef int (*ts_js_visit_fn)(void *ctx, natsMsg *msg, uint64_t seq);
int ts_js_read_stream(jsCtx *js, const char *stream, const char *subject,
                      uint64_t from_seq, ts_js_visit_fn visit, void *ctx,
                      ts_sub_graveyard *graveyard, char *err, size_t errlen);

#endif
