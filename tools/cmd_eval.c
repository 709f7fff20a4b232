/* tracesan eval: utility and budget figures of a sanitized trace against
 * the true one, as in Section 5 of the predictive-mechanism paper.
 *
 * The two files are joined by (user, ts): the k-th true row of a key with
 * the k-th sanitized row of that key (GPS traces repeat timestamps). Per
 * user and overall:
 *   n          true rows with a sanitized row
 *   dropped    true rows without one (with on_exhausted = "drop" these are
 *              the budget_exhausted rejections; any other rejection counts
 *              the same, the sanitized CSV cannot tell them apart)
 *   mean_err_m mean great-circle (haversine) distance true -> sanitized
 *   alpha90_m  α(0.9): the smallest e with at least 90 % of errors <= e
 *   pred_rate  share of rows whose `predicted` column is 1, among rows
 *              where the column is set ("-" for mechanisms without it);
 *              the first point of each window (always noise) included
 *   rho        budget consumption rate: mean of eps_point / window budget,
 *              the budget being eps_spent + eps_remaining of the row
 *   windows    budget windows seen: a window starts at a row whose
 *              eps_spent equals its eps_point (nothing spent before it in
 *              the window), true of geoind and predictive, whose first
 *              point of a window always spends
 *   exhausted  windows in which some true row was dropped
 *   covered    points covered before exhaustion: mean, over exhausted
 *              windows, of the rows sanitized before the window's first
 *              dropped row ("-" when no window was exhausted). A dropped
 *              row belongs to the window of the sanitized row before it.
 * When the sanitized file has a delta_set_size column (pim, lm-delta), the
 * report adds, after mean_err_m, rmse_m (root mean square error, which
 * weighs the rare far draws of the exponential-tailed noise that the mean
 * hides) and, at the end, dss_mean, dss_median and dss_min: |ΔX| over the
 * user's rows, which shows how far the δ-location set shrinks (a set of 1
 * means the point is released with the belief at one cell). Files without
 * the column keep the original columns.
 * Repeats (on_exhausted = "repeat") are sanitized rows spending 0 and would
 * count as covered; evaluate with "drop".
 *
 * The output holds aggregates only, never a coordinate.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uthash.h>
#include <zlib.h>

#include "mechanisms/geo.h"
#include "tools/commands.h"
#include "tools/csv.h"

#define ERR_MAX 512
#define MAX_LINE_BYTES (1u << 16)
/* eps values are printed with %.9g: equal values agree to ~1e-8. */
#define WINDOW_START_TOLERANCE 1e-7
#define OVERALL_LABEL "(all)"

typedef struct eval_user {
    char *name;
    uint32_t index;
    UT_hash_handle hh;
} eval_user;

typedef struct true_row {
    uint32_t user;
    uint32_t order;
    int64_t ts_ms;
    double lat;
    double lon;
    /* filled from the matched sanitized row */
    int matched;
    int predicted;           /* -1 when the column is empty */
    int window_start;
    double error_m;
    double rho;
    double delta_set_size;   /* NAN when the column is absent or empty */
} true_row;

typedef struct key_entry {
    struct {
        uint32_t user;
        uint32_t zero;       /* explicit padding: keys are hashed as bytes */
        int64_t ts_ms;
    } key;
    size_t first;            /* index of the first true row with the key */
    size_t count;
    size_t used;             /* sanitized rows matched so far */
    UT_hash_handle hh;
} key_entry;

typedef struct eval_data {
    eval_user *by_name;
    eval_user **users;
    size_t n_users, users_cap;
    true_row *rows;
    size_t n_rows, rows_cap;
    key_entry *keys;
    int has_delta;           /* the sanitized file has delta_set_size */
} eval_data;

