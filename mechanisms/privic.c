#include "mechanisms/privic.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "mechanisms/ba_channel.h"
#include "mechanisms/cell_grid.h"
#include "mechanisms/population.h"

/* A channel ready to release through: the matrix (for IBU) and one alias
 * table per true cell (for O(1) draws). */
typedef struct privic_channel {
    size_t n;
    double *matrix;
    ts_alias_table *rows;
} privic_channel;

typedef struct privic_profile {
    ts_grid_density density;     /* first: the population ops read it */
    double beta;
    double unit_m;
    long long points_per_window;
    double ba_precision;
    long long ba_max_iterations;
    long long ba_max_steps;      /* 0: converge */
    int reject_outside;
    /* derived */
    double eps_point;            /* per metre of the grid's plane */
    double eps_floor;            /* nats: eps_point * the cell diagonal */
    privic_channel *first;       /* built from the uniform prior, owned */
    const privic_channel *current;
    uint32_t current_version;
} privic_profile;

#define FIELD(name) .offset = offsetof(privic_profile, name)

static const char *const outside_names[] = { "clamp", "reject", NULL };

static const ts_param_spec privic_params[] = {
    TS_GRID_DENSITY_PARAMS(privic_profile),
    { .key = "beta", .type = TS_PARAM_NUMBER, FIELD(beta), .min = 0.0,
      .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "1.0",
      .doc = "BA loss parameter per unit_m: a report is 2 beta / unit_m "
             "per metre metric-private between cell centres; between true "
             "points it adds eps_floor = that times the cell diagonal, in "
             "nats (not geo-indistinguishable)" },
    { .key = "unit_m", .type = TS_PARAM_NUMBER, FIELD(unit_m), .min = 0.0,
      .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "1000.0",
      .doc = "the distance unit of beta, in metres (1000: per km)" },
    { .key = "points_per_window", .type = TS_PARAM_INT,
      FIELD(points_per_window), .min = 1, .max = 1e9,
      .default_value = "30",
      .doc = "reports one budget window pays for, each booking "
             "eps_point = 2 beta / unit_m per metre plus its eps_floor" },
    { .key = "ba_precision", .type = TS_PARAM_NUMBER, FIELD(ba_precision),
      .min = 0.0, .max = 1.0, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "1e-6",
      .doc = "BA stops when no output probability moves more than this" },
    { .key = "ba_max_iterations", .type = TS_PARAM_INT,
      FIELD(ba_max_iterations), .min = 1, .max = 1e7,
      .default_value = "10000",
      .doc = "cap on BA iterations per channel while converging" },
    { .key = "ba_max_steps", .type = TS_PARAM_INT, FIELD(ba_max_steps),
      .min = 0, .max = 1e7, .default_value = "0",
      .doc = "0: BA converges (to ba_precision, accelerated); N: exactly N "
             "plain BA steps per channel, as the paper runs it (5 on SF)" },
    { .key = "on_outside", .type = TS_PARAM_CHOICE, FIELD(reject_outside),
      .choices = outside_names, .default_value = "clamp",
      .doc = "a true point outside the region: released from the nearest "
             "cell, or rejected as outside_region" },
};

/* Cells are capped so that a channel (matrix and alias tables, about
 * 20 n^2 bytes) and BA's kernel stay below about 130 MB. */
#define PRIVIC_MAX_CELLS 2048u

/* ---------------------------------------------------------- channels */

static void channel_destroy(privic_channel *ch)
{
    if (ch == NULL)
        return;
    if (ch->rows != NULL)
        for (size_t x = 0; x < ch->n; x++)
            ts_alias_free(&ch->rows[x]);
    free(ch->rows);
    free(ch->matrix);
    free(ch);
}

static privic_channel *channel_from_prior(const privic_profile *p,
                                          const double *theta,
                                          ts_channel_build_stats *stats,
                                          char *err, size_t errlen)
{
    size_t n = p->density.grid.cells;
    double *uniform = NULL;
    ts_ba_result result;
    privic_channel *ch = calloc(1, sizeof *ch);
    if (ch == NULL)
        goto oom;
    ch->n = n;
    ch->matrix = malloc(n * n * sizeof *ch->matrix);
    ch->rows = calloc(n, sizeof *ch->rows);
    if (ch->matrix == NULL || ch->rows == NULL)
        goto oom;
    if (theta == NULL) {
        uniform = calloc(n, sizeof *uniform);
        if (uniform == NULL)
            goto oom;
        for (size_t i = 0; i < n; i++)
            uniform[i] = 1.0 / (double)n;
        theta = uniform;
    }
    ts_ba_params ba = {
        .beta = p->beta,
        .unit_m = p->unit_m,
        .precision = p->ba_precision,
        .max_iterations = (unsigned)p->ba_max_iterations,
        .plain_steps = (unsigned)p->ba_max_steps,
    };
    if (ts_ba_channel(p->density.grid.centres, n, theta, &ba, ch->matrix,
                      NULL, &result, err, errlen) != 0)
        goto fail;
    for (size_t x = 0; x < n; x++)
        if (ts_alias_build(&ch->rows[x], ch->matrix + x * n, n) != 0)
            goto oom;
    if (stats != NULL) {
        stats->iterations = result.iterations;
        stats->converged = result.converged;
        stats->last_change = result.last_change;
    }
    free(uniform);
    return ch;
oom:
    snprintf(err, errlen, "out of memory for a %zu-cell channel", n);
fail:
    free(uniform);
    channel_destroy(ch);
    return NULL;
}

