/* Figures drawn with cairo (tools/plot.h). Everything, text included, goes
 * through cairo; the SVG is cairo's, never written by hand. */
#include "tools/plot.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <ctype.h>
#include <fontconfig/fontconfig.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define PALETTE_SIZE 10
/* Tableau's ten: distinct in print and for the common colour blindnesses
 * in the first few, which are the ones a comparison of a handful of
 * profiles uses. */
static const double PALETTE[PALETTE_SIZE][3] = {
    { 0x1f / 255.0, 0x77 / 255.0, 0xb4 / 255.0 },
    { 0xff / 255.0, 0x7f / 255.0, 0x0e / 255.0 },
    { 0x2c / 255.0, 0xa0 / 255.0, 0x2c / 255.0 },
    { 0xd6 / 255.0, 0x27 / 255.0, 0x28 / 255.0 },
    { 0x94 / 255.0, 0x67 / 255.0, 0xbd / 255.0 },
    { 0x8c / 255.0, 0x56 / 255.0, 0x4b / 255.0 },
    { 0xe3 / 255.0, 0x77 / 255.0, 0xc2 / 255.0 },
    { 0x7f / 255.0, 0x7f / 255.0, 0x7f / 255.0 },
    { 0xbc / 255.0, 0xbd / 255.0, 0x22 / 255.0 },
    { 0x17 / 255.0, 0xbe / 255.0, 0xcf / 255.0 },
};

#define FONT_FAMILY "sans-serif"
#define LINE_WIDTH 1.6
#define MARKER_RADIUS 2.4
#define TICK_LENGTH 4.0
#define GAP 4.0
#define PANEL_PADDING 10.0
/* Pixels between labelled ticks the tick count aims at. */
#define X_TICK_SPACING 90.0
#define Y_TICK_SPACING 45.0

typedef struct series {
    char *label;
    size_t colour;
    ts_plot_style style;
    double *x, *y;
    size_t n;
} series;

struct ts_plot_panel {
    ts_plot *plot;
    char *title, *x_label, *y_label;
    ts_plot_scale x_scale, y_scale;
    int y_fixed;
    double y_lo, y_hi;
    series *series;
    size_t n_series, series_cap;
};

struct ts_plot {
    char *title;
    ts_plot_panel **panels;
    size_t n_panels, panels_cap;
    char **labels;           /* colour i belongs to labels[i] */
    size_t n_labels, labels_cap;
};

/* ----------------------------------------------------------- parsing */

int ts_plot_format_of(const char *path, ts_plot_format *format)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (dot == NULL || (slash != NULL && dot < slash) || dot == path ||
        (slash != NULL && dot == slash + 1))
        return -1;
    if (strcasecmp(dot, ".svg") == 0)
        *format = TS_PLOT_SVG;
    else if (strcasecmp(dot, ".png") == 0)
        *format = TS_PLOT_PNG;
    else
        return -1;
    return 0;
}

static int parse_side(const char *text, const char **end, unsigned *out)
{
    if (!isdigit((unsigned char)*text))
        return -1;
    unsigned long value = 0;
    while (isdigit((unsigned char)*text)) {
        value = value * 10 + (unsigned long)(*text - '0');
        if (value > TS_PLOT_MAX_SIDE)
            return -1;
        text++;
    }
    if (value < TS_PLOT_MIN_SIDE)
        return -1;
    *out = (unsigned)value;
    *end = text;
    return 0;
}

int ts_plot_parse_size(const char *text, ts_plot_size *size)
{
    ts_plot_size parsed;
    const char *rest;
    if (parse_side(text, &rest, &parsed.width) != 0 ||
        (*rest != 'x' && *rest != 'X') ||
        parse_side(rest + 1, &rest, &parsed.height) != 0 || *rest != '\0')
        return -1;
    *size = parsed;
    return 0;
}

const char *ts_plot_take_size(void *dest, const char *value)
{
    return ts_plot_parse_size(value, dest) == 0
               ? NULL
               : "needs WIDTHxHEIGHT in pixels, each "
                 TS_PLOT_STRINGIFY(TS_PLOT_MIN_SIDE) " .. "
                 TS_PLOT_STRINGIFY(TS_PLOT_MAX_SIDE);
}

/* ------------------------------------------------------------- ticks */

/* 1, 2 or 5 times a power of ten, the one nearest above raw / 1.5-ish:
 * the classic "nice number" choice, so labels read as round values. */
static double nice_step(double raw)
{
    double magnitude = pow(10.0, floor(log10(raw)));
    double fraction = raw / magnitude;
    double nice = fraction < 1.5 ? 1.0 : fraction < 3.0 ? 2.0
                : fraction < 7.0 ? 5.0 : 10.0;
    return nice * magnitude;
}

