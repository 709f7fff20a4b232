/* Geodesy on a spherical Earth for displacing points in metres.
 *
 * Mechanisms compute noise in metres; the wire carries WGS84 degrees. We
 * displace along the great circle of a sphere with the IUGG mean radius. The
 * distance error against the WGS84 ellipsoid geodesic is below 0.6 % of the
 * displacement (see docs/geoind.md), and the mapping is a deterministic
 * function of (secret, noise), so the privacy guarantee holds for the
 * spherical great-circle metric.
 */
#ifndef TRACESAN_MECHANISMS_GEO_H
#define TRACESAN_MECHANISMS_GEO_H

#define TS_EARTH_RADIUS_M 6371008.8

/* 1 when lat/lon are finite and inside [-90, 90] x [-180, 180]. */
int ts_geo_valid(double lat_deg, double lon_deg);

/* Point reached from (lat, lon) after distance_m metres along the great
 * circle with the given bearing (radians clockwise from north). Computed with
 * unit vectors, so paths over a pole or across the antimeridian come out as
 * valid WGS84: lat in [-90, 90], lon normalised to [-180, 180). */
void ts_geo_destination(double lat_deg, double lon_deg, double distance_m,
                        double bearing_rad, double *out_lat_deg,
                        double *out_lon_deg);

/* Great-circle distance in metres (haversine). */
double ts_geo_distance_m(double lat1_deg, double lon1_deg, double lat2_deg,
                         double lon2_deg);

/* Published coordinates are snapped to a grid of 1e-7 degrees (about 1 cm).
 * Mironov (CCS 2012) showed that the low-order bits of floating-point noise
 * outputs can reveal the secret: which doubles a computation can produce
 * depends on its inputs. Rounding to a fixed decimal grid keeps only the
 * grid index, a deterministic function of the noisy point (post-processing),
 * far below the noise scale of any useful profile. */
#define TS_GEO_SNAP_DEG 1e-7
void ts_geo_snap(double *lat_deg, double *lon_deg);

/* Normalise a longitude in degrees to [-180, 180). */
double ts_geo_normalize_lon(double lon_deg);

#endif
