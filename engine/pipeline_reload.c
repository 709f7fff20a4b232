#include "engine/pipeline_reload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_compatible(const ts_pipeline *pipeline,
                            const ts_profile *profiles, size_t n_profiles,
                            size_t default_profile, char *err, size_t errlen)
{
    size_t current = ts_pipeline_profile_count(pipeline);
    if (n_profiles != current) {
        snprintf(err, errlen, "the number of profiles changed (%zu -> %zu); "
                 "adding or removing profiles needs a restart", current,
                 n_profiles);
        return -1;
    }
    const ts_profile *old_default = ts_pipeline_default_profile(pipeline);
    for (size_t i = 0; i < n_profiles; i++) {
        const ts_profile *old = ts_pipeline_profile_at(pipeline, i);
        const ts_profile *new = &profiles[i];
        if (new->name == NULL || new->ops == NULL || new->mech == NULL ||
            new->ops->release == NULL) {
            snprintf(err, errlen, "profile %zu is incomplete", i);
            return -1;
        }
        if (strcmp(old->name, new->name) != 0) {
            snprintf(err, errlen, "profile '%s' became '%s'; renaming or "
                     "reordering profiles needs a restart", old->name,
                     new->name);
            return -1;
        }
        /* By name: profiles shared from a configuration carry its copy
         * of the mechanism's table (engine/config.h). */
        if (strcmp(old->ops->name, new->ops->name) != 0) {
            snprintf(err, errlen, "profile '%s' changed mechanism; that "
                     "needs a restart", old->name);
            return -1;
        }
        if (ts_profile_state_size(old) != ts_profile_state_size(new)) {
            snprintf(err, errlen, "profile '%s': the new parameters change "
                     "the per-user state layout; that needs a restart",
                     old->name);
            return -1;
        }
        if (!(new->window_ms > 0) || !isfinite(new->window_budget) ||
            !(new->window_budget > 0.0)) {
            snprintf(err, errlen, "profile '%s': unusable budget or window",
                     new->name);
            return -1;
        }
        if ((i == default_profile) != (old == old_default)) {
            snprintf(err, errlen, "default_profile changed; that needs a "
                     "restart");
            return -1;
        }
    }
    return 0;
}

int ts_pipeline_replace_profiles(ts_pipeline *pipeline, ts_profile *profiles,
                                 size_t n_profiles, size_t default_profile,
                                 char *err, size_t errlen)
{
    if (pipeline == NULL || profiles == NULL ||
        check_compatible(pipeline, profiles, n_profiles, default_profile, err,
                         errlen) != 0) {
        if (pipeline == NULL || profiles == NULL)
            snprintf(err, errlen, "no profiles");
        ts_profiles_free(profiles, n_profiles);
        return -1;
    }
    for (size_t i = 0; i < n_profiles; i++) {
        /* The pipeline owns its profile array (heap, not const); the public
         * accessor only hands it out read-only. Updating the slots in place
         * keeps every index and pointer held by users and outcomes valid.
         * The loop is single-threaded, so no update sees a half swap. */
        ts_profile *slot = (ts_profile *)ts_pipeline_profile_at(pipeline, i);
        void *old_mech = slot->mech;
        slot->mech = profiles[i].mech;
        slot->window_budget = profiles[i].window_budget;
        slot->window_ms = profiles[i].window_ms;
        slot->on_exhausted = profiles[i].on_exhausted;
        /* Hand the old mechanism to the array being freed. */
        profiles[i].mech = old_mech;
    }
    ts_profiles_free(profiles, n_profiles);
    return 0;
}
