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

/* A cell's bounds in degrees {lat_min, lon_min, lat_max, lon_max}. */
void ts_cell_grid_bounds(const ts_cell_grid *grid, uint32_t cell,
                         double bounds[4]);

/* A cell's centre in degrees. */
void ts_cell_grid_centre_latlon(const ts_cell_grid *grid, uint32_t cell,
                                double *lat, double *lon);

#endif
