/* CSV reader and writers of the tracesan tools. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tools/csv.h"
#include "tests/support/check_run.h"

static char tmpdir[64];
static char path[128];
static char err[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/check_csv.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(path, sizeof path, "%s/in.csv", tmpdir);
}

static void teardown(void)
{
    char gz[160];
    snprintf(gz, sizeof gz, "%s.gz", path);
    unlink(path);
    unlink(gz);
    rmdir(tmpdir);
}

static void write_file(const char *text)
{
    FILE *file = fopen(path, "w");
    ck_assert_ptr_nonnull(file);
    ck_assert_int_eq(fputs(text, file) >= 0, 1);
    ck_assert_int_eq(fclose(file), 0);
}

static ts_csv_reader *open_text(const char *text)
{
    write_file(text);
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    ck_assert_msg(reader != NULL, "open failed: %s", err);
    return reader;
}

static void expect_row(ts_csv_reader *reader, ts_csv_row *row)
{
    int rc = ts_csv_read(reader, row, err, sizeof err);
    ck_assert_msg(rc == TS_CSV_ROW, "expected a row, got %d (%s)", rc, err);
}

static void expect_eof(ts_csv_reader *reader)
{
    ts_csv_row row;
    ck_assert_int_eq(ts_csv_read(reader, &row, err, sizeof err), TS_CSV_EOF);
}

/* Captures what a writer produces. */
static char *capture(int (*write)(FILE *, const void *), const void *row)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buf, &size);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(write(out, row), 0);
    ck_assert_int_eq(fclose(out), 0);
    return buf;
}

static int write_sanitized(FILE *out, const void *row)
{
    return ts_csv_write_sanitized(out, row);
}

static int write_rejected(FILE *out, const void *row)
{
    return ts_csv_write_rejected(out, row);
}

TS_TEST(basic_header_and_rows)
{
    ts_csv_reader *reader = open_text(
        "user,ts,lat,lon\n"
        "62,1254682593,40.645919692,-73.7779355049\n"
        "63,1267593997,40.6438845363,-73.78280639649999\n");
    ck_assert_int_eq(ts_csv_has_profile_column(reader), 0);
    ts_csv_row row;
    expect_row(reader, &row);
    ck_assert_uint_eq(row.line, 2);
    ck_assert_str_eq(row.user, "62");
    ck_assert_int_eq(row.ts_ms, 1254682593000LL);
    ck_assert(row.lat == 40.645919692);
    ck_assert(row.lon == -73.7779355049);
    ck_assert_int_eq(row.has_accuracy, 0);
    ck_assert_ptr_null(row.profile);
    expect_row(reader, &row);
    ck_assert_uint_eq(row.line, 3);
    ck_assert_str_eq(row.user, "63");
    expect_eof(reader);
    ts_csv_close(reader);
}
END_TEST

TS_TEST(reordered_and_extra_columns)
{
    ts_csv_reader *reader = open_text(
        "note,lon,Profile,lat,accuracy,ts,user\r\n"
        "x,2.5,strict,1.5,12.5,100,u1\r\n"
        "y,-2.5,,-1.5,,200,u2\r\n");
    ck_assert_int_eq(ts_csv_has_profile_column(reader), 1);
    ts_csv_row row;
    expect_row(reader, &row);
    ck_assert_str_eq(row.user, "u1");
    ck_assert_int_eq(row.ts_ms, 100000);
    ck_assert(row.lat == 1.5);
    ck_assert(row.lon == 2.5);
    ck_assert_int_eq(row.has_accuracy, 1);
    ck_assert(row.accuracy_m == 12.5);
    ck_assert_str_eq(row.profile, "strict");
    /* Empty optional fields are absent, not zero. */
    expect_row(reader, &row);
    ck_assert_str_eq(row.user, "u2");
    ck_assert_int_eq(row.has_accuracy, 0);
    ck_assert_ptr_null(row.profile);
    expect_eof(reader);
    ts_csv_close(reader);
}
END_TEST

TS_TEST(fractional_timestamps)
{
    ts_csv_reader *reader = open_text(
        "user,ts,lat,lon\n"
        "a,1254682593.25,0,0\n"
        "a,1254682593.0005,0,0\n"
        "a,1254682593.9999,0,0\n"
        "a,0.001,0,0\n");
    ts_csv_row row;
    expect_row(reader, &row);
    ck_assert_int_eq(row.ts_ms, 1254682593250LL);
    ck_assert(row.ts_s == 1254682593.25);
    expect_row(reader, &row);
    /* llround: half a millisecond rounds away from zero (up to the double
     * nearest 1254682593000.5, which is above it). */
    ck_assert(row.ts_ms == 1254682593000LL || row.ts_ms == 1254682593001LL);
    expect_row(reader, &row);
    ck_assert_int_eq(row.ts_ms, 1254682594000LL);
    expect_row(reader, &row);
    ck_assert_int_eq(row.ts_ms, 1);
    ts_csv_close(reader);
}
END_TEST

