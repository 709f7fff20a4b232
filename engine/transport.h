/* Transport interface: where updates come from and where reports go.
 * ZeroMQ today; NATS JetStream later implements the same ops table, and the
 * event loop in daemon/main.c only talks to this interface. */
#ifndef TRACESAN_ENGINE_TRANSPORT_H
#define TRACESAN_ENGINE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/config.h"

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
/* Called when an output that answered TS_PUBLISH_BLOCKED can take messages
 * again: offer the held ones. Returns nonzero while some are still held
 * (a publish blocked again), 0 once none are: input then resumes. */
typedef int (*ts_on_output_ready_fn)(void *arg);

typedef enum ts_publish_result {
    TS_PUBLISH_SENT = 0,
    /* Lossless output (PUSH) full: nothing was queued and input is paused
     * until on_output_ready; the caller keeps the message and offers it
     * again then, in order. */
    TS_PUBLISH_BLOCKED = 1,
    TS_PUBLISH_FAILED = -1, /* dropped, counted as publish_dropped_error */
} ts_publish_result;

/* Everything the transport dropped or refused, by cause, for /metrics. */
typedef struct ts_transport_counters {
    uint64_t publish_dropped_error;  /* send failures other than a full
                                        output */
    uint64_t subscriber_cutoffs;     /* PUB output: a subscriber reached
                                        its HWM and was cut off until it
                                        caught up, missing >= 1 message */
    uint64_t input_pauses_output;    /* input paused: output could not take
                                        more (PUSH output) */
    int has_zap;                     /* CURVE on: the two below are live */
    uint64_t zap_accepted;           /* CURVE handshakes let through */
    uint64_t zap_denied;             /* CURVE handshakes refused */
} ts_transport_counters;

typedef struct ts_transport_ops {
    const char *name;
    int (*open)(ts_transport **out, const ts_settings *settings,
                struct event_base *base, char *err, size_t errlen);
    void (*start)(ts_transport *transport, ts_on_message_fn on_message,
                  ts_on_batch_end_fn on_batch_end,
                  ts_on_output_ready_fn on_output_ready, void *arg);
    /* A PUB output never blocks: a subscriber at its HWM is cut off until
     * it catches up (counted in subscriber_cutoffs); the others get every
     * message. */
    ts_publish_result (*publish)(ts_transport *transport, const void *topic,
                                 size_t topic_len, const void *payload,
                                 size_t len);
    /* The endpoints actually bound/connected (resolves tcp://...:* ports). */
    const char *(*input_endpoint)(const ts_transport *transport);
    const char *(*output_endpoint)(const ts_transport *transport);
    void (*close)(ts_transport *transport);
    /* Stop reading input until resume_input: messages wait in the input
     * socket and, past its HWM, in the producers (PULL) or are dropped by
     * libzmq (SUB). Safe to call from inside on_message: the current
     * readiness callback reads nothing more. Idempotent. */
    void (*pause_input)(ts_transport *transport);
    /* Undo pause_input; messages queued meanwhile are read on the next loop
     * turn (their readiness edge may already have fired). Idempotent. */
    void (*resume_input)(ts_transport *transport);
    void (*get_counters)(const ts_transport *transport,
                         ts_transport_counters *out);
    /* SIGHUP: adopt the client allow-lists of `settings` (copied) for new
     * handshakes; established connections are untouched. Returns 1 when
     * the lists were replaced, 0 when CURVE is off (nothing to do), -1
     * with err filled (the running lists are kept). */
    int (*reload_allow_lists)(ts_transport *transport,
                              const ts_settings *settings, char *err,
                              size_t errlen);
} ts_transport_ops;

extern const ts_transport_ops ts_transport_zmq_ops;

#endif
