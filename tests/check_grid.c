/* Unit tests for inference/grid.c: dimensions, the projection and its
 * distortion bound, cell <-> coordinate round trips, edge cells and
 * invalid regions. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "inference/grid.h"
#include "geometry/geo.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/small_grid.h"

/* The GeoLife box of ../shared/data/README.md with the paper's cells. */
#define BJ_LAT_MIN 39.75
#define BJ_LON_MIN 116.15
#define BJ_LAT_MAX 40.10
#define BJ_LON_MAX 116.60
#define BJ_CELL 340.0

static ts_grid beijing(void)
{
    ts_grid g;
    char err[200];
    ck_assert_int_eq(ts_grid_init(&g, BJ_LAT_MIN, BJ_LON_MIN, BJ_LAT_MAX,
                                  BJ_LON_MAX, BJ_CELL, err, sizeof err),
                     0);
    return g;
}

TS_TEST(test_dimensions)
{
    ts_grid g = beijing();
    /* height = R * 0.35 deg * pi/180 = 6371008.8 * 0.00610865 = 38918.3 m
     *   -> 38918.3 / 340 = 114.47 -> 115 rows;
     * width = R * 0.45 deg * pi/180 * cos(39.925 deg)
     *       = 50037.8 * 0.766887 = 38373.2 m -> 112.86 -> 113 columns. */
    ck_assert_uint_eq(g.rows, 115);
    ck_assert_uint_eq(g.cols, 113);
    ck_assert_uint_eq(g.cell_count, 115 * 113);
    ck_assert_double_eq_tol(g.x_min, -0.5 * 38373.237, 0.01);
    ck_assert_double_eq_tol(g.y_min, -0.5 * 38918.278, 0.01);
    /* cos(39.75) / cos(39.925) - 1 = 0.0025607 (the south edge is the
     * worse one); tan(39.925 deg) * 0.175 deg in radians = 0.002556 is the
     * first-order estimate quoted in the header. */
    ck_assert_double_eq_tol(ts_grid_distortion(&g), 0.0025607388, 1e-9);
}
END_TEST

TS_TEST(test_projection_distances)
{
    ts_grid g = beijing();
    /* North-south distances are exact on the sphere. */
    ts_vec2 a = ts_grid_project(&g, 39.8, 116.3);
    ts_vec2 b = ts_grid_project(&g, 40.05, 116.3);
    double d_sphere = ts_geo_distance_m(39.8, 116.3, 40.05, 116.3);
    ck_assert_double_eq_tol(hypot(b.x - a.x, b.y - a.y), d_sphere,
                            1e-6 * d_sphere);
    /* East-west distances along the edges are off by at most the
     * distortion (plus the haversine's chord-vs-parallel difference, far
     * below 1e-6 relative over 38 km). */
    double dist = ts_grid_distortion(&g);
    const double lats[] = {BJ_LAT_MIN, 39.925, BJ_LAT_MAX};
    for (size_t i = 0; i < 3; i++) {
        ts_vec2 w = ts_grid_project(&g, lats[i], BJ_LON_MIN);
        ts_vec2 e = ts_grid_project(&g, lats[i], BJ_LON_MAX);
        double plane = hypot(e.x - w.x, e.y - w.y);
        double sphere = ts_geo_distance_m(lats[i], BJ_LON_MIN, lats[i],
                                          BJ_LON_MAX);
        ck_assert_double_le(fabs(plane / sphere - 1.0), dist + 1e-5);
    }
    /* The centre of the box is the origin. */
    ts_vec2 o = ts_grid_project(&g, g.lat0, g.lon0);
    ck_assert_double_eq_tol(o.x, 0.0, 1e-9);
    ck_assert_double_eq_tol(o.y, 0.0, 1e-9);
}
END_TEST

TS_TEST(test_project_round_trip)
{
    ts_grid g = beijing();
    ts_rng *rng = ts_rng_new_seeded(11);
    for (int i = 0; i < 10000; i++) {
        double lat = BJ_LAT_MIN + ts_rng_uniform_open(rng) * 0.35;
        double lon = BJ_LON_MIN + ts_rng_uniform_open(rng) * 0.45;
        double lat2, lon2;
        ts_grid_unproject(&g, ts_grid_project(&g, lat, lon), &lat2, &lon2);
        ck_assert_double_eq_tol(lat2, lat, 1e-11);
        ck_assert_double_eq_tol(lon2, lon, 1e-11);
    }
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_cell_round_trips)
{
    ts_grid g = beijing();
    uint32_t inside = 0;
    for (uint32_t c = 0; c < g.cell_count; c++) {
        uint32_t row = ts_grid_cell_row(&g, c), col = ts_grid_cell_col(&g, c);
        ck_assert_uint_eq(ts_grid_cell_index(&g, row, col), c);
        ts_vec2 xy = ts_grid_cell_centre(&g, c);
        uint32_t back = UINT32_MAX;
        ck_assert_int_eq(ts_grid_cell_of_xy(&g, xy, &back), 0);
        ck_assert_uint_eq(back, c);
        double lat, lon;
        ts_grid_cell_centre_latlon(&g, c, &lat, &lon);
        /* The last row and column extend past the box: their centres may
         * lie outside it and then belong to no cell. */
        if (lat <= BJ_LAT_MAX && lon <= BJ_LON_MAX) {
            ck_assert_int_eq(ts_grid_cell_of_latlon(&g, lat, lon, &back), 0);
            ck_assert_uint_eq(back, c);
            inside++;
        } else {
            ck_assert(row == g.rows - 1 || col == g.cols - 1);
            ck_assert_int_eq(ts_grid_cell_of_latlon(&g, lat, lon, &back), -1);
        }
    }
    /* 112.86 columns and 114.47 rows: the last column's centre (at 112.5)
     * is inside, the last row's (at 114.5) is not. */
    ck_assert_uint_eq(inside, 114 * 113);
    /* Cell of a point: every corner of a cell's square maps to the cell
     * (moved 1 mm inwards). */
    const uint32_t probe[] = {0, 1, 113, 5000, 12000};
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++) {
        ts_vec2 c = ts_grid_cell_centre(&g, probe[i]);
        for (int sx = -1; sx <= 1; sx += 2)
            for (int sy = -1; sy <= 1; sy += 2) {
                ts_vec2 p = {c.x + sx * (BJ_CELL / 2 - 0.001),
                              c.y + sy * (BJ_CELL / 2 - 0.001)};
                double lat, lon;
                uint32_t back;
                ts_grid_unproject(&g, p, &lat, &lon);
                ck_assert_int_eq(ts_grid_cell_of_latlon(&g, lat, lon, &back),
                                 0);
                ck_assert_uint_eq(back, probe[i]);
            }
    }
}
END_TEST

