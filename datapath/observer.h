/* What the operations side watches in the data path, as hooks: the time
 * each update took, the rejection log, what was published (the feed),
 * committed reports a population loop counts, commits and health.
 *
 * The data path calls them on the event loop's thread; a driver that
 * processes on a thread of its own hands them over through a relay
 * (datapath/observer_relay.h). Every hook may be NULL. Nothing passed
 * carries a raw coordinate: published bytes are published anyway,
 * observations are published reports. */
#ifndef TRACESAN_DATAPATH_OBSERVER_H
#define TRACESAN_DATAPATH_OBSERVER_H

#include <stddef.h>
#include <stdint.h>

#include "datapath/io.h"
#include "engine/pipeline.h"

/* A sanitized report of a profile with a population loop
 * (ops/population_loop.h): what the loop counts once the message carrying
 * it was sent. Published values only. */
typedef struct ts_observation {
    uint32_t profile_index;
    uint32_t channel_version;
    double lat, lon;
    int64_t ts_ms;
    size_t entry;                /* the sink's message that carries it */
} ts_observation;

typedef struct ts_observer {
    void *arg;
    /* The pipeline took `seconds` over an update of the profile at
     * `profile_index`. */
    void (*latency)(void *arg, size_t profile_index, double seconds);
    /* An update or message was rejected (the rate-limited log). */
    void (*rejected)(void *arg, const char *user_id, ts_reason reason,
                     const char *detail);
    /* The output took a message (the feed). */
    void (*published)(void *arg, const void *topic, size_t topic_len,
                      const void *payload, size_t len);
    /* Whether fresh reports of the profile are counted (a population
     * loop runs for it). */
    int (*counts_reports)(void *arg, size_t profile_index);
    /* Reports whose message the output took: after their group's ledgers
     * were durable and the message was sent. A report whose message failed
     * to send, or that a full output still held at shutdown, never comes
     * here, so a population loop estimates from what readers received. */
    void (*reports_sent)(void *arg, const ts_observation *observations,
                         size_t n);
    /* One durable commit of `outcomes` outcomes that took `seconds`. */
    void (*commit)(void *arg, double seconds, size_t outcomes);
    /* The data path's health changed: NULL healthy, else why not. */
    void (*health)(void *arg, const char *unhealthy_reason);
} ts_observer;

#endif