typedef struct user_stats {
    uint64_t n, dropped, predicted, predicted_defined;
    uint64_t windows, exhausted, covered_sum;
    double error_sum, rho_sum;
    double *errors;          /* n of them, for α(0.9) */
    size_t errors_len;
    double error_sq_sum;
    double *dss;             /* delta_set_size of matched rows */
    size_t dss_len;
} user_stats;

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " eval [--format table|csv] [--series FILE] "
        "TRUE.csv SANITIZED.csv\n"
        "\n"
        "Joins a true trace (user,ts,lat,lon, as given to sanitize) with its\n"
        "sanitized output by (user, ts) and reports per user and overall:\n"
        "n, dropped, mean error and α(0.9) in metres (haversine), prediction\n"
        "rate (from the predicted column), budget consumption rate rho\n"
        "(eps_point / window budget), budget windows, exhausted windows and\n"
        "the mean number of points covered before exhaustion. The overall\n"
        "row is labelled " OVERALL_LABEL ". Evaluate runs made with\n"
        "on_exhausted = \"drop\" (see docs/predictive.md).\n"
        "When SANITIZED.csv has a delta_set_size column (pim, lm-delta) the\n"
        "report adds rmse_m and the mean, median and minimum |ΔX|.\n"
        "\n"
        "options:\n"
        "  -f, --format F  'table' (aligned text, default) or 'csv'\n"
        "  -s, --series F  also write user,ts,delta_set_size,error_m per\n"
        "                  matched row (time order) to F\n"
        "  -h, --help      show this help\n",
        out);
}

/* ------------------------------------------------------------ storage */

static void free_data(eval_data *data)
{
    eval_user *user, *tmp_user;
    HASH_ITER(hh, data->by_name, user, tmp_user) {
        HASH_DEL(data->by_name, user);
        free(user->name);
        free(user);
    }
    key_entry *key, *tmp_key;
    HASH_ITER(hh, data->keys, key, tmp_key) {
        HASH_DEL(data->keys, key);
        free(key);
    }
    free(data->users);
    free(data->rows);
}

static eval_user *find_user(eval_data *data, const char *name)
{
    eval_user *user = NULL;
    HASH_FIND_STR(data->by_name, name, user);
    return user;
}

static eval_user *intern_user(eval_data *data, const char *name)
{
    eval_user *user = find_user(data, name);
    if (user != NULL)
        return user;
    if (data->n_users == data->users_cap) {
        size_t cap = data->users_cap ? data->users_cap * 2 : 64;
        eval_user **users = realloc(data->users, cap * sizeof *users);
        if (users == NULL)
            return NULL;
        data->users = users;
        data->users_cap = cap;
    }
    user = calloc(1, sizeof *user);
    if (user == NULL)
        return NULL;
    user->name = strdup(name);
    if (user->name == NULL) {
        free(user);
        return NULL;
    }
    user->index = (uint32_t)data->n_users;
    data->users[data->n_users++] = user;
    HASH_ADD_KEYPTR(hh, data->by_name, user->name, strlen(user->name), user);
    return user;
}

static int compare_rows(const void *a, const void *b)
{
    const true_row *x = a, *y = b;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    if (x->ts_ms != y->ts_ms)
        return x->ts_ms < y->ts_ms ? -1 : 1;
    return x->order < y->order ? -1 : (x->order > y->order);
}

static key_entry *find_key(eval_data *data, uint32_t user, int64_t ts_ms)
{
    key_entry probe;
    memset(&probe, 0, sizeof probe);
    probe.key.user = user;
    probe.key.ts_ms = ts_ms;
    key_entry *entry = NULL;
    HASH_FIND(hh, data->keys, &probe.key, sizeof probe.key, entry);
    return entry;
}

