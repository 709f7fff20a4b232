/* tracesan sanitize: the daemon's per-user pipeline over a CSV file.
 *
 * Rows go through ts_pipeline_process in file order, with the same
 * validation, ledger and mechanism as tracesand, so a file and the same
 * stream through the daemon produce the same kind of output (the noise
 * differs unless --seed is given, which only the CLI allows). It sets no
 * processing clock, so its budget windows run on event time alone: the
 * daemon's also wait for its wall clock (engine/pipeline.h). With
 * --format jsonl it reads LocationUpdate JSON lines and writes sanitized
 * points as tail --format jsonl does.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/codec.h"
#include "engine/pipeline.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/jsonl.h"

#define ERR_MAX 512
#define STDOUT_BUFFER_BYTES (256 * 1024)

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " sanitize [--config FILE] [--profile NAME] "
        "[--seed N]\n"
        "                         [-o PATH=VALUE]... IN.csv > OUT.csv\n"
        "\n"
        "Runs the tracesand pipeline (validation, per-user state and budget,\n"
        "mechanism) over a CSV trace. IN.csv has a header naming the columns\n"
        "user,ts,lat,lon (any order, extra columns ignored) and optionally\n"
        "accuracy (metres) and profile; ts is Unix seconds, fractional allowed.\n"
        "gzip-compressed input is read transparently; '-' reads stdin.\n"
        "Budget windows follow the rows' timestamps alone: a file is read\n"
        "faster than real time, so there is no clock to hold a window by\n"
        "(tracesand also holds each window budget_window_s of its clock).\n"
        "\n"
        "options:\n"
        "  -c, --config FILE       tracesand configuration (profiles, limits);\n"
        "                          built-in defaults when absent\n"
        "  -o, --override PATH=VALUE\n"
        "                          override a configuration setting; repeatable\n"
        "  -p, --profile NAME      profile for rows without a profile column or\n"
        "                          with an empty one (must exist); default: the\n"
        "                          configuration's default_profile\n"
        "  -s, --seed N            deterministic noise from seed N (testing\n"
        "                          only: seeded noise is not secret); default:\n"
        "                          OS entropy\n"
        "  -f, --format csv|jsonl  jsonl: IN holds one LocationUpdate JSON\n"
        "                          object per line, and stdout gets one\n"
        "                          {\"sanitized\":{...}} line per point, as\n"
        "                          'tracesan replay/tail --format jsonl'\n"
        "                          (docs/wire-format.md, JSON lines); bad\n"
        "                          lines are rejected as malformed\n"
        "  -h, --help              show this help\n"
        "\n"
        "stdout: CSV with header\n",
        out);
    fprintf(out, "  %s\n", ts_csv_sanitized_header());
    fputs(
        "stderr: one line per rejected row,\n"
        "  " TS_TOOL_NAME ": line N: rejected user=U reason=REASON: detail\n"
        "then the summary\n"
        "  sanitize: rows=N sanitized=N rejected=N [REASON=N]...\n"
        "Exit status: 0 when the file was processed (even with rejections),\n"
        "1 on a usage, configuration or I/O error.\n",
        out);
}

/* Row user ids are echoed to a terminal: keep them on one line. */
static void print_user(FILE *out, const char *user)
{
    if (user == NULL || user[0] == '\0') {
        fputc('-', out);
        return;
    }
    for (const unsigned char *p = (const unsigned char *)user; *p != '\0'; p++)
        fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, out);
}

static void report_rejection(size_t line, const char *user, ts_reason reason,
                             const char *detail)
{
    fprintf(stderr, TS_TOOL_NAME ": line %zu: rejected user=", line);
    print_user(stderr, user);
    fprintf(stderr, " reason=%s: %s\n", ts_reason_name(reason),
            detail != NULL && detail[0] != '\0' ? detail : "-");
}

static int write_outcome(const ts_outcome *outcome)
{
    const ts_profile *profile = outcome->profile;
    ts_csv_sanitized row = {
        .user = outcome->user_id,
        .ts_ms = outcome->ts_ms,
        .lat = outcome->report.lat,
        .lon = outcome->report.lon,
        .mechanism = profile->ops->name,
        .eps_point = outcome->report.eps_point,
        .eps_spent = outcome->eps_spent_window,
        .eps_remaining = outcome->eps_remaining,
        .profile = profile->name,
        .extras = &outcome->report,
    };
    return ts_csv_write_sanitized(stdout, &row);
}

/* The point as the daemon would publish it, as one JSON line. */
static int write_outcome_json(const ts_outcome *outcome, ts_buf *topic,
                              ts_buf *payload, ts_buf *line)
{
    ts_buf_reset(topic);
    ts_buf_reset(payload);
    if (ts_codec_encode_outcome(outcome, topic, payload) != 0)
        return -1;
    Tracesan__V1__SanitizedLocation *location =
        tracesan__v1__sanitized_location__unpack(NULL, payload->len,
                                                 payload->data);
    if (location == NULL)
        return -1;
    int rc = ts_jsonl_write(stdout, "sanitized", &location->base, line);
    tracesan__v1__sanitized_location__free_unpacked(location, NULL);
    return rc == 0 ? 0 : -1;
}

