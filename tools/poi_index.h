/* k-nearest-neighbour queries over a fixed set of points of interest, for
 * the kNN precision/recall of `tracesan eval`.
 *
 * Distance: great-circle. Each point is stored as its unit vector on the
 * sphere and compared by squared chord length, which is a strictly
 * increasing function of the great-circle angle, so the neighbour order is
 * the great-circle order, anywhere on Earth (no projection, no dateline
 * or pole special case). Points at exactly the same computed distance are
 * ordered by their index in the input (lowest first), so a query has one
 * answer.
 *
 * Index: a 3-d tree (leaves of a few points, split at the median of the
 * widest axis), so a query costs about log n node visits instead of n.
 */
#ifndef TRACESAN_TOOLS_POI_INDEX_H
#define TRACESAN_TOOLS_POI_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct ts_poi_index ts_poi_index;

/* Indexes n points (degrees; copied). NULL when out of memory, when n is 0
 * or above UINT32_MAX, or when a coordinate is not a valid WGS84 one. */
ts_poi_index *ts_poi_index_new(const double *lat, const double *lon,
                               size_t n);
void ts_poi_index_free(ts_poi_index *index);

size_t ts_poi_index_size(const ts_poi_index *index);

/* The min(k, size) points nearest to (lat, lon), nearest first, as input
 * indices into `nearest` (room for k). Returns how many were written. */
size_t ts_poi_index_nearest(const ts_poi_index *index, double lat, double lon,
                            size_t k, uint32_t *nearest);

/* The unit vector of (lat, lon) as the index computes it, and the squared
 * chord between two such vectors: exposed so that a brute-force check can
 * use the identical arithmetic. */
void ts_poi_unit_vector(double lat, double lon, double out[3]);
double ts_poi_chord2(const double a[3], const double b[3]);

#endif
