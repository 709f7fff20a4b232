#include "mechanisms/geoind.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "mechanisms/cell_grid.h"
#include "mechanisms/laplace_channel.h"
#include "mechanisms/planar_laplace.h"
#include "mechanisms/population.h"

typedef struct geoind_profile {
    /* With keeps_density: the daemon keeps an IBU estimate of where the
     * profile's users are, from its published points binned on this grid.
     * First: the population ops read it. */
    ts_grid_density density;
    double radius_m;
    double level;
    long long points_per_window;
    int keeps_density;      /* the key `density` */
    /* derived */
    double window_budget;   /* eps per metre for the whole window */
    double eps_point;       /* eps per metre spent by each released point */
    double *channel;        /* density only: the binned Laplace channel */
} geoind_profile;

#define FIELD(name) .offset = offsetof(geoind_profile, name)

/* The binned channel is n x n doubles: 2048 cells is 32 MB. */
#define GEOIND_DENSITY_MAX_CELLS 2048u

static const ts_param_spec geoind_params[] = {
    { .key = "radius_m", .type = TS_PARAM_NUMBER,
      .offset = offsetof(geoind_profile, radius_m), .min = 0.0,
      .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "100.0", .doc = "protection radius r, in metres" },
    /* ln 10: the paper's r* = 100 m, eps* = ln 10 */
    { .key = "level", .type = TS_PARAM_NUMBER,
      .offset = offsetof(geoind_profile, level), .min = 0.0,
      .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "2.302585092994046",
      .doc = "privacy level l; the window budget is eps = l / r per metre" },
    { .key = "points_per_window", .type = TS_PARAM_INT,
      .offset = offsetof(geoind_profile, points_per_window), .min = 1,
      .max = 1e9, .default_value = "30",
      .doc = "each released point spends eps / points_per_window" },
    { .key = "density", .type = TS_PARAM_SWITCH, FIELD(keeps_density),
      .default_value = "false",
      .doc = "keep an IBU estimate of the users' distribution on a grid "
             "(density.<profile>, GET /density/<profile>)" },
    TS_GRID_DENSITY_PARAMS(geoind_profile),
};

static void geoind_profile_free(void *profile)
{
    geoind_profile *p = profile;
    if (p == NULL)
        return;
    ts_grid_density_free(&p->density);
    free(p->channel);
    free(p);
}

/* The density grid and the channel IBU inverts: P(report in cell y | user
 * at the centre of cell x), with the points noise carries beyond the grid
 * counted in the nearest border cell, as the estimate's reports are. */
static int density_setup(geoind_profile *p, char *err, size_t errlen)
{
    if (ts_grid_density_init(&p->density, GEOIND_DENSITY_MAX_CELLS, err,
                             errlen) != 0)
        return -1;
    const ts_cell_grid *grid = &p->density.grid;
    size_t n = grid->cells;
    p->channel = malloc(n * n * sizeof *p->channel);
    if (p->channel == NULL) {
        snprintf(err, errlen, "out of memory for a %zu-cell channel", n);
        return -1;
    }
    char why[256];
    if (ts_laplace_grid_channel(p->eps_point, grid->cols, grid->rows,
                                grid->cell_w, grid->cell_h, p->channel, why,
                                sizeof why) != 0) {
        snprintf(err, errlen, "density: %s", why);
        return -1;
    }
    return 0;
}

static int geoind_profile_new(const ts_params *params, void **profile,
                              char *err, size_t errlen)
{
    *profile = NULL;
    geoind_profile p;
    memset(&p, 0, sizeof p);
    if (ts_mechanism_parse_params(&ts_geoind_ops, params, &p, err,
                                  errlen) < 0)
        return -1;

    /* Extreme but individually valid values (radius_m = 1e-320, ...) can
     * still overflow or underflow the derived budgets. */
    p.window_budget = p.level / p.radius_m;
    p.eps_point = p.window_budget / (double)p.points_per_window;
    if (!isfinite(p.window_budget) || !(p.eps_point > 0.0) ||
        !isnormal(p.eps_point)) {
        snprintf(err, errlen,
                 "radius_m: level / radius_m / points_per_window is not a "
                 "usable per-metre budget");
        return -1;
    }

    if (!ts_planar_laplace_fits_sphere(p.eps_point)) {
        snprintf(err, errlen,
                 "radius_m: noise with mean %.0f km reaches too far around "
                 "the Earth (at most %.0f km; docs/geoind.md)",
                 2.0 / p.eps_point / 1000.0,
                 2.0 / ts_planar_laplace_min_sphere_eps() / 1000.0);
        return -1;
    }

    geoind_profile *copy = malloc(sizeof *copy);
    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *copy = p;
    if (copy->keeps_density && density_setup(copy, err, errlen) != 0) {
        geoind_profile_free(copy);
        return -1;
    }
    *profile = copy;
    return 0;
}

