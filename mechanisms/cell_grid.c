#include "mechanisms/cell_grid.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ts_cell_grid_init(ts_cell_grid *g, const double region[4], double cell_m,
                      long long rows, long long cols, size_t max_cells,
                      char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    int square = cell_m > 0.0;
    if (square == (rows > 0 || cols > 0) ||
        (!square && (rows <= 0 || cols <= 0))) {
        snprintf(err, errlen, "cell_m: set either cell_m, or rows and cols");
        return -1;
    }
    if (!isfinite(region[0])) {
        snprintf(err, errlen, "region: is required");
        return -1;
    }
    memcpy(g->region, region, sizeof g->region);
    char grid_err[256];
    if (ts_grid_init(&g->projection, region[0], region[1], region[2],
                     region[3], square ? cell_m : 1000.0, grid_err,
                     sizeof grid_err) != 0) {
        snprintf(err, errlen, "region: %s", grid_err);
        return -1;
    }
    if (square) {
        g->cols = g->projection.cols;
        g->rows = g->projection.rows;
        g->cell_w = g->cell_h = cell_m;
    } else {
        if (rows > UINT32_MAX || cols > UINT32_MAX) {
            snprintf(err, errlen, "rows: too many cells");
            return -1;
        }
        ts_vec2 ne = ts_grid_project(&g->projection, region[2], region[3]);
        g->cols = (uint32_t)cols;
        g->rows = (uint32_t)rows;
        g->cell_w = (ne.x - g->projection.x_min) / g->cols;
        g->cell_h = (ne.y - g->projection.y_min) / g->rows;
    }
    g->x_max = g->projection.x_min + g->cols * g->cell_w;
    g->y_max = g->projection.y_min + g->rows * g->cell_h;
    g->cells = (size_t)g->rows * g->cols;
    if (g->cells < 2 || g->cells > max_cells) {
        snprintf(err, errlen, "%s: the grid has %zu cells; 2 to %zu are "
                 "allowed", square ? "cell_m" : "rows", g->cells, max_cells);
        return -1;
    }
    g->centres = malloc(g->cells * sizeof *g->centres);
    if (g->centres == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t r = 0; r < g->rows; r++)
        for (uint32_t c = 0; c < g->cols; c++)
            g->centres[(size_t)r * g->cols + c] = (ts_vec2){
                g->projection.x_min + (c + 0.5) * g->cell_w,
                g->projection.y_min + (r + 0.5) * g->cell_h };
    return 0;
}

void ts_cell_grid_free(ts_cell_grid *g)
{
    free(g->centres);
    g->centres = NULL;
}

static uint32_t clamp_index(double offset, double side, uint32_t count)
{
    double i = floor(offset / side);
    if (!(i >= 0.0))
        return 0;
    return i >= (double)count ? count - 1 : (uint32_t)i;
}

int ts_cell_grid_locate(const ts_cell_grid *g, double lat, double lon,
                        int clamp, uint32_t *cell)
{
    if (!isfinite(lat) || !isfinite(lon))
        return -1;
    ts_vec2 xy = ts_grid_project(&g->projection, lat, lon);
    /* The box by degrees too: its corner need not survive the round trip
     * through the projection and cell_w * cols exactly. */
    int inside = (lat >= g->region[0] && lat <= g->region[2] &&
                  lon >= g->region[1] && lon <= g->region[3]) ||
                 (xy.x >= g->projection.x_min && xy.x <= g->x_max &&
                  xy.y >= g->projection.y_min && xy.y <= g->y_max);
    if (!inside && !clamp)
        return -1;
    uint32_t col = clamp_index(xy.x - g->projection.x_min, g->cell_w, g->cols);
    uint32_t row = clamp_index(xy.y - g->projection.y_min, g->cell_h, g->rows);
    *cell = row * g->cols + col;
    return 0;
}

double ts_cell_grid_floor(const ts_cell_grid *g, double eps)
{
    return eps * hypot(g->cell_w, g->cell_h);
}

void ts_cell_grid_bounds(const ts_cell_grid *g, uint32_t cell,
                         double bounds[4])
{
    uint32_t r = cell / g->cols, c = cell % g->cols;
    ts_vec2 sw = { g->projection.x_min + c * g->cell_w,
                   g->projection.y_min + r * g->cell_h };
    ts_vec2 ne = { sw.x + g->cell_w, sw.y + g->cell_h };
    ts_grid_unproject(&g->projection, sw, &bounds[0], &bounds[1]);
    ts_grid_unproject(&g->projection, ne, &bounds[2], &bounds[3]);
}

void ts_cell_grid_centre_latlon(const ts_cell_grid *g, uint32_t cell,
                                double *lat, double *lon)
{
    ts_grid_unproject(&g->projection, g->centres[cell], lat, lon);
}

/* ----------------------------------------------- a profile's density grid */

int ts_grid_density_init(ts_grid_density *d, size_t max_cells, char *err,
                         size_t errlen)
{
    if (d->cycle_reports == 0 && d->cycle_s == 0.0) {
        snprintf(err, errlen, "cycle_reports: set cycle_reports or cycle_s "
                 "(or both) to end a cycle");
        return -1;
    }
    return ts_cell_grid_init(&d->grid, d->region, d->cell_m, d->rows_param,
                             d->cols_param, max_cells, err, errlen);
}

void ts_grid_density_free(ts_grid_density *d)
{
    ts_cell_grid_free(&d->grid);
}

/* The profile's first member, as the header promises. */
static const ts_cell_grid *profile_grid(const void *profile)
{
    return &((const ts_grid_density *)profile)->grid;
}

void ts_grid_density_shape(const void *profile, uint32_t *cols,
                           uint32_t *rows, double *cell_w, double *cell_h)
{
    const ts_cell_grid *g = profile_grid(profile);
    *cols = g->cols;
    *rows = g->rows;
    *cell_w = g->cell_w;
    *cell_h = g->cell_h;
}

void ts_grid_density_cell_bounds(const void *profile, uint32_t cell,
                                 double bounds[4])
{
    ts_cell_grid_bounds(profile_grid(profile), cell, bounds);
}

ts_vec2 ts_grid_density_cell_centre(const void *profile, uint32_t cell)
{
    return profile_grid(profile)->centres[cell];
}

void ts_grid_density_cycle(const void *profile, ts_population_cycle *out)
{
    const ts_grid_density *d = profile;
    out->reports = (uint64_t)d->cycle_reports;
    out->seconds = d->cycle_s;
    out->ibu.precision = d->ibu_precision;
    out->ibu.max_iterations = (unsigned)d->ibu_max_iterations;
    out->ibu.fixed_steps = (unsigned)d->ibu_max_steps;
}
