#include "tools/jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "wire/json_codec.h"
#include "tools/csv.h"
#include "tracesan/v1/tracesan.pb-c.h"

#define FIRST_BUFFER_BYTES (64 * 1024)
#define READ_CHUNK_BYTES (64 * 1024)
#define UTF8_BOM "\xEF\xBB\xBF"

struct ts_jsonl_reader {
    const ProtobufCMessageDescriptor *descriptor;
    gzFile gz;               /* regular files; NULL for stdin and pipes */
    int fd;                  /* stdin and pipes, read as bytes arrive */
    char *buffer;
    size_t start;            /* first byte not yet returned */
    size_t scanned;          /* [start, scanned) holds no newline */
    size_t end;
    size_t capacity;
    int eof;
    int discarding;          /* inside a line past TS_JSON_MAX_BYTES */
    size_t line;             /* lines consumed */
    ts_codec_arena arena;    /* the last message read */
};

ts_jsonl_reader *ts_jsonl_open(const char *path,
                               const ProtobufCMessageDescriptor *descriptor,
                               char *err, size_t errlen)
{
    ts_jsonl_reader *reader = calloc(1, sizeof *reader);
    char *buffer = malloc(FIRST_BUFFER_BYTES);
    if (reader == NULL || buffer == NULL) {
        free(reader);
        free(buffer);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    reader->descriptor = descriptor;
    reader->buffer = buffer;
    reader->capacity = FIRST_BUFFER_BYTES;
    reader->fd = -1;
    ts_codec_arena_init(&reader->arena);
    int fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO)
                                    : open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        ts_jsonl_close(reader);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        /* zlib would wait for a whole buffer of a live stream. */
        reader->fd = fd;
        return reader;
    }
    reader->gz = gzdopen(fd, "rb");
    if (reader->gz == NULL) {
        close(fd);
        snprintf(err, errlen, "%s: out of memory", path);
        ts_jsonl_close(reader);
        return NULL;
    }
    return reader;
}

void ts_jsonl_close(ts_jsonl_reader *reader)
{
    if (reader == NULL)
        return;
    if (reader->gz != NULL)
        gzclose(reader->gz);
    if (reader->fd >= 0)
        close(reader->fd);
    ts_codec_arena_free(&reader->arena);
    free(reader->buffer);
    free(reader);
}

int ts_jsonl_open_updates(const char *path, int jsonl,
                          struct ts_csv_reader **csv, ts_jsonl_reader **json,
                          char *err, size_t errlen)
{
    *csv = NULL;
    *json = NULL;
    if (jsonl)
        *json = ts_jsonl_open(path, &tracesan__v1__location_update__descriptor,
                              err, errlen);
    else
        *csv = ts_csv_open(path, err, errlen);
    return *csv != NULL || *json != NULL ? 0 : -1;
}

static int is_blank(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r')
            return 0;
    return 1;
}

/* Room for at least one more chunk after `end`. */
static int make_room(ts_jsonl_reader *reader)
{
    if (reader->start > 0) {
        size_t kept = reader->end - reader->start;
        memmove(reader->buffer, reader->buffer + reader->start, kept);
        reader->scanned -= reader->start;
        reader->end = kept;
        reader->start = 0;
    }
    if (reader->capacity - reader->end >= READ_CHUNK_BYTES)
        return 0;
    size_t capacity = reader->capacity * 2;
    char *buffer = realloc(reader->buffer, capacity);
    if (buffer == NULL)
        return -1;
    reader->buffer = buffer;
    reader->capacity = capacity;
    return 0;
}

/* Reads what is available. 1 when bytes came, 0 at end of input,
 * TS_JSONL_IDLE or TS_JSONL_IO_ERROR. */
