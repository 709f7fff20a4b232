/* The figure as tools/plot.c builds it (callers see it through plot.h's
 * functions only), and its painting with cairo: panels laid out in a
 * grid, each with its axes, grid lines, ticks and their labels, series
 * (thinned to what a pixel column shows) and a legend in the corner that
 * hides the least data. */
#ifndef TRACESAN_TOOLS_PLOT_DRAW_H
#define TRACESAN_TOOLS_PLOT_DRAW_H

#include <cairo.h>
#include <stddef.h>

#include "tools/plot_axis.h"

typedef enum ts_plot_style {
    TS_PLOT_LINE,        /* vertices joined by straight segments */
    TS_PLOT_LINE_MARKED, /* the same, with a dot on every vertex */
    TS_PLOT_STEP,        /* y holds until the next x, then jumps (a CDF) */
} ts_plot_style;

typedef struct ts_plot ts_plot;
typedef struct ts_plot_panel ts_plot_panel;

typedef struct ts_plot_series {
    char *label;
    size_t colour;
    ts_plot_style style;
    double *x, *y;
    size_t n;
} ts_plot_series;

struct ts_plot_panel {
    ts_plot *plot;
    char *title, *x_label, *y_label;
    ts_plot_scale x_scale, y_scale;
    int y_fixed;
    double y_lo, y_hi;
    ts_plot_series *series;
    size_t n_series, series_cap;
};

struct ts_plot {
    char *title;
    ts_plot_panel **panels;
    size_t n_panels, panels_cap;
    char **labels;           /* colour i belongs to labels[i] */
    size_t n_labels, labels_cap;
};

/* Paints the whole figure on cr, a surface of width x height pixels.
 * Returns 0, or -1 when out of memory (cairo's own errors stay in cr). */
int ts_plot_draw(const ts_plot *plot, cairo_t *cr, double width,
                 double height);

#endif
