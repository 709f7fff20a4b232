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
 * ts_params.get_model; the profile keeps a reference, ts_model_ref, so
 * the loaded model is shared, never copied), epsilon (unitless, default
 * 1), delta (default 0.01), belief_capacity (default 1024 cells: a state
 * block of 16 KiB per user, of which the daemon holds the live cells,
 * docs/delta_privacy.md "Memory"), prune_threshold (default 0), max_ticks
 * (default 1000), points_per_window (default 1), personal_models (boolean or
 * integer 0/1, default true: the prior of a user whose public
 * pseudonym, ts_point.user, has a personal model in the file uses it; the
 * popular model otherwise, for a point without a pseudonym, or when 0),
 * outside_region ("surrogate", the default: a true point outside the
 * model's region is released like a drift, from the delta-location set's
 * cell nearest to it, so the output does not tell that the user left the
 * region; "reject": refused with TS_RELEASE_OUTSIDE_REGION before any
 * state changes, which a reader of the rejections learns -- for producers
 * that would rather route those points to another profile with the
 * per-update `profile` field), likelihood ("surrogate", the default: the
 * posterior scores a belief cell outside the set at its surrogate, where
 * the mechanism releases such a user from; "paper": at the cell),
 * break_ticks (default 15: a longer gap moves the belief break_ticks ticks
 * and mixes it with the initial distribution, weight resume_weight,
 * default 1; 0: M^k and max_ticks, the paper), set_radius_m (default 0:
 * the set of Definition 3.1; above 0 only its cells within that distance
 * of its most probable cell, docs/delta_privacy.md "Choosing the set"),
 * window_keeps_belief (default true: a user's next budget window starts
 * from the belief the last one left, ts_mechanism_ops.window_opens).
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

/* The two ops tables' `replay`. Evaluation only (tracesan eval; never the
 * daemon): replays one PUBLISHED
 * release on an observer's copy of the user's state, exactly as the
 * mechanism updated its own: prior for published->ts_ms, delta-location
 * set, posterior of the published point. `user_state` is a block of
 * user_state_size bytes, zero-filled for a new user, fed the releases of
 * one user in order; afterwards it equals the mechanism's own state.
 * published->lat/lon is the released point, published->user selects a
 * personal model as the release did. When `truth` is not NULL, *drifted is
 * set to 1 when truth's cell was not in the delta-location set (the
 * release used a surrogate), else 0; a truth outside the region counts as
 * drifted; with truth NULL *drifted is 0. drifted and *delta_set_size
 * may be NULL; the latter gets |Delta X|. Returns 0, or -1 (state
 * unchanged) on invalid input: NULL profile/state/published, a published
 * or true coordinate that is not finite or out of WGS84 range for
 * published, a timestamp before the user's last release. `profile` must
 * come from ts_pim_ops or ts_lm_delta_ops. Shares its code with the release,
 * and the profile's scratch: not concurrently with its releases. */
int ts_delta_replay(const void *profile, void *user_state,
                    const ts_point *published, const ts_point *truth,
                    int *drifted, unsigned *delta_set_size);

/* The ops tables' `state_live_bytes`: the leading bytes of a user's state block that carry information (the
 * header and the live belief entries); the rest of the block is zero. For
 * memory figures. `profile` from ts_pim_ops or ts_lm_delta_ops. */
size_t ts_delta_state_live_bytes(const void *profile, const void *user_state);


#endif
