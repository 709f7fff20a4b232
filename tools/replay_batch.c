#include "tools/replay_batch.h"

#include <string.h>

int ts_replay_batch_added(ts_replay_batch *b, size_t before,
                          size_t *update_bytes)
{
    size_t added = b->payload.len - before;
    *update_bytes = added;
    if (added > b->max_bytes) {
        b->payload.len = before;
        return TS_BATCH_TOO_LARGE;
    }
    if (b->payload.len > b->max_bytes) {
        /* The batch so far goes out alone; this update opens the next. */
        b->ready_len = before;
        b->ready_count = b->pending;
        b->pending++;
        return TS_BATCH_SEND;
    }
    if (++b->pending >= b->max_updates) {
        b->ready_len = b->payload.len;
        b->ready_count = b->pending;
        return TS_BATCH_SEND;
    }
    return TS_BATCH_ADDED;
}

int ts_replay_batch_close(ts_replay_batch *b)
{
    if (b->pending == 0)
        return TS_BATCH_ADDED;
    b->ready_len = b->payload.len;
    b->ready_count = b->pending;
    return TS_BATCH_SEND;
}

void ts_replay_batch_sent(ts_replay_batch *b)
{
    size_t rest = b->payload.len - b->ready_len;
    if (rest > 0)
        memmove(b->payload.data, b->payload.data + b->ready_len, rest);
    b->payload.len = rest;
    b->pending -= b->ready_count;
    b->ready_len = 0;
    b->ready_count = 0;
}

void ts_replay_batch_free(ts_replay_batch *b)
{
    ts_buf_free(&b->payload);
    memset(b, 0, sizeof *b);
}
