/* The holder of a profile's population lease (js_population.h): taking
 * and renewing `pop.<profile>`, resuming the loop from the bucket's last
 * record and the output stream's position it names, counting the
 * profile's reports as TRACESAN_OUT holds them, running each cycle's IBU
 * and BA on a job thread, writing the result with compare-and-set, and
 * publishing the density estimate. All on the module's thread. */
#ifndef TRACESAN_DRIVERS_JETSTREAM_JS_POP_HOLDER_H
#define TRACESAN_DRIVERS_JETSTREAM_JS_POP_HOLDER_H

#include <stdint.h>

#include "drivers/jetstream/js_pop_entry.h"

/* The profile's turn: the lease, then (held) the loop. */
void ts_js_pop_holder_step(ts_js_pop_entry *e, int64_t now_ms);
/* The bucket moved to a revision this holder did not write: the loop is
 * dropped and resumed from the bucket on the next turn. */
void ts_js_pop_holder_moved(ts_js_pop_entry *e, uint64_t revision);
/* Stops holding: the job is waited for and dropped, the reading stops;
 * with release the lease is handed back so another instance takes it at
 * once. */
void ts_js_pop_holder_stop(ts_js_pop_entry *e, int release, const char *why);

#endif
