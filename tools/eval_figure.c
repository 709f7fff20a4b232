/* The figure of `tracesan eval --plot` (tools/eval_figure.h). */
#include "tools/eval_figure.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Up to this many vertices a time series gets a dot on each: a sparse
 * check-in trace reads better as dots, a dense GPS trace as a line. */
#define MARKED_SERIES_MAX 200
/* User names are pseudonyms of any length; a title shows this much. */
#define TITLE_USER_MAX 40

typedef struct followed_row {
    int64_t ts_ms;
    double error_m, delta_set_size;
} followed_row;

typedef struct figure_series {
    char *profile;
    size_t file;
    double *errors;
    size_t n_errors, errors_cap;
    followed_row *followed;
    size_t n_followed, followed_cap;
} figure_series;

struct ts_eval_figure {
    char *user;
    char **files;
    size_t n_files, files_cap;
    figure_series *series;
    size_t n_series, series_cap;
    size_t last;             /* the series the previous row went to */
};

ts_eval_figure *ts_eval_figure_new(const char *user)
{
    ts_eval_figure *figure = calloc(1, sizeof *figure);
    if (figure == NULL)
        return NULL;
    if ((figure->user = strdup(user)) == NULL) {
        free(figure);
        return NULL;
    }
    return figure;
}

void ts_eval_figure_free(ts_eval_figure *figure)
{
    if (figure == NULL)
        return;
    for (size_t i = 0; i < figure->n_series; i++) {
        free(figure->series[i].profile);
        free(figure->series[i].errors);
        free(figure->series[i].followed);
    }
    free(figure->series);
    for (size_t i = 0; i < figure->n_files; i++)
        free(figure->files[i]);
    free(figure->files);
    free(figure->user);
    free(figure);
}

int ts_eval_figure_begin_file(ts_eval_figure *figure, const char *path)
{
    if (figure->n_files == figure->files_cap) {
        size_t cap = figure->files_cap ? figure->files_cap * 2 : 4;
        char **files = realloc(figure->files, cap * sizeof *files);
        if (files == NULL)
            return -1;
        figure->files = files;
        figure->files_cap = cap;
    }
    if ((figure->files[figure->n_files] = strdup(path)) == NULL)
        return -1;
    figure->n_files++;
    return 0;
}

