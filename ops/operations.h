/* The daemon's operations side: the exit summary, /metrics from the
 * driver's table, the dashboard, feed and density routes, the loop-lag
 * tick, systemd's STATUS= and watchdog, and SIGHUP. */
#ifndef TRACESAN_OPS_OPERATIONS_H
#define TRACESAN_OPS_OPERATIONS_H

#include "ops/daemon_state.h"

/* The exit summary line (counts only). */
void ts_daemon_log_summary(const ts_daemon *daemon);
/* systemd's STATUS= line. */
void ts_daemon_notify_status(const ts_daemon *daemon);
/* Metrics, HTTP endpoint, SIGHUP and systemd timers. Returns -1 (logged)
 * on failure; ts_daemon_stop_operations frees whatever was set up. */
int ts_daemon_start_operations(ts_daemon *daemon);
void ts_daemon_stop_operations(ts_daemon *daemon);

#endif
