/* tracesan optimize: the identity-protecting channel of a training trace.
 *
 * Reads user,lat,lon[,ts] rows (tools/csv.h; other columns ignored), counts
 * the joint P(U = user, X = cell) on a grid of square cells, smooths it
 * (inference/mi_smooth.h), solves for the channel P(Z | X) of least
 * I(U; Z) under E[d(X, Z)] <= L (inference/mi_optimal.h), guards the rows
 * of cells no training row visited, and writes the channel file
 * (inference/channel_file.h) for the mi-channel mechanism.
 *
 * With --validate-split F the last F of each user's rows (by ts, else by
 * file order) are held out: every smoothing candidate is fitted on the
 * rest and judged on them, the best by held-out Bayes error is refitted on
 * all rows, and both the in-sample and the held-out figures are printed.
 * Messages never show coordinates: a skipped row is named by its line
 * number only. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "inference/channel_file.h"
#include "inference/mi_optimal.h"
#include "inference/mi_smooth.h"
#include "mechanisms/cell_grid.h"
#include "mechanisms/mechanism.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/name_index.h"

#define ERR_MAX 512
#define DEFAULT_GAP_BITS 1e-4
#define DEFAULT_MAX_ITERATIONS 20000
#define DEFAULT_VALIDATE_SPLIT 0.3
#define MAX_REPORTED_BAD_ROWS 10
#define MAX_CANDIDATES 8
/* Candidates are screened at this multiple of --gap-bits (the refit on
 * all rows runs at --gap-bits itself). */
#define SCREEN_GAP_FACTOR 10.0
/* Cells without points of a set are costed as a uniform point of the
 * cell: the mean over SUBCELLS x SUBCELLS sub-cell centres. */
#define SUBCELLS 4
/* Solves per candidate when the guard takes E[d] past L (see fit). */
#define GUARD_ROUNDS 6

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " optimize --region LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "                         --cell-m METRES --distortion-m L\n"
        "                         [--distortion-on points|centres]\n"
        "                         [--smooth-m H[,H..]] [--backoff B[,B..]]\n"
        "                         [--row-entropy T[,T..]]\n"
        "                         [--channel mi|remapped-laplace[,..]]\n"
        "                         [--validate-split F] [--geoind-epsilon E]\n"
        "                         [--gap-bits T] [--max-iterations N]\n"
        "                         -o CHANNEL.bin TRAIN.csv\n"
        "\n"
        "Computes the channel P(report cell | true cell) that minimises the\n"
        "mutual information I(U;Z) between a user's identity and the report,\n"
        "subject to a mean distortion of at most L metres, on a grid of\n"
        "square cells, from the users' check-ins in TRAIN.csv (header naming\n"
        "user,lat,lon and optionally ts; gzip read transparently; '-' reads\n"
        "stdin). Rows outside the region are skipped. It also tries planar\n"
        "Laplace on the grid remapped to the population's places, and keeps\n"
        "the candidate whose held-out Bayes error is furthest above planar\n"
        "Laplace's at equal distortion. Without --geoind-epsilon the\n"
        "guarantee is information-theoretic about the training users, not\n"
        "differential privacy. See docs/mi_channel.md.\n"
        "\n"
        "options:\n"
        "      --region LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "                          the grid's box, degrees\n"
        "      --cell-m METRES     side of a cell\n"
        "      --distortion-m L    bound on the mean distortion, metres\n"
        "      --distortion-on points|centres\n"
        "                          the distortion bound holds over the true\n"
        "                          training points themselves (points, the\n"
        "                          default) or between cell centres\n"
        "      --smooth-m H[,H..]  fit the channel to the users' joint spread\n"
        "                          by a Gaussian kernel of H metres; several:\n"
        "                          candidates, chosen by held-out Bayes error\n"
        "                          (default: 0, 1 and 2 cells)\n"
        "      --backoff B[,B..]   weight of the population in the smoothed\n"
        "                          joint, in [0, 1] (default 0.05)\n"
        "      --row-entropy T[,T..]\n"
        "                          regularise the rows towards spread: minimise\n"
        "                          I(U;Z) + T sum p(x) C log C (candidates as\n"
        "                          for --smooth-m; default 0,0.3; not with\n"
        "                          --geoind-epsilon)\n"
        "      --channel mi|remapped-laplace[,..]\n"
        "                          the channel families tried: the MI-optimal\n"
        "                          channel (mi), and planar Laplace on the grid\n"
        "                          remapped to the smoothed population's\n"
        "                          locations at E[d] = L (remapped-laplace),\n"
        "                          each a candidate per smoothing, chosen by\n"
        "                          held-out Bayes error (default both; only\n"
        "                          mi with --geoind-epsilon)\n"
        "      --validate-split F  hold out the last F of each user's rows\n"
        "                          (by ts, else file order) to choose the\n"
        "                          smoothing and report held-out figures;\n"
        "                          0: no validation, the first candidate\n"
        "                          (default 0.3)\n"
        "      --geoind-epsilon E  also make the channel E-geo-\n"
        "                          indistinguishable (per metre) between cell\n"
        "                          centres, plus the additive eps_floor =\n"
        "                          E x cell diagonal (nats) for continuous\n"
        "                          locations; without it the channel's\n"
        "                          guarantee is information-theoretic, not\n"
        "                          differential privacy (default 0: none)\n"
        "      --geoind-solver auto|lp|first-order\n"
        "                          with --geoind-epsilon: Frank-Wolfe over\n"
        "                          GLPK's LP (exact, at most 144 cells), or\n"
        "                          the first-order primal-dual method (any\n"
        "                          size up to 1600 cells, certified by a\n"
        "                          Lagrangian bound); auto: the LP up to 144\n"
        "                          cells (default auto)\n"
        "      --gap-bits T        stop once the duality gap is below T bits\n"
        "                          (default 1e-4)\n"
        "      --max-iterations N  cap on the optimizer's iterations\n"
        "                          (default 20000)\n"
        "  -o, --output FILE       the channel file (written atomically)\n"
        "  -h, --help              show this help\n"
        "\n"
        "stderr: rows used, per candidate the in-sample and held-out I(U;Z),\n"
        "Bayes error and mean distortion, its family and the held-out Bayes\n"
        "error of planar Laplace at its distortion, then the chosen channel's\n"
        "figures, the gap, iterations and time; with --geoind-epsilon the\n"
        "guarantee in full, the certificate (the lower bound on the optimum\n"
        "and the gap) and the loader's exact check of the written file.\n"
        "Exit status: 0 on success (a run that did not reach the gap says so\n"
        "and still writes its certified channel), 1 on a usage, input or\n"
        "output error.\n",
        out);
}

