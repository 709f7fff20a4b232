/* tracesand's scale-out mode on NATS JetStream (docs/scale-out.md):
 * input.type = output.type = "jetstream".
 *
 * Threads: the libevent loop keeps signals, the HTTP endpoint (/metrics,
 * /healthz) and a health timer; one JetStream thread makes every libnats
 * call, all of them the library's synchronous ones (fetch, publish and
 * wait for the acknowledgement, KV compare-and-set), and runs the
 * partitions' pipelines. The blocking calls therefore never stall the
 * loop, and no request/acknowledgement bookkeeping is spread over
 * callbacks: the order fetch -> process -> changelog append (quorum
 * acknowledged) -> publish outcomes (acknowledged) -> ack input is plain
 * sequential code, which is what the privacy argument rests on.
 *
 * Each owned partition has its own pipeline and user map, so dropping a
 * partition drops exactly its users and a new owner rebuilds them from
 * the changelog (state/changelog.h). */
#ifndef TRACESAN_DRIVERS_JETSTREAM_JETSTREAM_MODE_H
#define TRACESAN_DRIVERS_JETSTREAM_JETSTREAM_MODE_H

#include <stddef.h>

#include "wire/codec.h"
#include "engine/config.h"
#include "mechanisms/rng.h"

struct ts_daemon;
typedef struct ts_jetstream ts_jetstream;

/* Runs the daemon in this mode until SIGINT or SIGTERM; returns the exit
 * status. The daemon's template pipeline only serves the operations side
 * (profile names); partitions get pipelines of their own from `config`. */
int ts_jetstream_run(struct ts_daemon *daemon, const ts_config *config,
                     ts_rng *rng, const char *config_path,
                     const char *const *overrides, size_t n_overrides);

/* SIGHUP (ops/reload.h, adopt_config; `mode` is the ts_jetstream):
 * takes ownership of a configuration the reload validated and applied to
 * the template pipeline. The JetStream thread swaps every partition's
 * profiles for ones built from it between two groups, and builds later
 * partitions' pipelines from it. */
void ts_jetstream_adopt_config(void *mode, ts_config *fresh);

/* Appends this mode's metrics (per partition: owned, lag, commits). */
int ts_jetstream_render_metrics(ts_jetstream *mode, ts_buf *out);

#endif
