#include "mechanisms/delta_privacy.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/belief.h"
#include "inference/grid.h"
#include "inference/markov.h"
#include "inference/model_file.h"
#include "mechanisms/geo.h"
#include "mechanisms/lm_delta.h"
#include "mechanisms/pim.h"

typedef enum noise_kind {
    NOISE_PIM = 0,
    NOISE_LM_DELTA = 1,
} noise_kind;

/* Per-user state: this header, then a ts_belief of `capacity` cells. The
 * caller zero-fills it for a new user and a new window, which the flags
 * read as "no belief yet": the next prior is the initial distribution. */
typedef struct delta_user_header {
    int64_t last_release_ms;     /* public timestamp of the last release */
    uint32_t flags;
    uint32_t reserved;           /* 0; keeps the belief 8-byte aligned */
} delta_user_header;

enum {
    USER_HAS_BELIEF = 1u << 0,
};

/* The model is copied into the profile: the config layer may close its
 * file (a reload frees the config that opened it) while the profile keeps
 * serving users. */
typedef struct delta_profile {
    noise_kind kind;
    double epsilon;
    double delta;
    uint32_t capacity;
    long long points_per_window;
    ts_belief_params belief_params;
    ts_grid grid;
    ts_markov markov;            /* view over the arrays below */
    uint64_t *row_start;
    uint32_t *col;
    double *prob;
    double *initial;
    size_t belief_bytes;

    /* Scratch, mutable through the pointers (see the header). */
    ts_belief_workspace *ws;
    ts_belief *work_belief;      /* the candidate state of a release */
    uint32_t *cells;             /* the delta-set, capacity entries */
    pim_vec2 *centres;
    pim_context *pim;
} delta_profile;

static void delta_profile_free(void *opaque)
{
    delta_profile *p = opaque;
    if (p == NULL)
        return;
    ts_belief_workspace_free(p->ws);
    free(p->work_belief);
    free(p->cells);
    free(p->centres);
    if (p->pim != NULL) {
        pim_context_free(p->pim);
        free(p->pim);
    }
    free(p->row_start);
    free(p->col);
    free(p->prob);
    free(p->initial);
    free(p);
}

static int read_double(const ts_params *params, const char *key,
                       double *value, char *err, size_t errlen)
{
    int found = params->get_double(params->ctx, key, value);
    if (found < 0) {
        snprintf(err, errlen, "%s must be a number", key);
        return -1;
    }
    return 0;
}

static int read_int(const ts_params *params, const char *key,
                    long long *value, long long min, long long max,
                    char *err, size_t errlen)
{
    int found = params->get_int(params->ctx, key, value);
    if (found < 0 || *value < min || *value > max) {
        snprintf(err, errlen, "%s must be an integer in [%lld, %lld]", key,
                 min, max);
        return -1;
    }
    return 0;
}

static int copy_model(delta_profile *p, const ts_model *model, char *err,
                      size_t errlen)
{
    const ts_markov *src = &model->popular;
    p->grid = model->grid;
    size_t cells = src->cell_count;
    size_t nnz = (size_t)src->nnz;
    p->row_start = malloc((cells + 1) * sizeof *p->row_start);
    p->col = malloc((nnz > 0 ? nnz : 1) * sizeof *p->col);
    p->prob = malloc((nnz > 0 ? nnz : 1) * sizeof *p->prob);
    p->initial = malloc((cells > 0 ? cells : 1) * sizeof *p->initial);
    if (p->row_start == NULL || p->col == NULL || p->prob == NULL ||
        p->initial == NULL) {
        snprintf(err, errlen, "model: out of memory");
        return -1;
    }
    memcpy(p->row_start, src->row_start, (cells + 1) * sizeof *p->row_start);
    memcpy(p->col, src->col, nnz * sizeof *p->col);
    memcpy(p->prob, src->prob, nnz * sizeof *p->prob);
    memcpy(p->initial, src->initial, cells * sizeof *p->initial);
    p->markov = (ts_markov){
        .cell_count = src->cell_count,
        .tick_s = src->tick_s,
        .nnz = src->nnz,
        .row_start = p->row_start,
        .col = p->col,
        .prob = p->prob,
        .initial = p->initial,
        .fallback = NULL,
    };
    return 0;
}

