/* What the PRIVIC tests share: a Paris grid profile of the privic
 * mechanism, its population interface, and cell middles. */
#ifndef TRACESAN_TESTS_SUPPORT_PRIVIC_FIXTURE_H
#define TRACESAN_TESTS_SUPPORT_PRIVIC_FIXTURE_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mechanisms/mechanism.h"
#include "mechanisms/population.h"
#include "mechanisms/privic.h"
#include "mechanisms/rng.h"
#include "tests/support/fake_params.h"

/* Central Paris, about 11.0 km east-west by 11.1 km north-south. */
#define PARIS "48.80,2.25,48.90,2.40"

static inline const ts_population_ops *pop(void)
{
    ck_assert_ptr_nonnull(ts_privic_ops.population);
    return ts_privic_ops.population;
}

/* 5 x 4 cells of about 2.2 km x 2.8 km, beta 1 per km. */
static inline void paris_params(param_table *t)
{
    param_string(t, "region", PARIS);
    param_int(t, "cols", 5);
    param_int(t, "rows", 4);
}

static inline void *profile_from(param_table *t)
{
    ts_params params = table_params(t);
    void *profile = NULL;
    char err[256];
    ck_assert_msg(ts_privic_ops.profile_new(&params, &profile, err,
                                            sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(profile);
    return profile;
}

/* The middle of a cell in degrees: its centre, since the projection is
 * linear in each coordinate. */
static inline void cell_middle(const void *profile, uint32_t cell,
                               double *lat, double *lon)
{
    double b[4];
    pop()->cell_bounds(profile, cell, b);
    *lat = 0.5 * (b[0] + b[2]);
    *lon = 0.5 * (b[1] + b[3]);
}

static inline ts_release_status release_at(const void *profile, double lat,
                                           double lon, ts_rng *rng,
                                           ts_report *out)
{
    ts_point truth = { .lat = lat, .lon = lon, .ts_ms = 0,
                       .accuracy_m = NAN };
    ts_budget_view budget = { ts_privic_ops.window_budget(profile), 0.0 };
    memset(out, 0, sizeof *out);
    return ts_privic_ops.release(profile, NULL, &truth, &budget, rng, out);
}

static inline const double *current_matrix(const void *profile,
                                           uint32_t *version)
{
    const void *ch = pop()->channel_current(profile, version);
    ck_assert_ptr_nonnull(ch);
    return pop()->channel_matrix(ch);
}

#endif
