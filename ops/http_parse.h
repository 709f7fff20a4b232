/* The request-head parser of the daemon's HTTP endpoint (ops/ops_http.c):
 * a pure function of the bytes received so far, tested alone
 * (tests/check_http_parse.c) and fuzzed (tests/fuzz/fuzz_http.c).
 *
 * The endpoint may sit behind a proxy, so any head that two parsers could
 * frame differently is refused rather than repaired (RFC 9112 read
 * strictly); the server then answers once and closes, and the bytes after
 * the head are never read as a request. Refused with 400: a line not ended
 * by CRLF (a bare LF or CR anywhere), a request line other than exactly
 * "method SP target SP HTTP-version", a field line starting with
 * whitespace (obs-fold, or whitespace before the first field), a field
 * name that is not a token (whitespace before the colon), a control
 * character in a value, a Content-Length that is not digits or whose
 * copies differ, Transfer-Encoding together with Content-Length, in
 * HTTP/1.0, or not ending in one "chunked", no Host in HTTP/1.1 or more
 * than one, and a second Authorization, Origin or
 * Access-Control-Request-Method. Also refused: a method longer than any we
 * serve (501), a transfer coding other than chunked (501), a target longer
 * than TS_HTTP_TARGET_MAX (414), another HTTP version (505).
 */
#ifndef TRACESAN_OPS_HTTP_PARSE_H
#define TRACESAN_OPS_HTTP_PARSE_H

#include <stddef.h>

#include "ops/http_access.h"

#define TS_HTTP_METHOD_MAX 15
#define TS_HTTP_TARGET_MAX 2047

typedef enum ts_http_parse_result {
    TS_HTTP_HEAD_INCOMPLETE, /* no blank line yet; every line so far valid */
    TS_HTTP_HEAD_COMPLETE,
    TS_HTTP_HEAD_REFUSED,    /* answer error_status and close */
} ts_http_parse_result;

/* What the server needs of one request head. Values longer than their
 * field are kept as present but empty, so that they match nothing. */
typedef struct ts_http_head {
    char method[TS_HTTP_METHOD_MAX + 1];
    char target[TS_HTTP_TARGET_MAX + 1];
    int http_1_1;          /* else HTTP/1.0 */
    int keep_alive;        /* the version's default, after Connection */
    /* A body follows (Content-Length above 0, or chunked): the server
     * takes none, so it refuses the request and closes. */
    int has_body;
    int has_authorization;
    char authorization[TS_HTTP_TOKEN_MAX_CHARS + 64];
    int has_origin;
    char origin[TS_HTTP_ORIGIN_MAX_CHARS + 1];
    int preflight;         /* Access-Control-Request-Method was sent */
    char preflight_method[TS_HTTP_METHOD_MAX + 1];
    /* When refused: the status to answer and why (a static string). */
    int error_status;
    const char *error;
} ts_http_head;

/* Parses the request head at the start of data[0, len): CRLFs before it
 * are skipped (RFC 9112 section 2.2), and it ends with its empty line.
 * COMPLETE fills *head and sets *consumed to the head's length through
 * that line; REFUSED sets head->error_status and head->error (a complete
 * line, or the bytes so far, are already invalid); INCOMPLETE asks for
 * more bytes (the caller bounds how many it will wait for). Reads nothing
 * outside data[0, len), allocates nothing. */
ts_http_parse_result ts_http_parse_head(const char *data, size_t len,
                                        ts_http_head *head,
                                        size_t *consumed);

#endif
