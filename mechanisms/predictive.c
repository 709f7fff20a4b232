#include "mechanisms/predictive.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mechanisms/geo.h"
#include "mechanisms/planar_laplace.h"

#define DEFAULT_RADIUS_M 100.0
#define DEFAULT_LEVEL 2.302585092994046 /* ln 10: r* = 100 m, eps* = ln 10 */
#define DEFAULT_RATE 0.033              /* Section 5: 3.3 %, ~30 queries */
#define DEFAULT_ACCURACY_M 3000.0       /* Section 5: alpha = 3 km */
#define DEFAULT_ETA 0.5                 /* Section 4: "can safely go as low as 0.5" */
#define DEFAULT_GAMMA 0.8               /* Section 4: "good values around 0.8" */
#define DEFAULT_DELTA 0.9               /* Section 4: c_N(0.9), c_theta(0.9) */
#define DEFAULT_SKIP_SPEED_KMH 0.0      /* off; the paper's skip runs use 0.5 */
/* Just above the break-even prediction rate eta (c_theta / c_N)(1 + 1/gamma)
 * = 0.466 of the defaults, so the test is worth paying for from the start. */
#define DEFAULT_INITIAL_PR 0.5
#define DEFAULT_WARMUP 5
/* The paper's users only query below 15 km/h. */
#define DEFAULT_LINEAR_MAX_SPEED_KMH 15.0

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
    budget_manager manager;
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

/* Reads a finite double into *value; absent keeps the default. */
static int read_double(const ts_params *params, const char *key,
                       double *value, char *err, size_t errlen)
{
    double v;
    int found = params->get_double(params->ctx, key, &v);
    if (found == 0)
        return 0;
    if (found < 0 || !isfinite(v)) {
        snprintf(err, errlen, "%s: expected a finite number", key);
        return -1;
    }
    *value = v;
    return 0;
}

static int read_string(const ts_params *params, const char *key,
                       const char **value, char *err, size_t errlen)
{
    const char *s;
    int found = params->get_string(params->ctx, key, &s);
    if (found == 0)
        return 0;
    if (found < 0) {
        snprintf(err, errlen, "%s: expected a string", key);
        return -1;
    }
    *value = s;
    return 0;
}

static int check_range(int ok, const char *key, const char *what, char *err,
                       size_t errlen)
{
    if (!ok)
        snprintf(err, errlen, "%s: must be %s", key, what);
    return ok ? 0 : -1;
}

