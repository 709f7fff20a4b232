/* Per-release cost of the delta-location-set pipeline (Xiao & Xiong,
 * Algorithm 1) on one core: prior (p+ M^k), delta-set, drift test and
 * surrogate, PIM context (hull, K, exact T), PIM sample, posterior; and
 * the same with LM-delta.
 *
 *   bench_belief [--model FILE] [--steps N] [--capacity C]
 *                [--threshold T] [--delta D] [--eps E] [--seed S]
 *   bench_belief --model FILE --trace CSV [--profile-mech pim|lm-delta]
 *                [--capacity C] [--threshold T] [--delta D] [--eps E]
 *                [--seed S] [--max-ticks K] [--dump OUT.csv]
 *
 * Synthetic mode (no --trace). Without --model a learned-like model is
 * made: synthetic users take momentum random walks on a 100 x 100 grid of
 * 340 m cells (10 000 cells), sampled at a 60 s tick, and
 * inference/learn.c learns from them with a 25 km/h maximum speed (reach
 * 417 m: 21 cells per row). With --model a model file (tracesan learn) is
 * used as is. The true trace is then sampled from the model itself (a
 * uniform point in each visited cell), one release per tick, so the belief
 * tracks a user the model describes. Prints medians and tails in
 * microseconds, the belief's support and the memory a user's belief takes.
 *
 * Trace mode (--trace CSV with header user,ts,lat,lon; ts in seconds;
 * rows of one user in time order). The acceptance benchmark: the profile
 * is made through the registry (ts_mechanism_find(...)->profile_new, with
 * a parameter table whose get_model hands over the opened model file),
 * every user gets one zero-filled state block of user_state_size bytes,
 * and ops->release is called for every row in file order with one seeded
 * generator; each call is timed with CLOCK_MONOTONIC. That is the FULL
 * step of the daemon's mechanism: prior, delta-set, drift/surrogate, hull,
 * K, T, sample, unproject and snap, posterior, state write-back.
 * Defaults are the profile's (capacity 1024, prune 1e-6, delta 0.01,
 * eps 1). Belief memory: the bytes of a user's state that carry
 * information (ts_delta_state_live_bytes: header and live belief entries)
 * after each release. Phase shares: synthetic mode with --model. Latency
 * is also split by the ticks since the user's previous release (the prior
 * costs one sparse product per tick). --dump writes
 * the published points (row, lat, lon; %.17g) to compare builds: an
 * optimisation must reproduce them up to rounding.
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inference/belief.h"
#include "inference/grid.h"
#include "inference/learn.h"
#include "inference/markov.h"
#include "inference/model_file.h"
#include "mechanisms/delta_privacy.h"
#include "geometry/geo.h"
#include "mechanisms/lm_delta.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/pim.h"
#include "mechanisms/rng.h"
#include "tools/csv.h"
#include "tools/name_index.h"

/* The pim profile's default for KEY, from its parameter rows. */
static double pim_default(const char *key)
{
    return strtod(ts_mechanism_param_find(&ts_pim_ops, key)->default_value,
                  NULL);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank quantile; sorts v the first time (later calls on the same
 * array find it sorted). */
static double quantile(double *v, size_t n, double q)
{
    size_t sorted = 1;
    while (sorted < n && v[sorted - 1] <= v[sorted])
        sorted++;
    if (sorted < n)
        qsort(v, n, sizeof *v, compare_double);
    size_t i = (size_t)floor(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Next cell drawn from row `cell` of the model (or its fallback). */
static uint32_t sample_next(const ts_markov *m, uint32_t cell, ts_rng *rng)
{
    const ts_markov *rows = m;
    if (m->row_start[cell] == m->row_start[cell + 1] && m->fallback != NULL)
        rows = m->fallback;
    double u = ts_rng_uniform_open(rng), acc = 0.0;
    uint64_t b = rows->row_start[cell], e = rows->row_start[cell + 1];
    for (uint64_t i = b; i < e; i++) {
        acc += rows->prob[i];
        if (u < acc)
            return rows->col[i];
    }
    return rows->col[e - 1];
}

static uint32_t sample_initial(const ts_markov *m, ts_rng *rng)
{
    double u = ts_rng_uniform_open(rng), acc = 0.0;
    for (uint32_t c = 0; c < m->cell_count; c++) {
        acc += m->initial[c];
        if (u < acc)
            return c;
    }
    return m->cell_count - 1;
}

/* Synthetic training traces: users walk with momentum at up to 1 cell
 * per tick and sometimes pause, starting from a few "home" areas. */
static int synthetic_model(ts_grid *grid, ts_learned *learned, ts_rng *rng)
{
    char err[300];
    /* 100 x 100 cells of 340 m: 34 km square at 40 N. */
    double dlat = 34000.0 / (6371008.8 * M_PI / 180.0) * 0.99999;
    double dlon = dlat / cos(40.0 * M_PI / 180.0);
    if (ts_grid_init(grid, 40.0 - dlat / 2, 116.0, 40.0 + dlat / 2,
                     116.0 + dlon, 340.0, err, sizeof err) != 0) {
        fprintf(stderr, "bench_belief: %s\n", err);
        return -1;
    }
    const uint32_t users = 200, steps = 2000;
    ts_learn_point *pts = malloc((size_t)users * steps * sizeof *pts);
    if (pts == NULL)
        return -1;
    size_t n = 0;
    for (uint32_t u = 0; u < users; u++) {
        double x = grid->x_min + (0.2 + 0.6 * ts_rng_uniform_open(rng)) *
                                     grid->cols * grid->cell_m;
        double y = grid->y_min + (0.2 + 0.6 * ts_rng_uniform_open(rng)) *
                                     grid->rows * grid->cell_m;
        double heading = ts_rng_angle(rng);
        for (uint32_t k = 0; k < steps; k++) {
            ts_learn_point p = {.user = u, .ts_s = 1.2e9 + 60.0 * k};
            ts_grid_unproject(grid, (ts_vec2){x, y}, &p.lat, &p.lon);
            pts[n++] = p;
            if (ts_rng_uniform_open(rng) < 0.3)
                continue; /* pause */
            heading += 0.6 * (ts_rng_uniform_open(rng) - 0.5);
            double speed = 340.0 * ts_rng_uniform_open(rng);
            x += speed * cos(heading);
            y += speed * sin(heading);
        }
    }
    ts_learn_params params = {.tick_s = 60.0, .max_speed_mps = 25.0 / 3.6,
                              .max_gap_s = 120.0, .alpha = 0.01};
    ts_learn_stats st;
    double t0 = now_us();
    int rc = ts_learn_popular(grid, &params, pts, n, learned, &st, err,
                              sizeof err);
    double t1 = now_us();
    free(pts);
    if (rc != 0) {
        fprintf(stderr, "bench_belief: %s\n", err);
        return -1;
    }
    printf("model: synthetic, %u cells, %u reachable per row, nnz %llu, "
           "%llu transitions, learned in %.0f ms\n",
           grid->cell_count, st.reachable,
           (unsigned long long)learned->markov.nnz,
           (unsigned long long)st.transitions, (t1 - t0) / 1000.0);
    return 0;
}

typedef struct run_stats {
    double *total, *prior, *dset, *build, *sample, *post;
    double *support, *set_size;
    size_t drifts, resets, errors;
} run_stats;

static void run(const char *name, int use_pim, const ts_grid *grid,
                const ts_markov *model, uint32_t steps, uint32_t capacity,
                const ts_belief_params *params, double delta, double eps,
                uint64_t seed)
{
    ts_rng *rng = ts_rng_new_seeded(seed);
    ts_belief_workspace *ws = ts_belief_workspace_new(grid->cell_count,
                                                      capacity);
    ts_belief *b = malloc(ts_belief_bytes(capacity));
    uint32_t *set = malloc(capacity * sizeof *set);
    ts_vec2 *centres = malloc(capacity * sizeof *centres);
    run_stats s = {0};
    double **cols[] = {&s.total, &s.prior, &s.dset, &s.build, &s.sample,
                       &s.post, &s.support, &s.set_size};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        *cols[i] = malloc(steps * sizeof(double));
    ts_pim_context pim;
    ts_pim_context_init(&pim);
    ts_belief_init(b, capacity);

    uint32_t truth_cell = sample_initial(model, rng);
    size_t done = 0;
    for (uint32_t t = 0; t < steps; t++) {
        /* The user moves one tick, and is somewhere inside the cell. */
        if (t > 0)
            truth_cell = sample_next(model, truth_cell, rng);
        ts_vec2 c = ts_grid_cell_centre(grid, truth_cell);
        ts_vec2 truth = {
            c.x + (ts_rng_uniform_open(rng) - 0.5) * grid->cell_m,
            c.y + (ts_rng_uniform_open(rng) - 0.5) * grid->cell_m};

        double t0 = now_us();
        int rc = ts_belief_predict(b, model, t == 0 ? 0 : 1, params, ws, NULL);
        double t1 = now_us();
        if (rc == TS_BELIEF_RESET)
            s.resets++;
        size_t n = ts_belief_delta_set(b, delta, 1.0, set, ws);
        ts_vec2 released = truth;
        if (!ts_delta_set_contains(set, n, truth_cell)) {
            uint32_t sur;
            ts_delta_set_surrogate(grid, set, n, truth, &sur);
            released = ts_grid_cell_centre(grid, sur);
            s.drifts++;
        }
        ts_grid_cell_centres(grid, set, n, centres);
        double t2 = now_us();
        ts_vec2 z;
        double scale = 0.0;
        if (use_pim) {
            rc = ts_pim_context_build(&pim, centres, n, grid->cell_m);
        } else {
            double dx, dy;
            rc = ts_lm_delta_sensitivity(centres, n, grid->cell_m, &dx, &dy);
            scale = ts_lm_delta_scale(dx, dy, eps);
        }
        double t3 = now_us();
        if (rc == 0)
            rc = use_pim ? ts_pim_sample(&pim, released, eps, rng, &z)
                         : ts_lm_delta_sample(released, scale, rng, &z);
        double t4 = now_us();
        if (rc == 0) {
            ts_pim_emission pe = ts_pim_emission_make(&pim, eps);
            ts_lm_emission le = {.scale = scale};
            rc = ts_belief_posterior(b, grid, z,
                                     use_pim ? ts_pim_log_emission
                                             : ts_lm_log_emission,
                                     use_pim ? (const void *)&pe
                                             : (const void *)&le,
                                     params, ws, NULL);
        }
        double t5 = now_us();
        if (rc < 0) {
            s.errors++;
            continue;
        }
        s.total[done] = t5 - t0;
        s.prior[done] = t1 - t0;
        s.dset[done] = t2 - t1;
        s.build[done] = t3 - t2;
        s.sample[done] = t4 - t3;
        s.post[done] = t5 - t4;
        s.support[done] = b->count;
        s.set_size[done] = (double)n;
        done++;
    }
    double mean_set = 0.0;
    for (size_t i = 0; i < done; i++)
        mean_set += s.set_size[i];
    mean_set /= done ? (double)done : 1.0;
    printf("%-8s releases=%zu errors=%zu resets=%zu drift_ratio=%.3f "
           "mean|dX|=%.1f\n",
           name, done, s.errors, s.resets,
           done ? (double)s.drifts / (double)done : 0.0, mean_set);
    if (done > 0) {
        printf("  step total   median %7.1f us  p90 %7.1f  p99 %7.1f  max %7.1f\n",
               quantile(s.total, done, 0.5), quantile(s.total, done, 0.9),
               quantile(s.total, done, 0.99), quantile(s.total, done, 1.0));
        printf("  prior %.1f  delta-set %.1f  %s %.1f  sample %.2f  "
               "posterior %.1f  (medians, us)\n",
               quantile(s.prior, done, 0.5), quantile(s.dset, done, 0.5),
               use_pim ? "pim-context" : "lm-scale",
               quantile(s.build, done, 0.5), quantile(s.sample, done, 0.5),
               quantile(s.post, done, 0.5));
        printf("  belief support median %.0f p99 %.0f cells of %u; "
               "|dX| median %.0f p99 %.0f; belief block %zu bytes per user\n",
               quantile(s.support, done, 0.5), quantile(s.support, done, 0.99),
               capacity, quantile(s.set_size, done, 0.5),
               quantile(s.set_size, done, 0.99), ts_belief_bytes(capacity));
    }
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        free(*cols[i]);
    ts_pim_context_free(&pim);
    free(centres);
    free(set);
    free(b);
    ts_belief_workspace_free(ws);
    ts_rng_free(rng);
}

/* ------------------------------------------------------------ trace mode */

typedef struct trace_row {
    uint32_t user;           /* number in trace.users */
    int64_t ts_ms;
    double lat, lon;
} trace_row;

typedef struct trace {
    trace_row *rows;
    size_t count;
    ts_name_index *users;
    size_t user_count;
} trace;

static void trace_free(trace *t)
{
    ts_name_index_free(t->users);
    free(t->rows);
}

/* A trace CSV (header naming user, ts, lat, lon; tools/csv.h), read with
 * the tools' reader. A bench wants clean input: any bad row stops it. */
static int load_trace(const char *path, trace *t)
{
    memset(t, 0, sizeof *t);
    char err[300];
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, "bench_belief: %s\n", err);
        return -1;
    }
    t->users = ts_name_index_new();
    size_t room = 0;
    int rc = t->users != NULL ? 0 : -1;
    ts_csv_row row;
    int got;
    while (rc == 0 && (got = ts_csv_read(reader, &row, err, sizeof err)) !=
                          TS_CSV_EOF) {
        if (got != TS_CSV_ROW || !isfinite(row.lat) || !isfinite(row.lon) ||
            !isfinite(row.ts_s)) {
            fprintf(stderr, "bench_belief: %s:%zu: %s\n", path, row.line,
                    got == TS_CSV_ROW ? "missing ts, lat or lon" : err);
            rc = -1;
            break;
        }
        if (t->count == room) {
            room = room ? 2 * room : 4096;
            trace_row *rows = realloc(t->rows, room * sizeof *rows);
            if (rows == NULL) {
                rc = -1;
                break;
            }
            t->rows = rows;
        }
        uint32_t user;
        if (ts_name_index_intern(t->users, row.user, &user) != 0) {
            rc = -1;
            break;
        }
        t->rows[t->count++] = (trace_row){
            .user = user, .ts_ms = row.ts_ms, .lat = row.lat, .lon = row.lon};
    }
    ts_csv_close(reader);
    if (rc == 0 && t->count == 0) {
        fprintf(stderr, "bench_belief: %s: no rows\n", path);
        rc = -1;
    }
    if (rc != 0)
        trace_free(t);
    else
        t->user_count = ts_name_index_count(t->users);
    return rc;
}

/* The profile's parameters: these five, an unlimited budget, and the
 * profile's defaults for the rest (personal models on, outside_region
 * "surrogate"). */
typedef struct param_table {
    const ts_model *model;
    double epsilon, delta, prune;
    long long capacity;
    long long max_ticks;
} param_table;

static int table_double(void *ctx, const char *key, double *out)
{
    const param_table *t = ctx;
    if (strcmp(key, "epsilon") == 0)
        *out = t->epsilon;
    else if (strcmp(key, "delta") == 0)
        *out = t->delta;
    else if (strcmp(key, "prune_threshold") == 0)
        *out = t->prune;
    else
        return 0;
    return 1;
}

static int table_int(void *ctx, const char *key, long long *out)
{
    const param_table *t = ctx;
    if (strcmp(key, "belief_capacity") == 0)
        *out = t->capacity;
    else if (strcmp(key, "points_per_window") == 0)
        *out = 1000000000LL; /* the budget never runs out here */
    else if (strcmp(key, "max_ticks") == 0)
        *out = t->max_ticks;
    else
        return 0;
    return 1;
}

static int table_string(void *ctx, const char *key, const char **out)
{
    (void)ctx;
    (void)key;
    (void)out;
    return 0;
}

static const void *table_model(void *ctx, const char *key, char *err,
                               size_t errlen)
{
    const param_table *t = ctx;
    if (strcmp(key, "model") != 0) {
        snprintf(err, errlen, "%s: no such model", key);
        return NULL;
    }
    return t->model;
}

static int dump_points(const char *path, const double *lat,
                       const double *lon, size_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%zu,%.17g,%.17g\n", i, lat[i], lon[i]);
    return fclose(f) == 0 ? 0 : -1;
}

enum { GAP_BUCKETS = 6 };
static const char *const gap_bucket_names[GAP_BUCKETS] = {
    "first release", "k <= 1", "k 2..10", "k 11..100", "k 101..max_ticks",
    "k > max_ticks (reset)"};

static int gap_bucket(int64_t k, long long max_ticks)
{
    if (k < 0)
        return 0;
    if (k <= 1)
        return 1;
    if (k <= 10)
        return 2;
    if (k <= 100)
        return 3;
    return k <= max_ticks ? 4 : 5;
}

static int run_trace(const char *mech, const ts_model *model,
                     const trace *t, const param_table *pt, uint64_t seed,
                     const char *dump)
{
    const ts_mechanism_ops *ops = ts_mechanism_find(mech);
    if (ops == NULL || ops->replay == NULL || ops->state_live_bytes == NULL) {
        fprintf(stderr, "bench_belief: %s is not a delta-location-set "
                        "mechanism\n", mech);
        return -1;
    }
    ts_params params = {
        .ctx = (void *)pt,
        .get_double = table_double,
        .get_int = table_int,
        .get_string = table_string,
        .get_model = table_model,
    };
    void *profile = NULL;
    char err[400] = "";
    if (ops->profile_new(&params, &profile, err, sizeof err) != 0) {
        fprintf(stderr, "bench_belief: %s: %s\n", mech, err);
        return -1;
    }
    size_t state_size = ops->user_state_size(profile);
    unsigned char *states = calloc(t->user_count, state_size ? state_size : 1);
    double *lat_us = malloc(t->count * sizeof *lat_us);
    double *mem = malloc(t->count * sizeof *mem);
    double *out_lat = malloc(t->count * sizeof *out_lat);
    double *out_lon = malloc(t->count * sizeof *out_lon);
    ts_rng *rng = ts_rng_new_seeded(seed);
    /* Latency by ticks since the user's previous release: the prior costs
     * k sparse products, so long gaps are where the tail comes from. */
    int64_t *last_ms = malloc(t->user_count * sizeof *last_ms);
    double *gap_us[GAP_BUCKETS] = {NULL};
    size_t gap_n[GAP_BUCKETS] = {0};
    int rc = -1;
    if (!states || !lat_us || !mem || !out_lat || !out_lon || !rng ||
        !last_ms)
        goto out;
    ts_budget_view budget = {.total = ops->window_budget(profile),
                             .spent = 0.0};
    for (int g = 0; g < GAP_BUCKETS; g++)
        if ((gap_us[g] = malloc(t->count * sizeof *gap_us[g])) == NULL)
            goto out;
    for (size_t u = 0; u < t->user_count; u++)
        last_ms[u] = INT64_MIN;
    size_t done = 0, failed = 0;
    double set_sum = 0.0;
    for (size_t r = 0; r < t->count; r++) {
        const trace_row *row = &t->rows[r];
        unsigned char *state = states + (size_t)row->user * state_size;
        const char *user = ts_name_index_name(t->users, row->user);
        ts_point truth = {.lat = row->lat, .lon = row->lon,
                          .ts_ms = row->ts_ms, .accuracy_m = NAN,
                          .user = user, .user_len = strlen(user)};
        ts_report report;
        double t0 = now_us();
        ts_release_status st = ops->release(profile, state, &truth, &budget,
                                            rng, &report);
        double t1 = now_us();
        out_lat[r] = out_lon[r] = NAN;
        if (st != TS_RELEASE_OK) {
            failed++;
            continue;
        }
        out_lat[r] = report.lat;
        out_lon[r] = report.lon;
        set_sum += report.delta_set_size;
        lat_us[done] = t1 - t0;
        int64_t k = last_ms[row->user] == INT64_MIN
                        ? -1
                        : ts_markov_ticks_between(model->tick_s,
                                                  last_ms[row->user],
                                                  row->ts_ms);
        int g = gap_bucket(k, pt->max_ticks);
        gap_us[g][gap_n[g]++] = t1 - t0;
        last_ms[row->user] = row->ts_ms;
        mem[done] = (double)ops->state_live_bytes(profile, state);
        done++;
    }
    if (dump != NULL && dump_points(dump, out_lat, out_lon, t->count) != 0)
        goto out;
    printf("%s: %zu releases (%zu refused or failed) of %zu users; "
           "mean |dX| %.1f\n", mech, done, failed, t->user_count,
           done ? set_sum / (double)done : 0.0);
    if (done == 0)
        goto out;
    printf("  release latency us: median %.1f  p90 %.1f  p99 %.1f  "
           "max %.1f\n", quantile(lat_us, done, 0.5),
           quantile(lat_us, done, 0.9), quantile(lat_us, done, 0.99),
           quantile(lat_us, done, 1.0));

    printf("  latency us by ticks since the user's last release:\n");
    for (int g = 0; g < GAP_BUCKETS; g++)
        if (gap_n[g] > 0)
            printf("    %-22s n %7zu  median %8.1f  p99 %8.1f  max %8.1f\n",
                   gap_bucket_names[g], gap_n[g],
                   quantile(gap_us[g], gap_n[g], 0.5),
                   quantile(gap_us[g], gap_n[g], 0.99),
                   quantile(gap_us[g], gap_n[g], 1.0));

    /* Sampled after every release, so users weigh by their releases. */
    printf("  belief memory per user: live bytes median %.0f  p99 %.0f  "
           "max %.0f; state block %zu bytes\n",
           quantile(mem, done, 0.5), quantile(mem, done, 0.99),
           quantile(mem, done, 1.0), state_size);
    rc = 0;
out:
    for (int g = 0; g < GAP_BUCKETS; g++)
        free(gap_us[g]);
    free(last_ms);
    ts_rng_free(rng);
    free(out_lon);
    free(out_lat);
    free(mem);
    free(lat_us);
    free(states);
    ops->profile_free(profile);
    return rc;
}

static int main_trace(const char *model_path, const char *trace_path,
                      const char *mech, uint32_t capacity, double threshold,
                      double delta, double eps, long long max_ticks,
                      uint64_t seed, const char *dump)
{
    if (model_path == NULL) {
        fprintf(stderr, "bench_belief: --trace needs --model\n");
        return 1;
    }
    char err[400];
    ts_model *model = NULL;
    if (ts_model_open(model_path, &model, err, sizeof err) != 0) {
        fprintf(stderr, "bench_belief: %s\n", err);
        return 1;
    }
    trace t;
    if (load_trace(trace_path, &t) != 0) {
        ts_model_close(model);
        return 1;
    }
    printf("model: %s, %u cells, nnz %llu, tick %g s; trace: %s, %zu rows, "
           "%zu users\n", model_path, model->grid.cell_count,
           (unsigned long long)model->popular.nnz, model->tick_s, trace_path,
           t.count, t.user_count);
    printf("capacity=%u prune_threshold=%g delta=%g eps=%g max_ticks=%lld "
           "seed=%llu\n", capacity, threshold, delta, eps, max_ticks,
           (unsigned long long)seed);
    param_table pt = {.model = model, .epsilon = eps, .delta = delta,
                      .prune = threshold, .capacity = capacity,
                      .max_ticks = max_ticks};
    int rc = run_trace(mech, model, &t, &pt, seed, dump);
    trace_free(&t);
    ts_model_close(model);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *trace_path = NULL, *mech = "pim";
    const char *dump = NULL;
    uint32_t steps = 20000, capacity = 0;
    double threshold = NAN, delta = 0.01, eps = 1.0;
    uint64_t seed = 1;
    long long max_ticks = (long long)pim_default("max_ticks");
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},
        {"steps", required_argument, NULL, 'n'},
        {"capacity", required_argument, NULL, 'c'},
        {"threshold", required_argument, NULL, 't'},
        {"delta", required_argument, NULL, 'd'},
        {"eps", required_argument, NULL, 'e'},
        {"seed", required_argument, NULL, 's'},
        {"trace", required_argument, NULL, 'T'},
        {"profile-mech", required_argument, NULL, 'p'},
        {"dump", required_argument, NULL, 'D'},
        {"max-ticks", required_argument, NULL, 'K'},
        {NULL, 0, NULL, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "m:n:c:t:d:e:s:T:p:D:K:", options,
                              NULL)) != -1) {
        switch (opt) {
        case 'm': model_path = optarg; break;
        case 'n': steps = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'c': capacity = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 't': threshold = strtod(optarg, NULL); break;
        case 'd': delta = strtod(optarg, NULL); break;
        case 'e': eps = strtod(optarg, NULL); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'T': trace_path = optarg; break;
        case 'p': mech = optarg; break;
        case 'D': dump = optarg; break;
        case 'K': max_ticks = strtoll(optarg, NULL, 10); break;
        default:
            fprintf(stderr,
                    "usage: bench_belief [--model FILE] [--steps N] "
                    "[--capacity C] [--threshold T] [--delta D] [--eps E] "
                    "[--seed S]\n"
                    "       bench_belief --model FILE --trace CSV "
                    "[--profile-mech pim|lm-delta] [--capacity C] "
                    "[--threshold T] [--delta D] [--eps E] [--seed S] "
                    "[--max-ticks K] [--dump OUT.csv]\n");
            return 1;
        }
    }
    if (trace_path != NULL)
        return main_trace(model_path, trace_path, mech,
                          capacity ? capacity : (uint32_t)pim_default("belief_capacity"),
                          isnan(threshold) ? pim_default("prune_threshold")
                                           : threshold,
                          delta, eps, max_ticks, seed, dump);
    if (capacity == 0)
        capacity = 512;
    if (isnan(threshold))
        threshold = 1e-5;
    ts_belief_params params = {.prune_threshold = threshold, .max_ticks = 60};
    char err[400];
    if (steps == 0 || ts_belief_bytes(capacity) == 0 ||
        ts_belief_params_check(&params, err, sizeof err) != 0) {
        fprintf(stderr, "bench_belief: invalid parameters\n");
        return 1;
    }
    ts_grid grid;
    ts_learned learned = {0};
    ts_model *file = NULL;
    const ts_markov *model;
    if (model_path != NULL) {
        if (ts_model_open(model_path, &file, err, sizeof err) != 0) {
            fprintf(stderr, "bench_belief: %s\n", err);
            return 1;
        }
        grid = file->grid;
        model = &file->popular;
        printf("model: %s, %u cells, nnz %llu, tick %g s, %zu bytes\n",
               model_path, grid.cell_count,
               (unsigned long long)model->nnz, file->tick_s,
               file->file_bytes);
    } else {
        ts_rng *rng = ts_rng_new_seeded(seed + 1000);
        int rc = synthetic_model(&grid, &learned, rng);
        ts_rng_free(rng);
        if (rc != 0)
            return 1;
        model = &learned.markov;
    }
    printf("steps=%u capacity=%u prune_threshold=%g delta=%g eps=%g\n", steps,
           capacity, threshold, delta, eps);
    run("pim", 1, &grid, model, steps, capacity, &params, delta, eps, seed);
    run("lm-delta", 0, &grid, model, steps, capacity, &params, delta, eps,
        seed);
    ts_learned_free(&learned);
    ts_model_close(file);
    return 0;
}
