/* The linear algebra shared by the CIP loss at one length scale
 * (inference/cip.c) and its certified supremum over length scales
 * (inference/cip_sup.c): see cip_blocks.h. */
/* GSL's element accessors inline (they are most of the small-matrix
 * work here); range checks stay on. */
#define HAVE_INLINE 1
#include "inference/cip_blocks.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>

#include "inference/error.h"

int cip_scale_ok(double x)
{
    return x >= CIP_MIN_SCALE && x <= CIP_MAX_SCALE;
}

int cip_check_model(const double *t, size_t d, const unsigned char *in_s,
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
    if (!cip_scale_ok(prior->sigma_x))
        return ts_fail(err, errlen, "sigma_x must be in [%g, %g]",
                       CIP_MIN_SCALE, CIP_MAX_SCALE);
    if (!prior->independent &&
        (!(prior->length_scale > 0.0) || !isfinite(prior->length_scale)))
        return ts_fail(err, errlen, "length scale must be positive and finite");
    if (!cip_scale_ok(sigma_z))
        return ts_fail(err, errlen, "sigma_z must be in [%g, %g]",
                       CIP_MIN_SCALE, CIP_MAX_SCALE);
    return 0;
}

int cip_check_loss_params(double radius, double renyi_order, char *err,
                          size_t errlen)
{
    if (!cip_scale_ok(radius))
        return ts_fail(err, errlen, "radius must be in [%g, %g]", CIP_MIN_SCALE,
                       CIP_MAX_SCALE);
    /* Order 1 is the KL limit, where Eq. 3 still holds; the paper's
     * Corollary 1 needs order > 1, which the caller chooses. */
    if (!(renyi_order >= 1.0) || !isfinite(renyi_order))
        return ts_fail(err, errlen, "Renyi order must be >= 1 and finite");
    return 0;
}

/* ------------------------------------------------ the trace split S | U */

void cip_split_free(cip_split *sp)
{
    free(sp->s_idx);
    free(sp->u_idx);
}

int cip_split_init(cip_split *sp, const double *t, size_t d,
                   const unsigned char *in_s, char *err, size_t errlen)
{
    memset(sp, 0, sizeof *sp);
    sp->t = t;
    for (size_t i = 0; i < d; i++)
        sp->ns += in_s[i] != 0;
    sp->nu = d - sp->ns;
    if (sp->ns == 0)
        return ts_fail(err, errlen, "the secret subsequence is empty");
    sp->s_idx = malloc(sp->ns * sizeof *sp->s_idx);
    sp->u_idx = malloc((sp->nu + 1) * sizeof *sp->u_idx);
    if (sp->s_idx == NULL || sp->u_idx == NULL) {
        cip_split_free(sp);
        return ts_fail(err, errlen, "out of memory");
    }
    for (size_t i = 0, a = 0, c = 0; i < d; i++) {
        if (in_s[i])
            sp->s_idx[a++] = i;
        else
            sp->u_idx[c++] = i;
    }
    return 0;
}

/* Index k of the trace with S's points first: the order of K below. */
double cip_split_time(const cip_split *sp, size_t k)
{
    return k < sp->ns ? sp->t[sp->s_idx[k]] : sp->t[sp->u_idx[k - sp->ns]];
}

double cip_correlation(double l, double a, double b)
{
    double u = (a - b) / l;
    return exp(-0.5 * u * u);
}

/* ---------------------------------------------------- small linear algebra */

void cip_work_free(cip_work *w)
{
    gsl_matrix_free(w->uu);
    gsl_matrix_free(w->us);
    gsl_matrix_free(w->ss);
    gsl_matrix_free(w->su);
    gsl_matrix_free(w->dd);
    gsl_matrix_free(w->du);
    gsl_matrix_free(w->du2);
    gsl_vector_free(w->rcond);
    free(w->eig);
    memset(w, 0, sizeof *w);
}

