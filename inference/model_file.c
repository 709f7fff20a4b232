#include "inference/model_file.h"
#include "inference/error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/binary_file.h"

static const ts_bin_format model_format = {
    .magic = TS_MODEL_MAGIC,
    .version = TS_MODEL_VERSION,
    .header_bytes = TS_MODEL_HEADER_BYTES,
    .noun = "model",
    .renew = "relearn the model",
};

/* Header field offsets (see the header comment). */
enum {
    H_CELLS = 24, H_COLS = 28, H_ROWS = 32, H_MODELS = 36, H_LAT_MIN = 40,
    H_LON_MIN = 48, H_LAT_MAX = 56, H_LON_MAX = 64, H_CELL_M = 72,
    H_TICK_S = 80, H_MAX_SPEED = 88, H_DIRECTORY = 96, H_NAMES = 104,
    H_NAMES_BYTES = 112
};
/* Directory entry field offsets. */
enum {
    E_NNZ = 0, E_ROW_START = 8, E_COL = 16, E_PROB = 24, E_INITIAL = 32,
    E_TRANSITIONS = 40, E_NAME = 48, E_NAME_BYTES = 56, E_RESERVED = 60
};

/* ----------------------------------------------------------------- loading */

static int compare_names(const unsigned char *a, size_t alen,
                         const unsigned char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n > 0 ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int load_entry(const unsigned char *base, uint64_t file_bytes,
                      const unsigned char *entry, uint32_t index,
                      const ts_grid *grid, double tick_s,
                      const ts_markov *fallback, ts_markov *out, char *err,
                      size_t errlen)
{
    uint64_t nnz = ts_bin_get_u64(entry + E_NNZ);
    uint64_t row_start = ts_bin_get_u64(entry + E_ROW_START);
    uint64_t col = ts_bin_get_u64(entry + E_COL);
    uint64_t prob = ts_bin_get_u64(entry + E_PROB);
    uint64_t initial = ts_bin_get_u64(entry + E_INITIAL);
    uint64_t cells = grid->cell_count;
    if (!ts_bin_section_ok(row_start, cells + 1, 8, TS_MODEL_HEADER_BYTES,
                    file_bytes) ||
        !ts_bin_section_ok(col, nnz, 4, TS_MODEL_HEADER_BYTES, file_bytes) ||
        !ts_bin_section_ok(prob, nnz, 8, TS_MODEL_HEADER_BYTES, file_bytes) ||
        !ts_bin_section_ok(initial, cells, 8, TS_MODEL_HEADER_BYTES, file_bytes))
        return ts_fail(err, errlen, "model %u: array outside the file", index);
    out->cell_count = grid->cell_count;
    out->tick_s = tick_s;
    out->nnz = nnz;
    out->row_start = (const uint64_t *)(const void *)(base + row_start);
    out->col = (const uint32_t *)(const void *)(base + col);
    out->prob = (const double *)(const void *)(base + prob);
    out->initial = (const double *)(const void *)(base + initial);
    out->fallback = fallback;
    char why[200];
    if (ts_markov_validate(out, why, sizeof why) != 0)
        return ts_fail(err, errlen, "model %u: %s", index, why);
    return 0;
}

static int parse(const unsigned char *base, size_t len, ts_model *m,
                 char *err, size_t errlen)
{
    if (ts_bin_check(&model_format, base, len, err, errlen) != 0)
        return -1;

    char why[200];
    if (ts_grid_init(&m->grid, ts_bin_get_f64(base + H_LAT_MIN),
                     ts_bin_get_f64(base + H_LON_MIN), ts_bin_get_f64(base + H_LAT_MAX),
                     ts_bin_get_f64(base + H_LON_MAX), ts_bin_get_f64(base + H_CELL_M), why,
                     sizeof why) != 0)
        return ts_fail(err, errlen, "region: %s", why);
    /* Each field on its own: a message that blamed the dimensions for a
     * wrong cell count read "13 x 17 ... but give 13 x 17" (issue 25). */
    uint32_t cols = ts_bin_get_u32(base + H_COLS);
    uint32_t rows = ts_bin_get_u32(base + H_ROWS);
    uint32_t cells = ts_bin_get_u32(base + H_CELLS);
    if (m->grid.cols != cols || m->grid.rows != rows)
        return ts_fail(err, errlen,
                    "grid of %u x %u cells in the header, but its region and "
                    "cell size give %u x %u here",
                    cols, rows, m->grid.cols, m->grid.rows);
    if (m->grid.cell_count != cells)
        return ts_fail(err, errlen,
                    "%u cells in the header, but its grid of %u x %u has %u",
                    cells, cols, rows, m->grid.cell_count);
    m->tick_s = ts_bin_get_f64(base + H_TICK_S);
    if (!isfinite(m->tick_s) || !(m->tick_s >= TS_MARKOV_MIN_TICK_S))
        return ts_fail(err, errlen, "tick must be finite and at least %g s",
                       TS_MARKOV_MIN_TICK_S);
    m->max_speed_mps = ts_bin_get_f64(base + H_MAX_SPEED);
    if (!isfinite(m->max_speed_mps) || m->max_speed_mps < 0.0)
        return ts_fail(err, errlen, "invalid maximum speed");

    uint32_t models = ts_bin_get_u32(base + H_MODELS);
    uint64_t directory = ts_bin_get_u64(base + H_DIRECTORY);
    uint64_t names = ts_bin_get_u64(base + H_NAMES);
    uint64_t names_bytes = ts_bin_get_u64(base + H_NAMES_BYTES);
    if (models == 0)
        return ts_fail(err, errlen, "no popular model");
    if (!ts_bin_section_ok(directory, models, TS_MODEL_ENTRY_BYTES,
                    TS_MODEL_HEADER_BYTES, len) ||
        !ts_bin_section_ok(names, names_bytes, 1, TS_MODEL_HEADER_BYTES, len))
        return ts_fail(err, errlen, "directory or names outside the file");
    m->directory = base + directory;
    m->names = base + names;
    m->user_count = models - 1;

    for (uint32_t i = 0; i < models; i++) {
        const unsigned char *e = m->directory + (size_t)i * TS_MODEL_ENTRY_BYTES;
        uint64_t name = ts_bin_get_u64(e + E_NAME);
        uint32_t name_len = ts_bin_get_u32(e + E_NAME_BYTES);
        if (ts_bin_get_u32(e + E_RESERVED) != 0)
            return ts_fail(err, errlen, "model %u: reserved field is not 0", i);
        if (i == 0 ? name_len != 0
                   : (name_len == 0 || name_len > TS_MODEL_MAX_USER_BYTES ||
                      name > names_bytes || name_len > names_bytes - name))
            return ts_fail(err, errlen, "model %u: bad user id", i);
        if (i >= 2) {
            const unsigned char *prev = e - TS_MODEL_ENTRY_BYTES;
            if (compare_names(m->names + ts_bin_get_u64(prev + E_NAME),
                              ts_bin_get_u32(prev + E_NAME_BYTES), m->names + name,
                              name_len) >= 0)
                return ts_fail(err, errlen,
                            "model %u: user ids not sorted or duplicated", i);
        }
    }
    if (load_entry(base, len, m->directory, 0, &m->grid, m->tick_s, NULL,
                   &m->popular, err, errlen) != 0)
        return -1;
    m->popular_transitions = ts_bin_get_u64(m->directory + E_TRANSITIONS);
    if (m->user_count > 0) {
        m->personal = calloc(m->user_count, sizeof *m->personal);
        if (m->personal == NULL)
            return ts_fail(err, errlen, "out of memory");
        for (uint32_t i = 0; i < m->user_count; i++)
            if (load_entry(base, len,
                           m->directory +
                               (size_t)(i + 1) * TS_MODEL_ENTRY_BYTES,
                           i + 1, &m->grid, m->tick_s, &m->popular,
                           &m->personal[i], err, errlen) != 0)
                return -1;
    }
    m->base = base;
    m->file_bytes = len;
    return 0;
}

int ts_model_open_buffer(const void *buf, size_t len, ts_model **out,
                         char *err, size_t errlen)
{
    *out = NULL;
    if ((uintptr_t)buf % 8 != 0)
        return ts_fail(err, errlen, "model buffer is not 8-byte aligned");
    ts_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return ts_fail(err, errlen, "out of memory");
    if (parse(buf, len, m, err, errlen) != 0) {
        free(m->personal);
        free(m);
        return -1;
    }
    atomic_init(&m->refs, 1u);
    *out = m;
    return 0;
}

int ts_model_open(const char *path, ts_model **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    const unsigned char *map;
    size_t len;
    if (ts_bin_map(&model_format, path, &map, &len, err, errlen) != 0)
        return -1;
    ts_model *m = calloc(1, sizeof *m);
    char why[400];
    if (m == NULL || parse(map, len, m, why, sizeof why) != 0) {
        if (m == NULL)
            snprintf(why, sizeof why, "out of memory");
        else
            free(m->personal);
        free(m);
        ts_bin_unmap(map, len);
        return ts_fail(err, errlen, "%s: %s", path, why);
    }
    m->mapped = 1;
    atomic_init(&m->refs, 1u);
    *out = m;
    return 0;
}

ts_model *ts_model_ref(ts_model *m)
{
    /* Relaxed: taking a reference needs no ordering, the holder already
     * sees the model through the reference it copies from. */
    atomic_fetch_add_explicit(&m->refs, 1u, memory_order_relaxed);
    return m;
}

void ts_model_close(ts_model *m)
{
    if (m == NULL)
        return;
    /* Release on every drop, acquire on the last: all uses of the model by
     * other holders happen before it is unmapped. */
    if (atomic_fetch_sub_explicit(&m->refs, 1u, memory_order_acq_rel) != 1u)
        return;
    if (m->mapped)
        ts_bin_unmap(m->base, m->file_bytes);
    free(m->personal);
    free(m);
}

const char *ts_model_user_id(const ts_model *m, uint32_t i, size_t *len)
{
    const unsigned char *e =
        m->directory + (size_t)(i + 1) * TS_MODEL_ENTRY_BYTES;
    *len = ts_bin_get_u32(e + E_NAME_BYTES);
    return (const char *)(m->names + ts_bin_get_u64(e + E_NAME));
}

const ts_markov *ts_model_personal(const ts_model *m, const char *user,
                                   size_t user_len)
{
    size_t lo = 0, hi = m->user_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2, len;
        const char *id = ts_model_user_id(m, (uint32_t)mid, &len);
        int c = compare_names((const unsigned char *)id, len,
                              (const unsigned char *)user, user_len);
        if (c == 0)
            return &m->personal[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const ts_markov *ts_model_for_user(const ts_model *m, const char *user,
                                   size_t user_len)
{
    const ts_markov *p = user != NULL ? ts_model_personal(m, user, user_len)
                                      : NULL;
    return p != NULL ? p : &m->popular;
}

/* ----------------------------------------------------------------- writing */

typedef struct layout_entry {
    const ts_model_source *src;
    uint64_t name_offset;
    uint64_t row_start, col, prob, initial;
} layout_entry;

static int compare_sources(const void *a, const void *b)
{
    const layout_entry *x = a, *y = b;
    return compare_names((const unsigned char *)x->src->user,
                         x->src->user_len,
                         (const unsigned char *)y->src->user,
                         y->src->user_len);
}

static void emit_payload(ts_bin_emitter *e, const unsigned char *directory,
                         size_t directory_bytes, const layout_entry *entries,
                         size_t models, uint32_t cells)
{
    ts_bin_emit(e, directory, directory_bytes);
    for (size_t i = 1; i < models; i++)
        ts_bin_emit(e, entries[i].src->user, entries[i].src->user_len);
    ts_bin_emit_padding(e);
    for (size_t i = 0; i < models; i++) {
        const ts_markov *mk = entries[i].src->markov;
        ts_bin_emit(e, mk->row_start, ((uint64_t)cells + 1) * 8);
        ts_bin_emit(e, mk->col, mk->nnz * 4);
        ts_bin_emit_padding(e);
        ts_bin_emit(e, mk->prob, mk->nnz * 8);
        ts_bin_emit(e, mk->initial, (uint64_t)cells * 8);
    }
}

int ts_model_write(FILE *out, const ts_grid *grid, double max_speed_mps,
                   const ts_model_source *popular,
                   const ts_model_source *personal, size_t n_personal,
                   uint64_t *bytes, char *err, size_t errlen)
{
    if (n_personal > UINT32_MAX - 1)
        return ts_fail(err, errlen, "too many personal models");
    if (!isfinite(max_speed_mps) || max_speed_mps < 0.0)
        return ts_fail(err, errlen, "invalid maximum speed");
    size_t models = n_personal + 1;
    layout_entry *entries = calloc(models, sizeof *entries);
    size_t directory_bytes = models * TS_MODEL_ENTRY_BYTES;
    unsigned char *directory = calloc(1, directory_bytes);
    int rc = -1;
    if (entries == NULL || directory == NULL) {
        ts_fail(err, errlen, "out of memory");
        goto done;
    }
    entries[0].src = popular;
    for (size_t i = 0; i < n_personal; i++)
        entries[i + 1].src = &personal[i];
    for (size_t i = 0; i < models; i++) {
        const ts_model_source *s = entries[i].src;
        char why[200];
        if (s->markov->cell_count != grid->cell_count) {
            ts_fail(err, errlen, "model %zu has %u cells, the grid %u", i,
                 s->markov->cell_count, grid->cell_count);
            goto done;
        }
        if (s->markov->tick_s != popular->markov->tick_s) {
            ts_fail(err, errlen, "model %zu has a different tick", i);
            goto done;
        }
        if (s->markov->fallback != NULL &&
            (i == 0 || s->markov->fallback != popular->markov)) {
            ts_fail(err, errlen,
                 "model %zu: only personal models may have a fallback, and "
                 "it must be the popular model",
                 i);
            goto done;
        }
        if (ts_markov_validate(s->markov, why, sizeof why) != 0) {
            ts_fail(err, errlen, "model %zu: %s", i, why);
            goto done;
        }
        if (i > 0 && (s->user == NULL || s->user_len == 0 ||
                      s->user_len > TS_MODEL_MAX_USER_BYTES)) {
            ts_fail(err, errlen, "personal model %zu: user id must have 1 to %u "
                 "bytes", i - 1, TS_MODEL_MAX_USER_BYTES);
            goto done;
        }
    }
    qsort(entries + 1, n_personal, sizeof *entries, compare_sources);
    for (size_t i = 2; i < models; i++)
        if (compare_sources(&entries[i - 1], &entries[i]) == 0) {
            ts_fail(err, errlen, "duplicate personal model for one user id");
            goto done;
        }

    /* Layout: header, directory, names, then per model its arrays. */
    uint32_t cells = grid->cell_count;
    uint64_t offset = TS_MODEL_HEADER_BYTES;
    uint64_t directory_offset = offset;
    offset += directory_bytes;
    uint64_t names_offset = offset, names_bytes = 0;
    for (size_t i = 1; i < models; i++) {
        entries[i].name_offset = names_bytes;
        names_bytes += entries[i].src->user_len;
    }
    offset = ts_bin_pad8(offset + names_bytes);
    for (size_t i = 0; i < models; i++) {
        uint64_t nnz = entries[i].src->markov->nnz;
        entries[i].row_start = offset;
        offset += ((uint64_t)cells + 1) * 8;
        entries[i].col = offset;
        offset = ts_bin_pad8(offset + nnz * 4);
        entries[i].prob = offset;
        offset += nnz * 8;
        entries[i].initial = offset;
        offset += (uint64_t)cells * 8;
    }
    uint64_t file_bytes = offset;
    for (size_t i = 0; i < models; i++) {
        unsigned char *d = directory + i * TS_MODEL_ENTRY_BYTES;
        ts_bin_put_u64(d + E_NNZ, entries[i].src->markov->nnz);
        ts_bin_put_u64(d + E_ROW_START, entries[i].row_start);
        ts_bin_put_u64(d + E_COL, entries[i].col);
        ts_bin_put_u64(d + E_PROB, entries[i].prob);
        ts_bin_put_u64(d + E_INITIAL, entries[i].initial);
        ts_bin_put_u64(d + E_TRANSITIONS, entries[i].src->transitions);
        ts_bin_put_u64(d + E_NAME, i == 0 ? 0 : entries[i].name_offset);
        ts_bin_put_u32(d + E_NAME_BYTES, i == 0 ? 0 : (uint32_t)entries[i].src->user_len);
        ts_bin_put_u32(d + E_RESERVED, 0);
    }

    ts_bin_emitter crc_pass;
    ts_bin_emitter_init(&crc_pass, NULL, TS_MODEL_HEADER_BYTES);
    emit_payload(&crc_pass, directory, directory_bytes, entries, models,
                 cells);
    if (crc_pass.offset != file_bytes) {
        ts_fail(err, errlen, "internal error: layout size mismatch");
        goto done;
    }

    unsigned char header[TS_MODEL_HEADER_BYTES];
    memset(header, 0, sizeof header);
    ts_bin_put_u32(header + H_CELLS, cells);
    ts_bin_put_u32(header + H_COLS, grid->cols);
    ts_bin_put_u32(header + H_ROWS, grid->rows);
    ts_bin_put_u32(header + H_MODELS, (uint32_t)models);
    ts_bin_put_f64(header + H_LAT_MIN, grid->lat_min);
    ts_bin_put_f64(header + H_LON_MIN, grid->lon_min);
    ts_bin_put_f64(header + H_LAT_MAX, grid->lat_max);
    ts_bin_put_f64(header + H_LON_MAX, grid->lon_max);
    ts_bin_put_f64(header + H_CELL_M, grid->cell_m);
    ts_bin_put_f64(header + H_TICK_S, popular->markov->tick_s);
    ts_bin_put_f64(header + H_MAX_SPEED, max_speed_mps);
    ts_bin_put_u64(header + H_DIRECTORY, directory_offset);
    ts_bin_put_u64(header + H_NAMES, names_offset);
    ts_bin_put_u64(header + H_NAMES_BYTES, names_bytes);
    ts_bin_seal_header(&model_format, header, file_bytes, crc_pass.crc);

    ts_bin_emitter write_pass;
    ts_bin_emitter_init(&write_pass, out, TS_MODEL_HEADER_BYTES);
    if (fwrite(header, 1, sizeof header, out) != sizeof header)
        write_pass.failed = 1;
    emit_payload(&write_pass, directory, directory_bytes, entries, models,
                 cells);
    if (write_pass.failed || fflush(out) != 0) {
        ts_fail(err, errlen, "write error: %s", strerror(errno));
        goto done;
    }
    if (bytes != NULL)
        *bytes = file_bytes;
    rc = 0;
done:
    free(entries);
    free(directory);
    return rc;
}

typedef struct model_write_args {
    const ts_grid *grid;
    double max_speed_mps;
    const ts_model_source *popular;
    const ts_model_source *personal;
    size_t n_personal;
    uint64_t *bytes;
} model_write_args;

static int write_model_to(FILE *out, void *ctx, char *why, size_t whylen)
{
    const model_write_args *a = ctx;
    return ts_model_write(out, a->grid, a->max_speed_mps, a->popular,
                          a->personal, a->n_personal, a->bytes, why, whylen);
}

int ts_model_write_file(const char *path, const ts_grid *grid,
                        double max_speed_mps, const ts_model_source *popular,
                        const ts_model_source *personal, size_t n_personal,
                        uint64_t *bytes, char *err, size_t errlen)
{
    model_write_args args = {grid, max_speed_mps, popular, personal,
                             n_personal, bytes};
    return ts_bin_write_file(path, write_model_to, &args, err, errlen);
}
