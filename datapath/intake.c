#include "datapath/intake.h"

#include <inttypes.h>
#include <stdio.h>

static int refuse(ts_reason *reason, ts_reason why)
{
    *reason = why;
    return -1;
}

int ts_intake_open(const ts_settings *settings, const ts_inbound *message,
                   ts_wire_update *wire, ts_codec_arena *arena,
                   Tracesan__V1__LocationBatch **batch, ts_reason *reason,
                   char *detail, size_t detail_len)
{
    *batch = NULL;
    if (message->frames != 1 && message->frames != 2) {
        snprintf(detail, detail_len,
                 "message has %zu frames, expected 1 or 2", message->frames);
        return refuse(reason, TS_REASON_MALFORMED);
    }
    if (message->len > settings->max_message_bytes) {
        snprintf(detail, detail_len, "message of %zu bytes exceeds %zu",
                 message->len, settings->max_message_bytes);
        return refuse(reason, TS_REASON_OVERSIZED);
    }
    /* Count the updates in the wire bytes first: unpacking allocates per
     * update, and 1 MiB of empty updates took 0.4 s to decode before the
     * count could be refused (issue 10, item 8). */
    size_t n_updates = 0;
    if (ts_codec_scan_batch(message->payload, message->len, &n_updates, wire,
                            settings->max_batch_updates) < 0) {
        snprintf(detail, detail_len, "payload is not a LocationBatch");
        return refuse(reason, TS_REASON_MALFORMED);
    }
    if (n_updates == 0) {
        snprintf(detail, detail_len, "batch has no updates");
        return refuse(reason, TS_REASON_EMPTY_BATCH);
    }
    if (n_updates > settings->max_batch_updates) {
        snprintf(detail, detail_len, "batch of %zu updates exceeds %zu",
                 n_updates, settings->max_batch_updates);
        return refuse(reason, TS_REASON_BATCH_TOO_LARGE);
    }
    *batch = ts_codec_decode_batch_in(arena, message->payload, message->len);
    if (*batch == NULL || (*batch)->n_updates != n_updates) {
        ts_codec_batch_release(arena, *batch);
        *batch = NULL;
        snprintf(detail, detail_len, "payload is not a LocationBatch");
        return refuse(reason, TS_REASON_MALFORMED);
    }
    return 0;
}

ts_time_bounds ts_intake_time_bounds(const ts_settings *settings,
                                     int64_t now_ms)
{
    ts_time_bounds bounds = { 0, 0 };
    if (settings->max_future_ms > 0)
        bounds.latest_ms = now_ms + settings->max_future_ms;
    if (settings->max_backdate_ms > 0)
        bounds.earliest_ms = now_ms - settings->max_backdate_ms;
    return bounds;
}

int ts_intake_check_time(const ts_settings *settings,
                         const ts_time_bounds *bounds, int64_t ts_ms,
                         ts_reason *reason, char *detail, size_t detail_len)
{
    /* Event time drives idleness and dates budget windows. A far-future
     * timestamp would let one update make every other user look idle; a
     * far-past one would date a window decades back (issue 10, item 6).
     * Neither can buy budget any more: windows also run on the daemon's
     * clock (engine/pipeline.h). */
    if (bounds->latest_ms > 0 && ts_ms > bounds->latest_ms) {
        snprintf(detail, detail_len, "timestamp more than %" PRId64
                 " s in the future", settings->max_future_ms / 1000);
        return refuse(reason, TS_REASON_INVALID_TIMESTAMP);
    }
    if (bounds->earliest_ms > 0 && ts_ms > 0 && ts_ms < bounds->earliest_ms) {
        snprintf(detail, detail_len, "timestamp more than %" PRId64
                 " s before the daemon's clock",
                 settings->max_backdate_ms / 1000);
        return refuse(reason, TS_REASON_TOO_OLD);
    }
    return 0;
}