int cip_work_alloc(cip_work *w, const cip_split *sp, int full, char *err,
                   size_t errlen)
{
    memset(w, 0, sizeof *w);
    size_t ns = sp->ns, nu = sp->nu > 0 ? sp->nu : 1, d = ns + nu;
    w->uu = gsl_matrix_alloc(nu, nu);
    w->us = gsl_matrix_alloc(nu, ns);
    w->ss = gsl_matrix_alloc(ns, ns);
    w->su = gsl_matrix_alloc(ns, nu);
    w->rcond = gsl_vector_alloc(3 * ns);
    w->eig = malloc(3 * (ns > nu ? ns : nu) * sizeof *w->eig);
    int ok = w->uu && w->us && w->ss && w->su && w->rcond && w->eig;
    if (ok && full) {
        w->dd = gsl_matrix_alloc(d, d);
        w->du = gsl_matrix_alloc(d, nu);
        w->du2 = gsl_matrix_alloc(d, nu);
        ok = w->dd && w->du && w->du2;
    }
    if (!ok) {
        cip_work_free(w);
        return ts_fail(err, errlen, "out of memory");
    }
    return 0;
}

void cip_symmetrize(gsl_matrix *m)
{
    for (size_t i = 0; i < m->size1; i++)
        for (size_t j = 0; j < i; j++) {
            double v =
                0.5 * (gsl_matrix_get(m, i, j) + gsl_matrix_get(m, j, i));
            gsl_matrix_set(m, i, j, v);
            gsl_matrix_set(m, j, i, v);
        }
}

/* Halvings per end of the spectrum: the Gershgorin interval of a matrix
 * scaled to unit largest entry is at most 2n wide, and 2n 2^-128 is far
 * below any double's precision at the scale of the matrix. */
#define STURM_STEPS 128

/* The number of eigenvalues of the tridiagonal (a, b) below x (Sturm
 * sequence of the LDL^T pivots; a pivot below pivmin in magnitude is taken
 * as -pivmin, as LAPACK's dstebz does). */
static size_t count_below(const double *a, const double *b, size_t n, double x,
                          double pivmin)
{
    size_t count = 0;
    double q = 1.0;
    for (size_t i = 0; i < n; i++) {
        q = a[i] - x - (i > 0 ? b[i - 1] * b[i - 1] / q : 0.0);
        if (fabs(q) < pivmin)
            q = -pivmin;
        count += q < 0.0;
    }
    return count;
}

/* The smallest x found with count_below(x) >= k + 1 (an upper bound on
 * the k-th smallest eigenvalue, 0-based) when upper, else the largest
 * with count_below(x) <= k (a lower bound on it). */
static double bisect(const double *a, const double *b, size_t n, size_t k,
                     double lo, double hi, double pivmin, double rel_tol,
                     int upper)
{
    /* rel_tol relative, or the absolute accuracy of the count itself
     * (about eps ||T||, ||T|| <= 2n here). */
    double floor = 16.0 * (double)n * DBL_EPSILON;
    for (int step = 0; step < STURM_STEPS; step++) {
        double mid = 0.5 * (lo + hi);
        if (!(mid > lo && mid < hi) ||
            hi - lo <= fmax(rel_tol * fmax(fabs(lo), fabs(hi)), floor))
            break;
        if (count_below(a, b, n, mid, pivmin) >= k + 1)
            hi = mid;
        else
            lo = mid;
    }
    return upper ? hi : lo;
}

