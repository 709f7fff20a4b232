/* Driving the cip-gp mechanism from a test: a profile from a handful of
 * settings, one user's state and seeded generator, releases at given
 * times, and the CIP loss of a released trace at one length scale or over
 * a dense grid of them (tests/check_cip.c, tests/check_cip_gp.c). */
#ifndef TRACESAN_TESTS_SUPPORT_CIP_GP_RUN_H
#define TRACESAN_TESTS_SUPPORT_CIP_GP_RUN_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/cip.h"
#include "mechanisms/cip_gp.h"
#include "mechanisms/rng.h"
#include "tests/support/fake_params.h"

#define GP_LAT0 39.9
#define GP_LON0 116.4
#define GP_T0_MS 1700000000000LL

typedef struct gp_setup {
    const char *secret;
    double epsilon, radius_m, renyi_order, length_scale_s, sigma_x_m;
    long long window_points;
    double min_interval_s;
} gp_setup;

/* The shipped profile with secret = "every_other" (docs/cip.md). */
static const gp_setup every_other_setup = {
    .secret = "every_other", .epsilon = 1.0, .radius_m = 100.0,
    .renyi_order = 2.0, .length_scale_s = 60.0, .sigma_x_m = 1.0,
    .window_points = 10, .min_interval_s = 5.0,
};

static inline void *profile_of(const gp_setup *s)
{
    param_table t = { .n = 0 };
    param_string(&t, "secret", s->secret);
    param_double(&t, "epsilon", s->epsilon);
    param_double(&t, "radius_m", s->radius_m);
    param_double(&t, "renyi_order", s->renyi_order);
    param_double(&t, "length_scale_max_s", s->length_scale_s);
    param_double(&t, "sigma_x_m", s->sigma_x_m);
    param_int(&t, "window_points", s->window_points);
    param_double(&t, "min_interval_s", s->min_interval_s);
    ts_params params = table_params(&t);
    void *profile = NULL;
    char err[256] = "";
    ck_assert_msg(ts_cip_gp_ops.profile_new(&params, &profile, err,
                                            sizeof err) == 0,
                  "profile_new: %s", err);
    return profile;
}

/* One user of a profile: its zeroed state and a seeded generator. */
typedef struct gp_user {
    void *profile;
    void *state;
    ts_rng *rng;
} gp_user;

static inline gp_user gp_user_new(const gp_setup *s, uint64_t seed)
{
    gp_user u = { .profile = profile_of(s) };
    u.state = calloc(1, ts_cip_gp_ops.user_state_size(u.profile));
    u.rng = ts_rng_new_seeded(seed);
    ck_assert(u.state != NULL && u.rng != NULL);
    return u;
}

static inline void gp_user_free(gp_user *u)
{
    ts_rng_free(u->rng);
    free(u->state);
    ts_cip_gp_ops.profile_free(u->profile);
}

/* Releases points at the given times (seconds after GP_T0_MS) through one
 * user's state with an unlimited budget; reports into out. */
static inline void release_at(const void *profile, void *state, ts_rng *rng,
                              const double *t_s, size_t n, ts_report *out)
{
    ts_budget_view budget = { .total = 1e300, .spent = 0.0 };
    for (size_t i = 0; i < n; i++) {
        ts_point truth = { .lat = GP_LAT0, .lon = GP_LON0,
                           .ts_ms = GP_T0_MS + llround(t_s[i] * 1000.0),
                           .accuracy_m = NAN };
        memset(&out[i], 0, sizeof out[i]);
        ck_assert_int_eq(ts_cip_gp_ops.release(profile, state, &truth,
                                               &budget, rng, &out[i]),
                         TS_RELEASE_OK);
        ck_assert(out[i].has_sigma_z_m);
        budget.spent += out[i].eps_point;
    }
}

static inline void gp_mask(const gp_setup *s, const double *t, size_t d,
                           unsigned char *in_s)
{
    char err[200] = "";
    ts_cip_secret kind = strcmp(s->secret, "all") == 0
                             ? TS_CIP_SECRET_ALL
                             : TS_CIP_SECRET_EVERY_OTHER;
    ck_assert_int_eq(ts_cip_secret_mask(kind, t, d, 0, 0, in_s, err,
                                        sizeof err),
                     0);
}

/* L* of the trace t[0..d-1] under noise sigma_z at length scale l. */
static inline double gp_loss_at(const gp_setup *s, const double *t, size_t d,
                                double sigma_z, double l)
{
    unsigned char in_s[TS_CIP_GP_MAX_WINDOW];
    gp_mask(s, t, d, in_s);
    ts_cip_prior prior = { .sigma_x = s->sigma_x_m, .length_scale = l };
    ts_cip_result r;
    char err[200] = "";
    ck_assert_msg(ts_cip_loss(t, d, in_s, &prior, sigma_z, s->radius_m,
                              s->renyi_order, &r, err, sizeof err) == 0,
                  "%s", err);
    return r.loss;
}

/* The largest L* over n length scales log-spaced from l_max / 10^4 to
 * l_max (the loss at l_max included); *at (may be NULL) gets its l. */
static inline double gp_dense_max(const gp_setup *s, const double *t,
                                  size_t d, double sigma_z, size_t n,
                                  double *at)
{
    double best = 0.0, best_l = 0.0;
    for (size_t k = 0; k < n; k++) {
        double l = s->length_scale_s *
                   pow(1e-4, (double)k / (double)(n - 1));
        double loss = gp_loss_at(s, t, d, sigma_z, l);
        if (loss > best) {
            best = loss;
            best_l = l;
        }
    }
    if (at != NULL)
        *at = best_l;
    return best;
}

#endif
