/* tracesan: offline and client tools around tracesand.
 *   sanitize  run the daemon's pipeline over a CSV file
 *   replay    send a CSV trace to a running daemon
 *   tail      print a daemon's sanitized feed as CSV
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include <gsl/gsl_errno.h>

#include "daemon/config.h"
#include "daemon/log.h"
#include "tools/commands.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " COMMAND [options] [args]\n"
        "\n"
        "commands:\n"
        "  sanitize  run the sanitizing pipeline over a CSV trace, offline\n"
        "            (" TS_TOOL_NAME " sanitize --config FILE [--profile NAME]\n"
        "             [--seed N] [-o path=value]... IN.csv > OUT.csv)\n"
        "  replay    send a CSV trace to a running tracesand\n"
        "            (" TS_TOOL_NAME " replay --connect ENDPOINT [--rate N]\n"
        "             [--batch N] [--socket push|pub] IN.csv)\n"
        "  tail      print tracesand's sanitized feed as CSV\n"
        "            (" TS_TOOL_NAME " tail --connect ENDPOINT [--topic T]...\n"
        "             [--count N] [--timeout S])\n"
        "  keygen    write a CURVE key pair for tracesand or a client\n"
        "            (" TS_TOOL_NAME " keygen --out PREFIX)\n"
        "  state     inspect, export or import a tracesand state store\n"
        "            (" TS_TOOL_NAME " state --dir DIR [list|stats|export|import FILE])\n"
        "  eval      compare a true trace with its sanitized output\n"
        "            (" TS_TOOL_NAME " eval TRUE.csv SANITIZED.csv)\n"
        "  sample    the predictive paper's query sampling of a trace\n"
        "            (" TS_TOOL_NAME " sample --seed N --p P IN.csv)\n"
        "  learn     learn a Markov mobility model from traces\n"
        "            (" TS_TOOL_NAME " learn --region LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "             --cell-m METRES --tick-s SECONDS [--per-user] IN.csv > model.bin)\n"
        "\n"
        "Run '" TS_TOOL_NAME " COMMAND --help' for a command's options.\n"
        "  -h, --help     show this help\n"
        "  -V, --version  show the version\n",
        out);
}

int main(int argc, char **argv)
{
    /* GSL's default handler aborts the process; with it off, a special
     * function's domain error comes back as a status the mechanism turns
     * into a dropped point (fail closed) instead of a crash. */
    gsl_set_error_handler_off();
    /* The shared config and pipeline code logs through daemon/log: name
     * this program in those lines. */
    ts_log_init(TS_TOOL_NAME, TS_LOG_INFO, 0);
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *command = argv[1];
    if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 ||
        strcmp(command, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(command, "-V") == 0 || strcmp(command, "--version") == 0) {
        printf(TS_TOOL_NAME " " PACKAGE_VERSION "\n");
        return 0;
    }
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } commands[] = {
        { "sanitize", cmd_sanitize },
        { "replay", cmd_replay },
        { "tail", cmd_tail },
        { "keygen", cmd_keygen },
        { "state", cmd_state },
        { "eval", cmd_eval },
        { "sample", cmd_sample },
        { "learn", cmd_learn },
    };
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(command, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, TS_TOOL_NAME ": unknown command '%s'\n", command);
    usage(stderr);
    return 1;
}

/* ------------------------------------------------------ shared helpers */

int ts_tool_add_override(const char **overrides, size_t *n_overrides,
                         const char *override)
{
    if (*n_overrides == TS_TOOL_MAX_OVERRIDES) {
        fprintf(stderr, TS_TOOL_NAME ": too many -o overrides\n");
        return -1;
    }
    overrides[(*n_overrides)++] = override;
    return 0;
}

int ts_tool_check_curve_options(const char *server_key_path,
                                const char *key_prefix)
{
    if ((server_key_path == NULL) != (key_prefix == NULL)) {
        fprintf(stderr, TS_TOOL_NAME ": --curve-server-key and --curve-key "
                "go together\n");
        return -1;
    }
    return 0;
}

