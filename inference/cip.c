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
 * The GSL calls report failures through their status; callers must have
 * turned GSL's aborting error handler off (tools/tracesan.c does). */
#include "inference/cip.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_blas.h>
#include <gsl/gsl_eigen.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>

#include "inference/error.h"

/* Below this reciprocal condition number, Sigma_ss^-1 Sigma_su would carry
 * relative errors above about 1e-6 (cond x machine epsilon), so the nugget
 * is raised first. */
#define MIN_RCOND 1e-10
/* The first nugget tried, relative to sigma_x^2; raised tenfold a step up
 * to TS_CIP_MAX_JITTER. */
#define FIRST_JITTER 1e-12
/* Doublings of the upper bracket before the search gives up: L* falls
 * like 1/sigma_z^2, so this is never reached for a finite loss. */
#define MAX_BRACKET_STEPS 200

int ts_cip_secret_mask(ts_cip_secret kind, const double *t, size_t d,
                       double t0, double t1, unsigned char *in_s, char *err,
                       size_t errlen)
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

static int check_model(const double *t, size_t d, const unsigned char *in_s,
                       const ts_cip_prior *prior, double sigma_z, char *err,
                       size_t errlen)
{
    if (t == NULL || in_s == NULL || prior == NULL)
        return ts_fail(err, errlen, "missing trace, secret mask or prior");
    if (d == 0 || d > TS_CIP_MAX_POINTS)
        return ts_fail(err, errlen, "trace length %zu outside 1..%d", d,
                       TS_CIP_MAX_POINTS);
    for (size_t i = 0; i < d; i++)
        if (!isfinite(t[i]))
            return ts_fail(err, errlen, "timestamp %zu is not finite", i);
    if (!(prior->sigma_x > 0.0) || !isfinite(prior->sigma_x))
        return ts_fail(err, errlen, "sigma_x must be positive and finite");
    if (!prior->independent &&
        (!(prior->length_scale > 0.0) || !isfinite(prior->length_scale)))
        return ts_fail(err, errlen, "length scale must be positive and finite");
    if (!(sigma_z > 0.0) || !isfinite(sigma_z))
        return ts_fail(err, errlen, "sigma_z must be positive and finite");
    return 0;
}

static double rbf(const ts_cip_prior *p, double a, double b)
{
    double u = (a - b) / p->length_scale;
    return p->sigma_x * p->sigma_x * exp(-0.5 * u * u);
}

/* Factors Sigma_ss (+ the smallest sufficient nugget) into ss_chol, and
 * fills su = Sigma_su and uu = Sigma_uu with the same nugget. */
static int factor_prior(const double *t, const size_t *s_idx, size_t ns,
                        const size_t *u_idx, size_t nu,
                        const ts_cip_prior *prior, gsl_matrix *ss_chol,
                        gsl_matrix *su, gsl_matrix *uu, double *jitter,
                        char *err, size_t errlen)
{
    double var = prior->sigma_x * prior->sigma_x;
    double nugget = 0.0;
    gsl_vector *work = gsl_vector_alloc(3 * ns);
    if (work == NULL)
        return ts_fail(err, errlen, "out of memory");
    for (;;) {
        for (size_t i = 0; i < ns; i++)
            for (size_t j = 0; j < ns; j++)
                gsl_matrix_set(ss_chol, i, j,
                               rbf(prior, t[s_idx[i]], t[s_idx[j]]) +
                                   (i == j ? nugget : 0.0));
        int status = gsl_linalg_cholesky_decomp1(ss_chol);
        double rcond = 0.0;
        if (status == GSL_SUCCESS)
            status = gsl_linalg_cholesky_rcond(ss_chol, &rcond, work);
        if (status == GSL_SUCCESS && rcond >= MIN_RCOND)
            break;
        nugget = nugget == 0.0 ? FIRST_JITTER * var : 10.0 * nugget;
        if (nugget > TS_CIP_MAX_JITTER * var * (1.0 + 1e-9)) {
            gsl_vector_free(work);
            return ts_fail(err, errlen,
                           "the prior covariance of the secret points is "
                           "singular even with a nugget of %g sigma_x^2 "
                           "(timestamps too dense for the length scale)",
                           TS_CIP_MAX_JITTER);
        }
    }
    gsl_vector_free(work);
    for (size_t i = 0; i < ns; i++)
        for (size_t j = 0; j < nu; j++)
            gsl_matrix_set(su, i, j, rbf(prior, t[s_idx[i]], t[u_idx[j]]));
    for (size_t i = 0; i < nu; i++)
        for (size_t j = 0; j < nu; j++)
            gsl_matrix_set(uu, i, j,
                           rbf(prior, t[u_idx[i]], t[u_idx[j]]) +
                               (i == j ? nugget : 0.0));
    *jitter = nugget;
    return 0;
}

