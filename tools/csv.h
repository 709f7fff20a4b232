/* CSV traces in and out of the tracesan tools.
 *
 * Input: a header line naming the columns (user, ts, lat, lon required;
 * accuracy and profile optional; others ignored; any order), then one row
 * per point. ts is Unix seconds, fractional allowed. Read through zlib so a
 * gzip-compressed file is read transparently; "-" is stdin. Quoted fields
 * ("a,b", "say ""hi""", embedded newlines) are understood. Any other CSV
 * with a header (a sanitized trace, points of interest) is read the same
 * way, its columns looked up by name.
 *
 * Output: the sanitized CSV shared by `sanitize` and `tail` (so their files
 * are byte-for-byte comparable) and the rejections CSV of `tail`.
 *
 * Error messages name lines and columns, never field contents: a field that
 * fails to parse may be a coordinate.
 */
#ifndef TRACESAN_TOOLS_CSV_H
#define TRACESAN_TOOLS_CSV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/pipeline.h"

typedef struct ts_csv_reader ts_csv_reader;

/* One parsed row; strings point into the reader and stay valid until the
 * next ts_csv_read. Empty numeric fields are "missing": ts_ms 0, lat/lon
 * NaN, has_accuracy 0, so the pipeline rejects them with their reason. */
typedef struct ts_csv_row {
    size_t line;            /* line number of the row's first line (1-based) */
    const char *user;       /* "" when empty */
    double ts_s;            /* as parsed (NaN when missing) */
    int64_t ts_ms;          /* llround(ts_s * 1000); 0 when missing/unusable */
    double lat;
    double lon;
    int has_accuracy;
    double accuracy_m;
    const char *profile;    /* NULL when no profile column or empty field */
} ts_csv_row;

enum {
    TS_CSV_ROW = 1,         /* a row was read */
    TS_CSV_EOF = 0,
    TS_CSV_BAD_ROW = -1,    /* this row is unusable (err says why); go on */
    TS_CSV_IO_ERROR = -2    /* stop */
};

/* Opens PATH ("-" = stdin) and reads the header. NULL with err filled when
 * the file cannot be read or the header lacks a required column. */
ts_csv_reader *ts_csv_open(const char *path, char *err, size_t errlen);
void ts_csv_close(ts_csv_reader *reader);

/* Reads the next non-empty row; returns one of TS_CSV_*. On TS_CSV_BAD_ROW
 * row->line is set, row->user too when the row had enough fields, and err
 * holds the reason without the line number ("column 'lat' is not a
 * number"). On TS_CSV_IO_ERROR err is a complete message. */
int ts_csv_read(ts_csv_reader *reader, ts_csv_row *row, char *err,
                size_t errlen);

/* 1 when the header has a profile column. */
int ts_csv_has_profile_column(const ts_csv_reader *reader);

/* The pipeline's input for a row: its fields, and default_profile (may be
 * NULL: the configuration's default) when the row names no profile. */
ts_input ts_csv_input(const ts_csv_row *row, const char *default_profile);

/* Any CSV with a header, its columns looked up by name --------------------- */

/* Opens PATH ("-" = stdin, gzip read transparently) and reads the header,
 * requiring no column. NULL with err filled on an error. Close with
 * ts_csv_close. */
ts_csv_reader *ts_csv_open_table(const char *path, char *err, size_t errlen);
/* The index of the first header column named one of the '|'-separated
 * names (case-insensitive, e.g. "lon|lng|longitude"), or -1. */
int ts_csv_column(const ts_csv_reader *reader, const char *names);
/* Reads the next non-empty record: TS_CSV_ROW, TS_CSV_EOF, TS_CSV_BAD_ROW
 * (a quoted field left open at the end of the file) or TS_CSV_IO_ERROR,
 * with err as for ts_csv_read. *line is the record's first line. */
int ts_csv_next(ts_csv_reader *reader, size_t *line, char *err,
                size_t errlen);
/* The record's field in a column; NULL when column is -1 or the record is
 * shorter. Valid until the next read. */
const char *ts_csv_field(const ts_csv_reader *reader, int column);
/* Parses a numeric field: 1 with *out set, 0 when empty, -1 when it is not
 * a number. Spaces around it are allowed. */
int ts_csv_parse_number(const char *text, double *out);
/* Whether a field is present (not NULL), a number and finite; *out set
 * when it is. */
int ts_csv_finite(const char *field, double *out);

/* Output ------------------------------------------------------------------ */

/* The sanitized header: these columns, then one per public report extra
 * (mechanisms/mechanism.h: ts_report_extras), named as the extra. */
#define TS_CSV_SANITIZED_BASE_HEADER \
    "user,ts,lat,lon,mechanism,eps_point,eps_spent,eps_remaining,profile"
#define TS_CSV_REJECTED_HEADER "user,ts,reason,profile,detail"

typedef struct ts_csv_sanitized {
    const char *user;
    int64_t ts_ms;
    double lat;
    double lon;
    const char *mechanism;
    double eps_point;
    double eps_spent;        /* in the user's current window */
    double eps_remaining;
    const char *profile;
    /* The report whose public extras fill the extra columns (the rest of
     * it is not read); NULL: every extra column empty. */
    const ts_report *extras;
} ts_csv_sanitized;

typedef struct ts_csv_rejected {
    const char *user;        /* NULL or "" when unknown */
    int has_ts;
    int64_t ts_ms;
    const char *reason;      /* reason name */
    const char *profile;     /* NULL or "" when unknown */
    const char *detail;
} ts_csv_rejected;

/* The whole sanitized header line, without the newline. */
const char *ts_csv_sanitized_header(void);

/* Each returns -1 on a write error. */
int ts_csv_write_sanitized_header(FILE *out);
int ts_csv_write_sanitized(FILE *out, const ts_csv_sanitized *row);
int ts_csv_write_rejected_header(FILE *out);
int ts_csv_write_rejected(FILE *out, const ts_csv_rejected *row);

/* Writes a field, quoted when it holds a comma, quote, CR or LF. */
int ts_csv_write_field(FILE *out, const char *text);

/* printf("%.7f") of value, faster for coordinates. Returns the length
 * written into buf (size >= 32). */
size_t ts_csv_format_fixed7(double value, char *buf, size_t size);

/* Milliseconds as seconds: "1254682593" when whole, else "1254682593.250".
 * Returns the length written into buf (size >= 32). */
size_t ts_csv_format_ts(int64_t ts_ms, char *buf, size_t size);

#endif