static figure_series *series_for(ts_eval_figure *figure, const char *profile)
{
    size_t file = figure->n_files - 1;
    if (figure->last < figure->n_series) {
        figure_series *s = &figure->series[figure->last];
        if (s->file == file && strcmp(s->profile, profile) == 0)
            return s;
    }
    for (size_t i = 0; i < figure->n_series; i++)
        if (figure->series[i].file == file &&
            strcmp(figure->series[i].profile, profile) == 0) {
            figure->last = i;
            return &figure->series[i];
        }
    if (figure->n_series == figure->series_cap) {
        size_t cap = figure->series_cap ? figure->series_cap * 2 : 8;
        figure_series *grown = realloc(figure->series, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        figure->series = grown;
        figure->series_cap = cap;
    }
    figure_series *s = &figure->series[figure->n_series];
    memset(s, 0, sizeof *s);
    s->file = file;
    if ((s->profile = strdup(profile)) == NULL)
        return NULL;
    figure->last = figure->n_series++;
    return s;
}

int ts_eval_figure_add(ts_eval_figure *figure, const char *profile,
                       int followed_user, int64_t ts_ms, double error_m,
                       double delta_set_size)
{
    if (figure->n_files == 0 && ts_eval_figure_begin_file(figure, "-") != 0)
        return -1;
    figure_series *s = series_for(figure, profile);
    if (s == NULL)
        return -1;
    if (s->n_errors == s->errors_cap) {
        size_t cap = s->errors_cap ? s->errors_cap * 2 : 1024;
        double *grown = realloc(s->errors, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        s->errors = grown;
        s->errors_cap = cap;
    }
    s->errors[s->n_errors++] = error_m;
    if (!followed_user)
        return 0;
    if (s->n_followed == s->followed_cap) {
        size_t cap = s->followed_cap ? s->followed_cap * 2 : 256;
        followed_row *grown = realloc(s->followed, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        s->followed = grown;
        s->followed_cap = cap;
    }
    s->followed[s->n_followed++] =
        (followed_row){ ts_ms, error_m, delta_set_size };
    return 0;
}

/* ---------------------------------------------------------- drawing */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL && slash[1] != '\0' ? slash + 1 : path;
}

/* The legend's name of a series: its profile, with the file's name when
 * another file has the same profile; the file's name alone when the rows
 * named no profile. */
static void series_label(const ts_eval_figure *figure, size_t index,
                         char *out, size_t len)
{
    const figure_series *s = &figure->series[index];
    const char *file = base_name(figure->files[s->file]);
    if (s->profile[0] == '\0') {
        snprintf(out, len, "%s", file);
        return;
    }
    for (size_t i = 0; i < figure->n_series; i++)
        if (i != index && figure->series[i].file != s->file &&
            strcmp(figure->series[i].profile, s->profile) == 0) {
            snprintf(out, len, "%s (%s)", s->profile, file);
            return;
        }
    snprintf(out, len, "%s", s->profile);
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y);
}

static int compare_followed(const void *a, const void *b)
{
    const followed_row *x = a, *y = b;
    return x->ts_ms < y->ts_ms ? -1 : (x->ts_ms > y->ts_ms);
}

/* The empirical CDF as a step series: (e_1, 0), then (e_i, i / n). */
static int add_cdf(ts_plot_panel *panel, const char *label,
                   const figure_series *s)
{
    size_t n = s->n_errors;
    double *x = malloc((n + 1) * sizeof *x);
    double *y = malloc((n + 1) * sizeof *y);
    int status = -1;
    if (x == NULL || y == NULL)
        goto out;
    memcpy(x + 1, s->errors, n * sizeof *x);
    qsort(x + 1, n, sizeof *x, compare_doubles);
    x[0] = x[1];
    y[0] = 0.0;
    for (size_t i = 1; i <= n; i++)
        y[i] = (double)i / (double)n;
    status = ts_plot_add_series(panel, label, TS_PLOT_STEP, x, y, n + 1);
out:
    free(x);
    free(y);
    return status;
}

typedef struct time_axis {
    int64_t origin_ms;
    double unit_s;
    const char *unit_name;
} time_axis;

/* Elapsed time since the followed user's first drawn row, in the largest
 * unit that still leaves a few of them across the axis. */
static time_axis choose_time_axis(const ts_eval_figure *figure)
{
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < figure->n_series; i++)
        for (size_t k = 0; k < figure->series[i].n_followed; k++) {
            int64_t ts = figure->series[i].followed[k].ts_ms;
            first = ts < first ? ts : first;
            last = ts > last ? ts : last;
        }
    time_axis t = { first, 86400.0, "days" };
    double span_s = first <= last ? (double)(last - first) / 1000.0 : 0.0;
    if (span_s <= 2.0 * 3600.0) {
        t.unit_s = 60.0;
        t.unit_name = "minutes";
    } else if (span_s <= 3.0 * 86400.0) {
        t.unit_s = 3600.0;
        t.unit_name = "hours";
    }
    return t;
}

/* Adds the followed user's rows of s to panel: the error, or |ΔX| when
 * want_dss (rows without it skipped). Nothing when there is no such row. */
