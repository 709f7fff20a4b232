/* The held-out MAP identity adversary: a hand-counted case (MAP table,
 * tie rule, prior fallback, plug-in MI, resubstitution), the two extremes
 * of the acceptance (an identity-free channel: Bayes error
 * 1 - 1/k, MI ~ 0; a perfectly identifying one: 0 and log2 k), the fine
 * grid where resubstitution collapses and the held-out estimate does not,
 * the row split, and bad input. Every sample comes from a seeded generator,
 * so the results are fixed; the tolerances say how far they could fall by
 * chance for any seed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/identity.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"

static ts_identity_result estimate(const ts_identity_obs *train, size_t nt,
                                   const ts_identity_obs *eval, size_t ne,
                                   size_t users, double cell_m)
{
    ts_identity_result r;
    char err[200] = "";
    ck_assert_msg(ts_identity_estimate(train, nt, eval, ne, users, cell_m, &r,
                                       err, sizeof err) == 0,
                  "ts_identity_estimate failed: %s", err);
    ck_assert(r.bayes_error >= 0.0 && r.bayes_error <= 1.0);
    ck_assert(r.mi_bits >= 0.0);
    return r;
}

/* Two users, cells of 10 m along x (y = 0):
 *   cell 0: train a,a,b  eval a,b      -> guess a (2 > 1): eval b wrong
 *   cell 1: train a,b    eval a,b      -> tie, guess a (smaller index):
 *                                         eval b wrong
 *   cell 2: train b      eval a        -> guess b: eval a wrong
 *   cell 3: no training  eval b,b      -> prior: training a 3, b 3, tie,
 *                                         guess a: both wrong
 * Evaluation: 8 rows (a third a in cell 0), 5 wrong (cell 0: b; 1: b;
 * 2: a; 3: b, b). Pooled counts n_ju: cell 0: a 4, b 2; 1: a 2, b 2;
 * 2: a 1, b 1; 3: b 2; n = 14, n_a = n_b = 7; resubstitution right
 * 4 + 2 + 1 + 2 = 9 of 14. */
TS_TEST(test_hand_counted)
{
    enum { A = 0, B = 1 };
    const ts_identity_obs train[] = {
        { A, { 1, 0 } }, { A, { 2, 0 } }, { B, { 3, 0 } },
        { B, { 11, 0 } }, { A, { 12, 0 } },
        { B, { 25, 0 } },
    };
    const ts_identity_obs eval[] = {
        { A, { 0, 0 } }, { B, { 9, 0 } },
        { A, { 15, 0 } }, { B, { 19, 0 } },
        { A, { 21, 0 } },
        { B, { 30, 0 } }, { B, { 39, 0 } },
        /* An evaluation row: it leaves the training tie (a 3, b 3) of
         * the prior alone. */
        { A, { 5, 0 } },
    };
    ts_identity_result r = estimate(train, 6, eval, 8, 2, 10.0);
    ck_assert_double_eq_tol(r.bayes_error, 5.0 / 8.0, 1e-15);
    ck_assert_uint_eq(r.prior_guess, A);
    ck_assert_uint_eq(r.eval_unseen, 2);
    ck_assert_uint_eq(r.train_cells, 3);
    ck_assert_uint_eq(r.pooled_cells, 4);
    ck_assert_uint_eq(r.users, 2);
    ck_assert_uint_eq(r.train_rows, 6);
    ck_assert_uint_eq(r.eval_rows, 8);
    double n = 14, na = 7, nb = 7;
    double cells[4][2] = { { 4, 2 }, { 2, 2 }, { 1, 1 }, { 0, 2 } };
    double mi = 0.0, correct = 0.0;
    for (int j = 0; j < 4; j++) {
        double nj = cells[j][0] + cells[j][1];
        for (int u = 0; u < 2; u++)
            if (cells[j][u] > 0)
                mi += cells[j][u] / n *
                      log2(cells[j][u] * n / (nj * (u == 0 ? na : nb)));
        correct += fmax(cells[j][0], cells[j][1]);
    }
    ck_assert_double_eq_tol(r.mi_bits, mi, 1e-12);
    ck_assert_double_eq_tol(r.resubstitution_error, 1.0 - correct / n,
                            1e-15);
    ck_assert_double_eq_tol(r.mi_bias_bits, 1.0 * 3.0 / (2.0 * n * log(2.0)),
                            1e-15);
}
END_TEST

