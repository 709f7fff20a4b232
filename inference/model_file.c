#include "inference/model_file.h"
#include "inference/error.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The arrays are used in place from the mapping, so the file's byte order
 * must be the host's. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "model files are little-endian and mapped in place: little-endian hosts only"
#endif

/* Header field offsets (see the header comment). */
enum {
    H_MAGIC = 0, H_VERSION = 8, H_HEADER_BYTES = 12, H_FILE_BYTES = 16,
    H_CELLS = 24, H_COLS = 28, H_ROWS = 32, H_MODELS = 36, H_LAT_MIN = 40,
    H_LON_MIN = 48, H_LAT_MAX = 56, H_LON_MAX = 64, H_CELL_M = 72,
    H_TICK_S = 80, H_MAX_SPEED = 88, H_DIRECTORY = 96, H_NAMES = 104,
    H_NAMES_BYTES = 112, H_PAYLOAD_CRC = 120, H_HEADER_CRC = 124
};
/* Directory entry field offsets. */
enum {
    E_NNZ = 0, E_ROW_START = 8, E_COL = 16, E_PROB = 24, E_INITIAL = 32,
    E_TRANSITIONS = 40, E_NAME = 48, E_NAME_BYTES = 56, E_RESERVED = 60
};

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static double get_f64(const unsigned char *p)
{
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}

static void put_f64(unsigned char *p, double v)
{
    memcpy(p, &v, sizeof v);
}

/* zlib's crc32 takes a 32-bit length. */
static uint32_t crc_update(uint32_t crc, const void *data, uint64_t len)
{
    const unsigned char *p = data;
    uLong c = crc;
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return (uint32_t)c;
}

static uint32_t crc_of(const void *data, uint64_t len)
{
    return crc_update((uint32_t)crc32(0L, Z_NULL, 0), data, len);
}

static uint64_t pad8(uint64_t n)
{
    return (n + 7) & ~(uint64_t)7;
}

/* ----------------------------------------------------------------- loading */

/* 1 when [offset, offset + count * size) lies inside [start, end), without
 * overflow, and offset is 8-byte aligned. */
