/* Evaluation-only figures of each release (tools/eval_metrics.h). */
#include "tools/eval_metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/poi_index.h"

typedef struct replay_counts {
    uint64_t replayed, drifted, mismatches, errors;
} replay_counts;

/* The pipeline's budget window, from published timestamps: a window opens
 * at a user's first release and the next release at or after its end opens
 * the next one, which zero-fills the mechanism state (engine/pipeline.c).
 * Rejected rows never open a window and repeats (eps_point 0) never fall
 * on a window's first release, so only mechanism releases are followed. */
typedef struct window_tracker {
    int open;
    int64_t start_ms, length_ms;
} window_tracker;

static int window_advance(window_tracker *w, int64_t ts_ms, int64_t length_ms)
{
    if (w->open && ts_ms < w->start_ms + w->length_ms)
        return 0;
    w->open = 1;
    w->start_ms = ts_ms;
    w->length_ms = length_ms;
    return 1;
}

/* Replays the releases of rows[first .. end) (one user, release order) of
 * `profile` (slot `slot` of the configuration) on `state`. */
static void replay_user(const ts_eval_data *data, ts_eval_row *rows,
                        size_t first, size_t end, const ts_profile *profile,
                        int slot, unsigned char *state, size_t state_size,
                        replay_counts *counts)
{
    const char *name = ts_name_index_name(data->users, rows[first].user);
    size_t name_len = strlen(name);
    window_tracker window = { 0, 0, 0 };
    int window_slot = -1;
    memset(state, 0, state_size);
    for (size_t i = first; i < end; i++) {
        ts_eval_row *r = &rows[i];
        if (!r->matched || !(r->eps_point > 0.0))
            continue;
        const ts_profile *row_profile =
            r->profile_slot >= 0
                ? ts_pipeline_profile_at(data->pipeline,
                                         (size_t)r->profile_slot)
                : profile;
        int row_slot = r->profile_slot >= 0 ? r->profile_slot : slot;
        int had_window = window.open;
        if (window_advance(&window, r->ts_ms, row_profile->window_ms)) {
            /* As the pipeline: a window of the same profile as the last
             * one may carry the state over, any other starts from zero. */
            if (had_window && window_slot == row_slot && row_slot == slot &&
                profile->ops->window_opens != NULL)
                profile->ops->window_opens(profile->mech, state);
            else
                memset(state, 0, state_size);
            window_slot = row_slot;
        }
        if (row_slot != slot)
            continue;
        ts_point published = {
            .lat = r->released_lat,
            .lon = r->released_lon,
            .ts_ms = r->ts_ms,
            .accuracy_m = NAN,
            .user = name,
            .user_len = name_len,
        };
        ts_point truth = published;
        truth.lat = r->lat;
        truth.lon = r->lon;
        int drifted = 0;
        unsigned delta_set_size = 0;
        if (profile->ops->replay(profile->mech, state, &published, &truth,
                            &drifted, &delta_set_size) != 0) {
            counts->errors++;
            continue;
        }
        counts->replayed++;
        r->drifted = drifted != 0;
        counts->drifted += (uint64_t)r->drifted;
        if (!(isfinite(r->delta_set_size) &&
              r->delta_set_size == (double)delta_set_size))
            counts->mismatches++;
    }
}

int ts_eval_replay_drift(ts_eval_data *data, const ts_profile *profile,
                         int slot)
{
    size_t state_size = profile->ops->user_state_size != NULL
                            ? profile->ops->user_state_size(profile->mech)
                            : 0;
    unsigned char *state = malloc(state_size ? state_size : 1);
    if (state == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        return -1;
    }
    replay_counts counts = { 0, 0, 0, 0 };
    for (size_t first = 0; first < data->n_rows;) {
        size_t end = first;
        while (end < data->n_rows &&
               data->rows[end].user == data->rows[first].user)
            end++;
        replay_user(data, data->rows, first, end, profile, slot, state,
                    state_size, &counts);
        first = end;
    }
    free(state);
    fprintf(stderr,
            "eval: replayed %" PRIu64 " releases of profile '%s': drifted=%"
            PRIu64 " dss_mismatches=%" PRIu64 " errors=%" PRIu64 "\n",
            counts.replayed, profile->name, counts.drifted,
            counts.mismatches, counts.errors);
    if (counts.replayed == 0 && counts.errors == 0)
        fprintf(stderr, "eval: warning: no sanitized row of profile '%s'; "
                "no drift ratio\n", profile->name);
    if (counts.errors != 0)
        fprintf(stderr, "eval: warning: %" PRIu64 " releases could not be "
                "replayed; the drift ratio covers the others\n",
                counts.errors);
    if (counts.mismatches != 0)
        fprintf(stderr, "eval: warning: the replayed |ΔX| differs from the "
                "published delta_set_size on %" PRIu64 " of %" PRIu64
                " releases: eval's --config/--profile/-o are not the "
                "sanitizer's, or TRUE.csv lacks rows that were sanitized; "
                "the drift ratio is not the sanitizer's\n",
                counts.mismatches, counts.replayed);
    return 0;
}

