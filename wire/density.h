/* A profile's density estimate (mechanisms/population.h) in the forms it
 * is published in: the tracesan.v1.DensityEstimate message of topic
 * density.<profile>, the GeoJSON of GET /density/<profile>, and the
 * Prometheus series of the loop behind it. Shared by the single-node loop
 * (ops/population_loop.c) and the cluster job of the JetStream driver
 * (drivers/jetstream/js_population.c), so both publish and serve the same
 * bytes for the same estimate. */
#ifndef TRACESAN_WIRE_DENSITY_H
#define TRACESAN_WIRE_DENSITY_H

#include <stddef.h>
#include <stdint.h>

#include "mechanisms/population.h"
#include "wire/codec.h"

/* One estimate and what it rests on; everything borrowed. */
typedef struct ts_density_view {
    const char *profile;
    const char *mechanism;
    const ts_population_ops *ops;
    const void *mech;            /* the profile's state: the grid */
    size_t n;
    const double *theta;         /* n, or NULL: no cycle completed yet */
    uint32_t channel_version;
    uint32_t cycle;
    uint64_t reports;            /* behind the last cycle */
    uint64_t reports_total;
    int64_t estimated_at_ms;
    uint64_t waiting_reports;    /* counted toward the first cycle */
} ts_density_view;

/* The message for the view; `bounds` (4 doubles) holds its box and must
 * live as long as the message, whose strings and probabilities point into
 * the view. */
void ts_density_fill(const ts_density_view *view,
                     Tracesan__V1__DensityEstimate *message, double *bounds);

/* GET /density/<profile>: 200 with a GeoJSON FeatureCollection, 404 when
 * view is NULL (no such profile, or it keeps no estimate), 503 before a
 * first estimate, 500 out of memory (NULL returned). The body is malloc'ed
 * (the caller frees). */
char *ts_density_geojson(const ts_density_view *view, int *status,
                         size_t *len);

/* A loop's figures for /metrics. */
typedef struct ts_density_stats {
    const char *profile;
    uint32_t channel_version;
    uint32_t cycles;
    uint64_t reports_total;
    uint64_t failures;
    uint64_t stale;
    double last_ibu_ms;
    double last_build_ms;
    uint64_t densities_published;
    uint64_t densities_dropped;
} ts_density_stats;

/* tracesand_privic_* and tracesand_density_* for each row, appended to
 * buf. 0, or -1 out of memory. */
int ts_density_render_metrics(const ts_density_stats *rows, size_t n,
                              ts_buf *buf);

#endif