/* k users, per_user training and per_user evaluation rows each, uniform
 * over [0, side)^2 for every user (identity-free) or each in its own
 * square (identifying). */
enum { K = 4, PER_USER = 5000 };
static const double SIDE = 1600.0;

static void fill_uniform(ts_rng *rng, ts_identity_obs *obs, int own_square)
{
    for (size_t u = 0; u < K; u++)
        for (size_t i = 0; i < PER_USER; i++) {
            ts_identity_obs *o = &obs[u * PER_USER + i];
            o->user = (uint32_t)u;
            if (own_square) {
                /* 600 m squares 1100 m apart: gaps of 500 m, wider than
                 * the largest cell tried, so no cell can hold two users
                 * wherever the grid's origin falls. */
                o->z.x = 1100.0 * (double)(u % 2) +
                         600.0 * ts_rng_uniform_open(rng);
                o->z.y = 1100.0 * (double)(u / 2) +
                         600.0 * ts_rng_uniform_open(rng);
            } else {
                o->z.x = SIDE * ts_rng_uniform_open(rng);
                o->z.y = SIDE * ts_rng_uniform_open(rng);
            }
        }
}

/* Training rows then evaluation rows, both by fill_uniform from one
 * seeded stream; the caller frees both. */
static void draw(uint64_t seed, int own_square, ts_identity_obs **train,
                 ts_identity_obs **eval)
{
    *train = malloc(K * PER_USER * sizeof **train);
    *eval = malloc(K * PER_USER * sizeof **eval);
    ck_assert(*train != NULL && *eval != NULL);
    ts_rng *rng = ts_rng_new_seeded(seed);
    fill_uniform(rng, *train, own_square);
    fill_uniform(rng, *eval, own_square);
    ts_rng_free(rng);
}

/* Identity-free: every user's reports have one distribution, so any
 * classifier fitted on the training rows is independent of the
 * evaluation rows. Given the classifier, let a_u be the probability mass
 * of the cells it maps to u (sum_u a_u = 1). An evaluation row of user u
 * is guessed right with probability a_u, independently, so the number
 * right has mean m * sum_u a_u = m (m = PER_USER evaluation rows per user)
 * and variance m * sum_u a_u (1 - a_u) <= m (1 - 1/k) (sum a_u^2 >= 1/k).
 * The error rate over k m rows therefore has mean exactly 1 - 1/k and
 * standard deviation at most sqrt(m (1 - 1/k)) / (k m) = 0.0031 for
 * k = 4, m = 5000; the test allows 5 of them, 0.0153.
 *
 * The plug-in MI of n = 2 k m independent rows over C cells: 2 n ln 2 * I
 * is asymptotically chi-square with (k - 1)(C - 1) degrees of freedom, so
 * I has mean (k - 1)(C - 1) / (2 n ln 2) (the result's mi_bias_bits) and
 * standard deviation sqrt(2 (k - 1)(C - 1)) / (2 n ln 2); allowed: the
 * bias plus 5 standard deviations (0.0138 + 0.0035 bits for 100 m cells,
 * C = 256). */