static int profile_new_kind(noise_kind kind, const ts_params *params,
                            void **out, char *err, size_t errlen)
{
    *out = NULL;
    delta_profile *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->kind = kind;
    p->epsilon = TS_DELTA_DEFAULT_EPSILON;
    p->delta = TS_DELTA_DEFAULT_DELTA;
    double prune = TS_DELTA_DEFAULT_PRUNE;
    long long capacity = TS_DELTA_DEFAULT_CAPACITY;
    long long max_ticks = TS_DELTA_DEFAULT_MAX_TICKS;
    p->points_per_window = TS_DELTA_DEFAULT_POINTS;
    const char *outside = "reject";

    if (read_double(params, "epsilon", &p->epsilon, err, errlen) < 0)
        goto fail;
    if (!(p->epsilon > 0.0) || !isfinite(p->epsilon) || p->epsilon > 1e6) {
        snprintf(err, errlen, "epsilon must be a positive number <= 1e6");
        goto fail;
    }
    if (read_double(params, "delta", &p->delta, err, errlen) < 0)
        goto fail;
    if (!(p->delta >= 0.0) || !(p->delta < 1.0)) {
        snprintf(err, errlen, "delta must be in [0, 1)");
        goto fail;
    }
    if (read_double(params, "prune_threshold", &prune, err, errlen) < 0)
        goto fail;
    if (read_int(params, "belief_capacity", &capacity, 1,
                 TS_BELIEF_MAX_CAPACITY, err, errlen) < 0 ||
        read_int(params, "max_ticks", &max_ticks, 0, UINT32_MAX, err,
                 errlen) < 0 ||
        read_int(params, "points_per_window", &p->points_per_window, 1,
                 1000000000LL, err, errlen) < 0)
        goto fail;
    int found = params->get_string(params->ctx, "outside_region", &outside);
    if (found < 0 || strcmp(outside, "reject") != 0) {
        snprintf(err, errlen, "outside_region must be \"reject\"");
        goto fail;
    }
    p->capacity = (uint32_t)capacity;
    p->belief_params.prune_threshold = prune;
    p->belief_params.max_ticks = (uint32_t)max_ticks;
    if (ts_belief_params_check(&p->belief_params, err, errlen) < 0)
        goto fail;

    if (params->get_model == NULL) {
        snprintf(err, errlen, "model: this caller cannot open model files");
        goto fail;
    }
    const ts_model *model = params->get_model(params->ctx, "model", err,
                                              errlen);
    if (model == NULL) {
        if (err[0] == '\0')
            snprintf(err, errlen, "model is required");
        goto fail;
    }
    if (copy_model(p, model, err, errlen) < 0)
        goto fail;

    p->belief_bytes = ts_belief_bytes(p->capacity);
    p->ws = ts_belief_workspace_new(p->markov.cell_count, p->capacity);
    p->work_belief = malloc(p->belief_bytes);
    p->cells = malloc(p->capacity * sizeof *p->cells);
    p->centres = malloc(p->capacity * sizeof *p->centres);
    p->pim = malloc(sizeof *p->pim);
    if (p->belief_bytes == 0 || p->ws == NULL || p->work_belief == NULL ||
        p->cells == NULL || p->centres == NULL || p->pim == NULL) {
        snprintf(err, errlen, "belief_capacity: out of memory");
        goto fail;
    }
    pim_context_init(p->pim);
    *out = p;
    return 0;

fail:
    delta_profile_free(p);
    return -1;
}

static int pim_profile_new(const ts_params *params, void **out, char *err,
                           size_t errlen)
{
    return profile_new_kind(NOISE_PIM, params, out, err, errlen);
}

static int lm_delta_profile_new(const ts_params *params, void **out,
                                char *err, size_t errlen)
{
    return profile_new_kind(NOISE_LM_DELTA, params, out, err, errlen);
}

static double delta_window_budget(const void *opaque)
{
    const delta_profile *p = opaque;
    return p->epsilon * (double)p->points_per_window;
}

static size_t delta_user_state_size(const void *opaque)
{
    const delta_profile *p = opaque;
    return sizeof(delta_user_header) + p->belief_bytes;
}

