/* tracesand: the streaming sanitizer.
 *
 * Options -> configuration -> the driver input.type names -> open, start,
 * run the loop, finish, close. Everything else is the driver's (its
 * transport, threads and acknowledgements, datapath/driver.h) or the
 * operations side's (metrics, HTTP, reload, systemd, ops/daemon.h).
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <gsl/gsl_errno.h>

#include "drivers/driver_registry.h"
#include "ops/catalog.h"
#include "ops/daemon.h"
#include "ops/daemon_cli.h"
#include "ops/operations.h"

#define ERR_MAX 512

static ts_config *load(const char *path, const ts_daemon_options *opts,
                       char *err, size_t errlen)
{
    return ts_config_load(path, opts->overrides, opts->n_overrides, err,
                          errlen);
}

static int check_config(const ts_daemon_options *opts)
{
    char err[ERR_MAX];
    ts_config *config = load(opts->config_path, opts, err, sizeof err);
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

static int run(const ts_daemon_options *opts)
{
    char err[ERR_MAX];
    const char *path = opts->config_path;
    if (path == NULL && access(TS_DAEMON_DEFAULT_CONFIG, R_OK) == 0)
        path = TS_DAEMON_DEFAULT_CONFIG;
    ts_config *config = load(path, opts, err, sizeof err);
    if (config == NULL) {
        ts_log(TS_LOG_ERROR, "%s", err);
        return 1;
    }
    const ts_driver_ops *driver = ts_driver_of_config(config);
    ts_daemon daemon;
    ts_driver *instance = NULL;
    int status = 1;
    if (ts_daemon_init(&daemon, config, driver, path, opts->overrides,
                       opts->n_overrides, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    if (path == NULL)
        ts_log(TS_LOG_INFO, "no configuration file, using built-in defaults");
    ts_driver_env env = ts_daemon_env(&daemon);
    if (driver->open(&instance, &env, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    if (ts_daemon_start(&daemon, instance) != 0)
        goto out;
    if (driver->start(instance, err, sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    status = ts_daemon_run(&daemon);
    status |= driver->finish(instance);
    ts_daemon_log_summary(&daemon);
out:
    ts_daemon_stop(&daemon);
    if (instance != NULL)
        driver->close(instance);
    ts_daemon_free(&daemon);
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
    ts_daemon_options opts = { 0 };
    int rc = ts_daemon_parse_options(argc, argv, &opts);
    if (rc != 0)
        return rc == TS_OPTIONS_DONE ? 0 : rc;
    ts_log_init(TS_DAEMON_NAME, TS_LOG_INFO, 0);
    if (opts.check_config)
        return check_config(&opts);
    signal(SIGPIPE, SIG_IGN);
    return run(&opts);
}
