#include "mechanisms/predictive.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "mechanisms/planar_laplace.h"

#define KMH_TO_MS (1.0 / 3.6)

typedef enum budget_manager {
    MANAGER_FIXED_RATE = 0,
    MANAGER_FIXED_UTILITY = 1,
} budget_manager;

/* Per-user state. Everything in it is derived from what was published:
 * hard reports (their sanitized coordinates and timestamps), the easy/hard
 * bit of each report and the public timestamps. Fixed-width fields, largest
 * first, so the block has no padding and persists byte for byte. */
typedef struct predictive_state {
    double hard_lat[2];          /* [0] latest hard report, [1] the one before */
    double hard_lon[2];
    int64_t hard_ts_ms[2];
    int64_t checked_ts_ms;       /* last step that tested or drew noise */
    uint32_t hard_count;         /* hard reports this window, saturating */
    uint32_t tested;             /* steps that ran a real test */
    uint32_t easy;               /* ... of which passed */
    uint32_t skipped;            /* time-based skips */
} predictive_state;

struct predictive_profile;
/* A prediction function: from the public run (state) and the public time of
 * the query, a point to test. Only called when hard_count >= 1. */
typedef void (*predict_fn)(const struct predictive_profile *profile,
                           const predictive_state *state, int64_t ts_ms,
                           double *lat, double *lon);

typedef struct predictive_profile {
    double radius_m;
    double level;
    double window_budget;        /* eps per metre for the whole window */
    int manager;                 /* budget_manager */
    int prediction;              /* index into predictions[] */
    double skip_speed_kmh;
    double linear_max_speed_kmh;
    double rate;                 /* fraction of the window budget per step */
    double rate_per_m;           /* rate * window_budget */
    double accuracy_m;
    ts_predictive_tuning tuning;
    double delta;
    double skip_speed_ms;        /* 0 = no time-based skip */
    double initial_pr;
    long long warmup;
    double linear_max_speed_ms;
    predict_fn predict;
    ts_predictive_budget fixed_utility;  /* constant for that manager */
} predictive_profile;

/* ------------------------------------------------------------ constants */

double ts_predictive_c_noise(double delta)
{
    if (!(delta > 0.0) || !(delta < 1.0))
        return NAN;
    return ts_planar_laplace_radius_icdf(1.0, delta);
}

double ts_predictive_c_test(double delta)
{
    if (!(delta > 0.0) || !(delta < 1.0))
        return NAN;
    /* Quantile of the standard Laplace: F(x) = 1 - e^{-x}/2 for x >= 0. */
    return delta >= 0.5 ? -log(2.0 * (1.0 - delta)) : log(2.0 * delta);
}

static int tuning_valid(const ts_predictive_tuning *t)
{
    return t->eta > 0.0 && t->eta <= 1.0 && t->gamma > 0.0 &&
           t->gamma <= 1.0 && t->c_test > 0.0 && isfinite(t->c_test) &&
           t->c_noise > 0.0 && isfinite(t->c_noise);
}

static int budget_valid(const ts_predictive_budget *b)
{
    return b->eps_test > 0.0 && isfinite(b->eps_test) && b->eps_noise > 0.0 &&
           isfinite(b->eps_noise) && b->threshold_m > 0.0 &&
           isfinite(b->threshold_m);
}

int ts_predictive_fixed_utility(const ts_predictive_tuning *tuning,
                                double accuracy_m, ts_predictive_budget *out)
{
    if (!tuning_valid(tuning) || !(accuracy_m > 0.0) || !isfinite(accuracy_m))
        return -1;
    ts_predictive_budget b;
    b.eps_test = tuning->eta * tuning->c_test / accuracy_m *
                 (1.0 + 1.0 / tuning->gamma);
    b.eps_noise = tuning->c_noise / accuracy_m;
    b.threshold_m = tuning->c_test / (tuning->gamma * b.eps_test);
    if (!budget_valid(&b))
        return -1;
    *out = b;
    return 0;
}