int ts_cip_sigma_eff(const double *t, size_t d, const unsigned char *in_s,
                     const ts_cip_prior *prior, double sigma_z,
                     double *sigma_eff, double *jitter, char *err,
                     size_t errlen)
{
    if (check_model(t, d, in_s, prior, sigma_z, err, errlen) != 0)
        return -1;
    if (sigma_eff == NULL || jitter == NULL)
        return ts_fail(err, errlen, "missing output");
    size_t ns = 0;
    for (size_t i = 0; i < d; i++)
        ns += in_s[i] != 0;
    size_t nu = d - ns;
    if (ns == 0)
        return ts_fail(err, errlen, "the secret subsequence is empty");
    *jitter = 0.0;
    memset(sigma_eff, 0, ns * ns * sizeof *sigma_eff);
    /* Independent points (Sigma_us = 0) or no U points: nothing about S
     * travels through U, so Sigma_eff = 0 without any factoring. */
    if (prior->independent || nu == 0)
        return 0;

    int rc = -1;
    size_t *s_idx = malloc(ns * sizeof *s_idx);
    size_t *u_idx = malloc(nu * sizeof *u_idx);
    gsl_matrix *ss = gsl_matrix_alloc(ns, ns);
    gsl_matrix *at = gsl_matrix_alloc(ns, nu); /* Sigma_su, then A^T */
    gsl_matrix *m = gsl_matrix_alloc(nu, nu);  /* Sigma_uu, then its chol */
    gsl_matrix *b = gsl_matrix_alloc(nu, ns);
    if (s_idx == NULL || u_idx == NULL || ss == NULL || at == NULL ||
        m == NULL || b == NULL) {
        ts_fail(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0, a = 0, c = 0; i < d; i++) {
        if (in_s[i])
            s_idx[a++] = i;
        else
            u_idx[c++] = i;
    }
    if (factor_prior(t, s_idx, ns, u_idx, nu, prior, ss, at, m, jitter, err,
                     errlen) != 0)
        goto out;
    /* A^T = Sigma_ss^-1 Sigma_su, by the two triangular solves. */
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, 1.0, ss,
                   at);
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasTrans, CblasNonUnit, 1.0, ss,
                   at);
    /* Sigma_{u|s} + sigma_z^2 I = Sigma_uu - Sigma_us A^T + sigma_z^2 I, with
     * Sigma_us A^T = A Sigma_ss A^T recomputed as (Sigma_su)^T A^T. The
     * product is symmetric in exact arithmetic only, so the factorisation
     * reads the lower triangle and the upper one is ignored. */
    {
        gsl_matrix *su_copy = gsl_matrix_alloc(ns, nu);
        if (su_copy == NULL) {
            ts_fail(err, errlen, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < ns; i++)
            for (size_t j = 0; j < nu; j++)
                gsl_matrix_set(su_copy, i, j,
                               rbf(prior, t[s_idx[i]], t[u_idx[j]]));
        gsl_blas_dgemm(CblasTrans, CblasNoTrans, -1.0, su_copy, at, 1.0, m);
        gsl_matrix_free(su_copy);
    }
    for (size_t i = 0; i < nu; i++)
        for (size_t j = 0; j < i; j++) {
            double v = 0.5 * (gsl_matrix_get(m, i, j) + gsl_matrix_get(m, j, i));
            gsl_matrix_set(m, i, j, v);
            gsl_matrix_set(m, j, i, v);
        }
    for (size_t i = 0; i < nu; i++)
        *gsl_matrix_ptr(m, i, i) += sigma_z * sigma_z;
    /* Positive definite whatever rounding did to Sigma_{u|s}, as long as
     * sigma_z^2 dominates that rounding. */
    if (gsl_linalg_cholesky_decomp1(m) != GSL_SUCCESS) {
        ts_fail(err, errlen, "Sigma_{u|s} + sigma_z^2 I is not positive "
                "definite (sigma_z %g too small for the rounding)", sigma_z);
        goto out;
    }
    /* Sigma_eff = (L^-1 A)^T (L^-1 A) with L L^T = Sigma_{u|s} + sigma_z^2 I:
     * symmetric positive semi-definite by construction. */
    gsl_matrix_transpose_memcpy(b, at);
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, 1.0, m,
                   b);
    gsl_matrix_view out_view = gsl_matrix_view_array(sigma_eff, ns, ns);
    gsl_blas_dgemm(CblasTrans, CblasNoTrans, 1.0, b, b, 0.0,
                   &out_view.matrix);
    rc = 0;