/* The next update of a JSON lines input as pipeline input: TS_CSV_ROW,
 * TS_CSV_EOF, TS_CSV_BAD_ROW (err says why) or TS_CSV_IO_ERROR, *line
 * set. The input borrows from the reader until the next call. */
static int read_json_input(ts_jsonl_reader *reader, const char *profile,
                           ts_input *input, size_t *line, char *err,
                           size_t errlen)
{
    ProtobufCMessage *message;
    int rc = ts_jsonl_read(reader, -1, &message, line, err, errlen);
    if (rc == TS_JSONL_EOF)
        return TS_CSV_EOF;
    if (rc == TS_JSONL_BAD_LINE)
        return TS_CSV_BAD_ROW;
    if (rc != TS_JSONL_MESSAGE)
        return TS_CSV_IO_ERROR;
    ts_codec_input_from_update((Tracesan__V1__LocationUpdate *)message,
                               input);
    if (input->profile == NULL)
        input->profile = profile;
    return TS_CSV_ROW;
}

static void print_summary(const ts_pipeline *pipeline, uint64_t rows)
{
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(pipeline);
    uint64_t rejected = 0;
    for (int r = 0; r < TS_REASON_COUNT; r++)
        rejected += stats->rejected[r];
    fprintf(stderr,
            "sanitize: rows=%" PRIu64 " sanitized=%" PRIu64
            " rejected=%" PRIu64,
            rows, stats->sanitized, rejected);
    for (int r = 0; r < TS_REASON_COUNT; r++)
        if (stats->rejected[r] != 0)
            fprintf(stderr, " %s=%" PRIu64, ts_reason_name((ts_reason)r),
                    stats->rejected[r]);
    fputc('\n', stderr);
}

int cmd_sanitize(int argc, char **argv)
{
    int jsonl = 0;
    static const char *const formats[] = { "csv", "jsonl", NULL };
    const ts_tool_option options[] = {
        { "format", 'f', TS_ARG_CHOICE, .dest = &jsonl, .choices = formats },
        { 0 },
    };
    const ts_tool_command command = {
        "sanitize", TS_OPT_CONFIG | TS_OPT_OVERRIDE | TS_OPT_PROFILE |
                        TS_OPT_SEED,
        options, 1, "one input file ('-' for stdin)", usage,
    };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    const char *input_path = argv[first];

    ts_tool_pipeline tool;
    if (ts_tool_pipeline_open(&common, &tool) != 0)
        return 1;
    ts_pipeline *pipeline = tool.pipeline;
    int status = 1;
    char err[ERR_MAX];
    ts_buf topic = { 0 }, payload = { 0 }, json_line = { 0 };
    ts_csv_reader *reader;
    ts_jsonl_reader *json_reader;
    if (ts_jsonl_open_updates(input_path, jsonl, &reader, &json_reader, err,
                              sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        goto out;
    }

    static char stdout_buffer[STDOUT_BUFFER_BYTES];
    setvbuf(stdout, stdout_buffer, _IOFBF, sizeof stdout_buffer);
    if (!jsonl && ts_csv_write_sanitized_header(stdout) != 0)
        goto write_error;

    uint64_t rows = 0;
    ts_csv_row row;
    ts_outcome outcome;
    for (;;) {
        ts_input input;
        int rc;
        if (jsonl) {
            memset(&row, 0, sizeof row);
            rc = read_json_input(json_reader, common.profile, &input,
                                 &row.line, err, sizeof err);
        } else {
            rc = ts_csv_read(reader, &row, err, sizeof err);
            if (rc == TS_CSV_ROW)
                input = ts_csv_input(&row, common.profile);
        }
        if (rc == TS_CSV_EOF)
            break;
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", input_path, err);
            goto out;
        }
        rows++;
        if (rc == TS_CSV_BAD_ROW) {
            /* Counted with the pipeline's reasons, so the summary has one
             * source of truth. */
            ts_pipeline_count_rejection(pipeline, TS_REASON_MALFORMED);
            report_rejection(row.line, row.user, TS_REASON_MALFORMED, err);
            continue;
        }
        ts_pipeline_process(pipeline, &input, &outcome);
        if (outcome.sanitized) {
            if ((jsonl ? write_outcome_json(&outcome, &topic, &payload,
                                            &json_line)
                       : write_outcome(&outcome)) != 0)
                goto write_error;
        } else {
            report_rejection(row.line, input.user_id, outcome.reason,
                             outcome.detail);
        }
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        goto write_error;
    print_summary(pipeline, rows);
    status = 0;
    goto out;

write_error:
    fprintf(stderr, TS_TOOL_NAME ": cannot write the output\n");
out:
    ts_csv_close(reader);
    ts_jsonl_close(json_reader);
    ts_buf_free(&topic);
    ts_buf_free(&payload);
    ts_buf_free(&json_line);
    ts_tool_pipeline_close(&tool);
    return status;
}
