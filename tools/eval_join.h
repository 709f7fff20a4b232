/* tracesan eval's data: a true trace (user, ts, lat, lon) joined with its
 * sanitized output by (user, ts), the k-th true row of a key with the k-th
 * sanitized row of that key (GPS traces repeat timestamps). Each joined
 * true row carries what the report, the evaluation-only figures, the
 * identity adversary and the plot read: its error, its budget share, its
 * window start, its |ΔX| and, in memory only, the released point. */
#ifndef TRACESAN_TOOLS_EVAL_JOIN_H
#define TRACESAN_TOOLS_EVAL_JOIN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"
#include "tools/name_index.h"

#define TS_EVAL_ERR_MAX 512
/* profile_slot of a sanitized row whose profile column is absent or empty
 * (taken to be the replayed profile), or names no profile of eval's
 * configuration (never replayed). */
#define TS_EVAL_PROFILE_UNNAMED (-1)
#define TS_EVAL_PROFILE_UNKNOWN (-2)

typedef struct ts_eval_row {
    uint32_t user;
    int64_t ts_ms;
    double lat;
    double lon;
    /* filled from the matched sanitized row */
    int matched;
    int predicted;           /* -1 when the column is empty */
    int window_start;
    double error_m;
    double rho;
    double delta_set_size;   /* NAN when the column is absent or empty */
    /* Evaluation only, in memory: never printed. */
    double released_lat;
    double released_lon;
    double eps_point;
    int profile_slot;        /* index in eval's configuration, or above */
    uint32_t profile_name;   /* in ts_eval_data.profiles; "" when none */
    int drifted;             /* -1 when not replayed */
    double knn_precision;    /* NAN when not computed */
    double knn_recall;
} ts_eval_row;

typedef struct ts_eval_data {
    ts_name_index *users;    /* user id -> ts_eval_row.user */
    ts_name_index *profiles; /* the sanitized rows' profile column */
    ts_eval_row *rows;
    size_t n_rows;
    struct ts_eval_key *keys;
    int has_delta;           /* the sanitized file has delta_set_size */
    int has_extra;           /* replay or kNN asked for: three more columns */
    int has_drift;
    /* The configuration's profiles (NULL without --config/--profile/-o),
     * to name each sanitized row's profile. */
    const ts_pipeline *pipeline;
} ts_eval_data;

void ts_eval_data_free(ts_eval_data *data);

/* Reads the true trace (tools/trace.h; unusable rows counted on stderr)
 * into data->users and data->rows, sorted by (user, ts, file order).
 * Returns -1 (reported) on an error. */
int ts_eval_load_truth(ts_eval_data *data, const char *path);

/* Joins a sanitized CSV with the true rows: fills each matched row's
 * figures; rows without a true row are counted on stderr. Returns -1
 * (reported) on an error. */
int ts_eval_load_sanitized(ts_eval_data *data, const char *path);

/* Undoes the join with a sanitized file, so the true rows can be joined
 * with the next one. */
void ts_eval_forget_sanitized(ts_eval_data *data);

#endif
