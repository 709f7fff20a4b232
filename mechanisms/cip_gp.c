#include "mechanisms/cip_gp.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "inference/cip.h"

/* Noise whose standard deviation passes this reaches around the Earth too
 * far for a local tangent plane to mean anything; such a profile is
 * refused, and a trace that would need it is dropped. */
#define CIP_GP_MAX_SIGMA_M 100000.0

/* The smallest sigma_x_m and radius_m: a micrometre is far below anything
 * a GPS fix means, and far above what the calibration cannot compute (it
 * squares lengths, and refuses those below 1e-150). */
#define CIP_GP_MIN_LENGTH_M 1e-6

/* sigma_z is found to this relative precision, always on the safe side:
 * the returned value meets epsilon (ts_cip_min_sigma_z_sup). */
#define CIP_GP_SIGMA_REL_TOL 1e-6

enum { SECRET_ALL = 0, SECRET_EVERY_OTHER = 1 };
static const char *const secret_choices[] = { "all", "every_other", NULL };

typedef struct cip_gp_profile {
    double epsilon;
    double renyi_order;
    double length_scale_max_s;
    double sigma_x_m;
    double radius_m;
    double min_interval_s;
    int secret;
    long long window_points;
    long long traces_per_window;
    /* derived */
    double window_budget;
} cip_gp_profile;

/* Per-user state: the public timestamps of the current trace and the
 * user's recent intervals, and values computed from them alone. Nothing in
 * it depends on a true location. */
typedef struct cip_gp_state {
    int64_t trace_start_ms;
    int64_t last_ts_ms;
    double sigma_z_m;      /* the current trace's noise */
    double charged;        /* running max of the prefixes' certified L* */
    uint32_t points;       /* in the current trace; 0 before the first */
    uint32_t intervals;    /* valid entries of the interval ring */
    uint32_t next_interval;
    uint32_t seen;         /* 1 once the user has released a point */
    /* offsets_s[window_points] (from trace_start_ms, seconds), then
     * recent_s[window_points - 1] (a ring of the latest intervals). */
    double data[];
} cip_gp_state;

#define FIELD(name) .offset = offsetof(cip_gp_profile, name)

static const ts_param_spec cip_gp_params[] = {
    { .key = "epsilon", .type = TS_PARAM_NUMBER, FIELD(epsilon), .min = 0.0,
      .max = 1e6, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "1.0",
      .doc = "certified bound on the worst-case Renyi loss L* (Eq. 4) of one "
             "trace's secret points taken as a whole, over every RBF length "
             "scale up to length_scale_max_s; it does not bound a "
             "subsequence of them, nor several traces together "
             "(docs/cip.md)" },
    { .key = "renyi_order", .type = TS_PARAM_NUMBER, FIELD(renyi_order),
      .min = 1.0, .max = 1e6, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "2.0", .doc = "Renyi divergence order lambda" },
    { .key = "length_scale_max_s", .type = TS_PARAM_NUMBER,
      FIELD(length_scale_max_s), .min = 0.0, .max = 1e9,
      .bounds = TS_PARAM_MIN_EXCLUSIVE, .default_value = "60.0",
      .doc = "largest RBF length scale l of the priors covered, seconds: "
             "the bound is certified for every l in (0, this]" },
    { .key = "sigma_x_m", .type = TS_PARAM_NUMBER, FIELD(sigma_x_m),
      .min = CIP_GP_MIN_LENGTH_M, .max = 1e7, .default_value = "1.0",
      .doc = "smallest prior standard deviation per axis covered, metres "
             "(the loss falls as it grows, so a small value is "
             "conservative)" },
    { .key = "radius_m", .type = TS_PARAM_NUMBER, FIELD(radius_m),
      .min = CIP_GP_MIN_LENGTH_M, .max = 1e6, .default_value = "100.0",
      .doc = "radius r of the discriminative pairs, metres" },
    { .key = "secret", .type = TS_PARAM_CHOICE, FIELD(secret),
      .default_value = "all", .choices = secret_choices,
      .doc = "the secret subsequence S of each trace, protected as a whole: "
             "all points, or every other one (the paper's Fig. 2)" },
    { .key = "window_points", .type = TS_PARAM_INT, FIELD(window_points),
      .min = 1, .max = TS_CIP_GP_MAX_WINDOW, .default_value = "10",
      .doc = "points per trace, the d of the guarantee" },
    { .key = "min_interval_s", .type = TS_PARAM_NUMBER,
      FIELD(min_interval_s), .min = 0.0, .max = 1e9,
      .bounds = TS_PARAM_MIN_EXCLUSIVE, .default_value = "5.0",
      .doc = "with secret = every_other, a point closer in time to the "
             "user's previous one is rejected (cadence_too_fast)" },
    { .key = "traces_per_window", .type = TS_PARAM_INT,
      FIELD(traces_per_window), .min = 1, .max = 1e9,
      .default_value = "100",
      .doc = "the budget window holds epsilon x traces_per_window: a count "
             "of per-trace bounds, not a bound on several traces together" },
};

