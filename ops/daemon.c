#include "ops/daemon.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "drivers/driver_registry.h"
#include "ops/operations.h"
#include "wire/format.h"

/* Rejection log lines per second; the rest are counted and reported. */
#define REJECTION_LOG_PER_SECOND 10

/* ------------------------------------------------- the observer's hooks */

static void observe_latency(void *arg, size_t profile_index, double seconds)
{
    ts_daemon *daemon = arg;
    ts_metrics_observe_profile(daemon->metrics, profile_index, seconds);
}

static void observe_rejection(void *arg, const char *user_id,
                              ts_reason reason, const char *detail)
{
    ts_daemon *daemon = arg;
    ts_log_rejection(&daemon->log_limiter, user_id, ts_reason_name(reason),
                     detail);
}

static void observe_published(void *arg, const void *topic, size_t topic_len,
                              const void *payload, size_t len)
{
    ts_daemon *daemon = arg;
    ts_feed_on_published(daemon->feed, topic, topic_len, payload, len);
}

static int observe_counts_reports(void *arg, size_t profile_index)
{
    ts_daemon *daemon = arg;
    return ts_population_profile_has_loop(daemon->population,
                                          profile_index) >= 0;
}

static void observe_reports_sent(void *arg,
                                 const ts_observation *observations, size_t n)
{
    ts_daemon *daemon = arg;
    if (daemon->population != NULL)
        ts_population_on_sent(daemon->population, observations, n);
}

static void observe_commit(void *arg, double seconds, size_t outcomes)
{
    ts_daemon *daemon = arg;
    ts_metrics_observe_commit(daemon->metrics, seconds, outcomes);
}

static void observe_health(void *arg, const char *unhealthy_reason)
{
    (void)arg;
    if (unhealthy_reason != NULL)
        ts_metrics_set_unhealthy(unhealthy_reason);
    else
        ts_metrics_set_healthy();
}

/* ------------------------------------------------------------- set-up */

static int open_store(ts_daemon *daemon, char *err, size_t errlen)
{
    const ts_settings *s = daemon->settings;
    if (!daemon->driver_ops->uses_store)
        return 0;
    if (s->state_dir == NULL) {
        ts_log(TS_LOG_WARN, "state.dir is empty or unset: budget ledgers "
               "live in memory only and a restart gives every user a fresh "
               "budget");
        return 0;
    }
    daemon->store = ts_store_open(s->state_dir, (ts_store_sync)s->state_sync,
                                  s->state_map_size_mb, 0, err, errlen);
    if (daemon->store == NULL)
        return -1;
    ts_log(TS_LOG_INFO, "state store %s opened", s->state_dir);
    return 0;
}

int ts_daemon_init(ts_daemon *daemon, const ts_config *config,
                   const ts_driver_ops *driver, const char *config_path,
                   const char *const *overrides, size_t n_overrides,
                   char *err, size_t errlen)
{
    memset(daemon, 0, sizeof *daemon);
    daemon->config = config;
    daemon->settings = ts_config_settings(config);
    daemon->http_settings = ts_http_settings_of(config);
    daemon->driver_ops = driver;
    daemon->config_path = config_path;
    daemon->overrides = overrides;
    daemon->n_overrides = n_overrides;
    daemon->log_limiter.per_second = REJECTION_LOG_PER_SECOND;
    daemon->observer = (ts_observer){
        .arg = daemon,
        .latency = observe_latency,
        .rejected = observe_rejection,
        .published = observe_published,
        .counts_reports = observe_counts_reports,
        .reports_sent = observe_reports_sent,
        .commit = observe_commit,
        .health = observe_health,
    };
    ts_log_init(TS_DAEMON_NAME, (ts_log_level)daemon->settings->log_level,
                daemon->settings->log_syslog);
    ts_log_capture_libevent();
    daemon->rng = ts_rng_new_secure();
    if (daemon->rng == NULL) {
        /* Noise from anything but the OS entropy source would void the
         * guarantee, so there is no fallback. */
        snprintf(err, errlen, "secure random generator unavailable");
        return -1;
    }
    /* The mechanisms the load built (and checked) are the ones used. */
    daemon->pipeline = ts_config_make_shared_pipeline(config, daemon->rng,
                                                      err, errlen);
    if (daemon->pipeline == NULL || open_store(daemon, err, errlen) != 0)
        return -1;
    daemon->base = event_base_new();
    if (daemon->base == NULL) {
        snprintf(err, errlen, "cannot create event loop");
        return -1;
    }
    return 0;
}

