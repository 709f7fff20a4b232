/* What one PRIVIC cycle costs on the paper's San Francisco grid (Biswas &
 * Palamidessi, Table II: 24 x 17 cells over 37.7228,-122.5153 ..
 * 37.7946,-122.3789; mean 16.805 s for BA and 128.192 s for IBU per
 * cycle, Python on an Intel Core i9):
 *
 *   bench_privic [--runs N] [--seed S] [--beta B] [--reports N]
 *                [--ba-precision P] [--ibu-precision P]
 *                [--ibu-max-iterations K] [TRACE.csv[.gz]]
 *
 * The prior is the empirical PMF of the trace's rows inside the box
 * (header user,ts,lat,lon; e.g. the Cabspotting subset), floored at 1e-9
 * because BA needs full support; without a trace, a synthetic lumpy one
 * (a few Gaussian hot spots over a thin uniform floor) so that BA and IBU
 * see the uneven mass a city has rather than the uniform start, which
 * converges in a handful of iterations and would flatter both.
 *
 * Timed, each RUNS times (median printed, CLOCK_MONOTONIC, one core):
 *   BA   the channel for the prior, from the uniform marginal to the
 *        precision (default 1e-6, the privic profile's);
 *   IBU  from the uniform start (Algorithm 1's theta_0) on the counts of
 *        ~1000 reports (one shipped cycle) and of all reports (the trace's
 *        rows, or --reports), drawn through that channel from the prior;
 *   EMD  one exact solve (GLPK) between the ~all estimate and the prior.
 * Prints figures only and asserts nothing about time: the ratios to the
 * paper are for reading, the target being >= 100x (BA <= 0.17 s, IBU
 * <= 1.3 s). */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inference/emd.h"
#include "inference/grid.h"
#include "inference/ibu.h"
#include "mechanisms/ba_channel.h"
#include "mechanisms/rng.h"
#include "tools/csv.h"

#define PAPER_BA_S 16.805
#define PAPER_IBU_S 128.192
/* The paper's SF data set: Gowalla check-ins in the box. */
#define PAPER_SF_REPORTS 123025u

static const double region[4] = { 37.7228, -122.5153, 37.7946, -122.3789 };
enum { COLS = 24, ROWS = 17, CELLS = COLS * ROWS };

typedef struct sf_grid {
    ts_grid projection;
    double cell_w, cell_h;
    ts_vec2 centres[CELLS];
} sf_grid;

/* rows x cols cells over the box on ts_grid's plane, as the privic
 * profile lays them out (index row * cols + col, row 0 southernmost). */
static int grid_make(sf_grid *g)
{
    char err[256];
    if (ts_grid_init(&g->projection, region[0], region[1], region[2],
                     region[3], 1000.0, err, sizeof err) != 0) {
        fprintf(stderr, "bench_privic: grid: %s\n", err);
        return -1;
    }
    ts_vec2 ne = ts_grid_project(&g->projection, region[2], region[3]);
    g->cell_w = (ne.x - g->projection.x_min) / COLS;
    g->cell_h = (ne.y - g->projection.y_min) / ROWS;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            g->centres[r * COLS + c] = (ts_vec2){
                g->projection.x_min + (c + 0.5) * g->cell_w,
                g->projection.y_min + (r + 0.5) * g->cell_h };
    return 0;
}

static int cell_of(const sf_grid *g, double lat, double lon, uint32_t *cell)
{
    if (!(lat >= region[0] && lat <= region[2] && lon >= region[1] &&
          lon <= region[3]))
        return -1;
    ts_vec2 xy = ts_grid_project(&g->projection, lat, lon);
    double c = floor((xy.x - g->projection.x_min) / g->cell_w);
    double r = floor((xy.y - g->projection.y_min) / g->cell_h);
    c = c < 0 ? 0 : c > COLS - 1 ? COLS - 1 : c;
    r = r < 0 ? 0 : r > ROWS - 1 ? ROWS - 1 : r;
    *cell = (uint32_t)r * COLS + (uint32_t)c;
    return 0;
}

static void normalise(double *v, size_t n)
{
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += v[i];
    for (size_t i = 0; i < n; i++)
        v[i] /= total;
}

/* The empirical PMF of the rows inside the box; 0 with *rows set. */
static int prior_from_trace(const sf_grid *g, const char *path, double *prior,
                            size_t *rows)
{
    char err[256];
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, "bench_privic: %s\n", err);
        return -1;
    }
    memset(prior, 0, CELLS * sizeof *prior);
    *rows = 0;
    ts_csv_row row;
    int rc;
    while ((rc = ts_csv_read(reader, &row, err, sizeof err)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, "bench_privic: %s: %s\n", path, err);
            ts_csv_close(reader);
            return -1;
        }
        uint32_t cell;
        if (rc == TS_CSV_ROW && cell_of(g, row.lat, row.lon, &cell) == 0) {
            prior[cell] += 1.0;
            (*rows)++;
        }
    }
    ts_csv_close(reader);
    if (*rows == 0) {
        fprintf(stderr, "bench_privic: %s: no row inside the box\n", path);
        return -1;
    }
    normalise(prior, CELLS);
    return 0;
}