static size_t linear_ticks(double *lo, double *hi, size_t target,
                           double *ticks)
{
    if (*hi - *lo <= 1e-12 * fmax(1.0, fmax(fabs(*lo), fabs(*hi)))) {
        double widen = *lo == 0.0 ? 1.0 : fabs(*lo) * 0.1;
        *lo -= widen;
        *hi += widen;
    }
    if (target < 2)
        target = 2;
    if (!isfinite(*hi - *lo))
        return 0;
    double step = nice_step((*hi - *lo) / (double)target);
    double first, last;
    size_t count;
    for (;;) {
        if (!(step > 0.0) || !isfinite(step))
            return 0;
        first = floor(*lo / step + 1e-9) * step;
        last = ceil(*hi / step - 1e-9) * step;
        count = (size_t)llround((last - first) / step) + 1;
        if (count <= TS_PLOT_MAX_TICKS)
            break;
        step = nice_step(step * 1.5);
    }
    for (size_t i = 0; i < count; i++) {
        double tick = first + (double)i * step;
        /* first + i * step leaves 1e-17 where 0 should be. */
        ticks[i] = fabs(tick) < step * 1e-9 ? 0.0 : tick;
    }
    *lo = first;
    *hi = last;
    return count;
}

static size_t log_ticks(double *lo, double *hi, size_t target, double *ticks)
{
    if (!(*lo > 0.0) || !(*hi > 0.0))
        return 0;
    int low = (int)floor(log10(*lo) + 1e-9);
    int high = (int)ceil(log10(*hi) - 1e-9);
    if (high <= low)
        high = low + 1;
    int decades = high - low;
    size_t count = 0;
    if (decades <= 2) {
        /* Too few powers of ten to read the axis by: add 2x and 5x. */
        static const double mantissas[] = { 1.0, 2.0, 5.0 };
        for (int e = low; e <= high; e++)
            for (size_t m = 0; m < 3 && (e < high || m == 0); m++)
                ticks[count++] = mantissas[m] * pow(10.0, e);
    } else {
        int every = 1;
        if (target < 2)
            target = 2;
        while ((size_t)(decades / every) + 1 > target ||
               (size_t)(decades / every) + 1 > TS_PLOT_MAX_TICKS)
            every++;
        low = (int)floor((double)low / every) * every;
        high = (int)ceil((double)high / every) * every;
        for (int e = low; e <= high; e += every)
            ticks[count++] = pow(10.0, e);
    }
    *lo = pow(10.0, low);
    *hi = pow(10.0, high);
    return count;
}

size_t ts_plot_ticks(ts_plot_scale scale, double *lo, double *hi,
                     size_t target, double ticks[TS_PLOT_MAX_TICKS])
{
    if (!isfinite(*lo) || !isfinite(*hi))
        return 0;
    if (*lo > *hi) {
        double swap = *lo;
        *lo = *hi;
        *hi = swap;
    }
    return scale == TS_PLOT_LOG ? log_ticks(lo, hi, target, ticks)
                                : linear_ticks(lo, hi, target, ticks);
}

void ts_plot_format_tick(double value, double step, char *out, size_t len)
{
    double magnitude = fabs(value);
    double scale = 1.0;
    const char *suffix = "";
    step = fabs(step);
    if (magnitude >= 1e6 && step >= 1e5) {
        scale = 1e6;
        suffix = "M";
    } else if (magnitude >= 1e3 && step >= 100.0) {
        scale = 1e3;
        suffix = "k";
    }
    double scaled_step = step / scale;
    int decimals = 0;
    if (scaled_step > 0.0 && scaled_step < 1.0)
        decimals = (int)ceil(-log10(scaled_step) - 1e-9);
    if (decimals > 9)
        decimals = 9;
    char number[64];
    snprintf(number, sizeof number, "%.*f", decimals, value / scale);
    if (strchr(number, '.') != NULL) {
        size_t end = strlen(number);
        while (number[end - 1] == '0')
            number[--end] = '\0';
        if (number[end - 1] == '.')
            number[--end] = '\0';
    }
    if (strcmp(number, "-0") == 0)
        strcpy(number, "0");
    snprintf(out, len, "%s%s", number, suffix);
}

/* ---------------------------------------------------------- building */

static char *copy_text(const char *text)
{
    return strdup(text != NULL ? text : "");
}

ts_plot *ts_plot_new(const char *title)
{
    ts_plot *plot = calloc(1, sizeof *plot);
    if (plot == NULL)
        return NULL;
    if (title != NULL && (plot->title = strdup(title)) == NULL) {
        free(plot);
        return NULL;
    }
    return plot;
}