static int load_truth(eval_data *data, const char *path)
{
    char err[ERR_MAX];
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return -1;
    }
    int status = -1;
    uint64_t skipped = 0;
    ts_csv_row row;
    for (;;) {
        int rc = ts_csv_read(reader, &row, err, sizeof err);
        if (rc == TS_CSV_EOF)
            break;
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
            goto out;
        }
        if (rc == TS_CSV_BAD_ROW || row.user[0] == '\0' ||
            !ts_geo_valid(row.lat, row.lon)) {
            skipped++;
            continue;
        }
        eval_user *user = intern_user(data, row.user);
        if (user == NULL || data->n_rows >= UINT32_MAX)
            goto oom;
        if (data->n_rows == data->rows_cap) {
            size_t cap = data->rows_cap ? data->rows_cap * 2 : 4096;
            true_row *rows = realloc(data->rows, cap * sizeof *rows);
            if (rows == NULL)
                goto oom;
            data->rows = rows;
            data->rows_cap = cap;
        }
        true_row *r = &data->rows[data->n_rows];
        memset(r, 0, sizeof *r);
        r->user = user->index;
        r->order = (uint32_t)data->n_rows;
        r->ts_ms = row.ts_ms;
        r->lat = row.lat;
        r->lon = row.lon;
        r->predicted = -1;
        r->delta_set_size = NAN;
        data->n_rows++;
    }
    if (skipped != 0)
        fprintf(stderr, "eval: %" PRIu64 " unusable rows in %s ignored\n",
                skipped, path);
    qsort(data->rows, data->n_rows, sizeof *data->rows, compare_rows);
    for (size_t i = 0; i < data->n_rows;) {
        size_t j = i;
        while (j < data->n_rows && data->rows[j].user == data->rows[i].user &&
               data->rows[j].ts_ms == data->rows[i].ts_ms)
            j++;
        key_entry *entry = calloc(1, sizeof *entry);
        if (entry == NULL)
            goto oom;
        entry->key.user = data->rows[i].user;
        entry->key.ts_ms = data->rows[i].ts_ms;
        entry->first = i;
        entry->count = j - i;
        HASH_ADD(hh, data->keys, key, sizeof entry->key, entry);
        i = j;
    }
    status = 0;
    goto out;
oom:
    fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
out:
    ts_csv_close(reader);
    return status;
}

/* ------------------------------------------------- the sanitized file */

enum { S_USER, S_TS, S_LAT, S_LON, S_EPS_POINT, S_EPS_SPENT, S_EPS_REMAINING,
       S_PREDICTED, S_COLUMNS };
static const char *const sanitized_columns[S_COLUMNS] = {
    "user", "ts", "lat", "lon", "eps_point", "eps_spent", "eps_remaining",
    "predicted",
};

/* Splits a CSV line in place (RFC 4180 quoting, no embedded newlines: the
 * sanitized CSV never has them). Returns the number of fields or -1. */
static int split_fields(char *line, char **fields, int max_fields)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (n == max_fields)
            return -1;
        if (*p == '"') {
            char *out = ++p;
            fields[n++] = out;
            for (;;) {
                if (*p == '\0')
                    return -1;
                if (*p == '"') {
                    if (p[1] == '"') {
                        *out++ = '"';
                        p += 2;
                        continue;
                    }
                    p++;
                    break;
                }
                *out++ = *p++;
            }
            *out = '\0';
            if (*p == '\0')
                return n;
            if (*p != ',')
                return -1;
            p++;
        } else {
            fields[n++] = p;
            char *comma = strchr(p, ',');
            if (comma == NULL)
                return n;
            *comma = '\0';
            p = comma + 1;
        }
    }
}