TS_TEST(test_identity_free_channel)
{
    ts_identity_obs *train, *eval;
    draw(1301, 0, &train, &eval);
    const double sizes[] = { 50, 100, 200, 400 };
    const double m = PER_USER, k = K;
    const double error_tol = 5.0 * sqrt(m * (1.0 - 1.0 / k)) / (k * m);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        ts_identity_result r =
            estimate(train, K * PER_USER, eval, K * PER_USER, K, sizes[s]);
        ck_assert_msg(fabs(r.bayes_error - (1.0 - 1.0 / k)) <= error_tol,
                      "cell %g m: Bayes error %.4f, expected 0.75 +- %.4f",
                      sizes[s], r.bayes_error, error_tol);
        double n = 2.0 * k * m;
        double dof = (k - 1.0) * ((double)r.pooled_cells - 1.0);
        double mi_sd = sqrt(2.0 * dof) / (2.0 * n * log(2.0));
        ck_assert_double_eq_tol(r.mi_bias_bits, dof / (2.0 * n * log(2.0)),
                                1e-15);
        ck_assert_msg(r.mi_bits <= r.mi_bias_bits + 5.0 * mi_sd,
                      "cell %g m: MI %.5f bits above bias %.5f + 5 sd %.5f",
                      sizes[s], r.mi_bits, r.mi_bias_bits, mi_sd);
        /* Every cell is hit (>= 16 rows per cell expected at 50 m), so
         * no evaluation row needs the prior. */
        ck_assert_uint_eq(r.eval_unseen, 0);
        ck_assert_uint_eq(r.users, K);
    }
    free(train);
    free(eval);
}
END_TEST

/* Identifying: each user reports in its own area and no cell straddles two
 * areas, so the MAP guess is right in every cell a training row reaches;
 * with about 35 training rows per 50 m cell, every cell is reached (the
 * test checks eval_unseen = 0, which makes the result exact). Then the
 * error is 0 and I(U; Z) = H(U) = log2 k, the pooled users being balanced,
 * up to rounding of the log sums (1e-9). */
TS_TEST(test_identifying_channel)
{
    ts_identity_obs *train, *eval;
    draw(1302, 1, &train, &eval);
    const double sizes[] = { 50, 100, 200, 400 };
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        ts_identity_result r =
            estimate(train, K * PER_USER, eval, K * PER_USER, K, sizes[s]);
        ck_assert_uint_eq(r.eval_unseen, 0);
        ck_assert_double_eq(r.bayes_error, 0.0);
        ck_assert_double_eq(r.resubstitution_error, 0.0);
        ck_assert_double_eq_tol(r.mi_bits, log2((double)K), 1e-9);
    }
    /* Unbalanced users: I(U; Z) = H(U), no longer log2 k. User 0 keeps
     * its 2 m rows, the others half of theirs. */
    size_t n_train = 0, n_eval = 0;
    for (size_t i = 0; i < K * PER_USER; i++)
        if (train[i].user == 0 || i % 2 == 0) {
            train[n_train++] = train[i];
            eval[n_eval++] = eval[i];
        }
    ts_identity_result r = estimate(train, n_train, eval, n_eval, K, 100.0);
    double p0 = 2.0 / 5.0, p = 1.0 / 5.0;
    ck_assert_double_eq_tol(r.mi_bits,
                            -(p0 * log2(p0) + 3.0 * p * log2(p)), 1e-9);
    ck_assert_double_eq(r.bayes_error, 0.0);
    free(train);
    free(eval);
}
END_TEST

/* On a 1 m grid nearly every one of the 40,000 rows has a cell of its own:
 * the paper's resubstitution estimate falls to about 0 although the
 * channel carries no identity (the paper's own caveat), while the held-out
 * rows mostly land in cells without training rows, are guessed from the
 * prior and keep the error near 1 - 1/k: exactly 0.75 for the prior-guessed
 * rows (the evaluation set is balanced), with the same binomial tolerance
 * as above for the few seen ones. */
TS_TEST(test_fine_grid_resubstitution_collapses)
{
    ts_identity_obs *train, *eval;
    draw(1303, 0, &train, &eval);
    ts_identity_result r =
        estimate(train, K * PER_USER, eval, K * PER_USER, K, 1.0);
    ck_assert_msg(r.resubstitution_error < 0.02,
                  "resubstitution %.4f", r.resubstitution_error);
    const double m = PER_USER, k = K;
    ck_assert_msg(fabs(r.bayes_error - 0.75) <=
                      5.0 * sqrt(m * (1.0 - 1.0 / k)) / (k * m),
                  "held-out %.4f", r.bayes_error);
    ck_assert(r.eval_unseen > (size_t)(0.95 * K * PER_USER));
    free(train);
    free(eval);
}
END_TEST

