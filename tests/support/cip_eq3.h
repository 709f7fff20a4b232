/* An independent route to the CIP loss of one secret perturbation (Eq. 3
 * of Meehan & Chaudhuri), for tests of inference/cip.c and of the
 * mechanism built on it: the conditional Gaussians are rebuilt from the
 * joint precision matrix by LU, not from Sigma_ss's Cholesky factor as
 * inference/cip.c does. */
#ifndef TRACESAN_TESTS_SUPPORT_CIP_EQ3_H
#define TRACESAN_TESTS_SUPPORT_CIP_EQ3_H

#include <check.h>
#include <math.h>
#include <stddef.h>

#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_permutation.h>

/* Largest trace eq3_build takes. */
#define EQ3_MAX_POINTS 64

/* Eq. 3 for a given Delta s, from the joint precision Q = Sigma^-1:
 * U | S = s ~ N(-Q_uu^-1 Q_us s, Q_uu^-1), and Z_u | S is that convolved
 * with N(0, sz^2 I); Z_s | S ~ N(s, sz^2 I). The Renyi divergence of two
 * Gaussians sharing a covariance is (lambda/2) times the Mahalanobis
 * distance of their means. */
typedef struct eq3 {
    size_t ns, nu;
    gsl_matrix *a;    /* nu x ns: the conditional mean map */
    gsl_matrix *cinv; /* nu x nu: (Sigma_{u|s} + sz^2 I)^-1 */
    double sz, lambda;
} eq3;

static inline gsl_matrix *lu_inverse(const gsl_matrix *m)
{
    size_t n = m->size1;
    gsl_matrix *lu = gsl_matrix_alloc(n, n);
    gsl_matrix *inv = gsl_matrix_alloc(n, n);
    gsl_permutation *p = gsl_permutation_alloc(n);
    int sign;
    gsl_matrix_memcpy(lu, m);
    ck_assert_int_eq(gsl_linalg_LU_decomp(lu, p, &sign), 0);
    ck_assert_int_eq(gsl_linalg_LU_invert(lu, p, inv), 0);
    gsl_permutation_free(p);
    gsl_matrix_free(lu);
    return inv;
}

static inline eq3 eq3_build(const double *t, size_t d, const unsigned char *in_s,
                     double l, double sx, double sz, double lambda)
{
    gsl_matrix *sigma = gsl_matrix_alloc(d, d);
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) {
            double u = (t[i] - t[j]) / l;
            gsl_matrix_set(sigma, i, j, sx * sx * exp(-0.5 * u * u));
        }
    gsl_matrix *q = lu_inverse(sigma);
    size_t s_idx[EQ3_MAX_POINTS], u_idx[EQ3_MAX_POINTS], ns = 0, nu = 0;
    for (size_t i = 0; i < d; i++) {
        if (in_s[i])
            s_idx[ns++] = i;
        else
            u_idx[nu++] = i;
    }
    gsl_matrix *quu = gsl_matrix_alloc(nu, nu);
    for (size_t i = 0; i < nu; i++)
        for (size_t j = 0; j < nu; j++)
            gsl_matrix_set(quu, i, j, gsl_matrix_get(q, u_idx[i], u_idx[j]));
    gsl_matrix *cond = lu_inverse(quu); /* Sigma_{u|s} */
    eq3 e = {.ns = ns, .nu = nu, .sz = sz, .lambda = lambda};
    e.a = gsl_matrix_calloc(nu, ns);
    for (size_t i = 0; i < nu; i++)
        for (size_t j = 0; j < ns; j++) {
            double v = 0.0;
            for (size_t k = 0; k < nu; k++)
                v -= gsl_matrix_get(cond, i, k) *
                     gsl_matrix_get(q, u_idx[k], s_idx[j]);
            gsl_matrix_set(e.a, i, j, v);
        }
    for (size_t i = 0; i < nu; i++)
        *gsl_matrix_ptr(cond, i, i) += sz * sz;
    e.cinv = lu_inverse(cond);
    gsl_matrix_free(cond);
    gsl_matrix_free(quu);
    gsl_matrix_free(q);
    gsl_matrix_free(sigma);
    return e;
}

static inline double eq3_loss(const eq3 *e, const double *ds)
{
    double mu[EQ3_MAX_POINTS], quad = 0.0, norm2 = 0.0;
    for (size_t i = 0; i < e->nu; i++) {
        mu[i] = 0.0;
        for (size_t j = 0; j < e->ns; j++)
            mu[i] += gsl_matrix_get(e->a, i, j) * ds[j];
    }
    for (size_t i = 0; i < e->nu; i++)
        for (size_t j = 0; j < e->nu; j++)
            quad += mu[i] * gsl_matrix_get(e->cinv, i, j) * mu[j];
    for (size_t j = 0; j < e->ns; j++)
        norm2 += ds[j] * ds[j];
    return 0.5 * e->lambda * (quad + norm2 / (e->sz * e->sz));
}

static inline void eq3_free(eq3 *e)
{
    gsl_matrix_free(e->a);
    gsl_matrix_free(e->cinv);
}

#endif
