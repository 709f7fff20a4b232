/* The running daemon around its driver: what daemon/main.c composes and
 * the operations side (metrics, HTTP, SIGHUP, systemd) reads.
 *
 * main.c: ts_daemon_init (loop, random generator, the pipeline built from
 * the configuration, state.dir's store when the driver commits to one),
 * the driver's open with ts_daemon_env, ts_daemon_start (population
 * loops, the HTTP endpoint, signals, timers), the driver's start,
 * ts_daemon_run (the ready line, the loop until SIGINT or SIGTERM), the
 * driver's finish, the summary, ts_daemon_stop, the driver's close,
 * ts_daemon_free. The daemon reaches the driver only through its table. */
#ifndef TRACESAN_OPS_DAEMON_H
#define TRACESAN_OPS_DAEMON_H

#include <stddef.h>

#include "datapath/driver.h"
#include "engine/config.h"
#include "ops/daemon_state.h"

/* 0, or -1 with err (the caller still calls ts_daemon_free). */
int ts_daemon_init(ts_daemon *daemon, const ts_config *config,
                   const ts_driver_ops *driver, const char *config_path,
                   const char *const *overrides, size_t n_overrides,
                   char *err, size_t errlen);
/* What the driver is opened with. */
ts_driver_env ts_daemon_env(ts_daemon *daemon);
/* The operations around an opened driver. 0, or -1 (logged). */
int ts_daemon_start(ts_daemon *daemon, ts_driver *driver);
/* Logs the ready line and runs the loop until SIGINT or SIGTERM. 0, or 1
 * when the loop failed. */
int ts_daemon_run(ts_daemon *daemon);
/* Stops the operations (before the driver closes); idempotent. */
void ts_daemon_stop(ts_daemon *daemon);
void ts_daemon_free(ts_daemon *daemon);

#endif
