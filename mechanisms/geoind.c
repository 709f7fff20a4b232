#include "mechanisms/geoind.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mechanisms/geo.h"
#include "mechanisms/planar_laplace.h"

#define DEFAULT_RADIUS_M 100.0
#define DEFAULT_LEVEL 2.302585092994046 /* ln 10: the paper's r* = 100 m, eps* = ln 10 */
#define DEFAULT_POINTS_PER_WINDOW 30

typedef struct geoind_profile {
    double radius_m;
    double level;
    long long points_per_window;
    double window_budget;   /* eps per metre for the whole window */
    double eps_point;       /* eps per metre spent by each released point */
} geoind_profile;

/* Reads a positive finite double; absent keeps *value (the default). */
static int read_positive(const ts_params *params, const char *key,
                         double *value, char *err, size_t errlen)
{
    double v;
    int found = params->get_double(params->ctx, key, &v);
    if (found == 0)
        return 0;
    if (found < 0) {
        snprintf(err, errlen, "%s: expected a number", key);
        return -1;
    }
    if (!(v > 0.0) || !isfinite(v)) {
        snprintf(err, errlen, "%s: must be a positive finite number", key);
        return -1;
    }
    *value = v;
    return 0;
}

static int geoind_profile_new(const ts_params *params, void **profile,
                              char *err, size_t errlen)
{
    geoind_profile p = {
        .radius_m = DEFAULT_RADIUS_M,
        .level = DEFAULT_LEVEL,
        .points_per_window = DEFAULT_POINTS_PER_WINDOW,
    };

    *profile = NULL;
    if (read_positive(params, "radius_m", &p.radius_m, err, errlen) < 0 ||
        read_positive(params, "level", &p.level, err, errlen) < 0)
        return -1;

    long long n;
    int found = params->get_int(params->ctx, "points_per_window", &n);
    if (found < 0) {
        snprintf(err, errlen, "points_per_window: expected an integer");
        return -1;
    }
    if (found > 0) {
        if (n < 1) {
            snprintf(err, errlen, "points_per_window: must be at least 1");
            return -1;
        }
        p.points_per_window = n;
    }

    /* Extreme but individually valid values (radius_m = 1e-320, ...) can
     * still overflow or underflow the derived budgets. */
    p.window_budget = p.level / p.radius_m;
    p.eps_point = p.window_budget / (double)p.points_per_window;
    if (!isfinite(p.window_budget) || !(p.eps_point > 0.0) ||
        !isnormal(p.eps_point)) {
        snprintf(err, errlen,
                 "radius_m: level / radius_m / points_per_window is not a "
                 "usable per-metre budget");
        return -1;
    }

    if (!ts_planar_laplace_fits_sphere(p.eps_point)) {
        snprintf(err, errlen,
                 "radius_m: noise with mean %.0f km reaches too far around "
                 "the Earth (at most %.0f km; docs/geoind.md)",
                 2.0 / p.eps_point / 1000.0,
                 2.0 / ts_planar_laplace_min_sphere_eps() / 1000.0);
        return -1;
    }

    geoind_profile *copy = malloc(sizeof *copy);
    if (copy == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *copy = p;
    *profile = copy;
    return 0;
}

static void geoind_profile_free(void *profile)
{
    free(profile);
}

static double geoind_window_budget(const void *profile)
{
    return ((const geoind_profile *)profile)->window_budget;
}

static size_t geoind_user_state_size(const void *profile)
{
    (void)profile;
    return 0;
}

static ts_release_status geoind_release(const void *profile, void *user_state,
                                        const ts_point *truth,
                                        const ts_budget_view *budget,
                                        ts_rng *rng, ts_report *out)
{
    const geoind_profile *p = profile;
    (void)user_state;

    if (!ts_budget_allows(budget, p->eps_point))
        return TS_RELEASE_EXHAUSTED;
    if (!ts_geo_valid(truth->lat, truth->lon))
        return TS_RELEASE_ERROR;

    double radius_m, angle;
    ts_planar_laplace_sample(rng, p->eps_point, &radius_m, &angle);
    if (!isfinite(radius_m) || !isfinite(angle))
        return TS_RELEASE_ERROR;

    /* The noise angle is used as the bearing: both are uniform on the
     * circle, so the orientation convention does not matter. */
    double lat, lon;
    ts_geo_destination(truth->lat, truth->lon, radius_m, angle, &lat, &lon);
    ts_geo_snap(&lat, &lon);
    if (!ts_geo_valid(lat, lon))
        return TS_RELEASE_ERROR;

    out->lat = lat;
    out->lon = lon;
    out->eps_point = p->eps_point;
    out->has_predicted = 0;
    out->predicted = 0;
    return TS_RELEASE_OK;
}

const ts_mechanism_ops ts_geoind_ops = {
    .name = "geoind",
    .profile_new = geoind_profile_new,
    .profile_free = geoind_profile_free,
    .window_budget = geoind_window_budget,
    .user_state_size = geoind_user_state_size,
    .release = geoind_release,
};
