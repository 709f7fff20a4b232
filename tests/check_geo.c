/* Unit tests for geometry/geo.c: great-circle displacement on the
 * TS_EARTH_RADIUS_M sphere, haversine distance, WGS84 validity.
 *
 * Random inputs come from a seeded ts_rng, so every run checks the same
 * points. Loops count violations and assert once (Check writes a record per
 * passing assertion).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "geometry/geo.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"

#define DEG (M_PI / 180.0)

static double uniform_in(ts_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * ts_rng_uniform_open(rng);
}

/* Initial great-circle bearing from point 1 to point 2, radians in
 * (-pi, pi], from the textbook formula (independent of geo.c's vectors). */
static double initial_bearing(double lat1, double lon1, double lat2, double lon2)
{
    double p1 = lat1 * DEG, p2 = lat2 * DEG, dl = (lon2 - lon1) * DEG;
    return atan2(sin(dl) * cos(p2), cos(p1) * sin(p2) - sin(p1) * cos(p2) * cos(dl));
}

static double angle_diff(double a, double b)
{
    double d = fmod(a - b, 2.0 * M_PI);
    if (d > M_PI)
        d -= 2.0 * M_PI;
    else if (d < -M_PI)
        d += 2.0 * M_PI;
    return fabs(d);
}

/* A random start (|lat| <= max_lat), a distance log-uniform in
 * [r_min, r_max] metres and a bearing. */
typedef struct geo_step {
    double lat, lon, r, bearing;
} geo_step;

static geo_step random_step(ts_rng *rng, double max_lat, double r_min,
                            double r_max)
{
    geo_step s;
    s.lat = uniform_in(rng, -max_lat, max_lat);
    s.lon = uniform_in(rng, -180.0, 180.0);
    s.r = exp(uniform_in(rng, log(r_min), log(r_max)));
    s.bearing = ts_rng_angle(rng);
    return s;
}

static int valid_output(double lat, double lon)
{
    return ts_geo_valid(lat, lon) && lon < 180.0;
}

TS_TEST(test_valid)
{
    ck_assert(ts_geo_valid(0.0, 0.0));
    ck_assert(ts_geo_valid(90.0, 180.0));
    ck_assert(ts_geo_valid(-90.0, -180.0));
    ck_assert(!ts_geo_valid(90.000001, 0.0));
    ck_assert(!ts_geo_valid(-90.000001, 0.0));
    ck_assert(!ts_geo_valid(0.0, 180.000001));
    ck_assert(!ts_geo_valid(0.0, -180.000001));
    ck_assert(!ts_geo_valid(NAN, 0.0));
    ck_assert(!ts_geo_valid(0.0, NAN));
    ck_assert(!ts_geo_valid(INFINITY, 0.0));
    ck_assert(!ts_geo_valid(0.0, -INFINITY));
}
END_TEST

TS_TEST(test_normalize_lon)
{
    ck_assert(ts_geo_normalize_lon(180.0) == -180.0);
    ck_assert(ts_geo_normalize_lon(-180.0) == -180.0);
    ck_assert(ts_geo_normalize_lon(540.0) == -180.0);
    ck_assert(ts_geo_normalize_lon(-540.0) == -180.0);
    ck_assert(ts_geo_normalize_lon(190.0) == -170.0);
    ck_assert(ts_geo_normalize_lon(-190.0) == 170.0);
    ck_assert(ts_geo_normalize_lon(720.5) == 0.5);
    ck_assert(ts_geo_normalize_lon(179.75) == 179.75);
    /* In-range values come back bit for bit. */
    ck_assert(ts_geo_normalize_lon(1e-300) == 1e-300);
    ck_assert(ts_geo_normalize_lon(-123.456789012345) == -123.456789012345);
    ck_assert(isnan(ts_geo_normalize_lon(NAN)));
    ck_assert(isnan(ts_geo_normalize_lon(INFINITY)));
}
END_TEST

