#include "tools/csv.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

/* An unterminated quote would otherwise swallow the rest of the file into
 * one record. */
#define MAX_RECORD_BYTES (1u << 20)
#define GZ_BUFFER_BYTES (256u * 1024)
/* |ts| beyond this many seconds does not fit int64 milliseconds. */
#define MAX_TS_SECONDS 9.0e15

enum column { COL_USER, COL_TS, COL_LAT, COL_LON, COL_ACCURACY, COL_PROFILE,
              N_COLUMNS };

static const char *const column_names[N_COLUMNS] = {
    "user", "ts", "lat", "lon", "accuracy", "profile",
};
static const int column_required[N_COLUMNS] = { 1, 1, 1, 1, 0, 0 };

struct ts_csv_reader {
    gzFile gz;
    char *record;            /* current record, fields split in place */
    size_t record_len;
    size_t record_cap;
    char **fields;
    size_t n_fields;
    size_t fields_cap;
    char **header;           /* the header's column names, trimmed */
    size_t n_header;
    size_t header_line;
    int column_index[N_COLUMNS]; /* -1 when absent */
    size_t min_fields;       /* fields a row needs to reach every column */
    size_t lines_read;
};

static void end_line(ts_csv_reader *reader)
{
    if (reader->record_len > 0 &&
        reader->record[reader->record_len - 1] == '\r')
        reader->record_len--;
    reader->record[reader->record_len] = '\0';
}

/* Appends one physical line (without its line end) to the record. Returns
 * 1, 0 at end of file, -1 on a read error, -2 when the record is too long. */
static int append_physical_line(ts_csv_reader *reader)
{
    int got_any = 0;
    for (;;) {
        if (reader->record_cap - reader->record_len < 4096) {
            if (reader->record_cap >= MAX_RECORD_BYTES * 2)
                return -2;
            size_t cap = reader->record_cap != 0 ? reader->record_cap * 2
                                                 : 8192;
            char *record = realloc(reader->record, cap);
            if (record == NULL)
                return -1;
            reader->record = record;
            reader->record_cap = cap;
        }
        char *start = reader->record + reader->record_len;
        int room = (int)(reader->record_cap - reader->record_len);
        if (gzgets(reader->gz, start, room) == NULL) {
            int errnum = 0;
            gzerror(reader->gz, &errnum);
            if (errnum != Z_OK)
                return -1; /* includes a truncated gzip stream */
            if (!got_any)
                return 0;
            /* The file ended without a final newline. */
            end_line(reader);
            return 1;
        }
        got_any = 1;
        size_t n = strlen(start);
        reader->record_len += n;
        if (n > 0 && start[n - 1] == '\n') {
            reader->record_len--;
            end_line(reader);
            return 1;
        }
        if (reader->record_len > MAX_RECORD_BYTES)
            return -2;
        /* No newline: either the buffer filled up (read on) or the file
         * ended (the next gzgets says so). */
    }
}

/* Odd number of quote characters: the record continues on the next line
 * inside a quoted field (escaped quotes come in pairs). */
static int inside_quotes(const char *text, size_t len)
{
    size_t quotes = 0;
    for (size_t i = 0; i < len; i++)
        quotes += text[i] == '"';
    return quotes % 2 != 0;
}

/* Reads the next record (logical CSV line). Returns like
 * append_physical_line; sets *first_line. */
static int read_record(ts_csv_reader *reader, size_t *first_line)
{
    reader->record_len = 0;
    int rc = append_physical_line(reader);
    if (rc != 1)
        return rc;
    reader->lines_read++;
    *first_line = reader->lines_read;
    while (inside_quotes(reader->record, reader->record_len)) {
        if (reader->record_len + 1 > MAX_RECORD_BYTES)
            return -2;
        reader->record[reader->record_len++] = '\n';
        rc = append_physical_line(reader);
        if (rc == 0)
            return -3; /* end of file inside quotes */
        if (rc != 1)
            return rc;
        reader->lines_read++;
    }
    return 1;
}

