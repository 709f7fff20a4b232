/* CIP calibration against RBF Gaussian-process priors (see cip.h).
 *
 * sigma_z or sigma_z^2 inside the inverse: Section 3.2 of the paper writes
 * Sigma_eff with (Sigma_{u|s} + sigma_z I)^-1 once, but its appendix
 * (proof of Eq. 3, steps (b)-(d)) derives it from Z_u | S ~
 * N(A s, Sigma_{u|s} + sigma_z^2 I): the released U points are the
 * conditional prior convolved with the mechanism's noise N(0, sigma_z^2 I),
 * and covariances of independent sums add. A variance has to be added to
 * a covariance, so sigma_z^2 is right and the Section 3.2 form is a typo
 * (it is not even dimensionally consistent). tests/check_cip.c recomputes
 * the divergence from the full joint distribution of Z and agrees with the
 * sigma_z^2 form.
 *
 * Everything is factored on the prior's correlation matrix K (unit
 * diagonal); sigma_x enters only through sigma_x^2 K_{u|s} + sigma_z^2 I.
 * Factoring sigma_x^2 K instead let sigma_x^2 underflow to 0 for sigma_x
 * below ~1e-154, and the search for a nugget then never ended (issue 25).
 * Every loop here has a fixed cap and fails when it reaches it.
 *
 * The GSL calls report failures through their status; callers must have
 * turned GSL's aborting error handler off (tools/tracesan.c does). */
#include "inference/cip.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_matrix.h>

#include "inference/cip_blocks.h"
#include "inference/error.h"

/* The first nugget tried, relative to sigma_x^2, raised tenfold a step for
 * JITTER_STEPS steps: 1e-12 ... 1e-8 = TS_CIP_MAX_JITTER. */
#define FIRST_JITTER 1e-12
#define JITTER_STEPS 5
/* Doublings of the upper bracket, and halvings of the bisection, before a
 * search for sigma_z gives up. L* falls like 1/sigma_z^2 and the bisection
 * halves log(hi/lo) <= log 2 down to log(1 + 1e-12), about 40 steps, so
 * neither is reached for a computable loss. */
#define MAX_BRACKET_STEPS 200
#define MAX_BISECTION_STEPS 200

int ts_cip_secret_mask(ts_cip_secret kind, const double *t, size_t d, double t0,
                       double t1, unsigned char *in_s, char *err, size_t errlen)
{
    if (t == NULL || in_s == NULL || d == 0)
        return ts_fail(err, errlen, "an empty trace has no secret points");
    size_t n = 0;
    for (size_t i = 0; i < d; i++) {
        switch (kind) {
        case TS_CIP_SECRET_EVERY_OTHER: in_s[i] = i % 2 == 0; break;
        case TS_CIP_SECRET_ALL: in_s[i] = 1; break;
        case TS_CIP_SECRET_RANGE: in_s[i] = t[i] >= t0 && t[i] <= t1; break;
        default: return ts_fail(err, errlen, "unknown secret subsequence");
        }
        n += in_s[i];
    }
    if (n == 0)
        return ts_fail(err, errlen, "the secret subsequence is empty");
    return 0;
}

int ts_cip_sigma_eff(const double *t, size_t d, const unsigned char *in_s,
                     const ts_cip_prior *prior, double sigma_z,
                     double *sigma_eff, double *jitter, char *err,
                     size_t errlen)
{
    if (cip_check_model(t, d, in_s, prior, sigma_z, err, errlen) != 0)
        return -1;
    if (sigma_eff == NULL || jitter == NULL)
        return ts_fail(err, errlen, "missing output");
    cip_split sp;
    if (cip_split_init(&sp, t, d, in_s, err, errlen) != 0)
        return -1;
    *jitter = 0.0;
    memset(sigma_eff, 0, sp.ns * sp.ns * sizeof *sigma_eff);
    /* Independent points (Sigma_us = 0) or no U points: nothing about S
     * travels through U, so Sigma_eff = 0 without any factoring. */
    if (prior->independent || sp.nu == 0) {
        cip_split_free(&sp);
        return 0;
    }
    int rc = -1;
    cip_work w;
    cip_blocks b = {0};
    if (cip_work_alloc(&w, &sp, 1, err, errlen) != 0) {
        cip_split_free(&sp);
        return -1;
    }
    if (cip_blocks_alloc(&b, &sp) != 0) {
        ts_fail(err, errlen, "out of memory");
        goto out;
    }
    gsl_matrix *k = w.dd;
    cip_correlations(&sp, prior->length_scale, k);
    double nugget = 0.0;
    for (int step = 0;; step++) {
        int status = cip_blocks_build(&sp, k, nugget, 1, &b, &w);
        if (status == 0)
            break;
        if (step == JITTER_STEPS) {
            ts_fail(err, errlen,
                    "the prior covariance of the secret points "
                    "is singular even with a nugget of %g sigma_x^2 "
                    "(timestamps too dense for the length scale)",
                    TS_CIP_MAX_JITTER);
            goto out;
        }
        nugget = step == 0 ? FIRST_JITTER : 10.0 * nugget;
    }
    gsl_matrix_view out_view = gsl_matrix_view_array(sigma_eff, sp.ns, sp.ns);
    double var = prior->sigma_x * prior->sigma_x;
    if (cip_effective(b.a, b.cond, var, 0.0, sigma_z, &out_view.matrix, NULL,
                      &w, err, errlen) != 0)
        goto out;
    *jitter = nugget * var;
    rc = 0;
out:
    cip_blocks_free(&b);
    cip_work_free(&w);
    cip_split_free(&sp);
    return rc;
}