static int predictive_profile_new(const ts_params *params, void **profile,
                                  char *err, size_t errlen)
{
    predictive_profile p = {
        .radius_m = DEFAULT_RADIUS_M,
        .level = DEFAULT_LEVEL,
        .manager = MANAGER_FIXED_RATE,
        .rate = DEFAULT_RATE,
        .accuracy_m = DEFAULT_ACCURACY_M,
        .tuning = { .eta = DEFAULT_ETA, .gamma = DEFAULT_GAMMA },
        .delta = DEFAULT_DELTA,
        .initial_pr = DEFAULT_INITIAL_PR,
        .warmup = DEFAULT_WARMUP,
        .predict = predict_parrot,
    };
    double skip_speed_kmh = DEFAULT_SKIP_SPEED_KMH;
    double linear_max_speed_kmh = DEFAULT_LINEAR_MAX_SPEED_KMH;
    const char *manager = NULL;
    const char *prediction = NULL;

    *profile = NULL;
    /* Every key is read whatever the manager, so switching manager with a
     * -o override does not turn the other's keys into unknown settings. */
    if (read_double(params, "radius_m", &p.radius_m, err, errlen) < 0 ||
        check_range(p.radius_m > 0.0, "radius_m", "a positive finite number",
                    err, errlen) < 0 ||
        read_double(params, "level", &p.level, err, errlen) < 0 ||
        check_range(p.level > 0.0, "level", "a positive finite number", err,
                    errlen) < 0 ||
        read_string(params, "budget_manager", &manager, err, errlen) < 0 ||
        read_double(params, "rate", &p.rate, err, errlen) < 0 ||
        check_range(p.rate > 0.0 && p.rate <= 1.0, "rate",
                    "in (0, 1] (a fraction of the window budget)", err,
                    errlen) < 0 ||
        read_double(params, "accuracy_m", &p.accuracy_m, err, errlen) < 0 ||
        check_range(p.accuracy_m > 0.0, "accuracy_m",
                    "a positive number of metres", err, errlen) < 0 ||
        read_string(params, "prediction", &prediction, err, errlen) < 0 ||
        read_double(params, "eta", &p.tuning.eta, err, errlen) < 0 ||
        check_range(p.tuning.eta > 0.0 && p.tuning.eta <= 1.0, "eta",
                    "in (0, 1]", err, errlen) < 0 ||
        read_double(params, "gamma", &p.tuning.gamma, err, errlen) < 0 ||
        check_range(p.tuning.gamma > 0.0 && p.tuning.gamma <= 1.0, "gamma",
                    "in (0, 1]", err, errlen) < 0 ||
        read_double(params, "delta", &p.delta, err, errlen) < 0 ||
        check_range(p.delta > 0.5 && p.delta < 1.0, "delta", "in (0.5, 1)",
                    err, errlen) < 0 ||
        read_double(params, "skip_speed_kmh", &skip_speed_kmh, err, errlen) <
            0 ||
        check_range(skip_speed_kmh >= 0.0, "skip_speed_kmh",
                    "a non-negative speed (0 = no time-based skip)", err,
                    errlen) < 0 ||
        read_double(params, "initial_pr", &p.initial_pr, err, errlen) < 0 ||
        check_range(p.initial_pr >= 0.0 && p.initial_pr <= 1.0, "initial_pr",
                    "in [0, 1]", err, errlen) < 0 ||
        read_double(params, "linear_max_speed_kmh", &linear_max_speed_kmh,
                    err, errlen) < 0 ||
        check_range(linear_max_speed_kmh > 0.0, "linear_max_speed_kmh",
                    "a positive speed", err, errlen) < 0)
        return -1;

    long long warmup;
    int found = params->get_int(params->ctx, "warmup", &warmup);
    if (found < 0) {
        snprintf(err, errlen, "warmup: expected an integer");
        return -1;
    }
    if (found > 0) {
        if (warmup < 0 || warmup > 1000000) {
            snprintf(err, errlen, "warmup: must be in 0 .. 1000000");
            return -1;
        }
        p.warmup = warmup;
    }

    if (manager != NULL) {
        if (strcmp(manager, "fixed-rate") == 0)
            p.manager = MANAGER_FIXED_RATE;
        else if (strcmp(manager, "fixed-utility") == 0)
            p.manager = MANAGER_FIXED_UTILITY;
        else {
            snprintf(err, errlen, "budget_manager: must be \"fixed-rate\" or "
                     "\"fixed-utility\"");
            return -1;
        }
    }
    if (prediction != NULL) {
        p.predict = NULL;
        for (size_t i = 0; i < sizeof predictions / sizeof predictions[0]; i++)
            if (strcmp(prediction, predictions[i].name) == 0)
                p.predict = predictions[i].fn;
        if (p.predict == NULL) {
            snprintf(err, errlen,
                     "prediction: must be \"parrot\" or \"linear\"");
            return -1;
        }
    }

    p.skip_speed_ms = skip_speed_kmh * KMH_TO_MS;
    p.linear_max_speed_ms = linear_max_speed_kmh * KMH_TO_MS;
    p.tuning.c_noise = ts_predictive_c_noise(p.delta);
    p.tuning.c_test = ts_predictive_c_test(p.delta);
    p.window_budget = p.level / p.radius_m;
    p.rate_per_m = p.rate * p.window_budget;
    if (!isfinite(p.window_budget) || !isnormal(p.rate_per_m)) {
        snprintf(err, errlen, "radius_m: level / radius_m is not a usable "
                 "per-metre budget");
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
    .profile_new = predictive_profile_new,
    .profile_free = predictive_profile_free,
    .window_budget = predictive_window_budget,
    .user_state_size = predictive_user_state_size,
    .release = predictive_release,
};