static int parse_number(const char *text, double *out)
{
    if (text == NULL || *text == '\0')
        return -1;
    char *end = NULL;
    double v = strtod(text, &end);
    if (*end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static void chomp(char *line)
{
    size_t len = strlen(line);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
}

static int load_sanitized(eval_data *data, const char *path)
{
    gzFile gz = strcmp(path, "-") == 0 ? gzdopen(0, "rb") : gzopen(path, "rb");
    if (gz == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": cannot open %s\n", path);
        return -1;
    }
    int status = -1;
    char *line = malloc(MAX_LINE_BYTES);
    if (line == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        goto out;
    }
    char *fields[64];
    int column[S_COLUMNS];
    int delta_column = -1;
    if (gzgets(gz, line, MAX_LINE_BYTES) == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s: empty file\n", path);
        goto out;
    }
    chomp(line);
    int n_header = split_fields(line, fields, 64);
    for (int c = 0; c < S_COLUMNS; c++) {
        column[c] = -1;
        for (int f = 0; f < n_header; f++)
            if (strcasecmp(fields[f], sanitized_columns[c]) == 0)
                column[c] = f;
        if (column[c] < 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: header has no '%s' column "
                    "(expected " TS_CSV_SANITIZED_HEADER ")\n", path,
                    sanitized_columns[c]);
            goto out;
        }
    }
    for (int f = 0; f < n_header; f++)
        if (strcasecmp(fields[f], "delta_set_size") == 0)
            delta_column = f;
    data->has_delta = delta_column >= 0;
    uint64_t line_no = 1, unmatched = 0, bad = 0;
    while (gzgets(gz, line, MAX_LINE_BYTES) != NULL) {
        line_no++;
        chomp(line);
        if (line[0] == '\0')
            continue;
        int n = split_fields(line, fields, 64);
        double ts_s, lat, lon, eps_point, eps_spent, eps_remaining;
        int ok = n > 0;
        for (int c = 0; ok && c < S_COLUMNS; c++)
            ok = column[c] < n;
        ok = ok && parse_number(fields[column[S_TS]], &ts_s) == 0 &&
             parse_number(fields[column[S_LAT]], &lat) == 0 &&
             parse_number(fields[column[S_LON]], &lon) == 0 &&
             parse_number(fields[column[S_EPS_POINT]], &eps_point) == 0 &&
             parse_number(fields[column[S_EPS_SPENT]], &eps_spent) == 0 &&
             parse_number(fields[column[S_EPS_REMAINING]], &eps_remaining) ==
                 0 &&
             fabs(ts_s) < 9.0e15;
        if (!ok) {
            if (bad++ < 5)
                fprintf(stderr, "eval: %s: line %" PRIu64 " is not a "
                        "sanitized row, ignored\n", path, line_no);
            continue;
        }
        eval_user *user = find_user(data, fields[column[S_USER]]);
        key_entry *entry =
            user != NULL ? find_key(data, user->index, llround(ts_s * 1000.0))
                         : NULL;
        if (entry == NULL || entry->used == entry->count) {
            unmatched++;
            continue;
        }
        true_row *r = &data->rows[entry->first + entry->used++];
        r->matched = 1;
        r->error_m = ts_geo_distance_m(r->lat, r->lon, lat, lon);
        double budget = eps_spent + eps_remaining;
        r->rho = budget > 0.0 ? eps_point / budget : NAN;
        r->window_start =
            eps_point > 0.0 &&
            fabs(eps_spent - eps_point) <= WINDOW_START_TOLERANCE * budget;
        const char *flag = fields[column[S_PREDICTED]];
        r->predicted = flag[0] == '\0' ? -1 : (strcmp(flag, "1") == 0);
        double size;
        if (delta_column >= 0 && delta_column < n &&
            parse_number(fields[delta_column], &size) == 0 && size >= 0.0)
            r->delta_set_size = size;
    }
    int errnum = Z_OK;
    gzerror(gz, &errnum);
    if (errnum != Z_OK) {
        fprintf(stderr, TS_TOOL_NAME ": %s: read error\n", path);
        goto out;
    }
    if (unmatched != 0)
        fprintf(stderr, "eval: %" PRIu64 " sanitized rows have no true row "
                "with their (user, ts); ignored\n", unmatched);
    status = 0;
out:
    free(line);
    gzclose(gz);
    return status;
}

/* --------------------------------------------------------- statistics */

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y);
}

/* α(δ): the smallest error e with at least a fraction δ of errors <= e. */
static double quantile_sorted(const double *sorted, size_t n, double delta)
{
    if (n == 0)
        return NAN;
    size_t k = (size_t)ceil(delta * (double)n - 1e-9);
    if (k < 1)
        k = 1;
    return sorted[k - 1];
}