static int fill(ts_jsonl_reader *reader, int wait_ms, char *err,
                size_t errlen)
{
    if (make_room(reader) != 0) {
        snprintf(err, errlen, "out of memory");
        return TS_JSONL_IO_ERROR;
    }
    size_t room = reader->capacity - reader->end;
    if (reader->gz != NULL) {
        int n = gzread(reader->gz, reader->buffer + reader->end,
                       (unsigned)(room < READ_CHUNK_BYTES ? room
                                                          : READ_CHUNK_BYTES));
        if (n < 0) {
            int errnum;
            const char *why = gzerror(reader->gz, &errnum);
            snprintf(err, errlen, "read error: %s",
                     errnum == Z_ERRNO ? strerror(errno) : why);
            return TS_JSONL_IO_ERROR;
        }
        if (n == 0) {
            /* A gzip stream cut short also ends here, silently. */
            int errnum = Z_OK;
            gzerror(reader->gz, &errnum);
            if (errnum != Z_OK && errnum != Z_BUF_ERROR) {
                snprintf(err, errlen, "read error: corrupt gzip stream");
                return TS_JSONL_IO_ERROR;
            }
            if (errnum == Z_BUF_ERROR) {
                snprintf(err, errlen, "read error: truncated gzip stream");
                return TS_JSONL_IO_ERROR;
            }
            return 0;
        }
        reader->end += (size_t)n;
        return 1;
    }
    for (;;) {
        if (wait_ms >= 0) {
            struct pollfd item = { .fd = reader->fd, .events = POLLIN };
            int ready = poll(&item, 1, wait_ms);
            if (ready == 0 || (ready < 0 && errno == EINTR))
                return TS_JSONL_IDLE;
            if (ready < 0) {
                snprintf(err, errlen, "read error: %s", strerror(errno));
                return TS_JSONL_IO_ERROR;
            }
        }
        ssize_t n = read(reader->fd, reader->buffer + reader->end, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "read error: %s", strerror(errno));
            return TS_JSONL_IO_ERROR;
        }
        if (n == 0)
            return 0;
        reader->end += (size_t)n;
        return 1;
    }
}

int ts_jsonl_read(ts_jsonl_reader *reader, int wait_ms,
                  ProtobufCMessage **message, size_t *line, char *err,
                  size_t errlen)
{
    *message = NULL;
    ts_codec_arena_reset(&reader->arena);
    for (;;) {
        char *newline = memchr(reader->buffer + reader->scanned, '\n',
                               reader->end - reader->scanned);
        if (newline != NULL || (reader->eof && reader->end > reader->start)) {
            size_t stop = newline != NULL ? (size_t)(newline - reader->buffer)
                                          : reader->end;
            const char *text = reader->buffer + reader->start;
            size_t len = stop - reader->start;
            reader->start = reader->scanned =
                newline != NULL ? stop + 1 : reader->end;
            *line = ++reader->line;
            if (reader->discarding) {
                reader->discarding = 0;
                snprintf(err, errlen, "line longer than %zu bytes",
                         TS_JSON_MAX_BYTES);
                return TS_JSONL_BAD_LINE;
            }
            if (len >= 3 && memcmp(text, UTF8_BOM, 3) == 0) {
                /* Editors on Windows start a file with one; as the CSV
                 * reader, take it off the first line. Anywhere else it is
                 * a character JSON does not allow outside a string. */
                if (*line != 1) {
                    snprintf(err, errlen, "the line starts with a byte "
                             "order mark (U+FEFF), which only the first "
                             "line may have");
                    return TS_JSONL_BAD_LINE;
                }
                text += 3;
                len -= 3;
            }
            if (is_blank(text, len))
                continue;
            if (ts_json_to_message(reader->descriptor, text, len,
                                   &reader->arena.allocator, message, err,
                                   errlen) != 0)
                return TS_JSONL_BAD_LINE;
            return TS_JSONL_MESSAGE;
        }
        if (reader->eof)
            return TS_JSONL_EOF;
        reader->scanned = reader->end;
        if (reader->end - reader->start > TS_JSON_MAX_BYTES) {
            /* Too long to be accepted: drop it as it streams past. */
            reader->discarding = 1;
            reader->start = reader->scanned = reader->end;
        }
        int rc = fill(reader, wait_ms, err, errlen);
        if (rc == 0)
            reader->eof = 1;
        else if (rc < 0)
            return rc;
    }
}

int ts_jsonl_write(FILE *out, const char *kind,
                   const ProtobufCMessage *message, ts_buf *scratch)
{
    ts_buf_reset(scratch);
    if (ts_buf_append(scratch, "{\"", 2) != 0 ||
        ts_buf_append(scratch, kind, strlen(kind)) != 0 ||
        ts_buf_append(scratch, "\":", 2) != 0)
        return -1;
    if (ts_json_from_message(message, scratch) != 0)
        return 1;
    if (ts_buf_append(scratch, "}\n", 2) != 0)
        return -1;
    return fwrite(scratch->data, 1, scratch->len, out) == scratch->len ? 0
                                                                       : -1;
}
