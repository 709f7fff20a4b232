/* The utility and budget figures of a joined trace (tools/eval_join.h),
 * as in Section 5 of the predictive-mechanism paper, per user and overall:
 *   n          true rows with a sanitized row
 *   dropped    true rows without one (with on_exhausted = "drop" these are
 *              the budget_exhausted rejections; any other rejection counts
 *              the same, the sanitized CSV cannot tell them apart)
 *   mean_err_m mean great-circle (haversine) distance true -> sanitized
 *   alpha90_m  α(0.9): the smallest e with at least 90 % of errors <= e
 *   pred_rate  share of rows whose `predicted` column is 1, among rows
 *              where the column is set ("-" for mechanisms without it);
 *              the first point of each window (always noise) included
 *   rho        budget consumption rate: mean of eps_point / window budget,
 *              the budget being eps_spent + eps_remaining of the row
 *   windows    budget windows seen: a window starts at a row whose
 *              eps_spent equals its eps_point (nothing spent before it in
 *              the window), true of geoind and predictive, whose first
 *              point of a window always spends
 *   exhausted  windows in which some true row was dropped
 *   covered    points covered before exhaustion: mean, over exhausted
 *              windows, of the rows sanitized before the window's first
 *              dropped row ("-" when no window was exhausted). A dropped
 *              row belongs to the window of the sanitized row before it.
 * With a delta_set_size column (pim, lm-delta), rmse_m after mean_err_m
 * (it weighs the rare far draws of the exponential-tailed noise that the
 * mean hides) and, at the end, dss_mean, dss_median and dss_min: |ΔX|
 * over the user's rows. With data->has_extra, drift_ratio, knn_precision
 * and knn_recall (tools/eval_metrics.h), "-" where not computed.
 * Aggregates only, never a coordinate. */
#ifndef TRACESAN_TOOLS_EVAL_REPORT_H
#define TRACESAN_TOOLS_EVAL_REPORT_H

#include "tools/eval_join.h"

#define TS_EVAL_OVERALL_LABEL "(all)"

/* Prints the report on stdout, aligned text or CSV. Returns -1 (reported)
 * on an error. */
int ts_eval_report(ts_eval_data *data, int csv);

/* One row per matched true row, in (user, time) order:
 * user,ts,delta_set_size,error_m (and drifted with the drift ratio), for
 * plots. Returns -1 (reported) on an error. */
int ts_eval_write_series(const ts_eval_data *data, const char *path);

#endif
