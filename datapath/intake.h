/* Message framing and validation: what an input message must be before any
 * update in it reaches the pipeline, and the wall-clock bounds on event
 * time. Pure checks on bytes and settings; the caller publishes the
 * rejection. */
#ifndef TRACESAN_DATAPATH_INTAKE_H
#define TRACESAN_DATAPATH_INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "wire/codec.h"
#include "engine/settings.h"
#include "datapath/io.h"

/* 0 with *batch decoded into `arena` (NULL: the heap; release with
 * ts_codec_batch_release) and wire[] filled for its updates; or -1 with
 * *reason and detail saying why the whole message is refused. `wire` holds
 * settings->max_batch_updates entries. */
int ts_intake_open(const ts_settings *settings, const ts_inbound *message,
                   ts_wire_update *wire, ts_codec_arena *arena,
                   Tracesan__V1__LocationBatch **batch, ts_reason *reason,
                   char *detail, size_t detail_len);

/* The event-time window the wall clock allows; 0 leaves a side open. */
typedef struct ts_time_bounds {
    int64_t earliest_ms;
    int64_t latest_ms;
} ts_time_bounds;

ts_time_bounds ts_intake_time_bounds(const ts_settings *settings,
                                     int64_t now_ms);

/* 0 when ts_ms is inside the bounds; else -1 with *reason
 * (invalid_timestamp ahead, too_old behind) and detail. */
int ts_intake_check_time(const ts_settings *settings,
                         const ts_time_bounds *bounds, int64_t ts_ms,
                         ts_reason *reason, char *detail, size_t detail_len);

#endif
