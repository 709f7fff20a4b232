/* SIGHUP: re-read the configuration with the original overrides and apply
 * what can change without dropping sockets or users (log level, profile
 * parameters, client allow-lists). Anything invalid, and any change to the
 * set of profiles, refuses the whole reload and keeps the running
 * configuration; restart-only settings that changed are logged by key
 * (the settings table's RESTART rows). */
#ifndef TRACESAN_OPS_RELOAD_H
#define TRACESAN_OPS_RELOAD_H

#include <stddef.h>

#include "datapath/driver.h"
#include "ops/metrics.h"
#include "engine/pipeline.h"
#include "engine/settings.h"

typedef struct ts_reload_target {
    const char *config_path;             /* NULL: built-in defaults */
    const char *const *overrides;
    size_t n_overrides;
    /* The pipeline the daemon built, whose profiles every driver releases
     * by: its profiles are swapped here for ones shared from the new
     * configuration, which then goes to *profiles_config (the reference
     * the daemon holds for them; the one it held is dropped). */
    ts_pipeline *pipeline;
    ts_config **profiles_config;
    /* PRIVIC loops bound to the pipeline's profiles (may be NULL): they
     * let go of the old profiles and rebind to the new ones. */
    struct ts_population_set *population;
    /* The running configuration stays the original file's: the driver and
     * store hold pointers into it. */
    const ts_config *running;
    /* The rest goes to the driver through its table: adopt_config sees
     * the new configuration (its partitions' profiles, CURVE's
     * allow-lists) and takes a reference if it keeps it. */
    const ts_driver_ops *driver_ops;
    ts_driver *driver;
    ts_metrics *metrics;                 /* counts reloads; may be NULL */
    const char *program_name;            /* for the log's ident */
} ts_reload_target;

/* 0 when applied; -1 when refused (logged and counted). */
int ts_reload(const ts_reload_target *target);

#endif
