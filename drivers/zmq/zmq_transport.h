/* The ZeroMQ driver's sockets on the event loop: a PULL or SUB input, a
 * PUB (XPUB) or PUSH output, CURVE through the ZAP handler. The driver
 * (drivers/zmq/zmq_driver.c) hands each input message to the group body
 * and publishes through here. */
#ifndef TRACESAN_DRIVERS_ZMQ_ZMQ_TRANSPORT_H
#define TRACESAN_DRIVERS_ZMQ_ZMQ_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "datapath/driver.h"
#include "datapath/io.h"
#include "drivers/zmq/zmq_settings.h"

struct event_base;

typedef struct ts_transport ts_transport;

/* Called for every input message, up to read_budget per readiness callback. */
typedef void (*ts_on_message_fn)(void *arg, const ts_inbound *message);
/* Called after each drained group of messages: commit, then publish. */
typedef void (*ts_on_batch_end_fn)(void *arg);
/* Called when an output that answered TS_PUBLISH_BLOCKED can take messages
 * again: offer the held ones. Returns nonzero while some are still held
 * (a publish blocked again), 0 once none are: input then resumes. */
typedef int (*ts_on_output_ready_fn)(void *arg);


/* What the sockets are made from. */
typedef struct ts_transport_options {
    const ts_settings *core;             /* the input's size limits */
    const ts_zmq_settings *zmq;
    const ts_format_settings *format;    /* outcomes per output message */
    int sub_input;                       /* input.type "sub" (else PULL) */
    int push_output;                     /* output.type "push" (else PUB) */
    /* One side only: the other is another driver's (datapath/output.h). */
    int no_input;                        /* an output for another input */
    int no_output;                       /* an input publishing elsewhere */
} ts_transport_options;

int ts_transport_open(ts_transport **out, const ts_transport_options *options,
                      struct event_base *base, char *err, size_t errlen);
void ts_transport_start(ts_transport *transport, ts_on_message_fn on_message,
                        ts_on_batch_end_fn on_batch_end,
                        ts_on_output_ready_fn on_output_ready, void *arg);
/* A PUB output never blocks: a subscriber at its HWM is cut off until it
 * catches up (counted in subscriber_cutoffs); the others get every
 * message. */
ts_publish_result ts_transport_publish(ts_transport *transport,
                                       const void *topic, size_t topic_len,
                                       const void *payload, size_t len);
/* ts_transport_publish as a publisher (the outbox's, the group commit's). */
ts_publisher ts_transport_publisher(ts_transport *transport);
/* The endpoints actually bound/connected (resolves tcp://...:* ports). */
const char *ts_transport_input_endpoint(const ts_transport *transport);
const char *ts_transport_output_endpoint(const ts_transport *transport);
void ts_transport_close(ts_transport *transport);
/* Stop reading input until resume_input: messages wait in the input
 * socket and, past its HWM, in the producers (PULL) or are dropped by
 * libzmq (SUB). Safe to call from inside on_message: the current
 * readiness callback reads nothing more. Idempotent. */
void ts_transport_pause_input(ts_transport *transport);
/* Undo pause_input; messages queued meanwhile are read on the next loop
 * turn (their readiness edge may already have fired). Idempotent. */
void ts_transport_resume_input(ts_transport *transport);
void ts_transport_get_counters(const ts_transport *transport,
                               ts_transport_counters *out);
/* SIGHUP: adopt the client allow-lists of `zmq` (copied) for new
 * handshakes; established connections are untouched. Returns 1 when the
 * lists were replaced, 0 when CURVE is off (nothing to do), -1 with err
 * filled (the running lists are kept). */
int ts_transport_reload_allow_lists(ts_transport *transport,
                                    const ts_zmq_settings *zmq, char *err,
                                    size_t errlen);

#endif
