/* The one-sample Kolmogorov–Smirnov statistic the statistical tests use to
 * compare a sampler against its law. */
#ifndef TRACESAN_TESTS_SUPPORT_KS_H
#define TRACESAN_TESTS_SUPPORT_KS_H

#include <stddef.h>
#include <stdlib.h>

/* The asymptotic critical value of sqrt(n) * D at level 0.01: a correct
 * sampler exceeds KS_CRITICAL_001 / sqrt(n) in 1 % of seeds. */
#define KS_CRITICAL_001 1.949

static inline int ts_ks_compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts `samples` and returns sup |F_n - F| against cdf(x, param). */
static inline double ts_ks_statistic(double *samples, size_t n,
                                     double (*cdf)(double, double),
                                     double param)
{
    qsort(samples, n, sizeof *samples, ts_ks_compare_doubles);
    double d = 0.0;
    for (size_t i = 0; i < n; i++) {
        double f = cdf(samples[i], param);
        double above = (double)(i + 1) / (double)n - f;
        double below = f - (double)i / (double)n;
        if (above > d)
            d = above;
        if (below > d)
            d = below;
    }
    return d;
}

#endif
