/* A mechanism the pipeline and store tests drive directly: it releases the
 * truth plus a fixed offset, spends a fixed amount, counts its calls in the
 * user's state and records what the pipeline showed it, and can be told to
 * misbehave in the ways the pipeline must catch. Profiles are built by the
 * tests, not from parameters. */
#ifndef TRACESAN_TESTS_SUPPORT_FAKE_MECHANISM_H
#define TRACESAN_TESTS_SUPPORT_FAKE_MECHANISM_H

#include <stdlib.h>
#include <string.h>

#include "mechanisms/mechanism.h"

typedef enum fake_mode {
    FAKE_OFFSET = 0,      /* truth + offset, spends `spend` */
    FAKE_ERROR,           /* TS_RELEASE_ERROR (after scribbling on state) */
    FAKE_IDENTITY,        /* publishes the true point: a legitimate sample */
    FAKE_BAD_COORDINATE,  /* publishes lat 95 */
    FAKE_OVERSPEND,       /* claims OK but spends more than is left */
    FAKE_OUTSIDE,         /* TS_RELEASE_OUTSIDE_REGION (after scribbling) */
} fake_mode;

typedef struct fake_profile {
    double total;
    double spend;
    double dlat;
    double dlon;
    fake_mode mode;
    size_t state_bytes;   /* 0: just the call counter */
} fake_profile;

/* What the pipeline showed the mechanism on its last call. */
static struct {
    int calls;
    ts_point truth;
    ts_budget_view budget;
    unsigned state_counter;  /* value of the user's state before the call */
} seen;

static inline fake_profile *fake_profile_new(fake_profile values)
{
    fake_profile *profile = malloc(sizeof *profile);
    if (profile != NULL)
        *profile = values;
    return profile;
}

static inline double fake_window_budget(const void *profile)
{
    return ((const fake_profile *)profile)->total;
}

static inline size_t fake_state_size(const void *profile)
{
    const fake_profile *p = profile;
    return p->state_bytes > sizeof(unsigned) ? p->state_bytes
                                             : sizeof(unsigned);
}

static inline void fake_profile_free(void *profile)
{
    free(profile);
}

static inline ts_release_status fake_release(const void *profile,
                                             void *user_state,
                                             const ts_point *truth,
                                             const ts_budget_view *budget,
                                             ts_rng *rng, ts_report *out)
{
    const fake_profile *p = profile;
    (void)rng;
    unsigned counter;
    memcpy(&counter, user_state, sizeof counter);
    seen.calls++;
    seen.truth = *truth;
    seen.budget = *budget;
    seen.state_counter = counter;
    counter++;
    memcpy(user_state, &counter, sizeof counter);

    if (p->mode == FAKE_ERROR)
        return TS_RELEASE_ERROR;
    if (p->mode == FAKE_OUTSIDE)
        return TS_RELEASE_OUTSIDE_REGION;
    if (p->mode != FAKE_OVERSPEND && !ts_budget_allows(budget, p->spend))
        return TS_RELEASE_EXHAUSTED;
    out->lat = truth->lat + p->dlat;
    out->lon = truth->lon + p->dlon;
    out->eps_point = p->spend;
    out->has_predicted = 0;
    out->predicted = 0;
    if (p->mode == FAKE_IDENTITY) {
        out->lat = truth->lat;
        out->lon = truth->lon;
    } else if (p->mode == FAKE_BAD_COORDINATE) {
        out->lat = 95.0;
    } else if (p->mode == FAKE_OVERSPEND) {
        out->eps_point = budget->total - budget->spent + p->spend;
    }
    return TS_RELEASE_OK;
}

static const ts_mechanism_ops fake_ops = {
    .name = "fake",
    .profile_new = NULL,     /* profiles are built directly by the tests */
    .profile_free = fake_profile_free,
    .window_budget = fake_window_budget,
    .user_state_size = fake_state_size,
    .release = fake_release,
};

#endif
