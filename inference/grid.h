/* The grid of the mobility model: a bounding box cut into square cells of a
 * fixed side in metres of a local planar projection.
 *
 * Projection (equirectangular about the box centre):
 *     x = R * (lon - lon0) * cos(lat0),   y = R * (lat - lat0)
 * with angles in radians, (lat0, lon0) the centre of the box and
 * R = TS_EARTH_RADIUS_M (6371008.8 m, the IUGG mean radius also used by
 * geometry/geo.h). Metres in this plane are what PIM and LM-delta work in.
 *
 * Distortion. North-south distances are exact on the sphere. East-west
 * distances at latitude lat are scaled by cos(lat0) / cos(lat), i.e. off by
 * |cos(lat) / cos(lat0) - 1| ~ tan(lat0) * |lat - lat0| (radians) relative
 * to the sphere; ts_grid_distortion gives the maximum over the box (about
 * 0.26 % at the box edges for the 0.35 degree tall Beijing box at 40 N).
 * Init refuses boxes whose distortion exceeds TS_GRID_MAX_DISTORTION. The
 * projection only decides which points share a cell and where centres lie;
 * the privacy guarantee of the delta-location set is over cells and holds
 * whatever the distortion.
 *
 * Cells. The grid covers the box from its south-west corner: column c spans
 * x in [x_min + c * cell_m, x_min + (c + 1) * cell_m), row r likewise in y;
 * cols = ceil(width / cell_m), rows = ceil(height / cell_m), so the last
 * column and row may extend past the box. Index = row * cols + col
 * (row 0 is the southernmost, column 0 the westernmost). A point belongs to
 * the grid when its latitude and longitude are inside the closed box; points
 * on the east or north edge fall into the last column or row.
 */
#ifndef TRACESAN_INFERENCE_GRID_H
#define TRACESAN_INFERENCE_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "geometry/plane.h"

/* Largest relative east-west scale error a box may have (10 %): beyond it
 * cells stop being squares in any useful sense. */
#define TS_GRID_MAX_DISTORTION 0.1
/* Keeps per-cell arrays (model rows, workspaces) addressable with 32-bit
 * indices and below a few hundred MB. */
#define TS_GRID_MAX_CELLS (1u << 24)

typedef struct ts_grid {
    double lat_min, lon_min, lat_max, lon_max;  /* the box, degrees */
    double cell_m;                              /* side of a cell, metres */
    double lat0, lon0;                          /* projection centre, degrees */
    double cos_lat0;
    double x_min, y_min;                        /* south-west corner, metres */
    uint32_t cols, rows;
    uint32_t cell_count;                        /* cols * rows */
} ts_grid;

/* Validates the box (finite, inside WGS84, lat_min < lat_max,
 * lon_min < lon_max: no antimeridian wrap) and the cell size (positive,
 * finite), and computes the projection and dimensions. -1 with a message
 * in err otherwise, or when the distortion or the cell count exceeds the
 * limits above. */
int ts_grid_init(ts_grid *grid, double lat_min, double lon_min,
                 double lat_max, double lon_max, double cell_m, char *err,
                 size_t errlen);

/* Largest |cos(lat) / cos(lat0) - 1| over the box. */
double ts_grid_distortion(const ts_grid *grid);

/* Degrees to metres of the plane and back. Unprojection of points far
 * outside the box (released noise can land anywhere) clamps the latitude to
 * [-90, 90] and normalises the longitude to [-180, 180); NaN in, NaN out. */
ts_vec2 ts_grid_project(const ts_grid *grid, double lat, double lon);
void ts_grid_unproject(const ts_grid *grid, ts_vec2 xy, double *lat,
                       double *lon);

/* Cell of a point: 0 and *cell set when inside the box, -1 when outside or
 * not finite. */
int ts_grid_cell_of_latlon(const ts_grid *grid, double lat, double lon,
                           uint32_t *cell);
/* Cell of a point of the plane: inside the cell rectangle
 * [x_min, x_min + cols * cell_m) x [y_min, y_min + rows * cell_m), which
 * may extend past the box. */
int ts_grid_cell_of_xy(const ts_grid *grid, ts_vec2 xy, uint32_t *cell);

static inline uint32_t ts_grid_cell_col(const ts_grid *grid, uint32_t cell)
{
    return cell % grid->cols;
}

static inline uint32_t ts_grid_cell_row(const ts_grid *grid, uint32_t cell)
{
    return cell / grid->cols;
}

/* Index of (row, col); the caller keeps them below rows and cols. */
static inline uint32_t ts_grid_cell_index(const ts_grid *grid, uint32_t row,
                                          uint32_t col)
{
    return row * grid->cols + col;
}

/* Centre of a cell in metres of the plane and in degrees (the caller keeps
 * cell < cell_count). */
static inline ts_vec2 ts_grid_cell_centre(const ts_grid *grid, uint32_t cell)
{
    ts_vec2 c = {
        grid->x_min + ((double)(cell % grid->cols) + 0.5) * grid->cell_m,
        grid->y_min + ((double)(cell / grid->cols) + 0.5) * grid->cell_m,
    };
    return c;
}
void ts_grid_cell_centre_latlon(const ts_grid *grid, uint32_t cell,
                                double *lat, double *lon);

/* Centres of n cells, for ts_pim_context_build and ts_lm_delta_sensitivity. */
void ts_grid_cell_centres(const ts_grid *grid, const uint32_t *cells,
                          size_t n, ts_vec2 *out);

#endif
