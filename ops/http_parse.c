#include "ops/http_parse.h"

#include <string.h>
#include <strings.h>

/* What the fields seen so far imply for the head as a whole. */
typedef struct head_state {
    ts_http_head *head;
    int hosts;
    int seen_origin;
    /* Content-Length: the value every copy must equal, without its
     * leading zeros (it points into the caller's bytes). */
    const char *length;
    size_t length_len;
    int transfer_encodings;  /* field lines */
    int chunked_codings;
    int chunked_last;
    int other_codings;
    int connection_close;
    int connection_keep_alive;
} head_state;

/* tchar, RFC 9110 section 5.6.2. */
static int is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
        (c >= 'A' && c <= 'Z'))
        return 1;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar, SP and HTAB (RFC 9110 section 5.5): no CR, LF, NUL nor
 * other control character, which we refuse rather than replace. */
static int is_field_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* uri-host and port (RFC 3986): an IP literal, a name, digits. */
static int is_host_char(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
        (c >= 'A' && c <= 'Z'))
        return 1;
    return c != '\0' && strchr("-._~%!$&'()*+,;=:[]", c) != NULL;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static int fail(ts_http_head *head, int status, const char *why)
{
    head->error_status = status;
    head->error = why;
    return -1;
}

static int all_of(const char *s, size_t n, int (*ok)(unsigned char))
{
    for (size_t i = 0; i < n; i++)
        if (!ok((unsigned char)s[i]))
            return 0;
    return 1;
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int name_is(const char *name, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

/* The next element of a comma-separated list value (RFC 9110 section
 * 5.6.1) starting at *at, without its surrounding whitespace; empty
 * elements are skipped, as the RFC asks. 0 at the end of the list. */
static int next_element(const char *v, size_t n, size_t *at,
                        const char **element, size_t *element_len)
{
    size_t i = *at;
    for (;;) {
        while (i < n && (is_ows(v[i]) || v[i] == ','))
            i++;
        if (i == n) {
            *at = i;
            return 0;
        }
        size_t start = i;
        while (i < n && v[i] != ',')
            i++;
        size_t end = i;
        while (end > start && is_ows(v[end - 1]))
            end--;
        *element = v + start;
        *element_len = end - start;
        *at = i;
        return 1;
    }
}

/* Copies a value; 0 (and an empty copy) when it does not fit. */
static int copy_value(char *out, size_t size, const char *v, size_t n)
{
    if (n >= size) {
        out[0] = '\0';
        return 0;
    }
    memcpy(out, v, n);
    out[n] = '\0';
    return 1;
}

/* request-line = method SP request-target SP HTTP-version, nothing more:
 * no second space, no tab, no trailing whitespace (RFC 9112 section 3). */
static int parse_request_line(ts_http_head *head, const char *line, size_t n)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i == n || line[i] != ' ')
        return fail(head, 400, "malformed request line");
    if (i > TS_HTTP_METHOD_MAX)
        return fail(head, 501, "method not implemented");
    memcpy(head->method, line, i);
    head->method[i] = '\0';
    size_t target = ++i;
    while (i < n && (unsigned char)line[i] > 0x20 &&
           (unsigned char)line[i] < 0x7f)
        i++;
    if (i == target || i == n || line[i] != ' ')
        return fail(head, 400, "malformed request line");
    if (i - target > TS_HTTP_TARGET_MAX)
        return fail(head, 414, "request target too long");
    memcpy(head->target, line + target, i - target);
    head->target[i - target] = '\0';
    const char *version = line + i + 1;
    size_t version_len = n - i - 1;
    if (version_len != 8 || memcmp(version, "HTTP/", 5) != 0 ||
        !is_digit((unsigned char)version[5]) || version[6] != '.' ||
        !is_digit((unsigned char)version[7]))
        return fail(head, 400, "malformed request line");
    if (memcmp(version + 5, "1.1", 3) == 0)
        head->http_1_1 = 1;
    else if (memcmp(version + 5, "1.0", 3) != 0)
        return fail(head, 505, "HTTP version not supported");
    return 0;
}

/* Calls take(st, element, len) for each element of a list value; -1 at
 * the first refusal, or when the list is empty and `empty` says why. */
static int each_element(head_state *st, const char *v, size_t n,
                        int (*take)(head_state *, const char *, size_t),
                        const char *empty)
{
    size_t at = 0;
    const char *element;
    size_t len;
    int elements = 0;
    while (next_element(v, n, &at, &element, &len)) {
        if (take(st, element, len) != 0)
            return -1;
        elements++;
    }
    if (elements == 0 && empty != NULL)
        return fail(st->head, 400, empty);
    return 0;
}

/* Content-Length = 1*DIGIT; a list, or several lines, only when every
 * value is the same (RFC 9110 section 8.6). Compared as digit strings,
 * so that no value overflows. */
static int content_length(head_state *st, const char *element, size_t len)
{
    if (!all_of(element, len, is_digit))
        return fail(st->head, 400, "Content-Length is not a number");
    while (len > 1 && element[0] == '0') {
        element++;
        len--;
    }
    if (st->length != NULL &&
        (st->length_len != len || memcmp(st->length, element, len) != 0))
        return fail(st->head, 400, "Content-Length values differ");
    st->length = element;
    st->length_len = len;
    return 0;
}

/* Transfer-Encoding: transfer codings without parameters; which ones are
 * judged once the head is complete, as they may span lines. */
static int transfer_coding(head_state *st, const char *element, size_t len)
{
    if (!all_of(element, len, is_tchar))
        return fail(st->head, 400, "malformed Transfer-Encoding");
    st->chunked_last = name_is(element, len, "chunked");
    if (st->chunked_last)
        st->chunked_codings++;
    else
        st->other_codings++;
    return 0;
}