TS_TEST(quoted_fields)
{
    ts_csv_reader *reader = open_text(
        "user,ts,lat,lon\n"
        "\"smith, john\",1,2,3\n"
        "\"say \"\"hi\"\"\",4,5,6\n"
        "\"two\nlines\",7,8,9\n"
        "plain,10,11,12\n");
    ts_csv_row row;
    expect_row(reader, &row);
    ck_assert_str_eq(row.user, "smith, john");
    ck_assert_int_eq(row.ts_ms, 1000);
    ck_assert(row.lon == 3.0);
    expect_row(reader, &row);
    ck_assert_str_eq(row.user, "say \"hi\"");
    expect_row(reader, &row);
    ck_assert_str_eq(row.user, "two\nlines");
    ck_assert_uint_eq(row.line, 4);
    ck_assert(row.lat == 8.0);
    /* Line numbers count physical lines: the quoted newline took one. */
    expect_row(reader, &row);
    ck_assert_uint_eq(row.line, 6);
    ck_assert_str_eq(row.user, "plain");
    expect_eof(reader);
    ts_csv_close(reader);
}
END_TEST

TS_TEST(bad_fields_name_the_line)
{
    ts_csv_reader *reader = open_text(
        "user,ts,lat,lon\n"
        "ok,1,2,3\n"
        "\n"
        "bad,1,40.71x,3\n"
        "short,1,2\n"
        "badts,yesterday,2,3\n"
        "missing,,,\n"
        "nan,1,nan,inf\n"
        "last,2,3,4");
    ts_csv_row row;
    expect_row(reader, &row);
    ck_assert_uint_eq(row.line, 2);

    /* Blank line 3 is skipped; line 4 has text in lat. */
    ck_assert_int_eq(ts_csv_read(reader, &row, err, sizeof err),
                     TS_CSV_BAD_ROW);
    ck_assert_uint_eq(row.line, 4);
    ck_assert_str_eq(row.user, "bad");
    ck_assert_ptr_nonnull(strstr(err, "lat"));
    /* The offending text may be a coordinate: it is never echoed. */
    ck_assert_ptr_null(strstr(err, "40.71"));

    ck_assert_int_eq(ts_csv_read(reader, &row, err, sizeof err),
                     TS_CSV_BAD_ROW);
    ck_assert_uint_eq(row.line, 5);
    ck_assert_ptr_nonnull(strstr(err, "fields"));

    ck_assert_int_eq(ts_csv_read(reader, &row, err, sizeof err),
                     TS_CSV_BAD_ROW);
    ck_assert_uint_eq(row.line, 6);
    ck_assert_ptr_nonnull(strstr(err, "'ts'"));

    /* Empty numbers are missing values for the pipeline to refuse. */
    expect_row(reader, &row);
    ck_assert_uint_eq(row.line, 7);
    ck_assert_int_eq(row.ts_ms, 0);
    ck_assert(isnan(row.lat));
    ck_assert(isnan(row.lon));

    /* strtod's nan and inf pass through for the same reason. */
    expect_row(reader, &row);
    ck_assert(isnan(row.lat));
    ck_assert(isinf(row.lon));

    /* A last line without a newline is still a row. */
    expect_row(reader, &row);
    ck_assert_uint_eq(row.line, 9);
    ck_assert_str_eq(row.user, "last");
    expect_eof(reader);
    ts_csv_close(reader);
}
END_TEST

TS_TEST(header_must_name_required_columns)
{
    write_file("user,time,lat,lon\n1,2,3,4\n");
    ck_assert_ptr_null(ts_csv_open(path, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "'ts'"));
    ck_assert_ptr_nonnull(strstr(err, "line 1"));

    write_file("");
    ck_assert_ptr_null(ts_csv_open(path, err, sizeof err));

    write_file("user,ts,lat,lon,ts\n");
    ck_assert_ptr_null(ts_csv_open(path, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "twice"));

    char missing[160];
    snprintf(missing, sizeof missing, "%s/does-not-exist.csv", tmpdir);
    ck_assert_ptr_null(ts_csv_open(missing, err, sizeof err));
}
END_TEST