static void panel_free(ts_plot_panel *panel)
{
    for (size_t i = 0; i < panel->n_series; i++) {
        free(panel->series[i].label);
        free(panel->series[i].x);
        free(panel->series[i].y);
    }
    free(panel->series);
    free(panel->title);
    free(panel->x_label);
    free(panel->y_label);
    free(panel);
}

void ts_plot_free(ts_plot *plot)
{
    if (plot == NULL)
        return;
    for (size_t i = 0; i < plot->n_panels; i++)
        panel_free(plot->panels[i]);
    free(plot->panels);
    for (size_t i = 0; i < plot->n_labels; i++)
        free(plot->labels[i]);
    free(plot->labels);
    free(plot->title);
    free(plot);
}

ts_plot_panel *ts_plot_add_panel(ts_plot *plot, const char *title,
                                 const char *x_label, ts_plot_scale x_scale,
                                 const char *y_label, ts_plot_scale y_scale)
{
    if (plot->n_panels == plot->panels_cap) {
        size_t cap = plot->panels_cap ? plot->panels_cap * 2 : 4;
        ts_plot_panel **panels = realloc(plot->panels, cap * sizeof *panels);
        if (panels == NULL)
            return NULL;
        plot->panels = panels;
        plot->panels_cap = cap;
    }
    ts_plot_panel *panel = calloc(1, sizeof *panel);
    if (panel == NULL)
        return NULL;
    panel->plot = plot;
    panel->x_scale = x_scale;
    panel->y_scale = y_scale;
    panel->title = copy_text(title);
    panel->x_label = copy_text(x_label);
    panel->y_label = copy_text(y_label);
    if (panel->title == NULL || panel->x_label == NULL ||
        panel->y_label == NULL) {
        panel_free(panel);
        return NULL;
    }
    plot->panels[plot->n_panels++] = panel;
    return panel;
}

void ts_plot_panel_fix_y(ts_plot_panel *panel, double lo, double hi)
{
    panel->y_fixed = 1;
    panel->y_lo = lo;
    panel->y_hi = hi;
}

/* The colour of a label: the one it got when first seen in the figure. */
static int colour_of(ts_plot *plot, const char *label, size_t *colour)
{
    for (size_t i = 0; i < plot->n_labels; i++)
        if (strcmp(plot->labels[i], label) == 0) {
            *colour = i;
            return 0;
        }
    if (plot->n_labels == plot->labels_cap) {
        size_t cap = plot->labels_cap ? plot->labels_cap * 2 : 8;
        char **labels = realloc(plot->labels, cap * sizeof *labels);
        if (labels == NULL)
            return -1;
        plot->labels = labels;
        plot->labels_cap = cap;
    }
    if ((plot->labels[plot->n_labels] = strdup(label)) == NULL)
        return -1;
    *colour = plot->n_labels++;
    return 0;
}

int ts_plot_add_series(ts_plot_panel *panel, const char *label,
                       ts_plot_style style, const double *x, const double *y,
                       size_t n)
{
    if (panel->n_series == panel->series_cap) {
        size_t cap = panel->series_cap ? panel->series_cap * 2 : 4;
        series *grown = realloc(panel->series, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        panel->series = grown;
        panel->series_cap = cap;
    }
    series s = { .style = style, .n = n };
    if (label == NULL)
        label = "";
    s.label = strdup(label);
    s.x = malloc((n ? n : 1) * sizeof *s.x);
    s.y = malloc((n ? n : 1) * sizeof *s.y);
    if (s.label == NULL || s.x == NULL || s.y == NULL ||
        colour_of(panel->plot, label, &s.colour) != 0) {
        free(s.label);
        free(s.x);
        free(s.y);
        return -1;
    }
    if (n > 0) {
        memcpy(s.x, x, n * sizeof *x);
        memcpy(s.y, y, n * sizeof *y);
    }
    panel->series[panel->n_series++] = s;
    return 0;
}

size_t ts_plot_panel_count(const ts_plot *plot)
{
    return plot->n_panels;
}

/* ----------------------------------------------------------- drawing */

typedef struct axis {
    ts_plot_scale scale;
    double lo, hi;                 /* data range after widening to ticks */
    double ticks[TS_PLOT_MAX_TICKS];
    size_t n_ticks;
    double pixel_lo, pixel_hi;     /* device coordinates of lo and hi */
} axis;

typedef struct point {
    double x, y;
} point;

/* A series in device coordinates: runs of points separated by breaks
 * (NAN), thinned to what a pixel column can show. */
typedef struct path {
    point *points;
    size_t n, cap;
} path;

static int drawable(ts_plot_scale scale, double v)
{
    return isfinite(v) && (scale != TS_PLOT_LOG || v > 0.0);
}

static double axis_map(const axis *a, double v)
{
    double t = a->scale == TS_PLOT_LOG
                   ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                   : (v - a->lo) / (a->hi - a->lo);
    return a->pixel_lo + t * (a->pixel_hi - a->pixel_lo);
}

static int path_push(path *p, double x, double y)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        point *grown = realloc(p->points, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        p->points = grown;
        p->cap = cap;
    }
    p->points[p->n++] = (point){ x, y };
    return 0;
}

