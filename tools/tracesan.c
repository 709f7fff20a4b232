/* tracesan: offline and client tools around tracesand; usage() lists the
 * commands. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include <gsl/gsl_errno.h>

#include "drivers/zmq/zmq_settings.h"
#include "engine/config.h"
#include "engine/log.h"
#include "ops/catalog.h"
#include "tools/commands.h"

#define ERR_MAX 512

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
        "            (" TS_TOOL_NAME " sanitize [--config FILE] [--profile NAME] "
        "[--seed N]\n"
        "             [-o PATH=VALUE]... IN.csv > OUT.csv)\n"
        "  replay    send a CSV trace to a running tracesand\n"
        "            (" TS_TOOL_NAME " replay [--connect ENDPOINT] [--rate N] "
        "[--batch N]\n"
        "             [--socket push|pub] IN.csv)\n"
        "            (" TS_TOOL_NAME " replay --jetstream URLS [--partitions P] "
        "[--replicas R]\n"
        "             IN.csv: JetStream; 'replay --help' for both modes)\n"
        "  tail      print tracesand's sanitized feed as CSV\n"
        "            (" TS_TOOL_NAME " tail [--connect ENDPOINT] [--topic T]... "
        "[--count N]\n"
        "             [--timeout S])\n"
        "  jetstream read the JetStream mode's streams back as CSV\n"
        "            (" TS_TOOL_NAME " jetstream [--server URLS] "
        "status|outputs|ledger|changelog;\n"
        "             both JetStream commands take --creds, --nkey-seed/"
        "--nkey-public,\n"
        "             --tls-ca, --tls-cert/--tls-key)\n"
        "  keygen    write a CURVE key pair for tracesand or a client\n"
        "            (" TS_TOOL_NAME " keygen --out PREFIX)\n"
        "  state     inspect, export or import a tracesand state store\n"
        "            (" TS_TOOL_NAME " state --dir DIR "
        "[list|stats|export|import FILE])\n"
        "  eval      compare a true trace with its sanitized output\n"
        "            (" TS_TOOL_NAME " eval [--config FILE] [--profile NAME] "
        "[-o PATH=VALUE]...\n"
        "             TRUE.csv SANITIZED.csv)\n"
        "  sample    the predictive paper's query sampling of a trace\n"
        "            (" TS_TOOL_NAME " sample --seed N --p P IN.csv > OUT.csv)\n"
        "  learn     learn a Markov mobility model from traces\n"
        "            (" TS_TOOL_NAME " learn --region "
        "LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "             --cell-m METRES --tick-s SECONDS [--per-user]\n"
        "             [--output FILE] IN.csv)\n"
        "  privic    run the PRIVIC loop of a privic profile over a trace\n"
        "            (" TS_TOOL_NAME " privic --config FILE --profile NAME "
        "[--compare-laplace]\n"
        "             TRUE.csv)\n"
        "  optimize  the identity-protecting channel of a training trace\n"
        "            (" TS_TOOL_NAME " optimize --region "
        "LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "             --cell-m M --distortion-m L [--geoind-epsilon E]\n"
        "             -o CHANNEL.bin TRAIN.csv)\n"
        "  cip-loss  worst-case CIP loss of Gaussian noise under GP priors\n"
        "            (" TS_TOOL_NAME " cip-loss --points D --interval-s T "
        "--length-scale-s L...\n"
        "             --sigma-z-m S... | --epsilon E)\n"
        "  eval --identity\n"
        "            the Bayes error of guessing the user from reports\n"
        "            (" TS_TOOL_NAME " eval --identity [--cell-m M]... "
        "TRUE.csv SANITIZED.csv)\n"
        "\n"
        "options:\n"
        "  -h, --help     show this help\n"
        "  -V, --version  show the version\n"
        "\n"
        "Options spelled and meant the same in every command that takes them:\n"
        "  -c, --config FILE          tracesand configuration\n"
        "  -o, --override PATH=VALUE  override one of its settings; "
        "repeatable\n"
        "  -p, --profile NAME         one of its profiles\n"
        "  -s, --seed N               seed of the randomness (reproducible "
        "runs)\n"
        "  -C, --connect ENDPOINT     the daemon's endpoint\n"
        "      --curve-server-key FILE --curve-key PREFIX\n"
        "                             connect with CURVE (the daemon's public "
        "key,\n"
        "                             this client's key pair)\n"
        "Run '" TS_TOOL_NAME " COMMAND --help' for a command's options.\n",
        out);
}

int main(int argc, char **argv)
{
    /* GSL's default handler aborts the process; with it off, a special
     * function's domain error comes back as a status the mechanism turns
     * into a dropped point (fail closed) instead of a crash. */
    gsl_set_error_handler_off();
    /* The shared config and pipeline code logs through engine/log: name
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
        { "privic", cmd_privic },
        { "optimize", cmd_optimize },
        { "cip-loss", cmd_cip_loss },
        { "jetstream", cmd_jetstream },
    };
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(command, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, TS_TOOL_NAME ": unknown command '%s'\n", command);
    usage(stderr);
    return 1;
}

/* ------------------------------------------------------ shared helpers */

