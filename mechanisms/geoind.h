/* Geo-indistinguishable independent mechanism: planar Laplace noise on every
 * point, each spending a fixed 1/points_per_window of the window budget
 * eps = level / radius_m (per metre). Parameters: radius_m (default 100),
 * level (default ln 10), points_per_window (default 30). With density =
 * true and a grid (region, cell_m or rows/cols) the daemon also estimates
 * where the profile's users are from its published points (IBU through
 * the binned Laplace channel, docs/privic.md#density-feed). */
#ifndef TRACESAN_MECHANISMS_GEOIND_H
#define TRACESAN_MECHANISMS_GEOIND_H

#include "mechanisms/mechanism.h"

extern const ts_mechanism_ops ts_geoind_ops;

#endif