static int path_break(path *p)
{
    if (p->n == 0 || isnan(p->points[p->n - 1].x))
        return 0;
    return path_push(p, NAN, NAN);
}

/* The series' vertices in device coordinates, steps expanded. */
static int series_path(const series *s, const axis *ax, const axis *ay,
                       path *out)
{
    int have_previous = 0;
    double previous_y = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        if (!drawable(ax->scale, s->x[i]) || !drawable(ay->scale, s->y[i])) {
            have_previous = 0;
            if (path_break(out) != 0)
                return -1;
            continue;
        }
        double px = axis_map(ax, s->x[i]), py = axis_map(ay, s->y[i]);
        if (s->style == TS_PLOT_STEP && have_previous &&
            path_push(out, px, previous_y) != 0)
            return -1;
        if (path_push(out, px, py) != 0)
            return -1;
        have_previous = 1;
        previous_y = py;
    }
    return 0;
}

/* Keeps, of each run of vertices falling in one pixel column, the first,
 * the lowest, the highest and the last, in their order: the drawn line
 * looks the same, and a million-row series stays a few thousand
 * vertices in the SVG. */
static int thin_path(const path *in, path *out)
{
    size_t i = 0;
    while (i < in->n) {
        if (isnan(in->points[i].x)) {
            if (path_break(out) != 0)
                return -1;
            i++;
            continue;
        }
        double column = floor(in->points[i].x);
        size_t end = i, low = i, high = i;
        while (end < in->n && !isnan(in->points[end].x) &&
               floor(in->points[end].x) == column) {
            if (in->points[end].y < in->points[low].y)
                low = end;
            if (in->points[end].y > in->points[high].y)
                high = end;
            end++;
        }
        size_t keep[4] = { i, low < high ? low : high, low < high ? high : low,
                           end - 1 };
        for (size_t k = 0; k < 4; k++)
            if (k == 0 || keep[k] != keep[k - 1])
                if (path_push(out, in->points[keep[k]].x,
                              in->points[keep[k]].y) != 0)
                    return -1;
        i = end;
    }
    return 0;
}

static void set_colour(cairo_t *cr, size_t colour)
{
    const double *rgb = PALETTE[colour % PALETTE_SIZE];
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    /* Past the palette, dashes tell the repeated colours apart. */
    static const double dashes[] = { 6.0, 3.0 };
    cairo_set_dash(cr, dashes, colour >= PALETTE_SIZE ? 2 : 0, 0.0);
}

/* Text anchored at (x, y): ax, ay = 0 left/top, 0.5 centre, 1 right/bottom
 * of the text's advance and of the font's ascent + descent. */
static void draw_text(cairo_t *cr, const char *text, double x, double y,
                      double ax, double ay)
{
    cairo_text_extents_t te;
    cairo_font_extents_t fe;
    cairo_text_extents(cr, text, &te);
    cairo_font_extents(cr, &fe);
    cairo_move_to(cr, x - te.x_advance * ax,
                  y + fe.ascent - (fe.ascent + fe.descent) * ay);
    cairo_show_text(cr, text);
}

static double text_width(cairo_t *cr, const char *text)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, text, &te);
    return te.x_advance;
}

static double line_height(cairo_t *cr)
{
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    return fe.ascent + fe.descent;
}

typedef struct fonts {
    double title, label, tick;
} fonts;

static void use_font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, FONT_FAMILY, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD
                                : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

/* The data range of a panel's axis: x when want_x, else y. 0 when no
 * series has a drawable point. */
static int data_range(const ts_plot_panel *panel, int want_x, double *lo,
                      double *hi)
{
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t k = 0; k < panel->n_series; k++) {
        const series *s = &panel->series[k];
        for (size_t i = 0; i < s->n; i++) {
            if (!drawable(panel->x_scale, s->x[i]) ||
                !drawable(panel->y_scale, s->y[i]))
                continue;
            double v = want_x ? s->x[i] : s->y[i];
            *lo = fmin(*lo, v);
            *hi = fmax(*hi, v);
        }
    }
    return *lo <= *hi;
}

