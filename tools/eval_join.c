/* The join of a true trace with its sanitized output (tools/eval_join.h). */
#include "tools/eval_join.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "geometry/geo.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/trace.h"

/* eps values are printed with %.9g: equal values agree to ~1e-8. */
#define WINDOW_START_TOLERANCE 1e-7

typedef struct ts_eval_key {
    struct {
        uint32_t user;
        uint32_t zero;       /* explicit padding: keys are hashed as bytes */
        int64_t ts_ms;
    } key;
    size_t first;            /* index of the first true row with the key */
    size_t count;
    size_t used;             /* sanitized rows matched so far */
    UT_hash_handle hh;
} key_entry;

void ts_eval_data_free(ts_eval_data *data)
{
    ts_name_index_free(data->users);
    ts_name_index_free(data->profiles);
    key_entry *key, *tmp_key;
    HASH_ITER(hh, data->keys, key, tmp_key) {
        HASH_DEL(data->keys, key);
        free(key);
    }
    free(data->rows);
}

static key_entry *find_key(ts_eval_data *data, uint32_t user, int64_t ts_ms)
{
    key_entry probe;
    memset(&probe, 0, sizeof probe);
    probe.key.user = user;
    probe.key.ts_ms = ts_ms;
    key_entry *entry = NULL;
    HASH_FIND(hh, data->keys, &probe.key, sizeof probe.key, entry);
    return entry;
}

/* A true row not joined with any sanitized one. */
static void unjoin(ts_eval_row *r)
{
    r->matched = 0;
    r->predicted = -1;
    r->window_start = 0;
    r->error_m = NAN;
    r->rho = NAN;
    r->delta_set_size = NAN;
    r->profile_slot = TS_EVAL_PROFILE_UNNAMED;
    r->profile_name = 0;
    r->drifted = -1;
    r->knn_precision = NAN;
    r->knn_recall = NAN;
}

/* The trace's points as unjoined true rows. */
static int take_rows(ts_eval_data *data, const ts_trace *trace)
{
    data->rows = calloc(trace->n ? trace->n : 1, sizeof *data->rows);
    if (data->rows == NULL)
        return -1;
    data->n_rows = trace->n;
    for (size_t i = 0; i < trace->n; i++) {
        ts_eval_row *r = &data->rows[i];
        r->user = trace->points[i].user;
        r->ts_ms = trace->points[i].ts_ms;
        r->lat = trace->points[i].lat;
        r->lon = trace->points[i].lon;
        unjoin(r);
    }
    return 0;
}

/* One key per (user, ts), naming its run of rows (sorted by both). */
static int index_keys(ts_eval_data *data)
{
    for (size_t i = 0; i < data->n_rows;) {
        size_t j = i;
        while (j < data->n_rows && data->rows[j].user == data->rows[i].user &&
               data->rows[j].ts_ms == data->rows[i].ts_ms)
            j++;
        key_entry *entry = calloc(1, sizeof *entry);
        if (entry == NULL)
            return -1;
        entry->key.user = data->rows[i].user;
        entry->key.ts_ms = data->rows[i].ts_ms;
        entry->first = i;
        entry->count = j - i;
        HASH_ADD(hh, data->keys, key, sizeof entry->key, entry);
        i = j;
    }
    return 0;
}

int ts_eval_load_truth(ts_eval_data *data, const char *path)
{
    ts_trace trace;
    int status = ts_trace_load(&trace, path, INT64_MIN);
    if (status == 0) {
        if (trace.skipped != 0)
            fprintf(stderr, "eval: %" PRIu64 " unusable rows in %s "
                    "ignored\n", trace.skipped, path);
        data->users = trace.users;
        trace.users = NULL;
        if (take_rows(data, &trace) != 0 || index_keys(data) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            status = -1;
        }
    }
    ts_trace_free(&trace);
    return status;
}

/* ------------------------------------------------- the sanitized file */

enum { S_USER, S_TS, S_LAT, S_LON, S_EPS_POINT, S_EPS_SPENT, S_EPS_REMAINING,
       S_PREDICTED, S_COLUMNS };
static const char *const sanitized_columns[S_COLUMNS] = {
    "user", "ts", "lat", "lon", "eps_point", "eps_spent", "eps_remaining",
    "predicted",
};

