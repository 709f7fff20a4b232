#include "mechanisms/delta_privacy.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/belief.h"
#include "inference/grid.h"
#include "inference/markov.h"
#include "inference/model_file.h"
#include "geometry/geo.h"
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
    /* 1 - certified mass of the belief (inference/belief.h), rounded up so
     * the certificate never grows by storing it. Blocks written before it
     * existed hold 0 here: they were treated as exact, and still are. */
    float uncertified;
} delta_user_header;

enum {
    USER_HAS_BELIEF = 1u << 0,
};

/* A belief cell and its distance from the prior's mean (delta_set =
 * "compact"). */
typedef struct ranked_cell {
    double distance2;
    double prob;
    uint32_t cell;
} ranked_cell;

/* The profile holds a reference to the caller's model (ts_model_ref): the
 * config layer drops its own reference on reload while the profile keeps
 * serving users, and the loaded model is shared by every profile and
 * every user instead of being copied per profile. */
typedef struct delta_profile {
    noise_kind kind;
    double epsilon;
    double delta;
    uint32_t capacity;
    long long points_per_window;
    int personal_models;
    int reject_outside;     /* outside_region = "reject" */
    long long capacity_param;    /* belief_capacity, as configured */
    long long max_ticks_param;   /* max_ticks, as configured */
    double prune_param;          /* prune_threshold, as configured */
    const void *model_param;     /* the caller's model (ts_params) */
    int likelihood_paper;        /* likelihood = "paper" */
    long long break_ticks;       /* 0: gaps follow M^k (and max_ticks) */
    double resume_weight;        /* prior mass kept where the user was
                                    across a break */
    int compact_set;             /* delta_set = "compact" */
    double set_radius_m;         /* 0: the paper's set; else only its cells
                                    within this distance of the most
                                    probable one */
    int window_keeps_belief;     /* a new budget window keeps the belief */
    ts_belief_params belief_params;
    ts_model *model;             /* a reference, dropped in profile_free */
    size_t belief_bytes;

    /* Scratch, mutable through the pointers (see the header). */
    ts_belief_workspace *ws;
    ts_belief *work_belief;      /* the candidate state of a release */
    uint32_t *cells;             /* the delta-set, capacity entries */
    ts_vec2 *centres;
    ts_pim_context *pim;
    /* The surrogate-aware likelihood: the set's cells by row, and where
     * each belief cell would be released from. */
    uint32_t *set_by_cell;       /* capacity: the set, ascending cell */
    uint32_t *row_first;         /* rows + 1 offsets into set_by_cell */
    ts_vec2 *release_from;       /* capacity */
    ranked_cell *by_distance;    /* capacity: the compact set's order */
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
    free(p->set_by_cell);
    free(p->row_first);
    free(p->release_from);
    free(p->by_distance);
    if (p->pim != NULL) {
        ts_pim_context_free(p->pim);
        free(p->pim);
    }
    ts_model_close(p->model);
    free(p);
}

#define FIELD(f) .offset = offsetof(delta_profile, f)
static const char *const outside_region_names[] = { "surrogate", "reject",
                                                    NULL };
static const char *const likelihood_names[] = { "surrogate", "paper", NULL };
static const char *const delta_set_names[] = { "fewest", "compact", NULL };