out:
    gsl_matrix_free(b);
    gsl_matrix_free(m);
    gsl_matrix_free(at);
    gsl_matrix_free(ss);
    free(u_idx);
    free(s_idx);
    return rc;
}

int ts_cip_loss(const double *t, size_t d, const unsigned char *in_s,
                const ts_cip_prior *prior, double sigma_z, double radius,
                double renyi_order, ts_cip_result *out, char *err,
                size_t errlen)
{
    if (out == NULL)
        return ts_fail(err, errlen, "missing output");
    if (!(radius > 0.0) || !isfinite(radius))
        return ts_fail(err, errlen, "radius must be positive and finite");
    /* Order 1 is the KL limit, where Eq. 3 still holds; the paper's
     * Corollary 1 needs order > 1, which the caller chooses. */
    if (!(renyi_order >= 1.0) || !isfinite(renyi_order))
        return ts_fail(err, errlen, "Renyi order must be >= 1 and finite");
    if (check_model(t, d, in_s, prior, sigma_z, err, errlen) != 0)
        return -1;
    size_t ns = 0;
    for (size_t i = 0; i < d; i++)
        ns += in_s[i] != 0;
    if (ns == 0)
        return ts_fail(err, errlen, "the secret subsequence is empty");
    double *eff = malloc(ns * ns * sizeof *eff);
    gsl_vector *eval = gsl_vector_alloc(ns);
    gsl_eigen_symm_workspace *ws = gsl_eigen_symm_alloc(ns);
    int rc = -1;
    if (eff == NULL || eval == NULL || ws == NULL) {
        ts_fail(err, errlen, "out of memory");
        goto done;
    }
    double jitter;
    if (ts_cip_sigma_eff(t, d, in_s, prior, sigma_z, eff, &jitter, err,
                         errlen) != 0)
        goto done;
    gsl_matrix_view view = gsl_matrix_view_array(eff, ns, ns);
    if (gsl_eigen_symm(&view.matrix, eval, ws) != GSL_SUCCESS) {
        ts_fail(err, errlen, "eigenvalues of Sigma_eff did not converge");
        goto done;
    }
    /* Sigma_eff is PSD: a slightly negative top eigenvalue is rounding. */
    double alpha = 0.0;
    for (size_t i = 0; i < ns; i++)
        alpha = fmax(alpha, gsl_vector_get(eval, i));
    double s2 = sigma_z * sigma_z;
    out->alpha = alpha;
    out->secret = ns;
    out->jitter = jitter;
    out->loss = 0.5 * renyi_order * (1.0 + s2 * alpha) / s2 * (double)ns *
                radius * radius;
    rc = 0;
done:
    gsl_eigen_symm_free(ws);
    gsl_vector_free(eval);
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
    if (!(epsilon > 0.0) || !isfinite(epsilon))
        return ts_fail(err, errlen, "epsilon must be positive and finite");
    if (!(rel_tol >= 1e-12 && rel_tol < 0.5))
        return ts_fail(err, errlen,
                       "relative tolerance must be in [1e-12, 0.5)");
    if (!(radius > 0.0) || !isfinite(radius))
        return ts_fail(err, errlen, "radius must be positive and finite");
    size_t ns = 0;
    for (size_t i = 0; in_s != NULL && i < d; i++)
        ns += in_s[i] != 0;
    /* L* >= (lambda/2)|S| r^2 / sigma_z^2 (alpha* >= 0), with equality for
     * the independent prior: the smallest admissible sigma_z is at least
     * this, so the search starts from a bracket's lower end that fails. */
    double lo = sqrt(0.5 * renyi_order * (double)ns * radius * radius /
                     epsilon);
    ts_cip_result r;
    if (!(lo > 0.0) || !isfinite(lo))
        return ts_fail(err, errlen, "bad model (empty secret or Renyi order)");
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
        if (k == MAX_BRACKET_STEPS)
            return ts_fail(err, errlen, "no sigma_z meets epsilon %g", epsilon);
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
    while (hi > lo * (1.0 + rel_tol)) {
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
