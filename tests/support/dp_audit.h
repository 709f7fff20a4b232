/* The black-box differential-privacy check every audit of the suite
 * applies to two histograms of a mechanism's outputs, one per secret.
 * Each cell is one set S of outputs, and the claim is
 *
 *     |ln(n1 / n2)| <= claimed + z sqrt(1/n1 + 1/n2)
 *
 * sqrt(1/n1 + 1/n2) being the delta-method standard error of the log
 * ratio of two (near-)Poisson counts, good once both are >= min_count.
 * z is a Bonferroni bound over both directions of every cell of the
 * family, fixed before looking at the data, so that a correct mechanism
 * fails anywhere with probability below alpha (selecting cells by count
 * does not bias it). */
#ifndef TRACESAN_TESTS_SUPPORT_DP_AUDIT_H
#define TRACESAN_TESTS_SUPPORT_DP_AUDIT_H

#include <math.h>
#include <stddef.h>

#include <gsl/gsl_cdf.h>

typedef struct ts_dp_audit {
    double claimed;          /* the log-ratio bound the mechanism claims */
    double z;
    long min_count;
    int cells_tested;
    int violations;
    double max_abs_log_ratio;
    double worst_excess;     /* max over tested cells of |ln ratio| - bound */
} ts_dp_audit;

static inline ts_dp_audit ts_dp_audit_begin(double claimed, size_t cells,
                                            double family_alpha,
                                            long min_count)
{
    ts_dp_audit a = {
        .claimed = claimed,
        .z = gsl_cdf_ugaussian_Qinv(family_alpha / (2.0 * (double)cells)),
        .min_count = min_count,
        .worst_excess = -INFINITY,
    };
    return a;
}

/* One cell's counts from the two secrets. Returns its |ln ratio| when the
 * cell was tested, -1 when a count is below min_count. */
static inline double ts_dp_audit_cell(ts_dp_audit *a, long n1, long n2)
{
    if (n1 < a->min_count || n2 < a->min_count)
        return -1.0;
    a->cells_tested++;
    double log_ratio = fabs(log((double)n1 / (double)n2));
    double bound = a->claimed + a->z * sqrt(1.0 / n1 + 1.0 / n2);
    a->max_abs_log_ratio = fmax(a->max_abs_log_ratio, log_ratio);
    a->worst_excess = fmax(a->worst_excess, log_ratio - bound);
    if (log_ratio > bound)
        a->violations++;
    return log_ratio;
}

#endif