/* The split is a function of the key alone, and about half the rows land
 * on each side: for n = 100,000 keys the evaluation count is binomial
 * (n, 1/2) if the hash bit is fair, standard deviation 158; allowed 5 of
 * them. A one-character change of the user name moves about half the rows
 * across (same tolerance): the name is mixed in, not just the time. */
TS_TEST(test_split)
{
    char name[32], other[32];
    size_t evals = 0, n = 0, moves = 0;
    for (int u = 0; u < 100; u++) {
        int len = snprintf(name, sizeof name, "user-%d", u);
        memcpy(other, name, sizeof name);
        other[0] = 'U';
        for (int64_t t = 0; t < 1000; t++) {
            int64_t ts = 1700000000000 + 60000 * t;
            int side = ts_identity_split(name, (size_t)len, ts);
            ck_assert_int_eq(side, ts_identity_split(name, (size_t)len, ts));
            ck_assert(side == 0 || side == 1);
            evals += (size_t)side;
            moves += side != ts_identity_split(other, (size_t)len, ts);
            n++;
        }
    }
    ck_assert_msg(fabs((double)evals - n / 2.0) <= 5.0 * sqrt(n / 4.0),
                  "%zu of %zu rows held out", evals, n);
    ck_assert_msg(fabs((double)moves - n / 2.0) <= 5.0 * sqrt(n / 4.0),
                  "renaming moved %zu of %zu", moves, n);
    /* NULL names hash as empty. */
    ck_assert_int_eq(ts_identity_split(NULL, 0, 5),
                     ts_identity_split("", 0, 5));
}
END_TEST

TS_TEST(test_bad_input)
{
    const ts_identity_obs good[2] = { { 0, { 0, 0 } }, { 1, { 5, 5 } } };
    const ts_identity_obs out_of_range[1] = { { 2, { 0, 0 } } };
    const ts_identity_obs not_finite[1] = { { 0, { NAN, 0 } } };
    const ts_identity_obs far[2] = { { 0, { 0, 0 } }, { 1, { 1e12, 0 } } };
    ts_identity_result r;
    char err[200];
    ck_assert_int_eq(ts_identity_estimate(NULL, 2, good, 2, 2, 10, &r, err,
                                          sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "training"));
    ck_assert_int_eq(ts_identity_estimate(good, 2, good, 0, 2, 10, &r, err,
                                          sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "evaluation rows: none"));
    ck_assert_int_eq(ts_identity_estimate(good, 0, good, 2, 2, 10, &r, err,
                                          sizeof err), -1);
    ck_assert_int_eq(ts_identity_estimate(good, 2, out_of_range, 1, 2, 10,
                                          &r, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    ck_assert_int_eq(ts_identity_estimate(good, 2, not_finite, 1, 2, 10, &r,
                                          err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not finite"));
    ck_assert_int_eq(ts_identity_estimate(good, 2, good, 2, 2, 0.0, &r, err,
                                          sizeof err), -1);
    ck_assert_int_eq(ts_identity_estimate(good, 2, good, 2, 2, NAN, &r, err,
                                          sizeof err), -1);
    ck_assert_int_eq(ts_identity_estimate(good, 2, good, 2, 2, INFINITY, &r,
                                          err, sizeof err), -1);
    ck_assert_int_eq(ts_identity_estimate(good, 2, good, 2, 0, 10, &r, err,
                                          sizeof err), -1);
    ck_assert_int_eq(ts_identity_estimate(good, 2, good, 2, 2, 10, NULL, err,
                                          sizeof err), -1);
    ck_assert_int_eq(ts_identity_estimate(far, 2, good, 2, 2, 1e-3, &r, err,
                                          sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "2^31"));
    /* A NULL error buffer is allowed. */
    ck_assert_int_eq(ts_identity_estimate(good, 2, good, 0, 2, 10, &r, NULL,
                                          0), -1);
}
END_TEST

int main(void)
{
    return ts_check_main("identity", 120, NULL, NULL);
}
