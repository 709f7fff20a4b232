/* delta-location-set privacy (Xiao & Xiong, CCS 2015, Algorithm 1) as two
 * mechanisms of the registry: `pim` (Planar Isotropic Mechanism) and
 * `lm-delta` (the per-axis Laplace baseline of Algorithm 3).
 *
 * Per release, for one user: k = ticks since the user's last release
 * (ts_markov_ticks_between, on public timestamps); prior = belief M^k
 * (ts_belief_predict: an empty belief, a new window, or k > max_ticks reset
 * it to the model's initial distribution); the delta-location set of the
 * prior; the true cell; if it is not in the set (drift) the surrogate
 * (nearest cell of the set) is released instead of the true location; the
 * noise; the released point is unprojected and snapped to the published
 * 1e-7 degree grid; the posterior is computed with the emission density of
 * the mechanism used, evaluated at the SNAPPED published point, so the
 * per-user state (belief, last release time) is a function of the model and
 * of published outputs only. Drift and the surrogate are never published
 * nor stored.
 *
 * Profile keys: model (path, opened by the caller through
 * ts_params.get_model), epsilon (unitless, default 1), delta (default
 * 0.01), belief_capacity (default 1024 cells: 16 KiB of state per user),
 * prune_threshold (default 1e-6), max_ticks (default 1000),
 * points_per_window (default 1), outside_region ("reject", the only
 * policy: a true point outside the model's region is refused with
 * TS_RELEASE_ERROR, published as internal_error, before any state
 * changes).
 *
 * Budget: eps_point = epsilon for every release. delta-location-set privacy
 * is a per-release guarantee; the window budget epsilon * points_per_window
 * caps how many releases a user gets per window.
 *
 * A profile context owns scratch storage (belief workspace, PIM context):
 * release calls on one profile must not run concurrently.
 */
#ifndef TRACESAN_MECHANISMS_DELTA_PRIVACY_H
#define TRACESAN_MECHANISMS_DELTA_PRIVACY_H

#include "mechanisms/mechanism.h"

extern const ts_mechanism_ops ts_pim_ops;
extern const ts_mechanism_ops ts_lm_delta_ops;

#define TS_DELTA_DEFAULT_EPSILON 1.0
#define TS_DELTA_DEFAULT_DELTA 0.01
#define TS_DELTA_DEFAULT_CAPACITY 1024
#define TS_DELTA_DEFAULT_PRUNE 1e-6
#define TS_DELTA_DEFAULT_MAX_TICKS 1000
#define TS_DELTA_DEFAULT_POINTS 1

#endif