int ts_cip_loss(const double *t, size_t d, const unsigned char *in_s,
                const ts_cip_prior *prior, double sigma_z, double radius,
                double renyi_order, ts_cip_result *out, char *err,
                size_t errlen)
{
    if (out == NULL)
        return ts_fail(err, errlen, "missing output");
    if (cip_check_loss_params(radius, renyi_order, err, errlen) != 0 ||
        cip_check_model(t, d, in_s, prior, sigma_z, err, errlen) != 0)
        return -1;
    size_t ns = 0;
    for (size_t i = 0; i < d; i++)
        ns += in_s[i] != 0;
    if (ns == 0)
        return ts_fail(err, errlen, "the secret subsequence is empty");
    double *eff = malloc(ns * ns * sizeof *eff);
    double *scratch = malloc(3 * ns * sizeof *scratch);
    int rc = -1;
    if (eff == NULL || scratch == NULL) {
        ts_fail(err, errlen, "out of memory");
        goto done;
    }
    double jitter;
    if (ts_cip_sigma_eff(t, d, in_s, prior, sigma_z, eff, &jitter, err,
                         errlen) != 0)
        goto done;
    gsl_matrix_view view = gsl_matrix_view_array(eff, ns, ns);
    double top;
    if (cip_eigen_range(&view.matrix, scratch, 1e-12, NULL, &top) != 0) {
        ts_fail(err, errlen, "Sigma_eff has an entry that is not finite");
        goto done;
    }
    /* Sigma_eff is PSD: a slightly negative top eigenvalue is rounding. */
    out->alpha = fmax(0.0, top);
    out->secret = ns;
    out->jitter = jitter;
    out->loss = cip_eq4(out->alpha, ns, sigma_z, radius, renyi_order);
    if (!isfinite(out->loss)) {
        ts_fail(err, errlen, "the loss overflows (sigma_z %g, radius %g)",
                sigma_z, radius);
        goto done;
    }
    rc = 0;
done:
    free(scratch);
    free(eff);
    return rc;
}

int ts_cip_min_sigma_z(const double *t, size_t d, const unsigned char *in_s,
                       const ts_cip_prior *prior, double radius,
                       double renyi_order, double epsilon, double rel_tol,
                       double *sigma_z, ts_cip_result *at, char *err,
                       size_t errlen)
{
    if (sigma_z == NULL)
        return ts_fail(err, errlen, "missing output");
    if (cip_check_epsilon(epsilon, rel_tol, err, errlen) != 0 ||
        cip_check_loss_params(radius, renyi_order, err, errlen) != 0)
        return -1;
    size_t ns = 0;
    for (size_t i = 0; in_s != NULL && i < d; i++)
        ns += in_s[i] != 0;
    double lo = cip_independent_sigma_z(ns, radius, renyi_order, epsilon);
    ts_cip_result r;
    if (!cip_scale_ok(lo))
        return ts_fail(err, errlen,
                       "no computable sigma_z meets epsilon %g "
                       "(empty secret, or sigma_z outside [%g, %g])",
                       epsilon, CIP_MIN_SCALE, CIP_MAX_SCALE);
    if (ts_cip_loss(t, d, in_s, prior, lo, radius, renyi_order, &r, err,
                    errlen) != 0)
        return -1;
    if (r.loss <= epsilon) {
        /* alpha* = 0 (independent prior, or U empty): the bound is exact. */
        *sigma_z = lo;
        if (at != NULL)
            *at = r;
        return 0;
    }
    /* L* decreases strictly in sigma_z: 1/sigma_z^2 does, and alpha* does
     * because (Sigma_{u|s} + sigma_z^2 I)^-1 shrinks in the Loewner order. */
    double hi = 2.0 * lo;
    for (int k = 0;; k++) {
        if (k == MAX_BRACKET_STEPS || !cip_scale_ok(hi))
            return ts_fail(err, errlen,
                           "no sigma_z up to %g meets epsilon "
                           "%g",
                           fmin(hi, CIP_MAX_SCALE), epsilon);
        if (ts_cip_loss(t, d, in_s, prior, hi, radius, renyi_order, &r, err,
                        errlen) != 0)
            return -1;
        if (r.loss <= epsilon)
            break;
        lo = hi;
        hi *= 2.0;
    }
    ts_cip_result hi_result = r;
    /* Bisection in log sigma_z, so the tolerance is relative at any scale;
     * stopping at hi <= lo (1 + rel_tol) makes hi (1 - rel_tol) < lo, which
     * fails. */
    for (int k = 0; hi > lo * (1.0 + rel_tol); k++) {
        if (k == MAX_BISECTION_STEPS)
            return ts_fail(err, errlen,
                           "the search for sigma_z did not "
                           "converge");
        double mid = sqrt(lo * hi);
        if (ts_cip_loss(t, d, in_s, prior, mid, radius, renyi_order, &r, err,
                        errlen) != 0)
            return -1;
        if (r.loss <= epsilon) {
            hi = mid;
            hi_result = r;
        } else {
            lo = mid;
        }
    }
    *sigma_z = hi;
    if (at != NULL)
        *at = hi_result;
    return 0;
}