static void axis_fit(axis *a, ts_plot_scale scale, double lo, double hi,
                     int have_data, double pixels, double spacing)
{
    a->scale = scale;
    if (!have_data) {
        lo = scale == TS_PLOT_LOG ? 1.0 : 0.0;
        hi = scale == TS_PLOT_LOG ? 10.0 : 1.0;
    }
    /* Powers of ten label short ("10k"): room for more of them. */
    if (scale == TS_PLOT_LOG)
        spacing *= 0.6;
    size_t target = (size_t)fmax(2.0, floor(pixels / spacing));
    a->lo = lo;
    a->hi = hi;
    a->n_ticks = ts_plot_ticks(scale, &a->lo, &a->hi, target, a->ticks);
    if (a->n_ticks == 0) {
        /* Data no axis can span (beyond double's range): an empty frame
         * rather than a figure of NaNs. */
        a->lo = scale == TS_PLOT_LOG ? 1.0 : 0.0;
        a->hi = scale == TS_PLOT_LOG ? 10.0 : 1.0;
        a->n_ticks = ts_plot_ticks(scale, &a->lo, &a->hi, target, a->ticks);
    }
}

static double tick_step(const axis *a, size_t i)
{
    if (a->scale == TS_PLOT_LOG)
        return a->ticks[i];
    return a->n_ticks > 1 ? a->ticks[1] - a->ticks[0] : 1.0;
}

/* Light lines at 2..9 times each power of ten of a log axis. */
static void minor_log_grid(cairo_t *cr, const axis *a, int vertical,
                           double from, double to)
{
    for (double decade = a->lo; decade < a->hi * 0.999; decade *= 10.0)
        for (int m = 2; m <= 9; m++) {
            double v = decade * m;
            if (v >= a->hi)
                break;
            double p = axis_map(a, v);
            if (vertical) {
                cairo_move_to(cr, p, from);
                cairo_line_to(cr, p, to);
            } else {
                cairo_move_to(cr, from, p);
                cairo_line_to(cr, to, p);
            }
        }
}

typedef struct rect {
    double x, y, w, h;
} rect;

/* Whether the segment a-b crosses the rectangle (Liang-Barsky clipping:
 * some part of the segment's parameter range survives all four edges). */
static int segment_hits(point a, point b, rect r)
{
    double dx = b.x - a.x, dy = b.y - a.y;
    double p[4] = { -dx, dx, -dy, dy };
    double q[4] = { a.x - r.x, r.x + r.w - a.x, a.y - r.y, r.y + r.h - a.y };
    double t0 = 0.0, t1 = 1.0;
    for (int i = 0; i < 4; i++) {
        if (p[i] == 0.0) {
            if (q[i] < 0.0)
                return 0;
            continue;
        }
        double t = q[i] / p[i];
        if (p[i] < 0.0)
            t0 = fmax(t0, t);
        else
            t1 = fmin(t1, t);
        if (t0 > t1)
            return 0;
    }
    return 1;
}

/* How much of the drawn series a legend at r would hide: segments it
 * crosses, and lone points inside it. */
static size_t hidden_by(const path *paths, size_t n_paths, rect r)
{
    size_t count = 0;
    for (size_t k = 0; k < n_paths; k++)
        for (size_t i = 0; i < paths[k].n; i++) {
            point p = paths[k].points[i];
            if (isnan(p.x))
                continue;
            int joined = i + 1 < paths[k].n &&
                         !isnan(paths[k].points[i + 1].x);
            int after_break = i == 0 || isnan(paths[k].points[i - 1].x);
            if (joined)
                count += segment_hits(p, paths[k].points[i + 1], r);
            else if (after_break)
                count += segment_hits(p, p, r);
        }
    return count;
}