static size_t state_bytes(long long window_points)
{
    return sizeof(cip_gp_state) +
           (size_t)(2 * window_points - 1) * sizeof(double);
}

static double *trace_offsets(cip_gp_state *state)
{
    return state->data;
}

static double *recent_intervals(cip_gp_state *state, long long window_points)
{
    return state->data + window_points;
}

static int secret_mask(const cip_gp_profile *p, const double *t, size_t d,
                       unsigned char *in_s)
{
    char why[128];
    ts_cip_secret kind = p->secret == SECRET_ALL ? TS_CIP_SECRET_ALL
                                                 : TS_CIP_SECRET_EVERY_OTHER;
    return ts_cip_secret_mask(kind, t, d, 0.0, 0.0, in_s, why, sizeof why);
}

/* A certified bound on the sup over every l in (0, length_scale_max_s] of
 * L* of the trace with timestamps t[0..d-1] (seconds) under noise sigma_z
 * (ts_cip_sup_loss): 0, -1 on failure, or 1 when the secret points are too
 * correlated at l_max for Sigma_ss to factor without a nugget. The
 * nugget's loss is that of a different, rougher prior and can be far
 * below the RBF prior's (0.5 s apart at l = 60 s it asks a third of the
 * noise), so such a trace is refused, not approximated. *loss is INFINITY
 * when no bound could be certified.
 *
 * The bound only has to be tight where it sets the charge: within
 * TS_CIP_SUP_SLACK of epsilon absolute (the trace's charge is a running
 * maximum that ends near epsilon), not at all below what the trace has
 * already been charged (`charged`), and not once an evaluated loss is
 * above epsilon (the point then starts a new trace). */
static int trace_loss(const cip_gp_profile *p, const double *t, size_t d,
                      double sigma_z, double charged, double *loss)
{
    unsigned char in_s[TS_CIP_GP_MAX_WINDOW];
    if (secret_mask(p, t, d, in_s) != 0)
        return -1;
    ts_cip_prior prior = { .sigma_x = p->sigma_x_m,
                           .length_scale = p->length_scale_max_s };
    ts_cip_sup_goal goal = { .slack = TS_CIP_SUP_SLACK,
                             .abs_slack = TS_CIP_SUP_SLACK * p->epsilon,
                             .enough = charged,
                             .give_up = p->epsilon };
    ts_cip_sup_result result;
    char why[256];
    if (ts_cip_sup_loss(t, d, in_s, &prior, sigma_z, p->radius_m,
                        p->renyi_order, &goal, &result, why,
                        sizeof why) != 0)
        return -1;
    if (result.ill_conditioned)
        return 1;
    *loss = result.loss;
    return 0;
}

/* The smallest sigma_z whose certified bound meets epsilon for the trace
 * t: 0, -1, or 1 as trace_loss. */
static int calibrate(const cip_gp_profile *p, const double *t, size_t d,
                     double *sigma_z)
{
    unsigned char in_s[TS_CIP_GP_MAX_WINDOW];
    if (secret_mask(p, t, d, in_s) != 0)
        return -1;
    ts_cip_prior prior = { .sigma_x = p->sigma_x_m,
                           .length_scale = p->length_scale_max_s };
    char why[256];
    ts_cip_sup_result at;
    if (ts_cip_min_sigma_z_sup(t, d, in_s, &prior, p->radius_m,
                               p->renyi_order, p->epsilon,
                               CIP_GP_SIGMA_REL_TOL, sigma_z, &at, why,
                               sizeof why) != 0)
        return -1;
    if (at.ill_conditioned)
        return 1;
    return *sigma_z > 0.0 && *sigma_z <= CIP_GP_MAX_SIGMA_M ? 0 : -1;
}

