/* Channel files (inference/channel_file.c) and the mi-channel mechanism
 * (mechanisms/mi_channel.c), through their public interfaces.
 *
 * Statistical checks use a fixed seed and a binomial tolerance stated
 * where it is used, each paired with a check that the same test rejects a
 * wrong answer. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inference/binary_file.h"
#include "inference/channel_file.h"
#include "mechanisms/cell_grid.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/mi_channel.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/memory_file.h"
#include "tests/support/fake_params.h"

/* ------------------------------------------------------------- helpers */

/* Central Paris, 4 x 3 cells of about 2.75 km x 3.7 km. */
#define PARIS "48.80,2.25,48.90,2.40"
static const double paris_box[4] = { 48.80, 2.25, 48.90, 2.40 };
#define COLS 4u
#define ROWS 3u
#define N (COLS * ROWS)

static ts_cell_grid paris_grid(void)
{
    ts_cell_grid g;
    char err[256];
    ck_assert_msg(ts_cell_grid_init(&g, paris_box, 0.0, ROWS, COLS, 4096,
                                    err, sizeof err) == 0, "%s", err);
    return g;
}

static ts_channel_meta paris_meta(double geoind_epsilon)
{
    ts_cell_grid g = paris_grid();
    ts_channel_meta m = {
        .cell_m = 0.0, .rows = ROWS, .cols = COLS,
        .cell_w_m = g.cell_w, .cell_h_m = g.cell_h,
        .distortion_m = 1500.0, .geoind_epsilon = geoind_epsilon,
        .mi_bits = 0.25, .expected_distortion_m = 1499.5, .gap_bits = 1e-5,
        .iterations = 42, .users = 3, .converged = 1,
    };
    memcpy(m.region, paris_box, sizeof m.region);
    ts_cell_grid_free(&g);
    return m;
}

/* C(x, z) proportional to exp(-beta d(x, z)): each row's numerators differ
 * from another's by at most exp(beta d(x, x')) and so do the normalisers,
 * so the channel is 2 beta-geo-indistinguishable between centres. */
static void exponential_channel(double beta, double *c)
{
    ts_cell_grid g = paris_grid();
    for (size_t x = 0; x < N; x++) {
        double sum = 0.0;
        for (size_t z = 0; z < N; z++) {
            double dx = g.centres[x].x - g.centres[z].x;
            double dy = g.centres[x].y - g.centres[z].y;
            c[x * N + z] = exp(-beta * sqrt(dx * dx + dy * dy));
            sum += c[x * N + z];
        }
        for (size_t z = 0; z < N; z++)
            c[x * N + z] /= sum;
    }
    ts_cell_grid_free(&g);
}

/* Rows with zeros and unequal weights: a channel a geo-ind claim would not
 * survive, fine without one. */
static void lumpy_channel(double *c)
{
    for (size_t x = 0; x < N; x++) {
        double sum = 0.0;
        for (size_t z = 0; z < N; z++) {
            c[x * N + z] = (x + z) % 3 == 0 ? 0.0 : (double)(1 + (x * z) % 5);
            sum += c[x * N + z];
        }
        for (size_t z = 0; z < N; z++)
            c[x * N + z] /= sum;
    }
}

static char *temp_path(void)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/check_mi_channel.XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    return path;
}

typedef struct channel_source {
    const ts_channel_meta *meta;
    const double *c;
} channel_source;

static int write_channel(FILE *out, const void *ctx, uint64_t *bytes,
                         char *err, size_t errlen)
{
    const channel_source *source = ctx;
    return ts_channel_write(out, source->meta, source->c, bytes, err, errlen);
}

/* A file in memory, 8-byte aligned, as the writer produces it. */
static unsigned char *file_bytes(const ts_channel_meta *m, const double *c,
                                 size_t *len)
{
    channel_source source = { m, c };
    return ts_test_memory_file(write_channel, &source, len);
}

/* Recomputes both checksums, so that a test reaches the checks behind
 * them. */
static void reseal(unsigned char *buf, size_t len)
{
    uint32_t hb = TS_CHANNEL_HEADER_BYTES;
    ts_bin_put_u32(buf + hb - 8, ts_bin_crc(buf + hb, len - hb));
    ts_bin_put_u32(buf + hb - 4, ts_bin_crc(buf, hb - 4));
}

