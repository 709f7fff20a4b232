/* Vectors and 2x2 matrices in a local plane (metres of a projection):
 * the common language of the grid, the belief and the mechanisms that
 * work on the plane. */
#ifndef TRACESAN_GEOMETRY_PLANE_H
#define TRACESAN_GEOMETRY_PLANE_H

typedef struct ts_vec2 {
    double x, y;
} ts_vec2;

/* Row-major 2x2 matrix [[a, b], [c, d]]. */
typedef struct ts_mat2 {
    double a, b, c, d;
} ts_mat2;

/* Symmetric 2x2 matrix [[xx, xy], [xy, yy]] (second moments). */
typedef struct ts_sym2 {
    double xx, xy, yy;
} ts_sym2;

static inline ts_vec2 ts_mat2_apply(ts_mat2 m, ts_vec2 v)
{
    return (ts_vec2){ m.a * v.x + m.b * v.y, m.c * v.x + m.d * v.y };
}

static inline double ts_mat2_det(ts_mat2 m)
{
    return m.a * m.d - m.b * m.c;
}

#endif
