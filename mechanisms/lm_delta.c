#include "mechanisms/lm_delta.h"

#include <math.h>

int ts_lm_delta_sensitivity(const ts_vec2 *centres, size_t n, double cell_m,
                            double *delta_x, double *delta_y)
{
    if (n == 0 || !(cell_m > 0.0) || !isfinite(cell_m))
        return -1;
    double min_x = INFINITY, max_x = -INFINITY, min_y = INFINITY, max_y = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(centres[i].x) || !isfinite(centres[i].y))
            return -1;
        min_x = fmin(min_x, centres[i].x);
        max_x = fmax(max_x, centres[i].x);
        min_y = fmin(min_y, centres[i].y);
        max_y = fmax(max_y, centres[i].y);
    }
    double dx = (max_x - min_x) + cell_m, dy = (max_y - min_y) + cell_m;
    if (!isfinite(dx) || !isfinite(dy))
        return -1;
    *delta_x = dx;
    *delta_y = dy;
    return 0;
}

double ts_lm_delta_scale(double delta_x, double delta_y, double eps)
{
    if (!(delta_x > 0.0) || !(delta_y > 0.0) || !(eps > 0.0) ||
        !isfinite(delta_x) || !isfinite(delta_y) || !isfinite(eps))
        return NAN;
    double scale = (delta_x + delta_y) / eps;
    return isfinite(scale) ? scale : NAN;
}

int ts_lm_delta_sample(ts_vec2 released, double scale, ts_rng *rng, ts_vec2 *z)
{
    if (!(scale > 0.0) || !isfinite(scale) || !isfinite(released.x) ||
        !isfinite(released.y))
        return -1;
    ts_vec2 out = {released.x + ts_rng_laplace(rng, scale),
                    released.y + ts_rng_laplace(rng, scale)};
    if (!isfinite(out.x) || !isfinite(out.y))
        return -1;
    *z = out;
    return 0;
}

double ts_lm_delta_log_density(double scale, ts_vec2 z, ts_vec2 s)
{
    if (!(scale > 0.0) || !isfinite(scale))
        return NAN;
    return -2.0 * log(2.0 * scale) - (fabs(z.x - s.x) + fabs(z.y - s.y)) / scale;
}

double ts_lm_delta_density(double scale, ts_vec2 z, ts_vec2 s)
{
    return exp(ts_lm_delta_log_density(scale, z, s));
}

double ts_lm_log_emission(const void *ctx, ts_vec2 z, ts_vec2 s)
{
    const ts_lm_emission *e = ctx;
    return ts_lm_delta_log_density(e->scale, z, s);
}