/* Which of the configuration's profiles a sanitized row names. */
static int profile_slot(const ts_eval_data *data, const char *name)
{
    if (name[0] == '\0')
        return TS_EVAL_PROFILE_UNNAMED;
    if (data->pipeline == NULL)
        return TS_EVAL_PROFILE_UNKNOWN;
    size_t n = ts_pipeline_profile_count(data->pipeline);
    for (size_t i = 0; i < n; i++)
        if (strcmp(ts_pipeline_profile_at(data->pipeline, i)->name, name) ==
            0)
            return (int)i;
    return TS_EVAL_PROFILE_UNKNOWN;
}

int ts_eval_load_sanitized(ts_eval_data *data, const char *path)
{
    ts_csv_reader *reader = ts_tool_open_table(path);
    if (reader == NULL)
        return -1;
    int status = -1;
    int column[S_COLUMNS];
    for (int c = 0; c < S_COLUMNS; c++) {
        column[c] = ts_csv_column(reader, sanitized_columns[c]);
        if (column[c] < 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: header has no '%s' column "
                    "(expected %s)\n", path, sanitized_columns[c],
                    ts_csv_sanitized_header());
            goto out;
        }
    }
    int delta_column = ts_csv_column(reader, "delta_set_size");
    int profile_column = ts_csv_column(reader, "profile");
    data->has_delta = delta_column >= 0;
    uint64_t unmatched = 0, bad = 0;
    size_t line;
    int rc;
    while ((rc = ts_tool_next_row(reader, path, &line)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR)
            goto out;
        const char *field[S_COLUMNS];
        double value[S_COLUMNS];
        int ok = rc == TS_CSV_ROW;
        for (int c = 0; ok && c < S_COLUMNS; c++)
            ok = (field[c] = ts_csv_field(reader, column[c])) != NULL;
        for (int c = S_TS; ok && c <= S_EPS_REMAINING; c++)
            ok = ts_csv_finite(field[c], &value[c]);
        if (!ok || !(fabs(value[S_TS]) < 9.0e15)) {
            if (bad++ < 5)
                fprintf(stderr, "eval: %s: line %zu is not a sanitized row, "
                        "ignored\n", path, line);
            continue;
        }
        double lat = value[S_LAT], lon = value[S_LON];
        double eps_point = value[S_EPS_POINT];
        double eps_spent = value[S_EPS_SPENT];
        uint32_t user;
        key_entry *entry =
            ts_name_index_find(data->users, field[S_USER], &user)
                ? find_key(data, user, llround(value[S_TS] * 1000.0))
                : NULL;
        if (entry == NULL || entry->used == entry->count) {
            unmatched++;
            continue;
        }
        ts_eval_row *r = &data->rows[entry->first + entry->used++];
        r->matched = 1;
        r->released_lat = lat;
        r->released_lon = lon;
        r->eps_point = eps_point;
        const char *profile = ts_csv_field(reader, profile_column);
        if (profile != NULL)
            r->profile_slot = profile_slot(data, profile);
        if (ts_name_index_intern(data->profiles,
                                 profile != NULL ? profile : "",
                                 &r->profile_name) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            goto out;
        }
        r->error_m = ts_geo_distance_m(r->lat, r->lon, lat, lon);
        double budget = eps_spent + value[S_EPS_REMAINING];
        r->rho = budget > 0.0 ? eps_point / budget : NAN;
        r->window_start =
            eps_point > 0.0 &&
            fabs(eps_spent - eps_point) <= WINDOW_START_TOLERANCE * budget;
        const char *flag = field[S_PREDICTED];
        r->predicted = flag[0] == '\0' ? -1 : (strcmp(flag, "1") == 0);
        double size;
        if (ts_csv_finite(ts_csv_field(reader, delta_column), &size) &&
            size >= 0.0)
            r->delta_set_size = size;
    }
    if (unmatched != 0)
        fprintf(stderr, "eval: %" PRIu64 " sanitized rows have no true row "
                "with their (user, ts); ignored\n", unmatched);
    status = 0;
out:
    ts_csv_close(reader);
    return status;
}

void ts_eval_forget_sanitized(ts_eval_data *data)
{
    for (size_t i = 0; i < data->n_rows; i++)
        unjoin(&data->rows[i]);
    key_entry *key, *tmp_key;
    HASH_ITER(hh, data->keys, key, tmp_key)
        key->used = 0;
}
