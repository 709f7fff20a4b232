/* The predictive mechanism of Chatzikokolakis, Palamidessi and Stronati,
 * "A Predictive Differentially-Private Mechanism for Mobility Traces"
 * (PETS 2014), online and per user.
 *
 * Each step (paper Figure 2b) asks the budget manager for a triple
 * (eps_test, eps_noise, threshold_m) = beta(r), computes a prediction z~
 * from the user's previously published run only, runs the private test
 *   easy  iff  d(x, z~) <= threshold_m + Lap(1 / eps_test)      (Eq. 2)
 * and publishes z~ when easy (spending eps_test), else fresh planar Laplace
 * noise around x (spending eps_test + eps_noise: Eq. 5). The easy/hard bit
 * is published as `predicted` (1 = the prediction was reported).
 *
 * Profile parameters (paper default in brackets; ε per metre as geoind):
 *   radius_m        protection radius r* in metres              [100]
 *   level           privacy level ε* at r*; window budget
 *                   ε = level / radius_m per metre             [ln 10]
 *   budget_manager  "fixed-rate" | "fixed-utility" (Figure 3)   ["fixed-rate"]
 *   rate            fixed-rate: target spend per step, as a fraction of
 *                   the window budget                            [0.033]
 *   accuracy_m      fixed-utility: accuracy α(δ) in metres       [3000]
 *   prediction      "parrot" (last hard report, Eq. 7) | "linear"
 *                   (velocity of the last two hard reports)      ["parrot"]
 *   eta             η in (0, 1]: accuracy slack of the prediction [0.5]
 *   gamma           γ in (0, 1]: test noise / threshold ratio     [0.8]
 *   delta           δ in (0.5, 1): confidence of the accuracies
 *                   behind c_N(δ) and c_θ(δ)                     [0.9]
 *   skip_speed_kmh  time-based skip: assumed top speed in km/h; 0 = off
 *                   (the paper's "with skip" runs use 0.5)      [0]
 *   initial_pr      fixed-rate: prediction rate assumed until the user's
 *                   own run has `warmup` tested steps           [0.5]
 *   warmup          tested steps before PR is estimated from the run [5]
 *   linear_max_speed_kmh  cap on the speed "linear" extrapolates at [15]
 * Defaults without a number in the paper (initial_pr, warmup,
 * linear_max_speed_kmh) are ours; docs/predictive.md says why.
 *
 * Per-user state: the last two hard reports and their timestamps, the time
 * of the last step that consulted the true point, and the counts of tested,
 * easy and skipped steps. All of it is a function of published reports, the
 * published easy/hard bits and the public timestamps.
 */
#ifndef TRACESAN_MECHANISMS_PREDICTIVE_H
#define TRACESAN_MECHANISMS_PREDICTIVE_H

#include "mechanisms/mechanism.h"

extern const ts_mechanism_ops ts_predictive_ops;

/* beta(r) of the paper: what one step may spend and its test threshold.
 * Skips (Section 3.3) are eps_test = 0 with threshold_m = -INFINITY (always
 * hard: straight to noise) or +INFINITY (always easy: report the
 * prediction, eps_noise unused). */
typedef struct ts_predictive_budget {
    double eps_test;      /* ε_θ, per metre */
    double eps_noise;     /* ε_N, per metre */
    double threshold_m;   /* l */
} ts_predictive_budget;

/* Constants of the budget managers: η, γ and the accuracy constants
 * α_N(δ) = c_noise / ε_N and α_θ(δ) = c_test / ε_θ. */
typedef struct ts_predictive_tuning {
    double eta;
    double gamma;
    double c_test;
    double c_noise;
} ts_predictive_tuning;

/* c_N(δ): the δ-quantile of the planar Laplace radius at ε = 1 (inverse
 * CDF of the polar Laplace). NaN outside (0, 1). */
double ts_predictive_c_noise(double delta);

/* c_θ(δ): the δ-quantile of the linear Laplace at scale 1, i.e.
 * -ln(2 (1 - δ)) for δ >= 1/2: how far the test's noise pushes the
 * threshold out with probability 1 - δ. NaN outside (0, 1). */
double ts_predictive_c_test(double delta);

/* Figure 3(a), fixed utility with accuracy alpha (metres):
 *   ε_θ = η c_θ / α (1 + 1/γ),  ε_N = c_N / α,  l = c_θ / (γ ε_θ).
 * Returns -1 on non-positive or non-finite inputs. */
int ts_predictive_fixed_utility(const ts_predictive_tuning *tuning,
                                double accuracy_m, ts_predictive_budget *out);

/* Figure 3(b), fixed rate rho (per metre, per step) and prediction rate pr:
 *   ε_N = ρ / ((1 - PR) + (c_θ / c_N) η (1 + 1/γ)),
 *   ε_θ = ε_N η (c_θ / c_N) (1 + 1/γ),  l = c_θ / (γ ε_θ).
 * Returns -1 on invalid inputs (pr outside [0, 1]). */
int ts_predictive_fixed_rate(const ts_predictive_tuning *tuning,
                             double rate_per_m, double prediction_rate,
                             ts_predictive_budget *out);

/* The private test Θ(ε_θ, l, z~) of Eq. 2 given distance_m = d(x, z~):
 * 1 (easy) when distance_m <= threshold_m + Lap(1 / eps_test), else 0.
 * Skip conventions: eps_test = 0 with threshold +inf -> 1, -inf -> 0,
 * neither consuming randomness nor looking at distance_m. Any other
 * eps_test <= 0, or a NaN, gives 0 (fail towards fresh noise). */
int ts_predictive_test(ts_rng *rng, double eps_test, double threshold_m,
                       double distance_m);

#endif