TS_TEST(gzip_input_is_transparent)
{
    char gz_path[160];
    snprintf(gz_path, sizeof gz_path, "%s.gz", path);
    gzFile gz = gzopen(gz_path, "wb");
    ck_assert_ptr_nonnull(gz);
    gzputs(gz, "user,ts,lat,lon\n");
    for (int i = 0; i < 5000; i++)
        gzprintf(gz, "user%d,%d.5,%d.25,-%d.75\n", i, 1000 + i, i % 90,
                 i % 180);
    ck_assert_int_eq(gzclose(gz), Z_OK);

    /* It really is compressed: the gzip magic, not the header text. */
    FILE *raw = fopen(gz_path, "rb");
    ck_assert_ptr_nonnull(raw);
    unsigned char magic[2];
    ck_assert_uint_eq(fread(magic, 1, 2, raw), 2);
    fclose(raw);
    ck_assert(magic[0] == 0x1f && magic[1] == 0x8b);

    ts_csv_reader *reader = ts_csv_open(gz_path, err, sizeof err);
    ck_assert_msg(reader != NULL, "%s", err);
    ts_csv_row row;
    for (int i = 0; i < 5000; i++) {
        expect_row(reader, &row);
        char user[32];
        snprintf(user, sizeof user, "user%d", i);
        ck_assert_str_eq(row.user, user);
        ck_assert_int_eq(row.ts_ms, (int64_t)(1000 + i) * 1000 + 500);
        ck_assert(row.lat == (i % 90) + 0.25);
        ck_assert(row.lon == -((i % 180) + 0.75));
        ck_assert_uint_eq(row.line, (size_t)i + 2);
    }
    expect_eof(reader);
    ts_csv_close(reader);
}
END_TEST

TS_TEST(long_lines)
{
    /* Longer than the reader's initial buffer. */
    size_t n = 50000;
    char *user = malloc(n + 1);
    ck_assert_ptr_nonnull(user);
    memset(user, 'u', n);
    user[n] = '\0';
    size_t size = n + 64;
    char *text = malloc(size);
    ck_assert_ptr_nonnull(text);
    snprintf(text, size, "user,ts,lat,lon\n%s,1,2,3\nb,4,5,6\n", user);
    ts_csv_reader *reader = open_text(text);
    ts_csv_row row;
    expect_row(reader, &row);
    ck_assert_uint_eq(strlen(row.user), n);
    expect_row(reader, &row);
    ck_assert_str_eq(row.user, "b");
    ck_assert_uint_eq(row.line, 3);
    ts_csv_close(reader);
    free(text);
    free(user);
}
END_TEST

TS_TEST(timestamp_format)
{
    char buf[32];
    ts_csv_format_ts(1254682593000LL, buf, sizeof buf);
    ck_assert_str_eq(buf, "1254682593");
    ts_csv_format_ts(1254682593250LL, buf, sizeof buf);
    ck_assert_str_eq(buf, "1254682593.250");
    ts_csv_format_ts(1254682593001LL, buf, sizeof buf);
    ck_assert_str_eq(buf, "1254682593.001");
    ts_csv_format_ts(999, buf, sizeof buf);
    ck_assert_str_eq(buf, "0.999");
    ts_csv_format_ts(0, buf, sizeof buf);
    ck_assert_str_eq(buf, "0");
    ts_csv_format_ts(-1500, buf, sizeof buf);
    ck_assert_str_eq(buf, "-1.500");
}
END_TEST

TS_TEST(fixed7_matches_printf)
{
    /* The fast coordinate formatter must agree with printf everywhere:
     * random coordinates, exact ties at the 8th decimal, values just either
     * side of a tie, signed zero, large and non-finite values. */
    static const double specials[] = {
        0.0, -0.0, 0.00000005, -0.00000005, 0.00000015, 0.00000025,
        40.12345675, -73.99999995, 179.99999999, -180.0, 90.0, 1e-300,
        -1e-9, 999.99999995, 1000.0, 123456789.123456789, 1e300,
        NAN, INFINITY, -INFINITY,
    };
    char fast[64];
    char slow[64];
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        ts_csv_format_fixed7(specials[i], fast, sizeof fast);
        snprintf(slow, sizeof slow, "%.7f", specials[i]);
        ck_assert_str_eq(fast, slow);
    }
    /* A fixed-seed LCG: reproducible, no dependency on the tool's rng. */
    uint64_t state = 12345;
    for (int i = 0; i < 300000; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(state >> 11) * 0x1.0p-53;
        double value = (u - 0.5) * 360.0;
        if (i % 3 != 0) /* (nearly) a tie: k + 0.5 units of 1e-7 */
            value = (floor(value * 1e7) + 0.5) / 1e7;
        if (i % 3 == 2) /* one ulp either side of it */
            value = nextafter(value, (i & 4) ? INFINITY : -INFINITY);
        ts_csv_format_fixed7(value, fast, sizeof fast);
        snprintf(slow, sizeof slow, "%.7f", value);
        ck_assert_msg(strcmp(fast, slow) == 0, "%.17g: %s vs %s", value, fast,
                      slow);
    }
}
END_TEST

