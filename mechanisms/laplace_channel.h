/* The planar Laplace mechanism seen through a grid: the exact channel
 * C[x * n + y] = P(centre of cell x + planar Laplace noise lands in cell y),
 * with points beyond the grid's border counted in the nearest border cell.
 *
 * It is what IBU needs to estimate a density from a geo-indistinguishable
 * feed (the reports' cells are post-processing of the noisy points), and
 * what `tracesan privic --compare-laplace` compares BA against.
 *
 * Exact up to quadrature: the probability of an axis-aligned rectangle is
 * four values of the noise's joint CDF, and the mass of the quadrant
 * rectangle [0, u] x [0, v] is, in polar coordinates,
 *   (1 / 2 pi) * int_0^{pi/2} 1 - (1 + eps R(phi)) e^{-eps R(phi)} dphi,
 * R(phi) the distance to the rectangle's far side along phi: a smooth 1-D
 * integral (GSL's adaptive Gauss-Kronrod), since the radius CDF of the
 * planar Laplace is closed-form. */
#ifndef TRACESAN_MECHANISMS_LAPLACE_CHANNEL_H
#define TRACESAN_MECHANISMS_LAPLACE_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

/* Callers turn GSL's abort-on-error handler off (tracesand and tracesan
 * do at startup): a failed quadrature then comes back as -1.
 *
 * A cols x rows grid of cell_w x cell_h metre cells (index row * cols +
 * col, as everywhere), eps per metre. Fills the n x n channel, n = cols *
 * rows. 0, or -1 with err on bad parameters or allocation failure. */
int ts_laplace_grid_channel(double eps, uint32_t cols, uint32_t rows,
                            double cell_w, double cell_h, double *channel,
                            char *err, size_t errlen);

/* The joint CDF P(X <= u, Y <= v) of the planar Laplace noise (u, v may be
 * infinite). */
double ts_planar_laplace_joint_cdf(double eps, double u, double v);

#endif