static const char *take_region(void *dest, const char *text)
{
    return ts_parse_box(text, dest) == 0
               ? NULL
               : "needs LAT_MIN,LON_MIN,LAT_MAX,LON_MAX inside WGS84, min < "
                 "max";
}

typedef struct number_list {
    double v[MAX_CANDIDATES];
    size_t n;
} number_list;

static const char *take_list(void *dest, const char *text)
{
    number_list *list = dest;
    list->n = 0;
    const char *p = text;
    while (*p != '\0') {
        if (list->n == MAX_CANDIDATES)
            return "at most 8 values";
        char *end;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || v < 0.0)
            return "needs non-negative numbers separated by commas";
        list->v[list->n++] = v;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return "needs non-negative numbers separated by commas";
        p = end;
    }
    return list->n == 0 ? "needs at least one number" : NULL;
}

/* Which channel families are tried (bits of ts_mi_family). */
#define FAMILY_BIT(f) (1u << (unsigned)(f))
static const char *const family_names[] = { "mi", "remapped-laplace" };

static const char *take_families(void *dest, const char *text)
{
    unsigned *mask = dest;
    *mask = 0;
    for (const char *p = text; *p != '\0';) {
        size_t len = strcspn(p, ",");
        int found = 0;
        for (unsigned f = 0; f < 2; f++)
            if (strlen(family_names[f]) == len &&
                strncmp(p, family_names[f], len) == 0) {
                *mask |= FAMILY_BIT(f);
                found = 1;
            }
        if (!found)
            return "needs mi and/or remapped-laplace, separated by commas";
        p += len;
        if (*p == ',')
            p++;
    }
    return *mask == 0 ? "needs at least one family" : NULL;
}

/* One training row: who, which cell, where on the plane, when. */
typedef struct point {
    uint32_t user, cell;
    ts_vec2 xy;
    double ts;              /* NAN: none; the row order decides */
    size_t seq;
    int held_out;
} point;

static int compare_user_time(const void *a, const void *b)
{
    const point *p = a, *q = b;
    if (p->user != q->user)
        return (p->user > q->user) - (p->user < q->user);
    if (!isnan(p->ts) && !isnan(q->ts) && p->ts != q->ts)
        return (p->ts > q->ts) - (p->ts < q->ts);
    return (p->seq > q->seq) - (p->seq < q->seq);
}

