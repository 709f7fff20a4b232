/* The ZeroMQ driver (input.type "pull" or "sub", output.type "pub" or
 * "push"): everything on the event loop. Each readiness callback hands
 * over a bounded group of input messages; the group body turns them into
 * outcomes in an outbox, and the group commit writes the group's ledgers
 * to the state.dir store (on the writer thread) and publishes only then.
 * Input is a ZeroMQ message: acknowledging it is reading it, so a PUSH
 * output that cannot take more stops the reading (lossless), and a PUB
 * output never waits (a slow subscriber is cut off). */
#ifndef TRACESAN_DRIVERS_ZMQ_ZMQ_DRIVER_H
#define TRACESAN_DRIVERS_ZMQ_ZMQ_DRIVER_H

#include "datapath/driver.h"

extern const ts_driver_ops ts_zmq_driver;

#endif
