/* What the libFuzzer targets share: a broken promise aborts, naming the
 * target (libFuzzer then keeps the input), and an input reaches code that
 * only takes a path through a memfd opened by its /proc/self/fd path.
 * The includer defines _GNU_SOURCE before any include, and TS_FUZZ_TARGET
 * ("fuzz_csv") before this one. */
#ifndef TRACESAN_TESTS_FUZZ_FUZZ_SUPPORT_H
#define TRACESAN_TESTS_FUZZ_FUZZ_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* libFuzzer's entry points: every target defines the second, those that
 * set something up once the first. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline void ts_fuzz_die(const char *what)
{
    fprintf(stderr, TS_FUZZ_TARGET ": %s\n", what);
    abort();
}

/* One memfd reused for every input: one per input would leak descriptors
 * on the crash path and cost a syscall pair each time. */
typedef struct ts_fuzz_file {
    int fd;
    char path[64];
} ts_fuzz_file;

static inline void ts_fuzz_file_open(ts_fuzz_file *file, const char *name)
{
    file->fd = memfd_create(name, 0);
    if (file->fd < 0)
        ts_fuzz_die("memfd_create failed");
    snprintf(file->path, sizeof file->path, "/proc/self/fd/%d", file->fd);
}

/* The file's contents become data[0 .. size). */
static inline void ts_fuzz_file_write(const ts_fuzz_file *file,
                                      const uint8_t *data, size_t size)
{
    if (ftruncate(file->fd, 0) != 0)
        ts_fuzz_die("ftruncate failed");
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(file->fd, data + done, size - done, (off_t)done);
        if (n <= 0)
            ts_fuzz_die("pwrite failed");
        done += (size_t)n;
    }
}

#endif
