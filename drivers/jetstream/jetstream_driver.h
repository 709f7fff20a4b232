/* The JetStream driver (input.type = output.type = "jetstream",
 * docs/scale-out.md): partitions leased between instances, each with its
 * own pipeline, its ledgers in a changelog stream, outputs to a stream.
 *
 * Threads: the libevent loop keeps signals, the HTTP endpoint and a
 * health timer; one JetStream thread makes every libnats call (fetch,
 * publish and wait for the acknowledgement, KV compare-and-set) and runs
 * the partitions' groups through the group body; a lease thread renews
 * the leases. The order fetch -> process -> changelog append (quorum
 * acknowledged) -> publish outcomes (acknowledged) -> ack input is plain
 * sequential code, which is what the privacy argument rests on. */
#ifndef TRACESAN_DRIVERS_JETSTREAM_JETSTREAM_DRIVER_H
#define TRACESAN_DRIVERS_JETSTREAM_JETSTREAM_DRIVER_H

#include "datapath/driver.h"

extern const ts_driver_ops ts_jetstream_driver;

#endif
