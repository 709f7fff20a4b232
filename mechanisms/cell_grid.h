/* A rectangular grid of cells over a region, for the mechanisms whose
 * reports or density estimates are cells (privic; geoind with density).
 * Either square cells of cell_m metres, or rows x cols cells of whatever
 * size splits the region's box evenly (the PRIVIC paper's 24 x 17 grid is
 * not square). Cell index row * cols + col, row 0 the southernmost; the
 * plane is inference/grid.h's projection of the box, so distances between
 * centres are metres. */
#ifndef TRACESAN_MECHANISMS_CELL_GRID_H
#define TRACESAN_MECHANISMS_CELL_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "geometry/plane.h"
#include "inference/grid.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/population.h"

typedef struct ts_cell_grid {
    double region[4];        /* lat_min, lon_min, lat_max, lon_max */
    ts_grid projection;      /* only its plane: the cells are ours */
    double cell_w, cell_h;   /* metres */
    /* The cells' north-east corner on the plane: with cell_m the last row
     * and column may reach past the box, and the grid is what counts. */
    double x_max, y_max;
    uint32_t rows, cols;
    size_t cells;
    ts_vec2 *centres;        /* cells, metres of the plane */
} ts_cell_grid;

/* cell_m > 0 for square cells (rows and cols 0), else rows and cols > 0.
 * Between 2 and max_cells cells. Errors name the profile key at fault
 * ("region: ...", "cell_m: ...", "rows: ..."). */
int ts_cell_grid_init(ts_cell_grid *grid, const double region[4],
                      double cell_m, long long rows, long long cols,
                      size_t max_cells, char *err, size_t errlen);
void ts_cell_grid_free(ts_cell_grid *grid);

/* The cell of a point: 0 with *cell set when it lies in a cell (the box,
 * and with cell_m whatever the last row and column add); outside, the
 * nearest border cell when `clamp`, else -1. -1 for coordinates that are
 * not finite. */
int ts_cell_grid_locate(const ts_cell_grid *grid, double lat, double lon,
                        int clamp, uint32_t *cell);

/* The constant, in nats, that a channel metric-private between cell
 * centres at eps per metre of the plane adds to eps * d per report on
 * continuous locations: eps times the cell diagonal. Each true point lies
 * within half a diagonal of its cell's centre (a point outside the grid is
 * first clamped onto the grid's rectangle, a projection that brings no two
 * points further apart), so two points p, p' have centres at most
 * d(p, p') + diagonal apart, and C(x, y) <= e^{eps d(x, x')} C(x', y)
 * gives e^{eps d(p, p') + eps diagonal}. Two points a metre apart across
 * a corner come within the channel's own slack of it (docs/privic.md). */
double ts_cell_grid_floor(const ts_cell_grid *grid, double eps);

/* A cell's bounds in degrees {lat_min, lon_min, lat_max, lon_max}. */
void ts_cell_grid_bounds(const ts_cell_grid *grid, uint32_t cell,
                         double bounds[4]);

/* A cell's centre in degrees. */
void ts_cell_grid_centre_latlon(const ts_cell_grid *grid, uint32_t cell,
                                double *lat, double *lon);

/* ----------------------------------------------- a profile's density grid
 *
 * What every profile that keeps a density estimate configures (the keys
 * region, cell_m, rows, cols, cycle_reports, cycle_s, ibu_precision,
 * ibu_max_iterations, ibu_max_steps) and derives (the grid). A profile
 * struct whose first member is a ts_grid_density lists
 * TS_GRID_DENSITY_PARAMS among its parameter rows and uses the
 * ts_grid_density_* functions below in its ts_population_ops. */
typedef struct ts_grid_density {
    double region[4];
    double cell_m;
    long long rows_param, cols_param;
    long long cycle_reports;
    double cycle_s;
    double ibu_precision;
    long long ibu_max_iterations;
    long long ibu_max_steps;     /* 0: converge */
    ts_cell_grid grid;       /* derived by ts_grid_density_init */
} ts_grid_density;

