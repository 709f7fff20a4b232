/* Test helper: writes a channel file (inference/channel_file.h) of
 * ROWS x COLS cells without an optimizer run, for tests and benchmarks that
 * need a large one (the documented maximum is 4 096 cells, 128 MB).
 *
 *   laplace: P(z | x) proportional to exp(-eps d(x, z)) between cell
 *            centres, each row normalized; it is 2 eps geo-indistinguishable
 *            (the exponent moves by at most eps d(x, x') and so does the
 *            log of the normalizer), which the file claims.
 *   uniform: every row 1 / n, claiming eps (it measures 0).
 *
 * The file goes through ts_channel_write_file and its checks, without the
 * claim; the claim is then put into the header (offset 104) and the
 * header's checksum (offset 188) renewed, so that writing a 4 096-cell
 * file does not run the O(n^3) geo-ind check the loader will run on it.
 *
 * usage: make_channel --rows R --cols C [--kind laplace|uniform]
 *                     [--epsilon EPS_PER_M] --output PATH
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/binary_file.h"
#include "inference/channel_file.h"
#include "inference/grid.h"

/* A box in Paris; cells split it evenly (cell_m 0: rows x cols). */
static const double region[4] = { 48.80, 2.25, 48.90, 2.40 };

static int parse_positive(const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v > 0.0) ||
        !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* The geo-ind claim into a written file's header. */
static int claim(const char *path, double epsilon)
{
    enum { GEOIND_AT = 104, HEADER_CRC_AT = TS_CHANNEL_HEADER_BYTES - 4 };
    unsigned char header[TS_CHANNEL_HEADER_BYTES];
    FILE *f = fopen(path, "r+b");
    int ok = f != NULL && fread(header, sizeof header, 1, f) == 1;
    if (ok) {
        ts_bin_put_f64(header + GEOIND_AT, epsilon);
        ts_bin_put_u32(header + HEADER_CRC_AT,
                       ts_bin_crc(header, HEADER_CRC_AT));
        ok = fseek(f, 0, SEEK_SET) == 0 &&
             fwrite(header, sizeof header, 1, f) == 1;
    }
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "make_channel: %s: %s\n", path, strerror(errno));
    return ok ? 0 : 1;
}

static void usage(FILE *out)
{
    fputs("usage: make_channel --rows R --cols C [--kind laplace|uniform]\n"
          "                    [--epsilon EPS_PER_M] --output PATH\n", out);
}

int main(int argc, char **argv)
{
    double rows = 0, cols = 0, eps = 1e-3;
    const char *kind = "laplace", *path = NULL;
    static const struct option options[] = {
        { "rows", required_argument, NULL, 'r' },
        { "cols", required_argument, NULL, 'c' },
        { "kind", required_argument, NULL, 'k' },
        { "epsilon", required_argument, NULL, 'e' },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'r': bad = parse_positive(optarg, &rows); break;
        case 'c': bad = parse_positive(optarg, &cols); break;
        case 'e': bad = parse_positive(optarg, &eps); break;
        case 'k': kind = optarg; break;
        case 'o': path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: bad = 1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
    }
    int laplace = strcmp(kind, "laplace") == 0;
    if (path == NULL || rows < 1 || cols < 1 || rows * cols < 2 ||
        rows * cols > TS_CHANNEL_MAX_CELLS ||
        (!laplace && strcmp(kind, "uniform") != 0)) {
        usage(stderr);
        return 2;
    }
    char err[512];
    ts_grid grid;
    if (ts_grid_init(&grid, region[0], region[1], region[2], region[3],
                     1000.0, err, sizeof err) != 0) {
        fprintf(stderr, "make_channel: %s\n", err);
        return 1;
    }
    /* The cell sides as the loader derives them from the box. */
    ts_vec2 ne = ts_grid_project(&grid, region[2], region[3]);
    ts_channel_meta meta = {
        .region = { region[0], region[1], region[2], region[3] },
        .rows = (uint32_t)rows,
        .cols = (uint32_t)cols,
        .cell_w_m = (ne.x - grid.x_min) / cols,
        .cell_h_m = (ne.y - grid.y_min) / rows,
        .distortion_m = 1000.0,
        .geoind_epsilon = 0.0,   /* claimed below */
        .users = 1,
        .converged = 1,
    };
    size_t n = (size_t)meta.rows * meta.cols;
    double *channel = malloc(n * n * sizeof *channel);
    if (channel == NULL) {
        fprintf(stderr, "make_channel: out of memory\n");
        return 1;
    }
    for (size_t x = 0; x < n; x++) {
        double *row = channel + x * n;
        double sum = 0.0;
        for (size_t z = 0; z < n; z++) {
            double dx = ((double)(x % meta.cols) - (double)(z % meta.cols)) *
                        meta.cell_w_m;
            double dy = ((double)(x / meta.cols) - (double)(z / meta.cols)) *
                        meta.cell_h_m;
            row[z] = laplace ? exp(-eps * sqrt(dx * dx + dy * dy)) : 1.0;
            sum += row[z];
        }
        for (size_t z = 0; z < n; z++)
            row[z] /= sum;
    }
    int rc = ts_channel_write_file(path, &meta, channel, NULL, err,
                                   sizeof err);
    free(channel);
    if (rc != 0) {
        fprintf(stderr, "make_channel: %s\n", err);
        return 1;
    }
    return claim(path, laplace ? 2.0 * eps : eps);
}
