/* Who may use the HTTP endpoint: the bearer token (http.token or
 * http.token_file) and the CORS allow-list (http.cors_origins).
 *
 * The token is a secret: no message here ever quotes it, and requests are
 * checked against a digest of it in constant time, so neither the text
 * nor its length leaks through timing.
 */
#ifndef TRACESAN_OPS_HTTP_ACCESS_H
#define TRACESAN_OPS_HTTP_ACCESS_H

#include <stddef.h>

/* Shorter tokens are refused: guessable over loopback in minutes. */
#define TS_HTTP_TOKEN_MIN_CHARS 16
#define TS_HTTP_TOKEN_MAX_CHARS 1024
#define TS_HTTP_TOKEN_DIGEST_BYTES 32
/* "https://" + a DNS name of at most 253 characters + ":65535". */
#define TS_HTTP_ORIGIN_MAX_CHARS 270

/* 0 when `token` is an RFC 6750 b64token ([A-Za-z0-9-._~+/]+ then any
 * '=') of TS_HTTP_TOKEN_MIN_CHARS .. TS_HTTP_TOKEN_MAX_CHARS characters;
 * else -1 with `problem` (worded to follow the key's name). */
int ts_http_token_check(const char *token, char *problem, size_t len);

/* 0 when `origin` is what a browser sends as Origin for a page:
 * "http://" or "https://", a host, an optional ":port", nothing else (no
 * path, no trailing '/'); else -1 with `problem`. */
int ts_http_origin_check(const char *origin, char *problem, size_t len);

/* Reads a token file: readable by its owner only, one token (a trailing
 * newline is fine). The copy is the caller's to wipe and free with
 * ts_http_token_free. NULL with `problem` (never the token). */
char *ts_http_read_token_file(const char *path, char *problem, size_t len);
void ts_http_token_free(char *token);

/* BLAKE2b-256 of the token: what requests are compared against. */
void ts_http_token_digest(const char *token,
                          unsigned char digest[TS_HTTP_TOKEN_DIGEST_BYTES]);

/* Whether an Authorization header value is "Bearer <the token>" (scheme
 * case-insensitive). Runs in time independent of the token's content. */
int ts_http_authorization_matches(
    const unsigned char digest[TS_HTTP_TOKEN_DIGEST_BYTES],
    const char *value);

#endif