#define TS_GRID_DENSITY_FIELD(profile_type, name)                                   \
    .offset = offsetof(profile_type, density) + offsetof(ts_grid_density, name)

#define TS_GRID_DENSITY_PARAMS(profile_type)                                        \
    { .key = "region", .type = TS_PARAM_BOX,                                \
      TS_GRID_DENSITY_FIELD(profile_type, region), .default_value = "\"\"",         \
      .doc = "the grid's box \"LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\", "         \
             "degrees (required)" },                                        \
    { .key = "cell_m", .type = TS_PARAM_NUMBER,                             \
      TS_GRID_DENSITY_FIELD(profile_type, cell_m), .min = 0.0, .max = INFINITY,     \
      .default_value = "0",                                                 \
      .doc = "side of square cells in metres (0: use rows and cols)" },    \
    { .key = "rows", .type = TS_PARAM_INT,                                  \
      TS_GRID_DENSITY_FIELD(profile_type, rows_param), .min = 0, .max = 65535,      \
      .default_value = "0", .doc = "cells north-south when cell_m is 0" },  \
    { .key = "cols", .type = TS_PARAM_INT,                                  \
      TS_GRID_DENSITY_FIELD(profile_type, cols_param), .min = 0, .max = 65535,      \
      .default_value = "0", .doc = "cells east-west when cell_m is 0" },    \
    { .key = "cycle_reports", .type = TS_PARAM_INT,                         \
      TS_GRID_DENSITY_FIELD(profile_type, cycle_reports), .min = 0, .max = 1e12,    \
      .default_value = "1000",                                              \
      .doc = "a cycle ends after this many reports (0: unused)" },          \
    { .key = "cycle_s", .type = TS_PARAM_NUMBER,                            \
      TS_GRID_DENSITY_FIELD(profile_type, cycle_s), .min = 0.0, .max = INFINITY,    \
      .default_value = "0",                                                 \
      .doc = "or after this many seconds of event time (0: unused)" },      \
    { .key = "ibu_precision", .type = TS_PARAM_NUMBER,                      \
      TS_GRID_DENSITY_FIELD(profile_type, ibu_precision), .min = 0.0, .max = 1.0,   \
      .bounds = TS_PARAM_MIN_EXCLUSIVE, .default_value = "1e-6",            \
      .doc = "IBU stops when no estimated probability moves more than "     \
             "this" },                                                      \
    { .key = "ibu_max_iterations", .type = TS_PARAM_INT,                    \
      TS_GRID_DENSITY_FIELD(profile_type, ibu_max_iterations), .min = 1,            \
      .max = 1e7, .default_value = "2000",                                  \
      .doc = "cap on IBU iterations per cycle while converging" },          \
    { .key = "ibu_max_steps", .type = TS_PARAM_INT,                         \
      TS_GRID_DENSITY_FIELD(profile_type, ibu_max_steps), .min = 0,         \
      .max = 1e7, .default_value = "0",                                     \
      .doc = "0: IBU converges each cycle (to ibu_precision); N: exactly "  \
             "N IBU steps per cycle, from the previous estimate" }

/* Checks that a cycle can end and builds the grid (errors name the key). */
int ts_grid_density_init(ts_grid_density *density, size_t max_cells,
                         char *err, size_t errlen);
void ts_grid_density_free(ts_grid_density *density);

/* ts_population_ops members for a profile that starts with a
 * ts_grid_density. */
void ts_grid_density_shape(const void *profile, uint32_t *cols,
                           uint32_t *rows, double *cell_w, double *cell_h);
void ts_grid_density_cell_bounds(const void *profile, uint32_t cell,
                                 double bounds[4]);
ts_vec2 ts_grid_density_cell_centre(const void *profile, uint32_t cell);
void ts_grid_density_cycle(const void *profile, ts_population_cycle *out);

#endif