static int push_field(ts_csv_reader *reader, char *field)
{
    if (reader->n_fields == reader->fields_cap) {
        size_t cap = reader->fields_cap != 0 ? reader->fields_cap * 2 : 16;
        char **fields = realloc(reader->fields, cap * sizeof *fields);
        if (fields == NULL)
            return -1;
        reader->fields = fields;
        reader->fields_cap = cap;
    }
    reader->fields[reader->n_fields++] = field;
    return 0;
}

/* Splits the record into fields in place, removing quotes. */
static int split_fields(ts_csv_reader *reader)
{
    reader->n_fields = 0;
    char *read = reader->record;
    char *end = reader->record + reader->record_len;
    for (;;) {
        char *field = read;
        char *write = read;
        if (read < end && *read == '"') {
            read++;
            while (read < end) {
                if (*read == '"') {
                    if (read + 1 < end && read[1] == '"') {
                        *write++ = '"';
                        read += 2;
                        continue;
                    }
                    read++;
                    break;
                }
                *write++ = *read++;
            }
            /* Text after the closing quote is kept, as most readers do. */
            while (read < end && *read != ',')
                *write++ = *read++;
        } else {
            while (read < end && *read != ',')
                *write++ = *read++;
        }
        int more = read < end; /* stopped at a comma */
        *write = '\0';
        if (push_field(reader, field) != 0)
            return -1;
        if (!more)
            return 0;
        read++;
    }
}

static char *trim(char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    size_t n = strlen(text);
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        text[--n] = '\0';
    return text;
}

