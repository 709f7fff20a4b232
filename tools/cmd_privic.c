/* tracesan privic: PRIVIC's loop (Algorithm 1) offline over a CSV trace,
 * with the figures the paper judges it by.
 *
 * Every row inside the profile's region is released once through the
 * profile's mechanism (no ledger: this measures the mechanism's
 * statistical utility, not a user's budget); the cycle length, BA's and
 * IBU's budgets come from the profile. Per cycle: EMD (metres and grid
 * cells) between the distribution of the trace's rows and the estimate,
 * EMD between the estimate and the previous one, and what BA and IBU
 * cost. --control runs the same loop with BA never re-fitted, so that a
 * reader sees what the re-fit adds; a geoind profile with density = true
 * runs the same loop through its fixed Laplace channel. With
 * --compare-laplace, BA, planar Laplace at the same level (eps = 2 beta)
 * and Laplace followed by BA each release every row once, IBU estimates
 * the distribution from each one's reports, and EMD says how far each
 * estimate is from the truth (the paper's Figure 3). --plot draws both
 * EMDs per cycle (tools/plot.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/emd.h"
#include "inference/ibu.h"
#include "mechanisms/laplace_channel.h"
#include "mechanisms/planar_laplace.h"
#include "mechanisms/population.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/plot.h"

#define ERR_MAX 512

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " privic --config FILE --profile NAME "
        "[-o PATH=VALUE]... [--seed N]\n"
        "                       [--control] [--compare-laplace |\n"
        "                        --plot FILE.svg|FILE.png [--plot-size WxH]]\n"
        "                       TRUE.csv\n"
        "\n"
        "Runs the PRIVIC loop of a privic profile over a CSV trace (header\n"
        "user,ts,lat,lon): every row inside the profile's region is released\n"
        "once through the profile's channel, and at each cycle's end IBU\n"
        "estimates the distribution from the previous estimate (combined\n"
        "with the earlier cycles' in proportion to their reports) and BA\n"
        "builds the next channel. The profile's ba_max_steps and\n"
        "ibu_max_steps give the paper's truncated BA and IBU budgets. A\n"
        "geoind profile with density = true runs the same loop through its\n"
        "fixed planar Laplace channel.\n"
        "\n"
        "options:\n"
        "  -c, --config FILE       tracesand configuration\n"
        "  -o, --override PATH=VALUE\n"
        "  -p, --profile NAME      a privic profile, or geoind with density\n"
        "                          (default: the default profile)\n"
        "  -s, --seed N            deterministic noise (testing only)\n"
        "      --control           the same loop with BA never re-fitted:\n"
        "                          every report goes through channel version\n"
        "                          1, only the estimate moves\n"
        "      --compare-laplace   BA against planar Laplace at eps = 2 beta\n"
        "      --plot FILE         also draw emd_true_m and emd_prev_m per\n"
        "                          cycle, SVG or PNG by FILE's extension\n"
        "      --plot-size WxH     its size in pixels (default "
        TS_PLOT_DEFAULT_SIZE_TEXT ")\n"
        "  -h, --help\n"
        "\n"
        "stdout: CSV, one row per completed cycle:\n"
        "  cycle,reports,emd_true_m,emd_prev_m,ba_iterations,ba_ms,"
        "ibu_iterations,ibu_ms,emd_true_cells\n"
        "  emd_true_m: the estimate vs the distribution of all the trace's\n"
        "  rows inside the region (metres; emd_true_cells: the same in grid\n"
        "  cells); emd_prev_m: vs the previous cycle's estimate (the first:\n"
        "  vs uniform)\n"
        "or with --compare-laplace, one row per mechanism at eps = 2 beta\n"
        "(ba; laplace; laplace_then_ba: Laplace at eps, then BA from the\n"
        "cell it lands in):\n"
        "  mechanism,beta,emd_true_m,ibu_iterations,emd_true_cells,"
        "mean_error_m\n"
        "  (beta per km; emd_true_cells in grid cells; mean_error_m from\n"
        "  the true cell's centre to the reported one's)\n",
        out);
}

typedef struct trace_row {
    double lat, lon;
    int64_t ts_ms;
    uint32_t cell;           /* the true cell */
} trace_row;

