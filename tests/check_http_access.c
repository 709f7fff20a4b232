/* The HTTP endpoint's access rules: which tokens and origins the
 * configuration accepts, how a token file is read (and refused), and the
 * Authorization header match. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/http_access.h"
#include "ops/http_settings.h"
#include "tests/support/check_run.h"

#define GOOD_TOKEN "abcdefghijklmnop-0123456789_~+/=="

TS_TEST(test_token_format)
{
    char problem[256];
    ck_assert_int_eq(ts_http_token_check(GOOD_TOKEN, problem, sizeof problem),
                     0);
    static const char *const bad[] = {
        "short", "abcdefghijklmnop qrst", "abcdefghijklmnop\"q",
        "=abcdefghijklmnopq", "abcdefghijklmnop=q", "",
        "abcdefghijklmnopé",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        problem[0] = '\0';
        ck_assert_msg(ts_http_token_check(bad[i], problem, sizeof problem) ==
                          -1, "token %zu accepted", i);
        ck_assert(problem[0] != '\0');
        /* The message says where or how long, never the text. */
        ck_assert(bad[i][0] == '\0' || strstr(problem, bad[i]) == NULL);
    }
    char longest[TS_HTTP_TOKEN_MAX_CHARS + 2];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    ck_assert_int_eq(ts_http_token_check(longest, problem, sizeof problem),
                     -1);
    longest[TS_HTTP_TOKEN_MAX_CHARS] = '\0';
    ck_assert_int_eq(ts_http_token_check(longest, problem, sizeof problem),
                     0);
}
END_TEST

TS_TEST(test_origin_format)
{
    char problem[256];
    static const char *const good[] = {
        "http://127.0.0.1:8080", "https://dash.example.org",
        "http://localhost", "https://[::1]:9443", "https://a-b.c.example",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(ts_http_origin_check(good[i], problem,
                                           sizeof problem) == 0,
                      "%s refused: %s", good[i], problem);
    static const char *const bad[] = {
        "", "*", "null", "dash.example.org", "ftp://example.org",
        "https://example.org/", "https://example.org/path",
        "https://Example.org", "https://example.org:", "https://:80",
        "https://example.org:123456", "https://ex ample.org",
        "https://example.org\r\nX-Evil: 1", "https://[::1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(ts_http_origin_check(bad[i], problem,
                                           sizeof problem) == -1,
                      "%s accepted", bad[i]);
}
END_TEST

TS_TEST(test_authorization_match)
{
    unsigned char digest[TS_HTTP_TOKEN_DIGEST_BYTES];
    ts_http_token_digest(GOOD_TOKEN, digest);
    ck_assert(ts_http_authorization_matches(digest, "Bearer " GOOD_TOKEN));
    ck_assert(ts_http_authorization_matches(digest, " bearer  " GOOD_TOKEN
                                                    " "));
    ck_assert(ts_http_authorization_matches(digest, "BEARER\t" GOOD_TOKEN));
    ck_assert(!ts_http_authorization_matches(digest, GOOD_TOKEN));
    ck_assert(!ts_http_authorization_matches(digest, "Basic " GOOD_TOKEN));
    ck_assert(!ts_http_authorization_matches(digest, "Bearer" GOOD_TOKEN));
    ck_assert(!ts_http_authorization_matches(digest, "Bearer "
                                                     GOOD_TOKEN "x"));
    ck_assert(!ts_http_authorization_matches(digest, "Bearer "));
    ck_assert(!ts_http_authorization_matches(digest, ""));
    /* A prefix of the token is not the token. */
    ck_assert(!ts_http_authorization_matches(digest, "Bearer abcdefghijklmnop"));
}
END_TEST

static char dir[] = "/tmp/check_http_access.XXXXXX";

static const char *write_file(const char *name, const char *text,
                              mode_t mode)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    ck_assert_int_eq(chmod(path, mode), 0);
    return path;
}

/* Runs the loader on a token file; returns its status, the token read
 * (owned, or NULL) and the problem. */
static int load_token_file(const char *path, char **token, char *problem,
                           size_t len)
{
    ts_http_settings settings;
    ts_http_settings_defaults(&settings);
    settings.http_token_file = path;
    const char *blamed = NULL;
    int rc = ts_http_access_load(&settings, token, &blamed, problem, len);
    if (rc != 0)
        ck_assert_str_eq(blamed, "http.token_file");
    else
        ck_assert_ptr_eq(settings.http_token, *token);
    return rc;
}

TS_TEST(test_token_file)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char problem[640];
    char *token = NULL;
    ck_assert_int_eq(load_token_file(write_file("good", GOOD_TOKEN "\n",
                                                0600),
                                     &token, problem, sizeof problem), 0);
    ck_assert_str_eq(token, GOOD_TOKEN);
    ts_http_token_free(token);
    ck_assert_int_eq(load_token_file(write_file("crlf", GOOD_TOKEN "\r\n",
                                                0400),
                                     &token, problem, sizeof problem), 0);
    ck_assert_str_eq(token, GOOD_TOKEN);
    ts_http_token_free(token);

    struct {
        const char *name, *text;
        mode_t mode;
        const char *says;
    } bad[] = {
        { "empty", "", 0600, "is empty" },
        { "newline", "\n", 0600, "is empty" },
        { "shared", GOOD_TOKEN "\n", 0640, "group or others" },
        { "short", "tooshort\n", 0600, "characters long" },
        { "two-lines", GOOD_TOKEN "\nsecond\n", 0600, "character" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        token = NULL;
        problem[0] = '\0';
        ck_assert_int_eq(load_token_file(write_file(bad[i].name, bad[i].text,
                                                    bad[i].mode),
                                         &token, problem, sizeof problem),
                         -1);
        ck_assert_ptr_null(token);
        ck_assert_msg(strstr(problem, bad[i].says) != NULL, "%s: %s",
                      bad[i].name, problem);
        ck_assert(strstr(problem, GOOD_TOKEN) == NULL);
    }
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    ck_assert_int_eq(load_token_file(missing, &token, problem,
                                     sizeof problem), -1);
    ck_assert(strstr(problem, "cannot read") != NULL);

    ts_http_settings settings;
    ts_http_settings_defaults(&settings);
    settings.http_token = GOOD_TOKEN;
    settings.http_token_file = missing;
    const char *blamed = NULL;
    ck_assert_int_eq(ts_http_access_load(&settings, &token, &blamed, problem,
                                         sizeof problem), -1);
    ck_assert(strstr(problem, "both") != NULL);

    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(command), 0);
}
END_TEST

TS_TEST(test_access_checks_origins)
{
    ts_http_settings settings;
    ts_http_settings_defaults(&settings);
    settings.http_cors_origins[0] = "https://ok.example";
    settings.http_cors_origins[1] = "https://bad.example/";
    settings.n_http_cors_origins = 2;
    char *token = NULL;
    const char *blamed = NULL;
    char problem[640];
    ck_assert_int_eq(ts_http_access_load(&settings, &token, &blamed, problem,
                                         sizeof problem), -1);
    ck_assert_str_eq(blamed, "http.cors_origins");
    ck_assert(strstr(problem, "bad.example") != NULL);
    settings.n_http_cors_origins = 1;
    ck_assert_int_eq(ts_http_access_load(&settings, &token, &blamed, problem,
                                         sizeof problem), 0);
    ck_assert_ptr_null(settings.http_token);
}
END_TEST

int main(void)
{
    return ts_check_main("http_access", 0, NULL, NULL);
}