/* The profile to replay, found in its pipeline as slot *slot; NULL
 * (reported) when it is not a delta-location-set profile. */
const ts_profile *ts_eval_replayable(const ts_pipeline *pipeline,
                                     const ts_profile *profile, int *slot)
{
    if (profile->ops->replay == NULL) {
        fprintf(stderr, "eval: profile '%s' uses mechanism %s, which has "
                "no replay: no drift ratio\n", profile->name,
                profile->ops->name);
        return NULL;
    }
    size_t n = ts_pipeline_profile_count(pipeline);
    for (size_t i = 0; i < n; i++)
        if (ts_pipeline_profile_at(pipeline, i) == profile)
            *slot = (int)i;
    return profile;
}

/* --------------------------------------------------------------- kNN */

typedef struct poi_set {
    double *lat, *lon;
    size_t n, cap;
} poi_set;

/* A CSV with a header naming lat and lon columns; other columns ignored.
 * Invalid rows are counted and skipped; errors name lines, not fields. */
static int load_pois(const char *path, poi_set *pois)
{
    ts_csv_reader *reader = ts_tool_open_table(path);
    if (reader == NULL)
        return -1;
    int status = -1;
    int lat_column = ts_csv_column(reader, "lat|latitude");
    int lon_column = ts_csv_column(reader, "lon|lng|longitude");
    if (lat_column < 0 || lon_column < 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s: header has no '%s' column\n",
                path, lat_column < 0 ? "lat" : "lon");
        goto out;
    }
    uint64_t bad = 0;
    size_t line;
    int rc;
    while ((rc = ts_tool_next_row(reader, path, &line)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR)
            goto out;
        double lat, lon;
        if (rc != TS_CSV_ROW ||
            !ts_csv_finite(ts_csv_field(reader, lat_column), &lat) ||
            !ts_csv_finite(ts_csv_field(reader, lon_column), &lon) ||
            !ts_geo_valid(lat, lon)) {
            bad++;
            continue;
        }
        if (pois->n == pois->cap) {
            size_t cap = pois->cap ? pois->cap * 2 : 1024;
            double *grown_lat = realloc(pois->lat, cap * sizeof(double));
            if (grown_lat == NULL)
                goto oom;
            pois->lat = grown_lat;
            double *grown_lon = realloc(pois->lon, cap * sizeof(double));
            if (grown_lon == NULL)
                goto oom;
            pois->lon = grown_lon;
            pois->cap = cap;
        }
        pois->lat[pois->n] = lat;
        pois->lon[pois->n] = lon;
        pois->n++;
    }
    if (bad != 0)
        fprintf(stderr, "eval: %s: %" PRIu64 " rows without a valid lat/lon "
                "ignored\n", path, bad);
    status = 0;
    goto out;
oom:
    fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
out:
    ts_csv_close(reader);
    return status;
}

/* Fills knn_precision and knn_recall of every matched row. */
int ts_eval_knn(ts_eval_data *data, const char *poi_path, size_t k,
                size_t k_returned)
{
    poi_set pois = { NULL, NULL, 0, 0 };
    ts_poi_index *index = NULL;
    uint32_t *nearest = NULL;
    int status = -1;
    if (load_pois(poi_path, &pois) != 0)
        goto out;
    if (pois.n < k_returned) {
        fprintf(stderr, TS_TOOL_NAME ": %s has %zu usable POIs, fewer than "
                "the %zu of --knn-returned\n", poi_path, pois.n, k_returned);
        goto out;
    }
    index = ts_poi_index_new(pois.lat, pois.lon, pois.n);
    nearest = malloc((k + k_returned) * sizeof *nearest);
    if (index == NULL || nearest == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        goto out;
    }
    uint32_t *true_set = nearest, *returned_set = nearest + k;
    for (size_t i = 0; i < data->n_rows; i++) {
        ts_eval_row *r = &data->rows[i];
        if (!r->matched)
            continue;
        if (ts_poi_index_nearest(index, r->lat, r->lon, k, true_set) != k ||
            ts_poi_index_nearest(index, r->released_lat, r->released_lon,
                                 k_returned, returned_set) != k_returned) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            goto out;
        }
        size_t common = 0;
        for (size_t a = 0; a < k; a++)
            for (size_t b = 0; b < k_returned; b++)
                if (true_set[a] == returned_set[b]) {
                    common++;
                    break;
                }
        r->knn_precision = (double)common / (double)k_returned;
        r->knn_recall = (double)common / (double)k;
    }
    status = 0;
out:
    free(nearest);
    ts_poi_index_free(index);
    free(pois.lat);
    free(pois.lon);
    return status;
}