/* Shared by pim and lm-delta. */
static const ts_param_spec delta_params[] = {
    { .key = "epsilon", .type = TS_PARAM_NUMBER, FIELD(epsilon), .min = 0,
      .max = 1e6, .bounds = TS_PARAM_MIN_EXCLUSIVE, .default_value = "1.0",
      .doc = "unitless epsilon spent by each release" },
    { .key = "delta", .type = TS_PARAM_NUMBER, FIELD(delta), .min = 0,
      .max = 1, .bounds = TS_PARAM_MAX_EXCLUSIVE, .default_value = "0.01",
      .doc = "mass left outside the delta-location set" },
    { .key = "points_per_window", .type = TS_PARAM_INT,
      FIELD(points_per_window), .min = 1, .max = 1e9, .default_value = "1",
      .doc = "releases per window: budget epsilon x points_per_window" },
    { .key = "belief_capacity", .type = TS_PARAM_INT, FIELD(capacity_param),
      .min = 1, .max = TS_BELIEF_MAX_CAPACITY, .default_value = "1024",
      .doc = "most cells a user's belief keeps (16 bytes each)" },
    { .key = "prune_threshold", .type = TS_PARAM_NUMBER, FIELD(prune_param),
      .min = 0, .max = 1, .bounds = TS_PARAM_MAX_EXCLUSIVE,
      .default_value = "0.0",
      .doc = "relative mass below which a belief cell is dropped" },
    { .key = "max_ticks", .type = TS_PARAM_INT, FIELD(max_ticks_param),
      .min = 0, .max = TS_BELIEF_MAX_TICKS, .default_value = "1000",
      .doc = "longer gaps restart the belief from the initial distribution" },
    { .key = "outside_region", .type = TS_PARAM_CHOICE,
      FIELD(reject_outside), .choices = outside_region_names,
      .default_value = "surrogate",
      .doc = "a true point outside the model's region: released from the "
             "nearest cell, or rejected" },
    { .key = "personal_models", .type = TS_PARAM_SWITCH,
      FIELD(personal_models), .default_value = "true",
      .doc = "use the pseudonym's personal model when the file has one" },
    { .key = "likelihood", .type = TS_PARAM_CHOICE,
      FIELD(likelihood_paper), .choices = likelihood_names,
      .default_value = "surrogate",
      .doc = "posterior likelihood of a cell outside the delta-location "
             "set: the noise's density at its surrogate (what the mechanism "
             "releases from), or at the cell itself (the paper)" },
    { .key = "break_ticks", .type = TS_PARAM_INT, FIELD(break_ticks),
      .min = 0, .max = TS_BELIEF_MAX_TICKS, .default_value = "15",
      .doc = "longer gaps are breaks: the prior is resume_weight of the "
             "belief moved break_ticks steps plus the rest of the initial "
             "distribution; 0: M^k and max_ticks (the paper)" },
    { .key = "resume_weight", .type = TS_PARAM_NUMBER, FIELD(resume_weight),
      .min = 0, .max = 1, .default_value = "1",
      .doc = "prior mass kept near the last belief across a break" },
    { .key = "delta_set", .type = TS_PARAM_CHOICE, FIELD(compact_set),
      .choices = delta_set_names, .default_value = "fewest",
      .doc = "\"fewest\": the fewest cells holding 1 - delta of the prior "
             "(Definition 3.1); \"compact\": of that set and the cells "
             "nearest the prior's mean holding 1 - delta, the one reaching "
             "less far from the mean" },
    { .key = "set_radius_m", .type = TS_PARAM_NUMBER, FIELD(set_radius_m),
      .min = 0, .max = 1e7, .default_value = "0",
      .doc = "0: the delta-location set of Definition 3.1; > 0: only its "
             "cells within this many metres of its most probable cell "
             "(less than 1 - delta of the prior when the belief is wider; "
             "docs/delta_privacy.md)" },
    { .key = "window_keeps_belief", .type = TS_PARAM_SWITCH,
      FIELD(window_keeps_belief), .default_value = "true",
      .doc = "a user's next budget window starts from the belief the last "
             "one left (it follows published points only); false: from the "
             "initial distribution, like a new user" },
    { .key = "model", .type = TS_PARAM_MODEL, FIELD(model_param),
      .doc = "model file of `tracesan learn`; \"\" disables the profile" },
};
#undef FIELD

static int by_mass_descending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* How many of the largest initial probabilities reach `mass` (for the
 * capacity message; once per profile load). */
static size_t cells_for_mass(const ts_markov *markov, double mass)
{
    double *sorted = malloc(markov->cell_count * sizeof *sorted);
    if (sorted == NULL)
        return markov->cell_count;
    memcpy(sorted, markov->initial, markov->cell_count * sizeof *sorted);
    qsort(sorted, markov->cell_count, sizeof *sorted, by_mass_descending);
    size_t n = 0;
    double sum = 0.0;
    while (n < markov->cell_count && sum < mass)
        sum += sorted[n++];
    free(sorted);
    return n;
}

