/* The figures module of the CLI (tools/plot.h): nice ticks on linear and
 * log axes, tick labels, file names and sizes, and the files cairo writes:
 * a PNG of the asked size, an SVG, nothing at all on failure, and a
 * bounded file for a huge series. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/plot.h"
#include "tests/support/check_run.h"

static void check_linear(double lo, double hi, size_t target)
{
    double ticks[TS_PLOT_MAX_TICKS];
    double a = lo, b = hi;
    size_t n = ts_plot_ticks(TS_PLOT_LINEAR, &a, &b, target, ticks);
    ck_assert_uint_ge(n, 2);
    ck_assert_uint_le(n, TS_PLOT_MAX_TICKS);
    ck_assert(a <= fmin(lo, hi) && b >= fmax(lo, hi));
    ck_assert_double_eq(ticks[0], a);
    ck_assert_double_eq_tol(ticks[n - 1], b, 1e-9 * fmax(1.0, fabs(b)));
    double step = ticks[1] - ticks[0];
    for (size_t i = 1; i < n; i++)
        ck_assert_double_eq_tol(ticks[i] - ticks[i - 1], step,
                                1e-9 * fmax(1.0, fabs(b)));
    /* The step is 1, 2 or 5 times a power of ten. */
    double mantissa = step / pow(10.0, floor(log10(step) + 1e-12));
    ck_assert(fabs(mantissa - 1.0) < 1e-9 || fabs(mantissa - 2.0) < 1e-9 ||
              fabs(mantissa - 5.0) < 1e-9);
}

TS_TEST(linear_ticks_are_nice_and_cover_the_data)
{
    double ticks[TS_PLOT_MAX_TICKS];
    double lo = 0.0, hi = 1.0;
    ck_assert_uint_eq(ts_plot_ticks(TS_PLOT_LINEAR, &lo, &hi, 5, ticks), 6);
    for (size_t i = 0; i < 6; i++)
        ck_assert_double_eq_tol(ticks[i], 0.2 * (double)i, 1e-12);
    lo = 0.0;
    hi = 3335.9;
    ck_assert_uint_eq(ts_plot_ticks(TS_PLOT_LINEAR, &lo, &hi, 5, ticks), 8);
    ck_assert_double_eq(ticks[1], 500.0);
    ck_assert_double_eq(hi, 3500.0);
    /* Around zero, zero is exactly a tick. */
    lo = -0.3;
    hi = 0.7;
    size_t n = ts_plot_ticks(TS_PLOT_LINEAR, &lo, &hi, 5, ticks);
    int zero = 0;
    for (size_t i = 0; i < n; i++)
        zero |= ticks[i] == 0.0;
    ck_assert(zero);

    uint64_t state = 12345;
    for (int k = 0; k < 2000; k++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        double scale = pow(10.0, (double)(int)((state >> 33) % 17) - 8.0);
        double x = (double)((state >> 11) % 100000) / 1000.0 - 50.0;
        double y = x + (double)((state >> 40) % 1000) / 10.0;
        check_linear(x * scale, y * scale, 2 + (size_t)(state % 12));
    }
}
END_TEST

TS_TEST(degenerate_ranges_are_widened)
{
    check_linear(5.0, 5.0, 5);
    check_linear(0.0, 0.0, 5);
    check_linear(-1e9, -1e9, 5);
    double ticks[TS_PLOT_MAX_TICKS];
    double lo = 7.0, hi = 7.0;
    ck_assert_uint_ge(ts_plot_ticks(TS_PLOT_LOG, &lo, &hi, 5, ticks), 2);
    ck_assert(lo <= 7.0 && hi >= 7.0 && lo < hi);
    lo = NAN;
    hi = 1.0;
    ck_assert_uint_eq(ts_plot_ticks(TS_PLOT_LINEAR, &lo, &hi, 5, ticks), 0);
    lo = -1e308;
    hi = 1e308;
    ck_assert_uint_eq(ts_plot_ticks(TS_PLOT_LINEAR, &lo, &hi, 5, ticks), 0);
}
END_TEST

