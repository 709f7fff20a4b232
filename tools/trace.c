/* A location trace read whole (tools/trace.h). */
#include "tools/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "tools/commands.h"
#include "tools/csv.h"

#define ERR_MAX 512

static int compare_points(const void *a, const void *b)
{
    const ts_trace_point *x = a, *y = b;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    if (x->ts_ms != y->ts_ms)
        return x->ts_ms < y->ts_ms ? -1 : 1;
    return x->order < y->order ? -1 : (x->order > y->order);
}

static int push(ts_trace *trace, const ts_csv_row *row)
{
    uint32_t user;
    if (ts_name_index_intern(trace->users, row->user, &user) != 0 ||
        trace->n >= UINT32_MAX)
        return -1;
    ts_trace_point *points = ts_tool_reserve(trace->points, trace->n,
                                             &trace->cap, sizeof *points,
                                             4096);
    if (points == NULL)
        return -1;
    trace->points = points;
    trace->points[trace->n] = (ts_trace_point){
        .user = user,
        .order = (uint32_t)trace->n,
        .ts_ms = row->ts_ms,
        .lat = row->lat,
        .lon = row->lon,
    };
    trace->n++;
    return 0;
}

int ts_trace_load(ts_trace *trace, const char *path, int64_t min_ts_ms)
{
    char err[ERR_MAX];
    memset(trace, 0, sizeof *trace);
    if ((trace->users = ts_name_index_new()) == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        return -1;
    }
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return -1;
    }
    int status = -1;
    ts_csv_row row;
    int rc;
    while ((rc = ts_csv_read(reader, &row, err, sizeof err)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
            goto out;
        }
        trace->rows_read++;
        if (rc == TS_CSV_BAD_ROW || row.user[0] == '\0' ||
            row.ts_ms < min_ts_ms || !ts_geo_valid(row.lat, row.lon)) {
            trace->skipped++;
            continue;
        }
        if (push(trace, &row) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            goto out;
        }
    }
    qsort(trace->points, trace->n, sizeof *trace->points, compare_points);
    status = 0;
out:
    ts_csv_close(reader);
    return status;
}

void ts_trace_free(ts_trace *trace)
{
    ts_name_index_free(trace->users);
    free(trace->points);
    memset(trace, 0, sizeof *trace);
}
