/* libFuzzer target: HTTP request heads (ops/http_parse.c), the bytes any
 * client on the endpoint controls.
 *
 * Beyond memory and UB errors it checks the parser's contract, the part
 * that keeps framing unambiguous: a complete head ends in CRLF CRLF at
 * exactly `consumed` and parses the same from its own bytes (nothing after
 * it was read), any shorter prefix of it is incomplete, a refusal comes
 * with a status and a reason and is never undone by fewer bytes (a prefix
 * is incomplete or refused alike), and every field read is a terminated
 * string inside its buffer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/http_parse.h"

/* The server never hands the parser more than this (ops/ops_http.c). */
#define MAX_HEAD_BYTES 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
    fprintf(stderr, "fuzz_http: %s\n", what);
    abort();
}

#define TERMINATED(field) (memchr((field), '\0', sizeof(field)) != NULL)

static void check_head(const ts_http_head *head)
{
    if (!TERMINATED(head->method) || !TERMINATED(head->target) ||
        !TERMINATED(head->authorization) || !TERMINATED(head->origin) ||
        !TERMINATED(head->preflight_method))
        die("a field is not terminated in its buffer");
    if (head->method[0] == '\0' || head->target[0] == '\0')
        die("a complete head without a method or target");
    if (head->error_status != 0 || head->error != NULL)
        die("a complete head with an error");
}

static ts_http_parse_result parse(const char *bytes, size_t len,
                                  ts_http_head *head, size_t *consumed)
{
    *consumed = 12345;
    ts_http_parse_result result = ts_http_parse_head(bytes, len, head,
                                                     consumed);
    if (result != TS_HTTP_HEAD_COMPLETE && *consumed != 0)
        die("bytes consumed without a complete head");
    if (result == TS_HTTP_HEAD_REFUSED &&
        (head->error == NULL || head->error[0] == '\0' ||
         (head->error_status != 400 && head->error_status != 414 &&
          head->error_status != 501 && head->error_status != 505)))
        die("a refusal without a reason or with an unexpected status");
    return result;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_HEAD_BYTES)
        size = MAX_HEAD_BYTES;
    /* A copy of exactly `size` bytes, so reading past it is caught. */
    char *bytes = malloc(size > 0 ? size : 1);
    if (bytes == NULL)
        die("out of memory");
    memcpy(bytes, data, size);
    ts_http_head head, again;
    size_t consumed = 0, consumed_again = 0;
    ts_http_parse_result result = parse(bytes, size, &head, &consumed);
    if (result == TS_HTTP_HEAD_COMPLETE) {
        check_head(&head);
        if (consumed < 4 || consumed > size ||
            memcmp(bytes + consumed - 4, "\r\n\r\n", 4) != 0)
            die("a head that does not end in CRLF CRLF at `consumed`");
        if (parse(bytes, consumed, &again, &consumed_again) !=
                TS_HTTP_HEAD_COMPLETE ||
            consumed_again != consumed ||
            memcmp(&head, &again, sizeof head) != 0)
            die("a head read differently without the bytes after it");
        if (parse(bytes, consumed - 1, &again, &consumed_again) !=
                TS_HTTP_HEAD_INCOMPLETE ||
            parse(bytes, consumed / 2, &again, &consumed_again) !=
                TS_HTTP_HEAD_INCOMPLETE)
            die("a prefix of a head is not incomplete");
    } else if (result == TS_HTTP_HEAD_REFUSED) {
        const size_t cuts[] = { size / 2, size - 1 };
        for (size_t i = 0; i < 2; i++) {
            ts_http_parse_result prefix = parse(bytes, cuts[i], &again,
                                                &consumed_again);
            if (prefix == TS_HTTP_HEAD_COMPLETE ||
                (prefix == TS_HTTP_HEAD_REFUSED &&
                 again.error_status != head.error_status))
                die("a refused head whose prefix is read otherwise");
        }
    }
    free(bytes);
    return 0;
}
