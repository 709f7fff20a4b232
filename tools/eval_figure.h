/* The figure of `tracesan eval --plot`: the panels people compare
 * mechanisms by, from the released rows eval joined with the truth.
 *
 *   1. the CDF of the error (true -> released, metres) per series;
 *   2. the error over time of one user, per series;
 *   3. |ΔX| over time of that user, per series that has delta_set_size
 *      (pim, lm-delta).
 *
 * A series is a profile of one sanitized file (its `profile` column; the
 * file's name when the column is absent or empty). When two files hold
 * the same profile, their series are told apart by the file's name. A
 * panel without data is left out. Only errors, |ΔX| and times are drawn,
 * never a coordinate.
 */
#ifndef TRACESAN_TOOLS_EVAL_FIGURE_H
#define TRACESAN_TOOLS_EVAL_FIGURE_H

#include <stddef.h>
#include <stdint.h>

#include "tools/plot.h"

typedef struct ts_eval_figure ts_eval_figure;

/* `user` is the user whose rows panels 2 and 3 follow. NULL when out of
 * memory. */
ts_eval_figure *ts_eval_figure_new(const char *user);
void ts_eval_figure_free(ts_eval_figure *figure);

/* The rows added next come from the sanitized file `path`. Returns -1
 * when out of memory. */
int ts_eval_figure_begin_file(ts_eval_figure *figure, const char *path);

/* One released row: its profile ("" when it names none), whether it is
 * the followed user's, its time, its error and its |ΔX| (NAN when it has
 * none). Returns -1 when out of memory. */
int ts_eval_figure_add(ts_eval_figure *figure, const char *profile,
                       int followed_user, int64_t ts_ms, double error_m,
                       double delta_set_size);

/* Draws the figure (see ts_plot_write); sorts the rows added. Returns 0,
 * or -1 with a message in err, also when no panel has data. */
int ts_eval_figure_write(ts_eval_figure *figure, const char *path,
                         ts_plot_size size, char *err, size_t errlen);

#endif