/* The last `share` of each user's rows, in time, are held out (at least
 * one row of a user stays for fitting). */
static void split_points(point *pts, size_t n, double share)
{
    qsort(pts, n, sizeof *pts, compare_user_time);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && pts[j].user == pts[i].user)
            j++;
        size_t rows = j - i;
        size_t held = (size_t)floor(share * (double)rows + 0.5);
        if (held >= rows)
            held = rows - 1;
        for (size_t t = i; t < j; t++)
            pts[t].held_out = t >= j - held;
        i = j;
    }
}

/* Counts per (user, cell) of the rows of a side (0 fit, 1 held out, -1
 * all), and the cost matrix of their points; NULL cost: skip it. */
static size_t counts_of(const point *pts, size_t np, int side, size_t users,
                        const ts_cell_grid *grid, double *counts,
                        double *cost, size_t *per_cell)
{
    size_t n = grid->cells, used = 0;
    memset(counts, 0, users * n * sizeof *counts);
    if (cost != NULL) {
        memset(cost, 0, n * n * sizeof *cost);
        memset(per_cell, 0, n * sizeof *per_cell);
    }
    for (size_t i = 0; i < np; i++) {
        if (side >= 0 && pts[i].held_out != side)
            continue;
        counts[(size_t)pts[i].user * n + pts[i].cell] += 1.0;
        used++;
        if (cost == NULL)
            continue;
        double *row = cost + (size_t)pts[i].cell * n;
        for (size_t z = 0; z < n; z++)
            row[z] += hypot(pts[i].xy.x - grid->centres[z].x,
                            pts[i].xy.y - grid->centres[z].y);
        per_cell[pts[i].cell]++;
    }
    if (cost == NULL)
        return used;
    for (size_t x = 0; x < n; x++) {
        double *row = cost + x * n;
        if (per_cell[x] > 0) {
            for (size_t z = 0; z < n; z++)
                row[z] /= (double)per_cell[x];
            continue;
        }
        for (size_t z = 0; z < n; z++) {
            double sum = 0.0;
            for (int a = 0; a < SUBCELLS; a++)
                for (int b = 0; b < SUBCELLS; b++) {
                    double px = grid->centres[x].x +
                                grid->cell_w * ((a + 0.5) / SUBCELLS - 0.5);
                    double py = grid->centres[x].y +
                                grid->cell_h * ((b + 0.5) / SUBCELLS - 0.5);
                    sum += hypot(px - grid->centres[z].x,
                                 py - grid->centres[z].y);
                }
            row[z] = sum / (SUBCELLS * SUBCELLS);
        }
    }
    return used;
}

static void normalise(double *v, size_t len)
{
    double total = 0.0;
    for (size_t i = 0; i < len; i++)
        total += v[i];
    for (size_t i = 0; i < len; i++)
        v[i] /= total;
}

/* A copy of counts scaled to sum to 1; NULL when memory runs out. */
static double *normalised_copy(const double *counts, size_t len)
{
    double *v = malloc(len * sizeof *v);
    if (v != NULL) {
        memcpy(v, counts, len * sizeof *v);
        normalise(v, len);
    }
    return v;
}

typedef struct fit_setup {
    const ts_cell_grid *grid;
    size_t users;
    double distortion_m, geoind_epsilon;
    int on_points;
    unsigned max_iterations;
    ts_mi_geoind_solver geoind_solver;
} fit_setup;

/* Smooths counts, optimizes, guards; the channel in C. The guard moves
 * mass in rows the smoothed joint weighs (its back-off gives every cell
 * some), which can take E[d] past L: the bound is then tightened by the
 * overshoot and the channel solved again, so that the channel written,
 * guard included, meets L on the joint it was fitted to (if GUARD_ROUNDS
 * solves do not get there, the last is kept, its true E[d] recorded and
 * a warning printed). result's I(U;Z)
 * and E[d] are the guarded channel's; its gap is the solver's, before the
 * guard. */