int ts_predictive_fixed_rate(const ts_predictive_tuning *tuning,
                             double rate_per_m, double prediction_rate,
                             ts_predictive_budget *out)
{
    if (!tuning_valid(tuning) || !(rate_per_m > 0.0) || !isfinite(rate_per_m) ||
        !(prediction_rate >= 0.0) || !(prediction_rate <= 1.0))
        return -1;
    /* Share of a hard step's noise budget that every tested step pays for
     * its test: eps_theta = test_share * eps_N. */
    double test_share = tuning->eta * tuning->c_test / tuning->c_noise *
                        (1.0 + 1.0 / tuning->gamma);
    ts_predictive_budget b;
    b.eps_noise = rate_per_m / ((1.0 - prediction_rate) + test_share);
    b.eps_test = b.eps_noise * test_share;
    b.threshold_m = tuning->c_test / (tuning->gamma * b.eps_test);
    if (!budget_valid(&b))
        return -1;
    *out = b;
    return 0;
}

/* ------------------------------------------------------------- the test */

int ts_predictive_test(ts_rng *rng, double eps_test, double threshold_m,
                       double distance_m)
{
    if (eps_test == 0.0) {
        /* Section 3.3: no budget, no look at the secret. */
        if (threshold_m == INFINITY)
            return 1;
        return 0;
    }
    if (!(eps_test > 0.0) || !isfinite(eps_test) || !isfinite(threshold_m) ||
        isnan(distance_m))
        return 0;
    /* |d(x, z~) - d(x', z~)| <= d(x, x'), so Laplace noise of scale
     * 1 / eps_test on the threshold makes the bit eps_test-geo-
     * indistinguishable (paper, Fact 1). */
    double noisy_threshold = threshold_m + ts_rng_laplace(rng, 1.0 / eps_test);
    return distance_m <= noisy_threshold;
}

/* ---------------------------------------------------------- predictions */

static void predict_parrot(const predictive_profile *profile,
                           const predictive_state *state, int64_t ts_ms,
                           double *lat, double *lon)
{
    (void)profile;
    (void)ts_ms;
    *lat = state->hard_lat[0];
    *lon = state->hard_lon[0];
}

/* Initial great-circle bearing from point 1 to point 2, radians clockwise
 * from north. */
static double initial_bearing(double lat1_deg, double lon1_deg,
                              double lat2_deg, double lon2_deg)
{
    const double rad = M_PI / 180.0;
    double phi1 = lat1_deg * rad, phi2 = lat2_deg * rad;
    double dlambda = (lon2_deg - lon1_deg) * rad;
    double y = sin(dlambda) * cos(phi2);
    double x = cos(phi1) * sin(phi2) - sin(phi1) * cos(phi2) * cos(dlambda);
    return atan2(y, x);
}

/* Constant velocity from the last two hard reports, continued along their
 * great circle from the latest one, at most linear_max_speed_ms: hard
 * reports carry noise of the order of 1 / eps_N, and a velocity from two
 * noisy points would otherwise be dominated by that noise when they are
 * close in time. With one hard report it is parrot. */
static void predict_linear(const predictive_profile *profile,
                           const predictive_state *state, int64_t ts_ms,
                           double *lat, double *lon)
{
    *lat = state->hard_lat[0];
    *lon = state->hard_lon[0];
    if (state->hard_count < 2)
        return;
    double baseline_s =
        (double)(state->hard_ts_ms[0] - state->hard_ts_ms[1]) / 1000.0;
    double ahead_s = (double)(ts_ms - state->hard_ts_ms[0]) / 1000.0;
    if (!(baseline_s > 0.0) || !(ahead_s > 0.0))
        return;
    double moved_m = ts_geo_distance_m(state->hard_lat[1], state->hard_lon[1],
                                       state->hard_lat[0], state->hard_lon[0]);
    double speed_ms = moved_m / baseline_s;
    if (speed_ms > profile->linear_max_speed_ms)
        speed_ms = profile->linear_max_speed_ms;
    if (!(speed_ms > 0.0) || !isfinite(speed_ms))
        return;
    /* Heading at the latest report: the reverse of the bearing back to the
     * earlier one. */
    double heading = initial_bearing(state->hard_lat[0], state->hard_lon[0],
                                     state->hard_lat[1], state->hard_lon[1]) +
                     M_PI;
    double out_lat, out_lon;
    ts_geo_destination(state->hard_lat[0], state->hard_lon[0],
                       speed_ms * ahead_s, heading, &out_lat, &out_lon);
    ts_geo_snap(&out_lat, &out_lon);
    if (!ts_geo_valid(out_lat, out_lon))
        return;
    *lat = out_lat;
    *lon = out_lon;
}

static const struct {
    const char *name;
    predict_fn fn;
} predictions[] = {
    { "parrot", predict_parrot },
    { "linear", predict_linear },
};

