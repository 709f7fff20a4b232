/* Opening a file named by configuration (the configuration file and its
 * includes, token and key files, the dashboard's files, the store's) so
 * that it cannot block: open(2) of a FIFO waits for a writer, and a device
 * may never end, which on the event loop stops /healthz and every update
 * (issue 25, item 5). A path is opened O_NONBLOCK, refused unless it is a
 * regular file, and only then read, blocking again as usual.
 *
 * Each function fills `why` with the reason alone ("No such file or
 * directory", "not a regular file (a FIFO)"); callers say which file.
 */
#ifndef TRACESAN_ENGINE_SAFE_OPEN_H
#define TRACESAN_ENGINE_SAFE_OPEN_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

/* A descriptor reading PATH (O_CLOEXEC), with *st filled; or -1. */
int ts_open_regular(const char *path, struct stat *st, char *why,
                    size_t why_len);

/* The same as a stdio stream ("r"); NULL on refusal. */
FILE *ts_fopen_regular(const char *path, char *why, size_t why_len);

/* PATH's whole content if it is a regular file of at most max_bytes:
 * malloc'ed, NUL-terminated, its length in *size. NULL otherwise, with
 * errno EFBIG when (only when) the file was too large. */
char *ts_read_regular(const char *path, size_t max_bytes, size_t *size,
                      char *why, size_t why_len);

/* For a file another library opens itself (the NATS client's credentials
 * and certificates, the store's): 0 when PATH is a regular file, or does
 * not exist and missing_ok; else -1. */
int ts_check_regular(const char *path, int missing_ok, char *why,
                     size_t why_len);

#endif
