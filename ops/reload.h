/* SIGHUP: re-read the configuration with the original overrides and apply
 * what can change without dropping sockets or users (log level, profile
 * parameters, client allow-lists). Anything invalid, and any change to the
 * set of profiles, refuses the whole reload and keeps the running
 * configuration; restart-only settings that changed are logged by key
 * (the settings table's RESTART rows). */
#ifndef TRACESAN_OPS_RELOAD_H
#define TRACESAN_OPS_RELOAD_H

#include <stddef.h>

#include "ops/metrics.h"
#include "engine/pipeline.h"
#include "engine/settings.h"
#include "engine/transport.h"

typedef struct ts_reload_target {
    const char *config_path;             /* NULL: built-in defaults */
    const char *const *overrides;
    size_t n_overrides;
    ts_pipeline *pipeline;
    /* PRIVIC loops bound to the pipeline's profiles (may be NULL): they
     * let go of the old profiles and rebind to the new ones. */
    struct ts_population_set *population;
    /* The running settings stay those of the original file: the transport
     * and store hold pointers into them. */
    const ts_settings *running;
    const ts_transport_ops *transport_ops;
    ts_transport *transport;
    ts_metrics *metrics;                 /* counts reloads; may be NULL */
    const char *program_name;            /* for the log's ident */
    /* When set, called once the reload is applied, with the new
     * configuration, which it then owns (the JetStream mode rebuilds its
     * partitions' profiles from it on its own thread); else it is freed. */
    void (*adopt_config)(void *arg, struct ts_config *fresh);
    void *adopt_arg;
} ts_reload_target;

/* 0 when applied; -1 when refused (logged and counted). */
int ts_reload(const ts_reload_target *target);

#endif