/* The legend, in the corner of the plot area hiding the least data. */
static void draw_legend(cairo_t *cr, const ts_plot_panel *panel,
                        const path *paths, rect area, const fonts *f)
{
    size_t shown[64];
    size_t n_shown = 0;
    for (size_t k = 0; k < panel->n_series && n_shown < 64; k++) {
        if (panel->series[k].label[0] == '\0')
            continue;
        int seen = 0;
        for (size_t j = 0; j < n_shown; j++)
            seen |= panel->series[shown[j]].colour == panel->series[k].colour;
        if (!seen)
            shown[n_shown++] = k;
    }
    if (n_shown == 0)
        return;
    use_font(cr, f->tick, 0);
    double row = line_height(cr) * 1.25, swatch = 22.0;
    double widest = 0.0;
    for (size_t j = 0; j < n_shown; j++)
        widest = fmax(widest, text_width(cr, panel->series[shown[j]].label));
    rect box = { 0, 0, swatch + widest + 3 * GAP + 2 * GAP,
                 row * (double)n_shown + 2 * GAP };
    rect corners[4];
    double margin = 6.0;
    for (int c = 0; c < 4; c++) {
        corners[c] = box;
        corners[c].x = (c == 0 || c == 2) ? area.x + area.w - box.w - margin
                                          : area.x + margin;
        corners[c].y = c < 2 ? area.y + margin
                             : area.y + area.h - box.h - margin;
    }
    size_t best = 0, best_count = SIZE_MAX;
    for (size_t c = 0; c < 4; c++) {
        size_t count = hidden_by(paths, panel->n_series, corners[c]);
        if (count < best_count) {
            best_count = count;
            best = c;
        }
    }
    box = corners[best];
    cairo_rectangle(cr, box.x, box.y, box.w, box.h);
    cairo_set_source_rgba(cr, 1.0, 1.0, 1.0, 0.85);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(cr, 1.0);
    cairo_stroke(cr);
    for (size_t j = 0; j < n_shown; j++) {
        const series *s = &panel->series[shown[j]];
        double y = box.y + GAP + row * ((double)j + 0.5);
        set_colour(cr, s->colour);
        cairo_set_line_width(cr, LINE_WIDTH * 1.5);
        cairo_move_to(cr, box.x + 2 * GAP, y);
        cairo_line_to(cr, box.x + 2 * GAP + swatch, y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0.0);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        draw_text(cr, s->label, box.x + 3 * GAP + swatch, y, 0.0, 0.5);
    }
}

