/* The predictive mechanism against the independent one on the workload it
 * was designed for: the paper's configuration (r* = 100 m, ε* = ln 10,
 * fixed rate 3.3 %, η = 0.5, γ = 0.8, parrot) and a stationary user who
 * queries once a minute with 10 m of GPS jitter, through the real pipeline.
 *
 * Both mechanisms see exactly the same true points. Errors within a user
 * are correlated (the parrot repeats one report), so standard errors are
 * taken over per-user means, which are independent (one seeded generator,
 * disjoint draws). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "geometry/geo.h"
#include "mechanisms/geoind.h"
#include "mechanisms/predictive.h"
#include "mechanisms/rng.h"
#include "tests/predictive_support.h"
#include "tests/support/check_run.h"

#define USERS 400
#define QUERIES 60          /* more than the 30 either mechanism can pay */
#define JITTER_M 10.0

typedef struct run_stats {
    double mean_error;      /* mean over users of the per-user mean error */
    double se_error;        /* its standard error */
    double prediction_rate; /* predicted reports / reports after the first */
    double points_per_user; /* sanitized reports per user */
    double spend_rate;      /* mean eps_point / window budget */
} run_stats;

static run_stats run(const ts_mechanism_ops *ops, param_table *params,
                     uint64_t noise_seed)
{
    ts_rng *truth_rng = ts_rng_new_seeded(777); /* same truth for both */
    ts_rng *noise_rng = ts_rng_new_seeded(noise_seed);
    ck_assert_ptr_nonnull(truth_rng);
    ck_assert_ptr_nonnull(noise_rng);
    ts_pipeline *pipeline = single_profile_pipeline(
        "p", ops, params, DAY_MS, TS_ON_EXHAUSTED_DROP, noise_rng);
    double budget = ts_pipeline_default_profile(pipeline)->window_budget;

    double sum_user_means = 0.0, sum_sq_user_means = 0.0;
    long reports = 0, after_first = 0, predicted = 0;
    double spent = 0.0;
    for (int u = 0; u < USERS; u++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", u);
        double home_lat, home_lon;
        ts_geo_destination(39.9, 116.4, 20000.0 * ts_rng_uniform_open(truth_rng),
                           ts_rng_angle(truth_rng), &home_lat, &home_lon);
        double user_error = 0.0;
        int user_reports = 0;
        for (int q = 0; q < QUERIES; q++) {
            double lat, lon;
            /* Jitter: Rayleigh-ish radius JITTER_M * sqrt(u). */
            ts_geo_destination(home_lat, home_lon,
                               JITTER_M * sqrt(ts_rng_uniform_open(truth_rng)),
                               ts_rng_angle(truth_rng), &lat, &lon);
            ts_input in = {
                .user_id = id,
                .ts_ms = INT64_C(1224741185000) + INT64_C(60000) * q,
                .lat = lat,
                .lon = lon,
            };
            ts_outcome out;
            ts_pipeline_process(pipeline, &in, &out);
            if (!out.sanitized) {
                ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
                continue;
            }
            user_error += ts_geo_distance_m(lat, lon, out.report.lat,
                                            out.report.lon);
            user_reports++;
            spent += out.report.eps_point;
            if (user_reports > 1) {
                after_first++;
                predicted += out.report.has_predicted && out.report.predicted;
            }
        }
        ck_assert_int_gt(user_reports, 0);
        double mean = user_error / user_reports;
        sum_user_means += mean;
        sum_sq_user_means += mean * mean;
        reports += user_reports;
    }
    ts_pipeline_free(pipeline);
    ts_rng_free(noise_rng);
    ts_rng_free(truth_rng);

    run_stats s;
    s.mean_error = sum_user_means / USERS;
    double var = (sum_sq_user_means - USERS * s.mean_error * s.mean_error) /
                 (USERS - 1);
    s.se_error = sqrt(var / USERS);
    s.prediction_rate = after_first > 0 ? (double)predicted / after_first : 0;
    s.points_per_user = (double)reports / USERS;
    s.spend_rate = spent / reports / budget;
    return s;
}

TS_TEST(test_stationary_user_paper_configuration)
{
    param_table pred;
    memset(&pred, 0, sizeof pred);
    param_double(&pred, "radius_m", PAPER_RADIUS_M);
    param_double(&pred, "level", PAPER_LEVEL);
    param_string(&pred, "budget_manager", "fixed-rate");
    param_double(&pred, "rate", 0.033);
    param_string(&pred, "prediction", "parrot");

    param_table indep;
    memset(&indep, 0, sizeof indep);
    param_double(&indep, "radius_m", PAPER_RADIUS_M);
    param_double(&indep, "level", PAPER_LEVEL);
    param_int(&indep, "points_per_window", 30);

    run_stats p = run(&ts_predictive_ops, &pred, 11);
    run_stats i = run(&ts_geoind_ops, &indep, 12);
    fprintf(stderr,
            "predictive: error %.0f +- %.0f m, PR %.3f, %.1f points, rate "
            "%.4f\nindependent: error %.0f +- %.0f m, %.1f points, rate "
            "%.4f\n",
            p.mean_error, p.se_error, p.prediction_rate, p.points_per_user,
            p.spend_rate, i.mean_error, i.se_error, i.points_per_user,
            i.spend_rate);

    /* The independent mechanism is exactly calibrated: 30 points, mean
     * error 2 / ε_point = 60 / ε = 2606 m (a Gamma(2) radius); within 5
     * standard errors. */
    ck_assert_double_eq_tol(i.points_per_user, 30.0, 1e-9);
    ck_assert_double_eq_tol(i.mean_error, 60.0 / PAPER_WINDOW_BUDGET,
                            5.0 * i.se_error);

    /* A stationary user is the parrot's best case: most tests pass (the
     * paper's break-even is 46.5 %; we demand 70 %, while the per-test
     * pass probability here is above 80 % -- see docs/predictive.md). */
    ck_assert_double_gt(p.prediction_rate, 0.7);

    /* Same rate: the fixed-rate manager spends the configured 3.3 % per
     * point on average (its estimate of PR is re-learned per user, so we
     * allow 15 % either way) and therefore serves about as many points. */
    ck_assert_double_gt(p.spend_rate, 0.033 * 0.85);
    ck_assert_double_lt(p.spend_rate, 0.033 * 1.15);
    ck_assert_double_gt(p.points_per_user, 30.0 * 0.85);

    /* Lower mean error, by more than 5 standard errors of the difference
     * of two independent means. */
    double se = sqrt(p.se_error * p.se_error + i.se_error * i.se_error);
    ck_assert_msg(i.mean_error - p.mean_error > 5.0 * se,
                  "predictive %.0f m vs independent %.0f m (se %.0f)",
                  p.mean_error, i.mean_error, se);
}
END_TEST

int main(void)
{
    return ts_check_main("predictive_stats", 120, NULL, NULL);
}
