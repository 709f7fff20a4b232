/* k-nearest-POI index of `tracesan eval`: the 3-d tree must return exactly
 * what a brute-force scan with the same arithmetic returns, ties included,
 * and its order must be the great-circle order. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "tools/poi_index.h"
#include "tests/support/check_run.h"

/* splitmix64: a reproducible stream for the test's point sets. */
static uint64_t test_state;

static double uniform(double lo, double hi)
{
    uint64_t z = (test_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return lo + (hi - lo) * ((double)(z >> 11) / 9007199254740992.0);
}

typedef struct ranked {
    double d2;
    uint32_t id;
} ranked;

static int compare_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->d2 != y->d2)
        return x->d2 < y->d2 ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* The k nearest by scanning all points: the reference answer. */
static void brute_force(const double *lat, const double *lon, size_t n,
                        double qlat, double qlon, size_t k, uint32_t *out)
{
    ranked *all = malloc(n * sizeof *all);
    ck_assert_ptr_nonnull(all);
    double q[3], p[3];
    ts_poi_unit_vector(qlat, qlon, q);
    for (size_t i = 0; i < n; i++) {
        ts_poi_unit_vector(lat[i], lon[i], p);
        all[i].d2 = ts_poi_chord2(q, p);
        all[i].id = (uint32_t)i;
    }
    qsort(all, n, sizeof *all, compare_ranked);
    for (size_t i = 0; i < k; i++)
        out[i] = all[i].id;
    free(all);
}

/* Points around Beijing, a quarter of them snapped to a coarse grid (many
 * equal coordinates, so medians fall on ties) and some exact duplicates. */
static void clustered_points(double *lat, double *lon, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && i % 10 == 0) {
            size_t j = (size_t)uniform(0.0, (double)i);
            lat[i] = lat[j];
            lon[i] = lon[j];
            continue;
        }
        lat[i] = uniform(39.75, 40.10);
        lon[i] = uniform(116.15, 116.60);
        if (i % 4 == 1) {
            lat[i] = 39.75 + 0.01 * floor((lat[i] - 39.75) / 0.01);
            lon[i] = 116.15 + 0.01 * floor((lon[i] - 116.15) / 0.01);
        }
    }
}

TS_TEST(matches_brute_force)
{
    static const size_t sizes[] = { 1, 7, 9, 100, 3000 };
    static const size_t ks[] = { 1, 2, 5, 20, 3000 };
    test_state = 42;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        double *lat = malloc(n * sizeof *lat), *lon = malloc(n * sizeof *lon);
        ck_assert(lat != NULL && lon != NULL);
        clustered_points(lat, lon, n);
        ts_poi_index *index = ts_poi_index_new(lat, lon, n);
        ck_assert_ptr_nonnull(index);
        ck_assert_uint_eq(ts_poi_index_size(index), n);
        uint32_t *got = malloc(n * sizeof *got);
        uint32_t *want = malloc(n * sizeof *want);
        ck_assert(got != NULL && want != NULL);
        for (int q = 0; q < 200; q++) {
            double qlat, qlon;
            if (q % 5 == 0) { /* on a point: ties with its duplicates */
                size_t j = (size_t)uniform(0.0, (double)n);
                qlat = lat[j];
                qlon = lon[j];
            } else {
                qlat = uniform(39.7, 40.15);
                qlon = uniform(116.1, 116.65);
            }
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                size_t k = ks[ki] < n ? ks[ki] : n;
                size_t found =
                    ts_poi_index_nearest(index, qlat, qlon, ks[ki], got);
                ck_assert_uint_eq(found, k);
                brute_force(lat, lon, n, qlat, qlon, k, want);
                for (size_t i = 0; i < k; i++)
                    ck_assert_msg(got[i] == want[i],
                                  "n=%zu k=%zu query %d: rank %zu is %u, "
                                  "brute force says %u", n, k, q, i,
                                  got[i], want[i]);
            }
        }
        free(got);
        free(want);
        ts_poi_index_free(index);
        free(lat);
        free(lon);
    }
}
END_TEST

/* Chord length is monotone in the great-circle angle, so the haversine
 * distances of the answer never decrease. Both are rounded: they may only
 * disagree on near-ties, far below the 1 mm slack allowed here. */
TS_TEST(order_is_great_circle_order_worldwide)
{
    enum { N = 2000, K = 30 };
    static double lat[N], lon[N];
    test_state = 7;
    for (size_t i = 0; i < N; i++) {
        lat[i] = uniform(-90.0, 90.0);
        lon[i] = uniform(-180.0, 180.0);
    }
    ts_poi_index *index = ts_poi_index_new(lat, lon, N);
    ck_assert_ptr_nonnull(index);
    uint32_t got[K];
    static const double queries[][2] = {
        { 89.9, 10.0 }, { -89.9, -170.0 }, { 0.0, 179.99 }, { 0.0, -179.99 },
        { 39.9, 116.4 }, { -33.9, 151.2 },
    };
    for (size_t q = 0; q < sizeof queries / sizeof *queries; q++) {
        ck_assert_uint_eq(ts_poi_index_nearest(index, queries[q][0],
                                               queries[q][1], K, got),
                          K);
        double previous = 0.0;
        for (size_t i = 0; i < K; i++) {
            double d = ts_geo_distance_m(queries[q][0], queries[q][1],
                                         lat[got[i]], lon[got[i]]);
            ck_assert_msg(d >= previous - 1e-3, "query %zu rank %zu: %.3f m "
                          "after %.3f m", q, i, d, previous);
            previous = d;
        }
        /* And nothing outside the answer is nearer than its last. */
        for (size_t j = 0; j < N; j++) {
            int in = 0;
            for (size_t i = 0; i < K; i++)
                in |= got[i] == j;
            if (!in)
                ck_assert(ts_geo_distance_m(queries[q][0], queries[q][1],
                                            lat[j], lon[j]) >=
                          previous - 1e-3);
        }
    }
    ts_poi_index_free(index);
}
END_TEST

/* Points at ±0.01° of longitude from a query on the equator have bitwise
 * equal distances (cos is even, sin odd); duplicates too. Lower index
 * first. */
TS_TEST(ties_go_to_the_lower_index)
{
    const double lat[] = { 0.0, 0.0, 0.0, 0.0 };
    const double lon[] = { 0.02, 0.01, -0.01, 0.01 };
    ts_poi_index *index = ts_poi_index_new(lat, lon, 4);
    ck_assert_ptr_nonnull(index);
    uint32_t got[4];
    ck_assert_uint_eq(ts_poi_index_nearest(index, 0.0, 0.0, 3, got), 3);
    ck_assert_uint_eq(got[0], 1);
    ck_assert_uint_eq(got[1], 2);
    ck_assert_uint_eq(got[2], 3);
    ck_assert_uint_eq(ts_poi_index_nearest(index, 0.0, 0.0, 10, got), 4);
    ck_assert_uint_eq(got[3], 0);
    ts_poi_index_free(index);
}
END_TEST

TS_TEST(invalid_input_is_refused)
{
    const double lat[] = { 10.0, 91.0 }, lon[] = { 0.0, 0.0 };
    ck_assert_ptr_null(ts_poi_index_new(lat, lon, 0));
    ck_assert_ptr_null(ts_poi_index_new(lat, lon, 2));
    const double nan_lat[] = { NAN };
    ck_assert_ptr_null(ts_poi_index_new(nan_lat, lon, 1));
}
END_TEST

int main(void)
{
    return ts_check_main("poi_index", 60, NULL, NULL);
}
