/* Conditional Inferential Privacy (Meehan & Chaudhuri, Location Trace
 * Privacy Under Conditional Priors, Section 3.2): the worst-case Renyi loss
 * of the Gaussian mechanism Z = X + N(0, sigma_z^2 I) against a Gaussian
 * process conditional prior, one coordinate axis at a time.
 *
 * For timestamps t_1..t_d the prior covariance is the RBF kernel
 * Sigma_ij = sigma_x^2 exp(-(t_i - t_j)^2 / (2 l^2)) (or sigma_x^2 I for the
 * independent prior that geo-indistinguishability implicitly assumes). For
 * a secret subsequence S with complement U,
 *
 *   A         = Sigma_us Sigma_ss^-1
 *   Sigma_eff = A^T (Sigma_{u|s} + sigma_z^2 I)^-1 A
 *   L*        = (lambda/2) (1 + sigma_z^2 alpha*) / sigma_z^2 * |S| r^2,
 *
 * alpha* the top eigenvalue of Sigma_eff (Eq. 4). This is the maximum of
 * Eq. 3 over secret perturbations Delta s with ||Delta s||_2^2 <= |S| r^2,
 * the L2 ball that circumscribes the paper's L-infinity pairs, so it is an
 * upper bound on the loss over the discriminative pairs of Definition 2.2.
 *
 * Units: sigma_x, sigma_z and r share one length unit (metres in the CLI;
 * the paper's figures use normalised units), t and l share one time unit.
 * The guarantee is a Renyi divergence bound against GP priors; it is not
 * epsilon-DP and not geo-indistinguishability. */
#ifndef TRACESAN_INFERENCE_CIP_H
#define TRACESAN_INFERENCE_CIP_H

#include <stddef.h>

#include "inference/cip_prior.h"

/* Largest nugget, relative to sigma_x^2, that is added to Sigma's diagonal
 * when Sigma_ss is too ill-conditioned to factor. */
#define TS_CIP_MAX_JITTER 1e-8

typedef enum ts_cip_secret {
    TS_CIP_SECRET_EVERY_OTHER, /* t_1, t_3, t_5, ... (the paper's Fig. 2) */
    TS_CIP_SECRET_ALL,         /* every point: U is empty */
    TS_CIP_SECRET_RANGE,       /* the points with t0 <= t_i <= t1 */
} ts_cip_secret;


typedef struct ts_cip_result {
    double alpha;  /* top eigenvalue of Sigma_eff, 1 / length unit^2 */
    double loss;   /* L* */
    size_t secret; /* |S| */
    /* Nugget added to every diagonal entry of Sigma (length unit^2): 0 when
     * Sigma_ss factored as it is, else the loss is that of the prior
     * Sigma + jitter I, at most TS_CIP_MAX_JITTER sigma_x^2. */
    double jitter;
} ts_cip_result;

/* Fills in_s[0..d-1] with 1 for the points of S, 0 for U. t0, t1 are read
 * for TS_CIP_SECRET_RANGE only. -1 with err set when S would be empty. */
int ts_cip_secret_mask(ts_cip_secret kind, const double *t, size_t d,
                       double t0, double t1, unsigned char *in_s, char *err,
                       size_t errlen);

/* Sigma_eff, |S| x |S| row-major into sigma_eff (the points of S in trace
 * order), and the jitter used. t: d finite timestamps, 1 <= d <=
 * TS_CIP_MAX_POINTS. -1 with err set on bad input or when even the largest
 * jitter does not make Sigma_ss factor. */
int ts_cip_sigma_eff(const double *t, size_t d, const unsigned char *in_s,
                     const ts_cip_prior *prior, double sigma_z,
                     double *sigma_eff, double *jitter, char *err,
                     size_t errlen);

/* L* of Eq. 4 for noise sigma_z > 0, radius r > 0, Renyi order >= 1. */
int ts_cip_loss(const double *t, size_t d, const unsigned char *in_s,
                const ts_cip_prior *prior, double sigma_z, double radius,
                double renyi_order, ts_cip_result *out, char *err,
                size_t errlen);

/* The smallest sigma_z with L* <= epsilon at the prior's one length scale,
 * to relative tolerance rel_tol (1e-12 <= rel_tol < 0.5): *sigma_z meets
 * epsilon and sigma_z (1 - rel_tol) does not. `at` (may be NULL) receives
 * the result at *sigma_z. This covers that l only: L* is not monotone in
 * l for irregular timestamps (docs/cip.md), so covering every l <= l_max
 * takes ts_cip_min_sigma_z_sup. */