/* Hot spots of a few hundred metres to a few km with a 2 % floor: roughly
 * the spread of taxi pick-ups between downtown, the Mission and the
 * avenues. Fixed, so runs compare. */
static void prior_synthetic(const sf_grid *g, double *prior)
{
    static const struct { double fx, fy, sigma_m, weight; } spots[] = {
        { 0.85, 0.80, 900.0, 0.35 }, { 0.75, 0.55, 1200.0, 0.20 },
        { 0.60, 0.35, 700.0, 0.12 }, { 0.35, 0.60, 1500.0, 0.10 },
        { 0.15, 0.30, 600.0, 0.06 }, { 0.90, 0.20, 400.0, 0.05 },
    };
    double w = COLS * g->cell_w, h = ROWS * g->cell_h;
    for (size_t i = 0; i < CELLS; i++) {
        ts_vec2 c = g->centres[i];
        double x = c.x - g->projection.x_min, y = c.y - g->projection.y_min;
        double v = 0.02 / CELLS;
        for (size_t s = 0; s < sizeof spots / sizeof spots[0]; s++) {
            double dx = x - spots[s].fx * w, dy = y - spots[s].fy * h;
            double q = (dx * dx + dy * dy) /
                       (2.0 * spots[s].sigma_m * spots[s].sigma_m);
            v += spots[s].weight * exp(-q);
        }
        prior[i] = v;
    }
    normalise(prior, CELLS);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* `reports` true cells drawn from the prior, each reported through the
 * channel's row: the counts IBU is given. */
static int draw_counts(const double *prior, const double *channel,
                       size_t reports, ts_rng *rng, double *counts)
{
    ts_alias_table truth;
    ts_alias_table rows[CELLS];
    if (ts_alias_build(&truth, prior, CELLS) != 0)
        return -1;
    size_t built = 0;
    int rc = 0;
    for (; built < CELLS; built++)
        if (ts_alias_build(&rows[built], channel + built * CELLS, CELLS) !=
            0) {
            rc = -1;
            break;
        }
    memset(counts, 0, CELLS * sizeof *counts);
    for (size_t i = 0; rc == 0 && i < reports; i++) {
        uint32_t x = ts_alias_sample(&truth, rng);
        counts[ts_alias_sample(&rows[x], rng)] += 1.0;
    }
    for (size_t i = 0; i < built; i++)
        ts_alias_free(&rows[i]);
    ts_alias_free(&truth);
    return rc;
}

static void usage(FILE *out)
{
    fputs("usage: bench_privic [--runs N] [--seed S] [--beta B] "
          "[--reports N]\n"
          "                    [--ba-precision P] [--ibu-precision P]\n"
          "                    [--ibu-max-iterations K] [TRACE.csv[.gz]]\n",
          out);
}

typedef struct ibu_case {
    const char *name;
    size_t reports;
    double counts[CELLS];
    double seconds[64];
    unsigned iterations;
    int converged;
    double estimate[CELLS];
} ibu_case;

int main(int argc, char **argv)
{
    int runs = 5;
    uint64_t seed = 1;
    double beta = 1.0, ba_precision = 1e-6, ibu_precision = 1e-6;
    unsigned ibu_max = 2000;
    size_t all_reports = 0;
    static const struct option longopts[] = {
        { "runs", required_argument, NULL, 'r' },
        { "seed", required_argument, NULL, 's' },
        { "beta", required_argument, NULL, 'b' },
        { "reports", required_argument, NULL, 'n' },
        { "ba-precision", required_argument, NULL, 'P' },
        { "ibu-precision", required_argument, NULL, 'p' },
        { "ibu-max-iterations", required_argument, NULL, 'k' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'r': runs = atoi(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'b': beta = strtod(optarg, NULL); break;
        case 'n': all_reports = strtoull(optarg, NULL, 10); break;
        case 'P': ba_precision = strtod(optarg, NULL); break;
        case 'p': ibu_precision = strtod(optarg, NULL); break;
        case 'k': ibu_max = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (runs < 1 || runs > 64 || argc - optind > 1 || !(beta > 0.0)) {
        usage(stderr);
        return 2;
    }
    static sf_grid g;
    static double prior[CELLS];
    if (grid_make(&g) != 0)
        return 1;
    size_t rows = 0;
    const char *source = "synthetic lumpy prior";
    if (optind < argc) {
        if (prior_from_trace(&g, argv[optind], prior, &rows) != 0)
            return 1;
        source = argv[optind];
        for (size_t i = 0; i < CELLS; i++)
            prior[i] += 1e-9;
        normalise(prior, CELLS);
    } else {
        prior_synthetic(&g, prior);
    }
    if (all_reports == 0)
        all_reports = rows > 0 ? rows : PAPER_SF_REPORTS;
    size_t occupied = 0;
    for (size_t i = 0; i < CELLS; i++)
        occupied += prior[i] > 1e-6;
    printf("bench_privic: SF grid %dx%d = %d cells of %.0f x %.0f m, beta "
           "%g per km; prior: %s (%zu rows in the box, %zu cells above "
           "1e-6); %d runs\n",
           COLS, ROWS, CELLS, g.cell_w, g.cell_h, beta, source, rows,
           occupied, runs);

    double *channel = malloc((size_t)CELLS * CELLS * sizeof *channel);
    static ibu_case cases[2];
    ts_rng *rng = ts_rng_new_seeded(seed);
    if (channel == NULL || rng == NULL) {
        fprintf(stderr, "bench_privic: out of memory\n");
        return 1;
    }
    char err[256];

    /* BA */
    ts_ba_params ba = { .beta = beta, .unit_m = 1000.0,
                        .precision = ba_precision,
                        .max_iterations = 100000 };
    ts_ba_result ba_result;
    double ba_s[64];
    static double marginal[CELLS];
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        if (ts_ba_channel(g.centres, CELLS, prior, &ba, channel, marginal,
                          &ba_result, err, sizeof err) != 0) {
            fprintf(stderr, "bench_privic: BA: %s\n", err);
            return 1;
        }
        ba_s[r] = now_s() - t0;
    }
    double ba_med = median(ba_s, runs);
    printf("bench_privic: BA  to precision %g: median %.4f s (min %.4f, max "
           "%.4f), %u iterations, %s (last change %.2g); paper 16.805 s: "
           "%.0fx faster\n",
           ba_precision, ba_med, ba_s[0], ba_s[runs - 1], ba_result.iterations,
           ba_result.converged ? "converged" : "NOT converged",
           ba_result.last_change, PAPER_BA_S / ba_med);
    /* How many outputs the converged channel still uses: the fewer, the
     * less IBU can tell inputs apart (what limits BA's EMD at low beta). */
    size_t outputs = 0;
    for (size_t i = 0; i < CELLS; i++)
        outputs += marginal[i] >= 1e-6;
    printf("bench_privic: BA output marginal: %zu of %d cells at >= 1e-6\n",
           outputs, CELLS);

    /* IBU */
    cases[0].name = "~1000";
    cases[0].reports = 1000;
    cases[1].name = "all";
    cases[1].reports = all_reports;
    ts_ibu_params ibu = { .precision = ibu_precision,
                          .max_iterations = ibu_max };
    for (int k = 0; k < 2; k++) {
        ibu_case *c = &cases[k];
        if (draw_counts(prior, channel, c->reports, rng, c->counts) != 0) {
            fprintf(stderr, "bench_privic: alias tables failed\n");
            return 1;
        }
        for (int r = 0; r < runs; r++) {
            for (size_t i = 0; i < CELLS; i++)
                c->estimate[i] = 1.0 / CELLS;
            ts_ibu_result result;
            double t0 = now_s();
            if (ts_ibu(channel, c->counts, CELLS, c->estimate, &ibu, &result,
                       err, sizeof err) != 0) {
                fprintf(stderr, "bench_privic: IBU: %s\n", err);
                return 1;
            }
            c->seconds[r] = now_s() - t0;
            c->iterations = result.iterations;
            c->converged = result.converged;
        }
        double med = median(c->seconds, runs);
        printf("bench_privic: IBU %s reports (%zu) to precision %g, cap %u: "
               "median %.4f s (min %.4f, max %.4f), %u iterations, %s; "
               "%.3f ms/iteration; paper 128.192 s: %.0fx faster\n",
               c->name, c->reports, ibu_precision, ibu_max, med,
               c->seconds[0], c->seconds[runs - 1], c->iterations,
               c->converged ? "converged" : "stopped at the cap",
               1e3 * med / c->iterations, PAPER_IBU_S / med);
    }

    /* EMD */
    double emd_s[64];
    ts_emd_result emd;
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        if (ts_emd(g.centres, CELLS, cases[1].estimate, prior, &emd, err,
                   sizeof err) != 0) {
            fprintf(stderr, "bench_privic: EMD: %s\n", err);
            return 1;
        }
        emd_s[r] = now_s() - t0;
    }
    double emd_med = median(emd_s, runs);
    printf("bench_privic: EMD (all-reports estimate vs prior) = %.1f m: "
           "median %.4f s (min %.4f, max %.4f), %zu sources x %zu sinks, %u "
           "simplex iterations\n",
           emd.distance, emd_med, emd_s[0], emd_s[runs - 1],
           emd.sources, emd.sinks, emd.simplex_iterations);
    double ibu_med = median(cases[0].seconds, runs);
    printf("bench_privic: cycle of 1000 reports (BA + IBU): %.4f s; paper "
           "(16.805 + 128.192 s): %.0fx faster; target >= 100x: BA %s, IBU "
           "%s\n",
           ba_med + ibu_med, (PAPER_BA_S + PAPER_IBU_S) / (ba_med + ibu_med),
           PAPER_BA_S / ba_med >= 100 ? "met" : "missed",
           PAPER_IBU_S / median(cases[1].seconds, runs) >= 100 &&
                   PAPER_IBU_S / ibu_med >= 100
               ? "met"
               : "missed");
    ts_rng_free(rng);
    free(channel);
    return 0;
}
