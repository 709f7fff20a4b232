/* Figures for the offline tools, drawn with cairo: one or more panels
 * side by side, each with axes (linear or logarithmic), ticks at nice
 * numbers, grid lines, a title, axis labels and a legend, holding line or
 * step series. The file format follows the name: .svg (vector, cairo's SVG
 * surface) or .png (raster). Sizes are in pixels for both.
 *
 * Series carrying the same label share a colour across every panel of a
 * figure, so one profile reads the same in all of them. A figure's data is
 * copied in: callers may free their arrays once a series is added.
 */
#ifndef TRACESAN_TOOLS_PLOT_H
#define TRACESAN_TOOLS_PLOT_H

#include <stddef.h>

#include "tools/plot_draw.h"

typedef enum ts_plot_format {
    TS_PLOT_SVG,
    TS_PLOT_PNG,
} ts_plot_format;

#define TS_PLOT_DEFAULT_WIDTH 960
#define TS_PLOT_DEFAULT_HEIGHT 600
#define TS_PLOT_STRINGIFY_(x) #x
#define TS_PLOT_STRINGIFY(x) TS_PLOT_STRINGIFY_(x)
/* "960x600", for help texts. */
#define TS_PLOT_DEFAULT_SIZE_TEXT                                           \
    TS_PLOT_STRINGIFY(TS_PLOT_DEFAULT_WIDTH)                                \
    "x" TS_PLOT_STRINGIFY(TS_PLOT_DEFAULT_HEIGHT)
#define TS_PLOT_MIN_SIDE 200
#define TS_PLOT_MAX_SIDE 8000

typedef struct ts_plot_size {
    unsigned width, height;
} ts_plot_size;

/* The format a file name asks for, by its extension (case-insensitive):
 * 0 with *format set, or -1 for any other name. */
int ts_plot_format_of(const char *path, ts_plot_format *format);

/* Parses "WxH" (pixels, each within TS_PLOT_MIN_SIDE .. TS_PLOT_MAX_SIDE).
 * Returns 0, or -1 when the text is not such a size. */
int ts_plot_parse_size(const char *text, ts_plot_size *size);

/* --plot-size's handler for the tools' option tables (tools/options.h):
 * parses into the ts_plot_size at dest; NULL, or what the value needs. */
const char *ts_plot_take_size(void *dest, const char *value);

/* NULL when out of memory. `title` may be NULL (no figure title). */
ts_plot *ts_plot_new(const char *title);
void ts_plot_free(ts_plot *plot);

/* A new panel, after the ones already added (panels fill a grid of two
 * columns, one column for a single panel). NULL when out of memory. */
ts_plot_panel *ts_plot_add_panel(ts_plot *plot, const char *title,
                                 const char *x_label, ts_plot_scale x_scale,
                                 const char *y_label, ts_plot_scale y_scale);

/* Fixes an axis range instead of fitting it to the data (a CDF's 0 .. 1). */
void ts_plot_panel_fix_y(ts_plot_panel *panel, double lo, double hi);

/* Adds a series of n points (x[i], y[i]); points that are not finite, or
 * not positive on a log axis, break the line. Returns 0, or -1 when out
 * of memory. */
int ts_plot_add_series(ts_plot_panel *panel, const char *label,
                       ts_plot_style style, const double *x, const double *y,
                       size_t n);

size_t ts_plot_panel_count(const ts_plot *plot);

/* Draws the figure into `path`, the format following its extension. The
 * file is written under a temporary name in the same directory and
 * renamed over `path` once complete, so a failure leaves no file (and no
 * half-written one in place of an old one). Returns 0, or -1 with a
 * message in err. It then frees cairo's and fontconfig's process-wide
 * font caches, so no other cairo object may be alive in the process
 * during the call (the tools draw nothing else). */
int ts_plot_write(const ts_plot *plot, const char *path, ts_plot_size size,
                  char *err, size_t errlen);

#endif
