/* The ZeroMQ driver's output side for another driver's input
 * (datapath/output.h): output.type "pub" or "push" with, say,
 * input.type "mqtt". The socket is the one the ZeroMQ driver would bind
 * or connect (output.endpoint, output.mode, output.hwm, CURVE's
 * security.* rows), with the same semantics: PUSH is
 * lossless and answers BLOCKED while no consumer can take more, PUB never
 * waits (a subscriber at its mark is cut off and counted). "Took" means
 * libzmq queued the message: what its I/O thread has not written when
 * the process dies is lost, as with the ZeroMQ driver's own output. */
#ifndef TRACESAN_DRIVERS_ZMQ_ZMQ_OUTPUT_H
#define TRACESAN_DRIVERS_ZMQ_ZMQ_OUTPUT_H

#include "datapath/output.h"

extern const ts_output_ops ts_zmq_output;

#endif
