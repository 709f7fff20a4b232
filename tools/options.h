/* The command-line layer of the `tracesan` commands.
 *
 * Options that mean the same in every command (config, overrides, profile,
 * seed, endpoint, CURVE keys, help) are spelled and checked in one place: a
 * command names the ones it accepts and lists its own in a small table, and
 * ts_tool_parse does the rest. Every error it reports reads
 * "tracesan COMMAND: ...".
 */
#ifndef TRACESAN_TOOLS_OPTIONS_H
#define TRACESAN_TOOLS_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TS_TOOL_MAX_OVERRIDES 256

/* The shared options a command accepts; -h/--help always is. */
enum {
    TS_OPT_CONFIG = 1 << 0,   /* -c, --config FILE */
    TS_OPT_OVERRIDE = 1 << 1, /* -o, --override PATH=VALUE, repeatable */
    TS_OPT_PROFILE = 1 << 2,  /* -p, --profile NAME */
    TS_OPT_SEED = 1 << 3,     /* -s, --seed N */
    TS_OPT_CONNECT = 1 << 4,  /* -C, --connect ENDPOINT */
    TS_OPT_CURVE = 1 << 5,    /* --curve-server-key FILE with --curve-key PREFIX */
};

typedef struct ts_tool_common {
    const char *config_path;
    const char *overrides[TS_TOOL_MAX_OVERRIDES];
    size_t n_overrides;
    const char *profile;
    uint64_t seed;
    int seed_given;
    const char *endpoint;
    const char *curve_server_key; /* the daemon's public key file */
    const char *curve_key;        /* this client's key pair prefix */
} ts_tool_common;

typedef enum ts_tool_arg {
    TS_ARG_FLAG,          /* no value; int dest set to 1 */
    TS_ARG_STRING,        /* const char * dest */
    TS_ARG_U64,           /* uint64_t dest, within [min, max] (max 0: none) */
    TS_ARG_NUMBER,        /* double dest, finite */
    TS_ARG_POSITIVE,      /* double dest, > 0 */
    TS_ARG_NON_NEGATIVE,  /* double dest, >= 0 */
    TS_ARG_CHOICE,        /* int dest: the index of the value in choices */
    TS_ARG_POSITIVE_EACH, /* ts_tool_numbers dest: each value > 0 appended */
    TS_ARG_HANDLER,       /* handle(dest, value) */
} ts_tool_arg;

/* The values of a repeatable TS_ARG_POSITIVE_EACH option, in order. */
#define TS_TOOL_MAX_NUMBERS 64
typedef struct ts_tool_numbers {
    double v[TS_TOOL_MAX_NUMBERS];
    size_t n;
} ts_tool_numbers;

/* One option of a command's own. Tables end with an all-zero entry. */
typedef struct ts_tool_option {
    const char *name;     /* long name; NULL for a short-only option */
    int short_name;       /* 0 for a long-only option */
    ts_tool_arg arg;
    void *dest;
    int *given;           /* when not NULL, set to 1 once the option is seen */
    uint64_t min, max;
    const char *const *choices; /* NULL-terminated */
    /* NULL when the value was taken, else what the option needs, worded to
     * follow its name: "needs LAT_MIN,LON_MIN,LAT_MAX,LON_MAX". */
    const char *(*handle)(void *dest, const char *value);
} ts_tool_option;

typedef struct ts_tool_command {
    const char *name;
    unsigned shared;              /* TS_OPT_* */
    const ts_tool_option *options; /* NULL when none */
    int operands;                 /* how many; -1 when the command checks */
    const char *operands_text;    /* "one input file ('-' for stdin)" */
    void (*usage)(FILE *out);
} ts_tool_command;

/* Parses argv (argv[0] is the command's name) into common and the
 * command's own destinations. Returns the index of the first operand; 0
 * when --help was printed (exit 0); -1 when an error was reported
 * (exit 1). */
int ts_tool_parse(const ts_tool_command *command, int argc, char **argv,
                  ts_tool_common *common);

/* Strict number parsing: the whole text must parse. */
int ts_tool_parse_u64(const char *text, uint64_t *out);
int ts_tool_parse_double(const char *text, double *out);

#endif