static int loads(const unsigned char *buf, size_t len, char *err,
                 size_t errlen)
{
    ts_channel_file *f = NULL;
    int rc = ts_channel_open_buffer(buf, len, &f, err, errlen);
    ts_channel_close(f);
    return rc;
}

static void expect_refused(const unsigned char *buf, size_t len,
                           const char *needle)
{
    char err[512] = "";
    ck_assert_int_eq(loads(buf, len, err, sizeof err), -1);
    ck_assert_msg(strstr(err, needle) != NULL, "'%s' lacks '%s'", err,
                  needle);
}

/* get_channel as the daemon implements it: an empty path disables the
 * profile (remembered here), anything else is opened for profile_new and
 * closed once it returns, so the profile must not keep the file. */
static int channel_asked_empty;
static ts_channel_file *channel_opened;
static const void *open_channel_param(void *ctx, const char *key, char *err,
                                      size_t errlen)
{
    const char *path = NULL;
    int found = table_get_string(ctx, key, &path);
    if (found <= 0) {
        snprintf(err, errlen, found < 0 ? "%s must be a string" :
                 "%s is required", key);
        return NULL;
    }
    if (path[0] == '\0') {
        channel_asked_empty = 1;
        snprintf(err, errlen, "%s is empty", key);
        return NULL;
    }
    char why[512];
    if (ts_channel_open(path, &channel_opened, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", key, why);
        return NULL;
    }
    return channel_opened;
}

static int profile_try(param_table *t, void **profile, char *err,
                       size_t errlen)
{
    ts_params params = table_params(t);
    params.get_channel = open_channel_param;
    *profile = NULL;
    channel_opened = NULL;
    int rc = ts_mi_channel_ops.profile_new(&params, profile, err, errlen);
    ts_channel_close(channel_opened);
    channel_opened = NULL;
    return rc;
}

static void *profile_from(param_table *t)
{
    void *profile;
    char err[512];
    ck_assert_msg(profile_try(t, &profile, err, sizeof err) == 0, "%s", err);
    return profile;
}

/* A profile over a written channel file; the file is removed at once
 * (the mapping keeps it). */
static void *profile_for(const ts_channel_meta *m, const double *c,
                         long long points_per_window, const char *outside)
{
    char *path = temp_path();
    char err[256];
    ck_assert_msg(ts_channel_write_file(path, m, c, NULL, err, sizeof err) ==
                      0, "%s", err);
    param_table t = { .n = 0 };
    param_string(&t, "channel", path);
    param_int(&t, "points_per_window", points_per_window);
    if (outside != NULL)
        param_string(&t, "on_outside", outside);
    void *profile = profile_from(&t);
    unlink(path);
    return profile;
}

static ts_release_status release_at(void *profile, void *state, double lat,
                                    double lon, ts_budget_view budget,
                                    ts_rng *rng, ts_report *out)
{
    ts_point truth = { .lat = lat, .lon = lon, .ts_ms = 1000,
                       .accuracy_m = NAN };
    memset(out, 0, sizeof *out);
    return ts_mi_channel_ops.release(profile, state, &truth, &budget, rng,
                                     out);
}

static void centre_of(uint32_t cell, double *lat, double *lon)
{
    ts_cell_grid g = paris_grid();
    ts_cell_grid_centre_latlon(&g, cell, lat, lon);
    ts_cell_grid_free(&g);
}

/* --------------------------------------------------------- channel files */

TS_TEST(file_round_trip)
{
    double c[N * N];
    exponential_channel(1e-3, c);
    ts_channel_meta m = paris_meta(2e-3);
    char *path = temp_path();
    char err[512];
    uint64_t bytes = 0;
    ck_assert_msg(ts_channel_write_file(path, &m, c, &bytes, err,
                                        sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(bytes, TS_CHANNEL_HEADER_BYTES + N * N * 8);
    ts_channel_file *f = NULL;
    ck_assert_msg(ts_channel_open(path, &f, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(f->n, N);
    ck_assert_uint_eq(f->file_bytes, bytes);
    ck_assert_int_eq(memcmp(f->channel, c, sizeof c), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(f->meta.region[i], m.region[i]);
    ck_assert_uint_eq(f->meta.rows, ROWS);
    ck_assert_uint_eq(f->meta.cols, COLS);
    ck_assert_double_eq(f->meta.cell_m, 0.0);
    ck_assert_double_eq(f->meta.cell_w_m, m.cell_w_m);
    ck_assert_double_eq(f->meta.cell_h_m, m.cell_h_m);
    ck_assert_double_eq(f->meta.distortion_m, 1500.0);
    ck_assert_double_eq(f->meta.geoind_epsilon, 2e-3);
    ck_assert_double_eq(f->meta.mi_bits, 0.25);
    ck_assert_double_eq(f->meta.expected_distortion_m, 1499.5);
    ck_assert_double_eq(f->meta.gap_bits, 1e-5);
    ck_assert_uint_eq(f->meta.iterations, 42);
    ck_assert_uint_eq(f->meta.users, 3);
    ck_assert_int_eq(f->meta.converged, 1);
    /* The exponential channel is 2 beta-geo-ind; the measure is exact, so
     * it lies between beta and 2 beta. */
    ck_assert_double_gt(f->geoind_measured, 1e-3);
    ck_assert_double_le(f->geoind_measured, 2e-3 * (1 + 1e-12));
    ts_channel_close(f);

    /* Square cells: the grid the box and cell_m give. */
    ts_cell_grid g;
    ck_assert_int_eq(ts_cell_grid_init(&g, paris_box, 5000.0, 0, 0, 4096,
                                       err, sizeof err), 0);
    ts_channel_meta sq = paris_meta(0.0);
    sq.cell_m = 5000.0;
    sq.rows = g.rows;
    sq.cols = g.cols;
    sq.cell_w_m = sq.cell_h_m = 5000.0;
    size_t n = g.cells;
    double *id = calloc(n * n, sizeof *id);
    for (size_t x = 0; x < n; x++)
        id[x * n + x] = 1.0;
    ck_assert_msg(ts_channel_write_file(path, &sq, id, NULL, err,
                                        sizeof err) == 0, "%s", err);
    ck_assert_msg(ts_channel_open(path, &f, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(f->n, n);
    ck_assert_double_eq(f->geoind_measured, 0.0);
    ts_channel_close(f);
    free(id);
    ts_cell_grid_free(&g);
    unlink(path);
}
END_TEST

/* The plain triple loop the loader's blocked measure must equal, bit for
 * bit: max over x < x', z of |ln C(x,z) - ln C(x',z)| / d(x, x'). */
static double plain_geoind(const double *c, const ts_channel_meta *m,
                           uint32_t n)
{
    double worst = 0.0;
    for (uint32_t x = 0; x < n; x++)
        for (uint32_t y = x + 1; y < n; y++) {
            double ax = (x % m->cols) * m->cell_w_m;
            double ay = (double)(x / m->cols) * m->cell_h_m;
            double dx = (y % m->cols) * m->cell_w_m - ax;
            double dy = (double)(y / m->cols) * m->cell_h_m - ay;
            double d = sqrt(dx * dx + dy * dy);
            double most = 0.0;
            for (uint32_t z = 0; z < n; z++) {
                double diff = fabs(log(c[(size_t)x * n + z]) -
                                   log(c[(size_t)y * n + z]));
                most = diff > most ? diff : most;
            }
            if (most / d > worst)
                worst = most / d;
        }
    return worst;
}

TS_TEST(file_geoind_measure_is_exact)
{
    /* Sizes around the measure's blocks of 8 rows and SIMD widths of 2
     * and 4: partial blocks, odd row lengths. */
    static const uint32_t shapes[][2] = { { 1, 2 }, { 3, 3 }, { 2, 4 },
                                          { 3, 5 }, { 5, 7 }, { 4, 8 },
                                          { 9, 9 }, { 6, 11 } };
    ts_rng *rng = ts_rng_new_seeded(25);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        uint32_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        ts_cell_grid g;
        char err[512];
        ck_assert_msg(ts_cell_grid_init(&g, paris_box, 0.0, rows, cols,
                                        4096, err, sizeof err) == 0,
                      "%s", err);
        ts_channel_meta m = paris_meta(0.5);
        m.rows = rows;
        m.cols = cols;
        m.cell_w_m = g.cell_w;
        m.cell_h_m = g.cell_h;
        ts_cell_grid_free(&g);
        /* Positive entries of random weight, and one column z* that
         * tells some rows apart far more than the rest: the worst pair is
         * at z*, first, middle and last of a row (a SIMD tail), between
         * rows of different parity or against the last row alone (a
         * partial block). */
        double *c = malloc((size_t)n * n * sizeof *c);
        for (int variant = 0; variant < 6; variant++) {
            uint32_t star = variant % 3 == 0 ? 0
                            : variant % 3 == 1 ? n / 2 : n - 1;
            for (uint32_t x = 0; x < n; x++) {
                double sum = 0.0;
                for (uint32_t z = 0; z < n; z++) {
                    int odd = variant < 3 ? x % 2 == 1 : x == n - 1;
                    double w = z != star ? 0.05 + ts_rng_uniform_open(rng)
                               : odd     ? 1e-6 : 40.0;
                    sum += c[(size_t)x * n + z] = w;
                }
                for (uint32_t z = 0; z < n; z++)
                    c[(size_t)x * n + z] /= sum;
            }
            size_t len;
            unsigned char *buf = file_bytes(&m, c, &len);
            ts_channel_file *f = NULL;
            ck_assert_msg(ts_channel_open_buffer(buf, len, &f, err,
                                                 sizeof err) == 0, "%s", err);
            double plain = plain_geoind(f->channel, &m, n);
            ck_assert_msg(plain > 0.0, "%u x %u: nothing measured", rows,
                          cols);
            ck_assert_msg(f->geoind_measured == plain,
                          "%u x %u cells, column %u: measured %.17g, the "
                          "plain loop %.17g", rows, cols, star,
                          f->geoind_measured, plain);
            ts_channel_close(f);
            free(buf);
        }
        free(c);
    }
    ts_rng_free(rng);
}
END_TEST

TS_TEST(file_every_flipped_byte_is_detected)
{
    double c[N * N];
    exponential_channel(1e-3, c);
    ts_channel_meta m = paris_meta(2e-3);
    size_t len;
    unsigned char *buf = file_bytes(&m, c, &len);
    char err[512];
    ck_assert_int_eq(loads(buf, len, err, sizeof err), 0);
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            buf[i] ^= (unsigned char)(1u << bit);
            ck_assert_msg(loads(buf, len, err, sizeof err) == -1,
                          "flipping bit %d of byte %zu went unnoticed", bit,
                          i);
            buf[i] ^= (unsigned char)(1u << bit);
        }
    ck_assert_int_eq(loads(buf, len, err, sizeof err), 0);
    free(buf);
}
END_TEST

TS_TEST(file_truncation_and_versions_are_detected)
{
    double c[N * N];
    lumpy_channel(c);
    ts_channel_meta m = paris_meta(0.0);
    size_t len;
    unsigned char *buf = file_bytes(&m, c, &len);
    expect_refused(buf, len - 1, "truncated");
    expect_refused(buf, len - 8, "truncated");
    expect_refused(buf, TS_CHANNEL_HEADER_BYTES, "truncated");
    expect_refused(buf, TS_CHANNEL_HEADER_BYTES - 1, "shorter than the header");
    expect_refused(buf, 0, "shorter than the header");

    /* A newer version, checksums intact: refused with the way out. */
    ts_bin_put_u32(buf + TS_BIN_VERSION, TS_CHANNEL_VERSION + 1);
    reseal(buf, len);
    expect_refused(buf, len, "newer");
    expect_refused(buf, len, "tracesan optimize");
    ts_bin_put_u32(buf + TS_BIN_VERSION, 0);
    reseal(buf, len);
    expect_refused(buf, len, "version 0");
    ts_bin_put_u32(buf + TS_BIN_VERSION, TS_CHANNEL_VERSION);
    memcpy(buf, "TSMARKOV", 8);
    reseal(buf, len);
    expect_refused(buf, len, "bad magic");
    memcpy(buf, TS_CHANNEL_MAGIC, 8);
    reseal(buf, len);
    char err[512];
    ck_assert_msg(loads(buf, len, err, sizeof err) == 0, "%s", err);

    /* A model file is not a channel file, and the other way round. */
    ts_channel_file *f = NULL;
    ck_assert_int_eq(ts_channel_open("/dev/null", &f, err, sizeof err), -1);
    ck_assert_int_eq(ts_channel_open("/nonexistent/x.bin", &f, err,
                                     sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.bin"));
    free(buf);
}
END_TEST

/* Wrong contents behind valid checksums: what only the semantic checks
 * catch. */
TS_TEST(file_contents_are_validated)
{
    double c[N * N];
    lumpy_channel(c);
    ts_channel_meta m = paris_meta(0.0);
    size_t len;
    unsigned char *buf = file_bytes(&m, c, &len);
    unsigned char *copy = malloc(len);
    double *entries = (double *)(void *)(buf + TS_CHANNEL_HEADER_BYTES);
    memcpy(copy, buf, len);

    entries[5] += 0.01;                       /* row 0 sums to 1.01 */
    reseal(buf, len);
    expect_refused(buf, len, "sums to");
    memcpy(buf, copy, len);
    entries[N + 1] = -entries[N + 1];
    entries[N + 2] -= 2 * entries[N + 1];     /* sum kept, one negative */
    reseal(buf, len);
    expect_refused(buf, len, "not a probability");
    memcpy(buf, copy, len);
    entries[7] = NAN;
    reseal(buf, len);
    expect_refused(buf, len, "not a probability");
    memcpy(buf, copy, len);
    ts_bin_put_u32(buf + 28, ROWS + 1);       /* rows */
    reseal(buf, len);
    expect_refused(buf, len, "cell");
    memcpy(buf, copy, len);
    ts_bin_put_f64(buf + 80, m.cell_w_m * 1.01);
    reseal(buf, len);
    expect_refused(buf, len, "cell sides");
    memcpy(buf, copy, len);
    ts_bin_put_f64(buf + 96, 0.0);            /* distortion bound */
    reseal(buf, len);
    expect_refused(buf, len, "distortion");
    memcpy(buf, copy, len);
    ts_bin_put_f64(buf + 40, 95.0);           /* lat_min */
    reseal(buf, len);
    expect_refused(buf, len, "region");
    memcpy(buf, copy, len);
    buf[160] = 1;                             /* reserved */
    reseal(buf, len);
    expect_refused(buf, len, "reserved");

    /* A geo-ind claim the channel does not meet: the lumpy channel has
     * zeros in some rows only, the exponential one a ratio of 2 beta. */
    memcpy(buf, copy, len);
    ts_bin_put_f64(buf + 104, 1e-3);
    reseal(buf, len);
    expect_refused(buf, len, "impossible from some cells");
    double e[N * N];
    exponential_channel(1e-3, e);
    ts_channel_meta g = paris_meta(2e-3);
    size_t glen;
    unsigned char *gbuf = file_bytes(&g, e, &glen);
    char err[512];
    ck_assert_msg(loads(gbuf, glen, err, sizeof err) == 0, "%s", err);
    ts_bin_put_f64(gbuf + 104, 0.9e-3);
    reseal(gbuf, glen);
    expect_refused(gbuf, glen, "only reaches");

    /* The writer refuses what the loader would. */
    FILE *out = tmpfile();
    lumpy_channel(c);
    c[3] += 0.5;
    ck_assert_int_eq(ts_channel_write(out, &m, c, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "sums to"));
    lumpy_channel(c);
    ck_assert_int_eq(ts_channel_write(out, &g, c, NULL, err, sizeof err), -1);
    ck_assert_int_eq(ftell(out), 0);
    fclose(out);
    free(gbuf);
    free(copy);
    free(buf);
}
END_TEST

/* ------------------------------------------------------------ mechanism */

TS_TEST(release_lands_on_a_centre)
{
    double c[N * N];
    lumpy_channel(c);
    ts_channel_meta m = paris_meta(0.0);
    void *profile = profile_for(&m, c, 1000000, NULL);
    ts_cell_grid g = paris_grid();
    ts_rng *rng = ts_rng_new_seeded(11);
    uint64_t state[4] = { 0 };
    ts_budget_view budget = { .total = ts_mi_channel_ops.window_budget(profile),
                              .spent = 0.0 };
    for (int i = 0; i < 2000; i++) {
        double lat = 48.80 + 0.1 * ts_rng_uniform_open(rng);
        double lon = 2.25 + 0.15 * ts_rng_uniform_open(rng);
        ts_report out;
        ck_assert_int_eq(release_at(profile, state, lat, lon, budget, rng,
                                    &out), TS_RELEASE_OK);
        uint32_t cell, truth;
        ck_assert_int_eq(ts_cell_grid_locate(&g, out.lat, out.lon, 0, &cell),
                         0);
        double clat, clon;
        ts_cell_grid_centre_latlon(&g, cell, &clat, &clon);
        ck_assert_double_eq(out.lat, clat);
        ck_assert_double_eq(out.lon, clon);
        /* Only cells the true cell's row allows. */
        ck_assert_int_eq(ts_cell_grid_locate(&g, lat, lon, 0, &truth), 0);
        ck_assert_double_gt(c[truth * N + cell], 0.0);
    }
    ts_rng_free(rng);
    ts_cell_grid_free(&g);
    ts_mi_channel_ops.profile_free(profile);
}
END_TEST

/* |count - draws p| <= 5 sigma + 1 per cell, sigma the binomial standard
 * deviation: a false failure has probability below 12 * 6e-7. */
static int row_matches(const unsigned *count, unsigned draws,
                       const double *row)
{
    for (size_t z = 0; z < N; z++) {
        double mean = draws * row[z];
        double sigma = sqrt(draws * row[z] * (1.0 - row[z]));
        if (fabs(count[z] - mean) > 5.0 * sigma + 1.0)
            return 0;
    }
    return 1;
}

TS_TEST(release_frequencies_follow_the_row)
{
    double c[N * N];
    lumpy_channel(c);
    ts_channel_meta m = paris_meta(0.0);
    void *profile = profile_for(&m, c, 1000000, NULL);
    ts_cell_grid g = paris_grid();
    ts_rng *rng = ts_rng_new_seeded(5);
    uint64_t state[4] = { 0 };
    ts_budget_view budget = { .total = ts_mi_channel_ops.window_budget(profile),
                              .spent = 0.0 };
    for (uint32_t x = 0; x < N; x += 5) {
        double lat, lon;
        centre_of(x, &lat, &lon);
        unsigned count[N] = { 0 };
        const unsigned draws = 40000;
        for (unsigned i = 0; i < draws; i++) {
            ts_report out;
            ck_assert_int_eq(release_at(profile, state, lat, lon, budget, rng,
                                        &out), TS_RELEASE_OK);
            uint32_t cell;
            ck_assert_int_eq(ts_cell_grid_locate(&g, out.lat, out.lon, 0,
                                                 &cell), 0);
            count[cell]++;
        }
        ck_assert_msg(row_matches(count, draws, c + x * N),
                      "row %u does not match its channel row", x);
        /* The same test tells another row apart. */
        ck_assert(!row_matches(count, draws, c + ((x + 1) % N) * N));
    }
    ts_rng_free(rng);
    ts_cell_grid_free(&g);
    ts_mi_channel_ops.profile_free(profile);
}
END_TEST

TS_TEST(geoind_channel_spends_its_epsilon)
{
    double c[N * N];
    exponential_channel(1e-3, c);
    ts_channel_meta m = paris_meta(2e-3);
    void *profile = profile_for(&m, c, 10, NULL);
    ck_assert_uint_eq(ts_mi_channel_ops.user_state_size(profile), 0);
    double total = ts_mi_channel_ops.window_budget(profile);
    ck_assert_double_eq_tol(total, 2e-3 * 10, 1e-15);
    ts_rng *rng = ts_rng_new_seeded(2);
    ts_budget_view budget = { .total = total, .spent = 0.0 };
    int released = 0;
    double lat, lon;
    centre_of(6, &lat, &lon);
    for (int i = 0; i < 12; i++) {
        ts_report out;
        ts_release_status st = release_at(profile, NULL, lat, lon, budget, rng,
                                          &out);
        if (st == TS_RELEASE_EXHAUSTED)
            break;
        ck_assert_int_eq(st, TS_RELEASE_OK);
        ck_assert_double_eq(out.eps_point, 2e-3);
        /* On true points a report adds eps times the cell diagonal. */
        ck_assert(out.has_eps_floor);
        ck_assert_double_eq_tol(out.eps_floor,
                                2e-3 * hypot(m.cell_w_m, m.cell_h_m), 1e-9);
        budget.spent += out.eps_point;
        released++;
    }
    ck_assert_int_eq(released, 10);
    ts_rng_free(rng);
    ts_mi_channel_ops.profile_free(profile);
}
END_TEST

TS_TEST(channel_without_geoind_caps_releases)
{
    double c[N * N];
    lumpy_channel(c);
    ts_channel_meta m = paris_meta(0.0);
    void *profile = profile_for(&m, c, 3, NULL);
    size_t size = ts_mi_channel_ops.user_state_size(profile);
    ck_assert_uint_gt(size, 0);
    ck_assert_uint_le(size, 32);
    double total = ts_mi_channel_ops.window_budget(profile);
    ck_assert_double_gt(total, 0.0);
    unsigned char state[32] = { 0 };
    ts_rng *rng = ts_rng_new_seeded(9);
    ts_budget_view budget = { .total = total, .spent = 0.0 };
    double lat, lon;
    centre_of(2, &lat, &lon);
    ts_report out;
    for (int window = 0; window < 2; window++) {
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(release_at(profile, state, lat, lon, budget, rng,
                                        &out), TS_RELEASE_OK);
            ck_assert_double_eq(out.eps_point, 0.0);
            ck_assert(!out.has_eps_floor);
            budget.spent += out.eps_point;
        }
        unsigned char before[32];
        memcpy(before, state, sizeof state);
        ck_assert_int_eq(release_at(profile, state, lat, lon, budget, rng,
                                    &out), TS_RELEASE_EXHAUSTED);
        ck_assert_int_eq(memcmp(before, state, sizeof state), 0);
        /* A new window: the caller zero-fills the state. */
        memset(state, 0, sizeof state);
    }
    /* Outside the grid: rejected before the count moves, or clamped. */
    ck_assert_int_eq(release_at(profile, state, 48.5, 2.0, budget, rng, &out),
                     TS_RELEASE_OK);
    ts_mi_channel_ops.profile_free(profile);
    profile = profile_for(&m, c, 3, "reject");
    memset(state, 0, sizeof state);
    ck_assert_int_eq(release_at(profile, state, 48.5, 2.0, budget, rng, &out),
                     TS_RELEASE_OUTSIDE_REGION);
    ck_assert_int_eq(release_at(profile, state, NAN, 2.3, budget, rng, &out),
                     TS_RELEASE_ERROR);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(release_at(profile, state, lat, lon, budget, rng,
                                    &out), TS_RELEASE_OK);
    ts_rng_free(rng);
    ts_mi_channel_ops.profile_free(profile);
}
END_TEST

TS_TEST(profile_keys)
{
    char err[512];
    void *profile;
    param_table t = { .n = 0 };
    /* channel = "": refused after asking get_channel, which is how the
     * daemon disables a profile. */
    channel_asked_empty = 0;
    param_string(&t, "channel", "");
    ck_assert_int_eq(profile_try(&t, &profile, err, sizeof err), -1);
    ck_assert_int_eq(channel_asked_empty, 1);
    ck_assert_ptr_nonnull(strstr(err, "channel"));
    ck_assert_ptr_eq(ts_mechanism_error_key(&ts_mi_channel_ops, err),
                     ts_mechanism_param_find(&ts_mi_channel_ops, "channel"));

    t.n = 0;
    channel_asked_empty = 0;
    ck_assert_int_eq(profile_try(&t, &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "channel is required"));
    ck_assert_int_eq(channel_asked_empty, 0);

    param_int(&t, "channel", 3);
    ck_assert_int_eq(profile_try(&t, &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "channel must be a string"));

    t.n = 0;
    param_string(&t, "channel", "/nonexistent/c.bin");
    ck_assert_int_eq(profile_try(&t, &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "channel: /nonexistent/c.bin"));

    /* Other keys are checked before the file is opened. */
    param_string(&t, "on_outside", "wrap");
    ck_assert_int_eq(profile_try(&t, &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "on_outside"));
    t.n = 1;
    param_int(&t, "points_per_window", 0);
    ck_assert_int_eq(profile_try(&t, &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "points_per_window"));
    t.n = 1;
    param_double(&t, "beta", 1.0);
    ck_assert_int_eq(profile_try(&t, &profile, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "beta: not a parameter of mechanism "
                                      "mi-channel"));

    /* A model file is not a channel. */
    const ts_mechanism_ops *found = ts_mechanism_find("mi-channel");
    ck_assert_ptr_eq(found, &ts_mi_channel_ops);
    ck_assert_ptr_nonnull(ts_mechanism_param_find(found, "channel"));
    ck_assert_ptr_nonnull(ts_mechanism_param_find(found, "on_outside"));
    ck_assert_ptr_nonnull(ts_mechanism_param_find(found,
                                                  "points_per_window"));
}
END_TEST

int main(void)
{
    return ts_check_main("mi_channel", 120, NULL, NULL);
}
