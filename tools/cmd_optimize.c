/* tracesan optimize: the identity-protecting channel of a training trace.
 *
 * Reads user,lat,lon rows (tools/csv.h; other columns ignored), counts the
 * empirical joint P(U = user, X = cell) on a grid of square cells, solves
 * for the channel P(Z | X) of least I(U; Z) under E[d(X, Z)] <= L
 * (inference/mi_optimal.h) and writes it as a channel file
 * (inference/channel_file.h) for the mi-channel mechanism. Messages never
 * show coordinates: a skipped row is named by its line number only.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "inference/channel_file.h"
#include "inference/mi_optimal.h"
#include "mechanisms/cell_grid.h"
#include "mechanisms/mechanism.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/name_index.h"

#define ERR_MAX 512
#define DEFAULT_GAP_BITS 1e-4
#define DEFAULT_MAX_ITERATIONS 20000
#define MAX_REPORTED_BAD_ROWS 10

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " optimize --region LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "                         --cell-m METRES --distortion-m L\n"
        "                         [--geoind-epsilon E] [--gap-bits T]\n"
        "                         [--max-iterations N] -o CHANNEL.bin TRAIN.csv\n"
        "\n"
        "Computes the channel P(report cell | true cell) that minimises the\n"
        "mutual information I(U;Z) between a user's identity and the report,\n"
        "subject to a mean distortion of at most L metres, on a grid of\n"
        "square cells, from the users' check-ins in TRAIN.csv (header naming\n"
        "user,lat,lon; gzip read transparently; '-' reads stdin). Rows\n"
        "outside the region are skipped. See docs/mi_channel.md.\n"
        "\n"
        "options:\n"
        "      --region LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "                          the grid's box, degrees\n"
        "      --cell-m METRES     side of a cell\n"
        "      --distortion-m L    bound on E[d(true cell, report cell)], m\n"
        "      --geoind-epsilon E  also make the channel E-geo-\n"
        "                          indistinguishable (per metre) between cell\n"
        "                          centres; without it the channel's guarantee\n"
        "                          is information-theoretic, not differential\n"
        "                          privacy (default 0: none)\n"
        "      --gap-bits T        stop once the duality gap is below T bits\n"
        "                          (default 1e-4)\n"
        "      --max-iterations N  cap on the optimizer's iterations\n"
        "                          (default 20000)\n"
        "  -o, --output FILE       the channel file (written atomically)\n"
        "  -h, --help              show this help\n"
        "\n"
        "stderr: rows used, I(U;Z), E[d], the gap, iterations and time.\n"
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

/* Counts per (user, cell), grown a user at a time. */
typedef struct counts {
    double *v;            /* users x cells */
    size_t users, cap, cells;
} counts;

static int counts_add(counts *c, uint32_t user, uint32_t cell)
{
    if (user >= c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        while (cap <= user)
            cap *= 2;
        double *v = realloc(c->v, cap * c->cells * sizeof *v);
        if (v == NULL)
            return -1;
        memset(v + c->cap * c->cells, 0,
               (cap - c->cap) * c->cells * sizeof *v);
        c->v = v;
        c->cap = cap;
    }
    if (user >= c->users)
        c->users = user + 1;
    c->v[(size_t)user * c->cells + cell] += 1.0;
    return 0;
}