/* The trace a new trace is calibrated for: window_points timestamps at the
 * median of the user's latest intervals (the cadence the user has just
 * shown, which is public), or min_interval_s apart before any is known.
 * The median, not the intervals themselves: one gap in the recent past
 * would otherwise size the next trace's noise for a gap that is not
 * coming (under an RBF prior a gap can multiply the loss of a trace
 * several times over). The calibration only has to be a good guess: each
 * point is charged on the actual timestamps, and a point that the guess
 * does not cover starts a new trace. */
static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void expected_trace(const cip_gp_profile *p, cip_gp_state *state,
                           double *t)
{
    double recent[TS_CIP_GP_MAX_WINDOW];
    uint32_t count = state->intervals;
    memcpy(recent, recent_intervals(state, p->window_points),
           count * sizeof *recent);
    double step = p->min_interval_s;
    if (count > 0) {
        qsort(recent, count, sizeof *recent, compare_doubles);
        step = count % 2 ? recent[count / 2]
                         : 0.5 * (recent[count / 2 - 1] + recent[count / 2]);
        step = fmax(step, p->min_interval_s);
    }
    for (long long i = 0; i < p->window_points; i++)
        t[i] = (double)i * step;
}

static int cip_gp_profile_new(const ts_params *params, void **profile,
                              char *err, size_t errlen)
{
    *profile = NULL;
    cip_gp_profile p;
    memset(&p, 0, sizeof p);
    if (ts_mechanism_parse_params(&ts_cip_gp_ops, params, &p, err, errlen) <
        0)
        return -1;
    p.window_budget = p.epsilon * (double)p.traces_per_window;
    if (!isfinite(p.window_budget)) {
        snprintf(err, errlen,
                 "traces_per_window: epsilon x traces_per_window is not "
                 "finite");
        return -1;
    }
    /* The steadiest fast cadence the profile admits must be calibratable;
     * other cadences are calibrated per trace. */
    double t[TS_CIP_GP_MAX_WINDOW];
    for (long long i = 0; i < p.window_points; i++)
        t[i] = (double)i * p.min_interval_s;
    double sigma_z;
    int calibrated = calibrate(&p, t, (size_t)p.window_points, &sigma_z);
    if (calibrated == 1) {
        snprintf(err, errlen,
                 "min_interval_s: %lld points %g s apart are too correlated "
                 "at length_scale_max_s %g for the loss to be computed "
                 "(raise min_interval_s or lower window_points)",
                 p.window_points, p.min_interval_s, p.length_scale_max_s);
        return -1;
    }
    if (calibrated != 0) {
        snprintf(err, errlen,
                 "epsilon: no noise up to %.0f km meets epsilon %g for %lld "
                 "points %g s apart (docs/cip.md)",
                 CIP_GP_MAX_SIGMA_M / 1000.0, p.epsilon, p.window_points,
                 p.min_interval_s);
        return -1;
    }
    cip_gp_profile *copy = malloc(sizeof *copy);
    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *copy = p;
    *profile = copy;
    return 0;
}

static void cip_gp_profile_free(void *profile)
{
    free(profile);
}

static double cip_gp_window_budget(const void *profile)
{
    return ((const cip_gp_profile *)profile)->window_budget;
}

static size_t cip_gp_user_state_size(const void *profile)
{
    return state_bytes(((const cip_gp_profile *)profile)->window_points);
}

static void remember_interval(const cip_gp_profile *p, cip_gp_state *state,
                              double interval_s)
{
    size_t capacity = (size_t)p->window_points - 1;
    if (capacity == 0)
        return;
    recent_intervals(state, p->window_points)[state->next_interval] =
        interval_s;
    state->next_interval = (uint32_t)((state->next_interval + 1) % capacity);
    if (state->intervals < capacity)
        state->intervals++;
}

/* Decides the trace the point belongs to and what it spends, on `next`
 * (a copy of the user's state); the caller commits it only on release.
 * 0, -1 on failure, 1 when no trace the timestamps allow can be computed
 * (too dense, see trace_loss).
 *
 * What a trace is charged: after its k-th point, the released trace is
 * t_1..t_k, and the adversary may stop there, so the ledger must already
 * hold the certified bound U_k of that prefix. U_k is not monotone in k (a
 * later point can make the trace's shape less revealing), so the trace is
 * charged the running maximum max_{j<=k} U_j, and each point spends its
 * increment: the sum of a trace's eps_point is that maximum, at most
 * epsilon. */
