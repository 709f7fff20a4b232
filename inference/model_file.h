/* Model files: a grid, a popular Markov model and optional personal models
 * (one per user id), in a versioned binary format that is read into memory
 * read-only and shared by every user of a profile.
 *
 * The only module of inference/ that touches files. Byte layout (all
 * integers and doubles little-endian, IEEE 754; every section starts on an
 * 8-byte boundary), also in docs/inference.md:
 *
 *   header, 128 bytes:
 *     0  char[8] magic "TSMARKOV"     64  f64 lon_max
 *     8  u32 version (1)              72  f64 cell_m
 *    12  u32 header bytes (128)       80  f64 tick_s
 *    16  u64 file bytes               88  f64 max_speed_mps (0: unknown)
 *    24  u32 cell_count               96  u64 directory offset
 *    28  u32 cols                    104  u64 names offset
 *    32  u32 rows                    112  u64 names bytes
 *    36  u32 model count (1 + users) 120  u32 CRC-32 of bytes 128 .. end
 *    40  f64 lat_min                 124  u32 CRC-32 of bytes 0 .. 123
 *    48  f64 lon_min
 *    56  f64 lat_max
 *   directory: model count entries of 64 bytes, entry 0 the popular model,
 *   then the personal models sorted by user id (bytewise, a prefix first):
 *     0 u64 nnz                  32 u64 initial offset   (f64[cell_count])
 *     8 u64 row_start offset     40 u64 transitions counted when learning
 *       (u64[cell_count + 1])    48 u64 user id offset in the names blob
 *    16 u64 col offset (u32[nnz])56 u32 user id bytes (0 for popular)
 *    24 u64 prob offset (f64[nnz])60 u32 reserved (0)
 *   names blob (user ids, not terminated), then the arrays.
 *
 * The loader checks everything before handing out a model: magic, version
 * (a newer version is refused with a message asking for a newer tracesan),
 * both checksums, sizes and offsets against the file, grid dimensions
 * against the header's region and cell size, and every model with
 * ts_markov_validate (rows sum to 1, indices in range). A file that loads
 * is safe to index without further checks. Personal models are loaded with
 * the popular model as their fallback: their empty rows are its rows.
 *
 * Replace a model file by writing a new one and renaming it over the old
 * (ts_model_write_file does this). A loaded model is a copy of the file in
 * memory (ts_bin_map), not a mapping of it: truncating or rewriting the
 * file in place under a running daemon changes nothing until its next
 * load (a mapping raised SIGBUS at the next read past a truncation; issue
 * 25, item 12). The copy costs the file's size in memory once per
 * process, shared by every profile naming the path (model_cache.h).
 */
#ifndef TRACESAN_INFERENCE_MODEL_FILE_H
#define TRACESAN_INFERENCE_MODEL_FILE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "inference/grid.h"
#include "inference/markov.h"

#define TS_MODEL_MAGIC "TSMARKOV"
#define TS_MODEL_VERSION 1u
#define TS_MODEL_HEADER_BYTES 128u
#define TS_MODEL_ENTRY_BYTES 64u
#define TS_MODEL_MAX_USER_BYTES 1024u

typedef struct ts_model {
    ts_grid grid;
    double tick_s;
    double max_speed_mps;          /* as learned; 0 when unknown */
    ts_markov popular;
    uint64_t popular_transitions;
    uint32_t user_count;           /* personal models */
    size_t file_bytes;

    /* private */
    const unsigned char *base;
    int mapped;
    ts_markov *personal;           /* user_count views */
    const unsigned char *directory;
    const unsigned char *names;
    atomic_uint refs;              /* see ts_model_ref */
} ts_model;

/* Maps and validates a model file; the caller holds the one reference.
 * On failure returns -1 and err holds "PATH: reason". */
int ts_model_open(const char *path, ts_model **out, char *err,
                  size_t errlen);
/* Validates a model held in memory, without copying: buf must stay valid
 * and unchanged until the LAST reference is dropped, and be 8-byte
 * aligned. */
int ts_model_open_buffer(const void *buf, size_t len, ts_model **out,
                         char *err, size_t errlen);

/* Reference counting, so that every holder (the config that opened the
 * file, each profile built from it, across reloads) shares the one
 * mapping instead of copying the arrays: ts_model_ref takes a reference
 * and returns `model`; ts_model_close drops one (NULL-safe) and unmaps and
 * frees the model when it was the last. The count is atomic, so references
 * may be taken and dropped from different threads; the model itself is
 * immutable. */
ts_model *ts_model_ref(ts_model *model);
void ts_model_close(ts_model *model);

/* The personal model of a user, NULL when there is none. O(log users). */
const ts_markov *ts_model_personal(const ts_model *model, const char *user,
                                   size_t user_len);
/* The personal model, falling back to the popular one. */
const ts_markov *ts_model_for_user(const ts_model *model, const char *user,
                                   size_t user_len);
/* User id of personal model i (< user_count), not terminated. */
const char *ts_model_user_id(const ts_model *model, uint32_t i,
                             size_t *len);

/* One model to write. */
typedef struct ts_model_source {
    const char *user;          /* NULL for the popular model */
    size_t user_len;
    const ts_markov *markov;   /* cell_count of the grid, same tick; a
                                  personal model's fallback must be NULL or
                                  the popular model */
    uint64_t transitions;
} ts_model_source;

/* Writes a model file to `out` (a pipe is fine: nothing is seeked).
 * Validates every model first; user ids must be distinct, 1 to
 * TS_MODEL_MAX_USER_BYTES bytes (order does not matter). -1 with a message
 * on invalid input or a write error; *bytes (may be NULL) gets the size. */
int ts_model_write(FILE *out, const ts_grid *grid, double max_speed_mps,
                   const ts_model_source *popular,
                   const ts_model_source *personal, size_t n_personal,
                   uint64_t *bytes, char *err, size_t errlen);

/* Same, into PATH through a temporary file in the same directory renamed
 * over PATH once complete. */
int ts_model_write_file(const char *path, const ts_grid *grid,
                        double max_speed_mps, const ts_model_source *popular,
                        const ts_model_source *personal, size_t n_personal,
                        uint64_t *bytes, char *err, size_t errlen);

#endif
