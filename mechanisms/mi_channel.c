#include "mechanisms/mi_channel.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "inference/channel_file.h"
#include "mechanisms/ba_channel.h"
#include "mechanisms/cell_grid.h"

typedef struct mi_profile {
    int reject_outside;
    long long points_per_window;
    /* the opened file, valid only while profile_new runs */
    const ts_channel_file *channel_param;
    /* derived */
    ts_channel_meta meta;
    ts_cell_grid grid;
    ts_alias_table *rows;        /* one per true cell */
    int geoind;                  /* the file carries a geo-ind epsilon */
    double eps_point;            /* per metre; 0 without geo-ind */
    double eps_floor;            /* nats per report; 0 without geo-ind */
} mi_profile;

/* Per user, only without geo-ind: releases in the current window. The
 * caller zero-fills the block at each new window and persists it with the
 * ledger, so the cap survives restarts exactly like a budget. */
typedef struct mi_user_state {
    uint64_t released;
} mi_user_state;

#define FIELD(name) .offset = offsetof(mi_profile, name)

static const char *const outside_names[] = { "clamp", "reject", NULL };

static const ts_param_spec mi_params[] = {
    { .key = "on_outside", .type = TS_PARAM_CHOICE, FIELD(reject_outside),
      .choices = outside_names, .default_value = "clamp",
      .doc = "a true point outside the channel's grid: released from the "
             "nearest border cell, or rejected as outside_region" },
    { .key = "points_per_window", .type = TS_PARAM_INT,
      FIELD(points_per_window), .min = 1, .max = 1e9,
      .default_value = "30",
      .doc = "reports per budget window: with a geo-ind channel each "
             "books its epsilon per metre plus its eps_floor (epsilon times "
             "the cell diagonal, nats), without one this caps the count" },
    { .key = "channel", .type = TS_PARAM_CHANNEL, FIELD(channel_param),
      .doc = "channel file of `tracesan optimize`; \"\" disables the "
             "profile" },
};
#undef FIELD

/* ---------------------------------------------------------------- profile */

static void mi_profile_free(void *profile)
{
    mi_profile *p = profile;
    if (p == NULL)
        return;
    if (p->rows != NULL)
        for (size_t x = 0; x < p->grid.cells; x++)
            ts_alias_free(&p->rows[x]);
    free(p->rows);
    ts_cell_grid_free(&p->grid);
    free(p);
}

static int mi_profile_new(const ts_params *params, void **profile,
                          char *err, size_t errlen)
{
    *profile = NULL;
    mi_profile *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (ts_mechanism_parse_params(&ts_mi_channel_ops, params, p, err,
                                  errlen) < 0)
        goto fail;
    /* The file is the caller's and closes after this returns: keep a
     * copy of what it says, and alias tables built from its rows. */
    const ts_channel_file *file = p->channel_param;
    p->channel_param = NULL;
    p->meta = file->meta;
    const ts_channel_meta *m = &p->meta;
    int square = m->cell_m > 0.0;
    char why[256];
    if (ts_cell_grid_init(&p->grid, m->region, m->cell_m,
                          square ? 0 : m->rows, square ? 0 : m->cols,
                          TS_CHANNEL_MAX_CELLS, why, sizeof why) != 0) {
        snprintf(err, errlen, "channel: its grid: %s", why);
        goto fail;
    }
    if (p->grid.cells != file->n || p->grid.rows != m->rows ||
        p->grid.cols != m->cols) {
        snprintf(err, errlen, "channel: its grid does not match its "
                 "channel");
        goto fail;
    }
    size_t n = p->grid.cells;
    p->rows = calloc(n, sizeof *p->rows);
    if (p->rows == NULL) {
        snprintf(err, errlen, "channel: out of memory for %zu cells", n);
        goto fail;
    }
    for (size_t x = 0; x < n; x++)
        if (ts_alias_build(&p->rows[x], file->channel + x * n, n) != 0) {
            snprintf(err, errlen, "channel: out of memory for %zu cells",
                     n);
            goto fail;
        }
    p->geoind = m->geoind_epsilon > 0.0;
    /* What the channel measurably satisfies, which the loader holds to
     * the claim: spending the larger of the two never under-counts. */
    p->eps_point = p->geoind ? fmax(m->geoind_epsilon,
                                    file->geoind_measured)
                             : 0.0;
    p->eps_floor = p->geoind ? ts_cell_grid_floor(&p->grid, p->eps_point)
                             : 0.0;
    if (p->geoind && (!isnormal(p->eps_point) || !isfinite(p->eps_floor) ||
                      !isfinite(p->eps_point *
                                (double)p->points_per_window))) {
        snprintf(err, errlen, "channel: its epsilon is not a usable "
                 "per-metre budget");
        goto fail;
    }
    *profile = p;
    return 0;
fail:
    mi_profile_free(p);
    return -1;
}