TS_TEST(test_distance_known_values)
{
    double one_degree = TS_EARTH_RADIUS_M * DEG; /* 111195.08 m */
    ck_assert_double_eq_tol(ts_geo_distance_m(0, 0, 0, 1), one_degree, 1e-6);
    ck_assert_double_eq_tol(ts_geo_distance_m(0, 0, 1, 0), one_degree, 1e-6);
    ck_assert_double_eq_tol(ts_geo_distance_m(10, 179.5, 10, -179.5),
                            ts_geo_distance_m(10, -0.5, 10, 0.5), 1e-6);
    ck_assert_double_eq_tol(ts_geo_distance_m(0, 0, 0, 180), M_PI * TS_EARTH_RADIUS_M, 1e-6);
    ck_assert_double_eq_tol(ts_geo_distance_m(90, 0, -90, 0), M_PI * TS_EARTH_RADIUS_M, 1e-6);
    ck_assert(ts_geo_distance_m(39.9, 116.4, 39.9, 116.4) == 0.0);
    ck_assert_double_eq_tol(ts_geo_distance_m(39.9, 116.4, 31.2, 121.5),
                            ts_geo_distance_m(31.2, 121.5, 39.9, 116.4), 1e-9);
}
END_TEST

/* destination() then distance() gives back r. The achievable agreement is
 * limited by rounding of degrees (ulp of a latitude ~ 1e-14 deg ~ 1e-9 m),
 * so the relative 1e-9 bound is applied from 10 m upwards and an absolute
 * 1e-8 m below (metre-scale steps). */
TS_TEST(test_destination_distance_roundtrip)
{
    ts_rng *rng = ts_rng_new_seeded(11);
    long failures = 0;
    double worst = 0.0;
    for (int i = 0; i < 200000; i++) {
        geo_step s = random_step(rng, 89.0, 0.01, 2.0e6);
        double lat2, lon2;
        ts_geo_destination(s.lat, s.lon, s.r, s.bearing, &lat2, &lon2);
        double err = fabs(ts_geo_distance_m(s.lat, s.lon, lat2, lon2) - s.r);
        double allowed = fmax(1e-9 * s.r, 1e-8);
        if (!(err <= allowed) || !valid_output(lat2, lon2))
            failures++;
        if (err / s.r > worst && s.r >= 10.0)
            worst = err / s.r;
    }
    ck_assert_msg(failures == 0, "%ld failures, worst relative error %g", failures, worst);
    ts_rng_free(rng);
}
END_TEST

/* The bearing argument is the textbook initial bearing (clockwise from
 * north), and going back along the reverse bearing from the destination
 * returns to the start. */
TS_TEST(test_bearing_convention_and_return)
{
    ts_rng *rng = ts_rng_new_seeded(12);
    long bad_bearing = 0, bad_return = 0;
    double worst_return = 0.0;
    for (int i = 0; i < 100000; i++) {
        geo_step s = random_step(rng, 85.0, 1.0, 1.0e6);
        double lat2, lon2, lat3, lon3;
        ts_geo_destination(s.lat, s.lon, s.r, s.bearing, &lat2, &lon2);
        /* 1e-6 rad of bearing is 1 m at 1000 km; rounding is far below. */
        if (angle_diff(initial_bearing(s.lat, s.lon, lat2, lon2),
                       s.bearing) > 1e-6)
            bad_bearing++;
        double back = initial_bearing(lat2, lon2, s.lat, s.lon);
        ts_geo_destination(lat2, lon2, s.r, back, &lat3, &lon3);
        double miss = ts_geo_distance_m(s.lat, s.lon, lat3, lon3);
        if (miss > worst_return)
            worst_return = miss;
        if (!(miss < 1e-6))
            bad_return++;
    }
    ck_assert_int_eq(bad_bearing, 0);
    ck_assert_msg(bad_return == 0, "%ld returns missed, worst %g m", bad_return, worst_return);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_cardinal_directions)
{
    double lat, lon, step = 1000.0, step_deg = step / TS_EARTH_RADIUS_M / DEG;

    ts_geo_destination(48.0, 11.0, step, 0.0, &lat, &lon);
    ck_assert_double_eq_tol(lat, 48.0 + step_deg, 1e-12);
    ck_assert_double_eq_tol(lon, 11.0, 1e-12);

    ts_geo_destination(48.0, 11.0, step, M_PI, &lat, &lon);
    ck_assert_double_eq_tol(lat, 48.0 - step_deg, 1e-12);

    /* East along the equator: the equator is a great circle. */
    ts_geo_destination(0.0, 11.0, step, M_PI / 2, &lat, &lon);
    ck_assert_double_eq_tol(lat, 0.0, 1e-12);
    ck_assert_double_eq_tol(lon, 11.0 + step_deg, 1e-12);
    ts_geo_destination(lat, lon, step, 3 * M_PI / 2, &lat, &lon);
    ck_assert_double_eq_tol(lat, 0.0, 1e-12);
    ck_assert_double_eq_tol(lon, 11.0, 1e-12);

    /* East at 48 N: the great circle starts due east. */
    ts_geo_destination(48.0, 11.0, step, M_PI / 2, &lat, &lon);
    ck_assert_double_gt(lon, 11.0);
    ck_assert_double_eq_tol(lat, 48.0, 1e-4);

    /* Zero distance is the identity (up to rounding of the round trip
     * through unit vectors). */
    ts_geo_destination(-33.5, -70.25, 0.0, 1.0, &lat, &lon);
    ck_assert_double_eq_tol(lat, -33.5, 1e-12);
    ck_assert_double_eq_tol(lon, -70.25, 1e-12);
}
END_TEST

