/* A stand-in population mechanism for the PRIVIC loop's tests
 * (check_population_loop.c, check_population_records.c). */
#ifndef TRACESAN_TESTS_SUPPORT_FAKE_POPULATION_H
#define TRACESAN_TESTS_SUPPORT_FAKE_POPULATION_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "mechanisms/laplace_channel.h"
#include "mechanisms/population.h"

/* ------------------------------------------------ the population loop
 *
 * A stand-in mechanism with a fixed channel (the Laplace grid channel of
 * a 4 x 4 grid of 500 m cells) that is nonetheless "adaptive": every
 * build returns a fresh copy of the same matrix. The loop's bookkeeping
 * (versions, cycles, GIBU sources, stale reports, restore) is then
 * observable while the estimate has a closed-form target. Published
 * points are (row + 0.5, col + 0.5) in place of (lat, lon). */

#define FP_SIDE 4
#define FP_N (FP_SIDE * FP_SIDE)
#define FP_CELL 500.0

typedef struct fake_pop {
    int adaptive;
    double *first;
    const double *current;
    uint32_t version;
    unsigned builds;
    double last_theta[FP_N];
    uint64_t cycle_reports;
    double cycle_s;
    unsigned ibu_steps;          /* ibu_max_steps; 0: converge */
} fake_pop;

static inline size_t fp_cells(const void *profile)
{
    (void)profile;
    return FP_N;
}

static inline void fp_grid_shape(const void *profile, uint32_t *cols,
                          uint32_t *rows, double *w, double *h)
{
    (void)profile;
    *cols = *rows = FP_SIDE;
    *w = *h = FP_CELL;
}

static inline int fp_cell_of(const void *profile, double lat, double lon,
                      uint32_t *cell)
{
    (void)profile;
    if (!(lat >= 0 && lat < FP_SIDE && lon >= 0 && lon < FP_SIDE))
        return -1;
    *cell = (uint32_t)floor(lat) * FP_SIDE + (uint32_t)floor(lon);
    return 0;
}

static inline void fp_cell_bounds(const void *profile, uint32_t cell, double b[4])
{
    (void)profile;
    b[0] = cell / FP_SIDE;
    b[1] = cell % FP_SIDE;
    b[2] = b[0] + 1;
    b[3] = b[1] + 1;
}

static inline ts_vec2 fp_centre(const void *profile, uint32_t cell)
{
    (void)profile;
    return (ts_vec2){ (cell % FP_SIDE + 0.5) * FP_CELL,
                      (cell / FP_SIDE + 0.5) * FP_CELL };
}

static inline void fp_cycle(const void *profile, ts_population_cycle *out)
{
    const fake_pop *f = profile;
    out->reports = f->cycle_reports;
    out->seconds = f->cycle_s;
    out->ibu.precision = 1e-10;
    out->ibu.max_iterations = 200000;
    out->ibu.fixed_steps = f->ibu_steps;
}

static inline void *fp_build(const void *profile, const double *theta,
                      ts_channel_build_stats *stats, char *err,
                      size_t errlen)
{
    fake_pop *f = (fake_pop *)profile;   /* a test double keeps a log */
    double *m = malloc(FP_N * FP_N * sizeof *m);
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(m, f->first, FP_N * FP_N * sizeof *m);
    f->builds++;
    for (size_t i = 0; i < FP_N; i++)
        f->last_theta[i] = theta != NULL ? theta[i] : NAN;
    if (stats != NULL)
        *stats = (ts_channel_build_stats){ 0, 1, 0.0 };
    return m;
}

static inline void fp_free(void *channel)
{
    free(channel);
}

static inline const double *fp_matrix(const void *channel)
{
    return channel;
}

static inline void fp_install(void *profile, const void *channel, uint32_t version)
{
    fake_pop *f = profile;
    f->current = channel != NULL ? channel : f->first;
    f->version = version;
}

static inline const void *fp_current(const void *profile, uint32_t *version)
{
    const fake_pop *f = profile;
    if (version != NULL)
        *version = f->version;
    return f->current;
}

static const ts_population_ops fp_ops = {
    .adaptive = 1,
    .cells = fp_cells,
    .grid_shape = fp_grid_shape,
    .cell_of = fp_cell_of,
    .cell_bounds = fp_cell_bounds,
    .cell_centre = fp_centre,
    .cycle = fp_cycle,
    .channel_build = fp_build,
    .channel_free = fp_free,
    .channel_matrix = fp_matrix,
    .channel_install = fp_install,
    .channel_current = fp_current,
};


/* The same stand-in with a fixed channel (geoind's density case): the
 * loop estimates but never rebuilds. */
static inline ts_population_ops fixed_ops(void)
{
    ts_population_ops ops = fp_ops;
    ops.adaptive = 0;
    return ops;
}

static inline void fp_init(fake_pop *f, uint64_t cycle_reports)
{
    memset(f, 0, sizeof *f);
    f->first = malloc(FP_N * FP_N * sizeof *f->first);
    ck_assert_ptr_nonnull(f->first);
    char err[256];
    /* eps * cell = 3: about two thirds of an interior row's mass stays in
     * its cell, so the channel is well conditioned (||C^-T||_1 is small)
     * and the estimate's bound below is tight enough to mean something. */
    ck_assert_int_eq(ts_laplace_grid_channel(3.0 / FP_CELL, FP_SIDE, FP_SIDE,
                                             FP_CELL, FP_CELL, f->first, err,
                                             sizeof err), 0);
    f->current = f->first;
    f->version = 1;
    f->cycle_reports = cycle_reports;
}

static inline void fp_destroy(fake_pop *f)
{
    free(f->first);
}

/* The true distribution: a hot spot at the (1, 1) cell over a floor, full
 * support (every cell >= 1.5 %), so IBU's maximum lies inside the
 * simplex. */
static inline void fp_truth(double *pi)
{
    double total = 0.0;
    for (size_t x = 0; x < FP_N; x++) {
        ts_vec2 c = fp_centre(NULL, (uint32_t)x);
        pi[x] = 0.05 + exp(-hypot(c.x - 750.0, c.y - 750.0) / 500.0);
        total += pi[x];
    }
    for (size_t x = 0; x < FP_N; x++)
        pi[x] /= total;
}

#endif