/* With geo-ind: a budget in epsilon per metre, whose unit is a metre of
 * distance plus cell diagonal: a window that spent S tells two true
 * points d apart by at most e^{S (d + diagonal)}. Without: the ledger only
 * needs a positive total; every report spends 0 and the cap is the
 * per-user counter (docs/mi_channel.md). */
static double mi_window_budget(const void *profile)
{
    const mi_profile *p = profile;
    return p->geoind ? p->eps_point * (double)p->points_per_window
                     : (double)p->points_per_window;
}

static size_t mi_user_state_size(const void *profile)
{
    const mi_profile *p = profile;
    return p->geoind ? 0 : sizeof(mi_user_state);
}

/* The report is the drawn cell's centre: the channel says nothing finer,
 * and a centre keeps the published point a function of the cell alone. */
static ts_release_status mi_release(const void *profile, void *user_state,
                                    const ts_point *truth,
                                    const ts_budget_view *budget,
                                    ts_rng *rng, ts_report *out)
{
    const mi_profile *p = profile;
    mi_user_state state = { 0 };
    if (p->geoind) {
        if (!ts_budget_allows(budget, p->eps_point))
            return TS_RELEASE_EXHAUSTED;
    } else {
        if (user_state == NULL)
            return TS_RELEASE_ERROR;
        memcpy(&state, user_state, sizeof state);
        if (state.released >= (uint64_t)p->points_per_window)
            return TS_RELEASE_EXHAUSTED;
    }
    uint32_t cell;
    if (ts_cell_grid_locate(&p->grid, truth->lat, truth->lon,
                            !p->reject_outside, &cell) != 0)
        return isfinite(truth->lat) && isfinite(truth->lon)
                   ? TS_RELEASE_OUTSIDE_REGION
                   : TS_RELEASE_ERROR;
    uint32_t reported = ts_alias_sample(&p->rows[cell], rng);
    if (reported >= p->grid.cells)
        return TS_RELEASE_ERROR;
    ts_cell_grid_centre_latlon(&p->grid, reported, &out->lat, &out->lon);
    if (!ts_geo_valid(out->lat, out->lon))
        return TS_RELEASE_ERROR;
    out->eps_point = p->eps_point;
    if (p->geoind) {
        out->has_eps_floor = 1;
        out->eps_floor = p->eps_floor;
    } else {
        out->has_information_theoretic = 1;
        out->information_theoretic = 1;
        /* Only the count of published reports: public. */
        state.released++;
        memcpy(user_state, &state, sizeof state);
    }
    return TS_RELEASE_OK;
}

const ts_mechanism_ops ts_mi_channel_ops = {
    .name = "mi-channel",
    .summary = "identity-protecting channel of `tracesan optimize` "
               "(minimal I(U;Z) under a distortion bound), one row drawn "
               "per report; with a geo-ind epsilon, metric privacy between "
               "cell centres plus a constant eps_floor per report on true "
               "points",
    TS_PARAM_ROWS(mi_params),
    .profile_new = mi_profile_new,
    .profile_free = mi_profile_free,
    .window_budget = mi_window_budget,
    .user_state_size = mi_user_state_size,
    .release = mi_release,
};