typedef struct trace {
    trace_row *rows;
    size_t n, cap;
    size_t outside;
} trace;

static int trace_push(trace *t, const ts_csv_row *row, uint32_t cell)
{
    trace_row *rows =
        ts_tool_reserve(t->rows, t->n, &t->cap, sizeof *rows, 4096);
    if (rows == NULL)
        return -1;
    t->rows = rows;
    t->rows[t->n++] = (trace_row){ row->lat, row->lon, row->ts_ms, cell };
    return 0;
}

static int read_trace(const char *path, const ts_population_ops *pop,
                      const void *profile, trace *t)
{
    char err[ERR_MAX];
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME " privic: %s\n", err);
        return -1;
    }
    ts_csv_row row;
    int rc, status = 0;
    while ((rc = ts_csv_read(reader, &row, err, sizeof err)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME " privic: %s: %s\n", path, err);
            status = -1;
            break;
        }
        if (rc == TS_CSV_BAD_ROW)
            continue;
        uint32_t cell;
        if (pop->cell_of(profile, row.lat, row.lon, &cell) != 0) {
            t->outside++;
            continue;
        }
        if (trace_push(t, &row, cell) != 0) {
            fprintf(stderr, TS_TOOL_NAME " privic: out of memory\n");
            status = -1;
            break;
        }
    }
    ts_csv_close(reader);
    return status;
}

typedef struct grid_points {
    size_t n;
    ts_vec2 *centres;        /* metres of the grid's plane */
    /* The same centres in cells: column and row, so that an EMD over them
     * is in grid cells (the PRIVIC paper's unit: its Table IV matches in
     * cells, not km). */
    ts_vec2 *cells;
} grid_points;

static double emd_over(const ts_vec2 *points, size_t n, const double *p,
                       const double *q)
{
    ts_emd_result result;
    char err[ERR_MAX];
    if (ts_emd(points, n, p, q, &result, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " privic: emd: %s\n", err);
        return NAN;
    }
    return result.distance;
}

/* EMD in metres between two distributions on the grid's cells; NAN (and
 * a message) when the solver fails. */
static double emd_between(const grid_points *g, const double *p,
                          const double *q)
{
    return emd_over(g->centres, g->n, p, q);
}

/* The same in grid cells. */
static double emd_cells(const grid_points *g, const double *p,
                        const double *q)
{
    return emd_over(g->cells, g->n, p, q);
}

static void normalise(double *v, size_t n)
{
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += v[i];
    for (size_t i = 0; i < n; i++)
        v[i] = total > 0.0 ? v[i] / total : 1.0 / (double)n;
}

/* ------------------------------------------------------ the plot */

/* The EMDs of each completed cycle, for --plot: one row per cycle, as
 * the x, emd_true, emd_prev columns the figure draws. */
enum { CYCLE_X, CYCLE_EMD_TRUE, CYCLE_EMD_PREV, CYCLE_COLUMNS };
typedef struct cycle_log {
    double *rows; /* n rows of CYCLE_COLUMNS */
    size_t n, cap;
} cycle_log;

static void cycle_log_free(cycle_log *log)
{
    free(log->rows);
}

static int cycle_log_add(cycle_log *log, unsigned cycle, double emd_true,
                         double emd_prev)
{
    double *rows = ts_tool_reserve(log->rows, log->n, &log->cap,
                                   CYCLE_COLUMNS * sizeof *rows, 64);
    if (rows == NULL)
        return -1;
    log->rows = rows;
    double *row = log->rows + log->n * CYCLE_COLUMNS;
    row[CYCLE_X] = cycle;
    row[CYCLE_EMD_TRUE] = emd_true;
    row[CYCLE_EMD_PREV] = emd_prev;
    log->n++;
    return 0;
}