static int read_header(ts_csv_reader *reader, const char *path, char *err,
                       size_t errlen)
{
    int rc;
    do {
        rc = read_record(reader, &reader->header_line);
    } while (rc == 1 && reader->record_len == 0);
    if (rc == 0) {
        snprintf(err, errlen, "%s: empty file (no header line)", path);
        return -1;
    }
    if (rc != 1) {
        snprintf(err, errlen, "%s: cannot read the header line", path);
        return -1;
    }
    /* A UTF-8 byte order mark is not part of the first column's name. */
    if (reader->record_len >= 3 && memcmp(reader->record, "\xEF\xBB\xBF", 3) == 0) {
        memmove(reader->record, reader->record + 3, reader->record_len - 2);
        reader->record_len -= 3;
    }
    if (split_fields(reader) != 0 ||
        (reader->header = calloc(reader->n_fields, sizeof *reader->header)) ==
            NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (; reader->n_header < reader->n_fields; reader->n_header++) {
        char *name = strdup(trim(reader->fields[reader->n_header]));
        if (name == NULL) {
            snprintf(err, errlen, "%s: out of memory", path);
            return -1;
        }
        reader->header[reader->n_header] = name;
    }
    return 0;
}

static int bind_trace_columns(ts_csv_reader *reader, const char *path,
                              char *err, size_t errlen)
{
    size_t line = reader->header_line;
    for (int c = 0; c < N_COLUMNS; c++)
        reader->column_index[c] = -1;
    for (size_t i = 0; i < reader->n_header; i++) {
        for (int c = 0; c < N_COLUMNS; c++) {
            if (strcasecmp(reader->header[i], column_names[c]) != 0)
                continue;
            if (reader->column_index[c] >= 0) {
                snprintf(err, errlen, "%s: line %zu: column '%s' appears twice",
                         path, line, column_names[c]);
                return -1;
            }
            reader->column_index[c] = (int)i;
        }
    }
    reader->min_fields = 0;
    for (int c = 0; c < N_COLUMNS; c++) {
        if (reader->column_index[c] < 0) {
            if (column_required[c]) {
                snprintf(err, errlen,
                         "%s: line %zu: header lacks the '%s' column "
                         "(need user,ts,lat,lon)",
                         path, line, column_names[c]);
                return -1;
            }
            continue;
        }
        if ((size_t)reader->column_index[c] + 1 > reader->min_fields)
            reader->min_fields = (size_t)reader->column_index[c] + 1;
    }
    return 0;
}

ts_csv_reader *ts_csv_open_table(const char *path, char *err, size_t errlen)
{
    ts_csv_reader *reader = calloc(1, sizeof *reader);
    if (reader == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (strcmp(path, "-") == 0) {
        /* A duplicate, so closing the reader leaves fd 0 alone. */
        int fd = dup(STDIN_FILENO);
        reader->gz = fd >= 0 ? gzdopen(fd, "rb") : NULL;
        if (reader->gz == NULL && fd >= 0)
            close(fd);
    } else {
        reader->gz = gzopen(path, "rb");
    }
    if (reader->gz == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", path,
                 errno != 0 ? strerror(errno) : "out of memory");
        free(reader);
        return NULL;
    }
    gzbuffer(reader->gz, GZ_BUFFER_BYTES);
    if (read_header(reader, path, err, errlen) != 0) {
        ts_csv_close(reader);
        return NULL;
    }
    return reader;
}

ts_csv_reader *ts_csv_open(const char *path, char *err, size_t errlen)
{
    ts_csv_reader *reader = ts_csv_open_table(path, err, errlen);
    if (reader != NULL && bind_trace_columns(reader, path, err, errlen) != 0) {
        ts_csv_close(reader);
        return NULL;
    }
    return reader;
}

void ts_csv_close(ts_csv_reader *reader)
{
    if (reader == NULL)
        return;
    if (reader->gz != NULL)
        gzclose(reader->gz);
    for (size_t i = 0; i < reader->n_header; i++)
        free(reader->header[i]);
    free(reader->header);
    free(reader->record);
    free(reader->fields);
    free(reader);
}

int ts_csv_has_profile_column(const ts_csv_reader *reader)
{
    return reader->column_index[COL_PROFILE] >= 0;
}

int ts_csv_column(const ts_csv_reader *reader, const char *names)
{
    for (size_t i = 0; i < reader->n_header; i++) {
        const char *name = names;
        for (;;) {
            size_t len = strcspn(name, "|");
            if (strlen(reader->header[i]) == len &&
                strncasecmp(reader->header[i], name, len) == 0)
                return (int)i;
            if (name[len] == '\0')
                break;
            name += len + 1;
        }
    }
    return -1;
}

const char *ts_csv_field(const ts_csv_reader *reader, int column)
{
    return column >= 0 && (size_t)column < reader->n_fields
               ? reader->fields[column]
               : NULL;
}

int ts_csv_parse_number(const char *text, double *out)
{
    while (isspace((unsigned char)*text))
        text++;
    if (*text == '\0')
        return 0;
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (end == text)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -1;
    /* Overflow gives +-HUGE_VAL, which the pipeline rejects as it should;
     * underflow to a tiny value is harmless. */
    *out = value;
    return 1;
}

int ts_csv_finite(const char *field, double *out)
{
    return field != NULL && ts_csv_parse_number(field, out) == 1 &&
           isfinite(*out);
}

static const char *field_at(const ts_csv_reader *reader, int column)
{
    int index = reader->column_index[column];
    return index >= 0 ? reader->fields[index] : NULL;
}

static int parse_numeric_column(const ts_csv_reader *reader, int column,
                                double *out, char *err, size_t errlen)
{
    int rc = ts_csv_parse_number(field_at(reader, column), out);
    if (rc < 0)
        snprintf(err, errlen, "column '%s' is not a number",
                 column_names[column]);
    return rc;
}

int ts_csv_next(ts_csv_reader *reader, size_t *line, char *err,
                size_t errlen)
{
    int rc;
    *line = 0;
    reader->n_fields = 0;
    do {
        rc = read_record(reader, line);
    } while (rc == 1 && reader->record_len == 0);
    if (rc == 0)
        return TS_CSV_EOF;
    if (rc == -2) {
        snprintf(err, errlen, "line %zu: record longer than %u bytes", *line,
                 MAX_RECORD_BYTES);
        return TS_CSV_IO_ERROR;
    }
    if (rc == -3) {
        snprintf(err, errlen, "quoted field not closed before the end of "
                 "the file");
        return TS_CSV_BAD_ROW;
    }
    if (rc != 1) {
        snprintf(err, errlen, "read error after line %zu", reader->lines_read);
        return TS_CSV_IO_ERROR;
    }
    if (split_fields(reader) != 0) {
        snprintf(err, errlen, "line %zu: out of memory", *line);
        return TS_CSV_IO_ERROR;
    }
    return TS_CSV_ROW;
}

int ts_csv_read(ts_csv_reader *reader, ts_csv_row *row, char *err,
                size_t errlen)
{
    size_t line;
    int rc = ts_csv_next(reader, &line, err, errlen);
    memset(row, 0, sizeof *row);
    row->line = line;
    if (rc != TS_CSV_ROW)
        return rc;
    if (reader->n_fields < reader->min_fields) {
        if ((size_t)reader->column_index[COL_USER] < reader->n_fields)
            row->user = reader->fields[reader->column_index[COL_USER]];
        snprintf(err, errlen, "%zu fields, expected at least %zu",
                 reader->n_fields, reader->min_fields);
        return TS_CSV_BAD_ROW;
    }

    row->user = field_at(reader, COL_USER);
    row->lat = NAN;
    row->lon = NAN;
    row->ts_s = NAN;
    row->accuracy_m = NAN;
    if (parse_numeric_column(reader, COL_TS, &row->ts_s, err, errlen) < 0 ||
        parse_numeric_column(reader, COL_LAT, &row->lat, err, errlen) < 0 ||
        parse_numeric_column(reader, COL_LON, &row->lon, err, errlen) < 0)
        return TS_CSV_BAD_ROW;
    if (reader->column_index[COL_ACCURACY] >= 0) {
        int has = parse_numeric_column(reader, COL_ACCURACY, &row->accuracy_m,
                                       err, errlen);
        if (has < 0)
            return TS_CSV_BAD_ROW;
        row->has_accuracy = has;
    }
    if (reader->column_index[COL_PROFILE] >= 0) {
        const char *profile = field_at(reader, COL_PROFILE);
        row->profile = profile[0] != '\0' ? profile : NULL;
    }
    /* Unusable times become 0, which the pipeline rejects as an invalid
     * timestamp, instead of being rounded into something plausible. */
    if (isfinite(row->ts_s) && fabs(row->ts_s) < MAX_TS_SECONDS)
        row->ts_ms = (int64_t)llround(row->ts_s * 1000.0);
    return TS_CSV_ROW;
}

ts_input ts_csv_input(const ts_csv_row *row, const char *default_profile)
{
    return (ts_input){
        .user_id = row->user,
        .ts_ms = row->ts_ms,
        .lat = row->lat,
        .lon = row->lon,
        .has_accuracy = row->has_accuracy,
        .accuracy_m = row->accuracy_m,
        .profile = row->profile != NULL ? row->profile : default_profile,
    };
}

/* ------------------------------------------------------------- output */

/* Writes the decimal digits of value; returns their count (at most 20). */
static size_t put_decimal(char *out, uint64_t value)
{
    char digits[20];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = digits[n - 1 - i];
    return n;
}

size_t ts_csv_format_ts(int64_t ts_ms, char *buf, size_t size)
{
    if (size < 32) {
        if (size > 0)
            buf[0] = '\0';
        return 0;
    }
    /* Integer arithmetic, so a whole second never prints as x.999. */
    uint64_t magnitude = ts_ms < 0 ? (uint64_t)0 - (uint64_t)ts_ms
                                   : (uint64_t)ts_ms;
    size_t n = 0;
    if (ts_ms < 0)
        buf[n++] = '-';
    n += put_decimal(buf + n, magnitude / 1000);
    unsigned millis = (unsigned)(magnitude % 1000);
    if (millis != 0) {
        buf[n++] = '.';
        buf[n++] = (char)('0' + millis / 100);
        buf[n++] = (char)('0' + millis / 10 % 10);
        buf[n++] = (char)('0' + millis % 10);
    }
    buf[n] = '\0';
    return n;
}

/* Rows are assembled in a small buffer and handed to stdio in one call:
 * tail prints hundreds of thousands of rows a second, and per-field stdio
 * calls (and printf's floating-point path) dominated its profile. */
typedef struct line_writer {
    FILE *out;
    size_t len;
    int failed;
    char buf[1024];
} line_writer;

static void writer_flush(line_writer *w)
{
    if (w->len > 0 && fwrite(w->buf, 1, w->len, w->out) != w->len)
        w->failed = 1;
    w->len = 0;
}

static void writer_put(line_writer *w, const char *data, size_t len)
{
    if (len > sizeof w->buf - w->len) {
        writer_flush(w);
        if (len > sizeof w->buf) {
            if (fwrite(data, 1, len, w->out) != len)
                w->failed = 1;
            return;
        }
    }
    memcpy(w->buf + w->len, data, len);
    w->len += len;
}

static void writer_char(line_writer *w, char c)
{
    if (w->len == sizeof w->buf)
        writer_flush(w);
    w->buf[w->len++] = c;
}

static void writer_field(line_writer *w, const char *text)
{
    if (text == NULL)
        return;
    size_t len = strlen(text);
    if (strpbrk(text, ",\"\r\n") == NULL) {
        writer_put(w, text, len);
        return;
    }
    writer_char(w, '"');
    for (const char *p = text; *p != '\0'; p++) {
        if (*p == '"')
            writer_char(w, '"');
        writer_char(w, *p);
    }
    writer_char(w, '"');
}

static int writer_end(line_writer *w)
{
    writer_flush(w);
    return w->failed ? -1 : 0;
}

size_t ts_csv_format_fixed7(double value, char *buf, size_t size)
{
    /* Below 1000 in magnitude, value * 1e7 is at most 1e10 and carries a
     * rounding error of at most 2^-53 * 1e10 < 2e-6, so when its fraction
     * is not within 1e-5 of one half, rounding it gives the digits printf
     * derives from the exact binary value. Everything else takes printf. */
    double magnitude = fabs(value);
    if (size >= 32 && magnitude < 1000.0) {
        double scaled = magnitude * 1e7;
        double whole = floor(scaled);
        double fraction = scaled - whole;
        if (fabs(fraction - 0.5) > 1e-5) {
            uint64_t units = (uint64_t)whole + (fraction > 0.5 ? 1 : 0);
            size_t n = 0;
            if (signbit(value))
                buf[n++] = '-';
            n += put_decimal(buf + n, units / 10000000);
            buf[n++] = '.';
            uint64_t decimals = units % 10000000;
            for (int i = 6; i >= 0; i--) {
                buf[n + (size_t)i] = (char)('0' + decimals % 10);
                decimals /= 10;
            }
            n += 7;
            buf[n] = '\0';
            return n;
        }
    }
    int n = snprintf(buf, size, "%.7f", value);
    if (n < 0)
        n = 0;
    if ((size_t)n >= size)
        n = size > 0 ? (int)size - 1 : 0;
    return (size_t)n;
}

/* %.9g of the ledger columns. Their values repeat (multiples of a profile's
 * per-point spend), so a small direct-mapped cache of formatted values
 * saves most of the formatting. */
#define G9_CACHE_SLOTS 256
static struct g9_entry {
    uint64_t bits;
    uint8_t len;
    uint8_t valid;
    char text[30];
} g9_cache[G9_CACHE_SLOTS];

static void writer_g9(line_writer *w, double value)
{
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    struct g9_entry *entry =
        &g9_cache[(bits * UINT64_C(0x9E3779B97F4A7C15)) >> 56];
    if (!entry->valid || entry->bits != bits) {
        int n = snprintf(entry->text, sizeof entry->text, "%.9g", value);
        if (n < 0 || (size_t)n >= sizeof entry->text)
            n = 0;
        entry->len = (uint8_t)n;
        entry->bits = bits;
        entry->valid = 1;
    }
    writer_put(w, entry->text, entry->len);
}

static void writer_fixed7(line_writer *w, double value)
{
    char text[64];
    writer_put(w, text, ts_csv_format_fixed7(value, text, sizeof text));
}

static void writer_ts(line_writer *w, int64_t ts_ms)
{
    char text[32];
    writer_put(w, text, ts_csv_format_ts(ts_ms, text, sizeof text));
}

int ts_csv_write_field(FILE *out, const char *text)
{
    line_writer w = { .out = out };
    writer_field(&w, text);
    return writer_end(&w);
}

const char *ts_csv_sanitized_header(void)
{
    static char header[512];
    if (header[0] == '\0') {
        size_t used = (size_t)snprintf(header, sizeof header, "%s",
                                       TS_CSV_SANITIZED_BASE_HEADER);
        for (size_t i = 0; i < ts_report_n_extras && used < sizeof header;
             i++)
            used += (size_t)snprintf(header + used, sizeof header - used,
                                     ",%s", ts_report_extras[i].name);
    }
    return header;
}

int ts_csv_write_sanitized_header(FILE *out)
{
    return fprintf(out, "%s\n", ts_csv_sanitized_header()) < 0 ? -1 : 0;
}

int ts_csv_write_rejected_header(FILE *out)
{
    return fputs(TS_CSV_REJECTED_HEADER "\n", out) < 0 ? -1 : 0;
}

int ts_csv_write_sanitized(FILE *out, const ts_csv_sanitized *row)
{
    line_writer w = { .out = out };
    writer_field(&w, row->user);
    writer_char(&w, ',');
    writer_ts(&w, row->ts_ms);
    writer_char(&w, ',');
    writer_fixed7(&w, row->lat);
    writer_char(&w, ',');
    writer_fixed7(&w, row->lon);
    writer_char(&w, ',');
    writer_field(&w, row->mechanism);
    writer_char(&w, ',');
    writer_g9(&w, row->eps_point);
    writer_char(&w, ',');
    writer_g9(&w, row->eps_spent);
    writer_char(&w, ',');
    writer_g9(&w, row->eps_remaining);
    writer_char(&w, ',');
    writer_field(&w, row->profile);
    for (size_t i = 0; i < ts_report_n_extras; i++) {
        writer_char(&w, ',');
        double value;
        if (row->extras != NULL &&
            ts_report_extra_get(row->extras, &ts_report_extras[i], &value)) {
            if (ts_report_extras[i].type == TS_EXTRA_DOUBLE) {
                writer_g9(&w, value);
            } else {
                char digits[16];
                int len = snprintf(digits, sizeof digits, "%" PRIu32,
                                   (uint32_t)value);
                writer_put(&w, digits, (size_t)len);
            }
        }
    }
    writer_char(&w, '\n');
    return writer_end(&w);
}

int ts_csv_write_rejected(FILE *out, const ts_csv_rejected *row)
{
    line_writer w = { .out = out };
    writer_field(&w, row->user);
    writer_char(&w, ',');
    if (row->has_ts)
        writer_ts(&w, row->ts_ms);
    writer_char(&w, ',');
    writer_field(&w, row->reason);
    writer_char(&w, ',');
    writer_field(&w, row->profile);
    writer_char(&w, ',');
    writer_field(&w, row->detail);
    writer_char(&w, '\n');
    return writer_end(&w);
}
