/* Channel files: an obfuscation channel P(report cell | true cell) on a
 * grid, as `tracesan optimize` writes it (inference/mi_optimal.h) and the
 * `mi-channel` mechanism releases through it (docs/mi_channel.md).
 *
 * Versioned and checksummed like model files, through the same code
 * (inference/binary_file.h). Byte layout, little-endian, IEEE 754:
 *
 *   header, 192 bytes:
 *     0  char[8] magic "TSCHANNL"     88  f64 cell_h_m
 *     8  u32 version (1)              96  f64 distortion bound L, m
 *    12  u32 header bytes (192)      104  f64 geoind epsilon per m (0: none)
 *    16  u64 file bytes              112  f64 I(U;Z), bits
 *    24  u32 cells n                 120  f64 E[d(X,Z)], m
 *    28  u32 rows                    128  f64 duality gap, bits
 *    32  u32 cols                    136  u32 iterations
 *    36  u32 users                   140  u32 flags (bit 0: converged)
 *    40  f64 lat_min                 144  u64 channel offset (192)
 *    48  f64 lon_min                 152  reserved, 0, up to 184
 *    56  f64 lat_max                 184  u32 CRC-32 of bytes 192 .. end
 *    64  f64 lon_max                 188  u32 CRC-32 of bytes 0 .. 187
 *    72  f64 cell_m (0: rows x cols)
 *    80  f64 cell_w_m
 *   then the channel, n x n f64, row-major: entry x * n + z is P(z | x).
 *
 * The grid is mechanisms/cell_grid.h's: square cells of cell_m metres
 * over the box, or rows x cols cells splitting it evenly; cell_w_m and
 * cell_h_m are the cell's sides as built.
 *
 * The loader checks everything before handing out a channel: the shared
 * header checks (magic, version, sizes, both checksums), the grid (box
 * inside WGS84, dimensions and cell sides consistent with the box),
 * the statistics (finite, in range), every entry finite and >= 0, every
 * row summing to 1, and, when the file claims a geo-ind epsilon, the
 * claim itself on every (x, x', z) (see ts_channel_file.geoind_measured).
 */
#ifndef TRACESAN_INFERENCE_CHANNEL_FILE_H
#define TRACESAN_INFERENCE_CHANNEL_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TS_CHANNEL_MAGIC "TSCHANNL"
#define TS_CHANNEL_VERSION 1u
#define TS_CHANNEL_HEADER_BYTES 192u
/* An n x n channel is 8 n^2 bytes, and the geo-ind check n^3 / 2
 * comparisons: 4096 cells are 128 MB and about 10 s of one core (issue 25:
 * 62 s before the check was blocked; the daemon loads off its event loop,
 * docs/operations.md "Reloading"). */
#define TS_CHANNEL_MAX_CELLS 4096u
/* A row may miss 1 by rounding this much. */
#define TS_CHANNEL_ROW_TOLERANCE 1e-9
/* The geo-ind claim holds on every pair up to this relative slack on
 * epsilon (the optimizer's constraints are met in floating point). */
#define TS_CHANNEL_GEOIND_SLACK 1e-6

/* What a channel file says about its channel. */
typedef struct ts_channel_meta {
    double region[4];          /* lat_min, lon_min, lat_max, lon_max */
    double cell_m;             /* > 0: square cells; 0: rows x cols */
    uint32_t rows, cols;
    double cell_w_m, cell_h_m;
    double distortion_m;       /* the bound L the channel was fitted to */
    double geoind_epsilon;     /* per metre; 0: no geo-ind constraint */
    double mi_bits;            /* I(U;Z) on the training joint */
    double expected_distortion_m;
    double gap_bits;           /* optimality certificate */
    uint32_t iterations;
    uint32_t users;            /* in the training trace */
    int converged;
} ts_channel_meta;

typedef struct ts_channel_file {
    ts_channel_meta meta;
    uint32_t n;                /* rows * cols */
    const double *channel;     /* n x n, row-major P(z | x) */
    /* With geoind_epsilon > 0: the smallest epsilon the channel actually
     * satisfies between cell centres, max |ln C(x,z) - ln C(x',z)| /
     * d(x, x'); the loader refuses a file where it exceeds geoind_epsilon
     * by more than TS_CHANNEL_GEOIND_SLACK. 0 without a claim. */
    double geoind_measured;
    size_t file_bytes;

    /* private */
    const unsigned char *base;
    int mapped;
} ts_channel_file;

/* Maps and validates a channel file. -1 with "PATH: reason" on failure. */
int ts_channel_open(const char *path, ts_channel_file **out, char *err,
                    size_t errlen);
/* Validates a channel held in memory without copying: buf must be 8-byte
 * aligned and outlive the channel. */
int ts_channel_open_buffer(const void *buf, size_t len,
                           ts_channel_file **out, char *err, size_t errlen);
void ts_channel_close(ts_channel_file *channel);

/* Checks a grid's description as the loader does: 0, or -1 with why. */
int ts_channel_meta_check(const ts_channel_meta *meta, char *err,
                          size_t errlen);

/* Writes a channel file (validated as the loader would, so what is written
 * loads) to `out`, or to PATH by a temporary file renamed over it. *bytes
 * (may be NULL) gets the size. -1 with a message on invalid input or a
 * write error. */
int ts_channel_write(FILE *out, const ts_channel_meta *meta,
                     const double *channel, uint64_t *bytes, char *err,
                     size_t errlen);
int ts_channel_write_file(const char *path, const ts_channel_meta *meta,
                          const double *channel, uint64_t *bytes, char *err,
                          size_t errlen);

#endif