/* ------------------------------------------------------------- profiles */

#define FIELD(f) .offset = offsetof(predictive_profile, f)
static const char *const manager_names[] = { "fixed-rate", "fixed-utility",
                                             NULL };
static const char *const prediction_names[] = { "parrot", "linear", NULL };

/* Every key is read whatever the manager, so switching manager with a -o
 * override does not turn the other's keys into unknown settings. The
 * defaults are the paper's (Sections 4 and 5). */
static const ts_param_spec predictive_params[] = {
    { .key = "radius_m", .type = TS_PARAM_NUMBER, FIELD(radius_m),
      .min = 0, .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "100.0", .doc = "protection radius r, in metres" },
    { .key = "level", .type = TS_PARAM_NUMBER, FIELD(level), .min = 0,
      .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "2.302585092994046",
      .doc = "privacy level l; window budget eps = l / r per metre" },
    { .key = "budget_manager", .type = TS_PARAM_CHOICE, FIELD(manager),
      .choices = manager_names, .default_value = "fixed-rate",
      .doc = "spend `rate` per point, or keep `accuracy_m`" },
    { .key = "rate", .type = TS_PARAM_NUMBER, FIELD(rate), .min = 0,
      .max = 1, .bounds = TS_PARAM_MIN_EXCLUSIVE, .default_value = "0.033",
      .doc = "fixed-rate: target spend per point, a fraction of the "
             "window budget (Section 5: about 30 points a day)" },
    { .key = "accuracy_m", .type = TS_PARAM_NUMBER, FIELD(accuracy_m),
      .min = 0, .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "3000.0",
      .doc = "fixed-utility: 90 % accuracy bound, in metres" },
    { .key = "prediction", .type = TS_PARAM_CHOICE, FIELD(prediction),
      .choices = prediction_names, .default_value = "parrot",
      .doc = "repeat the last noisy report, or continue the last two" },
    { .key = "eta", .type = TS_PARAM_NUMBER, FIELD(tuning.eta), .min = 0,
      .max = 1, .bounds = TS_PARAM_MIN_EXCLUSIVE, .default_value = "0.5",
      .doc = "budget manager tuning (\"can safely go as low as 0.5\")" },
    { .key = "gamma", .type = TS_PARAM_NUMBER, FIELD(tuning.gamma),
      .min = 0, .max = 1, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "0.8",
      .doc = "budget manager tuning (\"good values around 0.8\")" },
    { .key = "delta", .type = TS_PARAM_NUMBER, FIELD(delta), .min = 0.5,
      .max = 1, .bounds = TS_PARAM_MIN_EXCLUSIVE | TS_PARAM_MAX_EXCLUSIVE,
      .default_value = "0.9", .doc = "confidence of the accuracy bounds" },
    { .key = "skip_speed_kmh", .type = TS_PARAM_NUMBER,
      FIELD(skip_speed_kmh), .min = 0, .max = INFINITY,
      .default_value = "0.0",
      .doc = "free prediction while elapsed time x this speed stays "
             "within the bound; 0 = never (the paper's skip runs: 0.5)" },
    /* Just above the break-even prediction rate eta (c_theta / c_N)
     * (1 + 1/gamma) = 0.466 of the defaults, so the test is worth paying
     * for from the start. */
    { .key = "initial_pr", .type = TS_PARAM_NUMBER, FIELD(initial_pr),
      .min = 0, .max = 1, .default_value = "0.5",
      .doc = "fixed-rate: prediction rate assumed during the warm-up" },
    { .key = "warmup", .type = TS_PARAM_INT, FIELD(warmup), .min = 0,
      .max = 1000000, .default_value = "5",
      .doc = "tested points before the observed rate is used" },
    /* The paper's users only query below 15 km/h. */
    { .key = "linear_max_speed_kmh", .type = TS_PARAM_NUMBER,
      FIELD(linear_max_speed_kmh), .min = 0, .max = INFINITY,
      .bounds = TS_PARAM_MIN_EXCLUSIVE, .default_value = "15.0",
      .doc = "speed cap of the linear prediction" },
};
#undef FIELD

