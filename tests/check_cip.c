/* CIP calibration: checked against the closed form of a two-point trace,
 * against a brute-force maximisation of Eq. 3 over the ball of secret
 * perturbations (the conditional Gaussians rebuilt from the precision
 * matrix, an independent route to Sigma_eff), against the independent
 * prior's (lambda/2)|S| r^2 / sigma_z^2, and on the calibration's claims:
 * the loss grows with l and falls with sigma_z, and the smallest sigma_z
 * found at l_max meets epsilon at every l <= l_max while one tolerance
 * below does not. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_permutation.h>

#include "inference/cip.h"
#include "tests/support/check_run.h"
#include "tests/support/cip_eq3.h"

static void even_times(double *t, size_t d, double interval)
{
    for (size_t i = 0; i < d; i++)
        t[i] = (double)i * interval;
}

static ts_cip_result loss_of(const double *t, size_t d,
                             const unsigned char *in_s, double l,
                             double sigma_x, double sigma_z, double r,
                             double lambda)
{
    ts_cip_prior prior = {.sigma_x = sigma_x, .length_scale = l};
    ts_cip_result res;
    char err[200] = "";
    ck_assert_msg(ts_cip_loss(t, d, in_s, &prior, sigma_z, r, lambda, &res,
                              err, sizeof err) == 0,
                  "ts_cip_loss: %s", err);
    return res;
}

TS_TEST(test_two_point_closed_form)
{
    const double dts[] = {0.5, 1.0, 2.0};
    const double ls[] = {0.7, 1.0, 3.0};
    const double szs[] = {0.3, 1.0, 4.0};
    const unsigned char in_s[2] = {1, 0};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < 3; c++) {
                double t[2] = {10.0, 10.0 + dts[a]};
                double sx = 1.7, sz = szs[c], r = 2.5, lambda = 3.0;
                double rho = exp(-dts[a] * dts[a] / (2.0 * ls[b] * ls[b]));
                /* Z_u | s ~ N(rho s, sx^2 (1 - rho^2) + sz^2). */
                double alpha =
                    rho * rho / (sx * sx * (1.0 - rho * rho) + sz * sz);
                double want = 0.5 * lambda * (1.0 / (sz * sz) + alpha) * r * r;
                ts_cip_result res =
                    loss_of(t, 2, in_s, ls[b], sx, sz, r, lambda);
                ck_assert_uint_eq(res.secret, 1);
                ck_assert_double_eq_tol(res.alpha, alpha, 1e-12 * alpha);
                ck_assert_double_eq_tol(res.loss, want, 1e-12 * want);
                ck_assert(res.jitter == 0.0);
            }
}
END_TEST

/* The largest Eq. 3 loss over a grid of directions on the sphere of
 * radius sqrt(|S|) r (|S| of 2 or 3). */
static double brute_max(const eq3 *e, double r)
{
    double rad = sqrt((double)e->ns) * r, best = 0.0;
    if (e->ns == 2) {
        for (int k = 0; k < 20000; k++) {
            double th = M_PI * k / 20000.0; /* +-Delta s lose the same */
            double ds[2] = {rad * cos(th), rad * sin(th)};
            best = fmax(best, eq3_loss(e, ds));
        }
        return best;
    }
    ck_assert_uint_eq(e->ns, 3);
    for (int a = 0; a <= 600; a++) {
        double th = M_PI * a / 600.0;
        for (int b = 0; b < 1200; b++) {
            double ph = 2.0 * M_PI * b / 1200.0;
            double ds[3] = {rad * sin(th) * cos(ph), rad * sin(th) * sin(ph),
                            rad * cos(th)};
            best = fmax(best, eq3_loss(e, ds));
        }
    }
    return best;
}

