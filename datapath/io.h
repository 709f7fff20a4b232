/* What moves between a driver and the data path: an input message, and
 * the answer of a publish. */
#ifndef TRACESAN_DATAPATH_IO_H
#define TRACESAN_DATAPATH_IO_H

#include <stddef.h>

/* One input message. `frames` counts its parts; only 1 ([payload]) or 2
 * ([topic][payload]) are well formed, and `payload` is the last part.
 * `len` is the true size even when it exceeds max_message_bytes. */
typedef struct ts_inbound {
    const void *payload;
    size_t len;
    size_t frames;
} ts_inbound;

typedef enum ts_publish_result {
    TS_PUBLISH_SENT = 0,
    /* Lossless output full: nothing was queued and input is paused until
     * the driver says the output is ready; the caller keeps the message and
     * offers it again then, in order. */
    TS_PUBLISH_BLOCKED = 1,
    TS_PUBLISH_FAILED = -1, /* dropped, counted as publish_dropped_error */
} ts_publish_result;

/* Where a group's messages go once committed. */
typedef struct ts_publisher {
    void *arg;
    ts_publish_result (*publish)(void *arg, const void *topic,
                                 size_t topic_len, const void *payload,
                                 size_t len);
} ts_publisher;

#endif