/* Accumulates rows[first .. end) (one user, time order) into stats. */
static int accumulate(const true_row *rows, size_t first, size_t end,
                      user_stats *stats)
{
    int window_open = 0, exhausted = 0;
    uint64_t covered = 0;
    for (size_t i = first; i < end; i++) {
        const true_row *r = &rows[i];
        if (!r->matched) {
            stats->dropped++;
            if (window_open && !exhausted) {
                exhausted = 1;
                stats->exhausted++;
                stats->covered_sum += covered;
            }
            continue;
        }
        if (r->window_start || !window_open) {
            window_open = 1;
            exhausted = 0;
            covered = 0;
            stats->windows++;
        }
        if (!exhausted)
            covered++;
        stats->n++;
        stats->error_sum += r->error_m;
        stats->error_sq_sum += r->error_m * r->error_m;
        if (isfinite(r->delta_set_size))
            stats->dss[stats->dss_len++] = r->delta_set_size;
        if (isfinite(r->rho))
            stats->rho_sum += r->rho;
        if (r->predicted >= 0) {
            stats->predicted_defined++;
            stats->predicted += (uint64_t)r->predicted;
        }
        stats->errors[stats->errors_len++] = r->error_m;
    }
    return 0;
}

typedef struct printed_stats {
    char n[24], dropped[24], mean[32], rmse[32], alpha[32], pr[16], rho[24];
    char windows[24], exhausted[24], covered[24];
    char dss_mean[32], dss_median[32], dss_min[32];
} printed_stats;

static void format_stats(user_stats *s, printed_stats *out)
{
    qsort(s->errors, s->errors_len, sizeof *s->errors, compare_doubles);
    snprintf(out->n, sizeof out->n, "%" PRIu64, s->n);
    snprintf(out->dropped, sizeof out->dropped, "%" PRIu64, s->dropped);
    if (s->n > 0) {
        snprintf(out->mean, sizeof out->mean, "%.1f", s->error_sum / s->n);
        snprintf(out->rmse, sizeof out->rmse, "%.1f",
                 sqrt(s->error_sq_sum / s->n));
        snprintf(out->alpha, sizeof out->alpha, "%.1f",
                 quantile_sorted(s->errors, s->errors_len, 0.9));
        snprintf(out->rho, sizeof out->rho, "%.5f", s->rho_sum / s->n);
    } else {
        strcpy(out->mean, "-");
        strcpy(out->rmse, "-");
        strcpy(out->alpha, "-");
        strcpy(out->rho, "-");
    }
    if (s->predicted_defined > 0)
        snprintf(out->pr, sizeof out->pr, "%.4f",
                 (double)s->predicted / s->predicted_defined);
    else
        strcpy(out->pr, "-");
    snprintf(out->windows, sizeof out->windows, "%" PRIu64, s->windows);
    snprintf(out->exhausted, sizeof out->exhausted, "%" PRIu64, s->exhausted);
    if (s->exhausted > 0)
        snprintf(out->covered, sizeof out->covered, "%.2f",
                 (double)s->covered_sum / s->exhausted);
    else
        strcpy(out->covered, "-");
    if (s->dss_len > 0) {
        qsort(s->dss, s->dss_len, sizeof *s->dss, compare_doubles);
        double sum = 0.0;
        for (size_t i = 0; i < s->dss_len; i++)
            sum += s->dss[i];
        size_t mid = s->dss_len / 2;
        double median = s->dss_len % 2 ? s->dss[mid]
                                       : (s->dss[mid - 1] + s->dss[mid]) / 2.0;
        snprintf(out->dss_mean, sizeof out->dss_mean, "%.2f",
                 sum / (double)s->dss_len);
        snprintf(out->dss_median, sizeof out->dss_median, "%.1f", median);
        snprintf(out->dss_min, sizeof out->dss_min, "%.0f", s->dss[0]);
    } else {
        strcpy(out->dss_mean, "-");
        strcpy(out->dss_median, "-");
        strcpy(out->dss_min, "-");
    }
}