static int predictive_profile_new(const ts_params *params, void **profile,
                                  char *err, size_t errlen)
{
    predictive_profile p;
    memset(&p, 0, sizeof p);
    *profile = NULL;
    if (ts_mechanism_parse_params(&ts_predictive_ops, params, &p, err,
                                  errlen) < 0)
        return -1;
    p.predict = predictions[p.prediction].fn;
    p.skip_speed_ms = p.skip_speed_kmh * KMH_TO_MS;
    p.linear_max_speed_ms = p.linear_max_speed_kmh * KMH_TO_MS;
    p.tuning.c_noise = ts_predictive_c_noise(p.delta);
    p.tuning.c_test = ts_predictive_c_test(p.delta);
    p.window_budget = p.level / p.radius_m;
    p.rate_per_m = p.rate * p.window_budget;
    if (!isfinite(p.window_budget) || !isnormal(p.window_budget)) {
        snprintf(err, errlen, "radius_m: level / radius_m = %g is not a "
                 "usable per-metre budget", p.window_budget);
        return -1;
    }
    if (!isnormal(p.rate_per_m)) {
        /* Blamed on radius_m alone before, whatever made it unusable. */
        snprintf(err, errlen, "rate: rate x level / radius_m = %g is not a "
                 "usable per-metre budget", p.rate_per_m);
        return -1;
    }
    /* Validate the managers' output once at the extremes they can reach,
     * so release never meets an unusable triple. */
    ts_predictive_budget never_easy, always_easy;
    if (ts_predictive_fixed_utility(&p.tuning, p.accuracy_m,
                                    &p.fixed_utility) < 0 ||
        ts_predictive_fixed_rate(&p.tuning, p.rate_per_m, 0.0,
                                 &never_easy) < 0 ||
        ts_predictive_fixed_rate(&p.tuning, p.rate_per_m, 1.0,
                                 &always_easy) < 0) {
        snprintf(err, errlen, "%s: gives no usable budget per step",
                 p.manager == MANAGER_FIXED_UTILITY ? "accuracy_m" : "rate");
        return -1;
    }
    /* The fixed-rate manager's noise is widest when no step is easy. */
    double widest_noise_eps = p.manager == MANAGER_FIXED_UTILITY
                                  ? p.fixed_utility.eps_noise
                                  : never_easy.eps_noise;
    if (!ts_planar_laplace_fits_sphere(widest_noise_eps)) {
        snprintf(err, errlen,
                 "%s: noise with mean %.0f km reaches too far around the "
                 "Earth (at most %.0f km; docs/geoind.md)",
                 p.manager == MANAGER_FIXED_UTILITY ? "accuracy_m" : "rate",
                 2.0 / widest_noise_eps / 1000.0,
                 2.0 / ts_planar_laplace_min_sphere_eps() / 1000.0);
        return -1;
    }

    predictive_profile *copy = malloc(sizeof *copy);
    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *copy = p;
    *profile = copy;
    return 0;
}

static void predictive_profile_free(void *profile)
{
    free(profile);
}

static double predictive_window_budget(const void *profile)
{
    return ((const predictive_profile *)profile)->window_budget;
}

static size_t predictive_user_state_size(const void *profile)
{
    (void)profile;
    return sizeof(predictive_state);
}

/* ---------------------------------------------------------------- step */

static double estimated_prediction_rate(const predictive_profile *p,
                                        const predictive_state *s)
{
    if (s->tested == 0 || (long long)s->tested < p->warmup)
        return p->initial_pr;
    return (double)s->easy / (double)s->tested;
}

/* beta(r): the manager's triple for this step, before skips. */
static int manager_budget(const predictive_profile *p,
                          const predictive_state *s, ts_predictive_budget *out,
                          double *accuracy_m)
{
    if (p->manager == MANAGER_FIXED_UTILITY) {
        *out = p->fixed_utility;
        *accuracy_m = p->accuracy_m;
        return 0;
    }
    if (ts_predictive_fixed_rate(&p->tuning, p->rate_per_m,
                                 estimated_prediction_rate(p, s), out) < 0)
        return -1;
    /* The accuracy the noise is calibrated to, the bound a skip must meet. */
    *accuracy_m = p->tuning.c_noise / out->eps_noise;
    return 0;
}

static void push_hard(predictive_state *s, double lat, double lon,
                      int64_t ts_ms)
{
    s->hard_lat[1] = s->hard_lat[0];
    s->hard_lon[1] = s->hard_lon[0];
    s->hard_ts_ms[1] = s->hard_ts_ms[0];
    s->hard_lat[0] = lat;
    s->hard_lon[0] = lon;
    s->hard_ts_ms[0] = ts_ms;
    if (s->hard_count < UINT32_MAX)
        s->hard_count++;
}