/* Column k of the log, malloc'ed (NULL when out of memory). */
static double *cycle_column(const cycle_log *log, int k)
{
    double *column = malloc(log->n * sizeof *column);
    for (size_t i = 0; column != NULL && i < log->n; i++)
        column[i] = log->rows[i * CYCLE_COLUMNS + k];
    return column;
}

static int plot_cycles(const cycle_log *log, const char *profile,
                       const char *path, ts_plot_size size)
{
    if (log->n == 0) {
        fprintf(stderr, TS_TOOL_NAME " privic: --plot: no cycle completed, "
                "nothing to plot\n");
        return -1;
    }
    char title[256], err[ERR_MAX];
    snprintf(title, sizeof title, "PRIVIC EMD per cycle, profile %s",
             profile);
    ts_plot *plot = ts_plot_new(NULL);
    ts_plot_panel *panel =
        plot != NULL ? ts_plot_add_panel(plot, title, "cycle",
                                         TS_PLOT_LINEAR, "EMD (m, log scale)",
                                         TS_PLOT_LOG)
                     : NULL;
    double *x = cycle_column(log, CYCLE_X);
    double *emd_true = cycle_column(log, CYCLE_EMD_TRUE);
    double *emd_prev = cycle_column(log, CYCLE_EMD_PREV);
    ts_plot_style style = log->n <= 200 ? TS_PLOT_LINE_MARKED : TS_PLOT_LINE;
    int added = panel != NULL && x != NULL && emd_true != NULL &&
                emd_prev != NULL &&
                ts_plot_add_series(panel,
                                   "estimate vs the trace's distribution",
                                   style, x, emd_true, log->n) == 0 &&
                ts_plot_add_series(panel, "estimate vs the previous cycle's",
                                   style, x, emd_prev, log->n) == 0;
    free(x);
    free(emd_true);
    free(emd_prev);
    if (!added) {
        ts_plot_free(plot);
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        return -1;
    }
    int status = ts_plot_write(plot, path, size, err, sizeof err);
    if (status != 0)
        fprintf(stderr, TS_TOOL_NAME " privic: --plot: %s\n", err);
    ts_plot_free(plot);
    return status;
}

/* ------------------------------------------------------ the loop */

/* control: BA is never re-fitted, every report goes through the first
 * channel (version 1), and only the estimate moves, by IBU from the
 * previous estimate and more reports: what the loop would do without
 * PRIVIC's feedback. */
