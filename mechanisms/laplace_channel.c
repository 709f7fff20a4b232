#include "mechanisms/laplace_channel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <gsl/gsl_integration.h>

typedef struct quadrant {
    double eps, u, v;        /* u, v >= 0, possibly infinite */
    double corner;           /* atan2(v, u) */
} quadrant;

/* Mass of the radius out to R: 1 - (1 + eps R) e^{-eps R}. */
static double radial_mass(double eps, double r)
{
    if (isinf(r))
        return 1.0;
    double t = eps * r;
    return -expm1(-t) - t * exp(-t);
}

static double quadrant_integrand(double phi, void *arg)
{
    const quadrant *q = arg;
    double r = phi <= q->corner ? q->u / cos(phi) : q->v / sin(phi);
    return radial_mass(q->eps, r);
}

/* P(0 <= X <= u, 0 <= Y <= v) for u, v >= 0. */
static double quadrant_mass(double eps, double u, double v)
{
    if (u == 0.0 || v == 0.0)
        return 0.0;
    if (isinf(u) && isinf(v))
        return 0.25;
    quadrant q = { eps, u, v, 0.0 };
    if (isinf(v))
        q.corner = M_PI / 2;
    else if (isinf(u))
        q.corner = 0.0;
    else
        q.corner = atan2(v, u);
    gsl_function f = { quadrant_integrand, &q };
    double total = 0.0;
    /* Two pieces, each smooth: the integrand has a kink at the corner. */
    double bounds[3] = { 0.0, q.corner, M_PI / 2 };
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(200);
    if (w == NULL)
        return NAN;
    for (int i = 0; i < 2; i++) {
        if (!(bounds[i + 1] > bounds[i]))
            continue;
        double result, abserr;
        if (gsl_integration_qag(&f, bounds[i], bounds[i + 1], 1e-14, 1e-12,
                                200, GSL_INTEG_GAUSS31, w, &result,
                                &abserr) != 0) {
            gsl_integration_workspace_free(w);
            return NAN;
        }
        total += result;
    }
    gsl_integration_workspace_free(w);
    return total / (2.0 * M_PI);
}

/* P(X <= u, Y <= v), from the quadrant masses by the noise's symmetry in
 * both axes. */
double ts_planar_laplace_joint_cdf(double eps, double u, double v)
{
    if (u < 0.0)  /* P(X <= -a, Y <= v) = P(Y <= v) - P(X < a, Y <= v) */
        return ts_planar_laplace_joint_cdf(eps, INFINITY, v) -
               ts_planar_laplace_joint_cdf(eps, -u, v);
    if (v < 0.0)
        return ts_planar_laplace_joint_cdf(eps, u, INFINITY) -
               ts_planar_laplace_joint_cdf(eps, u, -v);
    /* u, v >= 0: the negative quadrant, two half-strips, the rectangle. */
    return 0.25 + quadrant_mass(eps, u, INFINITY) +
           quadrant_mass(eps, INFINITY, v) + quadrant_mass(eps, u, v);
}

int ts_laplace_grid_channel(double eps, uint32_t cols, uint32_t rows,
                            double cell_w, double cell_h, double *channel,
                            char *err, size_t errlen)
{
    if (!(eps > 0.0) || !isfinite(eps) || cols == 0 || rows == 0 ||
        !(cell_w > 0.0) || !(cell_h > 0.0) || !isfinite(cell_w) ||
        !isfinite(cell_h)) {
        snprintf(err, errlen, "laplace channel: bad parameters");
        return -1;
    }
    /* The CDF at every boundary offset: cell edges lie at (k - 1/2) cells
     * from a centre, k in [-(count - 1), count]; the ends are infinite. */
    size_t nu = 2 * (size_t)cols + 1, nv = 2 * (size_t)rows + 1;
    double *cdf = malloc((nu + 1) * (nv + 1) * sizeof *cdf);
    if (cdf == NULL) {
        snprintf(err, errlen, "laplace channel: out of memory");
        return -1;
    }
    int bad = 0;
    /* index i <-> offset (i - cols - 1/2) cells; 0 is -inf, nu is +inf */
    for (size_t i = 0; i <= nu; i++) {
        double u = i == 0 ? -INFINITY : i == nu ? INFINITY
                   : ((double)i - (double)cols - 0.5) * cell_w;
        for (size_t j = 0; j <= nv; j++) {
            double v = j == 0 ? -INFINITY : j == nv ? INFINITY
                       : ((double)j - (double)rows - 0.5) * cell_h;
            double value;
            if (i == 0 || j == 0)
                value = 0.0;
            else
                value = ts_planar_laplace_joint_cdf(eps, u, v);
            if (!isfinite(value))
                bad = 1;
            cdf[i * (nv + 1) + j] = value;
        }
    }
    if (bad) {
        free(cdf);
        snprintf(err, errlen, "laplace channel: quadrature failed");
        return -1;
    }
    size_t n = (size_t)cols * rows;
    for (size_t x = 0; x < n; x++) {
        long xc = (long)(x % cols), xr = (long)(x / cols);
        double total = 0.0;
        for (size_t y = 0; y < n; y++) {
            long yc = (long)(y % cols), yr = (long)(y / cols);
            /* Cell y's edges relative to x's centre, as boundary indices;
             * border cells reach to infinity. */
            size_t i0 = yc == 0 ? 0 : (size_t)(yc - xc + (long)cols);
            size_t i1 = yc == (long)cols - 1 ? nu
                        : (size_t)(yc - xc + (long)cols + 1);
            size_t j0 = yr == 0 ? 0 : (size_t)(yr - xr + (long)rows);
            size_t j1 = yr == (long)rows - 1 ? nv
                        : (size_t)(yr - xr + (long)rows + 1);
            double p = cdf[i1 * (nv + 1) + j1] - cdf[i0 * (nv + 1) + j1] -
                       cdf[i1 * (nv + 1) + j0] + cdf[i0 * (nv + 1) + j0];
            /* Differences of CDF values near 1 lose their last digits:
             * keep every output reachable. */
            if (!(p > 1e-300))
                p = 1e-300;
            channel[x * n + y] = p;
            total += p;
        }
        for (size_t y = 0; y < n; y++)
            channel[x * n + y] /= total;
    }
    free(cdf);
    return 0;
}
