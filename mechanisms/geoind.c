#include "mechanisms/geoind.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "geometry/geo.h"
#include "mechanisms/planar_laplace.h"

typedef struct geoind_profile {
    double radius_m;
    double level;
    long long points_per_window;
    double window_budget;   /* eps per metre for the whole window */
    double eps_point;       /* eps per metre spent by each released point */
} geoind_profile;

static const ts_param_spec geoind_params[] = {
    { .key = "radius_m", .type = TS_PARAM_NUMBER,
      .offset = offsetof(geoind_profile, radius_m), .min = 0.0,
      .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "100.0", .doc = "protection radius r, in metres" },
    /* ln 10: the paper's r* = 100 m, eps* = ln 10 */
    { .key = "level", .type = TS_PARAM_NUMBER,
      .offset = offsetof(geoind_profile, level), .min = 0.0,
      .max = INFINITY, .bounds = TS_PARAM_MIN_EXCLUSIVE,
      .default_value = "2.302585092994046",
      .doc = "privacy level l; the window budget is eps = l / r per metre" },
    { .key = "points_per_window", .type = TS_PARAM_INT,
      .offset = offsetof(geoind_profile, points_per_window), .min = 1,
      .max = 1e9, .default_value = "30",
      .doc = "each released point spends eps / points_per_window" },
};

static int geoind_profile_new(const ts_params *params, void **profile,
                              char *err, size_t errlen)
{
    geoind_profile p;
    *profile = NULL;
    if (ts_mechanism_parse_params(&ts_geoind_ops, params, &p, err,
                                  errlen) < 0)
        return -1;

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
    .summary = "independent planar Laplace (geo-indistinguishability)",
    TS_PARAM_ROWS(geoind_params),
    .profile_new = geoind_profile_new,
    .profile_free = geoind_profile_free,
    .window_budget = geoind_window_budget,
    .user_state_size = geoind_user_state_size,
    .release = geoind_release,
};