TS_TEST(log_ticks_are_powers_of_ten)
{
    double ticks[TS_PLOT_MAX_TICKS];
    double lo = 3.0, hi = 45000.0;
    ck_assert_uint_eq(ts_plot_ticks(TS_PLOT_LOG, &lo, &hi, 8, ticks), 6);
    for (size_t i = 0; i < 6; i++)
        ck_assert_double_eq_tol(ticks[i], pow(10.0, (double)i), 1e-9);
    ck_assert_double_eq_tol(lo, 1.0, 1e-12);
    ck_assert_double_eq_tol(hi, 1e5, 1e-6);
    /* Two decades or less: 2x and 5x too. */
    lo = 0.5;
    hi = 8.0;
    const double expected[] = { 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0 };
    ck_assert_uint_eq(ts_plot_ticks(TS_PLOT_LOG, &lo, &hi, 8, ticks), 7);
    for (size_t i = 0; i < 7; i++)
        ck_assert_double_eq_tol(ticks[i], expected[i], 1e-12);
    /* Many decades: every k-th, still at most the target. */
    lo = 1e-3;
    hi = 1e12;
    size_t n = ts_plot_ticks(TS_PLOT_LOG, &lo, &hi, 5, ticks);
    ck_assert_uint_le(n, 5);
    ck_assert(lo <= 1e-3 && hi >= 1e12);
    for (size_t i = 1; i < n; i++)
        ck_assert_double_eq_tol(ticks[i] / ticks[i - 1],
                                ticks[1] / ticks[0], 1e-6);
    lo = 0.0;
    hi = 10.0;
    ck_assert_uint_eq(ts_plot_ticks(TS_PLOT_LOG, &lo, &hi, 5, ticks), 0);
}
END_TEST

static void check_label(double value, double step, const char *expected)
{
    char text[64];
    ts_plot_format_tick(value, step, text, sizeof text);
    ck_assert_str_eq(text, expected);
}

TS_TEST(tick_labels_are_short)
{
    check_label(2500.0, 500.0, "2.5k");
    check_label(3000.0, 500.0, "3k");
    check_label(0.4, 0.2, "0.4");
    check_label(1.0, 0.2, "1");
    check_label(0.0, 0.2, "0");
    check_label(-0.2, 0.2, "-0.2");
    check_label(100.0, 100.0, "100");
    check_label(1e6, 1e6, "1M");
    check_label(0.001, 0.001, "0.001");
    check_label(1500.0, 10.0, "1500");
    check_label(-1e-17, 0.1, "0");
}
END_TEST