#define N_HEADERS 14

/* Fills cells (N_HEADERS of room) with one report line, or the header when
 * p is NULL; returns the number of columns. */
static size_t line_cells(int has_delta, const char *user,
                         const printed_stats *p, const char **cells)
{
    size_t n = 0;
    cells[n++] = p ? user : "user";
    cells[n++] = p ? p->n : "n";
    cells[n++] = p ? p->dropped : "dropped";
    cells[n++] = p ? p->mean : "mean_err_m";
    if (has_delta)
        cells[n++] = p ? p->rmse : "rmse_m";
    cells[n++] = p ? p->alpha : "alpha90_m";
    cells[n++] = p ? p->pr : "pred_rate";
    cells[n++] = p ? p->rho : "rho";
    cells[n++] = p ? p->windows : "windows";
    cells[n++] = p ? p->exhausted : "exhausted";
    cells[n++] = p ? p->covered : "covered";
    if (has_delta) {
        cells[n++] = p ? p->dss_mean : "dss_mean";
        cells[n++] = p ? p->dss_median : "dss_median";
        cells[n++] = p ? p->dss_min : "dss_min";
    }
    return n;
}

static void print_line(int csv, int has_delta, const int *widths,
                       const char *user, const printed_stats *p)
{
    const char *cells[N_HEADERS];
    size_t n_cells = line_cells(has_delta, user, p, cells);
    for (size_t c = 0; c < n_cells; c++) {
        if (csv) {
            if (c > 0)
                fputc(',', stdout);
            if (c == 0)
                ts_csv_write_field(stdout, cells[c]);
            else
                fputs(cells[c], stdout);
        } else if (c == 0) {
            printf("%-*s", widths[c], cells[c]);
        } else {
            printf("  %*s", widths[c], cells[c]);
        }
    }
    fputc('\n', stdout);
}

static void print_ts(FILE *out, int64_t ts_ms)
{
    if (ts_ms % 1000 == 0)
        fprintf(out, "%" PRId64, ts_ms / 1000);
    else
        fprintf(out, "%.3f", (double)ts_ms / 1000.0);
}

/* One row per matched true row, in (user, time) order: |ΔX| and the error
 * over time, for plots. Errors only, never a coordinate. */
static int write_series(const eval_data *data, const char *path)
{
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": cannot open %s for writing\n", path);
        return -1;
    }
    fputs("user,ts,delta_set_size,error_m\n", out);
    for (size_t i = 0; i < data->n_rows; i++) {
        const true_row *r = &data->rows[i];
        if (!r->matched)
            continue;
        ts_csv_write_field(out, data->users[r->user]->name);
        fputc(',', out);
        print_ts(out, r->ts_ms);
        if (isfinite(r->delta_set_size))
            fprintf(out, ",%.0f,%.1f\n", r->delta_set_size, r->error_m);
        else
            fprintf(out, ",,%.1f\n", r->error_m);
    }
    int failed = ferror(out) != 0;
    if (fclose(out) != 0)
        failed = 1;
    if (failed) {
        fprintf(stderr, TS_TOOL_NAME ": cannot write %s\n", path);
        return -1;
    }
    return 0;
}