static double geoind_window_budget(const void *profile)
{
    return ((const geoind_profile *)profile)->window_budget;
}

static size_t geoind_user_state_size(const void *profile)
{
    (void)profile;
    return 0;
}

static ts_release_status geoind_release(const void *profile, void *user_state,
                                        const ts_point *truth,
                                        const ts_budget_view *budget,
                                        ts_rng *rng, ts_report *out)
{
    const geoind_profile *p = profile;
    (void)user_state;

    if (!ts_budget_allows(budget, p->eps_point))
        return TS_RELEASE_EXHAUSTED;
    if (!ts_geo_valid(truth->lat, truth->lon))
        return TS_RELEASE_ERROR;

    double radius_m, angle;
    ts_planar_laplace_sample(rng, p->eps_point, &radius_m, &angle);
    if (!isfinite(radius_m) || !isfinite(angle))
        return TS_RELEASE_ERROR;

    /* The noise angle is used as the bearing: both are uniform on the
     * circle, so the orientation convention does not matter. */
    double lat, lon;
    ts_geo_destination(truth->lat, truth->lon, radius_m, angle, &lat, &lon);
    ts_geo_snap(&lat, &lon);
    if (!ts_geo_valid(lat, lon))
        return TS_RELEASE_ERROR;

    out->lat = lat;
    out->lon = lon;
    out->eps_point = p->eps_point;
    out->has_predicted = 0;
    out->predicted = 0;
    return TS_RELEASE_OK;
}

/* --------------------------------------------------- population ops
 *
 * With density = true the daemon's population loop counts the published
 * points' cells and inverts the fixed channel above with IBU each cycle;
 * the mechanism itself does not change (not adaptive, version 1). */

static size_t pop_cells(const void *profile)
{
    const geoind_profile *p = profile;
    return p->keeps_density ? p->density.grid.cells : 0;
}

/* Published points beyond the grid count in the nearest border cell,
 * which is where the channel puts their mass. */
static int pop_cell_of(const void *profile, double lat, double lon,
                       uint32_t *cell)
{
    const geoind_profile *p = profile;
    return ts_cell_grid_locate(&p->density.grid, lat, lon, 1, cell);
}

static void *pop_channel_build(const void *profile, const double *theta,
                               ts_channel_build_stats *stats, char *err,
                               size_t errlen)
{
    (void)profile;
    (void)theta;
    (void)stats;
    snprintf(err, errlen, "geoind's channel is fixed");
    return NULL;
}

static void pop_channel_free(void *channel)
{
    (void)channel;
}

static const double *pop_channel_matrix(const void *channel)
{
    return channel;
}

static void pop_channel_install(void *profile, const void *channel,
                                uint32_t version)
{
    (void)profile;
    (void)channel;
    (void)version;
}

static const void *pop_channel_current(const void *profile,
                                       uint32_t *version)
{
    if (version != NULL)
        *version = 1;
    return ((const geoind_profile *)profile)->channel;
}

static const ts_population_ops geoind_population = {
    .adaptive = 0,
    .cells = pop_cells,
    .grid_shape = ts_grid_density_shape,
    .cell_of = pop_cell_of,
    .cell_bounds = ts_grid_density_cell_bounds,
    .cell_centre = ts_grid_density_cell_centre,
    .cycle = ts_grid_density_cycle,
    .channel_build = pop_channel_build,
    .channel_free = pop_channel_free,
    .channel_matrix = pop_channel_matrix,
    .channel_install = pop_channel_install,
    .channel_current = pop_channel_current,
};

const ts_mechanism_ops ts_geoind_ops = {
    .name = "geoind",
    .summary = "independent planar Laplace (geo-indistinguishability)",
    TS_PARAM_ROWS(geoind_params),
    .profile_new = geoind_profile_new,
    .profile_free = geoind_profile_free,
    .window_budget = geoind_window_budget,
    .user_state_size = geoind_user_state_size,
    .release = geoind_release,
    .population = &geoind_population,
};