TS_TEST(test_over_the_north_pole)
{
    double lat, lon;
    /* 0.1 deg short of the pole, heading north for 50 km: over the pole
     * onto meridian 10 - 180 = -170. */
    double to_pole = 0.1 * DEG * TS_EARTH_RADIUS_M;
    ts_geo_destination(89.9, 10.0, 50000.0, 0.0, &lat, &lon);
    ck_assert(valid_output(lat, lon));
    ck_assert_double_eq_tol(lat, 90.0 - (50000.0 - to_pole) / TS_EARTH_RADIUS_M / DEG, 1e-9);
    ck_assert_double_eq_tol(lon, -170.0, 1e-9);
    ck_assert_double_eq_tol(ts_geo_distance_m(89.9, 10.0, lat, lon), 50000.0, 1e-4);

    /* South pole likewise. */
    ts_geo_destination(-89.95, -100.0, 20000.0, M_PI, &lat, &lon);
    ck_assert(valid_output(lat, lon));
    ck_assert_double_eq_tol(lon, 80.0, 1e-9);
    ck_assert_double_eq_tol(ts_geo_distance_m(-89.95, -100.0, lat, lon), 20000.0, 1e-4);
}
END_TEST

/* At an exact pole the frame is the limit along the input meridian:
 * documented, deterministic, and every bearing moves r away from the pole. */
TS_TEST(test_from_exact_pole)
{
    double lat, lon, lat_b, lon_b;
    double ring = 90.0 - 5000.0 / TS_EARTH_RADIUS_M / DEG;

    ts_geo_destination(90.0, 30.0, 5000.0, 0.0, &lat, &lon);
    ck_assert_double_eq_tol(lat, ring, 1e-9);
    ck_assert_double_eq_tol(lon, -150.0, 1e-9); /* "north" continues over */
    ts_geo_destination(90.0, 30.0, 5000.0, M_PI, &lat, &lon);
    ck_assert_double_eq_tol(lon, 30.0, 1e-9);   /* "south" runs down lon */

    for (int k = 0; k < 16; k++) {
        double b = k * M_PI / 8;
        ts_geo_destination(90.0, 30.0, 5000.0, b, &lat, &lon);
        ts_geo_destination(90.0, 30.0, 5000.0, b, &lat_b, &lon_b);
        ck_assert(lat == lat_b && lon == lon_b);
        ck_assert(valid_output(lat, lon));
        ck_assert_double_eq_tol(lat, ring, 1e-9);
        ts_geo_destination(-90.0, 30.0, 5000.0, b, &lat, &lon);
        ck_assert(valid_output(lat, lon));
        ck_assert_double_eq_tol(lat, -ring, 1e-9);
    }
}
END_TEST

