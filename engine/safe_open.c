#include "engine/safe_open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a file";
}

static int refuse_kind(mode_t mode, char *why, size_t why_len)
{
    snprintf(why, why_len, "not a regular file (%s)", file_kind(mode));
    return -1;
}

int ts_open_regular(const char *path, struct stat *st, char *why,
                    size_t why_len)
{
    /* O_NONBLOCK: a FIFO opens at once instead of waiting for a writer,
     * a terminal does not become our controlling one. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        return -1;
    }
    int flags;
    if (fstat(fd, st) != 0 || (flags = fcntl(fd, F_GETFL)) < 0 ||
        (S_ISREG(st->st_mode) &&
         fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)) {
        snprintf(why, why_len, "%s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        refuse_kind(st->st_mode, why, why_len);
        close(fd);
        return -1;
    }
    return fd;
}

FILE *ts_fopen_regular(const char *path, char *why, size_t why_len)
{
    struct stat st;
    int fd = ts_open_regular(path, &st, why, why_len);
    if (fd < 0)
        return NULL;
    FILE *file = fdopen(fd, "r");
    if (file == NULL) {
        snprintf(why, why_len, "%s", strerror(errno));
        close(fd);
    }
    return file;
}

char *ts_read_regular(const char *path, size_t max_bytes, size_t *size,
                      char *why, size_t why_len)
{
    struct stat st;
    int fd = ts_open_regular(path, &st, why, why_len);
    if (fd < 0)
        return NULL;
    /* The file may grow while we read: read one byte more than allowed
     * rather than trusting st_size. */
    size_t cap = st.st_size >= 0 && (size_t)st.st_size < max_bytes
                     ? (size_t)st.st_size + 1 : max_bytes + 1;
    char *text = malloc(cap + 1);
    size_t used = 0;
    int error = text == NULL ? ENOMEM : 0;
    while (error == 0 && used <= max_bytes) {
        if (used == cap) {
            size_t bigger = cap * 2 < max_bytes + 1 ? cap * 2 : max_bytes + 1;
            char *grown = realloc(text, bigger + 1);
            if (grown == NULL) {
                error = ENOMEM;
                break;
            }
            text = grown;
            cap = bigger;
        }
        ssize_t n = read(fd, text + used, cap - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            error = errno;
        else if (n == 0)
            break;
        else
            used += (size_t)n;
    }
    close(fd);
    if (error == 0 && used > max_bytes) {
        snprintf(why, why_len, "larger than %zu bytes", max_bytes);
        free(text);
        errno = EFBIG;
        return NULL;
    }
    if (error != 0) {
        snprintf(why, why_len, "%s", strerror(error));
        free(text);
        errno = error == EFBIG ? EIO : error;
        return NULL;
    }
    text[used] = '\0';
    *size = used;
    return text;
}

int ts_check_regular(const char *path, int missing_ok, char *why,
                     size_t why_len)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (missing_ok && errno == ENOENT)
            return 0;
        snprintf(why, why_len, "%s", strerror(errno));
        return -1;
    }
    return S_ISREG(st.st_mode) ? 0 : refuse_kind(st.st_mode, why, why_len);
}