int ts_cip_min_sigma_z(const double *t, size_t d, const unsigned char *in_s,
                       const ts_cip_prior *prior, double radius,
                       double renyi_order, double epsilon, double rel_tol,
                       double *sigma_z, ts_cip_result *at, char *err,
                       size_t errlen);

/* ---------------------------------------------- every l in (0, l_max]
 *
 * A certified upper bound on sup over 0 < l <= l_max of L*(l), for the RBF
 * prior (docs/cip.md, "Every length scale at once"). L* is evaluated
 * exactly at a grid of length scales; between two of them, l_a < l_b, a
 * bound follows from the Loewner order K(l_b) <= (l_b / l_a) K(l_a) of the
 * correlation matrices (Bochner: the RBF kernel's spectral density at l_b
 * is at most l_b / l_a times that at l_a), which moves the kriging weights
 * A(l) = K_us K_ss^-1 by a computable amount; below the first grid point
 * the correlations through U vanish. The grid is refined where the bound
 * is not within TS_CIP_SUP_SLACK of the largest L* evaluated, at most
 * TS_CIP_SUP_MAX_EVALUATIONS times; the bound returned is valid whatever
 * the refinement reached. Rounding is covered by margins from standard
 * backward-error bounds (an argument, docs/cip.md), not by interval
 * arithmetic. */

/* Relative gap between the certified bound and the largest L* evaluated at
 * which the refinement stops. */
#define TS_CIP_SUP_SLACK 0.01
/* Length scales evaluated per bound, at most. */
#define TS_CIP_SUP_MAX_EVALUATIONS 1024
/* Largest trace the certified search takes: each evaluation is O(d^3). */
#define TS_CIP_SUP_MAX_POINTS 128

typedef struct ts_cip_sup_result {
    /* Certified upper bound on sup_{0 < l <= l_max} L*(l); INFINITY when
     * none could be established (ill_conditioned, or the refinement ran
     * out of evaluations where the bound diverges). */
    double loss;
    /* The largest L* evaluated (a lower bound on the sup) and its l. */
    double peak_loss;
    double peak_length_scale;
    size_t evaluations;  /* length scales evaluated */
    /* 1 when Sigma_ss at l_max needs a nugget to factor: the sup is then
     * not computed (loss INFINITY), as the nugget's prior is a different,
     * rougher one (see ts_cip_result.jitter). */
    int ill_conditioned;
} ts_cip_sup_result;

/* When the refinement may stop: once the bound is within slack (relative)
 * or abs_slack (absolute) of the largest L* evaluated, or at most enough
 * (a caller that only needs to know it is under a threshold), or once an
 * evaluated L* exceeds give_up (a caller that only needs to know the sup
 * is above it; the bound returned is then not tight). */
typedef struct ts_cip_sup_goal {
    double slack, abs_slack, enough, give_up;
} ts_cip_sup_goal;

/* The certified bound for noise sigma_z > 0. prior->length_scale is l_max;
 * an independent prior has no l (L* is then exact and constant). t: d
 * finite timestamps, 1 <= d <= TS_CIP_SUP_MAX_POINTS. goal NULL: within
 * TS_CIP_SUP_SLACK. */
int ts_cip_sup_loss(const double *t, size_t d, const unsigned char *in_s,
                    const ts_cip_prior *prior, double sigma_z, double radius,
                    double renyi_order, const ts_cip_sup_goal *goal,
                    ts_cip_sup_result *out, char *err, size_t errlen);

/* The certified bound over the caller's grid ls[0..n-1] (ascending, every
 * entry in (0, l_max], the last one l_max), without refinement: what the
 * grid alone proves about every l in (0, l_max]. */
int ts_cip_sup_loss_on_grid(const double *t, size_t d,
                            const unsigned char *in_s,
                            const ts_cip_prior *prior, double sigma_z,
                            double radius, double renyi_order,
                            const double *ls, size_t n,
                            ts_cip_sup_result *out, char *err, size_t errlen);

/* A sigma_z whose certified bound is at most epsilon, within relative
 * tolerance rel_tol of the smallest that the grid it refines (once, at
 * the independent prior's sigma_z) certifies; `at` (may be NULL) receives
 * the certificate at *sigma_z. at->ill_conditioned set (return 0,
 * *sigma_z INFINITY) when the trace cannot be certified. */
int ts_cip_min_sigma_z_sup(const double *t, size_t d,
                           const unsigned char *in_s,
                           const ts_cip_prior *prior, double radius,
                           double renyi_order, double epsilon, double rel_tol,
                           double *sigma_z, ts_cip_sup_result *at, char *err,
                           size_t errlen);

#endif
