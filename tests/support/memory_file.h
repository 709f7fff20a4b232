/* A binary file (model, channel) as its writer produces it, in memory and
 * 8-byte aligned like the mapped files its loader reads. */
#ifndef TRACESAN_TESTS_SUPPORT_MEMORY_FILE_H
#define TRACESAN_TESTS_SUPPORT_MEMORY_FILE_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes the file to out and the byte count to *bytes: 0, or -1 with a
 * message in err. */
typedef int (*ts_test_file_writer)(FILE *out, const void *ctx,
                                   uint64_t *bytes, char *err,
                                   size_t errlen);

/* The bytes `write` produces (checked against what it counted); the
 * caller frees them. */
static inline unsigned char *ts_test_memory_file(ts_test_file_writer write,
                                                 const void *ctx, size_t *len)
{
    char *data = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&data, &size);
    ck_assert_ptr_nonnull(out);
    char err[300];
    uint64_t bytes = 0;
    ck_assert_msg(write(out, ctx, &bytes, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(fclose(out), 0);
    ck_assert_uint_eq(bytes, size);
    unsigned char *buf = NULL;
    ck_assert_int_eq(posix_memalign((void **)&buf, 8, size ? size : 8), 0);
    memcpy(buf, data, size);
    free(data);
    *len = size;
    return buf;
}

#endif