TS_TEST(file_names_and_sizes)
{
    ts_plot_format format;
    ck_assert_int_eq(ts_plot_format_of("out.svg", &format), 0);
    ck_assert_int_eq(format, TS_PLOT_SVG);
    ck_assert_int_eq(ts_plot_format_of("dir/OUT.PNG", &format), 0);
    ck_assert_int_eq(format, TS_PLOT_PNG);
    ck_assert_int_eq(ts_plot_format_of("out.pdf", &format), -1);
    ck_assert_int_eq(ts_plot_format_of("svg", &format), -1);
    ck_assert_int_eq(ts_plot_format_of("dir.svg/out", &format), -1);
    ck_assert_int_eq(ts_plot_format_of("dir/.svg", &format), -1);

    ts_plot_size size = { 0, 0 };
    ck_assert_int_eq(ts_plot_parse_size("800x500", &size), 0);
    ck_assert_uint_eq(size.width, 800);
    ck_assert_uint_eq(size.height, 500);
    ck_assert_int_eq(ts_plot_parse_size("1024X768", &size), 0);
    ck_assert_uint_eq(size.height, 768);
    const char *bad[] = { "800x", "x500", "800", "800x500 ", "-800x500",
                          "199x500", "800x8001", "800*500", "",
                          "99999999999999999999x500" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_int_eq(ts_plot_parse_size(bad[i], &size), -1);
    ck_assert_uint_eq(size.width, 1024);
    ck_assert_ptr_null(ts_plot_take_size(&size, "640x480"));
    ck_assert_ptr_nonnull(ts_plot_take_size(&size, "640"));
}
END_TEST

static char test_dir[64];

static void make_dir(void)
{
    snprintf(test_dir, sizeof test_dir, "/tmp/check_plot.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(test_dir));
}

static size_t entries(void)
{
    DIR *dir = opendir(test_dir);
    ck_assert_ptr_nonnull(dir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(dir);
    return n;
}

static void remove_dir(void)
{
    DIR *dir = opendir(test_dir);
    struct dirent *e;
    char path[512];
    while (dir != NULL && (e = readdir(dir)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", test_dir, e->d_name);
            unlink(path);
        }
    if (dir != NULL)
        closedir(dir);
    rmdir(test_dir);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    ck_assert_int_ge(size, 0);
    rewind(f);
    char *data = malloc((size_t)size + 1);
    ck_assert_ptr_nonnull(data);
    ck_assert_uint_eq(fread(data, 1, (size_t)size, f), (size_t)size);
    data[size] = '\0';
    fclose(f);
    *len = (size_t)size;
    return data;
}

static ts_plot *two_panels(size_t n)
{
    ts_plot *plot = ts_plot_new("test figure");
    ck_assert_ptr_nonnull(plot);
    ts_plot_panel *cdf = ts_plot_add_panel(plot, "CDF", "error (m)",
                                           TS_PLOT_LOG, "share",
                                           TS_PLOT_LINEAR);
    ts_plot_panel *line = ts_plot_add_panel(plot, "over time", "days",
                                            TS_PLOT_LINEAR, "value",
                                            TS_PLOT_LOG);
    ck_assert_ptr_nonnull(cdf);
    ck_assert_ptr_nonnull(line);
    ts_plot_panel_fix_y(cdf, 0.0, 1.0);
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    for (size_t i = 0; i < n; i++) {
        x[i] = 10.0 * exp((double)i / (double)n * 6.0);
        y[i] = (double)(i + 1) / (double)n;
    }
    ck_assert_int_eq(ts_plot_add_series(cdf, "alpha", TS_PLOT_STEP, x, y, n),
                     0);
    for (size_t i = 0; i < n; i++) {
        x[i] = (double)i;
        /* A break (0 on a log axis) and a spike. */
        y[i] = i == n / 2 ? 0.0 : 100.0 + (i % 7 == 0 ? 1e4 : (double)i);
    }
    ck_assert_int_eq(ts_plot_add_series(line, "alpha", TS_PLOT_LINE_MARKED,
                                        x, y, n < 50 ? n : 50),
                     0);
    ck_assert_int_eq(ts_plot_add_series(line, "beta", TS_PLOT_LINE, x, y, n),
                     0);
    free(x);
    free(y);
    ck_assert_uint_eq(ts_plot_panel_count(plot), 2);
    return plot;
}

/* `name` in the test's directory. */
static const char *in_test_dir(const char *name)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", test_dir, name);
    return path;
}

/* Writes the figure as `name` in the test's directory; the file's bytes. */
static char *written(const ts_plot *plot, const char *name,
                     ts_plot_size size, size_t *len)
{
    char err[256];
    const char *path = in_test_dir(name);
    ck_assert_int_eq(ts_plot_write(plot, path, size, err, sizeof err), 0);
    return slurp(path, len);
}

/* The tests that write files, each in a directory of its own. */
TS_CASE(files, 60, make_dir, remove_dir);

static uint32_t big_endian(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

TS_TEST_IN(files, png_has_the_asked_size)
{
    ts_plot *plot = two_panels(500);
    ts_plot_size size = { 640, 410 };
    size_t len;
    unsigned char *png =
        (unsigned char *)written(plot, "figure.png", size, &len);
    ck_assert_uint_gt(len, 33);
    ck_assert_int_eq(memcmp(png, "\x89PNG\r\n\x1a\n", 8), 0);
    ck_assert_int_eq(memcmp(png + 12, "IHDR", 4), 0);
    ck_assert_uint_eq(big_endian(png + 16), 640);
    ck_assert_uint_eq(big_endian(png + 20), 410);
    free(png);
    ck_assert_uint_eq(entries(), 1);
    /* Written over an existing file in place, still one file. */
    char err[256];
    const char *path = in_test_dir("figure.png");
    ck_assert_int_eq(ts_plot_write(plot, path, size, err, sizeof err), 0);
    ck_assert_uint_eq(entries(), 1);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    ck_assert_uint_eq(st.st_mode & 0777, 0666 & ~mask);
    ts_plot_free(plot);
}
END_TEST

/* two_panels(n) written as an SVG of `size`: the file's text. */
static char *two_panels_svg(size_t n, ts_plot_size size, size_t *len)
{
    ts_plot *plot = two_panels(n);
    char *svg = written(plot, "figure.svg", size, len);
    ts_plot_free(plot);
    return svg;
}

TS_TEST_IN(files, svg_is_cairos_and_has_the_asked_size)
{
    size_t len;
    char *svg = two_panels_svg(500, (ts_plot_size){ 700, 300 }, &len);
    ck_assert_ptr_nonnull(strstr(svg, "<svg"));
    ck_assert_ptr_nonnull(strstr(svg, "width=\"700px\""));
    ck_assert_ptr_nonnull(strstr(svg, "height=\"300px\""));
    ck_assert_ptr_nonnull(strstr(svg, "viewBox=\"0 0 700 300\""));
    ck_assert_ptr_nonnull(strstr(svg, "</svg>"));
    /* Text is drawn as glyphs. */
    ck_assert_ptr_nonnull(strstr(svg, "<symbol"));
    free(svg);
}
END_TEST

TS_TEST_IN(files, a_huge_series_stays_a_small_file)
{
    size_t len;
    char *svg = two_panels_svg(400000, (ts_plot_size){ 800, 500 }, &len);
    /* Four vertices a pixel column at most, per series. */
    ck_assert_uint_lt(len, 2000000);
    free(svg);
}
END_TEST

TS_TEST_IN(files, failures_leave_no_file)
{
    char path[128], err[256] = "";
    ts_plot *plot = two_panels(20);
    ts_plot_size size = { 800, 500 };
    snprintf(path, sizeof path, "%s/figure.pdf", test_dir);
    ck_assert_int_eq(ts_plot_write(plot, path, size, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, ".svg or .png"));
    snprintf(path, sizeof path, "%s/missing/figure.png", test_dir);
    ck_assert_int_eq(ts_plot_write(plot, path, size, err, sizeof err), -1);
    snprintf(path, sizeof path, "%s/figure.png", test_dir);
    ts_plot_size tiny = { 10, 10 };
    ck_assert_int_eq(ts_plot_write(plot, path, tiny, err, sizeof err), -1);
    ck_assert_uint_eq(entries(), 0);
    ts_plot_free(plot);
    /* An empty figure still draws (callers leave out empty panels). */
    ts_plot *empty = ts_plot_new(NULL);
    ck_assert_ptr_nonnull(empty);
    ck_assert_int_eq(ts_plot_write(empty, path, size, err, sizeof err), 0);
    ck_assert_uint_eq(entries(), 1);
    ts_plot_free(empty);
}
END_TEST

TS_TEST_IN(files, extreme_values_still_draw)
{
    ts_plot *plot = ts_plot_new(NULL);
    ts_plot_panel *panel = ts_plot_add_panel(plot, "wide", "x",
                                             TS_PLOT_LINEAR, "y", TS_PLOT_LOG);
    ck_assert_ptr_nonnull(panel);
    const double x[] = { -1e308, 0.0, 1e308 }, y[] = { 1e-300, -1.0, 1e300 };
    ck_assert_int_eq(ts_plot_add_series(panel, "a", TS_PLOT_STEP, x, y, 3), 0);
    size_t len;
    free(written(plot, "figure.png", (ts_plot_size){ 300, 200 }, &len));
    ts_plot_free(plot);
}
END_TEST

int main(void)
{
    return ts_check_main("plot", 60, NULL, NULL);
}
