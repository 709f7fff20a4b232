/* Painting a figure with cairo (tools/plot_draw.h). Everything, text
 * included, goes through cairo; the SVG is cairo's, never written by
 * hand. */
#include "tools/plot_draw.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

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
static int series_path(const ts_plot_series *s, const axis *ax, const axis *ay,
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
        const ts_plot_series *s = &panel->series[k];
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
        const ts_plot_series *s = &panel->series[shown[j]];
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
        const ts_plot_series *s = &panel->series[k];
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

int ts_plot_draw(const ts_plot *plot, cairo_t *cr, double width,
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