TS_TEST(test_brute_force_eq3)
{
    struct {
        size_t d;
        double interval, l, sz;
        int range; /* secret = points in [1.5, 3.5] instead of every other */
    } cases[] = {
        {4, 1.0, 1.0, 0.5, 0},  {4, 1.0, 2.0, 1.0, 0},
        {5, 1.0, 1.0, 2.0, 0},  {6, 1.0, 1.5, 0.7, 0},
        {5, 1.0, 1.2, 0.8, 1},  {7, 0.75, 0.6, 0.3, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double t[16];
        unsigned char in_s[16];
        even_times(t, cases[c].d, cases[c].interval);
        char err[200] = "";
        ck_assert_int_eq(ts_cip_secret_mask(cases[c].range
                                                ? TS_CIP_SECRET_RANGE
                                                : TS_CIP_SECRET_EVERY_OTHER,
                                            t, cases[c].d, 1.5, 3.5, in_s,
                                            err, sizeof err),
                         0);
        double sx = 1.3, r = 0.9, lambda = 2.0;
        ts_cip_result res = loss_of(t, cases[c].d, in_s, cases[c].l, sx,
                                    cases[c].sz, r, lambda);
        eq3 e = eq3_build(t, cases[c].d, in_s, cases[c].l, sx, cases[c].sz,
                          lambda);
        ck_assert_uint_eq(e.ns, res.secret);
        double best = brute_max(&e, r);
        eq3_free(&e);
        /* The grid never beats the eigenvector and comes within the
         * angular resolution of it. */
        ck_assert_msg(best <= res.loss * (1.0 + 1e-9) &&
                          best >= res.loss * (1.0 - 1e-4),
                      "case %zu: brute force %.12g, L* %.12g", c, best,
                      res.loss);
    }
}
END_TEST

TS_TEST(test_independent_and_all_secret)
{
    double t[10];
    unsigned char every_other[10], all[10];
    char err[200];
    even_times(t, 10, 1.0);
    ck_assert_int_eq(ts_cip_secret_mask(TS_CIP_SECRET_EVERY_OTHER, t, 10, 0,
                                        0, every_other, err, sizeof err), 0);
    ck_assert_int_eq(ts_cip_secret_mask(TS_CIP_SECRET_ALL, t, 10, 0, 0, all,
                                        err, sizeof err), 0);
    const double szs[] = {0.1, 1.0, 7.0};
    for (size_t k = 0; k < 3; k++) {
        double sz = szs[k], r = 3.0, lambda = 4.0;
        ts_cip_prior ind = {.sigma_x = 2.0, .independent = 1};
        ts_cip_result res;
        ck_assert_int_eq(ts_cip_loss(t, 10, every_other, &ind, sz, r, lambda,
                                     &res, err, sizeof err), 0);
        double want = 0.5 * lambda * 5.0 * r * r / (sz * sz);
        ck_assert(res.alpha == 0.0);
        ck_assert_double_eq_tol(res.loss, want, 1e-12 * want);
        /* With every point secret nothing is inferred through U. */
        res = loss_of(t, 10, all, 2.0, 1.0, sz, r, lambda);
        want = 0.5 * lambda * 10.0 * r * r / (sz * sz);
        ck_assert(res.alpha == 0.0);
        ck_assert_double_eq_tol(res.loss, want, 1e-12 * want);
    }
}
END_TEST

TS_TEST(test_monotone_in_length_scale_and_noise)
{
    double t[10];
    unsigned char in_s[10];
    char err[200];
    even_times(t, 10, 1.0);
    ck_assert_int_eq(ts_cip_secret_mask(TS_CIP_SECRET_EVERY_OTHER, t, 10, 0,
                                        0, in_s, err, sizeof err), 0);
    const double szs[] = {0.2, 0.5, 1.0, 3.0, 10.0};
    for (size_t k = 0; k < 5; k++) {
        double prev = 0.0;
        for (double l = 0.1; l <= 4.0 + 1e-9; l += 0.05) {
            double loss = loss_of(t, 10, in_s, l, 1.0, szs[k], 1.0, 2.0).loss;
            ck_assert_msg(loss >= prev * (1.0 - 1e-9),
                          "loss fell with l at l %g, sigma_z %g: %g < %g", l,
                          szs[k], loss, prev);
            prev = loss;
        }
    }
    for (double l = 0.25; l <= 3.0; l += 0.25) {
        double prev = INFINITY;
        for (double sz = 0.05; sz <= 20.0; sz *= 1.1) {
            double loss = loss_of(t, 10, in_s, l, 1.0, sz, 1.0, 2.0).loss;
            ck_assert(loss < prev);
            prev = loss;
        }
    }
}
END_TEST

TS_TEST(test_min_sigma_z_meets_epsilon_below_l_max)
{
    double t[10];
    unsigned char in_s[10];
    char err[200] = "";
    even_times(t, 10, 1.0);
    ck_assert_int_eq(ts_cip_secret_mask(TS_CIP_SECRET_EVERY_OTHER, t, 10, 0,
                                        0, in_s, err, sizeof err), 0);
    const double epss[] = {0.1, 1.0, 5.0};
    const double l_maxes[] = {0.5, 1.0, 3.0};
    const double tol = 1e-6, r = 1.0, lambda = 2.0;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            ts_cip_prior prior = {.sigma_x = 1.0, .length_scale = l_maxes[b]};
            double sz;
            ts_cip_result at;
            ck_assert_msg(ts_cip_min_sigma_z(t, 10, in_s, &prior, r, lambda,
                                             epss[a], tol, &sz, &at, err,
                                             sizeof err) == 0,
                          "%s", err);
            ck_assert(at.loss <= epss[a]);
            double below =
                loss_of(t, 10, in_s, l_maxes[b], 1.0, sz * (1.0 - tol), r,
                        lambda).loss;
            ck_assert_msg(below > epss[a], "sigma_z %g (1 - tol) meets eps",
                          sz);
            for (double l = 0.05; l <= l_maxes[b]; l += 0.05)
                ck_assert(loss_of(t, 10, in_s, l, 1.0, sz, r, lambda).loss <=
                          epss[a]);
        }
    /* The independent prior's sigma_z is closed-form. */
    ts_cip_prior ind = {.sigma_x = 1.0, .independent = 1};
    double sz;
    ck_assert_int_eq(ts_cip_min_sigma_z(t, 10, in_s, &ind, r, lambda, 1.0,
                                        tol, &sz, NULL, err, sizeof err), 0);
    ck_assert_double_eq_tol(sz, sqrt(0.5 * lambda * 5.0 * r * r), 1e-12);
}
END_TEST