static int section_ok(uint64_t offset, uint64_t count, uint64_t size,
                      uint64_t start, uint64_t end)
{
    if (offset % 8 != 0 || offset < start || offset > end)
        return 0;
    if (size != 0 && count > (end - offset) / size)
        return 0;
    return 1;
}

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
    uint64_t nnz = get_u64(entry + E_NNZ);
    uint64_t row_start = get_u64(entry + E_ROW_START);
    uint64_t col = get_u64(entry + E_COL);
    uint64_t prob = get_u64(entry + E_PROB);
    uint64_t initial = get_u64(entry + E_INITIAL);
    uint64_t cells = grid->cell_count;
    if (!section_ok(row_start, cells + 1, 8, TS_MODEL_HEADER_BYTES,
                    file_bytes) ||
        !section_ok(col, nnz, 4, TS_MODEL_HEADER_BYTES, file_bytes) ||
        !section_ok(prob, nnz, 8, TS_MODEL_HEADER_BYTES, file_bytes) ||
        !section_ok(initial, cells, 8, TS_MODEL_HEADER_BYTES, file_bytes))
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
    if (len < TS_MODEL_HEADER_BYTES)
        return ts_fail(err, errlen,
                    "not a tracesan model file (%zu bytes, shorter than the "
                    "header)",
                    len);
    if (memcmp(base + H_MAGIC, TS_MODEL_MAGIC, 8) != 0)
        return ts_fail(err, errlen, "not a tracesan model file (bad magic)");
    uint32_t version = get_u32(base + H_VERSION);
    if (version > TS_MODEL_VERSION)
        return ts_fail(err, errlen,
                    "model format version %u is newer than this build reads "
                    "(up to %u): upgrade tracesan or relearn the model",
                    version, TS_MODEL_VERSION);
    if (version == 0)
        return ts_fail(err, errlen, "invalid model format version 0");
    if (get_u32(base + H_HEADER_BYTES) != TS_MODEL_HEADER_BYTES)
        return ts_fail(err, errlen, "bad header size");
    if (get_u32(base + H_HEADER_CRC) != crc_of(base, H_HEADER_CRC))
        return ts_fail(err, errlen, "header checksum mismatch (corrupt file)");
    uint64_t file_bytes = get_u64(base + H_FILE_BYTES);
    if (file_bytes != len)
        return ts_fail(err, errlen,
                    "file is %zu bytes but its header says %llu (truncated "
                    "or extended)",
                    len, (unsigned long long)file_bytes);
    if (get_u32(base + H_PAYLOAD_CRC) !=
        crc_of(base + TS_MODEL_HEADER_BYTES, len - TS_MODEL_HEADER_BYTES))
        return ts_fail(err, errlen, "payload checksum mismatch (corrupt file)");

    char why[200];
    if (ts_grid_init(&m->grid, get_f64(base + H_LAT_MIN),
                     get_f64(base + H_LON_MIN), get_f64(base + H_LAT_MAX),
                     get_f64(base + H_LON_MAX), get_f64(base + H_CELL_M), why,
                     sizeof why) != 0)
        return ts_fail(err, errlen, "region: %s", why);
    if (m->grid.cell_count != get_u32(base + H_CELLS) ||
        m->grid.cols != get_u32(base + H_COLS) ||
        m->grid.rows != get_u32(base + H_ROWS))
        return ts_fail(err, errlen,
                    "grid of %u x %u cells in the header, but its region and "
                    "cell size give %u x %u here",
                    get_u32(base + H_COLS), get_u32(base + H_ROWS),
                    m->grid.cols, m->grid.rows);
    m->tick_s = get_f64(base + H_TICK_S);
    if (!isfinite(m->tick_s) || !(m->tick_s > 0.0))
        return ts_fail(err, errlen, "tick must be positive and finite");
    m->max_speed_mps = get_f64(base + H_MAX_SPEED);
    if (!isfinite(m->max_speed_mps) || m->max_speed_mps < 0.0)
        return ts_fail(err, errlen, "invalid maximum speed");

    uint32_t models = get_u32(base + H_MODELS);
    uint64_t directory = get_u64(base + H_DIRECTORY);
    uint64_t names = get_u64(base + H_NAMES);
    uint64_t names_bytes = get_u64(base + H_NAMES_BYTES);
    if (models == 0)
        return ts_fail(err, errlen, "no popular model");
    if (!section_ok(directory, models, TS_MODEL_ENTRY_BYTES,
                    TS_MODEL_HEADER_BYTES, len) ||
        !section_ok(names, names_bytes, 1, TS_MODEL_HEADER_BYTES, len))
        return ts_fail(err, errlen, "directory or names outside the file");
    m->directory = base + directory;
    m->names = base + names;
    m->user_count = models - 1;

    for (uint32_t i = 0; i < models; i++) {
        const unsigned char *e = m->directory + (size_t)i * TS_MODEL_ENTRY_BYTES;
        uint64_t name = get_u64(e + E_NAME);
        uint32_t name_len = get_u32(e + E_NAME_BYTES);
        if (get_u32(e + E_RESERVED) != 0)
            return ts_fail(err, errlen, "model %u: reserved field is not 0", i);
        if (i == 0 ? name_len != 0
                   : (name_len == 0 || name_len > TS_MODEL_MAX_USER_BYTES ||
                      name > names_bytes || name_len > names_bytes - name))
            return ts_fail(err, errlen, "model %u: bad user id", i);
        if (i >= 2) {
            const unsigned char *prev = e - TS_MODEL_ENTRY_BYTES;
            if (compare_names(m->names + get_u64(prev + E_NAME),
                              get_u32(prev + E_NAME_BYTES), m->names + name,
                              name_len) >= 0)
                return ts_fail(err, errlen,
                            "model %u: user ids not sorted or duplicated", i);
        }
    }
    if (load_entry(base, len, m->directory, 0, &m->grid, m->tick_s, NULL,
                   &m->popular, err, errlen) != 0)
        return -1;
    m->popular_transitions = get_u64(m->directory + E_TRANSITIONS);
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ts_fail(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ts_fail(err, errlen, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ts_fail(err, errlen, "%s: not a regular file", path);
    }
    if (st.st_size < (off_t)TS_MODEL_HEADER_BYTES) {
        close(fd);
        return ts_fail(err, errlen,
                    "%s: not a tracesan model file (%lld bytes, shorter "
                    "than the header)",
                    path, (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return ts_fail(err, errlen, "%s: mmap: %s", path, strerror(e));
    ts_model *m = calloc(1, sizeof *m);
    char why[400];
    if (m == NULL || parse(map, len, m, why, sizeof why) != 0) {
        if (m == NULL)
            snprintf(why, sizeof why, "out of memory");
        else
            free(m->personal);
        free(m);
        munmap(map, len);
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
        munmap((void *)m->base, m->file_bytes);
    free(m->personal);
    free(m);
}

const char *ts_model_user_id(const ts_model *m, uint32_t i, size_t *len)
{
    const unsigned char *e =
        m->directory + (size_t)(i + 1) * TS_MODEL_ENTRY_BYTES;
    *len = get_u32(e + E_NAME_BYTES);
    return (const char *)(m->names + get_u64(e + E_NAME));
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

/* Streams the payload either into the CRC only (pass 1) or to the file as
 * well (pass 2), so a pipe can be written without seeking back. */
typedef struct emitter {
    FILE *out;
    uint32_t crc;
    uint64_t offset;
    int failed;
} emitter;

static void emit(emitter *e, const void *data, uint64_t len)
{
    if (len == 0)
        return;
    e->crc = crc_update(e->crc, data, len);
    e->offset += len;
    if (e->out != NULL && !e->failed && fwrite(data, 1, len, e->out) != len)
        e->failed = 1;
}

static void emit_padding(emitter *e)
{
    static const unsigned char zeros[8];
    emit(e, zeros, pad8(e->offset) - e->offset);
}

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

static void emit_payload(emitter *e, const unsigned char *directory,
                         size_t directory_bytes, const layout_entry *entries,
                         size_t models, uint32_t cells)
{
    emit(e, directory, directory_bytes);
    for (size_t i = 1; i < models; i++)
        emit(e, entries[i].src->user, entries[i].src->user_len);
    emit_padding(e);
    for (size_t i = 0; i < models; i++) {
        const ts_markov *mk = entries[i].src->markov;
        emit(e, mk->row_start, ((uint64_t)cells + 1) * 8);
        emit(e, mk->col, mk->nnz * 4);
        emit_padding(e);
        emit(e, mk->prob, mk->nnz * 8);
        emit(e, mk->initial, (uint64_t)cells * 8);
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
    offset = pad8(offset + names_bytes);
    for (size_t i = 0; i < models; i++) {
        uint64_t nnz = entries[i].src->markov->nnz;
        entries[i].row_start = offset;
        offset += ((uint64_t)cells + 1) * 8;
        entries[i].col = offset;
        offset = pad8(offset + nnz * 4);
        entries[i].prob = offset;
        offset += nnz * 8;
        entries[i].initial = offset;
        offset += (uint64_t)cells * 8;
    }
    uint64_t file_bytes = offset;
    for (size_t i = 0; i < models; i++) {
        unsigned char *d = directory + i * TS_MODEL_ENTRY_BYTES;
        put_u64(d + E_NNZ, entries[i].src->markov->nnz);
        put_u64(d + E_ROW_START, entries[i].row_start);
        put_u64(d + E_COL, entries[i].col);
        put_u64(d + E_PROB, entries[i].prob);
        put_u64(d + E_INITIAL, entries[i].initial);
        put_u64(d + E_TRANSITIONS, entries[i].src->transitions);
        put_u64(d + E_NAME, i == 0 ? 0 : entries[i].name_offset);
        put_u32(d + E_NAME_BYTES, i == 0 ? 0 : (uint32_t)entries[i].src->user_len);
        put_u32(d + E_RESERVED, 0);
    }

    emitter crc_pass = {.out = NULL,
                        .crc = (uint32_t)crc32(0L, Z_NULL, 0),
                        .offset = TS_MODEL_HEADER_BYTES};
    emit_payload(&crc_pass, directory, directory_bytes, entries, models,
                 cells);
    if (crc_pass.offset != file_bytes) {
        ts_fail(err, errlen, "internal error: layout size mismatch");
        goto done;
    }

    unsigned char header[TS_MODEL_HEADER_BYTES];
    memset(header, 0, sizeof header);
    memcpy(header + H_MAGIC, TS_MODEL_MAGIC, 8);
    put_u32(header + H_VERSION, TS_MODEL_VERSION);
    put_u32(header + H_HEADER_BYTES, TS_MODEL_HEADER_BYTES);
    put_u64(header + H_FILE_BYTES, file_bytes);
    put_u32(header + H_CELLS, cells);
    put_u32(header + H_COLS, grid->cols);
    put_u32(header + H_ROWS, grid->rows);
    put_u32(header + H_MODELS, (uint32_t)models);
    put_f64(header + H_LAT_MIN, grid->lat_min);
    put_f64(header + H_LON_MIN, grid->lon_min);
    put_f64(header + H_LAT_MAX, grid->lat_max);
    put_f64(header + H_LON_MAX, grid->lon_max);
    put_f64(header + H_CELL_M, grid->cell_m);
    put_f64(header + H_TICK_S, popular->markov->tick_s);
    put_f64(header + H_MAX_SPEED, max_speed_mps);
    put_u64(header + H_DIRECTORY, directory_offset);
    put_u64(header + H_NAMES, names_offset);
    put_u64(header + H_NAMES_BYTES, names_bytes);
    put_u32(header + H_PAYLOAD_CRC, crc_pass.crc);
    put_u32(header + H_HEADER_CRC, crc_of(header, H_HEADER_CRC));

    emitter write_pass = {.out = out,
                          .crc = (uint32_t)crc32(0L, Z_NULL, 0),
                          .offset = TS_MODEL_HEADER_BYTES};
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

int ts_model_write_file(const char *path, const ts_grid *grid,
                        double max_speed_mps, const ts_model_source *popular,
                        const ts_model_source *personal, size_t n_personal,
                        uint64_t *bytes, char *err, size_t errlen)
{
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (tmp == NULL)
        return ts_fail(err, errlen, "out of memory");
    snprintf(tmp, n + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return ts_fail(err, errlen, "%s: cannot create a temporary file: %s",
                    path, strerror(e));
    }
    /* mkstemp creates 0600; give the file the mode a plain creation would
     * have. */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        return ts_fail(err, errlen, "%s: chmod: %s", path, strerror(e));
    }
    FILE *out = fdopen(fd, "wb");
    if (out == NULL) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        return ts_fail(err, errlen, "%s: %s", path, strerror(e));
    }
    char why[300];
    int rc = ts_model_write(out, grid, max_speed_mps, popular, personal,
                            n_personal, bytes, why, sizeof why);
    if (rc == 0 && fsync(fileno(out)) != 0) {
        snprintf(why, sizeof why, "fsync: %s", strerror(errno));
        rc = -1;
    }
    if (fclose(out) != 0 && rc == 0) {
        snprintf(why, sizeof why, "close: %s", strerror(errno));
        rc = -1;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(why, sizeof why, "rename: %s", strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        unlink(tmp);
        ts_fail(err, errlen, "%s: %s", path, why);
    }
    free(tmp);
    return rc;
}
