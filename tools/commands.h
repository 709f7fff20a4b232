/* Subcommands of the `tracesan` tool and the helpers they share. Each
 * command gets its own argv (argv[0] is the command name) and returns the
 * process exit status. */
#ifndef TRACESAN_TOOLS_COMMANDS_H
#define TRACESAN_TOOLS_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

#define TS_TOOL_NAME "tracesan"
/* Where the shipped configuration binds the daemon's sockets. */
#define TS_TOOL_DEFAULT_INPUT "tcp://127.0.0.1:7001"
#define TS_TOOL_DEFAULT_OUTPUT "tcp://127.0.0.1:7002"
#define TS_TOOL_MAX_OVERRIDES 256

int cmd_sanitize(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_tail(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_state(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_learn(int argc, char **argv);

/* Appends one `-o path=value` to a command's override list; -1 (reported)
 * when the list is full. */
int ts_tool_add_override(const char **overrides, size_t *n_overrides,
                         const char *override);
/* The client's CURVE options come as a pair; -1 (reported) when only one
 * of them was given. */
int ts_tool_check_curve_options(const char *server_key_path,
                                const char *key_prefix);

/* Strict number parsing for option values: the whole text must parse. */
int ts_tool_parse_u64(const char *text, uint64_t *out);
int ts_tool_parse_double(const char *text, double *out);

/* The endpoint a tool connects to when --connect is absent: the daemon's
 * input (want_input) or output endpoint from --config/-o when given, else
 * the shipped default. A wildcard host becomes 127.0.0.1. Returns -1 with
 * err filled when there is no usable endpoint. */
int ts_tool_default_endpoint(const char *config_path,
                             const char *const *overrides, size_t n_overrides,
                             int want_input, char *out, size_t outlen,
                             char *err, size_t errlen);

/* Connection monitor for a socket that connects: a PAIR socket receiving
 * the socket's CONNECTED and HANDSHAKE_SUCCEEDED events. NULL on error.
 * Must be set up before zmq_connect. */
void *ts_tool_monitor_open(void *context, void *socket, const char *name);
/* Reads one pending event: 1 when it says the peer is connected, 0 for any
 * other event, -1 on error. */
int ts_tool_monitor_read(void *monitor);

/* Monotonic clock in seconds, and sleeps against it. */
double ts_tool_now(void);
void ts_tool_sleep(double seconds);
void ts_tool_sleep_until(double deadline);

#endif
