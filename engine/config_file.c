#define _GNU_SOURCE /* fmemopen */
#include "engine/config_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/safe_open.h"

/* libconfig 1.5's own limit (scanctx.h): deeper includes fail there. */
#define LIBCONFIG_MAX_INCLUDE_DEPTH 10
#define MAX_INCLUDE_NAME 4096

/* The scan of the file and its includes, spliced in place as libconfig's
 * scanner splices them: the lexical mode and the group nesting carry
 * across files. */
typedef enum { IN_CODE, IN_COMMENT, IN_STRING } lex_mode;

typedef struct config_scan {
    const char *include_dir;      /* NULL: relative to the working dir */
    size_t bytes_left;
    lex_mode mode;
    int include_depth;
    int nesting;
    unsigned settings[TS_CONFIG_MAX_NESTING + 1];
    char *err;
    size_t errlen;
} config_scan;

static int scan_fail(config_scan *scan, const char *file, int line,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int scan_fail(config_scan *scan, const char *file, int line,
                     const char *fmt, ...)
{
    char message[MAX_INCLUDE_NAME + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    snprintf(scan->err, scan->errlen, "%s:%d: %s", file, line, message);
    return -1;
}

static int scan_text(config_scan *scan, const char *file, const char *text,
                     size_t len);

/* At text[*at], just after `@include "`: the name up to the closing quote,
 * unescaped as libconfig does (\\ and \", a lone backslash dropped). 0 when
 * the quote never comes (libconfig reports that). */
static int include_name(const char *text, size_t len, size_t *at,
                        int *line, char *name, size_t size)
{
    size_t n = 0;
    for (size_t i = *at; i < len; i++) {
        char c = text[i];
        if (c == '"') {
            name[n < size ? n : size - 1] = '\0';
            *at = i;
            return n < size;
        }
        if (c == '\\') {
            if (i + 1 < len && (text[i + 1] == '\\' || text[i + 1] == '"'))
                c = text[++i];
            else
                continue;
        }
        if (c == '\n')
            (*line)++;
        if (n < size)
            name[n] = c;
        n++;
    }
    *at = len;
    return 0;
}

/* `[ \t]*@include[ \t]+"` at text[i], a line's start: the index after the
 * quote, or 0. */
static size_t include_directive(const char *text, size_t len, size_t i)
{
    while (i < len && (text[i] == ' ' || text[i] == '\t'))
        i++;
    if (len - i < 8 || memcmp(text + i, "@include", 8) != 0)
        return 0;
    i += 8;
    size_t blanks = i;
    while (i < len && (text[i] == ' ' || text[i] == '\t'))
        i++;
    return i > blanks && i < len && text[i] == '"' ? i + 1 : 0;
}

static int scan_include(config_scan *scan, const char *file, int line,
                        const char *name)
{
    if (scan->include_depth == LIBCONFIG_MAX_INCLUDE_DEPTH)
        return 0; /* libconfig refuses it without opening it */
    char path[MAX_INCLUDE_NAME + 512];
    if (scan->include_dir != NULL)
        snprintf(path, sizeof path, "%s/%s", scan->include_dir, name);
    else
        snprintf(path, sizeof path, "%s", name);
    char why[256];
    size_t size = 0;
    char *text = ts_read_regular(path, scan->bytes_left, &size, why,
                                 sizeof why);
    if (text == NULL && errno == EFBIG)
        return scan_fail(scan, file, line, "@include \"%s\": the "
                         "configuration and its includes exceed %d KiB, the "
                         "most a configuration may hold", name,
                         TS_CONFIG_MAX_BYTES / 1024);
    if (text == NULL)
        return scan_fail(scan, file, line, "@include \"%s\": %s", name, why);
    scan->bytes_left -= size;
    scan->mode = IN_CODE;
    scan->include_depth++;
    int rc = scan_text(scan, name, text, size);
    scan->include_depth--;
    free(text);
    return rc;
}

static int scan_text(config_scan *scan, const char *file, const char *text,
                     size_t len)
{
    int line = 1;
    int line_start = 1;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        char next = i + 1 < len ? text[i + 1] : '\0';
        if (scan->mode == IN_COMMENT) {
            if (c == '*' && next == '/') {
                scan->mode = IN_CODE;
                i++;
            }
            line += c == '\n';
            continue;
        }
        if (scan->mode == IN_STRING) {
            if (c == '\\' && (next == '\\' || next == '"'))
                i++;
            else if (c == '"')
                scan->mode = IN_CODE;
            line += c == '\n';
            continue;
        }
        size_t after = line_start ? include_directive(text, len, i) : 0;
        line_start = 0;
        if (after > 0) {
            char name[MAX_INCLUDE_NAME];
            int at_line = line;
            i = after;
            if (include_name(text, len, &i, &line, name, sizeof name) &&
                scan_include(scan, file, at_line, name) != 0)
                return -1;
            continue;
        }
        switch (c) {
        case '\n':
            line++;
            line_start = 1;
            break;
        case '"':
            scan->mode = IN_STRING;
            break;
        case '#':
            while (i + 1 < len && text[i + 1] != '\n')
                i++;
            break;
        case '/':
            if (next == '*') {
                scan->mode = IN_COMMENT;
                i++;
            } else if (next == '/') {
                while (i + 1 < len && text[i + 1] != '\n')
                    i++;
            }
            break;
        case '{':
            if (scan->nesting == TS_CONFIG_MAX_NESTING)
                return scan_fail(scan, file, line, "groups nested more than "
                                 "%d deep", TS_CONFIG_MAX_NESTING);
            scan->settings[++scan->nesting] = 0;
            break;
        case '}':
            if (scan->nesting > 0)
                scan->nesting--;
            break;
        case '=':
        case ':':
            if (++scan->settings[scan->nesting] >
                TS_CONFIG_MAX_GROUP_SETTINGS)
                return scan_fail(scan, file, line, "more than %d settings "
                                 "in one group", TS_CONFIG_MAX_GROUP_SETTINGS);
            break;
        default:
            break;
        }
    }
    return 0;
}

int ts_config_file_read(config_t *cfg, const char *path, char *err,
                        size_t errlen)
{
    char why[256];
    size_t size = 0;
    char *text = ts_read_regular(path, TS_CONFIG_MAX_BYTES, &size, why,
                                 sizeof why);
    if (text == NULL) {
        if (errno == EFBIG)
            snprintf(err, errlen, "%s: larger than %d KiB, the most a "
                     "configuration may hold", path,
                     TS_CONFIG_MAX_BYTES / 1024);
        else
            snprintf(err, errlen, "%s: cannot read: %s", path, why);
        return -1;
    }
    char *dir = strdup(path);
    if (dir == NULL) {
        free(text);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
        config_set_include_dir(cfg, dir[0] != '\0' ? dir : "/");
    }
    free(dir);
    config_scan scan = {
        .include_dir = config_get_include_dir(cfg),
        .bytes_left = TS_CONFIG_MAX_BYTES - size,
        .err = err,
        .errlen = errlen,
    };
    if (scan_text(&scan, path, text, size) != 0) {
        free(text);
        return -1;
    }
    /* From memory, so the file read and scanned is the file parsed. */
    FILE *stream = size > 0 ? fmemopen(text, size, "r") : NULL;
    int parsed = stream != NULL ? config_read(cfg, stream)
                                : config_read_string(cfg, "");
    if (stream != NULL)
        fclose(stream);
    free(text);
    if (size > 0 && stream == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (parsed == CONFIG_TRUE)
        return 0;
    const char *file = config_error_file(cfg);
    const char *text_error = config_error_text(cfg);
    if (config_error_type(cfg) == CONFIG_ERR_FILE_IO)
        snprintf(err, errlen, "%s: cannot read: %s", path,
                 text_error != NULL ? text_error : "I/O error");
    else
        snprintf(err, errlen, "%s:%d: %s", file != NULL ? file : path,
                 config_error_line(cfg),
                 text_error != NULL ? text_error : "syntax error");
    return -1;
}