TS_TEST(test_across_antimeridian)
{
    double lat, lon, step_deg = 10000.0 / TS_EARTH_RADIUS_M / DEG;

    ts_geo_destination(0.0, 179.95, 10000.0, M_PI / 2, &lat, &lon);
    ck_assert(valid_output(lat, lon));
    ck_assert_double_eq_tol(lon, 179.95 + step_deg - 360.0, 1e-9);

    ts_geo_destination(0.0, -179.95, 10000.0, 3 * M_PI / 2, &lat, &lon);
    ck_assert(valid_output(lat, lon));
    ck_assert_double_eq_tol(lon, -179.95 - step_deg + 360.0, 1e-9);

    /* Landing exactly on the antimeridian is reported as -180, never 180. */
    ts_geo_destination(0.0, 179.0, DEG * TS_EARTH_RADIUS_M, M_PI / 2, &lat, &lon);
    ck_assert(valid_output(lat, lon));
    ck_assert_double_eq_tol(fabs(lon), 180.0, 1e-9);
}
END_TEST

/* Any input, any distance (including several times around the Earth), any
 * bearing: the output is valid WGS84. */
TS_TEST(test_always_valid)
{
    ts_rng *rng = ts_rng_new_seeded(13);
    const double lats[] = {90.0, -90.0, 89.9999999, -89.9999999, 0.0};
    const double lons[] = {180.0, -180.0, 179.9999999, -179.9999999, 0.0};
    long invalid = 0;
    for (int i = 0; i < 200000; i++) {
        double lat = i % 4 == 0 ? lats[i / 4 % 5] : uniform_in(rng, -90.0, 90.0);
        double lon = i % 4 == 0 ? lons[i / 20 % 5] : uniform_in(rng, -180.0, 180.0);
        double r = i % 2 ? exp(uniform_in(rng, log(1e-3), log(1e8))) : uniform_in(rng, 0, 1e5);
        double lat2, lon2;
        ts_geo_destination(lat, lon, r, ts_rng_angle(rng), &lat2, &lon2);
        invalid += !valid_output(lat2, lon2);
    }
    ck_assert_int_eq(invalid, 0);
    ts_rng_free(rng);
}
END_TEST

/* Snapping must land on the 1e-7 degree grid, move a point by at most half a
 * step per axis, and keep the result valid WGS84 at the edges. */
TS_TEST(test_snap_grid)
{
    ts_rng *rng = ts_rng_new_seeded(7);
    size_t off_grid = 0, moved_too_far = 0;
    for (int i = 0; i < 100000; i++) {
        double lat = -90.0 + 180.0 * ts_rng_uniform_open(rng);
        double lon = -180.0 + 360.0 * ts_rng_uniform_open(rng);
        double slat = lat, slon = lon;
        ts_geo_snap(&slat, &slon);
        double klat = slat / TS_GEO_SNAP_DEG, klon = slon / TS_GEO_SNAP_DEG;
        if (fabs(klat - round(klat)) > 1e-6 || fabs(klon - round(klon)) > 1e-6)
            off_grid++;
        if (fabs(slat - lat) > 0.5 * TS_GEO_SNAP_DEG * (1 + 1e-6) ||
            fabs(slon - lon) > 0.5 * TS_GEO_SNAP_DEG * (1 + 1e-6))
            moved_too_far++;
    }
    ts_rng_free(rng);
    ck_assert_uint_eq(off_grid, 0);
    ck_assert_uint_eq(moved_too_far, 0);

    double lat = 89.99999999, lon = 179.99999996;
    ts_geo_snap(&lat, &lon);
    ck_assert(ts_geo_valid(lat, lon));
    ck_assert_double_eq(lon, -180.0);
    ck_assert_double_eq(lat, 90.0);
}
END_TEST

int main(void)
{
    return ts_check_main("geo", 120, NULL, NULL);
}
