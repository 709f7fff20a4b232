/* Files named by configuration are opened without blocking and only when
 * regular (engine/safe_open.h), and the configuration file with its
 * includes is bounded before libconfig parses it (engine/config_file.h):
 * a FIFO anywhere is refused at once (a blocked open would hang the test
 * until Check's timeout), includes are found where libconfig finds them
 * and nowhere else, and the size, group and nesting limits hold exactly
 * at their values, across included files. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libconfig.h>

#include "engine/config_file.h"
#include "engine/safe_open.h"
#include "tests/support/check_run.h"

static char dir[] = "/tmp/tracesan-config-file.XXXXXX";

static void make_dir(void)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(command), 0);
}

static const char *in_dir(const char *name)
{
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, sizeof paths[0], "%s/%s", dir, name);
    return path;
}

static void write_file(const char *name, const char *text, size_t len)
{
    FILE *f = fopen(in_dir(name), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *name, const char *text)
{
    write_file(name, text, strlen(text));
}

static void make_fifo(const char *name)
{
    ck_assert_int_eq(mkfifo(in_dir(name), 0600), 0);
}

/* Parses NAME in the directory: 0, or -1 with err. */
static int read_config(const char *name, config_t *cfg, char *err,
                       size_t len)
{
    config_init(cfg);
    err[0] = '\0';
    return ts_config_file_read(cfg, in_dir(name), err, len);
}

static void expect_refused(const char *name, const char *want)
{
    config_t cfg;
    char err[1024];
    ck_assert_msg(read_config(name, &cfg, err, sizeof err) == -1,
                  "%s accepted", name);
    ck_assert_msg(strstr(err, want) != NULL, "%s: '%s' lacks '%s'", name,
                  err, want);
    config_destroy(&cfg);
}

static void expect_accepted(const char *name, config_t *cfg)
{
    char err[1024];
    ck_assert_msg(read_config(name, cfg, err, sizeof err) == 0, "%s: %s",
                  name, err);
}

TS_TEST(test_open_regular_only)
{
    write_text("plain", "hello");
    make_fifo("fifo");
    ck_assert_int_eq(mkdir(in_dir("sub"), 0700), 0);
    char why[128];
    struct stat st;
    int fd = ts_open_regular(in_dir("plain"), &st, why, sizeof why);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(st.st_size, 5);
    close(fd);
    ck_assert_int_eq(ts_open_regular(in_dir("fifo"), &st, why, sizeof why),
                     -1);
    ck_assert_str_eq(why, "not a regular file (a FIFO)");
    ck_assert_ptr_null(ts_fopen_regular(in_dir("sub"), why, sizeof why));
    ck_assert_str_eq(why, "not a regular file (a directory)");
    ck_assert_ptr_null(ts_fopen_regular("/dev/null", why, sizeof why));
    ck_assert_str_eq(why, "not a regular file (a character device)");
    ck_assert_ptr_null(ts_fopen_regular(in_dir("none"), why, sizeof why));
    ck_assert_str_eq(why, strerror(ENOENT));

    ck_assert_int_eq(ts_check_regular(in_dir("plain"), 0, why, sizeof why),
                     0);
    ck_assert_int_eq(ts_check_regular(in_dir("none"), 1, why, sizeof why),
                     0);
    ck_assert_int_eq(ts_check_regular(in_dir("none"), 0, why, sizeof why),
                     -1);
    ck_assert_int_eq(ts_check_regular(in_dir("fifo"), 1, why, sizeof why),
                     -1);
    ck_assert_str_eq(why, "not a regular file (a FIFO)");
}
END_TEST

TS_TEST(test_read_regular_bounded)
{
    write_text("five", "12345");
    char why[128];
    size_t size = 0;
    char *text = ts_read_regular(in_dir("five"), 5, &size, why, sizeof why);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(size, 5);
    ck_assert_str_eq(text, "12345");
    free(text);
    errno = 0;
    ck_assert_ptr_null(ts_read_regular(in_dir("five"), 4, &size, why,
                                       sizeof why));
    ck_assert_int_eq(errno, EFBIG);
    ck_assert_str_eq(why, "larger than 4 bytes");
    write_text("empty", "");
    text = ts_read_regular(in_dir("empty"), 4, &size, why, sizeof why);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(size, 0);
    free(text);
}
END_TEST

TS_TEST(test_fifo_include_refused)
{
    make_fifo("fifo.conf");
    write_text("main.conf", "a = 1;\n\n  @include \"fifo.conf\"\n");
    expect_refused("main.conf",
                   ":3: @include \"fifo.conf\": not a regular file (a FIFO)");
    /* The main file itself, and an include of an include, with the
     * includer's name and line. */
    expect_refused("fifo.conf", "cannot read: not a regular file (a FIFO)");
    write_text("outer.conf", "@include \"inner.conf\"\n");
    write_text("inner.conf", "b = 2;\n@include\t\"fifo.conf\"\n");
    expect_refused("outer.conf",
                   "inner.conf:2: @include \"fifo.conf\": not a regular file");
}
END_TEST

/* Where libconfig 1.5 sees no include, none is opened: in comments, in
 * strings, not first on its line. */