static int report(eval_data *data, int csv)
{
    user_stats overall;
    memset(&overall, 0, sizeof overall);
    user_stats *per_user = calloc(data->n_users ? data->n_users : 1,
                                  sizeof *per_user);
    overall.errors = malloc((data->n_rows ? data->n_rows : 1) *
                            sizeof *overall.errors);
    overall.dss = malloc((data->n_rows ? data->n_rows : 1) *
                         sizeof *overall.dss);
    int status = -1;
    if (per_user == NULL || overall.errors == NULL || overall.dss == NULL)
        goto oom;
    for (size_t first = 0; first < data->n_rows;) {
        size_t end = first;
        uint32_t u = data->rows[first].user;
        while (end < data->n_rows && data->rows[end].user == u)
            end++;
        per_user[u].errors = malloc((end - first) * sizeof(double));
        per_user[u].dss = malloc((end - first) * sizeof(double));
        if (per_user[u].errors == NULL || per_user[u].dss == NULL)
            goto oom;
        accumulate(data->rows, first, end, &per_user[u]);
        accumulate(data->rows, first, end, &overall);
        first = end;
    }

    printed_stats *printed =
        calloc(data->n_users + 1, sizeof *printed);
    if (printed == NULL)
        goto oom;
    int widths[N_HEADERS];
    const char *cells[N_HEADERS];
    size_t n_cells = line_cells(data->has_delta, NULL, NULL, cells);
    for (size_t c = 0; c < n_cells; c++)
        widths[c] = (int)strlen(cells[c]);
    for (size_t u = 0; u <= data->n_users; u++) {
        int is_overall = u == data->n_users;
        user_stats *s = is_overall ? &overall : &per_user[u];
        format_stats(s, &printed[u]);
        line_cells(data->has_delta,
                   is_overall ? OVERALL_LABEL : data->users[u]->name,
                   &printed[u], cells);
        for (size_t c = 0; c < n_cells; c++)
            if ((int)strlen(cells[c]) > widths[c])
                widths[c] = (int)strlen(cells[c]);
    }
    line_cells(data->has_delta, NULL, NULL, cells);
    for (size_t c = 0; c < n_cells; c++) {
        if (csv)
            printf("%s%s", c ? "," : "", cells[c]);
        else if (c == 0)
            printf("%-*s", widths[c], cells[c]);
        else
            printf("  %*s", widths[c], cells[c]);
    }
    fputc('\n', stdout);
    for (size_t u = 0; u < data->n_users; u++)
        print_line(csv, data->has_delta, widths, data->users[u]->name,
                   &printed[u]);
    print_line(csv, data->has_delta, widths, OVERALL_LABEL,
               &printed[data->n_users]);
    free(printed);
    status = fflush(stdout) != 0 || ferror(stdout) ? -1 : 0;
    if (status != 0)
        fprintf(stderr, TS_TOOL_NAME ": cannot write the output\n");
    goto out;
oom:
    fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
out:
    if (per_user != NULL)
        for (size_t u = 0; u < data->n_users; u++) {
            free(per_user[u].errors);
            free(per_user[u].dss);
        }
    free(per_user);
    free(overall.errors);
    free(overall.dss);
    return status;
}

int cmd_eval(int argc, char **argv)
{
    static const struct option long_options[] = {
        { "format", required_argument, NULL, 'f' },
        { "series", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int csv = 0;
    const char *series_path = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:s:h", long_options, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (strcmp(optarg, "csv") == 0)
                csv = 1;
            else if (strcmp(optarg, "table") == 0)
                csv = 0;
            else {
                fprintf(stderr, TS_TOOL_NAME ": --format must be 'table' or "
                        "'csv'\n");
                return 1;
            }
            break;
        case 's':
            series_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (optind + 2 != argc) {
        fprintf(stderr, TS_TOOL_NAME ": eval needs TRUE.csv and "
                "SANITIZED.csv\n");
        usage(stderr);
        return 1;
    }
    if (strcmp(argv[optind], "-") == 0 && strcmp(argv[optind + 1], "-") == 0) {
        fprintf(stderr, TS_TOOL_NAME ": only one of the files can be stdin\n");
        return 1;
    }
    eval_data data;
    memset(&data, 0, sizeof data);
    int status = 1;
    if (load_truth(&data, argv[optind]) == 0 &&
        load_sanitized(&data, argv[optind + 1]) == 0 &&
        report(&data, csv) == 0 &&
        (series_path == NULL || write_series(&data, series_path) == 0))
        status = 0;
    free_data(&data);
    return status;
}
