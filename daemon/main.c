/* tracesand: the streaming sanitizer.
 *
 * One thread, one libevent loop. Each readiness callback of the transport
 * hands over a bounded group of input messages; every update in them goes
 * through the pipeline and its outcome is encoded into the outbox. When the
 * group ends, the batch is committed (a no-op until durable state exists)
 * and only then published, so nothing is ever published that the state
 * would not also remember.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include <gsl/gsl_errno.h>

#include "engine/config.h"
#include "ops/daemon_state.h"
#include "drivers/jetstream/jetstream_mode.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif
#ifndef TS_SYSCONFDIR
#define TS_SYSCONFDIR "/etc"
#endif

#define PROGRAM_NAME TS_DAEMON_NAME
#define DEFAULT_CONFIG_PATH TS_SYSCONFDIR "/tracesand.conf"
#define ERR_MAX 512
#define MAX_OVERRIDES 256

/* Rejection log lines per second; the rest are counted and reported. */
#define REJECTION_LOG_PER_SECOND 10
/* Users visited per expiry tick: bounded so a huge table never stalls the
 * loop; the pipeline resumes where the previous tick stopped. */
#define EXPIRE_SCAN_PER_TICK 10000

typedef struct options {
    const char *config_path;
    const char *overrides[MAX_OVERRIDES];
    size_t n_overrides;
    int check_config;
} options;

static void usage(FILE *out)
{
    fprintf(out,
        "usage: " PROGRAM_NAME " [-c FILE] [-o path=value]...\n"
        "       " PROGRAM_NAME " --check-config FILE [-o path=value]...\n"
        "\n"
        "Streaming location-trace sanitizer. Reads LocationBatch messages\n"
        "(protobuf, tracesan.v1) from a ZeroMQ PULL or SUB socket, applies the\n"
        "configured privacy mechanism per user and publishes SanitizedLocation\n"
        "or Rejection messages on a ZeroMQ PUB socket, topics\n"
        "\"sanitized.<profile>\" and \"rejected\". Runs in the foreground.\n"
        "\n"
        "options:\n"
        "  -c, --config FILE     configuration file (libconfig syntax; default\n"
        "                        " DEFAULT_CONFIG_PATH " when it exists,\n"
        "                        built-in defaults otherwise)\n"
        "  -o path=value         override one setting, libconfig path syntax,\n"
        "                        e.g. -o input.endpoint=tcp://127.0.0.1:7001\n"
        "                        or -o profiles.geoind.radius_m=200; repeatable\n"
        "      --check-config    validate the configuration (and overrides),\n"
        "                        print \"FILE: configuration OK\" and exit 0, or\n"
        "                        print \"FILE:LINE: message\" and exit 1\n"
        "  -h, --help            show this help and exit\n"
        "  -V, --version         show the version and exit\n"
        "\n"
        "Once both sockets are up the daemon logs\n"
        "  ready input=<endpoint> output=<endpoint> [http=<host:port>]\n"
        "with the actual endpoints (tcp://host:* ports resolved); http= names\n"
        "the HTTP endpoint (http.listen: /metrics, /healthz, the dashboard at\n"
        "/ and the feed at /feed) when it is on.\n"
        "\n"
        "signals:\n"
        "  SIGINT, SIGTERM  finish and publish the current batch, log a summary\n"
        "                   (summary updates=N sanitized=N repeated=N rejected=N\n"
        "                   users=N rejected.<reason>=N...) and exit 0\n"
        "  SIGHUP           reload the configuration file: log level and\n"
        "                   profile parameters and CURVE client\n"
        "                   allow-lists apply, users keep their spend and\n"
        "                   peers their connections; an invalid file is\n"
        "                   logged and ignored\n"
        "  SIGPIPE          ignored\n"
        "\n"
        "Logs go to stderr as \"" PROGRAM_NAME ": <level>: <message>\" (or to\n"
        "syslog with log.syslog = true). Coordinates are never logged.\n"
        "Exit status: 0 on a clean shutdown, 1 on a usage, configuration or\n"
        "startup error.\n");
    /* From the mechanisms' own parameter rows, so help cannot drift. */
    fprintf(out, "\nMechanisms (profiles.NAME.mechanism) and their "
            "parameters:\n");
    char params[4096];
    for (const ts_mechanism_ops *const *m = ts_mechanism_all(); *m != NULL;
         m++) {
        ts_mechanism_param_help(*m, params, sizeof params);
        fprintf(out, "  %s: %s\n%s", (*m)->name,
                (*m)->summary != NULL ? (*m)->summary : "", params);
    }
}