static int profile_new_kind(const ts_mechanism_ops *ops, noise_kind kind,
                            const ts_params *params, void **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    delta_profile *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->kind = kind;
    if (ts_mechanism_parse_params(ops, params, p, err, errlen) < 0) {
        p->model_param = NULL;
        goto fail;
    }
    p->capacity = (uint32_t)p->capacity_param;
    p->belief_params.prune_threshold = p->prune_param;
    p->belief_params.max_ticks = (uint32_t)p->max_ticks_param;
    if (ts_belief_params_check(&p->belief_params, err, errlen) < 0)
        goto fail;
    const ts_model *model = p->model_param;

    /* get_model hands out a const pointer because the profile must not
     * change the model; the reference count is the one mutable part, and
     * it lives apart from the (read-only) model data. */
    p->model = ts_model_ref((ts_model *)model);

    p->belief_bytes = ts_belief_bytes(p->capacity);
    p->ws = ts_belief_workspace_new(p->model->grid.cell_count,
                                    p->capacity);
    p->work_belief = malloc(p->belief_bytes);
    p->cells = malloc(p->capacity * sizeof *p->cells);
    p->centres = malloc(p->capacity * sizeof *p->centres);
    p->pim = malloc(sizeof *p->pim);
    p->set_by_cell = malloc(p->capacity * sizeof *p->set_by_cell);
    p->row_first = malloc(((size_t)p->model->grid.rows + 1) *
                          sizeof *p->row_first);
    p->release_from = malloc(p->capacity * sizeof *p->release_from);
    p->by_distance = malloc(p->capacity * sizeof *p->by_distance);
    if (p->belief_bytes == 0 || p->ws == NULL || p->work_belief == NULL ||
        p->cells == NULL || p->centres == NULL || p->pim == NULL ||
        p->set_by_cell == NULL || p->row_first == NULL ||
        p->release_from == NULL || p->by_distance == NULL) {
        snprintf(err, errlen, "belief_capacity: out of memory");
        goto fail;
    }
    ts_pim_context_init(p->pim);

    /* Every window starts from the initial distribution: if the capacity
     * cannot hold 1 - delta of it, every first release would be refused
     * (pruning's loss is uncertified mass). Say so at load, with the
     * capacity that would do. */
    double certified = 1.0;
    if (ts_belief_init(p->work_belief, p->capacity) < 0 ||
        ts_belief_reset(p->work_belief, &p->model->popular, &p->belief_params,
                        p->ws, &certified) == TS_BELIEF_ERROR) {
        snprintf(err, errlen, "model: its initial distribution is unusable");
        goto fail;
    }
    if (certified < 1.0 - p->delta) {
        snprintf(err, errlen,
                 "belief_capacity: %u cells hold %.4f of the model's initial "
                 "distribution, less than 1 - delta = %.4f; at least %zu "
                 "cells are needed",
                 p->capacity, certified, 1.0 - p->delta,
                 cells_for_mass(&p->model->popular, 1.0 - p->delta));
        goto fail;
    }
    *out = p;
    return 0;

fail:
    delta_profile_free(p);
    return -1;
}

static int pim_profile_new(const ts_params *params, void **out, char *err,
                           size_t errlen)
{
    return profile_new_kind(&ts_pim_ops, NOISE_PIM, params, out, err,
                            errlen);
}

