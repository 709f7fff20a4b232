/* An output apart from its driver's input: a driver's output side that
 * another driver's input publishes through when output.type names it
 * (input.type = "mqtt" with output.type = "push", input.type = "pull"
 * with output.type = "mqtt"). The registry pairs them
 * (drivers/driver_registry.h); the input driver opens it from
 * ts_driver_env.output and keeps its delivery rules: an input is
 * acknowledged only after its outcomes were committed and this output
 * took them.
 *
 * Messages come under their format topics (wire/format.h:
 * "sanitized.<profile>", "rejected", "density.<profile>", "batch"); an
 * output with topics of its own (MQTT's templates) maps them. */
#ifndef TRACESAN_DATAPATH_OUTPUT_H
#define TRACESAN_DATAPATH_OUTPUT_H

#include <stddef.h>

#include "datapath/io.h"
#include "datapath/observer.h"
#include "engine/config.h"
#include "wire/codec.h"

struct event_base;
struct ts_transport_counters;

typedef struct ts_output ts_output;

typedef struct ts_output_env {
    const ts_config *config;     /* lives until close */
    const char *output_type;     /* output.type, one of the output's */
    struct event_base *base;
    /* Health of a connection the output keeps (a broker): NULL healthy,
     * else why not. May be NULL. */
    const ts_observer *observer;
    /* After a publish answered TS_PUBLISH_BLOCKED, called when the output
     * can take messages again: offer the held ones. Returns nonzero while
     * some are still held (a publish blocked again). */
    int (*ready)(void *arg);
    void *ready_arg;
} ts_output_env;

typedef struct ts_output_ops {
    int (*open)(ts_output **out, const ts_output_env *env, char *err,
                size_t errlen);
    /* One message under its format topic. BLOCKED: nothing taken, `ready`
     * follows; FAILED: dropped and counted. */
    ts_publish_result (*publish)(ts_output *output, const void *topic,
                                 size_t topic_len, const void *payload,
                                 size_t len);
    /* Where it publishes, for the ready line: "tcp://...", "mqtt://...". */
    void (*describe)(const ts_output *output, char *buf, size_t len);
    /* What it dropped or refused, as the driver's transport counters
     * (fills `out`). */
    void (*counters)(const ts_output *output,
                     struct ts_transport_counters *out);
    /* Its own /metrics series (NULL: none). 0, or -1. */
    int (*render_metrics)(ts_output *output, ts_buf *out);
    /* SIGHUP: what of `fresh` applies to it while running (NULL:
     * nothing). 0, or -1 with err (the running settings stay). */
    int (*adopt_config)(ts_output *output, const ts_config *fresh,
                        char *err, size_t errlen);
    /* Hands over what is queued (bounded wait) and frees. */
    void (*close)(ts_output *output);
} ts_output_ops;

#endif
