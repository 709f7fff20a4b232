/* Swapping a running pipeline's profile parameters (SIGHUP) without
 * touching its users.
 *
 * Only parameters change, never the shape: the new profiles must have the
 * same names, in the same order, with the same mechanisms and the same
 * per-user state size, and the same default. Users refer to their profile
 * by index and carry mechanism state laid out by it, so anything else could
 * hand a user's ledger to the wrong profile; such a change needs a restart.
 *
 * A user keeps its window start, window length and spend: a new window
 * length applies from the user's next window, new budgets and mechanism
 * parameters from the next update.
 */
#ifndef TRACESAN_ENGINE_PIPELINE_RELOAD_H
#define TRACESAN_ENGINE_PIPELINE_RELOAD_H

#include <stddef.h>

#include "engine/pipeline.h"

/* Takes ownership of `profiles` (as from ts_config_build_profiles) in all
 * cases. 0 when applied; -1 with err filled when refused, in which case the
 * pipeline is unchanged. */
int ts_pipeline_replace_profiles(ts_pipeline *pipeline, ts_profile *profiles,
                                 size_t n_profiles, size_t default_profile,
                                 char *err, size_t errlen);

#endif
