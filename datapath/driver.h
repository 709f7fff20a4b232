/* The driver table: one transport each (drivers/<name>/), found by the
 * input.type it serves (drivers/driver_registry.h), as a mechanism is
 * found by name.
 *
 * A driver owns its setting rows, its sockets or connections, its threads,
 * how it sits on the event loop and what acknowledging its input means.
 * Every update it receives goes through the one group body
 * (datapath/group.h) with the driver's own sink, and it keeps the
 * delivery rules the group body states: a debit is durable before the
 * point that spent it is published, and an input is acknowledged only
 * after its outcomes are published.
 *
 * The rest of the daemon (ops/: /metrics, /healthz, the summary line,
 * systemd's STATUS=, SIGHUP) reaches a driver only through this table.
 * daemon/main.c: find the driver, open, start, run the loop, finish,
 * close. */
#ifndef TRACESAN_DATAPATH_DRIVER_H
#define TRACESAN_DATAPATH_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "datapath/observer.h"
#include "datapath/output.h"
#include "engine/config.h"
#include "engine/pipeline.h"
#include "mechanisms/rng.h"
#include "state/store.h"
#include "wire/codec.h"

struct event_base;

typedef struct ts_driver ts_driver;

/* What a driver is given to open: everything as arguments. */
typedef struct ts_driver_env {
    const ts_config *config;     /* lives until close */
    const char *input_type;      /* input.type, one of the driver's */
    const char *output_type;     /* output.type: the driver's own, or
                                    one of `output`'s */
    /* output.type's output when it is another driver's (the driver opens
     * it and publishes through it); NULL: the driver's own. */
    const ts_output_ops *output;
    struct event_base *base;     /* the loop (signals, HTTP, timers) */
    ts_rng *rng;
    /* Built from `config` by the caller, borrowed: the driver releases
     * through it (or, with partitions, through pipelines that share its
     * profiles) and the operations side reads its profiles. */
    ts_pipeline *pipeline;
    /* state.dir's store when the driver asked for one (uses_store), else
     * NULL; borrowed. */
    ts_store *store;
    /* The operations side's hooks (latency, rejection log, feed,
     * population counting, commits, health); called on the loop thread
     * only. */
    const ts_observer *observer;
} ts_driver_env;

/* What a driver's transport dropped or refused, by cause, for /metrics
 * (zero where a driver has no such thing). */
typedef struct ts_transport_counters {
    uint64_t publish_dropped_error;  /* send failures other than a full
                                        output */
    uint64_t subscriber_cutoffs;     /* PUB output: a subscriber reached
                                        its HWM and was cut off until it
                                        caught up, missing >= 1 message */
    uint64_t input_pauses_output;    /* input paused: output could not take
                                        more (PUSH output) */
    int has_zap;                     /* CURVE on: the two below are live */
    uint64_t zap_accepted;           /* CURVE handshakes let through */
    uint64_t zap_denied;             /* CURVE handshakes refused */
} ts_transport_counters;

/* Counts for /metrics, the summary line and STATUS=, summed over the
 * driver's pipelines. */
typedef struct ts_driver_stats {
    ts_pipeline_stats pipeline;
    size_t users;
    uint64_t updates_before_pipeline;    /* refused on the clock */
    uint64_t messages_in;
    uint64_t published;
    uint64_t publish_failures;
    uint64_t encode_failures;
    uint64_t dropped_output_hwm;         /* committed, never published */
    uint64_t dropped_uncommitted;
    uint64_t input_pauses_store;
    uint64_t store_commit_failures;
    ts_transport_counters transport;
} ts_driver_stats;

typedef struct ts_driver_ops {
    const char *name;
    /* The input.type and output.type values it serves (NULL-terminated).
     * output.type names the same driver, or another whose `output` this
     * one's input can use (takes_outputs). */
    const char *const *input_types;
    const char *const *output_types;
    /* Its output side for other drivers' input (NULL: its output serves
     * only its own input). */
    const ts_output_ops *output;
    /* 1: its input publishes through another driver's output when
     * output.type names one (env->output). */
    int takes_outputs;
    /* Its setting rows (NULL: none). */
    const ts_setting_section *settings;
    /* 1: it commits to the state.dir store (opened by the caller and
     * passed in env->store); 0: it keeps state elsewhere. */
    int uses_store;
    /* Whether the daemon runs PRIVIC loops and the density feed with it
     * (ops/population_loop.h: counting reports_sent, persisting to the
     * store, publishing through `publish`); 0 makes their profiles release
     * through their first channel, unless the driver runs them itself
     * (density_geojson). */
    int runs_population;
    int (*open)(ts_driver **out, const ts_driver_env *env, char *err,
                size_t errlen);
    /* Starts taking input; the caller then runs the loop. */
    int (*start)(ts_driver *driver, char *err, size_t errlen);
    /* What the ready line says after "ready ": "input=... output=...". */
    void (*describe)(const ts_driver *driver, char *buf, size_t len);
    /* The loop has ended: stop taking input, commit and publish what is
     * in hand, join threads. 0, or 1 when something stayed uncommitted. */
    int (*finish)(ts_driver *driver);
    void (*close)(ts_driver *driver);
    void (*stats)(const ts_driver *driver, ts_driver_stats *out);
    /* Its own series for /metrics (NULL: none). 0, or -1. */
    int (*render_metrics)(ts_driver *driver, ts_buf *out);
    /* SIGHUP, after the caller validated `fresh` and swapped the
     * profiles of env->pipeline for ones shared from it: apply them to
     * the driver's own pipelines, and whatever else the driver reloads
     * (client allow-lists). The driver takes a reference to `fresh`
     * (ts_config_ref) if it keeps it. 0, or -1 with err (refused: the
     * running configuration stays, or partly so as err says). */
    int (*adopt_config)(ts_driver *driver, ts_config *fresh, char *err,
                        size_t errlen);
    /* Where out-of-band messages go (the density feed); NULL: nowhere. */
    ts_publish_result (*publish)(ts_driver *driver, const void *topic,
                                 size_t topic_len, const void *payload,
                                 size_t len);
    /* Set when the driver runs the PRIVIC loops and the density feed
     * itself (the JetStream driver: cluster-wide, over every partition's
     * reports) and serves GET /density/<profile> with this: the statuses
     * and body of wire/density.h, malloc'ed. NULL: it does not. */
    char *(*density_geojson)(ts_driver *driver, const char *profile,
                             int *status, size_t *len);
} ts_driver_ops;

/* Sums pipeline counters into stats (partitions, tests). */
void ts_driver_stats_add_pipeline(ts_driver_stats *stats,
                                  const ts_pipeline *pipeline);

#endif
