#include "inference/channel_file.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/binary_file.h"
#include "inference/error.h"
#include "inference/grid.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

static const ts_bin_format channel_format = {
    .magic = TS_CHANNEL_MAGIC,
    .version = TS_CHANNEL_VERSION,
    .header_bytes = TS_CHANNEL_HEADER_BYTES,
    .noun = "channel",
    .renew = "run `tracesan optimize` again",
};

/* Header field offsets (see the header comment). */
enum {
    H_CELLS = 24, H_ROWS = 28, H_COLS = 32, H_USERS = 36, H_LAT_MIN = 40,
    H_LON_MIN = 48, H_LAT_MAX = 56, H_LON_MAX = 64, H_CELL_M = 72,
    H_CELL_W = 80, H_CELL_H = 88, H_DISTORTION = 96, H_GEOIND = 104,
    H_MI = 112, H_EXPECTED = 120, H_GAP = 128, H_ITERATIONS = 136,
    H_FLAGS = 140, H_CHANNEL = 144, H_RESERVED = 152, H_RESERVED_END = 184
};

enum { FLAG_CONVERGED = 1u };

static int close_enough(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

int ts_channel_meta_check(const ts_channel_meta *m, char *err, size_t errlen)
{
    const double *r = m->region;
    for (int i = 0; i < 4; i++)
        if (!isfinite(r[i]))
            return ts_fail(err, errlen, "region: not finite");
    if (!(r[0] >= -90.0 && r[2] <= 90.0 && r[1] >= -180.0 &&
          r[3] <= 180.0 && r[0] < r[2] && r[1] < r[3]))
        return ts_fail(err, errlen, "region: not a box inside WGS84");
    if (!isfinite(m->cell_m) || m->cell_m < 0.0)
        return ts_fail(err, errlen, "cell_m: must be finite and >= 0");
    uint64_t n = (uint64_t)m->rows * m->cols;
    if (n < 2 || n > TS_CHANNEL_MAX_CELLS)
        return ts_fail(err, errlen, "grid of %u x %u cells: 2 to %u cells "
                       "are allowed", m->cols, m->rows, TS_CHANNEL_MAX_CELLS);
    /* The sides must be what mechanisms/cell_grid.h builds from the box,
     * or a reader would place the cells elsewhere than the optimizer. */
    char why[200];
    ts_grid g;
    if (ts_grid_init(&g, r[0], r[1], r[2], r[3],
                     m->cell_m > 0.0 ? m->cell_m : 1000.0, why,
                     sizeof why) != 0)
        return ts_fail(err, errlen, "region: %s", why);
    double w, h;
    if (m->cell_m > 0.0) {
        if (g.cols != m->cols || g.rows != m->rows)
            return ts_fail(err, errlen,
                           "grid of %u x %u cells in the header, but its "
                           "region and cell size give %u x %u",
                           m->cols, m->rows, g.cols, g.rows);
        w = h = m->cell_m;
    } else {
        ts_vec2 ne = ts_grid_project(&g, r[2], r[3]);
        w = (ne.x - g.x_min) / m->cols;
        h = (ne.y - g.y_min) / m->rows;
    }
    if (!close_enough(w, m->cell_w_m) || !close_enough(h, m->cell_h_m))
        return ts_fail(err, errlen, "cell sides do not match the region "
                       "and the grid's dimensions");
    if (!isfinite(m->distortion_m) || !(m->distortion_m > 0.0))
        return ts_fail(err, errlen, "distortion bound must be > 0");
    if (!isfinite(m->geoind_epsilon) || m->geoind_epsilon < 0.0)
        return ts_fail(err, errlen, "geo-ind epsilon must be >= 0");
    /* A geo-ind claim too large to mean anything would only overflow
     * exp(eps d) checks and budgets. */
    if (m->geoind_epsilon > 1.0)
        return ts_fail(err, errlen, "geo-ind epsilon above 1 per metre");
    if (!isfinite(m->mi_bits) || m->mi_bits < -1e-9 ||
        !isfinite(m->expected_distortion_m) ||
        m->expected_distortion_m < 0.0 || !isfinite(m->gap_bits) ||
        m->gap_bits < -1e-9)
        return ts_fail(err, errlen, "statistics out of range");
    if (m->users == 0)
        return ts_fail(err, errlen, "no users");
    return 0;
}

/* Every entry finite and >= 0, every row summing to 1. */
static int check_rows(const double *c, uint32_t n, char *err, size_t errlen)
{
    for (uint32_t x = 0; x < n; x++) {
        const double *row = c + (size_t)x * n;
        double sum = 0.0;
        for (uint32_t z = 0; z < n; z++) {
            if (!isfinite(row[z]) || row[z] < 0.0)
                return ts_fail(err, errlen, "channel row %u: entry %u is "
                               "not a probability", x, z);
            sum += row[z];
        }
        if (!(fabs(sum - 1.0) <= TS_CHANNEL_ROW_TOLERANCE * fmax(1.0, n)))
            return ts_fail(err, errlen, "channel row %u sums to %.17g, not "
                           "1", x, sum);
    }
    return 0;
}

/* ------------------------------------------------------- geo-ind check */

/* The claim is checked on every triple (x, x', z): n^3 / 2 differences, 3.4e10
 * at 4096 cells. Exact, and faster than the plain triple loop by blocking:
 * a block of GEOIND_BLOCK rows x stays in cache while every row x' below it
 * streams past once, and the block's rows keep independent running maxima
 * (eight dependency chains the CPU overlaps, SIMD lanes on x86-64). The
 * maximum of the same differences in any order is the same number, and each
 * pair's ratio is computed as before, so the result is bit for bit the plain
 * loop's (tests/check_mi_channel.c compares them). */
#define GEOIND_BLOCK 8

/* most[i] = max(most[i], max_z |a_i[z] - b[z]|), a_i = a + i * stride, for
 * the first `rows` rows of the block. */
static void rows_max(const double *a, size_t stride, size_t rows,
                     const double *b, size_t len, double *most)
{
    for (size_t i = 0; i < rows; i++) {
        const double *ai = a + i * stride;
        double m = most[i];
        for (size_t z = 0; z < len; z++) {
            double diff = fabs(ai[z] - b[z]);
            m = diff > m ? diff : m;
        }
        most[i] = m;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The inputs are finite (logs of positive doubles, or 0), so max_pd and
 * clearing the sign bit are exactly the scalar max and fabs. */
#define LANE_SSE2(k)                                                         \
    m##k = _mm_max_pd(                                                       \
        _mm_andnot_pd(sign, _mm_sub_pd(_mm_loadu_pd(a + (k) * stride + z),   \
                                       v)),                                  \
        m##k)
#define LANE_AVX2(k)                                                         \
    m##k = _mm256_max_pd(                                                    \
        _mm256_andnot_pd(sign,                                               \
                         _mm256_sub_pd(_mm256_loadu_pd(a + (k) * stride + z), \
                                       v)),                                  \
        m##k)

static void block_max_sse2(const double *a, size_t stride, const double *b,
                           size_t len, double *most)
{
    const __m128d sign = _mm_set1_pd(-0.0);
    __m128d m0 = _mm_setzero_pd(), m1 = m0, m2 = m0, m3 = m0, m4 = m0,
            m5 = m0, m6 = m0, m7 = m0;
    size_t z = 0;
    for (; z + 2 <= len; z += 2) {
        __m128d v = _mm_loadu_pd(b + z);
        LANE_SSE2(0); LANE_SSE2(1); LANE_SSE2(2); LANE_SSE2(3);
        LANE_SSE2(4); LANE_SSE2(5); LANE_SSE2(6); LANE_SSE2(7);
    }
    __m128d lanes[GEOIND_BLOCK] = { m0, m1, m2, m3, m4, m5, m6, m7 };
    for (size_t i = 0; i < GEOIND_BLOCK; i++) {
        double two[2];
        _mm_storeu_pd(two, lanes[i]);
        double m = two[0] > two[1] ? two[0] : two[1];
        most[i] = m > most[i] ? m : most[i];
    }
    rows_max(a + z, stride, GEOIND_BLOCK, b + z, len - z, most);
}

__attribute__((target("avx2"))) static void
block_max_avx2(const double *a, size_t stride, const double *b, size_t len,
               double *most)
{
    const __m256d sign = _mm256_set1_pd(-0.0);
    __m256d m0 = _mm256_setzero_pd(), m1 = m0, m2 = m0, m3 = m0, m4 = m0,
            m5 = m0, m6 = m0, m7 = m0;
    size_t z = 0;
    for (; z + 4 <= len; z += 4) {
        __m256d v = _mm256_loadu_pd(b + z);
        LANE_AVX2(0); LANE_AVX2(1); LANE_AVX2(2); LANE_AVX2(3);
        LANE_AVX2(4); LANE_AVX2(5); LANE_AVX2(6); LANE_AVX2(7);
    }
    __m256d lanes[GEOIND_BLOCK] = { m0, m1, m2, m3, m4, m5, m6, m7 };
    for (size_t i = 0; i < GEOIND_BLOCK; i++) {
        double four[4];
        _mm256_storeu_pd(four, lanes[i]);
        for (size_t k = 0; k < 4; k++)
            most[i] = four[k] > most[i] ? four[k] : most[i];
    }
    rows_max(a + z, stride, GEOIND_BLOCK, b + z, len - z, most);
}
#undef LANE_SSE2
#undef LANE_AVX2

typedef void (*block_max_fn)(const double *, size_t, const double *, size_t,
                             double *);

static block_max_fn pick_block_max(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? block_max_avx2 : block_max_sse2;
}
#else
typedef void (*block_max_fn)(const double *, size_t, const double *, size_t,
                             double *);

static void block_max_plain(const double *a, size_t stride, const double *b,
                            size_t len, double *most)
{
    rows_max(a, stride, GEOIND_BLOCK, b, len, most);
}

static block_max_fn pick_block_max(void)
{
    return block_max_plain;
}
#endif

/* ln C, row-major; a report cell no true cell reaches is all 0 (every
 * ratio 1). -1 when some cells reach it and others cannot: an infinite
 * ratio. */
static int log_channel(const double *c, uint32_t n, double *lg, char *err,
                       size_t errlen)
{
    uint32_t *zeros = calloc(n, sizeof *zeros);
    if (zeros == NULL)
        return ts_fail(err, errlen, "out of memory");
    for (uint32_t x = 0; x < n; x++)
        for (uint32_t z = 0; z < n; z++)
            zeros[z] += c[(size_t)x * n + z] == 0.0;
    for (uint32_t z = 0; z < n; z++)
        if (zeros[z] != 0 && zeros[z] != n) {
            free(zeros);
            return ts_fail(err, errlen,
                           "report cell %u is impossible from some cells "
                           "and possible from others: not geo-"
                           "indistinguishable",
                           z);
        }
    for (uint32_t x = 0; x < n; x++)
        for (uint32_t z = 0; z < n; z++)
            lg[(size_t)x * n + z] =
                zeros[z] == n ? 0.0 : log(c[(size_t)x * n + z]);
    free(zeros);
    return 0;
}

/* max over x != x', z of |ln C(x,z) - ln C(x',z)| / d(x, x'), exact, every
 * triple. */
static int measure_geoind(const double *c, const ts_channel_meta *m,
                          uint32_t n, double *measured, char *err,
                          size_t errlen)
{
    double *lg = malloc((size_t)n * n * sizeof *lg);
    if (lg == NULL)
        return ts_fail(err, errlen, "out of memory");
    if (log_channel(c, n, lg, err, errlen) != 0) {
        free(lg);
        return -1;
    }
    block_max_fn block_max = pick_block_max();
    double worst = 0.0;
    for (uint32_t x0 = 0; x0 < n; x0 += GEOIND_BLOCK) {
        const double *a = lg + (size_t)x0 * n;
        uint32_t rows = n - x0 < GEOIND_BLOCK ? n - x0 : GEOIND_BLOCK;
        for (uint32_t y = x0 + 1; y < n; y++) {
            const double *b = lg + (size_t)y * n;
            /* The block's rows above y: the pairs x < y. */
            uint32_t live = y - x0 < rows ? y - x0 : rows;
            double most[GEOIND_BLOCK] = { 0.0 };
            if (live == GEOIND_BLOCK)
                block_max(a, n, b, n, most);
            else
                rows_max(a, n, live, b, n, most);
            for (uint32_t i = 0; i < live; i++) {
                uint32_t x = x0 + i;
                double ax = (x % m->cols) * m->cell_w_m;
                double ay = (double)(x / m->cols) * m->cell_h_m;
                double dx = (y % m->cols) * m->cell_w_m - ax;
                double dy = (double)(y / m->cols) * m->cell_h_m - ay;
                double d = sqrt(dx * dx + dy * dy);
                if (most[i] / d > worst)
                    worst = most[i] / d;
            }
        }
    }
    free(lg);
    *measured = worst;
    return 0;
}

static int parse(const unsigned char *base, size_t len, ts_channel_file *f,
                 char *err, size_t errlen)
{
    if (ts_bin_check(&channel_format, base, len, err, errlen) != 0)
        return -1;
    for (size_t i = H_RESERVED; i < H_RESERVED_END; i++)
        if (base[i] != 0)
            return ts_fail(err, errlen, "reserved header bytes are not 0");
    ts_channel_meta *m = &f->meta;
    m->region[0] = ts_bin_get_f64(base + H_LAT_MIN);
    m->region[1] = ts_bin_get_f64(base + H_LON_MIN);
    m->region[2] = ts_bin_get_f64(base + H_LAT_MAX);
    m->region[3] = ts_bin_get_f64(base + H_LON_MAX);
    m->cell_m = ts_bin_get_f64(base + H_CELL_M);
    m->rows = ts_bin_get_u32(base + H_ROWS);
    m->cols = ts_bin_get_u32(base + H_COLS);
    m->cell_w_m = ts_bin_get_f64(base + H_CELL_W);
    m->cell_h_m = ts_bin_get_f64(base + H_CELL_H);
    m->distortion_m = ts_bin_get_f64(base + H_DISTORTION);
    m->geoind_epsilon = ts_bin_get_f64(base + H_GEOIND);
    m->mi_bits = ts_bin_get_f64(base + H_MI);
    m->expected_distortion_m = ts_bin_get_f64(base + H_EXPECTED);
    m->gap_bits = ts_bin_get_f64(base + H_GAP);
    m->iterations = ts_bin_get_u32(base + H_ITERATIONS);
    m->users = ts_bin_get_u32(base + H_USERS);
    uint32_t flags = ts_bin_get_u32(base + H_FLAGS);
    if ((flags & ~FLAG_CONVERGED) != 0)
        return ts_fail(err, errlen, "unknown flags");
    m->converged = (flags & FLAG_CONVERGED) != 0;
    if (ts_channel_meta_check(m, err, errlen) != 0)
        return -1;
    uint32_t n = ts_bin_get_u32(base + H_CELLS);
    if ((uint64_t)n != (uint64_t)m->rows * m->cols)
        return ts_fail(err, errlen, "%u cells in the header, but %u x %u "
                       "rows and columns", n, m->rows, m->cols);
    uint64_t offset = ts_bin_get_u64(base + H_CHANNEL);
    if (offset != TS_CHANNEL_HEADER_BYTES ||
        len - offset != (uint64_t)n * n * sizeof(double))
        return ts_fail(err, errlen, "channel array does not fill the file");
    const double *c = (const double *)(const void *)(base + offset);
    if (check_rows(c, n, err, errlen) != 0)
        return -1;
    f->geoind_measured = 0.0;
    if (m->geoind_epsilon > 0.0) {
        if (measure_geoind(c, m, n, &f->geoind_measured, err, errlen) != 0)
            return -1;
        if (f->geoind_measured >
            m->geoind_epsilon * (1.0 + TS_CHANNEL_GEOIND_SLACK))
            return ts_fail(err, errlen,
                           "the channel claims %.9g-geo-indistinguishability "
                           "per metre but only reaches %.9g",
                           m->geoind_epsilon, f->geoind_measured);
    }
    f->n = n;
    f->channel = c;
    f->base = base;
    f->file_bytes = len;
    return 0;
}

int ts_channel_open_buffer(const void *buf, size_t len,
                           ts_channel_file **out, char *err, size_t errlen)
{
    *out = NULL;
    if ((uintptr_t)buf % 8 != 0)
        return ts_fail(err, errlen, "channel buffer is not 8-byte aligned");
    ts_channel_file *f = calloc(1, sizeof *f);
    if (f == NULL)
        return ts_fail(err, errlen, "out of memory");
    if (parse(buf, len, f, err, errlen) != 0) {
        free(f);
        return -1;
    }
    *out = f;
    return 0;
}

int ts_channel_open(const char *path, ts_channel_file **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    const unsigned char *map;
    size_t len;
    if (ts_bin_map(&channel_format, path, &map, &len, err, errlen) != 0)
        return -1;
    ts_channel_file *f = calloc(1, sizeof *f);
    char why[400];
    if (f == NULL || parse(map, len, f, why, sizeof why) != 0) {
        if (f == NULL)
            snprintf(why, sizeof why, "out of memory");
        free(f);
        ts_bin_unmap(map, len);
        return ts_fail(err, errlen, "%s: %s", path, why);
    }
    f->mapped = 1;
    *out = f;
    return 0;
}

void ts_channel_close(ts_channel_file *f)
{
    if (f == NULL)
        return;
    if (f->mapped)
        ts_bin_unmap(f->base, f->file_bytes);
    free(f);
}

/* ----------------------------------------------------------------- writing */

/* The whole file in memory, checked by the loader's own parser: what is
 * written is exactly what loads. */
static unsigned char *build(const ts_channel_meta *m, const double *channel,
                            size_t *len, char *err, size_t errlen)
{
    if (ts_channel_meta_check(m, err, errlen) != 0)
        return NULL;
    uint64_t n = (uint64_t)m->rows * m->cols;
    size_t bytes = TS_CHANNEL_HEADER_BYTES + (size_t)(n * n * sizeof(double));
    unsigned char *buf = NULL;
    if (posix_memalign((void **)&buf, 8, bytes) != 0) {
        ts_fail(err, errlen, "out of memory");
        return NULL;
    }
    memset(buf, 0, TS_CHANNEL_HEADER_BYTES);
    ts_bin_put_u32(buf + H_CELLS, (uint32_t)n);
    ts_bin_put_u32(buf + H_ROWS, m->rows);
    ts_bin_put_u32(buf + H_COLS, m->cols);
    ts_bin_put_u32(buf + H_USERS, m->users);
    ts_bin_put_f64(buf + H_LAT_MIN, m->region[0]);
    ts_bin_put_f64(buf + H_LON_MIN, m->region[1]);
    ts_bin_put_f64(buf + H_LAT_MAX, m->region[2]);
    ts_bin_put_f64(buf + H_LON_MAX, m->region[3]);
    ts_bin_put_f64(buf + H_CELL_M, m->cell_m);
    ts_bin_put_f64(buf + H_CELL_W, m->cell_w_m);
    ts_bin_put_f64(buf + H_CELL_H, m->cell_h_m);
    ts_bin_put_f64(buf + H_DISTORTION, m->distortion_m);
    ts_bin_put_f64(buf + H_GEOIND, m->geoind_epsilon);
    ts_bin_put_f64(buf + H_MI, m->mi_bits);
    ts_bin_put_f64(buf + H_EXPECTED, m->expected_distortion_m);
    ts_bin_put_f64(buf + H_GAP, m->gap_bits);
    ts_bin_put_u32(buf + H_ITERATIONS, m->iterations);
    ts_bin_put_u32(buf + H_FLAGS, m->converged ? FLAG_CONVERGED : 0u);
    ts_bin_put_u64(buf + H_CHANNEL, TS_CHANNEL_HEADER_BYTES);
    memcpy(buf + TS_CHANNEL_HEADER_BYTES, channel,
           (size_t)(n * n * sizeof(double)));
    ts_bin_seal_header(&channel_format, buf, bytes,
                       ts_bin_crc(buf + TS_CHANNEL_HEADER_BYTES,
                                  bytes - TS_CHANNEL_HEADER_BYTES));
    ts_channel_file check;
    memset(&check, 0, sizeof check);
    if (parse(buf, bytes, &check, err, errlen) != 0) {
        free(buf);
        return NULL;
    }
    *len = bytes;
    return buf;
}

int ts_channel_write(FILE *out, const ts_channel_meta *meta,
                     const double *channel, uint64_t *bytes, char *err,
                     size_t errlen)
{
    size_t len;
    unsigned char *buf = build(meta, channel, &len, err, errlen);
    if (buf == NULL)
        return -1;
    int rc = 0;
    if (fwrite(buf, 1, len, out) != len || fflush(out) != 0)
        rc = ts_fail(err, errlen, "write error: %s", strerror(errno));
    free(buf);
    if (rc == 0 && bytes != NULL)
        *bytes = len;
    return rc;
}

typedef struct channel_write_args {
    const ts_channel_meta *meta;
    const double *channel;
    uint64_t *bytes;
} channel_write_args;

static int write_channel_to(FILE *out, void *ctx, char *why, size_t whylen)
{
    const channel_write_args *a = ctx;
    return ts_channel_write(out, a->meta, a->channel, a->bytes, why, whylen);
}

int ts_channel_write_file(const char *path, const ts_channel_meta *meta,
                          const double *channel, uint64_t *bytes, char *err,
                          size_t errlen)
{
    channel_write_args args = {meta, channel, bytes};
    return ts_bin_write_file(path, write_channel_to, &args, err, errlen);
}
