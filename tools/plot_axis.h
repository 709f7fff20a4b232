/* The axes of the tools' figures (tools/plot.h): linear or logarithmic,
 * their range widened to ticks at nice numbers, and the ticks' labels.
 * Arithmetic only, no drawing. */
#ifndef TRACESAN_TOOLS_PLOT_AXIS_H
#define TRACESAN_TOOLS_PLOT_AXIS_H

#include <stddef.h>

typedef enum ts_plot_scale {
    TS_PLOT_LINEAR,
    TS_PLOT_LOG,       /* base 10; non-positive values are not drawn */
} ts_plot_scale;

#define TS_PLOT_MAX_TICKS 32

/* The axis range [*lo, *hi] widened to tick marks, and the major ticks in
 * it (at most TS_PLOT_MAX_TICKS, about `target` of them on a linear axis;
 * on a log axis the powers of ten, thinned to every k-th decade when
 * there are many). An empty or degenerate range is widened around its
 * value first. Returns the number of ticks, or 0 when the range cannot be
 * drawn on that scale (not finite, or not positive on a log axis). */
size_t ts_plot_ticks(ts_plot_scale scale, double *lo, double *hi,
                     size_t target, double ticks[TS_PLOT_MAX_TICKS]);

/* A tick label: the shortest of plain decimals fitting the tick step, with
 * k and M for thousands and millions when they are whole ("2.5k"). */
void ts_plot_format_tick(double value, double step, char *out, size_t len);

#endif