TS_TEST(sanitized_row_format)
{
    ts_csv_sanitized row = {
        .user = "62",
        .ts_ms = 1254682593000LL,
        .lat = 40.64591969,
        .lon = -73.77793550,
        .mechanism = "geoind",
        .eps_point = 0.02302585092994046 / 30,
        .eps_spent = 0.02302585092994046 / 15,
        .eps_remaining = 0.02302585092994046 * 13 / 15,
        .profile = "geoind",
    };
    char *line = capture(write_sanitized, &row);
    ck_assert_str_eq(line, "62,1254682593,40.6459197,-73.7779355,geoind,"
                           "0.000767528364,0.00153505673,0.0199557375,"
                           "geoind,,,,,,\n");
    free(line);

    ts_report extras = { .lat = 0.0 };
    row.ts_ms = 1254682593125LL;
    row.user = "a,b";
    row.extras = &extras;
    extras.has_predicted = 1;
    extras.predicted = 0;
    line = capture(write_sanitized, &row);
    ck_assert_str_eq(line, "\"a,b\",1254682593.125,40.6459197,-73.7779355,"
                           "geoind,0.000767528364,0.00153505673,"
                           "0.0199557375,geoind,0,,,,,\n");
    free(line);

    /* Each extra alone fills its own column, after the profile's. */
    static const struct {
        ts_report extras;
        const char *tail;
    } alone[] = {
        { { .has_predicted = 1, .predicted = 1 }, ",geoind,1,,,,,\n" },
        { { .has_delta_set_size = 1, .delta_set_size = 17 },
          ",geoind,,17,,,,\n" },
        { { .has_channel_version = 1, .channel_version = 4 },
          ",geoind,,,4,,,\n" },
        { { .has_information_theoretic = 1, .information_theoretic = 1 },
          ",geoind,,,,1,,\n" },
        { { .has_sigma_z_m = 1, .sigma_z_m = 1153.9625 },
          ",geoind,,,,,1153.9625,\n" },
        { { .has_eps_floor = 1, .eps_floor = 1.3714 },
          ",geoind,,,,,,1.3714\n" },
    };
    for (size_t i = 0; i < sizeof alone / sizeof *alone; i++) {
        row.extras = &alone[i].extras;
        line = capture(write_sanitized, &row);
        ck_assert_ptr_nonnull(strstr(line, alone[i].tail));
        free(line);
    }
}
END_TEST

TS_TEST(rejected_row_format)
{
    ts_csv_rejected row = {
        .user = "say \"hi\"",
        .has_ts = 1,
        .ts_ms = 1000,
        .reason = "time_went_backwards",
        .profile = "geoind",
        .detail = "timestamp before the previous one, by 5 s",
    };
    char *line = capture(write_rejected, &row);
    ck_assert_str_eq(line, "\"say \"\"hi\"\"\",1,time_went_backwards,geoind,"
                           "\"timestamp before the previous one, by 5 s\"\n");
    free(line);

    ts_csv_rejected unknown = { .reason = "malformed", .detail = "two\nlines" };
    line = capture(write_rejected, &unknown);
    ck_assert_str_eq(line, ",,malformed,,\"two\nlines\"\n");
    free(line);
}
END_TEST

TS_TEST(writer_output_reads_back)
{
    /* The file format consumers parse: the base columns, then the public
     * extras in table order. */
    ck_assert_str_eq(ts_csv_sanitized_header(),
                     "user,ts,lat,lon,mechanism,eps_point,eps_spent,"
                     "eps_remaining,profile,predicted,delta_set_size,"
                     "channel_version,information_theoretic,sigma_z_m,"
                     "eps_floor");
    /* What sanitize writes is valid input (columns by name, quoting). */
    FILE *out = fopen(path, "w");
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(ts_csv_write_sanitized_header(out), 0);
    ts_csv_sanitized row = { .user = "x,\"y\"", .ts_ms = 1500, .lat = -12.5,
                             .lon = 100.125, .mechanism = "geoind",
                             .profile = "geoind" };
    ck_assert_int_eq(ts_csv_write_sanitized(out, &row), 0);
    ck_assert_int_eq(fclose(out), 0);
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    ck_assert_msg(reader != NULL, "%s", err);
    ts_csv_row back;
    expect_row(reader, &back);
    ck_assert_str_eq(back.user, "x,\"y\"");
    ck_assert_int_eq(back.ts_ms, 1500);
    ck_assert(back.lat == -12.5);
    ck_assert(back.lon == 100.125);
    ck_assert_str_eq(back.profile, "geoind");
    ts_csv_close(reader);
}
END_TEST

int main(void)
{
    return ts_check_main("csv", 0, setup, teardown);
}
