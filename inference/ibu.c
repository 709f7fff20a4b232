#include "inference/ibu.h"
#include "inference/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ts_gibu(const ts_ibu_source *sources, size_t n_sources, size_t n,
            double *theta, const ts_ibu_params *params,
            ts_ibu_result *result, char *err, size_t errlen)
{
    memset(result, 0, sizeof *result);
    unsigned cap = params->fixed_steps > 0 ? params->fixed_steps
                                           : params->max_iterations;
    if (n == 0 || n_sources == 0 || !(params->precision > 0.0) || cap == 0)
        return ts_fail(err, errlen, "IBU needs cells, a channel, a "
                       "precision > 0 and at least one iteration");
    double reports = 0.0;
    for (size_t t = 0; t < n_sources; t++)
        for (size_t y = 0; y < n; y++) {
            double c = sources[t].counts[y];
            if (!(c >= 0.0) || !isfinite(c))
                return ts_fail(err, errlen, "IBU: report count %g is not a "
                               "finite count", c);
            reports += c;
        }
    if (!(reports > 0.0))
        return ts_fail(err, errlen, "IBU needs at least one report");
    for (size_t x = 0; x < n; x++)
        if (!(theta[x] > 0.0) || !isfinite(theta[x]))
            return ts_fail(err, errlen, "IBU needs a full-support start "
                           "(cell %zu has %g)", x, theta[x]);

    double *weight = malloc(n * sizeof *weight);  /* q(y) / sum_z theta C */
    double *next = malloc(n * sizeof *next);
    if (weight == NULL || next == NULL) {
        free(weight);
        free(next);
        return ts_fail(err, errlen, "out of memory");
    }
    for (unsigned r = 1; r <= cap; r++) {
        memset(next, 0, n * sizeof *next);
        for (size_t t = 0; t < n_sources; t++) {
            const double *c = sources[t].channel;
            const double *counts = sources[t].counts;
            for (size_t y = 0; y < n; y++) {
                weight[y] = 0.0;
                if (counts[y] == 0.0)
                    continue;
                double denom = 0.0;
                for (size_t z = 0; z < n; z++)
                    denom += theta[z] * c[z * n + y];
                weight[y] = denom > 0.0 ? counts[y] / reports / denom : 0.0;
            }
            for (size_t x = 0; x < n; x++) {
                const double *row = c + x * n;
                double sum = 0.0;
                for (size_t y = 0; y < n; y++)
                    sum += row[y] * weight[y];
                next[x] += theta[x] * sum;
            }
        }
        double total = 0.0;
        for (size_t x = 0; x < n; x++)
            total += next[x];
        double change = 0.0;
        for (size_t x = 0; x < n; x++) {
            double v = total > 0.0 ? next[x] / total : theta[x];
            double delta = fabs(v - theta[x]);
            if (delta > change)
                change = delta;
            theta[x] = v;
        }
        result->iterations = r;
        result->last_change = change;
        result->converged = change <= params->precision;
        if (result->converged && params->fixed_steps == 0)
            break;
    }
    free(weight);
    free(next);
    /* Each step is a ratio of positive sums, so the estimate stays a
     * distribution; refuse rather than hand a broken one to BA. */
    for (size_t x = 0; x < n; x++)
        if (!(theta[x] >= 0.0) || !isfinite(theta[x]))
            return ts_fail(err, errlen, "IBU: the estimate left the simplex "
                           "(cell %zu has %g)", x, theta[x]);
    return 0;
}
