/* An observer for a thread that is not the event loop's: each call is
 * queued (copies of its strings and bytes) and replayed, in order, into
 * the loop's observer when the loop drains the relay. A driver that
 * processes on a thread of its own (JetStream) hands the group body this
 * relay's observer, so the operations side (metrics, the rejection log,
 * the feed) only ever runs on the loop.
 *
 * The queue is bounded: past `max_bytes` calls are dropped and counted,
 * so a loop that falls behind costs observations, never memory. The
 * query counts_reports is forwarded as it is and must be thread-safe. */
#ifndef TRACESAN_DATAPATH_OBSERVER_RELAY_H
#define TRACESAN_DATAPATH_OBSERVER_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "datapath/observer.h"

typedef struct ts_observer_relay ts_observer_relay;

/* NULL when memory ran out. `target` is borrowed. */
ts_observer_relay *ts_observer_relay_new(const ts_observer *target,
                                         size_t max_bytes);
void ts_observer_relay_free(ts_observer_relay *relay);

/* The front the other thread calls. */
const ts_observer *ts_observer_relay_front(ts_observer_relay *relay);

/* On the target's thread: replays what was queued. */
void ts_observer_relay_drain(ts_observer_relay *relay);

/* Calls dropped because the queue was full. */
uint64_t ts_observer_relay_dropped(ts_observer_relay *relay);

#endif