static int run_loop(const ts_profile *profile, const trace *t,
                    const grid_points *g, ts_rng *rng, int control,
                    cycle_log *log)
{
    const ts_population_ops *pop = profile->ops->population;
    ts_population_loop loop;
    if (ts_population_loop_init(&loop, pop, profile->mech) != 0)
        return -1;
    size_t n = g->n;
    double *previous = malloc(n * sizeof *previous);
    double *population = calloc(n, sizeof *population);
    int status = -1;
    if (previous == NULL || population == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        previous[i] = 1.0 / (double)n;
    /* The paper's Figures 8-9 measure against the PMF of the whole data
     * set, not of one cycle's rows: a cycle of 1000 rows over 408 cells
     * is itself a noisy sample of it. */
    for (size_t r = 0; r < t->n; r++)
        population[t->rows[r].cell] += 1.0;
    normalise(population, n);
    printf("cycle,reports,emd_true_m,emd_prev_m,ba_iterations,ba_ms,"
           "ibu_iterations,ibu_ms,emd_true_cells\n");
    ts_budget_view unlimited = { INFINITY, 0.0 };
    for (size_t r = 0; r < t->n; r++) {
        const trace_row *row = &t->rows[r];
        ts_point truth_point = { .lat = row->lat, .lon = row->lon,
                                 .ts_ms = row->ts_ms, .accuracy_m = NAN };
        ts_report report;
        memset(&report, 0, sizeof report);
        if (profile->ops->release(profile->mech, NULL, &truth_point,
                                  &unlimited, rng, &report) != TS_RELEASE_OK) {
            fprintf(stderr, TS_TOOL_NAME " privic: release failed\n");
            goto out;
        }
        if (!ts_population_observe(&loop, report.lat, report.lon,
                                   report.channel_version, row->ts_ms))
            continue;
        ts_population_job job;
        if (ts_population_close(&loop, &job) != 0)
            goto out;
        uint64_t reports = job.reports;
        if (control)
            job.adaptive = 0;
        ts_population_run(&job);
        double ibu_ms = job.ibu_ms, ba_ms = job.build_ms;
        unsigned ibu_it = job.ibu.iterations, ba_it = job.build.iterations;
        if (ts_population_finish(&loop, &job) < 0) {
            fprintf(stderr, TS_TOOL_NAME " privic: cycle %u failed\n",
                    loop.cycles + 1);
            goto out;
        }
        double emd_true = emd_between(g, population, loop.theta);
        double emd_prev = emd_between(g, loop.theta, previous);
        double emd_true_cells = emd_cells(g, population, loop.theta);
        memcpy(previous, loop.theta, n * sizeof *previous);
        printf("%u,%" PRIu64 ",%.3f,%.3f,%u,%.1f,%u,%.1f,%.4f\n",
               loop.cycles, reports, emd_true, emd_prev, ba_it, ba_ms, ibu_it,
               ibu_ms, emd_true_cells);
        if (log != NULL &&
            cycle_log_add(log, loop.cycles, emd_true, emd_prev) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            goto out;
        }
    }
    if (loop.cycle_reports > 0)
        fprintf(stderr, "privic: %" PRIu64 " reports of an unfinished cycle "
                "left out\n", loop.cycle_reports);
    status = 0;
out:
    free(previous);
    free(population);
    ts_population_loop_free(&loop);
    return status;
}

/* ------------------------------------------- BA against planar Laplace */

/* IBU from a uniform start on one channel's reports, then EMD to truth in
 * metres and in cells. */
static double estimate_distance(const grid_points *g, const double *channel,
                                const double *counts, const double *truth,
                                const ts_ibu_params *ibu,
                                unsigned *iterations, double *in_cells)
{
    *iterations = 0;
    *in_cells = NAN;
    size_t n = g->n;
    double *theta = malloc(n * sizeof *theta);
    if (theta == NULL)
        return NAN;
    for (size_t i = 0; i < n; i++)
        theta[i] = 1.0 / (double)n;
    ts_ibu_result result;
    char err[ERR_MAX];
    double d = NAN;
    if (ts_ibu(channel, counts, n, theta, ibu, &result, err, sizeof err) ==
        0) {
        d = emd_between(g, truth, theta);
        *in_cells = emd_cells(g, truth, theta);
        *iterations = result.iterations;
    } else
        fprintf(stderr, TS_TOOL_NAME " privic: ibu: %s\n", err);
    free(theta);
    return d;
}

/* The level both are compared at: what a report spends, 2 beta per
 * metre; printed as beta per kilometre. */
static double report_eps(const ts_profile *profile, const trace *t,
                         ts_rng *rng)
{
    ts_point p = { .lat = t->rows[0].lat, .lon = t->rows[0].lon,
                   .ts_ms = t->rows[0].ts_ms, .accuracy_m = NAN };
    ts_report report;
    memset(&report, 0, sizeof report);
    ts_budget_view unlimited = { INFINITY, 0.0 };
    if (profile->ops->release(profile->mech, NULL, &p, &unlimited, rng,
                              &report) != TS_RELEASE_OK)
        return NAN;
    return report.eps_point;
}

/* The grid's shape, for binning planar Laplace draws. */
typedef struct grid_shape {
    uint32_t cols, rows;
    double cell_w, cell_h;
    ts_vec2 origin;          /* the south-west corner, metres */
} grid_shape;

/* Planar Laplace at eps from `from`, reported as the cell the noisy point
 * falls in (the border cells take what falls beyond): the channel
 * ts_laplace_grid_channel computes, from a cell's centre. */
static uint32_t laplace_cell(const grid_shape *s, ts_vec2 from, double eps,
                             ts_rng *rng)
{
    double radius, angle;
    ts_planar_laplace_sample(rng, eps, &radius, &angle);
    double col = floor((from.x + radius * cos(angle) - s->origin.x) /
                       s->cell_w);
    double row = floor((from.y + radius * sin(angle) - s->origin.y) /
                       s->cell_h);
    col = col < 0 ? 0 : col >= s->cols ? s->cols - 1 : col;
    row = row < 0 ? 0 : row >= s->rows ? s->rows - 1 : row;
    return (uint32_t)row * s->cols + (uint32_t)col;
}

/* The report cell of one release of the profile's installed channel from
 * the centre of `cell`; UINT32_MAX on failure. */
static uint32_t channel_cell(const ts_profile *profile, uint32_t cell,
                             const trace *t, size_t r, ts_rng *rng)
{
    const ts_population_ops *pop = profile->ops->population;
    double b[4];
    pop->cell_bounds(profile->mech, cell, b);
    ts_point at = { .lat = 0.5 * (b[0] + b[2]), .lon = 0.5 * (b[1] + b[3]),
                    .ts_ms = t->rows[r].ts_ms, .accuracy_m = NAN };
    ts_report report;
    memset(&report, 0, sizeof report);
    ts_budget_view unlimited = { INFINITY, 0.0 };
    uint32_t out;
    if (profile->ops->release(profile->mech, NULL, &at, &unlimited, rng,
                              &report) != TS_RELEASE_OK ||
        pop->cell_of(profile->mech, report.lat, report.lon, &out) != 0)
        return UINT32_MAX;
    return out;
}

/* The mechanisms compared at one level eps = 2 beta per metre:
 *   ba               BA fitted to the true distribution, from the true cell
 *                    (eps_point d + eps_floor on true points);
 *   laplace          planar Laplace at eps from the true cell's centre,
 *                    binned (eps per metre: geoind with density = true);
 *   laplace_then_ba  planar Laplace at eps first, then BA from the cell it
 *                    lands in: option (a) of issue 24, a true per-metre
 *                    eps with no floor, since everything after the
 *                    Laplace draw is post-processing. */
enum { CMP_BA, CMP_LAPLACE, CMP_LAPLACE_BA, CMP_N };
static const char *const compared_names[CMP_N] = { "ba", "laplace",
                                                   "laplace_then_ba" };

static int compare_laplace(const ts_profile *profile, const trace *t,
                           const grid_points *g, ts_rng *rng)
{
    const ts_population_ops *pop = profile->ops->population;
    size_t n = g->n;
    grid_shape shape;
    pop->grid_shape(profile->mech, &shape.cols, &shape.rows, &shape.cell_w,
                    &shape.cell_h);
    shape.origin = (ts_vec2){ g->centres[0].x - shape.cell_w / 2,
                              g->centres[0].y - shape.cell_h / 2 };
    double eps = report_eps(profile, t, rng);
    double beta = eps * 1000.0 / 2.0;
    ts_population_cycle cycle;
    pop->cycle(profile->mech, &cycle);

    double *truth = calloc(n, sizeof *truth);
    double *prior = malloc(n * sizeof *prior);
    double *counts = calloc(CMP_N * n, sizeof *counts);
    double *laplace = malloc(n * n * sizeof *laplace);
    double *composed = calloc(n * n, sizeof *composed);
    double error_m[CMP_N] = { 0 };
    void *ba = NULL;
    char err[ERR_MAX];
    int status = -1;
    if (!truth || !prior || !counts || !laplace || !composed ||
        !isfinite(eps))
        goto out;
    for (size_t r = 0; r < t->n; r++)
        truth[t->rows[r].cell] += 1.0;
    normalise(truth, n);
    /* BA's fixed point for this population: the channel PRIVIC converges
     * towards, its prior the true distribution (floored: BA needs full
     * support). */
    for (size_t i = 0; i < n; i++)
        prior[i] = truth[i] + 1e-9;
    normalise(prior, n);
    ba = pop->channel_build(profile->mech, prior, NULL, err, sizeof err);
    if (ba == NULL ||
        ts_laplace_grid_channel(eps, shape.cols, shape.rows, shape.cell_w,
                                shape.cell_h, laplace, err,
                                sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " privic: %s\n", err);
        goto out;
    }
    /* What IBU inverts for laplace_then_ba: the two channels in turn. */
    const double *c = pop->channel_matrix(ba);
    /* How far the rate-distortion optimum collapses the population: the
     * outputs that carry at least 0.1 % of the reports (BA drives the
     * others' mass towards 0 slowly, so a lower threshold would count
     * where it stopped rather than where it goes). */
    size_t live = 0;
    for (size_t y = 0; y < n; y++) {
        double mass = 0.0;
        for (size_t x = 0; x < n; x++)
            mass += prior[x] * c[x * n + y];
        live += mass >= 1e-3;
    }
    fprintf(stderr, "privic: BA's channel: %zu of %zu outputs carry at "
            "least 0.1 %% of the reports\n", live, n);
    for (size_t x = 0; x < n; x++)
        for (size_t z = 0; z < n; z++) {
            double l = laplace[x * n + z];
            for (size_t y = 0; y < n; y++)
                composed[x * n + y] += l * c[z * n + y];
        }
    uint32_t version;
    const void *was = pop->channel_current(profile->mech, &version);
    pop->channel_install(profile->mech, ba, version);
    for (size_t r = 0; r < t->n; r++) {
        uint32_t x = t->rows[r].cell;
        uint32_t report[CMP_N];
        report[CMP_BA] = channel_cell(profile, x, t, r, rng);
        report[CMP_LAPLACE] = laplace_cell(&shape, g->centres[x], eps, rng);
        uint32_t landed = laplace_cell(&shape, g->centres[x], eps, rng);
        report[CMP_LAPLACE_BA] = channel_cell(profile, landed, t, r, rng);
        for (int m = 0; m < CMP_N; m++) {
            if (report[m] >= n) {
                pop->channel_install(profile->mech, was, version);
                fprintf(stderr, TS_TOOL_NAME " privic: release failed\n");
                goto out;
            }
            counts[(size_t)m * n + report[m]] += 1.0;
            error_m[m] += hypot(g->centres[report[m]].x - g->centres[x].x,
                                g->centres[report[m]].y - g->centres[x].y);
        }
    }
    pop->channel_install(profile->mech, was, version);
    const double *channels[CMP_N] = { c, laplace, composed };
    printf("mechanism,beta,emd_true_m,ibu_iterations,emd_true_cells,"
           "mean_error_m\n");
    for (int m = 0; m < CMP_N; m++) {
        unsigned iterations;
        double cells;
        double d = estimate_distance(g, channels[m], counts + (size_t)m * n,
                                     truth, &cycle.ibu, &iterations, &cells);
        printf("%s,%g,%.3f,%u,%.4f,%.1f\n", compared_names[m], beta, d,
               iterations, cells, error_m[m] / (double)t->n);
    }
    status = 0;
out:
    if (ba != NULL)
        pop->channel_free(ba);
    free(truth);
    free(prior);
    free(counts);
    free(laplace);
    free(composed);
    return status;
}

int cmd_privic(int argc, char **argv)
{
    int compare = 0, control = 0, plot_size_given = 0;
    const char *plot_path = NULL;
    ts_plot_size plot_size = { TS_PLOT_DEFAULT_WIDTH,
                               TS_PLOT_DEFAULT_HEIGHT };
    const ts_tool_option options[] = {
        { "compare-laplace", 0, TS_ARG_FLAG, &compare, NULL, 0, 0, NULL,
          NULL },
        { "control", 0, TS_ARG_FLAG, &control, NULL, 0, 0, NULL, NULL },
        { "plot", 0, TS_ARG_STRING, &plot_path, NULL, 0, 0, NULL, NULL },
        { "plot-size", 0, TS_ARG_HANDLER, &plot_size, &plot_size_given, 0, 0,
          NULL, ts_plot_take_size },
        { 0 },
    };
    static const ts_tool_command base = {
        "privic", TS_OPT_CONFIG | TS_OPT_OVERRIDE | TS_OPT_PROFILE |
                      TS_OPT_SEED,
        NULL, 1, "one trace file", usage,
    };
    ts_tool_command command = base;
    command.options = options;
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    ts_plot_format plot_format;
    if (plot_path == NULL && plot_size_given) {
        fprintf(stderr, TS_TOOL_NAME " privic: --plot-size needs --plot\n");
        return 1;
    }
    if (control && compare) {
        fprintf(stderr, TS_TOOL_NAME " privic: --control runs the loop, "
                "--compare-laplace does not: choose one\n");
        return 1;
    }
    if (plot_path != NULL && compare) {
        fprintf(stderr, TS_TOOL_NAME " privic: --plot draws the loop's "
                "cycles, not --compare-laplace\n");
        return 1;
    }
    if (plot_path != NULL && ts_plot_format_of(plot_path, &plot_format) != 0) {
        fprintf(stderr, TS_TOOL_NAME " privic: --plot %s: the file name must "
                "end in .svg or .png\n", plot_path);
        return 1;
    }
    ts_tool_pipeline tool;
    if (ts_tool_pipeline_open(&common, &tool) != 0)
        return 1;
    int status = 1;
    trace t = { 0 };
    grid_points g = { 0 };
    cycle_log log = { 0 };
    const ts_profile *profile = tool.profile;
    const ts_population_ops *pop = profile->ops->population;
    if (pop == NULL || (compare && !pop->adaptive)) {
        fprintf(stderr, TS_TOOL_NAME " privic: profile %s uses mechanism %s, "
                "%s\n", profile->name, profile->ops->name,
                pop == NULL ? "which keeps no density estimate (privic, or "
                              "geoind with density = true)"
                            : "not privic (--compare-laplace needs BA)");
        goto out;
    }
    if (read_trace(argv[first], pop, profile->mech, &t) != 0)
        goto out;
    if (t.n == 0) {
        fprintf(stderr, TS_TOOL_NAME " privic: no row inside the region\n");
        goto out;
    }
    g.n = pop->cells(profile->mech);
    g.centres = malloc(g.n * sizeof *g.centres);
    if (g.centres == NULL)
        goto out;
    g.cells = malloc(g.n * sizeof *g.cells);
    if (g.cells == NULL)
        goto out;
    uint32_t cols, rows;
    double cell_w, cell_h;
    pop->grid_shape(profile->mech, &cols, &rows, &cell_w, &cell_h);
    for (size_t i = 0; i < g.n; i++) {
        g.centres[i] = pop->cell_centre(profile->mech, (uint32_t)i);
        g.cells[i] = (ts_vec2){ (double)(i % cols), (double)(i / cols) };
    }
    fprintf(stderr, "privic: %zu rows inside the region, %zu outside, %zu "
            "cells\n", t.n, t.outside, g.n);
    if (compare) {
        status = compare_laplace(profile, &t, &g, tool.rng) ? 1 : 0;
    } else {
        status = run_loop(profile, &t, &g, tool.rng, control,
                          plot_path != NULL ? &log : NULL) ||
                         (plot_path != NULL &&
                          plot_cycles(&log, profile->name, plot_path,
                                      plot_size) != 0)
                     ? 1
                     : 0;
    }
    if (fflush(stdout) != 0)
        status = 1;
out:
    cycle_log_free(&log);
    free(g.centres);
    free(g.cells);
    free(t.rows);
    ts_tool_pipeline_close(&tool);
    return status;
}