ts_driver_env ts_daemon_env(ts_daemon *daemon)
{
    return (ts_driver_env){
        .config = daemon->config,
        .input_type = ts_driver_input_type(daemon->config),
        .output_type = ts_driver_output_type(daemon->config),
        .output = ts_driver_output_of_config(daemon->config),
        .base = daemon->base,
        .rng = daemon->rng,
        .pipeline = daemon->pipeline,
        .store = daemon->store,
        .observer = &daemon->observer,
    };
}

static ts_publish_result publish_density(void *arg, const void *topic,
                                         size_t topic_len,
                                         const void *payload, size_t len)
{
    ts_daemon *daemon = arg;
    return daemon->driver_ops->publish(daemon->driver, topic, topic_len,
                                       payload, len);
}

/* PRIVIC loops and the density feed, where the driver runs them; a driver
 * that does not leaves their profiles on their first channel, and says
 * so. */
static int start_population(ts_daemon *daemon)
{
    char err[512];
    if (daemon->driver_ops->density_geojson != NULL)
        return 0;  /* the driver runs them, cluster-wide */
    if (!daemon->driver_ops->runs_population ||
        daemon->driver_ops->publish == NULL) {
        for (size_t i = 0; i < ts_pipeline_profile_count(daemon->pipeline);
             i++) {
            const ts_profile *p = ts_pipeline_profile_at(daemon->pipeline, i);
            if (p->ops->population != NULL)
                ts_log(TS_LOG_WARN, "profile '%s': its population loop "
                       "(PRIVIC re-estimation, density.%s) does not run "
                       "with the %s driver; it releases through its first "
                       "channel", p->name, p->name, daemon->driver_ops->name);
        }
        return 0;
    }
    const ts_format *format = ts_format_of(
        ts_config_section(daemon->config, &ts_format_setting_section));
    ts_publisher publisher = { daemon, publish_density };
    if (ts_population_set_new(&daemon->population, daemon->pipeline,
                              daemon->store, daemon->base,
                              daemon->settings->density_publish_ms, format,
                              &publisher, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        return -1;
    }
    return 0;
}

static void on_signal(evutil_socket_t signum, short what, void *arg)
{
    (void)what;
    ts_daemon *daemon = arg;
    ts_log(TS_LOG_INFO, "received %s, shutting down",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
    /* The driver callback in progress has already published its group:
     * loopbreak only takes effect between callbacks. */
    event_base_loopbreak(daemon->base);
}

int ts_daemon_start(ts_daemon *daemon, ts_driver *driver)
{
    daemon->driver = driver;
    static const int signals[] = { SIGINT, SIGTERM };
    for (size_t i = 0; i < 2; i++) {
        daemon->signal_events[i] =
            evsignal_new(daemon->base, signals[i], on_signal, daemon);
        if (daemon->signal_events[i] == NULL ||
            evsignal_add(daemon->signal_events[i], NULL) != 0) {
            ts_log(TS_LOG_ERROR, "cannot set up signal events");
            return -1;
        }
    }
    if (start_population(daemon) != 0)
        return -1;
    return ts_daemon_start_operations(daemon);
}

int ts_daemon_run(ts_daemon *daemon)
{
    char what[512];
    daemon->driver_ops->describe(daemon->driver, what, sizeof what);
    ts_log_always("ready %s%s%s", what, daemon->http != NULL ? " http=" : "",
                  daemon->http != NULL ? ts_ops_http_address(daemon->http)
                                       : "");
    sd_notify(0, "READY=1");
    ts_daemon_notify_status(daemon);
    int loop = event_base_dispatch(daemon->base);
    sd_notify(0, "STOPPING=1");
    if (loop < 0) {
        ts_log(TS_LOG_ERROR, "event loop failed");
        return 1;
    }
    return 0;
}

void ts_daemon_stop(ts_daemon *daemon)
{
    ts_daemon_stop_operations(daemon);
    ts_population_set_free(daemon->population);
    daemon->population = NULL;
    for (size_t i = 0; i < 2; i++) {
        if (daemon->signal_events[i] != NULL)
            event_free(daemon->signal_events[i]);
        daemon->signal_events[i] = NULL;
    }
}

void ts_daemon_free(ts_daemon *daemon)
{
    ts_daemon_stop(daemon);
    if (daemon->base != NULL)
        event_base_free(daemon->base);
    if (daemon->pipeline != NULL)
        ts_pipeline_free(daemon->pipeline);
    ts_config_free(daemon->profiles_config);
    daemon->profiles_config = NULL;
    ts_store_close(daemon->store);
    if (daemon->rng != NULL)
        ts_rng_free(daemon->rng);
    daemon->base = NULL;
    daemon->pipeline = NULL;
    daemon->store = NULL;
    daemon->rng = NULL;
}