TS_TEST(test_edges)
{
    ts_grid g = beijing();
    uint32_t c;
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, BJ_LAT_MIN, BJ_LON_MIN, &c), 0);
    ck_assert_uint_eq(c, 0);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, BJ_LAT_MIN, BJ_LON_MAX, &c), 0);
    ck_assert_uint_eq(c, g.cols - 1);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, BJ_LAT_MAX, BJ_LON_MIN, &c), 0);
    ck_assert_uint_eq(c, (g.rows - 1) * g.cols);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, BJ_LAT_MAX, BJ_LON_MAX, &c), 0);
    ck_assert_uint_eq(c, g.cell_count - 1);
    /* Just outside each side, and non-finite input. */
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, BJ_LAT_MIN - 1e-9, 116.3, &c), -1);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, BJ_LAT_MAX + 1e-9, 116.3, &c), -1);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, 39.9, BJ_LON_MIN - 1e-9, &c), -1);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, 39.9, BJ_LON_MAX + 1e-9, &c), -1);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, NAN, 116.3, &c), -1);
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, 39.9, INFINITY, &c), -1);
    ck_assert_int_eq(ts_grid_cell_of_xy(&g, (ts_vec2){g.x_min - 1e-6, 0}, &c), -1);
    ck_assert_int_eq(
        ts_grid_cell_of_xy(&g, (ts_vec2){g.x_min + g.cols * BJ_CELL, 0}, &c),
        -1);
    ck_assert_int_eq(ts_grid_cell_of_xy(&g, (ts_vec2){NAN, 0}, &c), -1);
    /* Unprojecting far-away noise stays valid WGS84. */
    double lat, lon;
    ts_grid_unproject(&g, (ts_vec2){3e7, 3e7}, &lat, &lon);
    ck_assert(ts_geo_valid(lat, lon));
    ck_assert_double_eq(lat, 90.0);
    ts_grid_unproject(&g, (ts_vec2){-3e7, -3e7}, &lat, &lon);
    ck_assert(ts_geo_valid(lat, lon));
    ck_assert_double_eq(lat, -90.0);
}
END_TEST

TS_TEST(test_small_grid)
{
    /* 3 x 3 cells whose last row and column overhang (its assertions). */
    ts_grid g = ts_test_small_grid();
    char err[200];
    /* Exact-multiple box: R * d * pi/180 = 200 m exactly (up to rounding)
     * must not produce a third column that rounding could create. */
    double deg = 200.0 / (TS_EARTH_RADIUS_M * M_PI / 180.0);
    ck_assert_int_eq(ts_grid_init(&g, 0.0, 0.0, deg, deg, 100.0, err,
                                  sizeof err),
                     0);
    ck_assert_uint_le(g.cols, 3);
    ck_assert_uint_ge(g.cols, 2);
    uint32_t c;
    ck_assert_int_eq(ts_grid_cell_of_latlon(&g, deg, deg, &c), 0);
    ck_assert_uint_eq(c, g.cell_count - 1);
}
END_TEST

TS_TEST(test_invalid)
{
    ts_grid g;
    char err[200];
    ck_assert_int_eq(ts_grid_init(&g, 40.1, 116.1, 39.9, 116.6, 340, err, sizeof err), -1);
    ck_assert_int_eq(ts_grid_init(&g, 39.9, 116.6, 40.1, 116.1, 340, err, sizeof err), -1);
    ck_assert_int_eq(ts_grid_init(&g, 39.9, 116.1, 40.1, 116.6, 0, err, sizeof err), -1);
    ck_assert_int_eq(ts_grid_init(&g, 39.9, 116.1, 40.1, 116.6, -5, err, sizeof err), -1);
    ck_assert_int_eq(ts_grid_init(&g, 39.9, 116.1, 40.1, 116.6, NAN, err, sizeof err), -1);
    ck_assert_int_eq(ts_grid_init(&g, NAN, 116.1, 40.1, 116.6, 340, err, sizeof err), -1);
    ck_assert_int_eq(ts_grid_init(&g, 39.9, 116.1, 91.0, 116.6, 340, err, sizeof err), -1);
    /* Too tall: 0 to 60 N has cos(60)/cos(30) - 1 = -42 %. */
    ck_assert_int_eq(ts_grid_init(&g, 0.0, 0.0, 60.0, 1.0, 1000, err, sizeof err), -1);
    /* Too many cells: 1 m cells over 38 km x 38 km. */
    ck_assert_int_eq(ts_grid_init(&g, BJ_LAT_MIN, BJ_LON_MIN, BJ_LAT_MAX,
                                  BJ_LON_MAX, 1.0, err, sizeof err),
                     -1);
}
END_TEST

int main(void)
{
    return ts_check_main("grid", 60, NULL, NULL);
}
