#include "tools/options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"

/* Shared, own and help options of one command. */
#define MAX_OPTIONS 40
/* getopt_long values of long options: above every short option character. */
#define LONG_OPTION_BASE 256

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

static const char *ts_tool_add_override(void *dest, const char *override)
{
    ts_tool_common *common = dest;
    if (common->n_overrides == TS_TOOL_MAX_OVERRIDES)
        return "is given too many times";
    common->overrides[common->n_overrides++] = override;
    return NULL;
}

/* A client's CURVE options come as a pair. */
static int ts_tool_check_curve_options(const char *command,
                                       const ts_tool_common *common)
{
    if ((common->curve_server_key == NULL) != (common->curve_key == NULL)) {
        fprintf(stderr, TS_TOOL_NAME " %s: --curve-server-key and "
                "--curve-key go together\n", command);
        return -1;
    }
    return 0;
}

static const char *choice_needs(const char *const *choices)
{
    static char needs[256];
    size_t len = (size_t)snprintf(needs, sizeof needs, "needs");
    for (size_t i = 0; choices[i] != NULL && len < sizeof needs; i++)
        len += (size_t)snprintf(needs + len, sizeof needs - len, "%s'%s'",
                                i == 0 ? " " : choices[i + 1] ? ", " : " or ",
                                choices[i]);
    return needs;
}

/* An integer out of the option's range: the range, not "a positive
 * integer" for a positive one. */
static const char *range_needs(uint64_t min, uint64_t max)
{
    static char needs[96];
    if (max != 0)
        snprintf(needs, sizeof needs, "needs an integer from %llu to %llu",
                 (unsigned long long)min, (unsigned long long)max);
    else
        snprintf(needs, sizeof needs, "needs an integer of at least %llu",
                 (unsigned long long)min);
    return needs;
}

/* Stores value; NULL when it fits, else what the option needs. */
static const char *take_value(const ts_tool_option *option, const char *value)
{
    static const char *const number_needs[] = {
        "needs a number", "needs a positive number",
        "needs a non-negative number",
    };
    uint64_t count;
    double number;
    ts_tool_numbers *numbers;
    switch (option->arg) {
    case TS_ARG_FLAG:
        *(int *)option->dest = 1;
        return NULL;
    case TS_ARG_STRING:
        *(const char **)option->dest = value;
        return NULL;
    case TS_ARG_U64:
        if (ts_tool_parse_u64(value, &count) != 0)
            return option->min > 0 ? "needs a positive integer"
                                   : "needs a non-negative integer";
        if (count < option->min || (option->max != 0 && count > option->max))
            return range_needs(option->min, option->max);
        *(uint64_t *)option->dest = count;
        return NULL;
    case TS_ARG_NUMBER:
    case TS_ARG_POSITIVE:
    case TS_ARG_NON_NEGATIVE:
        if (ts_tool_parse_double(value, &number) != 0 ||
            (option->arg == TS_ARG_POSITIVE && !(number > 0.0)) ||
            (option->arg == TS_ARG_NON_NEGATIVE && number < 0.0))
            return number_needs[option->arg - TS_ARG_NUMBER];
        *(double *)option->dest = number;
        return NULL;
    case TS_ARG_POSITIVE_EACH:
        numbers = option->dest;
        if (numbers->n == TS_TOOL_MAX_NUMBERS)
            return "is given too many times";
        if (ts_tool_parse_double(value, &number) != 0 || !(number > 0.0))
            return "needs a positive number";
        numbers->v[numbers->n++] = number;
        return NULL;
    case TS_ARG_CHOICE:
        for (int i = 0; option->choices[i] != NULL; i++)
            if (strcmp(value, option->choices[i]) == 0) {
                *(int *)option->dest = i;
                return NULL;
            }
        return choice_needs(option->choices);
    case TS_ARG_HANDLER:
        return option->handle(option->dest, value);
    }
    return "is not understood";
}

static int is_table_end(const ts_tool_option *option)
{
    return option->name == NULL && option->short_name == 0;
}

