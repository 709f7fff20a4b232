/* The prior of the CIP calibration at one length scale, as the blocks of
 * its correlation matrix K (unit diagonal, K_ij = exp(-(t_i - t_j)^2 /
 * (2 l^2))) split into the secret points S and the rest U: the Cholesky
 * factor of K_ss, the kriging weights A = K_us K_ss^-1 and the conditional
 * correlation K_{u|s} = K_uu - A K_su. sigma_x enters only afterwards, in
 * sigma_x^2 K_{u|s} + sigma_z^2 I, so that no square of a length ever
 * underflows inside a factorisation.
 *
 * Internal to inference/cip.c (Eq. 4 at one length scale) and
 * inference/cip_sup.c (its certified supremum over length scales); the
 * public interface is inference/cip.h. */
#ifndef TRACESAN_INFERENCE_CIP_BLOCKS_H
#define TRACESAN_INFERENCE_CIP_BLOCKS_H

#include <stddef.h>

#include <gsl/gsl_matrix.h>

#include "inference/cip_prior.h"

/* Below this reciprocal condition number, K_ss^-1 K_su would carry
 * relative errors above about 1e-6 (cond x machine epsilon). */
#define CIP_MIN_RCOND 1e-10
/* sigma_x, sigma_z and r are squared: outside these bounds their squares
 * leave double's normal range. */
#define CIP_MIN_SCALE 1e-150
#define CIP_MAX_SCALE 1e150

int cip_scale_ok(double x);
/* -1 with err set unless the trace, mask, prior and sigma_z are usable. */
int cip_check_model(const double *t, size_t d, const unsigned char *in_s,
                    const ts_cip_prior *prior, double sigma_z, char *err,
                    size_t errlen);
int cip_check_loss_params(double radius, double renyi_order, char *err,
                          size_t errlen);
int cip_check_epsilon(double epsilon, double rel_tol, char *err, size_t errlen);

/* The trace split into S and U. K's rows and columns are ordered S first,
 * then U, each in trace order. */
typedef struct cip_split {
    const double *t;
    size_t ns, nu;
    size_t *s_idx, *u_idx; /* into t */
} cip_split;

int cip_split_init(cip_split *sp, const double *t, size_t d,
                   const unsigned char *in_s, char *err, size_t errlen);
void cip_split_free(cip_split *sp);
/* The timestamp of K's row k. */
double cip_split_time(const cip_split *sp, size_t k);
double cip_correlation(double l, double a, double b);

/* Scratch sized for one split; an empty U gets 1 x 1 placeholders (GSL
 * matrices cannot be empty). dd and du only when allocated `full`. */
typedef struct cip_work {
    gsl_matrix *uu;    /* nu x nu */
    gsl_matrix *us;    /* nu x ns */
    gsl_matrix *ss;    /* ns x ns */
    gsl_matrix *su;    /* ns x nu */
    gsl_matrix *dd;    /* d x d */
    gsl_matrix *du;    /* d x nu */
    gsl_matrix *du2;   /* d x nu */
    gsl_vector *rcond; /* 3 ns */
    double *eig;       /* 3 max(ns, nu): cip_eigen_range's scratch */
} cip_work;

int cip_work_alloc(cip_work *w, const cip_split *sp, int full, char *err,
                   size_t errlen);
void cip_work_free(cip_work *w);

void cip_symmetrize(gsl_matrix *m);
/* Bounds on the extreme eigenvalues of the symmetric n x n m (destroyed;
 * lo, hi may be NULL): *lo <= lambda_min and *hi >= lambda_max, each
 * within rel_tol relative (down to about eps ||m||, and ignoring m's own
 * rounding). scratch holds 3 n doubles. GSL's QR iteration
 * (gsl_eigen_symm) has no iteration cap and never ends on a matrix of
 * subnormal entries, so this is a Householder tridiagonalisation (a fixed
 * number of steps) and a Sturm-count bisection of at most 128 halvings
 * per end. -1 when an entry is not finite. */
int cip_eigen_range(gsl_matrix *m, double *scratch, double rel_tol, double *lo,
                    double *hi);

/* The correlation matrix at length scale l, rows and columns S then U,
 * into k (d x d). */
void cip_correlations(const cip_split *sp, double l, gsl_matrix *k);

/* K's blocks at one length scale, with `nugget` on K's diagonal. */
typedef struct cip_blocks {
    gsl_matrix *chol; /* ns x ns: lower Cholesky factor of K_ss */
    gsl_matrix *a;    /* nu x ns: A = K_us K_ss^-1 */
    gsl_matrix *cond; /* nu x nu: K_{u|s} = K_uu - A K_su */
} cip_blocks;

int cip_blocks_alloc(cip_blocks *b, const cip_split *sp);
void cip_blocks_free(cip_blocks *b);
/* Fills b from the correlations k (cip_correlations at one l): 0, or 1
 * when K_ss + nugget I does not factor (with a reciprocal condition
 * number of at least CIP_MIN_RCOND when need_rcond). */
int cip_blocks_build(const cip_split *sp, const gsl_matrix *k, double nugget,
                     int need_rcond, cip_blocks *b, cip_work *w);

/* Sigma_eff = A^T (cond_var (cond - cond_shift I) + sigma_z^2 I)^-1 A
 * (a: nu x ns, cond: nu x nu) into eff (ns x ns, may be NULL) and its top
 * eigenvalue, clamped at 0, into *alpha (may be NULL). With cond K_{u|s},
 * cond_var sigma_x^2 and no shift this is Section 3.2's Sigma_eff; the
 * certified search passes a smaller matrix for a lower bound on C. */
int cip_effective(const gsl_matrix *a, const gsl_matrix *cond, double cond_var,
                  double cond_shift, double sigma_z, gsl_matrix *eff,
                  double *alpha, cip_work *w, char *err, size_t errlen);

/* L* of Eq. 4 from alpha*. */
double cip_eq4(double alpha, size_t ns, double sigma_z, double radius,
               double renyi_order);
/* sigma_z of the independent prior: L* >= (lambda/2)|S| r^2 / sigma_z^2
 * (alpha* >= 0), with equality there, so every sigma_z that meets epsilon
 * is at least this. */
double cip_independent_sigma_z(size_t ns, double radius, double renyi_order,
                               double epsilon);

#endif