static int draw_panel(cairo_t *cr, const ts_plot_panel *panel, rect cell,
                      const fonts *f)
{
    double x_lo, x_hi, y_lo = 0.0, y_hi = 0.0;
    int have_x = data_range(panel, 1, &x_lo, &x_hi);
    int have_y = have_x;
    if (have_x)
        data_range(panel, 0, &y_lo, &y_hi);
    if (panel->y_fixed) {
        y_lo = panel->y_lo;
        y_hi = panel->y_hi;
        have_y = 1;
    }

    use_font(cr, f->title, 1);
    double title_h = line_height(cr);
    use_font(cr, f->label, 0);
    double label_h = line_height(cr);
    use_font(cr, f->tick, 0);
    double tick_h = line_height(cr);

    rect area;
    area.y = cell.y + PANEL_PADDING + title_h + 2 * GAP;
    area.h = cell.h - (area.y - cell.y) - PANEL_PADDING - label_h - tick_h -
             TICK_LENGTH - 3 * GAP;
    axis ay = { 0 }, ax = { 0 };
    axis_fit(&ay, panel->y_scale, y_lo, y_hi, have_y, area.h,
             Y_TICK_SPACING);
    /* The y labels' width decides where the plot area starts. */
    char text[64];
    double widest = 0.0;
    for (size_t i = 0; i < ay.n_ticks; i++) {
        ts_plot_format_tick(ay.ticks[i], tick_step(&ay, i), text, sizeof text);
        widest = fmax(widest, text_width(cr, text));
    }
    area.x = cell.x + PANEL_PADDING + label_h + 2 * GAP + widest +
             TICK_LENGTH;
    area.w = cell.x + cell.w - PANEL_PADDING - area.x;
    if (area.w < 20.0 || area.h < 20.0)
        return 0;
    axis_fit(&ax, panel->x_scale, x_lo, x_hi, have_x, area.w, X_TICK_SPACING);
    ax.pixel_lo = area.x;
    ax.pixel_hi = area.x + area.w;
    ay.pixel_lo = area.y + area.h;
    ay.pixel_hi = area.y;

    /* Grid. */
    cairo_set_line_width(cr, 1.0);
    cairo_set_source_rgb(cr, 0.95, 0.95, 0.95);
    if (ax.scale == TS_PLOT_LOG)
        minor_log_grid(cr, &ax, 1, area.y, area.y + area.h);
    if (ay.scale == TS_PLOT_LOG)
        minor_log_grid(cr, &ay, 0, area.x, area.x + area.w);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.86, 0.86, 0.86);
    for (size_t i = 0; i < ax.n_ticks; i++) {
        double p = axis_map(&ax, ax.ticks[i]);
        cairo_move_to(cr, p, area.y);
        cairo_line_to(cr, p, area.y + area.h);
    }
    for (size_t i = 0; i < ay.n_ticks; i++) {
        double p = axis_map(&ay, ay.ticks[i]);
        cairo_move_to(cr, area.x, p);
        cairo_line_to(cr, area.x + area.w, p);
    }
    cairo_stroke(cr);

    /* Series, clipped to the plot area. */
    path *paths = calloc(panel->n_series ? panel->n_series : 1,
                         sizeof *paths);
    int status = paths == NULL ? -1 : 0;
    cairo_save(cr);
    cairo_rectangle(cr, area.x, area.y, area.w, area.h);
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (size_t k = 0; status == 0 && k < panel->n_series; k++) {
        const series *s = &panel->series[k];
        path full = { 0 };
        if (series_path(s, &ax, &ay, &full) != 0 ||
            thin_path(&full, &paths[k]) != 0) {
            free(full.points);
            status = -1;
            break;
        }
        free(full.points);
        set_colour(cr, s->colour);
        cairo_set_line_width(cr, LINE_WIDTH);
        int open = 0;
        for (size_t i = 0; i < paths[k].n; i++) {
            point p = paths[k].points[i];
            if (isnan(p.x)) {
                open = 0;
                continue;
            }
            if (open)
                cairo_line_to(cr, p.x, p.y);
            else
                cairo_move_to(cr, p.x, p.y);
            open = 1;
        }
        cairo_stroke(cr);
        if (s->style == TS_PLOT_LINE_MARKED) {
            cairo_set_dash(cr, NULL, 0, 0.0);
            for (size_t i = 0; i < s->n; i++) {
                if (!drawable(ax.scale, s->x[i]) ||
                    !drawable(ay.scale, s->y[i]))
                    continue;
                cairo_new_sub_path(cr);
                cairo_arc(cr, axis_map(&ax, s->x[i]), axis_map(&ay, s->y[i]),
                          MARKER_RADIUS, 0.0, 2.0 * M_PI);
            }
            cairo_fill(cr);
        }
    }
    cairo_restore(cr);
    cairo_set_dash(cr, NULL, 0, 0.0);

    /* Frame, ticks and their labels. */
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 1.0);
    cairo_rectangle(cr, area.x, area.y, area.w, area.h);
    for (size_t i = 0; i < ax.n_ticks; i++) {
        double p = axis_map(&ax, ax.ticks[i]);
        cairo_move_to(cr, p, area.y + area.h);
        cairo_line_to(cr, p, area.y + area.h + TICK_LENGTH);
    }
    for (size_t i = 0; i < ay.n_ticks; i++) {
        double p = axis_map(&ay, ay.ticks[i]);
        cairo_move_to(cr, area.x, p);
        cairo_line_to(cr, area.x - TICK_LENGTH, p);
    }
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    use_font(cr, f->tick, 0);
    double last_right = -INFINITY;
    for (size_t i = 0; i < ax.n_ticks; i++) {
        ts_plot_format_tick(ax.ticks[i], tick_step(&ax, i), text, sizeof text);
        double p = axis_map(&ax, ax.ticks[i]), w = text_width(cr, text);
        /* A label that would overlap its left neighbour is left out. */
        if (p - w / 2 < last_right + GAP)
            continue;
        draw_text(cr, text, p, area.y + area.h + TICK_LENGTH + GAP, 0.5, 0.0);
        last_right = p + w / 2;
    }
    for (size_t i = 0; i < ay.n_ticks; i++) {
        ts_plot_format_tick(ay.ticks[i], tick_step(&ay, i), text, sizeof text);
        draw_text(cr, text, area.x - TICK_LENGTH - GAP,
                  axis_map(&ay, ay.ticks[i]), 1.0, 0.5);
    }

    /* Title and axis labels. */
    use_font(cr, f->title, 1);
    draw_text(cr, panel->title, area.x + area.w / 2, cell.y + PANEL_PADDING,
              0.5, 0.0);
    use_font(cr, f->label, 0);
    draw_text(cr, panel->x_label, area.x + area.w / 2,
              cell.y + cell.h - PANEL_PADDING, 0.5, 1.0);
    cairo_save(cr);
    cairo_translate(cr, cell.x + PANEL_PADDING, area.y + area.h / 2);
    cairo_rotate(cr, -M_PI / 2);
    draw_text(cr, panel->y_label, 0.0, 0.0, 0.5, 0.0);
    cairo_restore(cr);

    if (status == 0)
        draw_legend(cr, panel, paths, area, f);
    for (size_t k = 0; paths != NULL && k < panel->n_series; k++)
        free(paths[k].points);
    free(paths);
    return status;
}

