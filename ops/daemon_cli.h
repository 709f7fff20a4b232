/* tracesand's command line: its options and its help text. */
#ifndef TRACESAN_OPS_DAEMON_CLI_H
#define TRACESAN_OPS_DAEMON_CLI_H

#include <stddef.h>

#ifndef TS_SYSCONFDIR
#define TS_SYSCONFDIR "/etc"
#endif
#define TS_DAEMON_DEFAULT_CONFIG TS_SYSCONFDIR "/tracesand.conf"
#define TS_DAEMON_MAX_OVERRIDES 256

typedef struct ts_daemon_options {
    const char *config_path;
    const char *overrides[TS_DAEMON_MAX_OVERRIDES];
    size_t n_overrides;
    int check_config;
} ts_daemon_options;

/* Returned when --help or --version was answered. */
#define TS_OPTIONS_DONE 2

/* 0 to go on, 1 on a usage error (said on stderr), TS_OPTIONS_DONE when
 * the help or the version was printed. */
int ts_daemon_parse_options(int argc, char **argv, ts_daemon_options *opts);

#endif