TS_TEST(test_ill_conditioned_prior_jitters_within_bound_or_refuses)
{
    double t[12];
    unsigned char in_s[12];
    char err[200] = "";
    even_times(t, 12, 0.01);
    ck_assert_int_eq(ts_cip_secret_mask(TS_CIP_SECRET_EVERY_OTHER, t, 12, 0,
                                        0, in_s, err, sizeof err), 0);
    ts_cip_prior prior = {.sigma_x = 2.0, .length_scale = 30.0};
    ts_cip_result res;
    int rc = ts_cip_loss(t, 12, in_s, &prior, 1.0, 1.0, 2.0, &res, err,
                         sizeof err);
    if (rc == 0) {
        ck_assert(res.jitter > 0.0);
        ck_assert(res.jitter <= TS_CIP_MAX_JITTER * 4.0 * (1.0 + 1e-9));
        ck_assert(isfinite(res.loss) && res.loss > 0.0);
    } else {
        ck_assert(strstr(err, "singular") != NULL);
    }
}
END_TEST

TS_TEST(test_rejects_bad_input)
{
    double t[3] = {0, 1, 2};
    unsigned char none[3] = {0, 0, 0}, some[3] = {1, 0, 1};
    char err[200];
    ts_cip_prior prior = {.sigma_x = 1.0, .length_scale = 1.0};
    ts_cip_result res;
    ck_assert_int_eq(ts_cip_loss(t, 3, none, &prior, 1, 1, 2, &res, err,
                                 sizeof err), -1);
    ck_assert_int_eq(ts_cip_loss(t, 3, some, &prior, 0, 1, 2, &res, err,
                                 sizeof err), -1);
    ck_assert_int_eq(ts_cip_loss(t, 3, some, &prior, 1, 1, 0.5, &res, err,
                                 sizeof err), -1);
    ck_assert_int_eq(ts_cip_secret_mask(TS_CIP_SECRET_RANGE, t, 3, 5, 6, none,
                                        err, sizeof err), -1);
}
END_TEST

int main(void)
{
    gsl_set_error_handler_off();
    return ts_check_main("cip", 300, NULL, NULL);
}