static void bump(uint32_t *counter)
{
    if (*counter < UINT32_MAX)
        (*counter)++;
}

static ts_release_status predictive_release(const void *profile,
                                            void *user_state,
                                            const ts_point *truth,
                                            const ts_budget_view *budget,
                                            ts_rng *rng, ts_report *out)
{
    const predictive_profile *p = profile;
    predictive_state s;
    memcpy(&s, user_state, sizeof s);

    if (!ts_geo_valid(truth->lat, truth->lon))
        return TS_RELEASE_ERROR;

    ts_predictive_budget step;
    double accuracy_m;
    if (manager_budget(p, &s, &step, &accuracy_m) < 0)
        return TS_RELEASE_ERROR;

    /* Skips (Section 3.3), decided on public information only. */
    int first = s.hard_count == 0;
    int time_skip = 0;
    if (first) {
        /* Nothing published yet to predict from: (0, eps_N, -inf). */
        step.eps_test = 0.0;
        step.threshold_m = -INFINITY;
    } else if (p->skip_speed_ms > 0.0) {
        /* The truth was last consulted at checked_ts_ms (an easy test or a
         * hard report); since then the user moved at most speed * elapsed,
         * if the assumed top speed holds. Measuring from the last skip
         * instead would let a chain of skips drift without bound. */
        double elapsed_s = (double)(truth->ts_ms - s.checked_ts_ms) / 1000.0;
        if (elapsed_s >= 0.0 && elapsed_s * p->skip_speed_ms <= accuracy_m) {
            time_skip = 1;
            step.eps_test = 0.0;
            step.eps_noise = 0.0;
            step.threshold_m = INFINITY;
        }
    }

    /* Eq. 5 before looking at the truth: the worst outcome of this step
     * (hard: test + noise) must fit the window. Refusing after the test
     * would make the refusal itself depend on the secret. */
    double worst = step.eps_test + (time_skip ? 0.0 : step.eps_noise);
    if (!ts_budget_allows(budget, worst))
        return TS_RELEASE_EXHAUSTED;

    double pred_lat = 0.0, pred_lon = 0.0;
    double distance_m = NAN;
    if (!first) {
        p->predict(p, &s, truth->ts_ms, &pred_lat, &pred_lon);
        if (!ts_geo_valid(pred_lat, pred_lon))
            return TS_RELEASE_ERROR;
        if (step.eps_test > 0.0)
            distance_m = ts_geo_distance_m(truth->lat, truth->lon, pred_lat,
                                           pred_lon);
    }
    int easy = ts_predictive_test(rng, step.eps_test, step.threshold_m,
                                  distance_m);

    if (easy) {
        out->lat = pred_lat;
        out->lon = pred_lon;
        out->eps_point = step.eps_test;
        if (time_skip) {
            bump(&s.skipped);
        } else {
            bump(&s.tested);
            bump(&s.easy);
            s.checked_ts_ms = truth->ts_ms;
        }
    } else {
        double radius_m, angle;
        ts_planar_laplace_sample(rng, step.eps_noise, &radius_m, &angle);
        if (!isfinite(radius_m) || !isfinite(angle))
            return TS_RELEASE_ERROR;
        double lat, lon;
        ts_geo_destination(truth->lat, truth->lon, radius_m, angle, &lat,
                           &lon);
        ts_geo_snap(&lat, &lon);
        if (!ts_geo_valid(lat, lon))
            return TS_RELEASE_ERROR;
        out->lat = lat;
        out->lon = lon;
        out->eps_point = step.eps_test + step.eps_noise;
        if (!first)
            bump(&s.tested);
        push_hard(&s, lat, lon, truth->ts_ms);
        s.checked_ts_ms = truth->ts_ms;
    }
    out->has_predicted = 1;
    out->predicted = easy;
    memcpy(user_state, &s, sizeof s);
    return TS_RELEASE_OK;
}

const ts_mechanism_ops ts_predictive_ops = {
    .name = "predictive",
    .summary = "the predictive mechanism (Chatzikokolakis, Palamidessi & "
               "Stronati, PETS 2014)",
    TS_PARAM_ROWS(predictive_params),
    .profile_new = predictive_profile_new,
    .profile_free = predictive_profile_free,
    .window_budget = predictive_window_budget,
    .user_state_size = predictive_user_state_size,
    .release = predictive_release,
};