const char *ts_tool_reason_name(int reason)
{
    if (reason <= TS_REASON_NONE || reason >= TS_REASON_COUNT)
        return "unknown";
    return ts_reason_name((ts_reason)reason);
}

static void input_limits_of(const ts_settings *settings,
                            ts_tool_input_limits *limits)
{
    if (limits == NULL)
        return;
    limits->max_message_bytes = settings->max_message_bytes;
    limits->max_batch_updates = settings->max_batch_updates;
}

int ts_tool_endpoint(const ts_tool_common *common, int want_input, char *out,
                     size_t outlen, ts_tool_input_limits *limits)
{
    if (common->config_path == NULL && common->n_overrides == 0) {
        ts_settings defaults;
        ts_settings_defaults(&defaults);
        input_limits_of(&defaults, limits);
        snprintf(out, outlen, "%s",
                 common->endpoint != NULL ? common->endpoint
                 : want_input ? TS_TOOL_DEFAULT_INPUT
                              : TS_TOOL_DEFAULT_OUTPUT);
        return 0;
    }
    if (common->endpoint != NULL && limits == NULL) {
        snprintf(out, outlen, "%s", common->endpoint);
        return 0;
    }
    char err[ERR_MAX];
    ts_config *config = ts_config_load(common->config_path, common->overrides,
                                       common->n_overrides, err, sizeof err);
    if (config == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return -1;
    }
    input_limits_of(ts_config_settings(config), limits);
    if (common->endpoint != NULL) {
        snprintf(out, outlen, "%s", common->endpoint);
        ts_config_free(config);
        return 0;
    }
    const ts_zmq_settings *settings = ts_zmq_settings_of(config);
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
        fprintf(stderr, TS_TOOL_NAME ": %s endpoint %s has an ephemeral "
                "port: pass --connect with the port from the daemon's ready "
                "line\n", want_input ? "input" : "output", endpoint);
        rc = -1;
    }
    ts_config_free(config);
    return rc;
}

int ts_tool_pipeline_open(const ts_tool_common *common, ts_tool_pipeline *out)
{
    char err[ERR_MAX];
    memset(out, 0, sizeof *out);
    out->config = ts_config_load(common->config_path, common->overrides,
                                 common->n_overrides, err, sizeof err);
    if (out->config == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return -1;
    }
    out->rng = common->seed_given ? ts_rng_new_seeded(common->seed)
                                  : ts_rng_new_secure();
    if (out->rng == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n",
                common->seed_given ? "out of memory"
                                   : "secure random generator unavailable");
        goto fail;
    }
    out->pipeline = ts_config_make_shared_pipeline(out->config, out->rng,
                                                   err, sizeof err);
    if (out->pipeline == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        goto fail;
    }
    const char *name = common->profile;
    out->profile = name != NULL ? ts_pipeline_find_profile(out->pipeline, name)
                                : ts_pipeline_default_profile(out->pipeline);
    if (out->profile == NULL) {
        if (ts_pipeline_profile_disabled(out->pipeline, name))
            fprintf(stderr, TS_TOOL_NAME ": profile '%s' is disabled: it "
                    "has no model configured (set -o profiles.%s.model=PATH, "
                    "see `tracesan learn`)\n", name, name);
        else
            fprintf(stderr, TS_TOOL_NAME ": unknown profile '%s'\n", name);
        goto fail;
    }
    return 0;
fail:
    ts_tool_pipeline_close(out);
    return -1;
}

void ts_tool_pipeline_close(ts_tool_pipeline *tool)
{
    if (tool->pipeline != NULL)
        ts_pipeline_free(tool->pipeline);
    if (tool->rng != NULL)
        ts_rng_free(tool->rng);
    if (tool->config != NULL)
        ts_config_free(tool->config);
    memset(tool, 0, sizeof *tool);
}

void *ts_tool_monitor_open(void *context, void *socket, int events)
{
    char address[128];
    snprintf(address, sizeof address, "inproc://tracesan-monitor-%p", socket);
    if (zmq_socket_monitor(socket, address, events) != 0)
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

ts_csv_reader *ts_tool_open_table(const char *path)
{
    char err[ERR_MAX];
    ts_csv_reader *reader = ts_csv_open_table(path, err, sizeof err);
    if (reader == NULL)
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
    return reader;
}

int ts_tool_next_row(ts_csv_reader *reader, const char *path, size_t *line)
{
    char err[ERR_MAX];
    int rc = ts_csv_next(reader, line, err, sizeof err);
    if (rc == TS_CSV_IO_ERROR)
        fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
    return rc;
}

void *ts_tool_reserve(void *items, size_t n, size_t *cap, size_t size,
                      size_t first)
{
    if (n < *cap)
        return items;
    size_t grown_cap = *cap != 0 ? *cap * 2 : first;
    if (grown_cap < *cap || grown_cap > SIZE_MAX / size)
        return NULL;
    void *grown = realloc(items, grown_cap * size);
    if (grown != NULL)
        *cap = grown_cap;
    return grown;
}
