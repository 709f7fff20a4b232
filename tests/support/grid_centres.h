/* The centres of a cols x rows grid of dx x dy cells with a corner at the
 * origin, row by row: the planar cells the channel and EMD tests solve
 * over. */
#ifndef TRACESAN_TESTS_SUPPORT_GRID_CENTRES_H
#define TRACESAN_TESTS_SUPPORT_GRID_CENTRES_H

#include <stddef.h>

#include "geometry/plane.h"

/* Fills centres (cols * rows of them); returns their number. */
static inline size_t ts_test_grid_centres(size_t cols, size_t rows, double dx,
                                          double dy, ts_vec2 *centres)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            centres[r * cols + c] =
                (ts_vec2){ (double)c * dx + dx / 2, (double)r * dy + dy / 2 };
    return cols * rows;
}

#endif
