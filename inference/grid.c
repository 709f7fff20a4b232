#include "inference/grid.h"
#include "inference/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "geometry/geo.h"

#define DEG_TO_RAD (M_PI / 180.0)

/* cos is decreasing in |lat|, so the extremes of cos(lat) / cos(lat0) over
 * [lat_min, lat_max] are at the edges, or at 0 when the box spans the
 * equator. */
static double distortion_of(double lat_min, double lat_max, double cos_lat0)
{
    double lo = fmin(cos(lat_min * DEG_TO_RAD), cos(lat_max * DEG_TO_RAD));
    double hi = (lat_min <= 0.0 && lat_max >= 0.0)
                    ? 1.0
                    : fmax(cos(lat_min * DEG_TO_RAD), cos(lat_max * DEG_TO_RAD));
    return fmax(fabs(lo / cos_lat0 - 1.0), fabs(hi / cos_lat0 - 1.0));
}

int ts_grid_init(ts_grid *grid, double lat_min, double lon_min,
                 double lat_max, double lon_max, double cell_m, char *err,
                 size_t errlen)
{
    if (!ts_geo_valid(lat_min, lon_min) || !ts_geo_valid(lat_max, lon_max))
        return ts_fail(err, errlen,
                    "region corners must be finite WGS84 coordinates");
    if (!(lat_min < lat_max) || !(lon_min < lon_max))
        return ts_fail(err, errlen,
                    "region must have lat_min < lat_max and lon_min < lon_max "
                    "(boxes across the antimeridian are not supported)");
    if (!isfinite(cell_m) || !(cell_m > 0.0))
        return ts_fail(err, errlen, "cell size must be positive and finite");

    ts_grid g;
    memset(&g, 0, sizeof g);
    g.lat_min = lat_min;
    g.lon_min = lon_min;
    g.lat_max = lat_max;
    g.lon_max = lon_max;
    g.cell_m = cell_m;
    g.lat0 = 0.5 * (lat_min + lat_max);
    g.lon0 = 0.5 * (lon_min + lon_max);
    g.cos_lat0 = cos(g.lat0 * DEG_TO_RAD);
    if (!(g.cos_lat0 > 1e-6))
        return ts_fail(err, errlen, "region is centred on a pole");
    if (distortion_of(lat_min, lat_max, g.cos_lat0) > TS_GRID_MAX_DISTORTION) {
        char message[160];
        snprintf(message, sizeof message,
                 "region is too tall for its projection: east-west scale "
                 "error would exceed %.0f %%",
                 100.0 * TS_GRID_MAX_DISTORTION);
        return ts_fail(err, errlen, "%s", message);
    }
    ts_vec2 sw = ts_grid_project(&g, lat_min, lon_min);
    ts_vec2 ne = ts_grid_project(&g, lat_max, lon_max);
    g.x_min = sw.x;
    g.y_min = sw.y;
    double cols = ceil((ne.x - sw.x) / cell_m);
    double rows = ceil((ne.y - sw.y) / cell_m);
    if (!(cols >= 1.0) || !(rows >= 1.0) ||
        cols * rows > (double)TS_GRID_MAX_CELLS) {
        char message[160];
        snprintf(message, sizeof message,
                 "region and cell size give %.0f x %.0f cells; at most %u "
                 "cells are supported",
                 cols, rows, TS_GRID_MAX_CELLS);
        return ts_fail(err, errlen, "%s", message);
    }
    g.cols = (uint32_t)cols;
    g.rows = (uint32_t)rows;
    g.cell_count = g.cols * g.rows;
    *grid = g;
    return 0;
}

double ts_grid_distortion(const ts_grid *grid)
{
    return distortion_of(grid->lat_min, grid->lat_max, grid->cos_lat0);
}

ts_vec2 ts_grid_project(const ts_grid *grid, double lat, double lon)
{
    ts_vec2 xy = {
        TS_EARTH_RADIUS_M * (lon - grid->lon0) * DEG_TO_RAD * grid->cos_lat0,
        TS_EARTH_RADIUS_M * (lat - grid->lat0) * DEG_TO_RAD,
    };
    return xy;
}

void ts_grid_unproject(const ts_grid *grid, ts_vec2 xy, double *lat,
                       double *lon)
{
    double la = grid->lat0 + xy.y / (TS_EARTH_RADIUS_M * DEG_TO_RAD);
    double lo = grid->lon0 +
                xy.x / (TS_EARTH_RADIUS_M * DEG_TO_RAD * grid->cos_lat0);
    if (isfinite(la))
        la = fmin(90.0, fmax(-90.0, la));
    if (isfinite(lo))
        lo = ts_geo_normalize_lon(lo);
    *lat = la;
    *lon = lo;
}

/* Floor of the offset in cells, clamped into [0, count - 1] so that points
 * on the far edge and rounding just past it stay in the last cell. */
static uint32_t cell_offset(double offset_m, double cell_m, uint32_t count)
{
    double k = floor(offset_m / cell_m);
    if (k < 0.0)
        return 0;
    if (k >= (double)count)
        return count - 1;
    return (uint32_t)k;
}

int ts_grid_cell_of_latlon(const ts_grid *grid, double lat, double lon,
                           uint32_t *cell)
{
    if (!(lat >= grid->lat_min && lat <= grid->lat_max &&
          lon >= grid->lon_min && lon <= grid->lon_max))
        return -1;
    ts_vec2 xy = ts_grid_project(grid, lat, lon);
    uint32_t col = cell_offset(xy.x - grid->x_min, grid->cell_m, grid->cols);
    uint32_t row = cell_offset(xy.y - grid->y_min, grid->cell_m, grid->rows);
    *cell = row * grid->cols + col;
    return 0;
}

int ts_grid_cell_of_xy(const ts_grid *grid, ts_vec2 xy, uint32_t *cell)
{
    double fx = (xy.x - grid->x_min) / grid->cell_m;
    double fy = (xy.y - grid->y_min) / grid->cell_m;
    if (!(fx >= 0.0 && fx < (double)grid->cols && fy >= 0.0 &&
          fy < (double)grid->rows))
        return -1;
    uint32_t col = (uint32_t)fx;
    uint32_t row = (uint32_t)fy;
    *cell = row * grid->cols + col;
    return 0;
}

void ts_grid_cell_centre_latlon(const ts_grid *grid, uint32_t cell,
                                double *lat, double *lon)
{
    ts_grid_unproject(grid, ts_grid_cell_centre(grid, cell), lat, lon);
}

void ts_grid_cell_centres(const ts_grid *grid, const uint32_t *cells,
                          size_t n, ts_vec2 *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ts_grid_cell_centre(grid, cells[i]);
}