static ts_release_status delta_release(const void *opaque, void *user_state,
                                       const ts_point *truth,
                                       const ts_budget_view *budget,
                                       ts_rng *rng, ts_report *out)
{
    const delta_profile *p = opaque;
    delta_user_header *header = user_state;
    ts_belief *stored = (ts_belief *)(header + 1);
    ts_belief *belief = p->work_belief;

    if (!ts_budget_allows(budget, p->epsilon))
        return TS_RELEASE_EXHAUSTED;

    /* outside_region = "reject": refused before any state changes. */
    uint32_t true_cell;
    if (ts_grid_cell_of_latlon(&p->grid, truth->lat, truth->lon,
                               &true_cell) < 0)
        return TS_RELEASE_ERROR;

    /* Work on a copy: the stored state changes only when a point is
     * published, so a failure leaves it as the public record says. */
    uint64_t ticks = 0;
    /* A block from another capacity (restored from an older config)
     * restarts from the initial distribution, like a new user. */
    if ((header->flags & USER_HAS_BELIEF) &&
        stored->capacity == p->capacity && stored->count <= p->capacity) {
        memcpy(belief, stored, p->belief_bytes);
        int64_t k = ts_markov_ticks_between(p->markov.tick_s,
                                            header->last_release_ms,
                                            truth->ts_ms);
        if (k < 0)
            return TS_RELEASE_ERROR;
        ticks = (uint64_t)k;
    } else if (ts_belief_init(belief, p->capacity) < 0) {
        return TS_RELEASE_ERROR;
    }
    if (ts_belief_predict(belief, &p->markov, ticks, &p->belief_params,
                          p->ws) == TS_BELIEF_ERROR)
        return TS_RELEASE_ERROR;

    size_t n = ts_belief_delta_set(belief, p->delta, p->cells, p->ws);
    if (n == 0)
        return TS_RELEASE_ERROR;
    ts_grid_cell_centres(&p->grid, p->cells, n, p->centres);

    /* Drift: the true cell is not in the set; release its surrogate. */
    pim_vec2 released = ts_grid_project(&p->grid, truth->lat, truth->lon);
    if (!ts_delta_set_contains(p->cells, n, true_cell)) {
        uint32_t surrogate;
        if (ts_delta_set_surrogate(&p->grid, p->cells, n, released,
                                   &surrogate) < 0)
            return TS_RELEASE_ERROR;
        released = ts_grid_cell_centre(&p->grid, surrogate);
    }

    pim_vec2 z;
    ts_pim_emission pim_emission = { .pim = p->pim, .eps = p->epsilon };
    ts_lm_emission lm_emission = { .scale = NAN };
    ts_log_emission_fn emission;
    const void *emission_ctx;
    if (p->kind == NOISE_PIM) {
        if (pim_context_build(p->pim, p->centres, n, p->grid.cell_m) < 0 ||
            pim_sample(p->pim, released, p->epsilon, rng, &z) < 0)
            return TS_RELEASE_ERROR;
        emission = ts_pim_log_emission;
        emission_ctx = &pim_emission;
    } else {
        double dx, dy;
        if (lm_delta_sensitivity(p->centres, n, p->grid.cell_m, &dx,
                                 &dy) < 0)
            return TS_RELEASE_ERROR;
        lm_emission.scale = lm_delta_scale(dx, dy, p->epsilon);
        if (lm_delta_sample(released, lm_emission.scale, rng, &z) < 0)
            return TS_RELEASE_ERROR;
        emission = ts_lm_log_emission;
        emission_ctx = &lm_emission;
    }

    double lat, lon;
    ts_grid_unproject(&p->grid, z, &lat, &lon);
    ts_geo_snap(&lat, &lon);
    if (!isfinite(lat) || !isfinite(lon))
        return TS_RELEASE_ERROR;

    /* The posterior sees exactly what an observer sees: the snapped
     * published point, projected back to the plane. */
    pim_vec2 published = ts_grid_project(&p->grid, lat, lon);
    if (ts_belief_posterior(belief, &p->grid, published, emission,
                            emission_ctx, &p->belief_params,
                            p->ws) == TS_BELIEF_ERROR)
        return TS_RELEASE_ERROR;

    /* Only the live entries: the scratch block's tail holds leftovers of
     * other users, which must not reach this user's (persisted) state. */
    size_t live = sizeof(ts_belief) +
                  (size_t)belief->count * sizeof(ts_belief_entry);
    memcpy(stored, belief, live);
    memset((unsigned char *)stored + live, 0, p->belief_bytes - live);
    header->last_release_ms = truth->ts_ms;
    header->flags |= USER_HAS_BELIEF;

    memset(out, 0, sizeof *out);
    out->lat = lat;
    out->lon = lon;
    out->eps_point = p->epsilon;
    out->has_delta_set_size = 1;
    out->delta_set_size = (unsigned)n;
    return TS_RELEASE_OK;
}

const ts_mechanism_ops ts_pim_ops = {
    .name = "pim",
    .profile_new = pim_profile_new,
    .profile_free = delta_profile_free,
    .window_budget = delta_window_budget,
    .user_state_size = delta_user_state_size,
    .release = delta_release,
};

const ts_mechanism_ops ts_lm_delta_ops = {
    .name = "lm-delta",
    .profile_new = lm_delta_profile_new,
    .profile_free = delta_profile_free,
    .window_budget = delta_window_budget,
    .user_state_size = delta_user_state_size,
    .release = delta_release,
};