static int fit(const fit_setup *fs, const double *counts, const double *cost,
               double smooth_m, double backoff, double tau,
               ts_mi_family family, double gap_bits, double *C,
               double *joint, ts_mi_result *result, size_t *guarded,
               char *err, size_t errlen)
{
    const ts_cell_grid *g = fs->grid;
    if (ts_mi_smooth_joint(g->centres, g->cells, fs->users, counts,
                           smooth_m, backoff, joint, err, errlen) != 0)
        return -1;
    ts_mi_problem problem = {
        .cells = g->cells,
        .centres = g->centres,
        .users = fs->users,
        .joint = joint,
        .distortion_m = fs->distortion_m,
        .geoind_epsilon = fs->geoind_epsilon,
        .cost = fs->on_points ? cost : NULL,
        .row_entropy_weight = tau,
    };
    ts_mi_params params = {
        .gap_tolerance_bits = gap_bits,
        .max_iterations = fs->max_iterations,
        .geoind_solver = fs->geoind_solver,
        .family = family,
    };
    *guarded = 0;
    double *raw = NULL;
    int rc = -1;
    /* below: the largest bound tried that no channel meets (0: none);
     * solved: the last bound a channel was solved for. */
    double target = fs->distortion_m, below = 0.0, solved = target;
    int last = 0;
    for (int round = 0;; round++) {
        problem.distortion_m = target;
        if (ts_mi_optimize(&problem, &params, C, result, err, errlen) != 0) {
            if (round == 0 || last)
                goto out;
            /* Tightened below what any channel reaches: back towards the
             * last bound solved; out of rounds, that bound itself. */
            below = target;
            last = round + 1 >= GUARD_ROUNDS;
            target = last ? solved : 0.5 * (below + solved);
            continue;
        }
        solved = target;
        if (fs->geoind_epsilon > 0.0)
            break;  /* its rows are tied to their neighbours' */
        /* The guard judges against the unsmoothed training joint. */
        if (raw == NULL &&
            (raw = normalised_copy(counts, fs->users * g->cells)) == NULL) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        if (ts_mi_guard_rows(raw, g->cells, fs->users, g->centres, C,
                             guarded, err, errlen) != 0)
            goto out;
        double D = ts_mi_distortion(&problem, C);
        result->distortion_m = D;
        result->mi_bits = ts_mi_bits(&problem, C);
        if (D <= fs->distortion_m * (1.0 + 1e-9))
            break;
        if (last || round + 1 >= GUARD_ROUNDS) {
            /* Written as it is, its true E[d] in the file and said. */
            fprintf(stderr, "optimize: warning: the guarded rows keep E[d] "
                    "at %.1f m, above L = %.1f m, after %d solves (the "
                    "file records %.1f m)\n", D, fs->distortion_m,
                    round + 1, D);
            break;
        }
        /* Aim below by the overshoot and a fifth more (the guard's own
         * share moves a little with the channel), and 10^-4 of L; never
         * at or below a bound already found unreachable. */
        double next = target - 1.2 * (D - fs->distortion_m) -
                      1e-4 * fs->distortion_m;
        target = next > below ? next : 0.5 * (below + target);
    }
    rc = 0;
out:
    free(raw);
    return rc;
}

/* One candidate of the validation: a smoothing, a row entropy (mi), a
 * family. */
typedef struct candidate {
    size_t smooth, backoff, entropy;    /* entropy SIZE_MAX: none */
    ts_mi_family family;
} candidate;

static double tau_of(const candidate *c, const number_list *entropy)
{
    return c->entropy == SIZE_MAX ? 0.0 : entropy->v[c->entropy];
}

/* The figures of channel C on a set's counts and, when ref is not NULL,
 * those of planar Laplace on the grid at the same mean distortion. */
static int figures(const double *counts, const double *cost,
                   const fit_setup *fs, const double *C, ts_mi_figures *out,
                   ts_mi_figures *ref, char *err, size_t errlen)
{
    double *joint = normalised_copy(counts, fs->users * fs->grid->cells);
    if (joint == NULL)
        return snprintf(err, errlen, "out of memory"), -1;
    int rc = ts_mi_figures_of(joint, fs->grid->cells, fs->users,
                              fs->grid->centres, cost, C, out, err, errlen);
    if (rc == 0 && ref != NULL)
        rc = ts_mi_laplace_reference(joint, fs->grid->cells, fs->users,
                                     fs->grid->centres, cost,
                                     out->distortion_m, ref, NULL, err,
                                     errlen);
    free(joint);
    return rc;
}