static int add_over_time(ts_plot_panel *panel, const char *label,
                         const figure_series *s, const time_axis *t,
                         int want_dss)
{
    double *x = malloc((s->n_followed ? s->n_followed : 1) * sizeof *x);
    double *y = malloc((s->n_followed ? s->n_followed : 1) * sizeof *y);
    int status = -1;
    if (x == NULL || y == NULL)
        goto out;
    size_t n = 0;
    for (size_t k = 0; k < s->n_followed; k++) {
        const followed_row *r = &s->followed[k];
        double v = want_dss ? r->delta_set_size : r->error_m;
        if (!isfinite(v))
            continue;
        x[n] = (double)(r->ts_ms - t->origin_ms) / 1000.0 / t->unit_s;
        y[n] = v;
        n++;
    }
    status = n == 0 ? 0
                    : ts_plot_add_series(panel, label,
                                         n <= MARKED_SERIES_MAX
                                             ? TS_PLOT_LINE_MARKED
                                             : TS_PLOT_LINE,
                                         x, y, n);
out:
    free(x);
    free(y);
    return status;
}

static int has_followed(const ts_eval_figure *figure, int want_dss)
{
    for (size_t i = 0; i < figure->n_series; i++)
        for (size_t k = 0; k < figure->series[i].n_followed; k++)
            if (!want_dss ||
                isfinite(figure->series[i].followed[k].delta_set_size))
                return 1;
    return 0;
}

static int build(ts_eval_figure *figure, ts_plot *plot)
{
    char label[512], title[128], x_label[128];
    int any_errors = 0;
    for (size_t i = 0; i < figure->n_series; i++)
        any_errors |= figure->series[i].n_errors > 0;
    if (any_errors) {
        ts_plot_panel *panel = ts_plot_add_panel(
            plot, "Error CDF per profile", "error (m, log scale)",
            TS_PLOT_LOG, "share of releases with error \xe2\x89\xa4 x",
            TS_PLOT_LINEAR);
        if (panel == NULL)
            return -1;
        ts_plot_panel_fix_y(panel, 0.0, 1.0);
        for (size_t i = 0; i < figure->n_series; i++) {
            if (figure->series[i].n_errors == 0)
                continue;
            series_label(figure, i, label, sizeof label);
            if (add_cdf(panel, label, &figure->series[i]) != 0)
                return -1;
        }
    }
    /* A series without the followed user has no array: qsort's pointer
     * must not be NULL even for 0 elements. */
    for (size_t i = 0; i < figure->n_series; i++)
        if (figure->series[i].n_followed > 1)
            qsort(figure->series[i].followed, figure->series[i].n_followed,
                  sizeof *figure->series[i].followed, compare_followed);
    time_axis t = choose_time_axis(figure);
    snprintf(x_label, sizeof x_label, "%s since the user's first release",
             t.unit_name);
    for (int want_dss = 0; want_dss <= 1; want_dss++) {
        if (!has_followed(figure, want_dss))
            continue;
        snprintf(title, sizeof title, "%s over time, user %.*s",
                 want_dss ? "|\xce\x94X|" : "Error", TITLE_USER_MAX,
                 figure->user);
        ts_plot_panel *panel = ts_plot_add_panel(
            plot, title, x_label, TS_PLOT_LINEAR,
            want_dss ? "|\xce\x94X| (cells, log scale)"
                     : "error (m, log scale)",
            TS_PLOT_LOG);
        if (panel == NULL)
            return -1;
        for (size_t i = 0; i < figure->n_series; i++) {
            series_label(figure, i, label, sizeof label);
            if (add_over_time(panel, label, &figure->series[i], &t,
                              want_dss) != 0)
                return -1;
        }
    }
    return 0;
}

int ts_eval_figure_write(ts_eval_figure *figure, const char *path,
                         ts_plot_size size, char *err, size_t errlen)
{
    ts_plot *plot = ts_plot_new(NULL);
    if (plot == NULL || build(figure, plot) != 0) {
        ts_plot_free(plot);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int status = -1;
    if (ts_plot_panel_count(plot) == 0)
        snprintf(err, errlen, "nothing to plot: no sanitized row joined a "
                 "true row");
    else
        status = ts_plot_write(plot, path, size, err, errlen);
    ts_plot_free(plot);
    return status;
}