static int lm_delta_profile_new(const ts_params *params, void **out,
                                char *err, size_t errlen)
{
    return profile_new_kind(&ts_lm_delta_ops, NOISE_LM_DELTA, params, out,
                            err, errlen);
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

/* The public half of one release, shared by delta_release and
 * ts_delta_replay so that an observer's replay cannot diverge from the
 * mechanism: everything here is a function of the model, the user's
 * public pseudonym, the public timestamps and the published points. */
typedef struct public_step {
    const ts_markov *markov;     /* popular or the user's personal model */
    double certified;            /* lower bound on the stored belief's mass
                                    under the exact prior */
    size_t n;                    /* |Delta X|: p->cells[0..n), p->centres */
    ts_log_emission_fn emission;
    ts_pim_emission pim_emission;
    ts_lm_emission lm_emission;
} public_step;

/* public_step_begin's refusal when pruning left less than 1 - delta of
 * the prior certified (a public fact: the belief is public). */
#define PUBLIC_STEP_UNCERTIFIED (-2)

/* The model of a pseudonym: a function of the public pseudonym only. */
static const ts_markov *model_for(const delta_profile *p, const char *user,
                                  size_t user_len)
{
    if (!p->personal_models || user == NULL || user_len == 0)
        return &p->model->popular;
    return ts_model_for_user(p->model, user, user_len);
}

static int nearer_first(const void *a, const void *b)
{
    const ranked_cell *x = a, *y = b;
    if (x->distance2 != y->distance2)
        return x->distance2 < y->distance2 ? -1 : 1;
    return (x->cell > y->cell) - (x->cell < y->cell);
}

/* delta_set = "compact": the cells nearest the prior's mean (ties to the
 * lower index) until certified times their share reaches 1 - delta, the
 * same mass rule as ts_belief_delta_set. When that set reaches less far
 * from the mean than the fewest-cells set already in p->cells[0, n), it
 * replaces it. Either holds at least 1 - delta of the exact prior, and
 * both are functions of the prior alone. Returns the set's size. */
static size_t compact_delta_set(const delta_profile *p, const ts_belief *b,
                                double certified, size_t n)
{
    const ts_grid *g = &p->model->grid;
    double total = 0.0, mx = 0.0, my = 0.0;
    for (uint32_t i = 0; i < b->count; i++) {
        ts_vec2 c = ts_grid_cell_centre(g, b->entry[i].cell);
        total += b->entry[i].prob;
        mx += b->entry[i].prob * c.x;
        my += b->entry[i].prob * c.y;
    }
    mx /= total;
    my /= total;
    ranked_cell *v = p->by_distance;
    for (uint32_t i = 0; i < b->count; i++) {
        ts_vec2 c = ts_grid_cell_centre(g, b->entry[i].cell);
        double dx = c.x - mx, dy = c.y - my;
        v[i] = (ranked_cell){ .distance2 = dx * dx + dy * dy,
                              .prob = b->entry[i].prob,
                              .cell = b->entry[i].cell };
    }
    double fewest_reach = 0.0;
    for (size_t i = 0; i < n; i++) {
        ts_vec2 c = ts_grid_cell_centre(g, p->cells[i]);
        double dx = c.x - mx, dy = c.y - my;
        fewest_reach = fmax(fewest_reach, dx * dx + dy * dy);
    }
    qsort(v, b->count, sizeof *v, nearer_first);
    double target = (1.0 - p->delta) / certified * total -
                    TS_BELIEF_DELTA_SLACK * total;
    double mass = 0.0;
    size_t taken = 0;
    while (taken < b->count && mass < target)
        mass += v[taken++].prob;
    if (mass < target || v[taken - 1].distance2 >= fewest_reach)
        return n;
    for (size_t i = 0; i < taken; i++)
        p->cells[i] = v[i].cell;
    return taken;
}

/* Prior for ts_ms in p->work_belief, the delta-location set and the
 * emission context of the noise that the release at ts_ms uses. Touches
 * only the profile's scratch. */
static int public_step_begin(const delta_profile *p,
                             const delta_user_header *header,
                             const ts_belief *stored, const char *user,
                             size_t user_len, int64_t ts_ms,
                             public_step *step)
{
    ts_belief *belief = p->work_belief;
    step->markov = model_for(p, user, user_len);

    /* Work on a copy: the stored state changes only when a point is
     * published, so a failure leaves it as the public record says. */
    uint64_t ticks = 0;
    step->certified = 1.0;
    /* A block from another capacity (restored from an older config)
     * restarts from the initial distribution, like a new user. */
    if ((header->flags & USER_HAS_BELIEF) &&
        stored->capacity == p->capacity && stored->count <= p->capacity) {
        memcpy(belief, stored, p->belief_bytes);
        step->certified = 1.0 - (double)header->uncertified;
        int64_t k = ts_markov_ticks_between(step->markov->tick_s,
                                            header->last_release_ms, ts_ms);
        if (k < 0)
            return -1;
        ticks = (uint64_t)k;
    } else if (ts_belief_init(belief, p->capacity) < 0) {
        return -1;
    }
    if (p->break_ticks > 0 && ticks > (uint64_t)p->break_ticks &&
        belief->count > 0) {
        /* A break: the model's moves say nothing about time the user was
         * not tracked; where users resume is mostly where they stopped
         * (docs/delta_privacy.md, "Issue 17"). */
        if (ts_belief_predict(belief, step->markov, (uint64_t)p->break_ticks,
                              &p->belief_params, p->ws,
                              &step->certified) == TS_BELIEF_ERROR ||
            ts_belief_mix_initial(belief, step->markov, p->resume_weight,
                                  &p->belief_params, p->ws,
                                  &step->certified) == TS_BELIEF_ERROR)
            return -1;
    } else if (ts_belief_predict(belief, step->markov, ticks,
                                 &p->belief_params, p->ws,
                                 &step->certified) == TS_BELIEF_ERROR) {
        return -1;
    }

    /* What pruning dropped counts against delta: the set must hold
     * 1 - delta of the exact prior, not of the truncated one. */
    if (step->certified < 1.0 - p->delta)
        return PUBLIC_STEP_UNCERTIFIED;
    step->n = ts_belief_delta_set(belief, p->delta, step->certified,
                                  p->cells, p->ws);
    if (step->n == 0)
        return -1;
    if (p->compact_set)
        step->n = compact_delta_set(p, belief, step->certified, step->n);
    if (p->set_radius_m > 0.0) {
        /* cells[0] is the most probable cell: keep the set's cells near it,
         * in selection order. */
        ts_vec2 mode = ts_grid_cell_centre(&p->model->grid, p->cells[0]);
        double r2 = p->set_radius_m * p->set_radius_m;
        size_t kept = 0;
        for (size_t i = 0; i < step->n; i++) {
            ts_vec2 c = ts_grid_cell_centre(&p->model->grid, p->cells[i]);
            double dx = c.x - mode.x, dy = c.y - mode.y;
            if (dx * dx + dy * dy <= r2)
                p->cells[kept++] = p->cells[i];
        }
        step->n = kept;
    }
    ts_grid_cell_centres(&p->model->grid, p->cells, step->n, p->centres);

    if (p->kind == NOISE_PIM) {
        if (ts_pim_context_build(p->pim, p->centres, step->n,
                                 p->model->grid.cell_m) < 0)
            return -1;
        step->pim_emission = ts_pim_emission_make(p->pim, p->epsilon);
        step->emission = ts_pim_log_emission;
    } else {
        double dx, dy;
        if (ts_lm_delta_sensitivity(p->centres, step->n, p->model->grid.cell_m,
                                    &dx, &dy) < 0)
            return -1;
        step->lm_emission.scale = ts_lm_delta_scale(dx, dy, p->epsilon);
        if (!(step->lm_emission.scale > 0.0) ||
            !isfinite(step->lm_emission.scale))
            return -1;
        step->emission = ts_lm_log_emission;
    }
    return 0;
}

static int by_cell(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* First index in v[lo, hi) whose value is >= key. */
static uint32_t lower_bound(const uint32_t *v, uint32_t lo, uint32_t hi,
                            uint32_t key)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Where the mechanism releases a user in each belief cell from: the cell's
 * centre inside the delta-location set, the centre of its surrogate (the
 * set's nearest cell, ties to the lower index, as ts_delta_set_surrogate)
 * outside. Public: the set and the belief are. The set's cells are
 * bucketed by row; a query scans rows outward from its own (clamped to
 * the set's rows) and stops once the row distance alone exceeds the best. */
static void release_positions(const delta_profile *p, const ts_belief *belief,
                              size_t n)
{
    const ts_grid *g = &p->model->grid;
    memcpy(p->set_by_cell, p->cells, n * sizeof *p->cells);
    qsort(p->set_by_cell, n, sizeof *p->set_by_cell, by_cell);
    uint32_t *first = p->row_first;
    size_t k = 0;
    for (uint32_t r = 0; r <= g->rows; r++) {
        while (k < n && ts_grid_cell_row(g, p->set_by_cell[k]) < r)
            k++;
        first[r] = (uint32_t)k;
    }
    long row_lo = (long)ts_grid_cell_row(g, p->set_by_cell[0]);
    long row_hi = (long)ts_grid_cell_row(g, p->set_by_cell[n - 1]);
    for (uint32_t i = 0; i < belief->count; i++) {
        uint32_t cell = belief->entry[i].cell;
        long r0 = (long)ts_grid_cell_row(g, cell);
        long c0 = (long)ts_grid_cell_col(g, cell);
        double best = INFINITY;
        uint32_t best_cell = p->set_by_cell[0];
        long start = r0 < row_lo ? row_lo : r0 > row_hi ? row_hi : r0;
        for (long step = 0;; step++) {
            long below = start - step, above = start + step;
            if (below < row_lo && above > row_hi)
                break;
            long nearest_dr = labs((below >= row_lo ? below : above) - r0);
            if (above <= row_hi && labs(above - r0) < nearest_dr)
                nearest_dr = labs(above - r0);
            if ((double)(nearest_dr * nearest_dr) > best)
                break;
            for (int side = 0; side < 2; side++) {
                long r = side == 0 ? below : above;
                if ((side == 1 && step == 0) || r < row_lo || r > row_hi)
                    continue;
                uint32_t lo = first[r], hi = first[r + 1];
                if (lo == hi)
                    continue;
                uint32_t key = ts_grid_cell_index(g, (uint32_t)r,
                                                  (uint32_t)c0);
                uint32_t at = lower_bound(p->set_by_cell, lo, hi, key);
                for (uint32_t j = at > lo ? at - 1 : at;
                     j <= at && j < hi; j++) {
                    long dc = (long)ts_grid_cell_col(g, p->set_by_cell[j]) - c0;
                    long dr = r - r0;
                    double d2 = (double)(dr * dr + dc * dc);
                    if (d2 < best ||
                        (d2 == best && p->set_by_cell[j] < best_cell)) {
                        best = d2;
                        best_cell = p->set_by_cell[j];
                    }
                }
            }
        }
        p->release_from[i] = ts_grid_cell_centre(g, best_cell);
    }
}

/* Posterior of the published (snapped) point and the new stored state. */
static int public_step_finish(const delta_profile *p,
                              delta_user_header *header, ts_belief *stored,
                              const public_step *step, double lat,
                              double lon, int64_t ts_ms)
{
    ts_belief *belief = p->work_belief;
    const void *emission_ctx = p->kind == NOISE_PIM
        ? (const void *)&step->pim_emission
        : (const void *)&step->lm_emission;
    /* The posterior sees exactly what an observer sees: the snapped
     * published point, projected back to the plane. */
    ts_vec2 published = ts_grid_project(&p->model->grid, lat, lon);
    double certified = step->certified;
    const ts_vec2 *where = NULL;
    if (!p->likelihood_paper) {
        release_positions(p, belief, step->n);
        where = p->release_from;
    }
    if (ts_belief_posterior_at(belief, &p->model->grid, where, published,
                               step->emission, emission_ctx,
                               &p->belief_params, p->ws,
                               &certified) == TS_BELIEF_ERROR)
        return -1;
    float uncertified = (float)(1.0 - certified);
    if ((double)uncertified < 1.0 - certified)
        uncertified = nextafterf(uncertified, 2.0f);

    /* Only the live entries: the scratch block's tail holds leftovers of
     * other users, which must not reach this user's (persisted) state. */
    size_t live = sizeof(ts_belief) +
                  (size_t)belief->count * sizeof(ts_belief_entry);
    memcpy(stored, belief, live);
    memset((unsigned char *)stored + live, 0, p->belief_bytes - live);
    header->last_release_ms = ts_ms;
    header->flags |= USER_HAS_BELIEF;
    header->uncertified = uncertified;
    return 0;
}

/* Drift (Definition 3.2): the true point has no cell in the
 * delta-location set, either because its cell is not in it or because it
 * lies outside the model's box. The one test both the release and the
 * observer's replay make. The work is the same wherever the truth lies:
 * the membership scan has no early exit, a point outside the box is
 * tested against cell 0 and the result discarded, and the surrogate (the
 * set's cell nearest the true point in the grid's plane) is searched on
 * every call, drift or not. `surrogate` receives it; -1 when the set is
 * empty or the point not finite. */
static int locate(const delta_profile *p, const public_step *step,
                  const ts_point *truth, int *drift, uint32_t *surrogate)
{
    uint32_t cell = 0;
    int outside = ts_grid_cell_of_latlon(&p->model->grid, truth->lat,
                                         truth->lon, &cell) < 0;
    int member = ts_delta_set_contains(p->cells, step->n, cell);
    *drift = outside | !member;
    ts_vec2 projected = ts_grid_project(&p->model->grid, truth->lat,
                                         truth->lon);
    return ts_delta_set_surrogate(&p->model->grid, p->cells, step->n,
                                  projected, surrogate);
}

static ts_release_status delta_release(const void *opaque, void *user_state,
                                       const ts_point *truth,
                                       const ts_budget_view *budget,
                                       ts_rng *rng, ts_report *out)
{
    const delta_profile *p = opaque;
    const ts_grid *grid = &p->model->grid;
    delta_user_header *header = user_state;
    ts_belief *stored = (ts_belief *)(header + 1);

    if (!ts_budget_allows(budget, p->epsilon))
        return TS_RELEASE_EXHAUSTED;

    /* Outside the model's box. "reject" refuses before any state changes,
     * which tells whoever reads the rejections that the user left a public
     * box; "surrogate" (the default) releases it as a drift, which looks
     * like any other release. */
    uint32_t true_cell;
    if (p->reject_outside &&
        ts_grid_cell_of_latlon(grid, truth->lat, truth->lon, &true_cell) < 0)
        return TS_RELEASE_OUTSIDE_REGION;

    public_step step;
    int begun = public_step_begin(p, header, stored, truth->user,
                                  truth->user_len, truth->ts_ms, &step);
    if (begun == PUBLIC_STEP_UNCERTIFIED)
        return TS_RELEASE_UNCERTIFIED;
    if (begun < 0)
        return TS_RELEASE_ERROR;

    /* Drift: the true cell is not in the set (or there is no true cell);
     * release the surrogate, the set's cell nearest the true point in the
     * grid's plane. The only secret-dependent part of a release, with the
     * noise below, so both candidates are computed every time and one is
     * selected; the release's work does not depend on the drift bit or on
     * the true cell's rank in the set. */
    int drift;
    uint32_t surrogate;
    if (locate(p, &step, truth, &drift, &surrogate) < 0)
        return TS_RELEASE_ERROR;
    ts_vec2 projected = ts_grid_project(grid, truth->lat, truth->lon);
    ts_vec2 substitute = ts_grid_cell_centre(grid, surrogate);
    ts_vec2 released = {
        .x = drift ? substitute.x : projected.x,
        .y = drift ? substitute.y : projected.y,
    };

    ts_vec2 z;
    if (p->kind == NOISE_PIM) {
        if (ts_pim_sample(p->pim, released, p->epsilon, rng, &z) < 0)
            return TS_RELEASE_ERROR;
    } else if (ts_lm_delta_sample(released, step.lm_emission.scale, rng,
                                  &z) < 0) {
        return TS_RELEASE_ERROR;
    }

    double lat, lon;
    ts_grid_unproject(grid, z, &lat, &lon);
    ts_geo_snap(&lat, &lon);
    if (!isfinite(lat) || !isfinite(lon))
        return TS_RELEASE_ERROR;

    if (public_step_finish(p, header, stored, &step, lat, lon,
                           truth->ts_ms) < 0)
        return TS_RELEASE_ERROR;

    memset(out, 0, sizeof *out);
    out->lat = lat;
    out->lon = lon;
    out->eps_point = p->epsilon;
    out->has_delta_set_size = 1;
    out->delta_set_size = (unsigned)step.n;
    return TS_RELEASE_OK;
}

/* pim and lm-delta differ in their noise alone. */
/* The belief and the last release time follow published points and
 * public timestamps only (release and replay keep them so), so keeping
 * them is post-processing of what the previous window published. */
static void delta_window_opens(const void *opaque, void *user_state)
{
    const delta_profile *p = opaque;
    if (!p->window_keeps_belief)
        memset(user_state, 0, delta_user_state_size(opaque));
}

#define DELTA_OPS(mechanism, text, make_profile)                             \
    {                                                                        \
        .name = mechanism, .summary = text, TS_PARAM_ROWS(delta_params),     \
        .profile_new = make_profile, .profile_free = delta_profile_free,     \
        .window_budget = delta_window_budget,                                \
        .user_state_size = delta_user_state_size, .release = delta_release,  \
        .window_opens = delta_window_opens,                                  \
        .replay = ts_delta_replay,                                           \
        .state_live_bytes = ts_delta_state_live_bytes,                       \
    }

const ts_mechanism_ops ts_pim_ops =
    DELTA_OPS("pim", "Planar Isotropic Mechanism over delta-location sets "
                     "(Xiao & Xiong, CCS 2015)",
              pim_profile_new);

const ts_mechanism_ops ts_lm_delta_ops =
    DELTA_OPS("lm-delta", "per-axis Laplace over delta-location sets (Xiao "
                          "& Xiong's baseline)",
              lm_delta_profile_new);

int ts_delta_replay(const void *profile, void *user_state,
                    const ts_point *published, const ts_point *truth,
                    int *drifted, unsigned *delta_set_size)
{
    const delta_profile *p = profile;
    if (p == NULL || user_state == NULL || published == NULL ||
        !isfinite(published->lat) || !isfinite(published->lon) ||
        fabs(published->lat) > 90.0 || fabs(published->lon) > 180.0 ||
        (truth != NULL && (!isfinite(truth->lat) || !isfinite(truth->lon))))
        return -1;
    delta_user_header *header = user_state;
    ts_belief *stored = (ts_belief *)(header + 1);

    /* Released points are already on the published grid, where snapping
     * is the identity; snapping again keeps the state a function of
     * published points even for an input printed with more digits. */
    double lat = published->lat, lon = published->lon;
    ts_geo_snap(&lat, &lon);

    public_step step;
    if (public_step_begin(p, header, stored, published->user,
                          published->user_len, published->ts_ms, &step) < 0)
        return -1;

    int drift = 0;
    uint32_t surrogate;
    if (truth != NULL && locate(p, &step, truth, &drift, &surrogate) < 0)
        return -1;

    if (public_step_finish(p, header, stored, &step, lat, lon,
                           published->ts_ms) < 0)
        return -1;
    if (drifted != NULL)
        *drifted = drift;
    if (delta_set_size != NULL)
        *delta_set_size = (unsigned)step.n;
    return 0;
}

size_t ts_delta_state_live_bytes(const void *profile, const void *user_state)
{
    const delta_profile *p = profile;
    const delta_user_header *header = user_state;
    const ts_belief *stored = (const ts_belief *)(header + 1);
    if (!(header->flags & USER_HAS_BELIEF) || stored->count > p->capacity)
        return sizeof *header;
    return sizeof *header + sizeof(ts_belief) +
           (size_t)stored->count * sizeof(ts_belief_entry);
}
