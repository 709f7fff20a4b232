/* Two figures of each joined release that only an offline comparison with
 * the truth can compute, filled into the rows for tools/eval_report.h:
 *   drifted    for a pim or lm-delta profile: whether the release's true
 *              cell was outside the delta-location set (the release used
 *              a surrogate). Found by replaying each user's published
 *              points, in order, on an observer's copy of the mechanism's
 *              state (its ops' replay), zero-filled at each budget window
 *              as the pipeline does. Drift is never published. The
 *              replayed |ΔX| must equal the published delta_set_size: a
 *              difference means eval's configuration is not the
 *              sanitizer's, and is reported.
 *   knn_precision, knn_recall
 *              R = the k POIs nearest the true point, R' = the k' POIs
 *              nearest the released one (great-circle distance, ties by
 *              POI order); |R ∩ R'| / k' and |R ∩ R'| / k (Xiao & Xiong,
 *              Section 6.3). */
#ifndef TRACESAN_TOOLS_EVAL_METRICS_H
#define TRACESAN_TOOLS_EVAL_METRICS_H

#include <stddef.h>

#include "engine/pipeline.h"
#include "tools/eval_join.h"

/* The profile to replay, found in its pipeline as slot *slot; NULL
 * (reported) when it is not a delta-location-set profile. */
const ts_profile *ts_eval_replayable(const ts_pipeline *pipeline,
                                     const ts_profile *profile, int *slot);

/* Fills `drifted` of the rows of `profile` (slot `slot` of data's
 * pipeline); the counts go to stderr. Returns -1 (reported) when out of
 * memory. */
int ts_eval_replay_drift(ts_eval_data *data, const ts_profile *profile,
                         int slot);

/* Fills knn_precision and knn_recall of every matched row from the POIs
 * of poi_path (a CSV with lat and lon columns). Returns -1 (reported) on
 * an error. */
int ts_eval_knn(ts_eval_data *data, const char *poi_path, size_t k,
                size_t k_returned);

#endif