/* ------------------------------------------------------- timers/signals */

static void on_signal(evutil_socket_t signum, short what, void *arg)
{
    (void)what;
    ts_daemon *daemon = arg;
    ts_log(TS_LOG_INFO, "received %s, shutting down",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
    /* The transport callback in progress has already published its batch:
     * loopbreak only takes effect between callbacks. */
    event_base_loopbreak(daemon->base);
}

static void on_expire_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_daemon *daemon = arg;
    if (daemon->settings->max_backdate_ms > 0)
        ts_pipeline_set_expiry_floor(daemon->pipeline,
                                     ts_wall_clock_ms() -
                                         daemon->settings->max_backdate_ms);
    size_t forgotten = ts_pipeline_expire(daemon->pipeline,
                                          EXPIRE_SCAN_PER_TICK);
    if (forgotten > 0)
        ts_log(TS_LOG_DEBUG, "expired %zu idle users", forgotten);
}

/* ---------------------------------------------------------------- main */

static int parse_options(int argc, char **argv, options *opts)
{
    enum { OPT_CHECK_CONFIG = 1000 };
    static const struct option long_options[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    memset(opts, 0, sizeof *opts);
    int c;
    while ((c = getopt_long(argc, argv, "c:o:hV", long_options, NULL)) != -1) {
        switch (c) {
        case 'c':
            opts->config_path = optarg;
            break;
        case 'o':
            if (opts->n_overrides == MAX_OVERRIDES) {
                fprintf(stderr, PROGRAM_NAME ": too many -o overrides (max %d)\n",
                        MAX_OVERRIDES);
                return 1;
            }
            opts->overrides[opts->n_overrides++] = optarg;
            break;
        case OPT_CHECK_CONFIG:
            opts->check_config = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf(PROGRAM_NAME " " PACKAGE_VERSION "\n");
            exit(0);
        default:
            usage(stderr);
            return 1;
        }
    }
    /* `--check-config FILE` names the file as an operand. */
    if (opts->check_config && opts->config_path == NULL &&
        optind + 1 == argc) {
        opts->config_path = argv[optind++];
    }
    if (optind != argc) {
        fprintf(stderr, PROGRAM_NAME ": unexpected argument '%s'\n",
                argv[optind]);
        usage(stderr);
        return 1;
    }
    if (opts->check_config && opts->config_path == NULL) {
        fprintf(stderr, PROGRAM_NAME ": --check-config needs a FILE\n");
        return 1;
    }
    return 0;
}

static int check_config(const options *opts)
{
    char err[ERR_MAX];
    ts_config *config = ts_config_load(opts->config_path, opts->overrides,
                                       opts->n_overrides, err, sizeof err);
    if (config == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* Loading validates every setting and instantiates every profile's
     * mechanism, so a configuration that loads is one the daemon runs. */
    printf("%s: configuration OK\n", opts->config_path);
    ts_config_free(config);
    return 0;
}

static int run(const options *opts)
{
    char err[ERR_MAX];
    int status = 1;
    ts_daemon daemon;
    memset(&daemon, 0, sizeof daemon);
    daemon.log_limiter.per_second = REJECTION_LOG_PER_SECOND;
    daemon.transport_ops = &ts_transport_zmq_ops;
    ts_config *config = NULL;
    ts_rng *rng = NULL;
    struct event *sigint_event = NULL;
    struct event *sigterm_event = NULL;
    struct event *expire_event = NULL;
    struct event *sighup_event = NULL;

    const char *path = opts->config_path;
    if (path == NULL && access(DEFAULT_CONFIG_PATH, R_OK) == 0)
        path = DEFAULT_CONFIG_PATH;
    config = ts_config_load(path, opts->overrides, opts->n_overrides, err,
                            sizeof err);
    if (config == NULL) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    daemon.settings = ts_config_settings(config);
    daemon.outbox.batched = daemon.settings->output_format == TS_OUTPUT_BATCH;
    ts_codec_arena_init(&daemon.arena);
    ts_log_init(PROGRAM_NAME, (ts_log_level)daemon.settings->log_level,
                daemon.settings->log_syslog);
    ts_log_capture_libevent();
    if (path == NULL)
        ts_log(TS_LOG_INFO, "no configuration file, using built-in defaults");

    rng = ts_rng_new_secure();
    if (rng == NULL) {
        /* Noise from anything but the OS entropy source would void the
         * guarantee, so there is no fallback. */
        ts_log(TS_LOG_ERROR, "secure random generator unavailable");
        goto out;
    }
    daemon.pipeline = ts_config_make_pipeline(config, rng, err, sizeof err);
    if (daemon.pipeline == NULL) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    if (daemon.settings->input_kind == TS_INPUT_JETSTREAM) {
        status = ts_jetstream_run(&daemon, config, rng, path,
                                  opts->overrides, opts->n_overrides);
        goto out;
    }
    if (daemon.settings->output_kind == TS_OUTPUT_JETSTREAM) {
        ts_log(TS_LOG_ERROR, "output.type = \"jetstream\" needs input.type "
               "= \"jetstream\"");
        goto out;
    }
    /* input.max_batch_updates is restart-only, so this never resizes;
     * calloc leaves the untouched tail of a large limit unmapped. */
    daemon.wire = calloc(daemon.settings->max_batch_updates,
                         sizeof *daemon.wire);
    if (daemon.wire == NULL) {
        ts_log(TS_LOG_ERROR, "out of memory for input.max_batch_updates");
        goto out;
    }
    if (daemon.settings->state_dir != NULL) {
        daemon.store = ts_store_open(daemon.settings->state_dir,
                                     (ts_store_sync)daemon.settings->state_sync,
                                     daemon.settings->state_map_size_mb, 0,
                                     err, sizeof err);
        if (daemon.store == NULL) {
            ts_log(TS_LOG_ERROR, "%s", err);
            goto out;
        }
        ts_store_backend_init(&daemon.store_backend, daemon.store);
        ts_pipeline_set_state_backend(daemon.pipeline,
                                      &daemon.store_backend.backend);
        ts_log(TS_LOG_INFO, "state store %s opened",
               daemon.settings->state_dir);
    } else {
        ts_log(TS_LOG_WARN, "state.dir is empty or unset: budget ledgers "
               "live in memory only and a restart gives every user a fresh "
               "budget");
    }
    daemon.base = event_base_new();
    if (daemon.base == NULL) {
        ts_log(TS_LOG_ERROR, "cannot create event loop");
        goto out;
    }
    if (daemon.transport_ops->open(&daemon.transport, daemon.settings,
                                   daemon.base, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }

    sigint_event = evsignal_new(daemon.base, SIGINT, on_signal, &daemon);
    sigterm_event = evsignal_new(daemon.base, SIGTERM, on_signal, &daemon);
    expire_event = event_new(daemon.base, -1, EV_PERSIST, on_expire_tick,
                             &daemon);
    daemon.commit = (ts_group_commit){
        .store = daemon.store,
        .store_backend = &daemon.store_backend,
        .pipeline = daemon.pipeline,
        .outbox = &daemon.outbox,
        .transport_ops = daemon.transport_ops,
        .transport = daemon.transport,
        .base = daemon.base,
    };
    if (sigint_event == NULL || sigterm_event == NULL ||
        expire_event == NULL || ts_group_commit_start(&daemon.commit) != 0 ||
        evsignal_add(sigint_event, NULL) != 0 ||
        evsignal_add(sigterm_event, NULL) != 0) {
        ts_log(TS_LOG_ERROR, "cannot set up signal and timer events");
        goto out;
    }
    int64_t interval_ms = daemon.settings->expire_interval_ms > 0
                              ? daemon.settings->expire_interval_ms
                              : 1000;
    struct timeval interval = {
        .tv_sec = (time_t)(interval_ms / 1000),
        .tv_usec = (suseconds_t)(interval_ms % 1000) * 1000,
    };
    if (event_add(expire_event, &interval) != 0) {
        ts_log(TS_LOG_ERROR, "cannot start the expiry timer");
        goto out;
    }

    if (ts_population_set_new(&daemon.population, daemon.pipeline,
                              daemon.store, daemon.base,
                              daemon.settings->density_publish_ms,
                              daemon.transport_ops, daemon.transport, err,
                              sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    if (daemon.population != NULL) {
        /* Memory only the outbox publishes; with a store, the group in
         * its commit does. */
        daemon.outbox.on_observed = ts_population_on_sent;
        daemon.outbox.on_observed_arg = daemon.population;
        daemon.commit.committing.on_observed = ts_population_on_sent;
        daemon.commit.committing.on_observed_arg = daemon.population;
    }

    if (ts_daemon_start_operations(&daemon, path, opts->overrides, opts->n_overrides,
                         &sighup_event) != 0)
        goto out;
    daemon.commit.metrics = daemon.metrics;

    daemon.transport_ops->start(daemon.transport, ts_daemon_on_message,
                                ts_daemon_on_batch_end,
                                ts_daemon_on_output_ready, &daemon);
    ts_log_always("ready input=%s output=%s%s%s",
               daemon.transport_ops->input_endpoint(daemon.transport),
               daemon.transport_ops->output_endpoint(daemon.transport),
               daemon.http != NULL ? " http=" : "",
               daemon.http != NULL ? ts_ops_http_address(daemon.http) : "");
    sd_notify(0, "READY=1");
    ts_daemon_notify_status(&daemon);

    if (event_base_dispatch(daemon.base) < 0) {
        ts_log(TS_LOG_ERROR, "event loop failed");
        goto out;
    }
    sd_notify(0, "STOPPING=1");
    /* A mid-callback break cannot leave outcomes behind, but finishing
     * here keeps that true if the transport ever changes. */
    int held = ts_group_commit_finish(&daemon.commit);
    ts_daemon_log_summary(&daemon);
    status = held ? 1 : 0;

out:
    ts_daemon_stop_operations(&daemon, sighup_event);
    ts_population_set_free(daemon.population);
    if (expire_event != NULL)
        event_free(expire_event);
    ts_group_commit_stop(&daemon.commit);
    if (sigterm_event != NULL)
        event_free(sigterm_event);
    if (sigint_event != NULL)
        event_free(sigint_event);
    if (daemon.transport != NULL)
        daemon.transport_ops->close(daemon.transport);
    if (daemon.base != NULL)
        event_base_free(daemon.base);
    ts_outbox_free(&daemon.outbox);
    ts_codec_arena_free(&daemon.arena);
    free(daemon.wire);
    if (daemon.pipeline != NULL)
        ts_pipeline_free(daemon.pipeline);
    ts_store_close(daemon.store);
    ts_store_backend_free(&daemon.store_backend);
    if (rng != NULL)
        ts_rng_free(rng);
    if (config != NULL)
        ts_config_free(config);
    ts_log_close();
    libevent_global_shutdown();
    return status;
}

int main(int argc, char **argv)
{
    /* GSL's default handler aborts the process; with it off, a special
     * function's domain error comes back as a status the mechanism turns
     * into a dropped point (fail closed) instead of a crash. */
    gsl_set_error_handler_off();
    options opts;
    int rc = parse_options(argc, argv, &opts);
    if (rc != 0)
        return rc;
    ts_log_init(PROGRAM_NAME, TS_LOG_INFO, 0);
    if (opts.check_config)
        return check_config(&opts);
    signal(SIGPIPE, SIG_IGN);
    return run(&opts);
}