static int place_point(const cip_gp_profile *p, cip_gp_state *next,
                       int64_t ts_ms, double *spend)
{
    double *offsets = trace_offsets(next);
    if (next->points > 0 && next->points < (uint32_t)p->window_points) {
        offsets[next->points] =
            (double)(ts_ms - next->trace_start_ms) / 1000.0;
        double loss;
        int status = trace_loss(p, offsets, next->points + 1,
                                next->sigma_z_m, next->charged, &loss);
        if (status < 0)
            return -1;
        if (status == 0 && loss <= p->epsilon) {
            double running_max = fmax(next->charged, loss);
            *spend = running_max - next->charged;
            next->charged = running_max;
            next->points++;
            return 0;
        }
        /* The actual cadence leaks more than the one the trace was
         * calibrated for (or cannot be certified): the trace ends here,
         * having spent its running maximum, and this point starts the
         * next one. */
    }
    double t[TS_CIP_GP_MAX_WINDOW];
    expected_trace(p, next, t);
    double sigma_z, loss;
    int status = calibrate(p, t, (size_t)p->window_points, &sigma_z);
    if (status != 0)
        return status;
    offsets[0] = 0.0;
    if (trace_loss(p, offsets, 1, sigma_z, 0.0, &loss) != 0 ||
        loss > p->epsilon)
        return -1;
    next->trace_start_ms = ts_ms;
    next->sigma_z_m = sigma_z;
    next->charged = loss;
    next->points = 1;
    *spend = loss;
    return 0;
}

static ts_release_status cip_gp_release(const void *profile, void *user_state,
                                        const ts_point *truth,
                                        const ts_budget_view *budget,
                                        ts_rng *rng, ts_report *out)
{
    const cip_gp_profile *p = profile;
    if (!ts_geo_valid(truth->lat, truth->lon))
        return TS_RELEASE_ERROR;

    size_t size = state_bytes(p->window_points);
    _Alignas(double) unsigned char scratch[sizeof(cip_gp_state) +
                                           2 * TS_CIP_GP_MAX_WINDOW *
                                               sizeof(double)];
    cip_gp_state *next = (cip_gp_state *)scratch;
    memcpy(next, user_state, size);

    if (next->seen) {
        double interval_s = (double)(truth->ts_ms - next->last_ts_ms) / 1000.0;
        /* With every point secret the loss does not depend on the
         * timestamps, so no cadence is too fast. */
        if (p->secret != SECRET_ALL && !(interval_s >= p->min_interval_s))
            return TS_RELEASE_TOO_FAST;
        if (interval_s < 0.0)
            return TS_RELEASE_ERROR;
        remember_interval(p, next, interval_s);
    }

    double spend;
    int placed = place_point(p, next, truth->ts_ms, &spend);
    if (placed == 1)
        return TS_RELEASE_TOO_FAST;
    if (placed != 0)
        return TS_RELEASE_ERROR;
    if (!ts_budget_allows(budget, spend))
        return TS_RELEASE_EXHAUSTED;

    /* Two independent N(0, sigma^2) axes are a Rayleigh(sigma) distance at
     * a uniform bearing (Box-Muller). */
    double distance_m =
        next->sigma_z_m * sqrt(-2.0 * log(ts_rng_uniform_open(rng)));
    double bearing = ts_rng_angle(rng);
    if (!isfinite(distance_m) || !isfinite(bearing))
        return TS_RELEASE_ERROR;
    double lat, lon;
    ts_geo_destination(truth->lat, truth->lon, distance_m, bearing, &lat,
                       &lon);
    ts_geo_snap(&lat, &lon);
    if (!ts_geo_valid(lat, lon))
        return TS_RELEASE_ERROR;

    next->seen = 1;
    next->last_ts_ms = truth->ts_ms;
    memcpy(user_state, next, size);

    out->lat = lat;
    out->lon = lon;
    out->eps_point = spend;
    out->has_sigma_z_m = 1;
    out->sigma_z_m = next->sigma_z_m;
    return TS_RELEASE_OK;
}

const ts_mechanism_ops ts_cip_gp_ops = {
    .name = "cip-gp",
    .summary = "Gaussian noise calibrated for conditional inferential "
               "privacy: each trace's secret points as a whole, against RBF "
               "GP priors with l <= l_max (not per point, not across traces)",
    TS_PARAM_ROWS(cip_gp_params),
    .profile_new = cip_gp_profile_new,
    .profile_free = cip_gp_profile_free,
    .window_budget = cip_gp_window_budget,
    .user_state_size = cip_gp_user_state_size,
    .release = cip_gp_release,
};