static int draw_figure(const ts_plot *plot, cairo_t *cr, double width,
                       double height)
{
    cairo_set_source_rgb(cr, 1.0, 1.0, 1.0);
    cairo_paint(cr);
    /* Text grows with the figure, within readable bounds. */
    double base = fmin(fmax(fmin(width, height) / 48.0, 10.0), 18.0);
    fonts f = { base * 1.15, base, base * 0.9 };
    double top = 0.0;
    if (plot->title != NULL && plot->title[0] != '\0') {
        use_font(cr, f.title * 1.15, 1);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        draw_text(cr, plot->title, width / 2, PANEL_PADDING, 0.5, 0.0);
        top = PANEL_PADDING + line_height(cr);
    }
    size_t n = plot->n_panels;
    size_t columns = n > 1 ? 2 : 1;
    size_t rows = (n + columns - 1) / columns;
    if (rows == 0)
        rows = 1;
    double cell_w = width / (double)columns;
    double cell_h = (height - top) / (double)rows;
    for (size_t i = 0; i < n; i++) {
        rect cell = { (double)(i % columns) * cell_w,
                      top + (double)(i / columns) * cell_h, cell_w, cell_h };
        /* An odd last panel takes the whole row rather than leave a hole. */
        if (i == n - 1 && i % columns == 0)
            cell.w = width;
        if (draw_panel(cr, plot->panels[i], cell, &f) != 0)
            return -1;
    }
    return 0;
}

static cairo_status_t write_to_file(void *closure, const unsigned char *data,
                                    unsigned int length)
{
    return fwrite(data, 1, length, closure) == length
               ? CAIRO_STATUS_SUCCESS
               : CAIRO_STATUS_WRITE_ERROR;
}

int ts_plot_write(const ts_plot *plot, const char *path, ts_plot_size size,
                  char *err, size_t errlen)
{
    ts_plot_format format;
    if (ts_plot_format_of(path, &format) != 0) {
        snprintf(err, errlen, "%s: the file name must end in .svg or .png",
                 path);
        return -1;
    }
    if (size.width < TS_PLOT_MIN_SIDE || size.width > TS_PLOT_MAX_SIDE ||
        size.height < TS_PLOT_MIN_SIDE || size.height > TS_PLOT_MAX_SIDE) {
        snprintf(err, errlen, "plot size %ux%u is outside %u..%u",
                 size.width, size.height, TS_PLOT_MIN_SIDE,
                 TS_PLOT_MAX_SIDE);
        return -1;
    }
    size_t tmp_len = strlen(path) + sizeof ".XXXXXX";
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, tmp_len, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        free(tmp);
        return -1;
    }
    /* mkstemp's 0600 would make the figure private to its writer, unlike
     * every other file the tools write. */
    mode_t mask = umask(0);
    umask(mask);
    int status = -1;
    FILE *out = fchmod(fd, 0666 & ~mask) == 0 ? fdopen(fd, "wb") : NULL;
    if (out == NULL) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        goto done;
    }
    cairo_surface_t *surface =
        format == TS_PLOT_SVG
            ? cairo_svg_surface_create_for_stream(write_to_file, out,
                                                  size.width, size.height)
            : cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)size.width,
                                         (int)size.height);
    if (format == TS_PLOT_SVG)
        cairo_svg_surface_set_document_unit(surface, CAIRO_SVG_UNIT_PX);
    cairo_t *cr = cairo_create(surface);
    int drawn = draw_figure(plot, cr, size.width, size.height);
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    if (drawn == 0 && cs == CAIRO_STATUS_SUCCESS) {
        if (format == TS_PLOT_PNG)
            cs = cairo_surface_write_to_png_stream(surface, write_to_file,
                                                   out);
        cairo_surface_finish(surface);
        if (cs == CAIRO_STATUS_SUCCESS)
            cs = cairo_surface_status(surface);
    }
    cairo_surface_destroy(surface);
    int closed = fclose(out);
    if (drawn != 0)
        snprintf(err, errlen, "out of memory");
    else if (cs != CAIRO_STATUS_SUCCESS)
        snprintf(err, errlen, "cannot draw %s: %s", path,
                 cairo_status_to_string(cs));
    else if (closed != 0)
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    else if (rename(tmp, path) != 0)
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path,
                 strerror(errno));
    else
        status = 0;
done:
    if (status != 0)
        unlink(tmp);
    free(tmp);
    /* cairo keeps the fonts it looked up, and fontconfig its configuration,
     * until the process ends; LeakSanitizer (--enable-sanitizers, leaks
     * fatal) reports them. Nothing of cairo's is alive here: let go. */
    cairo_debug_reset_static_data();
    FcFini();
    return status;
}
