/* PRIVIC loops and density estimates across a JetStream cluster
 * (docs/scale-out.md, "PRIVIC and density estimates, cluster-wide").
 *
 * A partition sees only some users, so the estimate is made from what
 * every partition published: for each profile with population ops, one
 * instance at a time holds the lease `pop.<profile>` (tracesan_leases, the
 * partition lease rules of partition_lease.h) and runs the loop of
 * mechanisms/population.h over the profile's reports as TRACESAN_OUT holds
 * them. Each cycle's result (channel version, estimate, counters, and the
 * output-stream sequence it accounts up to) is written to the replicated
 * KV bucket tracesan_population with compare-and-set on the revision it
 * resumed from, so the versions form one line: none is issued twice, none
 * is lost, and a new holder resumes from the last one written and the
 * stream position it names. Every instance adopts each version from the
 * bucket: it builds the channel from the estimate (the same function of
 * the same bytes everywhere) and installs it between two groups on its
 * JetStream thread, never going back. The holder publishes the estimate
 * as density.<profile> on tracesan.density.<profile>; every instance
 * serves GET /density/<profile> from the bucket's estimate.
 *
 * Threads: the module's own thread polls the bucket, renews or takes the
 * leases, reads the output stream, runs IBU and BA on a job thread, and
 * writes; the JetStream thread only installs (ts_js_population_install,
 * ts_js_population_catch_up) and rebinds after a reload; the event loop
 * reads (/density, /metrics). */
#ifndef TRACESAN_DRIVERS_JETSTREAM_JS_POPULATION_H
#define TRACESAN_DRIVERS_JETSTREAM_JS_POPULATION_H

#include <stddef.h>

#include "engine/config.h"
#include "wire/codec.h"

struct ts_driver;
typedef struct ts_js_population ts_js_population;

/* Binds every profile of `config` that keeps an estimate and adopts the
 * bucket's current version for each (building and installing its
 * channel), before any partition is processed. *out is NULL when no
 * profile keeps one. Runs on the caller's thread. 0, or -1 with err. */
int ts_js_population_open(ts_js_population **out, struct ts_driver *m,
                          const ts_config *config, char *err, size_t errlen);
/* Starts the module's thread. 0, or -1 with err. */
int ts_js_population_start(ts_js_population *pop, char *err, size_t errlen);
/* Stops the thread and hands the leases it holds back. */
void ts_js_population_stop(ts_js_population *pop);
/* Stops, puts the profiles back on their first channels and frees. */
void ts_js_population_close(ts_js_population *pop);

/* JetStream thread, between two groups: the newest version adopted since
 * goes in (a release runs entirely on one channel). */
void ts_js_population_install(ts_js_population *pop);
/* JetStream thread, after a partition was restored and before its first
 * group: reads the bucket and installs its version when it is newer, so a
 * partition's versions never go back when it changes hands. 0, or -1 when
 * the bucket could not be read (the partition waits and is restored
 * again). */
int ts_js_population_catch_up(ts_js_population *pop);
/* JetStream thread, after a reload gave the partitions `config`'s
 * profiles: rebinds to them (their channels rebuilt under the new
 * parameters, the same version) before the next group. */
void ts_js_population_follow_config(ts_js_population *pop,
                                    const ts_config *config);

/* GET /density/<profile> from the bucket's estimate (wire/density.h). */
char *ts_js_population_geojson(ts_js_population *pop, const char *profile,
                               int *status, size_t *len);
/* The tracesand_privic_* and tracesand_density_* series. 0, or -1. */
int ts_js_population_render_metrics(ts_js_population *pop, ts_buf *out);

#endif