static int connection_option(head_state *st, const char *element,
                             size_t len)
{
    if (name_is(element, len, "close"))
        st->connection_close = 1;
    else if (name_is(element, len, "keep-alive"))
        st->connection_keep_alive = 1;
    return 0;
}

static int field(head_state *st, const char *name, size_t name_len,
                 const char *v, size_t n)
{
    ts_http_head *head = st->head;
    if (name_is(name, name_len, "Host")) {
        if (++st->hosts > 1)
            return fail(head, 400, "more than one Host");
        if (!all_of(v, n, is_host_char))
            return fail(head, 400, "invalid Host");
    } else if (name_is(name, name_len, "Content-Length")) {
        return each_element(st, v, n, content_length,
                            "Content-Length is not a number");
    } else if (name_is(name, name_len, "Transfer-Encoding")) {
        st->transfer_encodings++;
        return each_element(st, v, n, transfer_coding,
                            "malformed Transfer-Encoding");
    } else if (name_is(name, name_len, "Connection")) {
        return each_element(st, v, n, connection_option, NULL);
    } else if (name_is(name, name_len, "Authorization")) {
        /* A second one could carry a token past a proxy that checked the
         * first. */
        if (head->has_authorization)
            return fail(head, 400, "more than one Authorization");
        head->has_authorization = 1;
        copy_value(head->authorization, sizeof head->authorization, v, n);
    } else if (name_is(name, name_len, "Origin")) {
        if (st->seen_origin++)
            return fail(head, 400, "more than one Origin");
        head->has_origin =
            copy_value(head->origin, sizeof head->origin, v, n);
    } else if (name_is(name, name_len, "Access-Control-Request-Method")) {
        if (head->preflight)
            return fail(head, 400,
                        "more than one Access-Control-Request-Method");
        head->preflight = 1;
        copy_value(head->preflight_method, sizeof head->preflight_method, v,
                   n);
    }
    return 0;
}

/* field-line = field-name ":" OWS field-value OWS (RFC 9112 section 5). */
static int parse_field_line(head_state *st, const char *line, size_t n)
{
    if (is_ows(line[0]))
        return fail(st->head, 400, "line folding (obs-fold) or whitespace "
                    "before a field");
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == n)
        return fail(st->head, 400, "field line without a colon");
    if (line[i] != ':' || i == 0)
        return fail(st->head, 400, "whitespace or a bad character in a "
                    "field name");
    const char *v = line + i + 1;
    const char *end = line + n;
    if (!all_of(v, (size_t)(end - v), is_field_char))
        return fail(st->head, 400, "control character in a field value");
    while (v < end && is_ows(*v))
        v++;
    while (end > v && is_ows(end[-1]))
        end--;
    return field(st, line, i, v, (size_t)(end - v));
}

/* The rules that need the whole head: Host, and the framing of RFC 9112
 * section 6.3 (the server takes no body, so any body means a refusal and
 * a close; what matters is that no body is taken for none). */
static ts_http_parse_result finish(head_state *st)
{
    ts_http_head *head = st->head;
    if (head->http_1_1 && st->hosts == 0)
        fail(head, 400, "no Host");
    else if (st->transfer_encodings > 0 && !head->http_1_1)
        fail(head, 400, "Transfer-Encoding in HTTP/1.0");
    else if (st->transfer_encodings > 0 && st->length != NULL)
        fail(head, 400, "both Transfer-Encoding and Content-Length");
    else if (st->transfer_encodings > 0 &&
             (!st->chunked_last || st->chunked_codings != 1))
        fail(head, 400, "Transfer-Encoding does not end in one chunked");
    else if (st->other_codings > 0)
        fail(head, 501, "transfer coding not implemented");
    if (head->error_status != 0)
        return TS_HTTP_HEAD_REFUSED;
    head->has_body = st->transfer_encodings > 0 ||
                     (st->length != NULL &&
                      !(st->length_len == 1 && st->length[0] == '0'));
    head->keep_alive = !st->connection_close &&
                       (head->http_1_1 || st->connection_keep_alive);
    return TS_HTTP_HEAD_COMPLETE;
}

ts_http_parse_result ts_http_parse_head(const char *data, size_t len,
                                        ts_http_head *head,
                                        size_t *consumed)
{
    memset(head, 0, sizeof *head);
    *consumed = 0;
    head_state st = { .head = head };
    size_t pos = 0;
    while (len - pos >= 2 && data[pos] == '\r' && data[pos + 1] == '\n')
        pos += 2;
    for (int first = 1; pos < len; first = 0) {
        const char *line = data + pos;
        const char *lf = memchr(line, '\n', len - pos);
        size_t n = lf != NULL ? (size_t)(lf - line) : len - pos;
        /* A CR only right before the LF (or last, awaiting it). */
        const char *cr = memchr(line, '\r', n);
        if (cr != NULL && cr + 1 < line + n)
            fail(head, 400, "bare CR in the head");
        else if (lf == NULL)
            return TS_HTTP_HEAD_INCOMPLETE;
        else if (cr == NULL)
            fail(head, 400, "a line ends in a bare LF, not CRLF");
        else if (first)
            parse_request_line(head, line, n - 1);
        else if (n == 1) {
            ts_http_parse_result result = finish(&st);
            if (result == TS_HTTP_HEAD_COMPLETE)
                *consumed = pos + 2;
            return result;
        } else
            parse_field_line(&st, line, n - 1);
        if (head->error_status != 0)
            return TS_HTTP_HEAD_REFUSED;
        pos += n + 1;
    }
    return TS_HTTP_HEAD_INCOMPLETE;
}
