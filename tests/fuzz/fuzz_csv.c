/* libFuzzer target: the CSV trace reader of `tracesan sanitize`/`replay`.
 *
 * The bytes are the file (plain or gzip: zlib decides) behind a memfd,
 * opened by path through /proc/self/fd because that is the reader's only
 * entry point. Every row is read to the end. Besides ASan/UBSan errors it
 * checks the reader's promises: return codes in range, line numbers never
 * decrease, bad rows and I/O errors come with a message. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/csv.h"

#define TS_FUZZ_TARGET "fuzz_csv"
#include "tests/fuzz/fuzz_support.h"

/* Bounds the work per input: an input of size n has at most n rows anyway,
 * but gzip can expand a few kilobytes into millions of rows. */
#define MAX_ROWS 100000

static ts_fuzz_file csv_file;

/* The fast formatters must print exactly what printf prints: sanitize and
 * tail outputs are compared byte for byte. */
static void check_fixed7(double value)
{
    char fast[64];
    char slow[512];
    ts_csv_format_fixed7(value, fast, sizeof fast);
    snprintf(slow, sizeof slow, "%.7f", value);
    if (strlen(slow) < sizeof fast && strcmp(fast, slow) != 0) {
        fprintf(stderr, "fuzz_csv: fixed7(%a) = '%s', printf gives '%s'\n",
                value, fast, slow);
        abort();
    }
}

static void check_ts(int64_t ts_ms)
{
    char fast[32];
    char slow[64];
    ts_csv_format_ts(ts_ms, fast, sizeof fast);
    uint64_t magnitude = ts_ms < 0 ? (uint64_t)0 - (uint64_t)ts_ms
                                   : (uint64_t)ts_ms;
    if (magnitude % 1000 == 0)
        snprintf(slow, sizeof slow, "%s%" PRIu64, ts_ms < 0 ? "-" : "",
                 magnitude / 1000);
    else
        snprintf(slow, sizeof slow, "%s%" PRIu64 ".%03u", ts_ms < 0 ? "-" : "",
                 magnitude / 1000, (unsigned)(magnitude % 1000));
    if (strcmp(fast, slow) != 0) {
        fprintf(stderr, "fuzz_csv: format_ts(%" PRId64 ") = '%s', want '%s'\n",
                ts_ms, fast, slow);
        abort();
    }
}

/* Writes the row back out the way sanitize would, into memory. */
static void write_row(const ts_csv_row *row)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL)
        ts_fuzz_die("open_memstream failed");
    ts_report extras = { .has_predicted = row->has_accuracy, .predicted = 1 };
    ts_csv_sanitized sanitized = {
        .user = row->user, .ts_ms = row->ts_ms, .lat = row->lat,
        .lon = row->lon, .mechanism = "geoind", .eps_point = row->accuracy_m,
        .eps_spent = row->ts_s, .eps_remaining = row->lat,
        .profile = row->profile != NULL ? row->profile : "",
        .extras = &extras,
    };
    ts_csv_rejected rejected = {
        .user = row->user, .has_ts = 1, .ts_ms = row->ts_ms,
        .reason = "malformed", .profile = row->profile,
        .detail = row->user,
    };
    if (ts_csv_write_sanitized(out, &sanitized) != 0 ||
        ts_csv_write_rejected(out, &rejected) != 0)
        ts_fuzz_die("writing a row to memory failed");
    fclose(out);
    free(text);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ts_fuzz_file_open(&csv_file, "fuzz_csv.csv");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ts_fuzz_file_write(&csv_file, data, size);

    char err[512];
    ts_csv_reader *reader = ts_csv_open(csv_file.path, err, sizeof err);
    if (reader == NULL) {
        if (memchr(err, '\0', sizeof err) == NULL || err[0] == '\0')
            ts_fuzz_die("open failed without an error message");
        return 0;
    }
    int has_profile = ts_csv_has_profile_column(reader);
    size_t last_line = 1;
    for (size_t rows = 0; rows < MAX_ROWS; rows++) {
        ts_csv_row row;
        memset(&row, 0, sizeof row);
        err[0] = '\0';
        int status = ts_csv_read(reader, &row, err, sizeof err);
        if (status == TS_CSV_EOF)
            break;
        if (status == TS_CSV_IO_ERROR) {
            if (err[0] == '\0')
                ts_fuzz_die("I/O error without a message");
            break;
        }
        if (status != TS_CSV_ROW && status != TS_CSV_BAD_ROW)
            ts_fuzz_die("ts_csv_read returned an unknown status");
        if (row.line <= last_line)
            ts_fuzz_die("row line numbers do not increase");
        last_line = row.line;
        if (status == TS_CSV_BAD_ROW) {
            if (err[0] == '\0')
                ts_fuzz_die("bad row without a message");
            continue;
        }
        if (row.user == NULL)
            ts_fuzz_die("row without a user string");
        /* Touch every string so ASan sees a dangling pointer. */
        volatile size_t sink = strlen(row.user);
        if (row.profile != NULL) {
            if (!has_profile)
                ts_fuzz_die("profile field without a profile column");
            sink += strlen(row.profile);
        }
        (void)sink;
        check_fixed7(row.lat);
        check_fixed7(row.lon);
        if (row.has_accuracy)
            check_fixed7(row.accuracy_m);
        check_ts(row.ts_ms);
        write_row(&row);
    }
    ts_csv_close(reader);
    return 0;
}
