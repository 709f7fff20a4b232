/* A grid small enough to work out by hand: 0.0026 degrees square at the
 * equator, R * 0.0026 * pi / 180 = 289.1 m a side, so 100 m cells make
 * 3 x 3 whose last row and column overhang. */
#ifndef TRACESAN_TESTS_SUPPORT_SMALL_GRID_H
#define TRACESAN_TESTS_SUPPORT_SMALL_GRID_H

#include <check.h>

#include "inference/grid.h"

static inline ts_grid ts_test_small_grid(void)
{
    ts_grid g;
    char err[200];
    ck_assert_int_eq(ts_grid_init(&g, -0.0013, 10.0, 0.0013, 10.0026, 100.0,
                                  err, sizeof err),
                     0);
    ck_assert_uint_eq(g.cols, 3);
    ck_assert_uint_eq(g.rows, 3);
    return g;
}

#endif
