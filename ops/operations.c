#include "ops/operations.h"

#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "ops/reload.h"

#define ERR_MAX 512

static void driver_stats(const ts_daemon *daemon, ts_driver_stats *out)
{
    daemon->driver_ops->stats(daemon->driver, out);
}

static uint64_t rejected_total(const ts_pipeline_stats *stats)
{
    uint64_t rejected = 0;
    for (int r = 0; r < TS_REASON_COUNT; r++)
        rejected += stats->rejected[r];
    return rejected;
}

void ts_daemon_log_summary(const ts_daemon *daemon)
{
    ts_log_rejections_summary(&daemon->log_limiter);
    ts_driver_stats totals;
    driver_stats(daemon, &totals);
    const ts_pipeline_stats *stats = &totals.pipeline;
    uint64_t rejected = rejected_total(stats);
    /* ts_pipeline_process counts the updates it saw; the ones refused
     * before it (far-future timestamps) are updates too. */
    uint64_t updates = stats->updates + totals.updates_before_pipeline;

    char line[2048];
    int n = snprintf(line, sizeof line,
                     "summary updates=%" PRIu64 " sanitized=%" PRIu64
                     " repeated=%" PRIu64 " rejected=%" PRIu64 " users=%zu"
                     " published=%" PRIu64,
                     updates, stats->sanitized, stats->repeated, rejected,
                     totals.users, totals.published);
    for (int r = 0; r < TS_REASON_COUNT && n > 0 && (size_t)n < sizeof line;
         r++) {
        if (stats->rejected[r] == 0)
            continue;
        n += snprintf(line + n, sizeof line - (size_t)n,
                      " rejected.%s=%" PRIu64, ts_reason_name((ts_reason)r),
                      stats->rejected[r]);
    }
    ts_log_always("%s", line);
    if (totals.encode_failures > 0 || totals.publish_failures > 0)
        ts_log(TS_LOG_WARN,
               "outputs lost: encode_failures=%" PRIu64
               " publish_failures=%" PRIu64,
               totals.encode_failures, totals.publish_failures);
}

/* ---------------------------------------------------------- operations */

/* Period of the timer that measures event-loop lag; every
 * STATUS_EVERY_TICKS ticks it also refreshes systemd's STATUS= line. */
#define OPS_TICK_MS 250
#define STATUS_EVERY_TICKS 20

static char *render_metrics(void *arg, size_t *len)
{
    ts_daemon *daemon = arg;
    ts_driver_stats totals;
    driver_stats(daemon, &totals);
    ts_metrics_sources sources = {
        .pipeline = &totals.pipeline,
        .updates_before_pipeline = totals.updates_before_pipeline,
        .users = totals.users,
        .messages_in = totals.messages_in,
        .messages_published = totals.published,
        .publish_failures = totals.publish_failures,
        .encode_failures = totals.encode_failures,
        .dropped_uncommitted = totals.dropped_uncommitted,
        .input_pauses_store = totals.input_pauses_store,
        .store_commit_failures = totals.store_commit_failures,
        .dropped_output_hwm = totals.dropped_output_hwm,
        .dropped_output_error = totals.transport.publish_dropped_error,
        .subscriber_cutoffs = totals.transport.subscriber_cutoffs,
        .input_pauses_output = totals.transport.input_pauses_output,
        .has_zap = totals.transport.has_zap,
        .zap_accepted = totals.transport.zap_accepted,
        .zap_denied = totals.transport.zap_denied,
    };
    if (daemon->http != NULL) {
        sources.has_http = 1;
        sources.http = ts_ops_http_get_counters(daemon->http);
    }
    char *text = ts_metrics_render(daemon->metrics, &sources, len);
    if (text == NULL ||
        (daemon->population == NULL && daemon->feed == NULL &&
         daemon->driver_ops->render_metrics == NULL))
        return text;
    ts_buf body = { 0 };
    if (ts_buf_append(&body, text, *len) != 0 ||
        (daemon->population != NULL &&
         ts_population_render_metrics(daemon->population, &body) != 0) ||
        (daemon->feed != NULL &&
         ts_feed_render_metrics(daemon->feed, &body) != 0) ||
        (daemon->driver_ops->render_metrics != NULL &&
         daemon->driver_ops->render_metrics(daemon->driver, &body) != 0) ||
        ts_buf_append(&body, "", 1) != 0) {
        free(text);
        ts_buf_free(&body);
        return NULL;
    }
    free(text);
    *len = body.len - 1;
    return (char *)body.data;
}

static void serve_density(void *arg, const char *rest, const char *query,
                          ts_ops_reply *reply)
{
    (void)query;
    ts_daemon *daemon = arg;
    reply->content_type = "application/geo+json";
    if (daemon->driver_ops->density_geojson != NULL)
        reply->owned = daemon->driver_ops->density_geojson(
            daemon->driver, rest, &reply->status, &reply->len);
    else
        reply->owned = ts_population_geojson(daemon->population, rest,
                                             &reply->status, &reply->len);
    reply->body = reply->owned;
    if (reply->owned == NULL)
        reply->status = 500;
}

