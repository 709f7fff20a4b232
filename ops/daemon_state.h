/* The running daemon's composition: what main.c wires together and the
 * operations side (metrics, HTTP, SIGHUP, systemd) reads. */
#ifndef TRACESAN_OPS_DAEMON_STATE_H
#define TRACESAN_OPS_DAEMON_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <event2/event.h>

#include "wire/codec.h"
#include "ops/dashboard.h"
#include "ops/feed.h"
#include "datapath/group_commit.h"
#include "engine/log.h"
#include "ops/metrics.h"
#include "ops/ops_http.h"
#include "datapath/outbox.h"
#include "engine/pipeline.h"
#include "ops/population_loop.h"
#include "engine/settings.h"
#include "state/store.h"
#include "engine/transport.h"

#define TS_DAEMON_NAME "tracesand"

typedef struct ts_daemon {
    const ts_settings *settings;
    ts_pipeline *pipeline;
    const ts_transport_ops *transport_ops;
    ts_transport *transport;
    struct event_base *base;
    ts_outbox outbox;
    ts_codec_arena arena;        /* input messages are unpacked here */
    ts_group_commit commit;
    ts_log_limiter log_limiter;  /* rejection lines */
    uint64_t clock_rejections;
    /* Wire lengths of one batch's updates (input.max_batch_updates). */
    ts_wire_update *wire;
    ts_store *store;             /* NULL: state.dir unset, memory only */
    ts_store_backend store_backend;
    /* PRIVIC loops and the density feed; NULL when no profile has one. */
    ts_population_set *population;
    /* operations: metrics, HTTP, reload, systemd */
    ts_metrics *metrics;
    ts_ops_http *http;
    ts_dashboard *dashboard;     /* NULL when http.listen is off */
    ts_feed *feed;               /* NULL: no HTTP or feed_max_streams 0 */
    /* input.type = "jetstream": the scale-out mode (metrics); else NULL */
    struct ts_jetstream *jetstream;
    uint64_t messages_in;
    uint64_t messages_at_last_tick;  /* input quiet since: trim the heap */
    uint64_t messages_at_last_trim;
    const char *config_path;     /* re-read on SIGHUP */
    const char *const *overrides;
    size_t n_overrides;
    struct event *ops_tick_event;
    struct timespec ops_tick_due;
    unsigned ops_ticks;
    struct event *watchdog_event;
} ts_daemon;

/* The exit summary line (counts only). */
void ts_daemon_log_summary(const ts_daemon *daemon);

/* The transport's callbacks (data_path.c); `arg` is the ts_daemon. */
void ts_daemon_on_message(void *arg, const ts_inbound *message);
void ts_daemon_on_batch_end(void *arg);
int ts_daemon_on_output_ready(void *arg);
int64_t ts_wall_clock_ms(void);
/* systemd's STATUS= line. */
void ts_daemon_notify_status(const ts_daemon *daemon);
/* Metrics, HTTP endpoint, SIGHUP and systemd timers. Returns -1 (logged)
 * on failure; ts_daemon_stop_operations frees whatever was set up. */
int ts_daemon_start_operations(ts_daemon *daemon, const char *config_path,
                               const char *const *overrides,
                               size_t n_overrides,
                               struct event **sighup_event);
void ts_daemon_stop_operations(ts_daemon *daemon,
                               struct event *sighup_event);

#endif
