/* LocationBatch messages the daemon will take, built one update at a time
 * by both producers (tools/cmd_replay.c over ZeroMQ, tools/cmd_jetstream.c
 * over JetStream).
 *
 * The daemon refuses a whole message above input.max_message_bytes
 * (`oversized`) or input.max_batch_updates (`batch_too_large`), and over
 * ZeroMQ a frame above twice the byte limit is dropped with the
 * connection, unanswered. So a message is closed before the update that
 * would take it over either limit, and an update that alone is larger than
 * a message may be is refused here, by itself: the updates around it still
 * go out (issue 25, item 9).
 *
 * Repeated fields concatenate, so the caller appends each update's
 * encoding as a LocationBatch of one (ts_codec_encode_batch with n = 1, or
 * a packed batch of one) to `payload`, then calls ts_replay_batch_added.
 */
#ifndef TRACESAN_TOOLS_REPLAY_BATCH_H
#define TRACESAN_TOOLS_REPLAY_BATCH_H

#include <stddef.h>

#include "wire/codec.h"

typedef struct ts_replay_batch {
    ts_buf payload;
    size_t pending;          /* updates in payload */
    size_t max_updates;      /* >= 1 */
    size_t max_bytes;        /* of one message */
    /* After TS_BATCH_SEND: payload[0, ready_len) holds the ready_count
     * updates of the message to send now. */
    size_t ready_len;
    size_t ready_count;
} ts_replay_batch;

enum {
    TS_BATCH_ADDED = 0,      /* the update waits in the batch */
    TS_BATCH_SEND = 1,       /* a message is ready: send it, then call
                                ts_replay_batch_sent */
    TS_BATCH_TOO_LARGE = 2   /* the update alone exceeds max_bytes; it was
                                taken out again */
};

/* The update appended since payload.len was `before`: one of the above.
 * *update_bytes gets its encoded size. */
int ts_replay_batch_added(ts_replay_batch *batch, size_t before,
                          size_t *update_bytes);

/* At the end of the input: TS_BATCH_SEND when updates are waiting (the
 * message is set up as above), else TS_BATCH_ADDED. */
int ts_replay_batch_close(ts_replay_batch *batch);

/* The ready message went out: drops it, keeping the update that did not
 * fit in it as the start of the next one. */
void ts_replay_batch_sent(ts_replay_batch *batch);

void ts_replay_batch_free(ts_replay_batch *batch);

#endif
