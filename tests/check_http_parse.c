/* The HTTP request-head parser (ops/http_parse.c) alone: every head that
 * issue 25 found framed two ways is refused with its status, the good
 * heads give what the server reads of them, and for every head each prefix
 * is either incomplete or refused the same way, never accepted: a refusal
 * cannot depend on how the bytes were split into reads. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "ops/http_parse.h"
#include "tests/support/check_run.h"

#define GET "GET /healthz HTTP/1.1\r\nHost: t\r\n"

typedef struct refused_case {
    const char *head;
    size_t len; /* 0: strlen(head) */
    int status;
} refused_case;

static const refused_case refused[] = {
    /* Content-Length that is not 1*DIGIT, or copies that differ. */
    { GET "Content-Length: abc\r\n\r\n", 0, 400 },
    { GET "Content-Length: 0x1f\r\n\r\n", 0, 400 },
    { GET "Content-Length: 0 31\r\n\r\n", 0, 400 },
    { GET "Content-Length: +0\r\n\r\n", 0, 400 },
    { GET "Content-Length: -0\r\n\r\n", 0, 400 },
    { GET "Content-Length:\r\n\r\n", 0, 400 },
    { GET "Content-Length: ,\r\n\r\n", 0, 400 },
    { GET "Content-Length: 1.0\r\n\r\n", 0, 400 },
    { GET "Content-Length: 0\r\nContent-Length: 31\r\n\r\n", 0, 400 },
    { GET "Content-Length: 0, 31\r\n\r\n", 0, 400 },
    /* Whitespace before the colon, in the name, before a line. */
    { GET "Content-Length : 0\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding : chunked\r\n\r\n", 0, 400 },
    { GET "Content-Length\t: 0\r\n\r\n", 0, 400 },
    { GET "X-A: b\r\n continued: yes\r\n\r\n", 0, 400 },
    { GET "X-A: b\r\n\tcontinued\r\n\r\n", 0, 400 },
    { "GET / HTTP/1.1\r\n Host: t\r\n\r\n", 0, 400 },
    { GET ": no name\r\n\r\n", 0, 400 },
    { GET "no colon here\r\n\r\n", 0, 400 },
    { GET "Nocolon\r\n\r\n", 0, 400 },
    { GET "X(A): b\r\n\r\n", 0, 400 },
    /* Line ends other than CRLF. */
    { GET "\n", 0, 400 },
    { GET "\nGET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { GET "X-A: b\n\r\n", 0, 400 },
    { "GET /healthz HTTP/1.1\nHost: t\r\n\r\n", 0, 400 },
    { GET "X-A: b\rc\r\n\r\n", 0, 400 },
    { GET "X-A: b\r\r\n\r\n", 0, 400 },
    { GET "\r\r\n", 0, 400 },
    { "\n", 0, 400 },
    /* Control characters in a value. */
    { GET "X-A: b\0c\r\n\r\n", sizeof GET "X-A: b\0c\r\n\r\n" - 1, 400 },
    { GET "X-A: b\x7f\r\n\r\n", 0, 400 },
    { GET "X-A: b\x01\r\n\r\n", 0, 400 },
    /* Transfer-Encoding (RFC 9112 section 6.3). */
    { GET "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 0, 400 },
    { GET "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding: chunked, identity\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding: gzip\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding: chunked, chunked\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      0, 400 },
    { GET "Transfer-Encoding:\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding: chunked;x=1\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding: \"chunked\"\r\n\r\n", 0, 400 },
    { "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 400 },
    { GET "Transfer-Encoding: gzip, chunked\r\n\r\n", 0, 501 },
    { GET "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
      501 },
    /* Host: required once in HTTP/1.1, never twice, a host. */
    { "GET / HTTP/1.1\r\n\r\n", 0, 400 },
    { GET "Host: u\r\n\r\n", 0, 400 },
    { "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 0, 400 },
    { "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 0, 400 },
    { "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 0, 400 },
    { "GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", 0, 400 },
    /* Singletons the server reads. */
    { GET "Authorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n", 0,
      400 },
    { GET "Origin: http://a\r\nOrigin: http://b\r\n\r\n", 0, 400 },
    { "OPTIONS / HTTP/1.1\r\nHost: t\r\nAccess-Control-Request-Method: GET\r\n"
      "Access-Control-Request-Method: GET\r\n\r\n", 0, 400 },
    /* The request line: exactly method SP target SP version. */
    { "GARBAGE\r\n\r\n", 0, 400 },
    { "GET  /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /healthz  HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /healthz HTTP/1.1 \r\nHost: t\r\n\r\n", 0, 400 },
    { "GET\t/healthz HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { " GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /a\x80 HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /a b HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /healthz http/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /healthz HTTP/1.10\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /healthz HTTP/1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /healthz\r\nHost: t\r\n\r\n", 0, 400 },
    { "G(T /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 0, 400 },
    { "GET /healthz HTTP/2.0\r\nHost: t\r\n\r\n", 0, 505 },
    { "GET /healthz HTTP/0.9\r\nHost: t\r\n\r\n", 0, 505 },
    { "ABCDEFGHIJKLMNOPQ /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 0, 501 },
};

static void parse(const char *bytes, size_t len, ts_http_parse_result *result,
                  ts_http_head *head, size_t *consumed)
{
    *result = ts_http_parse_head(bytes, len, head, consumed);
}

TS_TEST(test_hostile_heads_refused)
{
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const refused_case *c = &refused[i];
        size_t len = c->len != 0 ? c->len : strlen(c->head);
        ts_http_head head;
        size_t consumed = 99;
        ts_http_parse_result result;
        parse(c->head, len, &result, &head, &consumed);
        ck_assert_msg(result == TS_HTTP_HEAD_REFUSED,
                      "case %zu accepted (%d): %s", i, (int)result, c->head);
        ck_assert_msg(head.error_status == c->status,
                      "case %zu: status %d, expected %d (%s)", i,
                      head.error_status, c->status, head.error);
        ck_assert(head.error != NULL && head.error[0] != '\0');
        ck_assert_uint_eq(consumed, 0);
    }
}
END_TEST

/* However the bytes arrive, a refused head is never taken for a complete
 * one: each prefix is incomplete or refused with the same status. */
TS_TEST(test_refusal_does_not_depend_on_reads)
{
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const refused_case *c = &refused[i];
        size_t len = c->len != 0 ? c->len : strlen(c->head);
        for (size_t n = 0; n < len; n++) {
            ts_http_head head;
            size_t consumed;
            ts_http_parse_result result;
            parse(c->head, n, &result, &head, &consumed);
            ck_assert_msg(result != TS_HTTP_HEAD_COMPLETE,
                          "case %zu: its first %zu bytes are a head", i, n);
            if (result == TS_HTTP_HEAD_REFUSED)
                ck_assert_int_eq(head.error_status, c->status);
        }
    }
}
END_TEST

/* A good head: complete exactly at its blank line, incomplete before. */
static void parse_good(const char *text, ts_http_head *head)
{
    size_t len = strlen(text);
    for (size_t n = 0; n < len; n++) {
        size_t consumed;
        ck_assert_msg(ts_http_parse_head(text, n, head, &consumed) ==
                          TS_HTTP_HEAD_INCOMPLETE,
                      "prefix of %zu bytes not incomplete: %s", n, text);
    }
    /* What follows the head (the next request) is not read. */
    char with_next[4096];
    int total = snprintf(with_next, sizeof with_next, "%s%s", text,
                         "GET /next HTTP/1.1\r\n");
    ck_assert(total > 0 && (size_t)total < sizeof with_next);
    size_t consumed = 0;
    ck_assert_msg(ts_http_parse_head(with_next, (size_t)total, head,
                                     &consumed) == TS_HTTP_HEAD_COMPLETE,
                  "refused (%s): %s", head->error, text);
    ck_assert_uint_eq(consumed, len);
}

TS_TEST(test_good_heads)
{
    ts_http_head head;
    parse_good(GET "\r\n", &head);
    ck_assert_str_eq(head.method, "GET");
    ck_assert_str_eq(head.target, "/healthz");
    ck_assert(head.http_1_1 && head.keep_alive && !head.has_body);
    ck_assert(!head.has_authorization && !head.has_origin && !head.preflight);

    parse_good("HEAD /metrics?x=1 HTTP/1.0\r\n\r\n", &head);
    ck_assert_str_eq(head.method, "HEAD");
    ck_assert_str_eq(head.target, "/metrics?x=1");
    ck_assert(!head.http_1_1 && !head.keep_alive);
    parse_good("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &head);
    ck_assert(head.keep_alive);
    parse_good(GET "Connection: keep-alive, close\r\n\r\n", &head);
    ck_assert(!head.keep_alive);
    parse_good(GET "Connection: upgrade\r\nconnection: CLOSE\r\n\r\n", &head);
    ck_assert(!head.keep_alive);

    /* Bodies: a zero length is none; any other means refuse and close. */
    parse_good(GET "Content-Length: 0\r\n\r\n", &head);
    ck_assert(!head.has_body && head.keep_alive);
    parse_good(GET "Content-Length: 000\r\n\r\n", &head);
    ck_assert(!head.has_body);
    parse_good(GET "Content-Length: 5\r\n\r\n", &head);
    ck_assert(head.has_body);
    parse_good(GET "Content-Length: 42, 42\r\nContent-Length: 042\r\n\r\n",
               &head);
    ck_assert(head.has_body);
    parse_good(GET "Content-Length: 99999999999999999999999999\r\n\r\n",
               &head);
    ck_assert(head.has_body);
    parse_good(GET "Transfer-Encoding: Chunked\r\n\r\n", &head);
    ck_assert(head.has_body);

    /* Values: trimmed, tabs and obs-text kept, long ones present but
     * empty (they match nothing). */
    parse_good(GET "Authorization:  \tBearer abc \t\r\n"
               "Origin: http://127.0.0.1:8080\r\n"
               "X-Text: caf\xc3\xa9\tau lait\r\n\r\n", &head);
    ck_assert(head.has_authorization && head.has_origin);
    ck_assert_str_eq(head.authorization, "Bearer abc");
    ck_assert_str_eq(head.origin, "http://127.0.0.1:8080");
    char text[4096];
    char long_origin[TS_HTTP_ORIGIN_MAX_CHARS + 2];
    memset(long_origin, 'a', sizeof long_origin - 1);
    long_origin[sizeof long_origin - 1] = '\0';
    snprintf(text, sizeof text, GET "Origin: %s\r\n\r\n", long_origin);
    parse_good(text, &head);
    ck_assert(!head.has_origin);
    ck_assert_str_eq(head.origin, "");

    parse_good("OPTIONS /feed HTTP/1.1\r\nHost: [::1]:9107\r\n"
               "Access-Control-Request-Method: GET\r\n\r\n", &head);
    ck_assert(head.preflight);
    ck_assert_str_eq(head.preflight_method, "GET");
    /* An empty Host is what a client without an authority sends. */
    parse_good("GET / HTTP/1.1\r\nHost:\r\n\r\n", &head);
    /* CRLFs before a request line are skipped (RFC 9112 section 2.2). */
    parse_good("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", &head);
    ck_assert_str_eq(head.target, "/");
    parse_good("ABCDEFGHIJKLMNO * HTTP/1.1\r\nHost: a\r\n\r\n", &head);
    ck_assert_str_eq(head.method, "ABCDEFGHIJKLMNO");
}
END_TEST

TS_TEST(test_target_length)
{
    static char text[TS_HTTP_TARGET_MAX + 64];
    char target[TS_HTTP_TARGET_MAX + 2];
    memset(target, 'a', sizeof target - 1);
    target[0] = '/';
    target[sizeof target - 1] = '\0';
    snprintf(text, sizeof text, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", target);
    ts_http_head head;
    size_t consumed;
    ck_assert_int_eq(ts_http_parse_head(text, strlen(text), &head, &consumed),
                     TS_HTTP_HEAD_REFUSED);
    ck_assert_int_eq(head.error_status, 414);
    target[TS_HTTP_TARGET_MAX] = '\0';
    snprintf(text, sizeof text, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", target);
    ck_assert_int_eq(ts_http_parse_head(text, strlen(text), &head, &consumed),
                     TS_HTTP_HEAD_COMPLETE);
    ck_assert_str_eq(head.target, target);
}
END_TEST

/* Pipelined heads are taken one at a time, each exactly. */
TS_TEST(test_pipelined)
{
    const char *two = GET "\r\n" "HEAD /metrics HTTP/1.1\r\nHost: t\r\n"
                      "Connection: close\r\n\r\n";
    ts_http_head head;
    size_t consumed;
    ck_assert_int_eq(ts_http_parse_head(two, strlen(two), &head, &consumed),
                     TS_HTTP_HEAD_COMPLETE);
    ck_assert_str_eq(head.method, "GET");
    ck_assert_uint_eq(consumed, strlen(GET "\r\n"));
    size_t first = consumed;
    ck_assert_int_eq(ts_http_parse_head(two + first, strlen(two) - first,
                                        &head, &consumed),
                     TS_HTTP_HEAD_COMPLETE);
    ck_assert_str_eq(head.method, "HEAD");
    ck_assert(!head.keep_alive);
    ck_assert_uint_eq(first + consumed, strlen(two));
}
END_TEST

int main(void)
{
    return ts_check_main("http_parse", 0, NULL, NULL);
}
