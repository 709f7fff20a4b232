/* Key files and allow-lists: what is accepted, what is refused, and that
 * errors locate the problem without quoting key text. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "drivers/zmq/curve_keys.h"
#include "tests/support/check_run.h"

static char dir[] = "/tmp/check_curve_keys.XXXXXX";
static char public_z85[41];
static char secret_z85[41];
static char other_public_z85[41];

static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Outside any test, so plain checks: ck_assert only works inside one. */
static int setup(void)
{
    char other_secret[41];
    return mkdtemp(dir) != NULL &&
           zmq_curve_keypair(public_z85, secret_z85) == 0 &&
           zmq_curve_keypair(other_public_z85, other_secret) == 0;
}

TS_TEST(test_key_file_round_trip)
{
    char text[128];
    snprintf(text, sizeof text, "# comment\n\n  %s  \r\n", public_z85);
    const char *path = write_file("pub", text);
    unsigned char key[32];
    char err[256] = "";
    ck_assert_int_eq(ts_curve_read_key_file(path, key, err, sizeof err), 0);
    char again[41];
    ck_assert_ptr_nonnull(zmq_z85_encode(again, key, 32));
    ck_assert_str_eq(again, public_z85);
}
END_TEST

TS_TEST(test_key_file_errors_locate_without_key_text)
{
    unsigned char key[32];
    char err[256];
    /* 39 characters of a real key: wrong length, reported at line 2. */
    char text[128];
    snprintf(text, sizeof text, "# c\n%.39s\n", secret_z85);
    const char *path = write_file("short", text);
    ck_assert_int_eq(ts_curve_read_key_file(path, key, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "short:2: expected a 40-character"));
    char fragment[40];
    snprintf(fragment, sizeof fragment, "%.39s", secret_z85);
    ck_assert_ptr_null(strstr(err, fragment));

    /* Right length, a character outside the Z85 alphabet. */
    char bad[41];
    memcpy(bad, secret_z85, 41);
    bad[7] = '"';
    snprintf(text, sizeof text, "%s\n", bad);
    path = write_file("badchar", text);
    ck_assert_int_eq(ts_curve_read_key_file(path, key, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "badchar:1: not a valid Z85"));
    ck_assert_ptr_null(strstr(err, bad));

    snprintf(text, sizeof text, "%s\n%s\n", public_z85, other_public_z85);
    path = write_file("two", text);
    ck_assert_int_eq(ts_curve_read_key_file(path, key, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "two:2: a key file holds exactly one"));

    path = write_file("empty", "# nothing\n");
    ck_assert_int_eq(ts_curve_read_key_file(path, key, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "no key in the file"));

    snprintf(text, sizeof text, "%s/absent", dir);
    ck_assert_int_eq(ts_curve_read_key_file(text, key, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot read"));
}
END_TEST

TS_TEST(test_allow_list)
{
    char text[256];
    snprintf(text, sizeof text, "# allowed\n%s\n\n%s\n", public_z85,
             other_public_z85);
    const char *path = write_file("allow", text);
    ts_curve_allow_list list;
    char err[256] = "";
    ck_assert_int_eq(ts_curve_read_allow_list(path, &list, err, sizeof err), 0);
    ck_assert_uint_eq(list.n_keys, 2);
    unsigned char key[32];
    ck_assert_ptr_nonnull(zmq_z85_decode(key, public_z85));
    ck_assert_int_eq(ts_curve_allow_list_contains(&list, key), 1);
    key[31] ^= 1;
    ck_assert_int_eq(ts_curve_allow_list_contains(&list, key), 0);

    ts_curve_allow_list copy;
    ck_assert_int_eq(ts_curve_allow_list_copy(&copy, &list), 0);
    ck_assert_uint_eq(copy.n_keys, 2);
    ck_assert_int_eq(memcmp(copy.keys, list.keys, 64), 0);
    ts_curve_allow_list_free(&copy);
    ts_curve_allow_list_free(&list);

    path = write_file("allow_empty", "# nobody\n");
    ck_assert_int_eq(ts_curve_read_allow_list(path, &list, err, sizeof err), 0);
    ck_assert_uint_eq(list.n_keys, 0);
    ck_assert_int_eq(ts_curve_allow_list_contains(&list, key), 0);
    ts_curve_allow_list_free(&list);

    snprintf(text, sizeof text, "%s\n%s\nnot-a-key\n", public_z85,
             other_public_z85);
    path = write_file("allow_bad", text);
    ck_assert_int_eq(ts_curve_read_allow_list(path, &list, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "allow_bad:3:"));
    ck_assert_ptr_null(list.keys);
}
END_TEST

TS_TEST(test_pair_check_and_fingerprint)
{
    unsigned char secret[32], public_key[32], other[32];
    ck_assert_ptr_nonnull(zmq_z85_decode(secret, secret_z85));
    ck_assert_ptr_nonnull(zmq_z85_decode(public_key, public_z85));
    ck_assert_ptr_nonnull(zmq_z85_decode(other, other_public_z85));
    ck_assert_int_eq(ts_curve_check_pair(secret, public_key), 0);
    ck_assert_int_eq(ts_curve_check_pair(secret, other), -1);

    char fingerprint[TS_CURVE_FINGERPRINT_CHARS + 1];
    ts_curve_fingerprint(public_key, fingerprint);
    ck_assert_uint_eq(strlen(fingerprint), 8);
    char expected[9];
    snprintf(expected, sizeof expected, "%02x%02x%02x%02x", public_key[0],
             public_key[1], public_key[2], public_key[3]);
    ck_assert_str_eq(fingerprint, expected);
}
END_TEST

int main(void)
{
    if (!setup()) {
        fprintf(stderr, "check_curve_keys: cannot set up keys in %s\n", dir);
        return EXIT_FAILURE;
    }
    int status = ts_check_main("curve_keys", 0, NULL, NULL);
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (system(command) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return status;
}