int cip_eigen_range(gsl_matrix *m, double *scratch, double rel_tol, double *lo,
                    double *hi)
{
    size_t n = m->size1;
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double v = gsl_matrix_get(m, i, j);
            if (!isfinite(v))
                return -1;
            scale = fmax(scale, fabs(v));
        }
    /* Below 2^-1000 the power of two that scales m up would overflow:
     * there every eigenvalue is within n scale of 0, which is all any
     * caller needs of such a matrix. */
    if (scale < 0x1p-1000) {
        if (lo != NULL)
            *lo = -(double)n * scale;
        if (hi != NULL)
            *hi = (double)n * scale;
        return 0;
    }
    /* A power of two, so that the scaling is exact. */
    int e2;
    frexp(scale, &e2);
    gsl_matrix_scale(m, ldexp(1.0, -e2));
    double *a = scratch, *b = scratch + n, *tau = scratch + 2 * n;
    if (n == 1) {
        a[0] = gsl_matrix_get(m, 0, 0);
    } else {
        gsl_vector_view tv = gsl_vector_view_array(tau, n - 1);
        gsl_vector_view av = gsl_vector_view_array(a, n);
        gsl_vector_view bv = gsl_vector_view_array(b, n - 1);
        if (gsl_linalg_symmtd_decomp(m, &tv.vector) != GSL_SUCCESS ||
            gsl_linalg_symmtd_unpack_T(m, &av.vector, &bv.vector) !=
                GSL_SUCCESS)
            return -1;
    }
    /* Gershgorin bounds on the tridiagonal's spectrum. */
    double g_lo = INFINITY, g_hi = -INFINITY, b_max = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r =
            (i > 0 ? fabs(b[i - 1]) : 0.0) + (i + 1 < n ? fabs(b[i]) : 0.0);
        g_lo = fmin(g_lo, a[i] - r);
        g_hi = fmax(g_hi, a[i] + r);
        if (i + 1 < n)
            b_max = fmax(b_max, fabs(b[i]));
    }
    double width = fmax(g_hi - g_lo, 1.0) * 4.0 * DBL_EPSILON;
    g_lo -= width;
    g_hi += width;
    double pivmin = DBL_MIN * fmax(1.0, b_max * b_max);
    double unscale = ldexp(1.0, e2);
    if (lo != NULL)
        *lo = bisect(a, b, n, 0, g_lo, g_hi, pivmin, rel_tol, 0) * unscale;
    if (hi != NULL)
        *hi = bisect(a, b, n, n - 1, g_lo, g_hi, pivmin, rel_tol, 1) * unscale;
    return 0;
}

/* ------------------------------------- the prior at one length scale */

void cip_blocks_free(cip_blocks *b)
{
    gsl_matrix_free(b->chol);
    gsl_matrix_free(b->a);
    gsl_matrix_free(b->cond);
    memset(b, 0, sizeof *b);
}

int cip_blocks_alloc(cip_blocks *b, const cip_split *sp)
{
    size_t nu = sp->nu > 0 ? sp->nu : 1;
    b->chol = gsl_matrix_alloc(sp->ns, sp->ns);
    b->a = gsl_matrix_alloc(nu, sp->ns);
    b->cond = gsl_matrix_alloc(nu, nu);
    if (b->chol == NULL || b->a == NULL || b->cond == NULL) {
        cip_blocks_free(b);
        return -1;
    }
    return 0;
}

/* 0, or 1 when K_ss + nugget I does not factor (with a reciprocal
 * condition number of at least CIP_MIN_RCOND when need_rcond). */
void cip_correlations(const cip_split *sp, double l, gsl_matrix *k)
{
    size_t d = sp->ns + sp->nu;
    for (size_t i = 0; i < d; i++) {
        gsl_matrix_set(k, i, i, 1.0);
        for (size_t j = 0; j < i; j++) {
            double c = cip_correlation(l, cip_split_time(sp, i),
                                       cip_split_time(sp, j));
            gsl_matrix_set(k, i, j, c);
            gsl_matrix_set(k, j, i, c);
        }
    }
}

int cip_blocks_build(const cip_split *sp, const gsl_matrix *k, double nugget,
                     int need_rcond, cip_blocks *b, cip_work *w)
{
    size_t ns = sp->ns, nu = sp->nu;
    gsl_matrix_const_view k_ss = gsl_matrix_const_submatrix(k, 0, 0, ns, ns);
    gsl_matrix_memcpy(b->chol, &k_ss.matrix);
    for (size_t i = 0; i < ns; i++)
        *gsl_matrix_ptr(b->chol, i, i) += nugget;
    if (gsl_linalg_cholesky_decomp1(b->chol) != GSL_SUCCESS)
        return 1;
    if (need_rcond) {
        double rcond = 0.0;
        if (gsl_linalg_cholesky_rcond(b->chol, &rcond, w->rcond) !=
                GSL_SUCCESS ||
            !(rcond >= CIP_MIN_RCOND))
            return 1;
    }
    if (nu == 0)
        return 0;
    /* X = L^-1 K_su; K_{u|s} = K_uu + nugget I - X^T X; A^T = L^-T X. */
    gsl_matrix *x = w->su;
    gsl_matrix_const_view k_su = gsl_matrix_const_submatrix(k, 0, ns, ns, nu);
    gsl_matrix_const_view k_uu = gsl_matrix_const_submatrix(k, ns, ns, nu, nu);
    gsl_matrix_memcpy(x, &k_su.matrix);
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, 1.0,
                   b->chol, x);
    gsl_matrix_memcpy(b->cond, &k_uu.matrix);
    for (size_t i = 0; i < nu; i++)
        *gsl_matrix_ptr(b->cond, i, i) += nugget;
    gsl_blas_dgemm(CblasTrans, CblasNoTrans, -1.0, x, x, 1.0, b->cond);
    cip_symmetrize(b->cond);
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasTrans, CblasNonUnit, 1.0,
                   b->chol, x);
    gsl_matrix_transpose_memcpy(b->a, x);
    return 0;
}

