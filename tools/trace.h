/* A location trace read whole, for the offline tools that look at each
 * user's points in time order (sample, eval): the rows of a
 * user,ts,lat,lon CSV as sanitize reads it (tools/csv.h), users numbered
 * by a name index, sorted by user, then time, then file order (GPS traces
 * repeat timestamps).
 *
 * Rows that cannot be used (a bad field, no user, an invalid coordinate,
 * a time before the caller's earliest) are counted, never echoed: their
 * fields may be coordinates.
 */
#ifndef TRACESAN_TOOLS_TRACE_H
#define TRACESAN_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "tools/name_index.h"

typedef struct ts_trace_point {
    uint32_t user;           /* in ts_trace.users */
    uint32_t order;          /* among the usable rows, to keep sorts stable */
    int64_t ts_ms;
    double lat;
    double lon;
} ts_trace_point;

typedef struct ts_trace {
    ts_name_index *users;
    ts_trace_point *points;
    size_t n, cap;
    uint64_t rows_read;      /* every row of the file, unusable ones too */
    uint64_t skipped;        /* the unusable ones */
} ts_trace;

/* Reads `path` ("-" = stdin, gzip read transparently) into an empty
 * trace, skipping rows earlier than min_ts_ms. Returns 0, or -1 reported
 * on stderr; free the trace with ts_trace_free either way. */
int ts_trace_load(ts_trace *trace, const char *path, int64_t min_ts_ms);
void ts_trace_free(ts_trace *trace);

#endif
