/* Transport interface: where updates come from and where reports go.
 * ZeroMQ today; NATS JetStream later implements the same ops table, and the
 * event loop in daemon/main.c only talks to this interface. */
#ifndef TRACESAN_DAEMON_TRANSPORT_H
#define TRACESAN_DAEMON_TRANSPORT_H

#include <stddef.h>

#include "daemon/config.h"

struct event_base;

typedef struct ts_transport ts_transport;

/* One input message. `frames` counts its parts; only 1 ([payload]) or 2
 * ([topic][payload]) are well formed, and `payload` is the last part.
 * `len` is the true size even when it exceeds max_message_bytes. */
typedef struct ts_inbound {
    const void *payload;
    size_t len;
    size_t frames;
} ts_inbound;

/* Called for every input message, up to read_budget per readiness callback. */
typedef void (*ts_on_message_fn)(void *arg, const ts_inbound *message);
/* Called after each drained group of messages: commit, then publish. */
typedef void (*ts_on_batch_end_fn)(void *arg);

typedef struct ts_transport_ops {
    const char *name;
    int (*open)(ts_transport **out, const ts_settings *settings,
                struct event_base *base, char *err, size_t errlen);
    void (*start)(ts_transport *transport, ts_on_message_fn on_message,
                  ts_on_batch_end_fn on_batch_end, void *arg);
    /* 0 on success, -1 when the message could not be queued. */
    int (*publish)(ts_transport *transport, const void *topic,
                   size_t topic_len, const void *payload, size_t len);
    /* The endpoints actually bound/connected (resolves tcp://...:* ports). */
    const char *(*input_endpoint)(const ts_transport *transport);
    const char *(*output_endpoint)(const ts_transport *transport);
    void (*close)(ts_transport *transport);
} ts_transport_ops;

extern const ts_transport_ops ts_transport_zmq_ops;

#endif