/* Sigma_eff = A^T (cond_var K_{u|s} + sigma_z^2 I)^-1 A into eff (ns x ns,
 * may be NULL) and its top eigenvalue into *alpha (may be NULL). The
 * factorisation reads the lower triangle; the sum is positive definite as
 * long as sigma_z^2 dominates the rounding in K_{u|s}. */
int cip_effective(const gsl_matrix *a, const gsl_matrix *cond, double cond_var,
                  double cond_shift, double sigma_z, gsl_matrix *eff,
                  double *alpha, cip_work *w, char *err, size_t errlen)
{
    gsl_matrix *c = w->uu, *bm = w->us, *m = w->ss;
    size_t nu = cond->size1;
    gsl_matrix_memcpy(c, cond);
    for (size_t i = 0; i < nu; i++)
        *gsl_matrix_ptr(c, i, i) -= cond_shift;
    gsl_matrix_scale(c, cond_var);
    for (size_t i = 0; i < nu; i++)
        *gsl_matrix_ptr(c, i, i) += sigma_z * sigma_z;
    if (gsl_linalg_cholesky_decomp1(c) != GSL_SUCCESS)
        return ts_fail(err, errlen,
                       "Sigma_{u|s} + sigma_z^2 I is not "
                       "positive definite (sigma_z %g too small for the "
                       "rounding)",
                       sigma_z);
    /* Sigma_eff = (L^-1 A)^T (L^-1 A) with L L^T = C: symmetric positive
     * semi-definite by construction. */
    gsl_matrix_memcpy(bm, a);
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, 1.0, c,
                   bm);
    gsl_blas_dgemm(CblasTrans, CblasNoTrans, 1.0, bm, bm, 0.0, m);
    if (eff != NULL)
        gsl_matrix_memcpy(eff, m);
    if (alpha == NULL)
        return 0;
    double top;
    if (cip_eigen_range(m, w->eig, 1e-12, NULL, &top) != 0)
        return ts_fail(err, errlen,
                       "Sigma_eff has an entry that is not "
                       "finite");
    /* Sigma_eff is PSD: a slightly negative top eigenvalue is rounding. */
    *alpha = fmax(0.0, top);
    return 0;
}

/* L* of Eq. 4 from alpha*. */
double cip_eq4(double alpha, size_t ns, double sigma_z, double radius,
               double renyi_order)
{
    double s2 = sigma_z * sigma_z;
    return 0.5 * renyi_order * (1.0 + s2 * alpha) / s2 * (double)ns * radius *
           radius;
}

/* The independent prior's sigma_z: L* >= (lambda/2)|S| r^2 / sigma_z^2
 * (alpha* >= 0), with equality for it, so every admissible sigma_z is at
 * least this. */
double cip_independent_sigma_z(size_t ns, double radius, double renyi_order,
                               double epsilon)
{
    return sqrt(0.5 * renyi_order * (double)ns / epsilon) * radius;
}

int cip_check_epsilon(double epsilon, double rel_tol, char *err, size_t errlen)
{
    if (!(epsilon > 0.0) || !isfinite(epsilon))
        return ts_fail(err, errlen, "epsilon must be positive and finite");
    if (!(rel_tol >= 1e-12 && rel_tol < 0.5))
        return ts_fail(err, errlen,
                       "relative tolerance must be in [1e-12, 0.5)");
    return 0;
}
