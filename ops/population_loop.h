/* The PRIVIC loop online (mechanisms/population.h), for every profile
 * whose mechanism has population ops.
 *
 * A report is counted once the output took the message carrying it (the
 * observer's reports_sent hook): after its group's ledgers are committed,
 * so only reports whose budget is durably spent and that were sent ever
 * reach an estimate; a failed send is not counted.
 * At a cycle's end the counts go to a worker thread that runs IBU and BA
 * and writes the new estimate and channel version to the store; only then
 * does the loop install the channel, so no published report ever carries a
 * version the store could forget (a restart resumes from it, and versions
 * never go back). Releases never wait: they go on through the installed
 * channel while the worker computes the next one.
 *
 * The estimate is published as tracesan.v1.DensityEstimate on topic
 * density.<profile> every output.density_publish_s, and served as GeoJSON
 * at GET /density/<profile>. */
#ifndef TRACESAN_OPS_POPULATION_LOOP_H
#define TRACESAN_OPS_POPULATION_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "datapath/io.h"
#include "datapath/observer.h"
#include "engine/pipeline.h"
#include "state/store.h"
#include "wire/format.h"

typedef struct ts_population_set ts_population_set;

/* One loop per population profile of the pipeline, each resumed from the
 * store when there is one (BA runs here, before the daemon is ready).
 * *out is NULL when no profile has population ops. 0, or -1 with err. */
int ts_population_set_new(ts_population_set **out, ts_pipeline *pipeline,
                          ts_store *store, struct event_base *base,
                          int64_t publish_ms, const ts_format *format,
                          const ts_publisher *publisher, char *err,
                          size_t errlen);
/* Waits for a job in flight (its result is dropped), joins the worker,
 * frees the loops. NULL is fine. */
void ts_population_set_free(ts_population_set *set);

/* Reports whose message was sent, after their group's ledgers were
 * durable (the observer's reports_sent hook, datapath/observer.h). */
void ts_population_on_sent(ts_population_set *set,
                           const ts_observation *observations, size_t n);

/* The profile's index when it has a loop, else -1. */
int ts_population_profile_has_loop(const ts_population_set *set,
                                   size_t profile_index);

/* Before the pipeline's profiles are replaced (SIGHUP): waits for the job
 * in flight and applies it, then detaches every loop from its profile. */
void ts_population_set_detach(ts_population_set *set);
/* After: binds the loops to the new profiles by name, rebuilding each
 * channel from the current estimate for the new parameters as the next
 * version (a grid of another size starts afresh). 0, or -1 with err (that
 * profile then releases through its own first channel, as a new
 * version). */
int ts_population_set_attach(ts_population_set *set, char *err,
                             size_t errlen);

/* GET /density/<profile>: 200 with a GeoJSON FeatureCollection, 404 for a
 * profile without a loop, 503 before a first estimate. The body is
 * malloc'ed (the caller frees). */
char *ts_population_geojson(ts_population_set *set, const char *profile,
                            int *status, size_t *len);

/* Prometheus lines for /metrics, appended to buf (0, or -1 when it ran
 * out of memory). */
int ts_population_render_metrics(const ts_population_set *set, ts_buf *buf);

#endif
