/* The running daemon's composition: what ops/daemon.c builds around the
 * driver and the operations side (ops/operations.h) reads. */
#ifndef TRACESAN_OPS_DAEMON_STATE_H
#define TRACESAN_OPS_DAEMON_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <event2/event.h>

#include "datapath/driver.h"
#include "datapath/observer.h"
#include "engine/config.h"
#include "engine/log.h"
#include "engine/pipeline.h"
#include "engine/settings.h"
#include "ops/dashboard.h"
#include "ops/feed.h"
#include "ops/http_settings.h"
#include "ops/metrics.h"
#include "ops/ops_http.h"
#include "ops/population_loop.h"
#include "ops/reload.h"
#include "state/store.h"

#define TS_DAEMON_NAME "tracesand"

typedef struct ts_daemon {
    const ts_config *config;
    const ts_settings *settings;
    const ts_http_settings *http_settings;
    const ts_driver_ops *driver_ops;
    ts_driver *driver;           /* set by ts_daemon_start */
    struct event_base *base;
    ts_rng *rng;
    ts_pipeline *pipeline;       /* the profiles every driver releases by */
    /* The configuration whose mechanisms the pipeline shares since the
     * last SIGHUP (NULL: `config`'s); a reference the daemon holds. */
    ts_config *profiles_config;
    ts_store *store;             /* NULL: memory only, or not the driver's */
    ts_observer observer;        /* the hooks handed to the driver */
    ts_log_limiter log_limiter;  /* rejection lines */
    /* PRIVIC loops and the density feed; NULL when no profile has one. */
    ts_population_set *population;
    ts_metrics *metrics;
    ts_ops_http *http;
    ts_dashboard *dashboard;     /* NULL when http.listen is off */
    ts_feed *feed;               /* NULL: no HTTP or feed_max_streams 0 */
    const char *config_path;     /* re-read on SIGHUP */
    const char *const *overrides;
    size_t n_overrides;
    struct event *signal_events[3];  /* SIGINT, SIGTERM, SIGHUP */
    ts_reloader *reloader;       /* SIGHUP's, off the loop */
    struct event *ops_tick_event;
    struct timespec ops_tick_due;
    unsigned ops_ticks;
    uint64_t messages_at_last_tick;  /* input quiet since: trim the heap */
    uint64_t messages_at_last_trim;
    struct event *watchdog_event;
} ts_daemon;

#endif