/* ----------------------------------------------------------- profile */

static void privic_profile_free(void *profile)
{
    privic_profile *p = profile;
    if (p == NULL)
        return;
    channel_destroy(p->first);
    ts_grid_density_free(&p->density);
    free(p);
}

static int privic_profile_new(const ts_params *params, void **profile,
                              char *err, size_t errlen)
{
    *profile = NULL;
    privic_profile *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (ts_mechanism_parse_params(&ts_privic_ops, params, p, err, errlen) < 0)
        goto fail;
    if (ts_grid_density_init(&p->density, PRIVIC_MAX_CELLS, err, errlen) != 0)
        goto fail;
    p->eps_point = 2.0 * p->beta / p->unit_m;
    p->eps_floor = ts_cell_grid_floor(&p->density.grid, p->eps_point);
    if (!isnormal(p->eps_point) || !isfinite(p->eps_floor) ||
        !isfinite(p->eps_point * (double)p->points_per_window)) {
        snprintf(err, errlen, "beta: 2 beta / unit_m is not a usable "
                 "per-metre budget");
        goto fail;
    }
    p->first = channel_from_prior(p, NULL, NULL, err, errlen);
    if (p->first == NULL) {
        /* ba_channel's messages are about beta and the grid's width */
        char why[256];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "beta: %s", why);
        goto fail;
    }
    p->current = p->first;
    p->current_version = 1;
    *profile = p;
    return 0;
fail:
    privic_profile_free(p);
    return -1;
}

static double privic_window_budget(const void *profile)
{
    const privic_profile *p = profile;
    return p->eps_point * (double)p->points_per_window;
}

static size_t privic_user_state_size(const void *profile)
{
    (void)profile;
    return 0;
}

/* The report is the centre of the drawn cell: the cell is all the channel
 * says, and a centre keeps the published point a function of the cell
 * alone, so anyone reading the feed recovers the exact report (IBU needs
 * it) and no precision is suggested that the channel did not give. */
static ts_release_status privic_release(const void *profile, void *user_state,
                                        const ts_point *truth,
                                        const ts_budget_view *budget,
                                        ts_rng *rng, ts_report *out)
{
    const privic_profile *p = profile;
    (void)user_state;
    if (!ts_budget_allows(budget, p->eps_point))
        return TS_RELEASE_EXHAUSTED;
    uint32_t cell;
    if (ts_cell_grid_locate(&p->density.grid, truth->lat, truth->lon,
                            !p->reject_outside, &cell) != 0)
        return isfinite(truth->lat) && isfinite(truth->lon)
                   ? TS_RELEASE_OUTSIDE_REGION
                   : TS_RELEASE_ERROR;
    const privic_channel *ch = p->current;
    if (ch == NULL || ch->n != p->density.grid.cells)
        return TS_RELEASE_ERROR;
    uint32_t reported = ts_alias_sample(&ch->rows[cell], rng);
    if (reported >= p->density.grid.cells)
        return TS_RELEASE_ERROR;
    ts_cell_grid_centre_latlon(&p->density.grid, reported, &out->lat,
                               &out->lon);
    if (!ts_geo_valid(out->lat, out->lon))
        return TS_RELEASE_ERROR;
    out->eps_point = p->eps_point;
    out->has_eps_floor = 1;
    out->eps_floor = p->eps_floor;
    out->has_channel_version = 1;
    out->channel_version = p->current_version;
    return TS_RELEASE_OK;
}

/* --------------------------------------------------- population ops */

static size_t pop_cells(const void *profile)
{
    return ((const privic_profile *)profile)->density.grid.cells;
}

/* A published point is a cell centre, and with cell_m the last column
 * and row reach past the region's box (ts_grid's cols = ceil(width /
 * cell_m)), so their centres may lie outside it: what belongs to the grid
 * is the cells' rectangle, not the box. */
static int pop_cell_of(const void *profile, double lat, double lon,
                       uint32_t *cell)
{
    const privic_profile *p = profile;
    return ts_cell_grid_locate(&p->density.grid, lat, lon, 0, cell);
}

static void *pop_channel_build(const void *profile, const double *theta,
                               ts_channel_build_stats *stats, char *err,
                               size_t errlen)
{
    return channel_from_prior(profile, theta, stats, err, errlen);
}

static void pop_channel_free(void *channel)
{
    channel_destroy(channel);
}

static const double *pop_channel_matrix(const void *channel)
{
    return ((const privic_channel *)channel)->matrix;
}

static void pop_channel_install(void *profile, const void *channel,
                                uint32_t version)
{
    privic_profile *p = profile;
    p->current = channel != NULL ? channel : p->first;
    p->current_version = version;
}

static const void *pop_channel_current(const void *profile,
                                       uint32_t *version)
{
    const privic_profile *p = profile;
    if (version != NULL)
        *version = p->current_version;
    return p->current;
}

static const ts_population_ops privic_population = {
    .adaptive = 1,
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

const ts_mechanism_ops ts_privic_ops = {
    .name = "privic",
    .summary = "PRIVIC: Blahut-Arimoto elastic channel on a grid, re-fitted "
               "each cycle to the IBU estimate of the published reports; "
               "2 beta metric privacy between cell centres, plus a constant "
               "eps_floor per report on true points",
    TS_PARAM_ROWS(privic_params),
    .profile_new = privic_profile_new,
    .profile_free = privic_profile_free,
    .window_budget = privic_window_budget,
    .user_state_size = privic_user_state_size,
    .release = privic_release,
    .population = &privic_population,
};