int cmd_optimize(int argc, char **argv)
{
    double region[4] = {NAN, NAN, NAN, NAN};
    double cell_m = NAN, distortion_m = NAN, geoind_epsilon = 0.0;
    double gap_bits = DEFAULT_GAP_BITS;
    uint64_t max_iterations = DEFAULT_MAX_ITERATIONS;
    const char *output = NULL;
    const ts_tool_option options[] = {
        {"region", 0, TS_ARG_HANDLER, .dest = region, .handle = take_region},
        {"cell-m", 0, TS_ARG_POSITIVE, .dest = &cell_m},
        {"distortion-m", 0, TS_ARG_POSITIVE, .dest = &distortion_m},
        {"geoind-epsilon", 0, TS_ARG_NON_NEGATIVE, .dest = &geoind_epsilon},
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

    char err[ERR_MAX];
    ts_cell_grid grid;
    if (ts_cell_grid_init(&grid, region, cell_m, 0, 0, TS_CHANNEL_MAX_CELLS,
                          err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
        return 1;
    }
    int status = 1;
    size_t n = grid.cells;
    counts c = {.cells = n};
    double *channel = NULL;
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
    if (col_user < 0 || col_lat < 0 || col_lon < 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s: the header must name "
                "user, lat and lon\n", argv[first]);
        goto out;
    }
    uint64_t rows = 0, used = 0, outside = 0, invalid = 0, bad_rows = 0;
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
        double lat, lon;
        if (user == NULL || user[0] == '\0' ||
            ts_csv_parse_number(ts_csv_field(reader, col_lat), &lat) != 1 ||
            ts_csv_parse_number(ts_csv_field(reader, col_lon), &lon) != 1 ||
            !ts_geo_valid(lat, lon)) {
            invalid++;
            continue;
        }
        uint32_t cell, u;
        if (ts_cell_grid_locate(&grid, lat, lon, 0, &cell) != 0) {
            outside++;
            continue;
        }
        if (ts_name_index_intern(names, user, &u) != 0 ||
            counts_add(&c, u, cell) != 0) {
            fprintf(stderr, TS_TOOL_NAME " optimize: out of memory\n");
            goto out;
        }
        used++;
    }
    if (bad_rows > MAX_REPORTED_BAD_ROWS)
        fprintf(stderr, TS_TOOL_NAME " optimize: ... %" PRIu64
                " unparsable rows skipped in all\n", bad_rows);
    if (used == 0 || c.users < 2) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %" PRIu64 " rows of %zu "
                "users inside the region: an identity channel needs rows of "
                "at least 2 users\n", used, c.users);
        goto out;
    }
    /* Users that only had rows outside the region were never numbered, so
     * every user of the joint has mass. */
    for (size_t i = 0; i < c.users * n; i++)
        c.v[i] /= (double)used;
    double read_s = ts_tool_now() - started;

    channel = malloc(n * n * sizeof *channel);
    if (channel == NULL) {
        fprintf(stderr, TS_TOOL_NAME " optimize: out of memory for a "
                "%zu-cell channel\n", n);
        goto out;
    }
    ts_mi_problem problem = {
        .cells = n,
        .centres = grid.centres,
        .users = c.users,
        .joint = c.v,
        .distortion_m = distortion_m,
        .geoind_epsilon = geoind_epsilon,
    };
    ts_mi_params params = {
        .gap_tolerance_bits = gap_bits,
        .max_iterations = (unsigned)max_iterations,
    };
    ts_mi_result result;
    started = ts_tool_now();
    if (ts_mi_optimize(&problem, &params, channel, &result, err,
                       sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " optimize: %s\n", err);
        goto out;
    }
    double optimize_s = ts_tool_now() - started;

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
        .users = (uint32_t)c.users,
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
            "optimize: rows=%" PRIu64 " used=%" PRIu64 " outside=%" PRIu64
            " invalid=%" PRIu64 " unparsable=%" PRIu64 " users=%zu\n",
            rows, used, outside, invalid, bad_rows, c.users);
    fprintf(stderr,
            "optimize: cells=%zu (%u x %u, %.0f m) L=%.1fm geoind_epsilon=%g"
            " guarantee=%s\n",
            n, grid.cols, grid.rows, cell_m, distortion_m, geoind_epsilon,
            geoind_epsilon > 0.0 ? "geo-indistinguishability"
                                 : "information-theoretic (not DP)");
    fprintf(stderr,
            "optimize: mi_bits=%.6f mean_distortion_m=%.1f gap_bits=%.3g "
            "iterations=%u converged=%s bytes=%" PRIu64 " read=%.3fs "
            "time=%.3fs\n",
            result.mi_bits, result.distortion_m, result.gap_bits,
            result.iterations, result.converged ? "yes" : "no", bytes,
            read_s, optimize_s);
    if (!result.converged)
        fprintf(stderr, TS_TOOL_NAME " optimize: the duality gap %.3g bits "
                "is above --gap-bits %.3g after %u iterations: the channel "
                "is at most that far from optimal\n",
                result.gap_bits, gap_bits, result.iterations);
    status = 0;
out:
    if (reader != NULL)
        ts_csv_close(reader);
    free(channel);
    free(c.v);
    ts_name_index_free(names);
    ts_cell_grid_free(&grid);
    return status;
}
