/* Per-release cost of the delta-location-set pipeline (Xiao & Xiong,
 * Algorithm 1) on one core: prior (p+ M^k), delta-set, drift test and
 * surrogate, PIM context (hull, K, exact T), PIM sample, posterior; and
 * the same with LM-delta.
 *
 *   bench_belief [--model FILE] [--steps N] [--capacity C]
 *                [--threshold T] [--delta D] [--eps E] [--seed S]
 *
 * Without --model a learned-like model is made: synthetic users take
 * momentum random walks on a 100 x 100 grid of 340 m cells (10 000
 * cells), sampled at a 60 s tick, and inference/learn.c learns from them
 * with a 25 km/h maximum speed (reach 417 m: 21 cells per row). With
 * --model a model file (tracesan learn) is used as is. The true trace is
 * then sampled from the model itself (a uniform point in each visited
 * cell), one release per tick, so the belief tracks a user the model
 * describes. Prints medians and tails in microseconds, the belief's
 * support and the memory a user's belief takes.
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
#include "mechanisms/lm_delta.h"
#include "mechanisms/pim.h"
#include "mechanisms/rng.h"

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

static double quantile(double *v, size_t n, double q)
{
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
            ts_grid_unproject(grid, (pim_vec2){x, y}, &p.lat, &p.lon);
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
    pim_vec2 *centres = malloc(capacity * sizeof *centres);
    run_stats s = {0};
    double **cols[] = {&s.total, &s.prior, &s.dset, &s.build, &s.sample,
                       &s.post, &s.support, &s.set_size};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        *cols[i] = malloc(steps * sizeof(double));
    pim_context pim;
    pim_context_init(&pim);
    ts_belief_init(b, capacity);

    uint32_t truth_cell = sample_initial(model, rng);
    size_t done = 0;
    for (uint32_t t = 0; t < steps; t++) {
        /* The user moves one tick, and is somewhere inside the cell. */
        if (t > 0)
            truth_cell = sample_next(model, truth_cell, rng);
        pim_vec2 c = ts_grid_cell_centre(grid, truth_cell);
        pim_vec2 truth = {
            c.x + (ts_rng_uniform_open(rng) - 0.5) * grid->cell_m,
            c.y + (ts_rng_uniform_open(rng) - 0.5) * grid->cell_m};

        double t0 = now_us();
        int rc = ts_belief_predict(b, model, t == 0 ? 0 : 1, params, ws);
        double t1 = now_us();
        if (rc == TS_BELIEF_RESET)
            s.resets++;
        size_t n = ts_belief_delta_set(b, delta, set, ws);
        pim_vec2 released = truth;
        if (!ts_delta_set_contains(set, n, truth_cell)) {
            uint32_t sur;
            ts_delta_set_surrogate(grid, set, n, truth, &sur);
            released = ts_grid_cell_centre(grid, sur);
            s.drifts++;
        }
        ts_grid_cell_centres(grid, set, n, centres);
        double t2 = now_us();
        pim_vec2 z;
        double scale = 0.0;
        if (use_pim) {
            rc = pim_context_build(&pim, centres, n, grid->cell_m);
        } else {
            double dx, dy;
            rc = lm_delta_sensitivity(centres, n, grid->cell_m, &dx, &dy);
            scale = lm_delta_scale(dx, dy, eps);
        }
        double t3 = now_us();
        if (rc == 0)
            rc = use_pim ? pim_sample(&pim, released, eps, rng, &z)
                         : lm_delta_sample(released, scale, rng, &z);
        double t4 = now_us();
        if (rc == 0) {
            ts_pim_emission pe = {.pim = &pim, .eps = eps};
            ts_lm_emission le = {.scale = scale};
            rc = ts_belief_posterior(b, grid, z,
                                     use_pim ? ts_pim_log_emission
                                             : ts_lm_log_emission,
                                     use_pim ? (const void *)&pe
                                             : (const void *)&le,
                                     params, ws);
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
    pim_context_free(&pim);
    free(centres);
    free(set);
    free(b);
    ts_belief_workspace_free(ws);
    ts_rng_free(rng);
}

int main(int argc, char **argv)
{
    const char *model_path = NULL;
    uint32_t steps = 20000, capacity = 512;
    double threshold = 1e-5, delta = 0.01, eps = 1.0;
    uint64_t seed = 1;
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},
        {"steps", required_argument, NULL, 'n'},
        {"capacity", required_argument, NULL, 'c'},
        {"threshold", required_argument, NULL, 't'},
        {"delta", required_argument, NULL, 'd'},
        {"eps", required_argument, NULL, 'e'},
        {"seed", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "m:n:c:t:d:e:s:", options, NULL)) !=
           -1) {
        switch (opt) {
        case 'm': model_path = optarg; break;
        case 'n': steps = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'c': capacity = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 't': threshold = strtod(optarg, NULL); break;
        case 'd': delta = strtod(optarg, NULL); break;
        case 'e': eps = strtod(optarg, NULL); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: bench_belief [--model FILE] [--steps N] "
                            "[--capacity C] [--threshold T] [--delta D] "
                            "[--eps E] [--seed S]\n");
            return 1;
        }
    }
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
