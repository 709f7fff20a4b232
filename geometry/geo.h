/* Geodesy on a spherical Earth for displacing points in metres.
 *
 * Mechanisms compute noise in metres; the wire carries WGS84 degrees. We
 * displace along the great circle of a sphere with the IUGG mean radius. The
 * distance error against the WGS84 ellipsoid geodesic is below 0.6 % of the
 * displacement (see docs/geoind.md).
 *
 * The displacement is NOT post-processing: it takes the secret as an input
 * together with the noise, so the released point's law is the pushforward
 * of the planar noise through the exponential map at the secret, and the
 * guarantee has to be re-derived for it. Its density on the sphere is the
 * planar one divided by J(rho) = sin(rho/R) / (rho/R), rho the great-circle
 * distance from the secret; J tends to 0 at the antipode, where the density
 * becomes singular and no e^{eps d} bound holds. Near the secret (rho well
 * below pi R) J stays close to 1 and the ratio of two secrets' densities is
 * e^{eps d} up to a factor derived in docs/geoind.md. Mechanisms therefore
 * refuse noise that puts non-negligible mass beyond
 * TS_GEO_MAX_NOISE_RADIUS_M (ts_planar_laplace_fits_sphere).
 */
#ifndef TRACESAN_GEOMETRY_GEO_H
#define TRACESAN_GEOMETRY_GEO_H

#define TS_EARTH_RADIUS_M 6371008.8

/* A quarter of the way to the antipode (pi R / 4, about 5 003 km). Up to it
 * 1/J adds at most (4/pi - 1)/R = 4.3e-8 per metre to the density ratio's
 * exponent (docs/geoind.md); noise mass beyond it must be negligible. */
#define TS_GEO_MAX_NOISE_RADIUS_M (3.14159265358979323846 * TS_EARTH_RADIUS_M / 4.0)

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
