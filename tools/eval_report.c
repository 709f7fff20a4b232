/* The report of tracesan eval (tools/eval_report.h). */
#include "tools/eval_report.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/csv.h"

typedef struct user_stats {
    uint64_t n, dropped, predicted, predicted_defined;
    uint64_t windows, exhausted, covered_sum;
    double error_sum, rho_sum;
    double *errors;          /* n of them, for α(0.9) */
    size_t errors_len;
    double error_sq_sum;
    double *dss;             /* delta_set_size of matched rows */
    size_t dss_len;
    uint64_t replayed, drifted;
    uint64_t knn_n;
    double knn_precision_sum, knn_recall_sum;
} user_stats;

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
static int accumulate(const ts_eval_row *rows, size_t first, size_t end,
                      user_stats *stats)
{
    int window_open = 0, exhausted = 0;
    uint64_t covered = 0;
    for (size_t i = first; i < end; i++) {
        const ts_eval_row *r = &rows[i];
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
        if (r->drifted >= 0) {
            stats->replayed++;
            stats->drifted += (uint64_t)r->drifted;
        }
        if (isfinite(r->knn_precision)) {
            stats->knn_n++;
            stats->knn_precision_sum += r->knn_precision;
            stats->knn_recall_sum += r->knn_recall;
        }
        stats->errors[stats->errors_len++] = r->error_m;
    }
    return 0;
}

typedef struct printed_stats {
    char n[24], dropped[24], mean[32], rmse[32], alpha[32], pr[16], rho[24];
    char windows[24], exhausted[24], covered[24];
    char dss_mean[32], dss_median[32], dss_min[32];
    char drift[24], knn_precision[24], knn_recall[24];
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
    if (s->replayed > 0)
        snprintf(out->drift, sizeof out->drift, "%.4f",
                 (double)s->drifted / (double)s->replayed);
    else
        strcpy(out->drift, "-");
    if (s->knn_n > 0) {
        snprintf(out->knn_precision, sizeof out->knn_precision, "%.4f",
                 s->knn_precision_sum / (double)s->knn_n);
        snprintf(out->knn_recall, sizeof out->knn_recall, "%.4f",
                 s->knn_recall_sum / (double)s->knn_n);
    } else {
        strcpy(out->knn_precision, "-");
        strcpy(out->knn_recall, "-");
    }
}

#define N_HEADERS 17

/* Fills cells (N_HEADERS of room) with one report line, or the header when
 * p is NULL; returns the number of columns. Columns are only ever appended:
 * scripts read them by position. */
static size_t line_cells(const ts_eval_data *data, const char *user,
                         const printed_stats *p, const char **cells)
{
    int has_delta = data->has_delta;
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
    if (data->has_extra) {
        cells[n++] = p ? p->drift : "drift_ratio";
        cells[n++] = p ? p->knn_precision : "knn_precision";
        cells[n++] = p ? p->knn_recall : "knn_recall";
    }
    return n;
}

static void print_line(int csv, const ts_eval_data *data, const int *widths,
                       const char *user, const printed_stats *p)
{
    const char *cells[N_HEADERS];
    size_t n_cells = line_cells(data, user, p, cells);
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
int ts_eval_write_series(const ts_eval_data *data, const char *path)
{
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": cannot open %s for writing\n", path);
        return -1;
    }
    fputs(data->has_drift ? "user,ts,delta_set_size,error_m,drifted\n"
                          : "user,ts,delta_set_size,error_m\n",
          out);
    for (size_t i = 0; i < data->n_rows; i++) {
        const ts_eval_row *r = &data->rows[i];
        if (!r->matched)
            continue;
        ts_csv_write_field(out, ts_name_index_name(data->users, r->user));
        fputc(',', out);
        print_ts(out, r->ts_ms);
        if (isfinite(r->delta_set_size))
            fprintf(out, ",%.0f,%.1f", r->delta_set_size, r->error_m);
        else
            fprintf(out, ",,%.1f", r->error_m);
        if (data->has_drift && r->drifted >= 0)
            fprintf(out, ",%d", r->drifted);
        else if (data->has_drift)
            fputc(',', out);
        fputc('\n', out);
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

int ts_eval_report(ts_eval_data *data, int csv)
{
    size_t n_users = ts_name_index_count(data->users);
    user_stats overall;
    memset(&overall, 0, sizeof overall);
    user_stats *per_user = calloc(n_users ? n_users : 1, sizeof *per_user);
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

    printed_stats *printed = calloc(n_users + 1, sizeof *printed);
    if (printed == NULL)
        goto oom;
    int widths[N_HEADERS];
    const char *cells[N_HEADERS];
    size_t n_cells = line_cells(data, NULL, NULL, cells);
    for (size_t c = 0; c < n_cells; c++)
        widths[c] = (int)strlen(cells[c]);
    for (size_t u = 0; u <= n_users; u++) {
        int is_overall = u == n_users;
        user_stats *s = is_overall ? &overall : &per_user[u];
        format_stats(s, &printed[u]);
        line_cells(data,
                   is_overall ? TS_EVAL_OVERALL_LABEL
                              : ts_name_index_name(data->users, (uint32_t)u),
                   &printed[u], cells);
        for (size_t c = 0; c < n_cells; c++)
            if ((int)strlen(cells[c]) > widths[c])
                widths[c] = (int)strlen(cells[c]);
    }
    line_cells(data, NULL, NULL, cells);
    for (size_t c = 0; c < n_cells; c++) {
        if (csv)
            printf("%s%s", c ? "," : "", cells[c]);
        else if (c == 0)
            printf("%-*s", widths[c], cells[c]);
        else
            printf("  %*s", widths[c], cells[c]);
    }
    fputc('\n', stdout);
    for (size_t u = 0; u < n_users; u++)
        print_line(csv, data, widths,
                   ts_name_index_name(data->users, (uint32_t)u), &printed[u]);
    print_line(csv, data, widths, TS_EVAL_OVERALL_LABEL, &printed[n_users]);
    free(printed);
    status = fflush(stdout) != 0 || ferror(stdout) ? -1 : 0;
    if (status != 0)
        fprintf(stderr, TS_TOOL_NAME ": cannot write the output\n");
    goto out;
oom:
    fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
out:
    if (per_user != NULL)
        for (size_t u = 0; u < n_users; u++) {
            free(per_user[u].errors);
            free(per_user[u].dss);
        }
    free(per_user);
    free(overall.errors);
    free(overall.dss);
    return status;
}