int ts_tool_parse_u64(const char *text, uint64_t *out)
{
    if (text == NULL || *text == '\0' || *text == '-' || *text == '+')
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = value;
    return 0;
}

int ts_tool_parse_double(const char *text, double *out)
{
    if (text == NULL || *text == '\0')
        return -1;
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(value))
        return -1;
    *out = value;
    return 0;
}

int ts_tool_default_endpoint(const char *config_path,
                             const char *const *overrides, size_t n_overrides,
                             int want_input, char *out, size_t outlen,
                             char *err, size_t errlen)
{
    if (config_path == NULL && n_overrides == 0) {
        snprintf(out, outlen, "%s",
                 want_input ? TS_TOOL_DEFAULT_INPUT : TS_TOOL_DEFAULT_OUTPUT);
        return 0;
    }
    ts_config *config =
        ts_config_load(config_path, overrides, n_overrides, err, errlen);
    if (config == NULL)
        return -1;
    const ts_settings *settings = ts_config_settings(config);
    const char *endpoint =
        want_input ? settings->input_endpoint : settings->output_endpoint;
    int rc = 0;
    /* A daemon bound to every interface is reached on loopback. */
    static const char *const wildcards[] = { "tcp://*:", "tcp://0.0.0.0:" };
    int rewritten = 0;
    for (size_t i = 0; i < 2 && !rewritten; i++) {
        size_t n = strlen(wildcards[i]);
        if (strncmp(endpoint, wildcards[i], n) == 0) {
            snprintf(out, outlen, "tcp://127.0.0.1:%s", endpoint + n);
            rewritten = 1;
        }
    }
    if (!rewritten)
        snprintf(out, outlen, "%s", endpoint);
    size_t len = strlen(out);
    if (len >= 2 && strcmp(out + len - 2, ":*") == 0) {
        snprintf(err, errlen,
                 "%s endpoint %s has an ephemeral port: pass --connect with "
                 "the port from the daemon's ready line",
                 want_input ? "input" : "output", endpoint);
        rc = -1;
    }
    ts_config_free(config);
    return rc;
}

void *ts_tool_monitor_open(void *context, void *socket, const char *name)
{
    char address[128];
    snprintf(address, sizeof address, "inproc://tracesan-monitor-%s-%p", name,
             socket);
    if (zmq_socket_monitor(socket, address,
                           ZMQ_EVENT_CONNECTED |
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0)
        return NULL;
    void *monitor = zmq_socket(context, ZMQ_PAIR);
    if (monitor == NULL)
        return NULL;
    int linger = 0;
    zmq_setsockopt(monitor, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(monitor, address) != 0) {
        zmq_close(monitor);
        return NULL;
    }
    return monitor;
}

int ts_tool_monitor_read(void *monitor)
{
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&frame);
        return zmq_errno() == EAGAIN || zmq_errno() == EINTR ? 0 : -1;
    }
    /* First frame: 16-bit event id, 32-bit value; second: the endpoint. */
    uint16_t event = 0;
    if (zmq_msg_size(&frame) >= sizeof event)
        memcpy(&event, zmq_msg_data(&frame), sizeof event);
    while (zmq_msg_more(&frame)) {
        if (zmq_msg_recv(&frame, monitor, 0) < 0 && zmq_errno() != EINTR)
            break;
    }
    zmq_msg_close(&frame);
    return (event & (ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED))
               ? 1
               : 0;
}

double ts_tool_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

void ts_tool_sleep_until(double deadline)
{
    struct timespec due = {
        .tv_sec = (time_t)deadline,
        .tv_nsec = (long)((deadline - (double)(time_t)deadline) * 1e9),
    };
    if (due.tv_nsec >= 1000000000L)
        due.tv_nsec = 999999999L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) ==
           EINTR) {
    }
}

void ts_tool_sleep(double seconds)
{
    if (!(seconds > 0.0))
        return;
    struct timespec delay = {
        .tv_sec = (time_t)seconds,
        .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9),
    };
    while (nanosleep(&delay, &delay) != 0 && errno == EINTR) {
    }
}