int ts_tool_parse(const ts_tool_command *command, int argc, char **argv,
                  ts_tool_common *common)
{
    memset(common, 0, sizeof *common);
    const struct {
        unsigned flag;
        ts_tool_option option;
    } shared[] = {
        { TS_OPT_CONFIG, { "config", 'c', TS_ARG_STRING,
                           .dest = &common->config_path } },
        { TS_OPT_OVERRIDE, { "override", 'o', TS_ARG_HANDLER, .dest = common,
                             .handle = ts_tool_add_override } },
        { TS_OPT_PROFILE, { "profile", 'p', TS_ARG_STRING,
                            .dest = &common->profile } },
        { TS_OPT_SEED, { "seed", 's', TS_ARG_U64, .dest = &common->seed,
                         .given = &common->seed_given } },
        { TS_OPT_CONNECT, { "connect", 'C', TS_ARG_STRING,
                            .dest = &common->endpoint } },
        { TS_OPT_CURVE, { "curve-server-key", 0, TS_ARG_STRING,
                          .dest = &common->curve_server_key } },
        { TS_OPT_CURVE, { "curve-key", 0, TS_ARG_STRING,
                          .dest = &common->curve_key } },
    };
    /* Answered on sight, before any later option is looked at. */
    const ts_tool_option help_option = { "help", 'h', TS_ARG_FLAG,
                                         .dest = NULL };

    const ts_tool_option *accepted[MAX_OPTIONS];
    size_t n_accepted = 0;
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        if (command->shared & shared[i].flag)
            accepted[n_accepted++] = &shared[i].option;
    for (const ts_tool_option *own = command->options;
         own != NULL && !is_table_end(own) && n_accepted < MAX_OPTIONS - 1;
         own++)
        accepted[n_accepted++] = own;
    accepted[n_accepted++] = &help_option;

    struct option long_options[MAX_OPTIONS + 1];
    /* Leading ':' tells a missing value from an unknown option. */
    char short_options[2 * MAX_OPTIONS + 2] = ":";
    size_t n_long = 0, n_short = 1;
    for (size_t i = 0; i < n_accepted; i++) {
        const ts_tool_option *option = accepted[i];
        int has_arg = option->arg != TS_ARG_FLAG;
        if (option->name != NULL)
            long_options[n_long++] = (struct option){
                option->name, has_arg ? required_argument : no_argument, NULL,
                LONG_OPTION_BASE + (int)i };
        if (option->short_name != 0) {
            short_options[n_short++] = (char)option->short_name;
            if (has_arg)
                short_options[n_short++] = ':';
        }
    }
    short_options[n_short] = '\0';
    long_options[n_long] = (struct option){ NULL, 0, NULL, 0 };

    const char *name = command->name;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, short_options, long_options, NULL)) !=
           -1) {
        const ts_tool_option *option = NULL;
        if (c >= LONG_OPTION_BASE)
            option = accepted[c - LONG_OPTION_BASE];
        for (size_t i = 0; option == NULL && c != ':' && c != '?' &&
                           i < n_accepted; i++)
            if (accepted[i]->short_name == c)
                option = accepted[i];
        if (option == NULL) {
            if (c == ':')
                fprintf(stderr, TS_TOOL_NAME " %s: option '%s' needs a "
                        "value\n", name, argv[optind - 1]);
            else if (optopt != 0)
                fprintf(stderr, TS_TOOL_NAME " %s: unknown option '-%c'\n",
                        name, optopt);
            else
                fprintf(stderr, TS_TOOL_NAME " %s: unknown option '%s'\n",
                        name, argv[optind - 1]);
            command->usage(stderr);
            return -1;
        }
        if (option == &help_option) {
            command->usage(stdout);
            return 0;
        }
        const char *needs = take_value(option, optarg);
        if (needs != NULL) {
            char shown[64];
            if (option->name != NULL)
                snprintf(shown, sizeof shown, "--%s", option->name);
            else
                snprintf(shown, sizeof shown, "-%c", option->short_name);
            if (option->arg == TS_ARG_HANDLER)
                fprintf(stderr, TS_TOOL_NAME " %s: %s %s\n", name, shown,
                        needs);
            else
                fprintf(stderr, TS_TOOL_NAME " %s: %s %s, got '%s'\n", name,
                        shown, needs, optarg);
            return -1;
        }
        if (option->given != NULL)
            *option->given = 1;
    }
    if ((command->shared & TS_OPT_CURVE) &&
        ts_tool_check_curve_options(name, common) != 0)
        return -1;
    if (command->operands >= 0 && argc - optind != command->operands) {
        if (command->operands == 0)
            fprintf(stderr, TS_TOOL_NAME " %s: unexpected argument '%s'\n",
                    name, argv[optind]);
        else
            fprintf(stderr, TS_TOOL_NAME " %s: expected %s\n", name,
                    command->operands_text);
        command->usage(stderr);
        return -1;
    }
    return optind;
}
