#include "ops/daemon_cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "mechanisms/mechanism.h"
#include "ops/daemon_state.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

#define PROGRAM_NAME TS_DAEMON_NAME
#define DEFAULT_CONFIG_PATH TS_DAEMON_DEFAULT_CONFIG

static void usage(FILE *out)
{
    fprintf(out,
        "usage: " PROGRAM_NAME " [-c FILE] [-o path=value]...\n"
        "       " PROGRAM_NAME " --check-config FILE [-o path=value]...\n"
        "\n"
        "Streaming location-trace sanitizer. Reads LocationBatch messages\n"
        "(protobuf, tracesan.v1) through the driver input.type names (a\n"
        "ZeroMQ PULL or SUB socket by default, or JetStream partitions),\n"
        "applies the configured privacy mechanism per user and publishes\n"
        "SanitizedLocation or Rejection messages (or OutcomeBatch), topics\n"
        "\"sanitized.<profile>\" and \"rejected\" (a ZeroMQ PUB socket by\n"
        "default). Runs in the foreground.\n"
        "\n"
        "options:\n"
        "  -c, --config FILE     configuration file (libconfig syntax; default\n"
        "                        " DEFAULT_CONFIG_PATH " when it exists,\n"
        "                        built-in defaults otherwise)\n"
        "  -o path=value         override one setting, libconfig path syntax,\n"
        "                        e.g. -o input.endpoint=tcp://127.0.0.1:7001\n"
        "                        or -o profiles.geoind.radius_m=200; repeatable\n"
        "      --check-config    validate the configuration (and overrides),\n"
        "                        print \"FILE: configuration OK\" and exit 0, or\n"
        "                        print \"FILE:LINE: message\" and exit 1\n"
        "  -h, --help            show this help and exit\n"
        "  -V, --version         show the version and exit\n"
        "\n"
        "Once both sockets are up the daemon logs\n"
        "  ready input=<endpoint> output=<endpoint> [http=<host:port>]\n"
        "with the actual endpoints (tcp://host:* ports resolved); http= names\n"
        "the HTTP endpoint (http.listen: /metrics, /healthz, the dashboard at\n"
        "/ and the feed at /feed) when it is on.\n"
        "\n"
        "signals:\n"
        "  SIGINT, SIGTERM  finish and publish the current batch, log a summary\n"
        "                   (summary updates=N sanitized=N repeated=N rejected=N\n"
        "                   users=N rejected.<reason>=N...) and exit 0\n"
        "  SIGHUP           reload the configuration file: log level and\n"
        "                   profile parameters and CURVE client\n"
        "                   allow-lists apply, users keep their spend and\n"
        "                   peers their connections; an invalid file is\n"
        "                   logged and ignored\n"
        "  SIGPIPE          ignored\n"
        "\n"
        "Logs go to stderr as \"" PROGRAM_NAME ": <level>: <message>\" (or to\n"
        "syslog with log.syslog = true). Coordinates are never logged.\n"
        "Exit status: 0 on a clean shutdown, 1 on a usage, configuration or\n"
        "startup error.\n");
    /* From the mechanisms' own parameter rows, so help cannot drift. */
    fprintf(out, "\nMechanisms (profiles.NAME.mechanism) and their "
            "parameters:\n");
    char params[4096];
    for (const ts_mechanism_ops *const *m = ts_mechanism_all(); *m != NULL;
         m++) {
        ts_mechanism_param_help(*m, params, sizeof params);
        fprintf(out, "  %s: %s\n%s", (*m)->name,
                (*m)->summary != NULL ? (*m)->summary : "", params);
    }
}

int ts_daemon_parse_options(int argc, char **argv, ts_daemon_options *opts)
{
    enum { OPT_CHECK_CONFIG = 1000 };
    static const struct option long_options[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    memset(opts, 0, sizeof *opts);
    int c;
    while ((c = getopt_long(argc, argv, "c:o:hV", long_options, NULL)) != -1) {
        switch (c) {
        case 'c':
            opts->config_path = optarg;
            break;
        case 'o':
            if (opts->n_overrides == TS_DAEMON_MAX_OVERRIDES) {
                fprintf(stderr, PROGRAM_NAME ": too many -o overrides (max %d)\n",
                        TS_DAEMON_MAX_OVERRIDES);
                return 1;
            }
            opts->overrides[opts->n_overrides++] = optarg;
            break;
        case OPT_CHECK_CONFIG:
            opts->check_config = 1;
            break;
        case 'h':
            usage(stdout);
            return TS_OPTIONS_DONE;
        case 'V':
            printf(PROGRAM_NAME " " PACKAGE_VERSION "\n");
            return TS_OPTIONS_DONE;
        default:
            usage(stderr);
            return 1;
        }
    }
    /* `--check-config FILE` names the file as an operand. */
    if (opts->check_config && opts->config_path == NULL &&
        optind + 1 == argc) {
        opts->config_path = argv[optind++];
    }
    if (optind != argc) {
        fprintf(stderr, PROGRAM_NAME ": unexpected argument '%s'\n",
                argv[optind]);
        usage(stderr);
        return 1;
    }
    if (opts->check_config && opts->config_path == NULL) {
        fprintf(stderr, PROGRAM_NAME ": --check-config needs a FILE\n");
        return 1;
    }
    return 0;
}
