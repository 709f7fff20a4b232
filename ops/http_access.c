#include "ops/http_access.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "engine/safe_open.h"

static int is_b64token_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~' || c == '+' || c == '/';
}

int ts_http_token_check(const char *token, char *problem, size_t len)
{
    size_t n = strlen(token);
    size_t body = 0;
    while (body < n && is_b64token_char(token[body]))
        body++;
    size_t end = body;
    while (end < n && token[end] == '=')
        end++;
    /* Only lengths and positions go into the message: it may be logged. */
    if (end != n || body == 0) {
        snprintf(problem, len, "must be a bearer token of letters, digits "
                 "and - . _ ~ + / (then optional '='); character %zu is "
                 "not one", end + 1);
        return -1;
    }
    if (n < TS_HTTP_TOKEN_MIN_CHARS || n > TS_HTTP_TOKEN_MAX_CHARS) {
        snprintf(problem, len, "must be %d to %d characters long, not %zu "
                 "(e.g. head -c 32 /dev/urandom | base64 | tr -d '=')",
                 TS_HTTP_TOKEN_MIN_CHARS, TS_HTTP_TOKEN_MAX_CHARS, n);
        return -1;
    }
    return 0;
}

int ts_http_origin_check(const char *origin, char *problem, size_t len)
{
    const char *host = NULL;
    if (strncmp(origin, "http://", 7) == 0)
        host = origin + 7;
    else if (strncmp(origin, "https://", 8) == 0)
        host = origin + 8;
    if (host == NULL || strlen(origin) > TS_HTTP_ORIGIN_MAX_CHARS) {
        snprintf(problem, len, "entry \"%.80s\" is not an origin such as "
                 "\"https://dashboard.example.org\" or "
                 "\"http://127.0.0.1:8080\"", origin);
        return -1;
    }
    /* A bracketed IPv6 literal, or a name: letters, digits, '-' and '.'. */
    const char *p = host;
    int host_ok;
    if (*p == '[') {
        p++;
        while ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
               *p == ':' || *p == '.')
            p++;
        host_ok = *p == ']' && p > host + 1;
        if (host_ok)
            p++;
    } else {
        while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
               *p == '-' || *p == '.')
            p++;
        host_ok = p > host;
    }
    if (host_ok && *p == ':') {
        const char *digits = ++p;
        while (*p >= '0' && *p <= '9')
            p++;
        host_ok = p > digits && p - digits <= 5;
    }
    if (!host_ok || *p != '\0') {
        snprintf(problem, len, "entry \"%.80s\" must be scheme://host[:port] "
                 "exactly as browsers send it in Origin (lower-case host, no "
                 "path, no trailing '/')", origin);
        return -1;
    }
    return 0;
}

void ts_http_token_free(char *token)
{
    if (token == NULL)
        return;
    sodium_memzero(token, strlen(token));
    free(token);
}

/* The file's whole content, at most TS_HTTP_TOKEN_MAX_CHARS plus a line
 * end; NULL with `problem` filled. */
char *ts_http_read_token_file(const char *path, char *problem, size_t len)
{
    struct stat st;
    char why[128];
    int fd = ts_open_regular(path, &st, why, sizeof why);
    if (fd < 0) {
        snprintf(problem, len, "'%s': cannot read: %s", path, why);
        return NULL;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(problem, len, "'%s' must not be accessible by group or "
                 "others (chmod 600)", path);
        close(fd);
        return NULL;
    }
    size_t cap = TS_HTTP_TOKEN_MAX_CHARS + 3;
    char *text = calloc(1, cap + 1);
    if (text == NULL) {
        snprintf(problem, len, "out of memory");
        close(fd);
        return NULL;
    }
    size_t used = 0;
    for (;;) {
        ssize_t n = read(fd, text + used, cap - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(problem, len, "'%s': cannot read: %s", path,
                     strerror(errno));
            close(fd);
            ts_http_token_free(text);
            return NULL;
        }
        if (n == 0 || (used += (size_t)n) == cap)
            break;
    }
    close(fd);
    if (used == cap) {
        snprintf(problem, len, "'%s' is longer than a token (%d characters "
                 "at most)", path, TS_HTTP_TOKEN_MAX_CHARS);
        ts_http_token_free(text);
        return NULL;
    }
    while (used > 0 && (text[used - 1] == '\n' || text[used - 1] == '\r'))
        text[--used] = '\0';
    if (used == 0) {
        snprintf(problem, len, "'%s' is empty", path);
        ts_http_token_free(text);
        return NULL;
    }
    return text;
}

void ts_http_token_digest(const char *token,
                          unsigned char digest[TS_HTTP_TOKEN_DIGEST_BYTES])
{
    crypto_generichash(digest, TS_HTTP_TOKEN_DIGEST_BYTES,
                       (const unsigned char *)token, strlen(token), NULL, 0);
}

int ts_http_authorization_matches(
    const unsigned char digest[TS_HTTP_TOKEN_DIGEST_BYTES],
    const char *value)
{
    while (*value == ' ' || *value == '\t')
        value++;
    if (strncasecmp(value, "Bearer", 6) != 0 ||
        (value[6] != ' ' && value[6] != '\t'))
        return 0;
    const char *token = value + 6;
    while (*token == ' ' || *token == '\t')
        token++;
    size_t n = strlen(token);
    while (n > 0 && (token[n - 1] == ' ' || token[n - 1] == '\t'))
        n--;
    /* Comparing digests makes the time independent of where the
     * presented value first differs, and of the token's length. */
    unsigned char presented[TS_HTTP_TOKEN_DIGEST_BYTES];
    crypto_generichash(presented, sizeof presented,
                       (const unsigned char *)token, n, NULL, 0);
    return sodium_memcmp(presented, digest, sizeof presented) == 0;
}
