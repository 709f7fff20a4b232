/* GET /feed: the published outcomes as Server-Sent Events, for browsers.
 *
 * The feed sees exactly what the output accepted: the driver hands it each
 * message once its output has taken it (after the group's ledgers are
 * durable), whatever the driver. It decodes those bytes (in the output's
 * format, wire/format.h) and writes each
 * SanitizedLocation or Rejection as one event,
 *
 *     event: sanitized            (or: rejected)
 *     data: {"user_id":"...",...} (wire/json_codec.h, the wire names)
 *
 * encoded once and copied to every stream whose filters (?profile=,
 * ?topic=) take it. Nothing else reaches a stream, so nothing unsanitized
 * can.
 *
 * The data path never waits on a browser: a stream's socket output holds
 * at most FEED_OUTPUT_BYTES, and behind it a queue of at most
 * http.feed_buffer_kb of whole events, from which the oldest are dropped
 * (counted; the stream then gets an `event: dropped` saying how many). A
 * stream that has not caught up (everything handed to its socket) for
 * http.feed_stall_timeout_s is cut off (counted): a client that stopped
 * reading, or one that cannot keep up with the feed. At most
 * http.feed_max_streams streams are open; more are refused with 503
 * (counted).
 *
 * Nor does the feed slow the data path much: it encodes at most
 * http.feed_max_rate events a second (a token bucket holding one second's
 * worth, so bursts up to that size pass whole); beyond it events are
 * skipped before any decoding (counted, and reported to the streams that
 * would have taken them as dropped). Decoding and encoding cost about
 * 2.5 us an event, so the default 20000 costs at most 5% of a core,
 * whatever the input rate. With no stream open the feed costs nothing.
 */
#ifndef TRACESAN_OPS_FEED_H
#define TRACESAN_OPS_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "wire/codec.h"
#include "wire/format.h"

struct event_base;
struct bufferevent;

typedef struct ts_feed ts_feed;

typedef struct ts_feed_limits {
    size_t max_streams;
    size_t buffer_bytes;         /* queued events per stream */
    int64_t stall_ms;            /* behind this long: cut off */
    uint64_t max_rate;           /* events encoded per second; 0 = any */
} ts_feed_limits;

typedef struct ts_feed_counters {
    uint64_t streams_open;       /* gauge */
    uint64_t streams_accepted;
    uint64_t streams_refused;    /* http.feed_max_streams were open */
    uint64_t events_sent;        /* events handed to a stream's socket */
    uint64_t events_dropped;     /* oldest dropped from a full queue */
    uint64_t events_skipped;     /* not encoded: over http.feed_max_rate */
    uint64_t cutoffs;            /* slow streams closed */
    uint64_t encode_failures;    /* published messages not served */
} ts_feed_counters;

/* NULL when memory or the timer ran out. `format` is the output's
 * (output.encoding): what the published bytes are decoded with. */
ts_feed *ts_feed_new(struct event_base *base, const ts_feed_limits *limits,
                     const ts_format *format);
void ts_feed_free(ts_feed *feed);

/* The route's ts_ops_stream_fn (`arg` is the feed): parses ?profile= and
 * ?topic= (each repeatable, at most TS_FEED_MAX_FILTERS; a topic is a
 * prefix, as ZeroMQ subscriptions are) and starts the stream. */
#define TS_FEED_MAX_FILTERS 8
int ts_feed_open_stream(void *arg, const char *query,
                        struct bufferevent *bev, const char *headers,
                        const char **message);

/* The observer's published hook (`arg` is the feed): one message the
 * output took.
 * Topics "sanitized.<profile>", "rejected" and "batch" (OutcomeBatch) are
 * served; others (density.<profile>) are not. Costs nothing when no
 * stream is open. */
void ts_feed_on_published(void *arg, const void *topic, size_t topic_len,
                          const void *payload, size_t len);

ts_feed_counters ts_feed_get_counters(const ts_feed *feed);
/* Appends the feed's series to a /metrics body. 0, or -1 (out of
 * memory). */
int ts_feed_render_metrics(const ts_feed *feed, ts_buf *out);

#endif
