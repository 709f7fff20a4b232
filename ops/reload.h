/* SIGHUP: re-read the configuration with the original overrides and apply
 * what can change without dropping sockets or users (log level, profile
 * parameters, client allow-lists). Anything invalid, and any change to the
 * set of profiles, refuses the whole reload and keeps the running
 * configuration; restart-only settings that changed are logged by key
 * (the settings table's RESTART rows).
 *
 * Off the event loop: reading the file and the files it names, and
 * building every profile's mechanism (a 4096-cell channel's geo-ind check
 * is 10 s of CPU), run on a worker thread while the loop keeps serving.
 * Only the swap runs on the loop, in one callback: a few pointers per
 * profile, the PRIVIC loops' rebinding and the driver's adopt_config.
 *
 * One reload at a time: a SIGHUP while one is being built asks for one
 * more after it (any number of them make one), which reads the file
 * again. At shutdown a reload still being built is waited for briefly,
 * then abandoned: the worker owns everything it uses and frees its own
 * result. */
#ifndef TRACESAN_OPS_RELOAD_H
#define TRACESAN_OPS_RELOAD_H

#include <stddef.h>

#include "datapath/driver.h"
#include "ops/metrics.h"
#include "engine/pipeline.h"
#include "engine/settings.h"

struct event_base;

/* How long shutdown waits for a reload being built before it abandons
 * it (its configuration would not be applied anyway). */
#define TS_RELOAD_SHUTDOWN_WAIT_MS 2000

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

typedef struct ts_reloader ts_reloader;

/* The target's pointers are borrowed and must outlive the reloader.
 * NULL with err when a thread's wake-up cannot be set up. */
ts_reloader *ts_reloader_new(const ts_reload_target *target,
                             struct event_base *base, char *err,
                             size_t errlen);
/* SIGHUP, on the loop: starts building the new configuration on a worker
 * thread, or, while one is being built, asks for one more after it. The
 * result is applied (or refused: logged and counted, the running
 * configuration kept) on the loop once built. */
void ts_reloader_request(ts_reloader *reloader);
/* 1 while a reload is being built or waits to be applied. */
int ts_reloader_busy(const ts_reloader *reloader);
/* Shutdown (the loop has ended): waits up to TS_RELOAD_SHUTDOWN_WAIT_MS
 * for a reload being built, then abandons it; nothing is applied. NULL
 * is a no-op. */
void ts_reloader_free(ts_reloader *reloader);

#endif