TS_TEST(test_include_only_where_libconfig_has_one)
{
    make_fifo("fifo.conf");
    write_text("part.conf", "from_part = 7;\n");
    write_text("main.conf",
               "/* a comment\n@include \"fifo.conf\"\n*/\n"
               "s = \"a string\n@include \\\"fifo.conf\\\"\n\";\n"
               "# @include \"fifo.conf\"\n"
               "t = 1; @include \"fifo.conf\"\n"
               "  @include \"part.conf\"\n");
    config_t cfg;
    char err[512];
    /* libconfig refuses the directive in mid-line as garbage. */
    ck_assert_int_eq(read_config("main.conf", &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not a regular") == NULL, "%s", err);
    config_destroy(&cfg);
    write_text("main.conf",
               "/* a comment\n@include \"fifo.conf\"\n*/\n"
               "s = \"a string\n@include \\\"fifo.conf\\\"\n\";\n"
               "# @include \"fifo.conf\"\n"
               "// @include \"fifo.conf\"\n"
               "  @include \"part.conf\"\n");
    expect_accepted("main.conf", &cfg);
    int value = 0;
    ck_assert(config_lookup_int(&cfg, "from_part", &value));
    ck_assert_int_eq(value, 7);
    config_destroy(&cfg);
}
END_TEST

/* A file of n bytes of comment padding around `x = 1;`. */
static void write_padded(const char *name, size_t n)
{
    char *text = malloc(n);
    ck_assert_ptr_nonnull(text);
    memset(text, ' ', n);
    memcpy(text, "x = 1; #", 8);
    text[n - 1] = '\n';
    write_file(name, text, n);
    free(text);
}

TS_TEST(test_size_bounded_across_includes)
{
    config_t cfg;
    write_padded("full.conf", TS_CONFIG_MAX_BYTES);
    expect_accepted("full.conf", &cfg);
    config_destroy(&cfg);
    write_padded("over.conf", TS_CONFIG_MAX_BYTES + 1);
    expect_refused("over.conf", "larger than 256 KiB");

    /* Each inclusion counts: twice a third of the limit is fine, three
     * times it is over with the main file's bytes. */
    write_padded("third.conf", TS_CONFIG_MAX_BYTES / 3);
    write_text("twice.conf", "@include \"third.conf\"\n"
                             "@include \"third.conf\"\n");
    /* Both define x: libconfig refuses the duplicate, after our checks. */
    ck_assert_int_eq(read_config("twice.conf", &cfg, (char[512]){ 0 }, 512),
                     -1);
    config_destroy(&cfg);
    write_text("thrice.conf", "@include \"third.conf\"\n"
                              "@include \"third.conf\"\n"
                              "@include \"third.conf\"\n");
    expect_refused("thrice.conf", "thrice.conf:3: @include \"third.conf\": "
                   "the configuration and its includes exceed 256 KiB");
}
END_TEST

/* `g = { k0 = 1; ... }` with n settings written with `sep`. */
static void write_group(const char *name, const char *prefix, int n,
                        const char *suffix)
{
    size_t cap = strlen(prefix) + strlen(suffix) + (size_t)n * 16 + 1;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    size_t used = (size_t)snprintf(text, cap, "%s", prefix);
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, cap - used, "k%d%s1;\n", i,
                                 i % 2 == 0 ? " = " : ": ");
    snprintf(text + used, cap - used, "%s", suffix);
    write_text(name, text);
    free(text);
}

TS_TEST(test_group_settings_bounded)
{
    config_t cfg;
    write_group("at.conf", "g = {\n s = \"=:=:\"; /* = : */ # =\n",
                TS_CONFIG_MAX_GROUP_SETTINGS - 1, "};\n");
    expect_accepted("at.conf", &cfg);
    config_destroy(&cfg);
    write_group("over.conf", "g = {\n", TS_CONFIG_MAX_GROUP_SETTINGS + 1,
                "};\n");
    char want[64];
    snprintf(want, sizeof want, "over.conf:%d: more than %d settings",
             TS_CONFIG_MAX_GROUP_SETTINGS + 2, TS_CONFIG_MAX_GROUP_SETTINGS);
    expect_refused("over.conf", want);
    /* The root is a group too; nested groups count apart. */
    write_group("root.conf", "", TS_CONFIG_MAX_GROUP_SETTINGS + 1, "");
    expect_refused("root.conf", "more than 1024 settings in one group");
    write_group("half.conf", "", TS_CONFIG_MAX_GROUP_SETTINGS / 2, "");
    write_text("two.conf", "a = {\n@include \"half.conf\"\n};\n"
                           "b = {\n@include \"half.conf\"\n};\n");
    expect_accepted("two.conf", &cfg);
    config_destroy(&cfg);
    /* An include spliced into a group counts in that group. */
    write_text("spliced.conf", "a = {\n@include \"half.conf\"\n"
                               "@include \"half.conf\"\nextra = 1;\n};\n");
    expect_refused("spliced.conf", "more than 1024 settings in one group");
}
END_TEST

TS_TEST(test_nesting_bounded)
{
    char text[1024] = "";
    for (int i = 0; i <= TS_CONFIG_MAX_NESTING; i++)
        strcat(text, "g = {");
    write_text("deep.conf", text);
    expect_refused("deep.conf", "groups nested more than 64 deep");
}
END_TEST

/* What is parsed is what was read: a NUL byte is an error, not the end of
 * the file, and an empty file is an empty configuration. */
TS_TEST(test_parsed_as_read)
{
    write_file("nul.conf", "a = 1;\n\0b = 2;\n", 15);
    config_t cfg;
    char err[512];
    ck_assert_int_eq(read_config("nul.conf", &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "nul.conf:2:") != NULL, "%s", err);
    config_destroy(&cfg);
    write_text("empty.conf", "");
    expect_accepted("empty.conf", &cfg);
    config_destroy(&cfg);
    write_text("syntax.conf", "a = 1;\nb = ;\n");
    expect_refused("syntax.conf", "syntax.conf:2: syntax error");
}
END_TEST

int main(void)
{
    return ts_check_main("config_file", 10, make_dir, remove_dir);
}