int cmd_optimize(int argc, char **argv)
{
    double region[4] = {NAN, NAN, NAN, NAN};
    double cell_m = NAN, distortion_m = NAN, geoind_epsilon = 0.0;
    double gap_bits = DEFAULT_GAP_BITS, split = DEFAULT_VALIDATE_SPLIT;
    uint64_t max_iterations = DEFAULT_MAX_ITERATIONS;
    const char *output = NULL;
    int distortion_on = 0;
    number_list smooth = { .n = 0 }, backoff = { .v = { 0.05 }, .n = 1 };
    number_list entropy = { .v = { 0.0, 0.3 }, .n = 2 };
    static const char *const on_choices[] = { "points", "centres", NULL };
    static const char *const solver_choices[] = { "auto", "lp", "first-order",
                                                  NULL };
    int geoind_solver = 0;
    unsigned families = FAMILY_BIT(TS_MI_OPTIMAL) |
                        FAMILY_BIT(TS_MI_REMAPPED_LAPLACE);
    int families_given = 0;
    const ts_tool_option options[] = {
        {"region", 0, TS_ARG_HANDLER, .dest = region, .handle = take_region},
        {"cell-m", 0, TS_ARG_POSITIVE, .dest = &cell_m},
        {"distortion-m", 0, TS_ARG_POSITIVE, .dest = &distortion_m},
        {"distortion-on", 0, TS_ARG_CHOICE, .dest = &distortion_on,
         .choices = on_choices},
        {"smooth-m", 0, TS_ARG_HANDLER, .dest = &smooth, .handle = take_list},
        {"backoff", 0, TS_ARG_HANDLER, .dest = &backoff, .handle = take_list},
        {"row-entropy", 0, TS_ARG_HANDLER, .dest = &entropy,
         .handle = take_list},
        {"channel", 0, TS_ARG_HANDLER, .dest = &families,
         .handle = take_families, .given = &families_given},
        {"validate-split", 0, TS_ARG_NON_NEGATIVE, .dest = &split},
        {"geoind-epsilon", 0, TS_ARG_NON_NEGATIVE, .dest = &geoind_epsilon},
        {"geoind-solver", 0, TS_ARG_CHOICE, .dest = &geoind_solver,
         .choices = solver_choices},
        {"gap-bits", 0, TS_ARG_POSITIVE, .dest = &gap_bits},
        {"max-iterations", 0, TS_ARG_U64, .dest = &max_iterations, .min = 1,
         .max = UINT32_MAX},
        {"output", 'o', TS_ARG_STRING, .dest = &output},
        {0},
    };
    const ts_tool_command command = {"optimize", 0, options, 1,
                                     "one training file", usage};
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    if (!isfinite(region[0]) || !isfinite(cell_m) || !isfinite(distortion_m) ||
        output == NULL) {
        fprintf(stderr, TS_TOOL_NAME " optimize: --region, --cell-m, "
                "--distortion-m and -o are required\n");
        usage(stderr);
        return 1;
    }
    if (!(split < 1.0)) {
        fprintf(stderr, TS_TOOL_NAME " optimize: --validate-split must be "
                "below 1\n");
        return 1;
    }
    for (size_t i = 0; i < backoff.n; i++)
        if (backoff.v[i] > 1.0) {
            fprintf(stderr, TS_TOOL_NAME " optimize: --backoff must be in "
                    "[0, 1]\n");
            return 1;
        }
    if (geoind_epsilon > 0.0) {
        /* The geo-ind solver takes no row entropy, and a remapped Laplace
         * is not checked for geo-ind. */
        if (families_given &&
            (families & FAMILY_BIT(TS_MI_REMAPPED_LAPLACE))) {
            fprintf(stderr, TS_TOOL_NAME " optimize: --channel "
                    "remapped-laplace does not take --geoind-epsilon\n");
            return 1;
        }
        families = FAMILY_BIT(TS_MI_OPTIMAL);
        entropy.v[0] = 0.0;
        entropy.n = 1;
    }
    if (smooth.n == 0) {
        smooth.v[0] = 0.0;
        smooth.v[1] = cell_m;
        smooth.v[2] = 2.0 * cell_m;
        smooth.n = 3;
    }

    char err[ERR_MAX];
    ts_cell_grid grid;
    if (ts_cell_grid_init(&grid, region, cell_m, 0, 0, TS_CHANNEL_MAX_CELLS,
                          err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
        return 1;
    }
    int status = 1;
    size_t n = grid.cells;
    point *pts = NULL;
    size_t np = 0, cap = 0, users = 0;
    double *channel = NULL, *counts = NULL, *cost = NULL,
           *held_counts = NULL, *held_cost = NULL, *joint = NULL;
    size_t *per_cell = NULL;
    ts_name_index *names = ts_name_index_new();
    ts_csv_reader *reader = NULL;
    if (names == NULL) {
        fprintf(stderr, TS_TOOL_NAME " optimize: out of memory\n");
        goto out;
    }

    double started = ts_tool_now();
    reader = ts_csv_open_table(argv[first], err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
        goto out;
    }
    int col_user = ts_csv_column(reader, "user|user_id|uid");
    int col_lat = ts_csv_column(reader, "lat|latitude");
    int col_lon = ts_csv_column(reader, "lon|lng|longitude");
    int col_ts = ts_csv_column(reader, "ts|timestamp|time");
    if (col_user < 0 || col_lat < 0 || col_lon < 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s: the header must name "
                "user, lat and lon\n", argv[first]);
        goto out;
    }
    uint64_t rows = 0, outside = 0, invalid = 0, bad_rows = 0;
    for (;;) {
        size_t line;
        int r = ts_csv_next(reader, &line, err, sizeof err);
        if (r == TS_CSV_EOF)
            break;
        if (r == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
            goto out;
        }
        rows++;
        if (r == TS_CSV_BAD_ROW) {
            if (bad_rows++ < MAX_REPORTED_BAD_ROWS)
                fprintf(stderr, TS_TOOL_NAME " optimize: line %zu: skipped: "
                        "%s\n", line, err);
            continue;
        }
        const char *user = ts_csv_field(reader, col_user);
        double lat, lon, ts = NAN;
        if (user == NULL || user[0] == '\0' ||
            ts_csv_parse_number(ts_csv_field(reader, col_lat), &lat) != 1 ||
            ts_csv_parse_number(ts_csv_field(reader, col_lon), &lon) != 1 ||
            !ts_geo_valid(lat, lon) ||
            (col_ts >= 0 &&
             ts_csv_parse_number(ts_csv_field(reader, col_ts), &ts) != 1)) {
            invalid++;
            continue;
        }
        uint32_t cell, u;
        if (ts_cell_grid_locate(&grid, lat, lon, 0, &cell) != 0) {
            outside++;
            continue;
        }
        if (ts_name_index_intern(names, user, &u) != 0) {
            fprintf(stderr, TS_TOOL_NAME " optimize: out of memory\n");
            goto out;
        }
        if (np == cap) {
            cap = cap ? 2 * cap : 1024;
            point *p = realloc(pts, cap * sizeof *p);
            if (p == NULL) {
                fprintf(stderr, TS_TOOL_NAME " optimize: out of memory\n");
                goto out;
            }
            pts = p;
        }
        pts[np] = (point){ u, cell, ts_grid_project(&grid.projection, lat,
                                                    lon), ts, np, 0 };
        np++;
        if (u + 1 > users)
            users = u + 1;
    }
    if (bad_rows > MAX_REPORTED_BAD_ROWS)
        fprintf(stderr, TS_TOOL_NAME " optimize: ... %" PRIu64
                " unparsable rows skipped in all\n", bad_rows);
    if (np == 0 || users < 2) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %zu rows of %zu users "
                "inside the region: an identity channel needs rows of at "
                "least 2 users\n", np, users);
        goto out;
    }
    double read_s = ts_tool_now() - started;

    channel = malloc(n * n * sizeof *channel);
    counts = malloc(users * n * sizeof *counts);
    held_counts = malloc(users * n * sizeof *held_counts);
    joint = malloc(users * n * sizeof *joint);
    cost = malloc(n * n * sizeof *cost);
    held_cost = malloc(n * n * sizeof *held_cost);
    per_cell = malloc(n * sizeof *per_cell);
    if (!channel || !counts || !held_counts || !joint || !cost ||
        !held_cost || !per_cell) {
        fprintf(stderr, TS_TOOL_NAME " optimize: out of memory for a "
                "%zu-cell channel\n", n);
        goto out;
    }
    fit_setup fs = {
        .grid = &grid,
        .users = users,
        .distortion_m = distortion_m,
        .geoind_epsilon = geoind_epsilon,
        .on_points = distortion_on == 0,
        .max_iterations = (unsigned)max_iterations,
        .geoind_solver = (ts_mi_geoind_solver)geoind_solver,
    };
    fprintf(stderr,
            "optimize: rows=%" PRIu64 " used=%zu outside=%" PRIu64
            " invalid=%" PRIu64 " unparsable=%" PRIu64 " users=%zu\n",
            rows, np, outside, invalid, bad_rows, users);
    fprintf(stderr,
            "optimize: cells=%zu (%u x %u, %.0f m) L=%.1fm distortion_on=%s "
            "geoind_epsilon=%g guarantee=%s\n",
            n, grid.cols, grid.rows, cell_m, distortion_m,
            on_choices[distortion_on], geoind_epsilon,
            geoind_epsilon > 0.0 ? "geo-indistinguishability"
                                 : "information-theoretic (not DP)");
    if (geoind_epsilon > 0.0)
        fprintf(stderr, "optimize: guarantee: %g-geo-indistinguishability "
                "(per metre) between cell centres, plus the additive "
                "eps_floor = %g x cell diagonal = %.4g nats for continuous "
                "locations\n", geoind_epsilon, geoind_epsilon,
                ts_cell_grid_floor(&grid, geoind_epsilon));
    else
        fprintf(stderr, "optimize: guarantee: information-theoretic (not "
                "differential privacy): I(U;Z) about the training users\n");

    /* Each smoothing with each row entropy (mi), and each smoothing
     * remapped (row entropy unused: 0). */
    candidate cands[MAX_CANDIDATES * MAX_CANDIDATES * (MAX_CANDIDATES + 1)];
    size_t candidates = 0;
    for (size_t si = 0; si < smooth.n; si++)
        for (size_t bi = 0; bi < backoff.n; bi++) {
            if (families & FAMILY_BIT(TS_MI_OPTIMAL))
                for (size_t ti = 0; ti < entropy.n; ti++)
                    cands[candidates++] = (candidate){ si, bi, ti,
                                                       TS_MI_OPTIMAL };
            if (families & FAMILY_BIT(TS_MI_REMAPPED_LAPLACE))
                cands[candidates++] = (candidate){ si, bi, SIZE_MAX,
                                                   TS_MI_REMAPPED_LAPLACE };
        }
    candidate chosen = cands[0];
    ts_mi_result result;
    size_t guarded = 0;
    double optimize_s = 0.0;
    if (split > 0.0) {
        split_points(pts, np, split);
        size_t n_fit = counts_of(pts, np, 0, users, &grid, counts, cost,
                                 per_cell);
        size_t n_held = counts_of(pts, np, 1, users, &grid, held_counts,
                                  held_cost, per_cell);
        fprintf(stderr, "optimize: validation: %zu rows fitted, the last "
                "%zu held out (%.0f %% of each user's, by %s)\n", n_fit,
                n_held, 100.0 * split, col_ts >= 0 ? "ts" : "file order");
        fprintf(stderr, "optimize: smooth_m,backoff,row_entropy,in_mi_bits,"
                "in_bayes_error,in_distortion_m,held_mi_bits,"
                "held_bayes_error,held_distortion_m,guarded_rows,gap_bits,"
                "seconds,channel,held_laplace_bayes_error\n");
        /* Candidates are compared by how far their held-out Bayes error
         * is above planar Laplace's at their own held-out distortion:
         * comparing raw errors would favour whichever strays furthest
         * past L on the held-out rows. */
        double best_edge = -INFINITY, best_mi = INFINITY;
        for (size_t c = 0; c < candidates && n_held > 0; c++) {
            const candidate *cd = &cands[c];
            double t0 = ts_tool_now();
            if (fit(&fs, counts, cost, smooth.v[cd->smooth],
                    backoff.v[cd->backoff], tau_of(cd, &entropy), cd->family,
                    gap_bits * (candidates > 1 ? SCREEN_GAP_FACTOR : 1.0),
                    channel, joint, &result, &guarded, err,
                    sizeof err) != 0) {
                fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
                goto out;
            }
            ts_mi_figures in, held, ref;
            if (figures(counts, cost, &fs, channel, &in, NULL, err,
                        sizeof err) != 0 ||
                figures(held_counts, held_cost, &fs, channel, &held, &ref,
                        err, sizeof err) != 0) {
                fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
                goto out;
            }
            fprintf(stderr, "optimize: %g,%g,%g,%.6f,%.4f,%.1f,%.6f,%.4f,"
                    "%.1f,%zu,%.3g,%.1f,%s,%.4f\n", smooth.v[cd->smooth],
                    backoff.v[cd->backoff], tau_of(cd, &entropy),
                    in.mi_bits, in.bayes_error, in.distortion_m,
                    held.mi_bits, held.bayes_error, held.distortion_m,
                    guarded, result.gap_bits, ts_tool_now() - t0,
                    family_names[cd->family], ref.bayes_error);
            double edge = held.bayes_error - ref.bayes_error;
            if (edge > best_edge + 1e-12 ||
                (fabs(edge - best_edge) <= 1e-12 && held.mi_bits < best_mi)) {
                best_edge = edge;
                best_mi = held.mi_bits;
                chosen = *cd;
            }
        }
    }
    /* The chosen smoothing, fitted on every row. */
    counts_of(pts, np, -1, users, &grid, counts, cost, per_cell);
    started = ts_tool_now();
    if (fit(&fs, counts, cost, smooth.v[chosen.smooth],
            backoff.v[chosen.backoff], tau_of(&chosen, &entropy),
            chosen.family, gap_bits, channel, joint, &result, &guarded, err,
            sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
        goto out;
    }
    optimize_s = ts_tool_now() - started;
    ts_mi_figures in;
    if (figures(counts, cost, &fs, channel, &in, NULL, err,
                sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
        goto out;
    }

    ts_channel_meta meta = {
        .cell_m = cell_m,
        .rows = grid.rows,
        .cols = grid.cols,
        .cell_w_m = grid.cell_w,
        .cell_h_m = grid.cell_h,
        .distortion_m = distortion_m,
        .geoind_epsilon = geoind_epsilon,
        .mi_bits = result.mi_bits,
        .expected_distortion_m = result.distortion_m,
        .gap_bits = result.gap_bits,
        .iterations = result.iterations,
        .users = (uint32_t)users,
        .converged = result.converged,
    };
    memcpy(meta.region, region, sizeof meta.region);
    uint64_t bytes = 0;
    if (ts_channel_write_file(output, &meta, channel, &bytes, err,
                              sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
        goto out;
    }
    fprintf(stderr,
            "optimize: chosen smooth_m=%g backoff=%g row_entropy=%g "
            "channel=%s guarded_rows=%zu "
            "in_sample_mi_bits=%.6f in_sample_bayes_error=%.4f "
            "in_sample_distortion_m=%.1f\n",
            smooth.v[chosen.smooth], backoff.v[chosen.backoff],
            tau_of(&chosen, &entropy), family_names[chosen.family], guarded, in.mi_bits,
            in.bayes_error, in.distortion_m);
    fprintf(stderr,
            "optimize: mi_bits=%.6f mean_distortion_m=%.1f gap_bits=%.3g "
            "iterations=%u converged=%s bytes=%" PRIu64 " read=%.3fs "
            "time=%.3fs\n",
            result.mi_bits, result.distortion_m, result.gap_bits,
            result.iterations, result.converged ? "yes" : "no", bytes,
            read_s, optimize_s);
    if (geoind_epsilon > 0.0) {
        /* The certificate, and the loader's own exact check of every
         * (x, x', z) on the file just written: what tracesand will do. */
        fprintf(stderr, "optimize: geoind_solver=%s edge_epsilon=%.6g "
                "stretch=%.6f lower_bound_bits=%.6f gap_bits=%.3g "
                "(mi_bits - optimum <= gap_bits)\n",
                result.solver_first_order ? "first-order" : "lp",
                result.edge_epsilon, result.stretch,
                result.mi_bits - result.gap_bits, result.gap_bits);
        ts_channel_file *check = NULL;
        double t0 = ts_tool_now();
        if (ts_channel_open(output, &check, err, sizeof err) != 0) {
            fprintf(stderr, "optimize: loader_check=failed: %s\n", err);
            goto out;
        }
        ts_channel_close(check);
        fprintf(stderr, "optimize: loader_check=passed (%.3fs)\n",
                ts_tool_now() - t0);
    }
    if (chosen.family == TS_MI_REMAPPED_LAPLACE)
        fprintf(stderr, "optimize: remapped-laplace laplace_epsilon_per_m=%.6g "
                "(planar Laplace on the grid, each report remapped; the gap "
                "is how far its I(U;Z) is above the MI optimum)\n",
                result.laplace_epsilon_per_m);
    if (!result.converged)
        fprintf(stderr, TS_TOOL_NAME " optimize: the duality gap %.3g bits "
                "is above --gap-bits %.3g after %u iterations: the channel "
                "is at most that far from optimal\n",
                result.gap_bits, gap_bits, result.iterations);
    status = 0;
out:
    if (reader != NULL)
        ts_csv_close(reader);
    free(pts);
    free(channel);
    free(counts);
    free(held_counts);
    free(joint);
    free(cost);
    free(held_cost);
    free(per_cell);
    ts_name_index_free(names);
    ts_cell_grid_free(&grid);
    return status;
}
