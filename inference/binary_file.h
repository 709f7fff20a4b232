/* What every versioned binary file of tracesan shares (model files,
 * inference/model_file.h; channel files, inference/channel_file.h), so
 * that both are checked and replaced the same way:
 *
 *   header: 0 char[8] magic, 8 u32 version, 12 u32 header bytes,
 *           16 u64 file bytes, ..., header bytes - 8: u32 CRC-32 of the
 *           payload (header bytes .. end), header bytes - 4: u32 CRC-32 of
 *           the header before it.
 *
 * Little-endian, IEEE 754, used in place from a read-only copy in memory
 * (ts_bin_map); every array starts on an 8-byte boundary. A file is
 * replaced by writing a temporary file in the same directory and renaming
 * it over the old one, and a running process reads the new one at its
 * next load; what it holds never changes under it. */
#ifndef TRACESAN_INFERENCE_BINARY_FILE_H
#define TRACESAN_INFERENCE_BINARY_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tracesan's binary files are little-endian and mapped in place: little-endian hosts only"
#endif

/* Offsets every format shares. */
enum {
    TS_BIN_MAGIC = 0,
    TS_BIN_VERSION = 8,
    TS_BIN_HEADER_BYTES = 12,
    TS_BIN_FILE_BYTES = 16,
};

/* A format: how its messages name it and what the loader accepts. */
typedef struct ts_bin_format {
    const char *magic;        /* 8 bytes, not terminated in the file */
    uint32_t version;         /* newest this build reads and writes */
    uint32_t header_bytes;    /* multiple of 8, >= 32 */
    const char *noun;         /* "model", "channel" */
    const char *renew;        /* how to get a file this build reads:
                                 "relearn the model" */
} ts_bin_format;

static inline uint32_t ts_bin_get_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t ts_bin_get_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline double ts_bin_get_f64(const unsigned char *p)
{
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void ts_bin_put_u32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

static inline void ts_bin_put_u64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}

static inline void ts_bin_put_f64(unsigned char *p, double v)
{
    memcpy(p, &v, sizeof v);
}

static inline uint64_t ts_bin_pad8(uint64_t n)
{
    return (n + 7) & ~(uint64_t)7;
}

/* CRC-32 (zlib's) of len bytes, any length; ts_bin_crc_update continues
 * one started with ts_bin_crc_init. */
uint32_t ts_bin_crc_init(void);
uint32_t ts_bin_crc_update(uint32_t crc, const void *data, uint64_t len);
uint32_t ts_bin_crc(const void *data, uint64_t len);

/* 1 when [offset, offset + count * size) lies inside [start, end), without
 * overflow, and offset is 8-byte aligned. */
int ts_bin_section_ok(uint64_t offset, uint64_t count, uint64_t size,
                      uint64_t start, uint64_t end);

/* Checks the shared part of a file held in [base, base + len): length,
 * magic, version (a newer one is refused with a message asking for a newer
 * tracesan or a renewed file), header size, header checksum, the recorded
 * length against len, payload checksum. 0, or -1 with the reason. */
int ts_bin_check(const ts_bin_format *format, const unsigned char *base,
                 size_t len, char *err, size_t errlen);

/* Fills the shared header fields and both checksums of `header`
 * (format->header_bytes bytes whose format-specific fields are set), for
 * a file of file_bytes whose payload has CRC payload_crc. */
void ts_bin_seal_header(const ts_bin_format *format, unsigned char *header,
                        uint64_t file_bytes, uint32_t payload_crc);

/* Reads PATH into a read-only anonymous mapping of its own after checking
 * it is a regular file at least format->header_bytes long: a copy, so that
 * the file may be truncated or rewritten in place without the process
 * seeing it (a mapping of the file would raise SIGBUS past a truncation).
 * 0 with *base and *len set, or -1 with "PATH: reason". Undo with
 * ts_bin_unmap. */
int ts_bin_map(const ts_bin_format *format, const char *path,
               const unsigned char **base, size_t *len, char *err,
               size_t errlen);
void ts_bin_unmap(const unsigned char *base, size_t len);

/* Streams a payload into the CRC only (out NULL: the first pass, for the
 * header) or to out as well (the second), so a pipe can be written
 * without seeking back. */
typedef struct ts_bin_emitter {
    FILE *out;
    uint32_t crc;
    uint64_t offset;
    int failed;
} ts_bin_emitter;

void ts_bin_emitter_init(ts_bin_emitter *e, FILE *out, uint64_t offset);
void ts_bin_emit(ts_bin_emitter *e, const void *data, uint64_t len);
void ts_bin_emit_padding(ts_bin_emitter *e);

/* Writes PATH through a temporary file in the same directory (mode as a
 * plain creation would give), fsynced, renamed over PATH once `write`
 * returned 0. `write` gets the open stream and ctx and returns 0 or -1
 * with its reason in why. -1 with "PATH: reason" otherwise. */
typedef int (*ts_bin_writer)(FILE *out, void *ctx, char *why,
                             size_t whylen);
int ts_bin_write_file(const char *path, ts_bin_writer write, void *ctx,
                      char *err, size_t errlen);

#endif
