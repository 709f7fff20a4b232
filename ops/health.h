/* The daemon's health, as /healthz and tracesand_healthy report it. */
#ifndef TRACESAN_OPS_HEALTH_H
#define TRACESAN_OPS_HEALTH_H

#include <stddef.h>

/* Health is process-wide: the driver reports it through the observer's
 * health hook (datapath/observer.h), which ops/daemon.c turns into these
 * calls; the endpoint reads it without holding the metrics object. The
 * first reason
 * wins until ts_metrics_set_healthy() clears it. Reasons are operator text
 * (never coordinates or user ids). */
void ts_metrics_set_unhealthy(const char *reason);
void ts_metrics_set_healthy(void);
/* 1 when healthy; otherwise 0 with the reason copied into `reason`. */
int ts_metrics_healthy(char *reason, size_t size);

#endif
