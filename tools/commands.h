/* Subcommands of the `tracesan` tool and the helpers they share. Each
 * command gets its own argv (argv[0] is the command name) and returns the
 * process exit status. */
#ifndef TRACESAN_TOOLS_COMMANDS_H
#define TRACESAN_TOOLS_COMMANDS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/config.h"
#include "engine/pipeline.h"
#include "mechanisms/rng.h"
#include "tools/csv.h"
#include "tools/options.h"

#define TS_TOOL_NAME "tracesan"
/* Where the shipped configuration binds the daemon's sockets. */
#define TS_TOOL_DEFAULT_INPUT "tcp://127.0.0.1:7001"
#define TS_TOOL_DEFAULT_OUTPUT "tcp://127.0.0.1:7002"

int cmd_sanitize(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_tail(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_state(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_learn(int argc, char **argv);
int cmd_privic(int argc, char **argv);
int cmd_optimize(int argc, char **argv);
int cmd_cip_loss(int argc, char **argv);
/* tools/cmd_jetstream.c (docs/scale-out.md) */
int cmd_replay_jetstream(int argc, char **argv);
int cmd_jetstream(int argc, char **argv);
/* tools/mqtt_tools.c (docs/mqtt.md) */
int cmd_replay_mqtt(int argc, char **argv);
int cmd_tail_mqtt(int argc, char **argv);

/* What the daemon takes in one input message (input.max_message_bytes,
 * input.max_batch_updates). */
typedef struct ts_tool_input_limits {
    size_t max_message_bytes;
    size_t max_batch_updates;
} ts_tool_input_limits;

/* The endpoint to connect to: --connect when given, else the daemon's
 * input (want_input) or output endpoint from --config/-o when given, else
 * the shipped default. A wildcard host becomes 127.0.0.1. When `limits`
 * is not NULL it gets the daemon's input limits as --config/-o set them
 * (the defaults without either). Returns -1 (reported) when there is no
 * usable endpoint or the configuration does not load. */
int ts_tool_endpoint(const ts_tool_common *common, int want_input, char *out,
                     size_t outlen, ts_tool_input_limits *limits);

/* A sanitizing pipeline as --config, -o and --seed describe it (the OS's
 * generator without --seed), and the profile --profile names or else the
 * default one. */
typedef struct ts_tool_pipeline {
    ts_config *config;
    ts_rng *rng;
    ts_pipeline *pipeline;
    const ts_profile *profile;
} ts_tool_pipeline;

/* Returns -1 (reported, with everything freed) on an error. */
int ts_tool_pipeline_open(const ts_tool_common *common,
                          ts_tool_pipeline *out);
void ts_tool_pipeline_close(ts_tool_pipeline *tool);

/* Monitor of a socket that connects: a PAIR socket receiving the socket's
 * `events` (ZMQ_EVENT_* bits). NULL on error. Must be set up before
 * zmq_connect. */
void *ts_tool_monitor_open(void *context, void *socket, int events);
/* Reads one pending event: 1 when it says the peer is connected, 0 for any
 * other event, -1 on error. */
int ts_tool_monitor_read(void *monitor);

/* The name of a Rejection's reason (the wire's number), "unknown" for a
 * number this build does not know. */
const char *ts_tool_reason_name(int reason);

/* tools/cmd_jetstream.c: the JetStream part of `replay --help`. */
void ts_replay_jetstream_usage(FILE *out);

/* Room for one more item in an array of *cap items of `size` bytes that
 * holds n: the array itself, or grown by doubling (from `first` items)
 * when full, with *cap updated; NULL when out of memory, the old array
 * kept. */
void *ts_tool_reserve(void *items, size_t n, size_t *cap, size_t size,
                      size_t first);

/* ts_csv_open_table and ts_csv_next (tools/csv.h) that report their errors
 * on stderr as "tracesan: PATH: ...": NULL, or TS_CSV_IO_ERROR, once
 * reported. */
ts_csv_reader *ts_tool_open_table(const char *path);
int ts_tool_next_row(ts_csv_reader *reader, const char *path, size_t *line);

/* Monotonic clock in seconds, and a sleep against it. */
double ts_tool_now(void);
void ts_tool_sleep_until(double deadline);

#endif
