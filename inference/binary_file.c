#include "inference/binary_file.h"
#include "inference/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

uint32_t ts_bin_crc_init(void)
{
    return (uint32_t)crc32(0L, Z_NULL, 0);
}

/* zlib's crc32 takes a 32-bit length. */
uint32_t ts_bin_crc_update(uint32_t crc, const void *data, uint64_t len)
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

uint32_t ts_bin_crc(const void *data, uint64_t len)
{
    return ts_bin_crc_update(ts_bin_crc_init(), data, len);
}

int ts_bin_section_ok(uint64_t offset, uint64_t count, uint64_t size,
                      uint64_t start, uint64_t end)
{
    if (offset % 8 != 0 || offset < start || offset > end)
        return 0;
    if (size != 0 && count > (end - offset) / size)
        return 0;
    return 1;
}

int ts_bin_check(const ts_bin_format *f, const unsigned char *base,
                 size_t len, char *err, size_t errlen)
{
    uint32_t hb = f->header_bytes;
    if (len < hb)
        return ts_fail(err, errlen,
                       "not a tracesan %s file (%zu bytes, shorter than the "
                       "header)",
                       f->noun, len);
    if (memcmp(base + TS_BIN_MAGIC, f->magic, 8) != 0)
        return ts_fail(err, errlen, "not a tracesan %s file (bad magic)",
                       f->noun);
    uint32_t version = ts_bin_get_u32(base + TS_BIN_VERSION);
    if (version > f->version)
        return ts_fail(err, errlen,
                       "%s format version %u is newer than this build reads "
                       "(up to %u): upgrade tracesan or %s",
                       f->noun, version, f->version, f->renew);
    if (version == 0)
        return ts_fail(err, errlen, "invalid %s format version 0", f->noun);
    if (ts_bin_get_u32(base + TS_BIN_HEADER_BYTES) != hb)
        return ts_fail(err, errlen, "bad header size");
    if (ts_bin_get_u32(base + hb - 4) != ts_bin_crc(base, hb - 4))
        return ts_fail(err, errlen, "header checksum mismatch (corrupt file)");
    uint64_t file_bytes = ts_bin_get_u64(base + TS_BIN_FILE_BYTES);
    if (file_bytes != len)
        return ts_fail(err, errlen,
                       "file is %zu bytes but its header says %llu "
                       "(truncated or extended)",
                       len, (unsigned long long)file_bytes);
    if (ts_bin_get_u32(base + hb - 8) != ts_bin_crc(base + hb, len - hb))
        return ts_fail(err, errlen,
                       "payload checksum mismatch (corrupt file)");
    return 0;
}

void ts_bin_seal_header(const ts_bin_format *f, unsigned char *header,
                        uint64_t file_bytes, uint32_t payload_crc)
{
    uint32_t hb = f->header_bytes;
    memcpy(header + TS_BIN_MAGIC, f->magic, 8);
    ts_bin_put_u32(header + TS_BIN_VERSION, f->version);
    ts_bin_put_u32(header + TS_BIN_HEADER_BYTES, hb);
    ts_bin_put_u64(header + TS_BIN_FILE_BYTES, file_bytes);
    ts_bin_put_u32(header + hb - 8, payload_crc);
    ts_bin_put_u32(header + hb - 4, ts_bin_crc(header, hb - 4));
}

int ts_bin_map(const ts_bin_format *f, const char *path,
               const unsigned char **base, size_t *len, char *err,
               size_t errlen)
{
    *base = NULL;
    *len = 0;
    /* O_NONBLOCK: a FIFO here would otherwise block open() until a
     * writer came; it is refused below as not a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
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
    if (st.st_size < (off_t)f->header_bytes) {
        close(fd);
        return ts_fail(err, errlen,
                       "%s: not a tracesan %s file (%lld bytes, shorter "
                       "than the header)",
                       path, f->noun, (long long)st.st_size);
    }
    /* A copy in memory of our own, not a mapping of the file: truncating a
     * mapped file makes the next read of a page past its new end raise
     * SIGBUS, and rewriting it in place would change the data after it
     * was validated (issue 25, item 12). read() meets a file cut short
     * with a short count instead. */
    size_t n = (size_t)st.st_size;
    unsigned char *map = mmap(NULL, n, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        return ts_fail(err, errlen, "%s: cannot hold its %zu bytes: %s",
                       path, n, strerror(e));
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, map + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            munmap(map, n);
            if (r < 0)
                return ts_fail(err, errlen, "%s: %s", path, strerror(e));
            return ts_fail(err, errlen, "%s: shrank from %zu to %zu bytes "
                           "while being read", path, n, got);
        }
        got += (size_t)r;
    }
    close(fd);
    /* Read-only from here, as a mapping of the file was. */
    if (mprotect(map, n, PROT_READ) != 0) {
        int e = errno;
        munmap(map, n);
        return ts_fail(err, errlen, "%s: mprotect: %s", path, strerror(e));
    }
    *base = map;
    *len = n;
    return 0;
}

void ts_bin_unmap(const unsigned char *base, size_t len)
{
    if (base != NULL)
        munmap((void *)base, len);
}

void ts_bin_emitter_init(ts_bin_emitter *e, FILE *out, uint64_t offset)
{
    e->out = out;
    e->crc = ts_bin_crc_init();
    e->offset = offset;
    e->failed = 0;
}

void ts_bin_emit(ts_bin_emitter *e, const void *data, uint64_t len)
{
    if (len == 0)
        return;
    e->crc = ts_bin_crc_update(e->crc, data, len);
    e->offset += len;
    if (e->out != NULL && !e->failed && fwrite(data, 1, len, e->out) != len)
        e->failed = 1;
}

void ts_bin_emit_padding(ts_bin_emitter *e)
{
    static const unsigned char zeros[8];
    ts_bin_emit(e, zeros, ts_bin_pad8(e->offset) - e->offset);
}

int ts_bin_write_file(const char *path, ts_bin_writer write, void *ctx,
                      char *err, size_t errlen)
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
    int rc = write(out, ctx, why, sizeof why);
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
