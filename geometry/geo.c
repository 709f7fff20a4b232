#include "geometry/geo.h"

#include <math.h>

#define DEG_TO_RAD (M_PI / 180.0)
#define RAD_TO_DEG (180.0 / M_PI)

int ts_geo_valid(double lat_deg, double lon_deg)
{
    return isfinite(lat_deg) && isfinite(lon_deg) && lat_deg >= -90.0 &&
           lat_deg <= 90.0 && lon_deg >= -180.0 && lon_deg <= 180.0;
}

double ts_geo_normalize_lon(double lon_deg)
{
    /* Values already in range are returned bit for bit: shifting by 180 and
     * back would round away the low bits of small longitudes. */
    if (lon_deg >= -180.0 && lon_deg < 180.0)
        return lon_deg;
    if (!isfinite(lon_deg))
        return NAN;
    double lon = fmod(lon_deg, 360.0); /* exact, in (-360, 360) */
    if (lon >= 180.0)
        lon -= 360.0;
    else if (lon < -180.0)
        lon += 360.0;
    return lon;
}

void ts_geo_destination(double lat_deg, double lon_deg, double distance_m,
                        double bearing_rad, double *out_lat_deg,
                        double *out_lon_deg)
{
    const double lat = lat_deg * DEG_TO_RAD, lon = lon_deg * DEG_TO_RAD;
    const double sin_lat = sin(lat), cos_lat = cos(lat);
    const double sin_lon = sin(lon), cos_lon = cos(lon);
    const double sin_b = sin(bearing_rad), cos_b = cos(bearing_rad);

    /* Start point p and the local east/north unit vectors. At a pole the
     * true frame is undefined; these formulas then give the limit of the
     * frame along the input meridian (north points over the pole, down
     * meridian lon+180). That is a fixed rotation of the bearing, so with a
     * uniform noise angle the output distribution is the same as for any
     * other choice. */
    const double p[3] = {cos_lat * cos_lon, cos_lat * sin_lon, sin_lat};
    const double east[3] = {-sin_lon, cos_lon, 0.0};
    const double north[3] = {-sin_lat * cos_lon, -sin_lat * sin_lon, cos_lat};

    double angle = distance_m / TS_EARTH_RADIUS_M;
    /* q = cos(a) p + sin(a) t, written as p + (cos(a) - 1) p + sin(a) t with
     * cos(a) - 1 = -2 sin^2(a/2): for metre-scale displacements cos(a) is
     * 1 - 1e-14 and would lose most of the step to rounding. */
    double half_sin = sin(0.5 * angle);
    double cos_minus_one = -2.0 * half_sin * half_sin;
    double sin_a = sin(angle);
    double q[3];
    for (int i = 0; i < 3; i++) {
        double tangent = sin_b * east[i] + cos_b * north[i];
        q[i] = p[i] + (cos_minus_one * p[i] + sin_a * tangent);
    }

    double out_lat = atan2(q[2], hypot(q[0], q[1])) * RAD_TO_DEG;
    /* atan2 keeps the angle in [-pi/2, pi/2]; the degree conversion can
     * still round a hair past 90. */
    if (out_lat > 90.0)
        out_lat = 90.0;
    else if (out_lat < -90.0)
        out_lat = -90.0;
    *out_lat_deg = out_lat;
    *out_lon_deg = ts_geo_normalize_lon(atan2(q[1], q[0]) * RAD_TO_DEG);
}

double ts_geo_distance_m(double lat1_deg, double lon1_deg, double lat2_deg,
                         double lon2_deg)
{
    double phi1 = lat1_deg * DEG_TO_RAD;
    double phi2 = lat2_deg * DEG_TO_RAD;
    double s_lat = sin(0.5 * (phi2 - phi1));
    double s_lon = sin(0.5 * (lon2_deg - lon1_deg) * DEG_TO_RAD);
    double h = s_lat * s_lat + cos(phi1) * cos(phi2) * s_lon * s_lon;
    if (h > 1.0)
        h = 1.0;
    /* atan2 form: asin(sqrt(h)) loses accuracy near antipodes. */
    return 2.0 * TS_EARTH_RADIUS_M * atan2(sqrt(h), sqrt(1.0 - h));
}

void ts_geo_snap(double *lat_deg, double *lon_deg)
{
    const double steps_per_degree = 1.0 / TS_GEO_SNAP_DEG;
    double lat = round(*lat_deg * steps_per_degree) / steps_per_degree;
    double lon = round(*lon_deg * steps_per_degree) / steps_per_degree;

    /* Rounding can carry 179.99999996 to 180, outside [-180, 180). */
    if (lon >= 180.0)
        lon -= 360.0;
    if (lat > 90.0)
        lat = 90.0;
    if (lat < -90.0)
        lat = -90.0;
    *lat_deg = lat;
    *lon_deg = lon;
}