/* The pipeline's profile names (borrowed), in a calloc'd array; NULL
 * (logged) when memory runs out. */
static const char **profile_names(const ts_pipeline *pipeline, size_t *n)
{
    *n = ts_pipeline_profile_count(pipeline);
    const char **names = calloc(*n > 0 ? *n : 1, sizeof *names);
    if (names == NULL) {
        ts_log(TS_LOG_ERROR, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < *n; i++)
        names[i] = ts_pipeline_profile_at(pipeline, i)->name;
    return names;
}

/* The dashboard's files, /dashboard.json and /feed, with the token and
 * CORS allow-list of http.*; the feed sees every message the driver
 * publishes (the observer's published hook). -1 (logged) on failure. */
static int start_dashboard(ts_daemon *daemon)
{
    const ts_http_settings *s = daemon->http_settings;
    if (ts_ops_http_set_access(daemon->http, s->http_token,
                               s->http_cors_origins,
                               s->n_http_cors_origins) != 0) {
        ts_log(TS_LOG_ERROR, "out of memory");
        return -1;
    }
    if (s->http_feed_max_streams > 0) {
        ts_feed_limits limits = {
            .max_streams = s->http_feed_max_streams,
            .buffer_bytes = s->http_feed_buffer_kb * 1024,
            .stall_ms = s->http_feed_stall_ms,
            .max_rate = s->http_feed_max_rate,
        };
        daemon->feed = ts_feed_new(
            daemon->base, &limits,
            ts_format_of(ts_config_section(daemon->config,
                                           &ts_format_setting_section)));
        if (daemon->feed == NULL ||
            ts_ops_http_add_route(daemon->http, &(ts_ops_route){
                .path = "/feed", .stream = ts_feed_open_stream,
                .arg = daemon->feed }) != 0) {
            ts_log(TS_LOG_ERROR, "cannot start the feed");
            return -1;
        }
    }
    size_t n_profiles = 0;
    const char **names = profile_names(daemon->pipeline, &n_profiles);
    if (names == NULL)
        return -1;
    ts_dashboard_options options = {
        .dashboard_dir = s->http_dashboard_dir,
        .leaflet_dir = s->http_leaflet_dir,
        .tile_url = s->http_tile_url,
        .tile_attribution = s->http_tile_attribution,
        .token_required = s->http_token != NULL,
        .feed_enabled = daemon->feed != NULL,
        .profiles = names,
        .n_profiles = n_profiles,
    };
    daemon->dashboard = ts_dashboard_new(&options);
    free(names);
    if (daemon->dashboard == NULL ||
        ts_dashboard_add_routes(daemon->dashboard, daemon->http) != 0) {
        ts_log(TS_LOG_ERROR, "cannot set up the dashboard");
        return -1;
    }
    return 0;
}

void ts_daemon_notify_status(const ts_daemon *daemon)
{
    ts_driver_stats totals;
    driver_stats(daemon, &totals);
    const ts_pipeline_stats *stats = &totals.pipeline;
    sd_notifyf(0,
               "STATUS=updates=%" PRIu64 " sanitized=%" PRIu64
               " rejected=%" PRIu64 " users=%zu",
               stats->updates + totals.updates_before_pipeline,
               stats->sanitized, rejected_total(stats), totals.users);
}

static void timespec_add_ms(struct timespec *t, long ms)
{
    t->tv_sec += ms / 1000;
    t->tv_nsec += (ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static int arm_ops_tick(ts_daemon *daemon)
{
    clock_gettime(CLOCK_MONOTONIC, &daemon->ops_tick_due);
    timespec_add_ms(&daemon->ops_tick_due, OPS_TICK_MS);
    struct timeval delay = { .tv_sec = 0, .tv_usec = OPS_TICK_MS * 1000 };
    return event_add(daemon->ops_tick_event, &delay);
}

/* A one-shot timer re-armed on each tick: how late it fires is the time
 * the loop spent on other work, i.e. the event-loop lag. */
static void on_ops_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_daemon *daemon = arg;
    ts_metrics_observe_loop_lag(daemon->metrics,
                                ts_metrics_seconds_since(&daemon->ops_tick_due));
    if (++daemon->ops_ticks % STATUS_EVERY_TICKS == 0)
        ts_daemon_notify_status(daemon);
    /* A burst leaves freed message buffers (up to input.max_queued_mb per
     * producer) in the allocator; glibc keeps them unless asked. Once the
     * input has gone quiet for a tick, hand them back to the system. */
    ts_driver_stats totals;
    driver_stats(daemon, &totals);
    uint64_t messages_in = totals.messages_in;
    if (messages_in == daemon->messages_at_last_tick &&
        messages_in != daemon->messages_at_last_trim) {
        malloc_trim(0);
        daemon->messages_at_last_trim = messages_in;
    }
    daemon->messages_at_last_tick = messages_in;
    if (arm_ops_tick(daemon) != 0)
        ts_log(TS_LOG_ERROR, "cannot re-arm the metrics timer");
}

/* Pinged from the loop itself, so a wedged loop stops the pings and
 * systemd restarts the daemon. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    sd_notify(0, "WATCHDOG=1");
}

static void on_sighup(evutil_socket_t signum, short what, void *arg)
{
    (void)signum;
    (void)what;
    ts_daemon *daemon = arg;
    ts_reloader_request(daemon->reloader);
}

static ts_reloader *start_reloader(ts_daemon *daemon, char *err,
                                   size_t errlen)
{
    ts_reload_target target = {
        .config_path = daemon->config_path,
        .overrides = daemon->overrides,
        .n_overrides = daemon->n_overrides,
        .pipeline = daemon->pipeline,
        .profiles_config = &daemon->profiles_config,
        .population = daemon->population,
        .running = daemon->config,
        .driver_ops = daemon->driver_ops,
        .driver = daemon->driver,
        .metrics = daemon->metrics,
        .program_name = TS_DAEMON_NAME,
    };
    return ts_reloader_new(&target, daemon->base, err, errlen);
}

int ts_daemon_start_operations(ts_daemon *daemon)
{
    char err[ERR_MAX];
    size_t n_profiles = 0;
    const char **names = profile_names(daemon->pipeline, &n_profiles);
    if (names == NULL)
        return -1;
    daemon->metrics = ts_metrics_new(names, n_profiles);
    free(names);
    if (daemon->metrics == NULL) {
        ts_log(TS_LOG_ERROR, "out of memory");
        return -1;
    }
    const char *listen = daemon->http_settings->http_listen;
    if (listen != NULL && listen[0] != '\0') {
        daemon->http = ts_ops_http_start(daemon->base, listen,
                                         daemon->http_settings
                                             ->http_max_connections,
                                         render_metrics,
                                         daemon, err, sizeof err);
        if (daemon->http == NULL) {
            ts_log(TS_LOG_ERROR, "%s", err);
            return -1;
        }
        if (ts_ops_http_add_route(daemon->http, &(ts_ops_route){
                .path = "/density/", .serve = serve_density,
                .arg = daemon }) != 0 ||
            start_dashboard(daemon) != 0)
            return -1;
    }

    daemon->reloader = start_reloader(daemon, err, sizeof err);
    if (daemon->reloader == NULL) {
        ts_log(TS_LOG_ERROR, "%s", err);
        return -1;
    }
    struct event **sighup = &daemon->signal_events[2];
    *sighup = evsignal_new(daemon->base, SIGHUP, on_sighup, daemon);
    daemon->ops_tick_event = event_new(daemon->base, -1, 0, on_ops_tick,
                                       daemon);
    if (*sighup == NULL || daemon->ops_tick_event == NULL ||
        evsignal_add(*sighup, NULL) != 0 ||
        arm_ops_tick(daemon) != 0) {
        ts_log(TS_LOG_ERROR, "cannot set up the SIGHUP and metrics events");
        return -1;
    }

    uint64_t watchdog_usec = 0;
    if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0) {
        /* Half the interval: one late ping does not cost a restart. */
        uint64_t half = watchdog_usec / 2;
        struct timeval period = {
            .tv_sec = (time_t)(half / 1000000u),
            .tv_usec = (suseconds_t)(half % 1000000u),
        };
        daemon->watchdog_event = event_new(daemon->base, -1, EV_PERSIST,
                                           on_watchdog, daemon);
        if (daemon->watchdog_event == NULL ||
            event_add(daemon->watchdog_event, &period) != 0) {
            ts_log(TS_LOG_ERROR, "cannot start the watchdog timer");
            return -1;
        }
        ts_log(TS_LOG_INFO, "systemd watchdog every %" PRIu64 " ms",
               half / 1000u);
    }
    return 0;
}

void ts_daemon_stop_operations(ts_daemon *daemon)
{
    if (daemon->watchdog_event != NULL)
        event_free(daemon->watchdog_event);
    daemon->watchdog_event = NULL;
    if (daemon->ops_tick_event != NULL)
        event_free(daemon->ops_tick_event);
    daemon->ops_tick_event = NULL;
    if (daemon->signal_events[2] != NULL)
        event_free(daemon->signal_events[2]);
    daemon->signal_events[2] = NULL;
    ts_reloader_free(daemon->reloader);
    daemon->reloader = NULL;
    /* Streams go first: they hold bufferevents of the endpoint's loop. */
    ts_feed_free(daemon->feed);
    daemon->feed = NULL;
    ts_ops_http_free(daemon->http);
    daemon->http = NULL;
    ts_dashboard_free(daemon->dashboard);
    daemon->dashboard = NULL;
    ts_metrics_free(daemon->metrics);
    daemon->metrics = NULL;
}

