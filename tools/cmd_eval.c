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
 * Two evaluation-only figures are appended (as three columns, "-" when not
 * computed) when --config/--profile/-o or --poi is given:
 *   drift_ratio    with --config/--profile/-o naming a pim or lm-delta
 *                  profile: the share of releases whose true cell was not
 *                  in the delta-location set (the release used a
 *                  surrogate). Found by replaying each user's published
 *                  points, in order, on an observer's copy of the
 *                  mechanism's state (its ops' replay), zero-filled at each
 *                  budget window as the pipeline does. Drift is never
 *                  published; only this offline comparison with the truth
 *                  can see it. The replayed |ΔX| must equal the published
 *                  delta_set_size: a difference means eval's configuration
 *                  is not the sanitizer's, and is reported.
 *   knn_precision  with --poi: for each release, R = the k POIs nearest
 *   knn_recall     the true point and R' = the k' POIs nearest the
 *                  released one (great-circle distance, ties by POI
 *                  order); precision |R ∩ R'| / k', recall |R ∩ R'| / k,
 *                  averaged over releases (Xiao & Xiong, Section 6.3).
 *
 * --identity replaces the report by the identity adversary of Romanelli et
 * al. (CSF 2020, Section IV-B; inference/identity.h): per cell size, the
 * held-out Bayes error of a MAP guess of the user from the binned released
 * point, the plug-in I(U; Z) and the mean distortion. Only joined rows
 * count (a rejected row published nothing to guess from). The rows are
 * split by ts_identity_split into the adversary's training rows and the
 * held-out rows it is scored on, the split printed on stderr.
 *
 * --plot FILE draws, with cairo (tools/eval_figure.h), the error CDF per
 * profile, the error over time of one user and, for delta-location-set
 * profiles, |ΔX| over time; --compare adds the profiles of more sanitized
 * outputs of the same true trace to the figure (not to the report).
 *
 * The output holds aggregates only, never a coordinate; so does the plot.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "engine/pipeline.h"
#include "mechanisms/delta_privacy.h"
#include "geometry/geo.h"
#include "inference/grid.h"
#include "inference/identity.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/eval_figure.h"
#include "tools/name_index.h"
#include "tools/plot.h"
#include "tools/poi_index.h"

#define ERR_MAX 512
/* eps values are printed with %.9g: equal values agree to ~1e-8. */
#define WINDOW_START_TOLERANCE 1e-7
#define OVERALL_LABEL "(all)"
#define DEFAULT_KNN 5
/* The paper's evaluation grids (Section IV-B). */
static const double DEFAULT_IDENTITY_CELLS[] = { 50.0, 100.0, 200.0, 400.0 };
#define MAX_IDENTITY_CELLS 32
#define MAX_COMPARED 16
/* profile_slot of a sanitized row whose profile column is absent or empty
 * (taken to be the replayed profile), or names no profile of eval's
 * configuration (never replayed). */
#define PROFILE_UNNAMED (-1)
#define PROFILE_UNKNOWN (-2)

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
    /* Evaluation only, in memory: never printed. */
    double released_lat;
    double released_lon;
    double eps_point;
    int profile_slot;        /* index in eval's configuration, or above */
    uint32_t profile_name;   /* in eval_data.profiles; "" when none */
    int drifted;             /* -1 when not replayed */
    double knn_precision;    /* NAN when not computed */
    double knn_recall;
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
    ts_name_index *users;    /* user id -> true_row.user */
    ts_name_index *profiles; /* the sanitized rows' profile column */
    true_row *rows;
    size_t n_rows, rows_cap;
    key_entry *keys;
    int has_delta;           /* the sanitized file has delta_set_size */
    int has_extra;           /* replay or kNN asked for: three more columns */
    int has_drift;
    /* The configuration's profiles (NULL without --config/--profile/-o),
     * to name each sanitized row's profile. */
    const ts_pipeline *pipeline;
} eval_data;

typedef struct replay_counts {
    uint64_t replayed, drifted, mismatches, errors;
} replay_counts;

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

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " eval [--format table|csv] [--series FILE]\n"
        "                     [--config FILE] [--profile NAME] "
        "[-o PATH=VALUE]...\n"
        "                     [--poi FILE [--knn K] [--knn-returned K2]]\n"
        "                     [--plot FILE.svg|FILE.png [--plot-size WxH]\n"
        "                      [--plot-user U] [--compare OTHER.csv]...]\n"
        "                     TRUE.csv SANITIZED.csv\n"
        "       " TS_TOOL_NAME " eval --identity [--cell-m M]... "
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
        "  -c, --config FILE       the sanitizer's configuration,\n"
        "  -p, --profile NAME      its profile (default: default_profile) and\n"
        "  -o, --override PATH=VALUE\n"
        "                          its overrides, exactly as given to\n"
        "                          sanitize: with a pim or lm-delta profile,\n"
        "                          adds drift_ratio (share of releases whose\n"
        "                          true cell was outside ΔX, replayed from the\n"
        "                          published points)\n"
        "  -f, --format FORMAT     'table' (aligned text, default) or 'csv'\n"
        "  -s, --series FILE       also write user,ts,delta_set_size,error_m\n"
        "                          per matched row (time order) to FILE (and\n"
        "                          drifted, 0/1, when the drift ratio is\n"
        "                          computed)\n"
        "      --poi FILE          CSV of points of interest (header with lat\n"
        "                          and lon; gzip accepted): adds knn_precision\n"
        "                          and knn_recall\n"
        "      --knn K             k of the true kNN set (default 5)\n"
        "      --knn-returned K2   k' of the kNN set of the released point\n"
        "                          (default K, at least K)\n"
        "      --identity          instead: the identity adversary's Bayes\n"
        "                          error (held-out MAP guess of the user from\n"
        "                          the released point binned on a grid), the\n"
        "                          plug-in I(U;Z) and the mean distortion, as\n"
        "                          CSV cell_m,bayes_error,mi_bits,\n"
        "                          mean_distortion_m,users,rows; the\n"
        "                          training/evaluation split goes to stderr\n"
        "      --cell-m M          a grid cell side in metres for --identity,\n"
        "                          repeatable (default 50, 100, 200, 400)\n"
        "      --plot FILE         also draw a figure, SVG or PNG by FILE's\n"
        "                          extension: the error CDF per profile, the\n"
        "                          error over time of one user and, with\n"
        "                          delta_set_size, |ΔX| over time\n"
        "      --plot-size WxH     its size in pixels (default "
        TS_PLOT_DEFAULT_SIZE_TEXT ")\n"
        "      --plot-user U       the user followed over time (default: the\n"
        "                          one with the most sanitized rows)\n"
        "      --compare FILE      another sanitized output of TRUE.csv,\n"
        "                          whose profiles the figure adds\n"
        "                          (repeatable; the report covers\n"
        "                          SANITIZED.csv only)\n"
        "  -h, --help              show this help\n"
        "\n"
        "The columns drift_ratio, knn_precision, knn_recall are appended\n"
        "when --config, --profile, -o or --poi is given (\"-\" when not\n"
        "computed). See docs/evaluation.md.\n",
        out);
}

/* ------------------------------------------------------------ storage */

static void free_data(eval_data *data)
{
    ts_name_index_free(data->users);
    ts_name_index_free(data->profiles);
    key_entry *key, *tmp_key;
    HASH_ITER(hh, data->keys, key, tmp_key) {
        HASH_DEL(data->keys, key);
        free(key);
    }
    free(data->rows);
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
        uint32_t user;
        if (ts_name_index_intern(data->users, row.user, &user) != 0 ||
            data->n_rows >= UINT32_MAX)
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
        r->user = user;
        r->order = (uint32_t)data->n_rows;
        r->ts_ms = row.ts_ms;
        r->lat = row.lat;
        r->lon = row.lon;
        r->predicted = -1;
        r->delta_set_size = NAN;
        r->profile_slot = PROFILE_UNNAMED;
        r->drifted = -1;
        r->knn_precision = NAN;
        r->knn_recall = NAN;
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

/* A field that is present, a number and finite. */
static int is_number(const char *field, double *out)
{
    return field != NULL && ts_csv_parse_number(field, out) == 1 &&
           isfinite(*out);
}

/* Which of the configuration's profiles a sanitized row names. */
static int profile_slot(const eval_data *data, const char *name)
{
    if (name[0] == '\0')
        return PROFILE_UNNAMED;
    if (data->pipeline == NULL)
        return PROFILE_UNKNOWN;
    size_t n = ts_pipeline_profile_count(data->pipeline);
    for (size_t i = 0; i < n; i++)
        if (strcmp(ts_pipeline_profile_at(data->pipeline, i)->name, name) ==
            0)
            return (int)i;
    return PROFILE_UNKNOWN;
}

static int load_sanitized(eval_data *data, const char *path)
{
    char err[ERR_MAX];
    ts_csv_reader *reader = ts_csv_open_table(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return -1;
    }
    int status = -1;
    int column[S_COLUMNS];
    for (int c = 0; c < S_COLUMNS; c++) {
        column[c] = ts_csv_column(reader, sanitized_columns[c]);
        if (column[c] < 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: header has no '%s' column "
                    "(expected %s)\n", path, sanitized_columns[c],
                    ts_csv_sanitized_header());
            goto out;
        }
    }
    int delta_column = ts_csv_column(reader, "delta_set_size");
    int profile_column = ts_csv_column(reader, "profile");
    data->has_delta = delta_column >= 0;
    uint64_t unmatched = 0, bad = 0;
    size_t line;
    int rc;
    while ((rc = ts_csv_next(reader, &line, err, sizeof err)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
            goto out;
        }
        const char *field[S_COLUMNS];
        double value[S_COLUMNS];
        int ok = rc == TS_CSV_ROW;
        for (int c = 0; ok && c < S_COLUMNS; c++)
            ok = (field[c] = ts_csv_field(reader, column[c])) != NULL;
        for (int c = S_TS; ok && c <= S_EPS_REMAINING; c++)
            ok = is_number(field[c], &value[c]);
        if (!ok || !(fabs(value[S_TS]) < 9.0e15)) {
            if (bad++ < 5)
                fprintf(stderr, "eval: %s: line %zu is not a sanitized row, "
                        "ignored\n", path, line);
            continue;
        }
        double lat = value[S_LAT], lon = value[S_LON];
        double eps_point = value[S_EPS_POINT];
        double eps_spent = value[S_EPS_SPENT];
        uint32_t user;
        key_entry *entry =
            ts_name_index_find(data->users, field[S_USER], &user)
                ? find_key(data, user, llround(value[S_TS] * 1000.0))
                : NULL;
        if (entry == NULL || entry->used == entry->count) {
            unmatched++;
            continue;
        }
        true_row *r = &data->rows[entry->first + entry->used++];
        r->matched = 1;
        r->released_lat = lat;
        r->released_lon = lon;
        r->eps_point = eps_point;
        const char *profile = ts_csv_field(reader, profile_column);
        if (profile != NULL)
            r->profile_slot = profile_slot(data, profile);
        if (ts_name_index_intern(data->profiles,
                                 profile != NULL ? profile : "",
                                 &r->profile_name) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            goto out;
        }
        r->error_m = ts_geo_distance_m(r->lat, r->lon, lat, lon);
        double budget = eps_spent + value[S_EPS_REMAINING];
        r->rho = budget > 0.0 ? eps_point / budget : NAN;
        r->window_start =
            eps_point > 0.0 &&
            fabs(eps_spent - eps_point) <= WINDOW_START_TOLERANCE * budget;
        const char *flag = field[S_PREDICTED];
        r->predicted = flag[0] == '\0' ? -1 : (strcmp(flag, "1") == 0);
        double size;
        if (is_number(ts_csv_field(reader, delta_column), &size) &&
            size >= 0.0)
            r->delta_set_size = size;
    }
    if (unmatched != 0)
        fprintf(stderr, "eval: %" PRIu64 " sanitized rows have no true row "
                "with their (user, ts); ignored\n", unmatched);
    status = 0;
out:
    ts_csv_close(reader);
    return status;
}

/* ------------------------------------------------------ drift replay */

/* The pipeline's budget window, from published timestamps: a window opens
 * at a user's first release and the next release at or after its end opens
 * the next one, which zero-fills the mechanism state (engine/pipeline.c).
 * Rejected rows never open a window and repeats (eps_point 0) never fall
 * on a window's first release, so only mechanism releases are followed. */
typedef struct window_tracker {
    int open;
    int64_t start_ms, length_ms;
} window_tracker;

static int window_advance(window_tracker *w, int64_t ts_ms, int64_t length_ms)
{
    if (w->open && ts_ms < w->start_ms + w->length_ms)
        return 0;
    w->open = 1;
    w->start_ms = ts_ms;
    w->length_ms = length_ms;
    return 1;
}

/* Replays the releases of rows[first .. end) (one user, release order) of
 * `profile` (slot `slot` of the configuration) on `state`. */
static void replay_user(const eval_data *data, true_row *rows, size_t first,
                        size_t end, const ts_profile *profile, int slot,
                        unsigned char *state, size_t state_size,
                        replay_counts *counts)
{
    const char *name = ts_name_index_name(data->users, rows[first].user);
    size_t name_len = strlen(name);
    window_tracker window = { 0, 0, 0 };
    int window_slot = -1;
    memset(state, 0, state_size);
    for (size_t i = first; i < end; i++) {
        true_row *r = &rows[i];
        if (!r->matched || !(r->eps_point > 0.0))
            continue;
        const ts_profile *row_profile =
            r->profile_slot >= 0
                ? ts_pipeline_profile_at(data->pipeline,
                                         (size_t)r->profile_slot)
                : profile;
        int row_slot = r->profile_slot >= 0 ? r->profile_slot : slot;
        int had_window = window.open;
        if (window_advance(&window, r->ts_ms, row_profile->window_ms)) {
            /* As the pipeline: a window of the same profile as the last
             * one may carry the state over, any other starts from zero. */
            if (had_window && window_slot == row_slot && row_slot == slot &&
                profile->ops->window_opens != NULL)
                profile->ops->window_opens(profile->mech, state);
            else
                memset(state, 0, state_size);
            window_slot = row_slot;
        }
        if (row_slot != slot)
            continue;
        ts_point published = {
            .lat = r->released_lat,
            .lon = r->released_lon,
            .ts_ms = r->ts_ms,
            .accuracy_m = NAN,
            .user = name,
            .user_len = name_len,
        };
        ts_point truth = published;
        truth.lat = r->lat;
        truth.lon = r->lon;
        int drifted = 0;
        unsigned delta_set_size = 0;
        if (profile->ops->replay(profile->mech, state, &published, &truth,
                            &drifted, &delta_set_size) != 0) {
            counts->errors++;
            continue;
        }
        counts->replayed++;
        r->drifted = drifted != 0;
        counts->drifted += (uint64_t)r->drifted;
        if (!(isfinite(r->delta_set_size) &&
              r->delta_set_size == (double)delta_set_size))
            counts->mismatches++;
    }
}

static int replay_drift(eval_data *data, const ts_profile *profile, int slot)
{
    size_t state_size = profile->ops->user_state_size != NULL
                            ? profile->ops->user_state_size(profile->mech)
                            : 0;
    unsigned char *state = malloc(state_size ? state_size : 1);
    if (state == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        return -1;
    }
    replay_counts counts = { 0, 0, 0, 0 };
    for (size_t first = 0; first < data->n_rows;) {
        size_t end = first;
        while (end < data->n_rows &&
               data->rows[end].user == data->rows[first].user)
            end++;
        replay_user(data, data->rows, first, end, profile, slot, state,
                    state_size, &counts);
        first = end;
    }
    free(state);
    fprintf(stderr,
            "eval: replayed %" PRIu64 " releases of profile '%s': drifted=%"
            PRIu64 " dss_mismatches=%" PRIu64 " errors=%" PRIu64 "\n",
            counts.replayed, profile->name, counts.drifted,
            counts.mismatches, counts.errors);
    if (counts.replayed == 0 && counts.errors == 0)
        fprintf(stderr, "eval: warning: no sanitized row of profile '%s'; "
                "no drift ratio\n", profile->name);
    if (counts.errors != 0)
        fprintf(stderr, "eval: warning: %" PRIu64 " releases could not be "
                "replayed; the drift ratio covers the others\n",
                counts.errors);
    if (counts.mismatches != 0)
        fprintf(stderr, "eval: warning: the replayed |ΔX| differs from the "
                "published delta_set_size on %" PRIu64 " of %" PRIu64
                " releases: eval's --config/--profile/-o are not the "
                "sanitizer's, or TRUE.csv lacks rows that were sanitized; "
                "the drift ratio is not the sanitizer's\n",
                counts.mismatches, counts.replayed);
    return 0;
}

/* --------------------------------------------------------------- kNN */

typedef struct poi_set {
    double *lat, *lon;
    size_t n, cap;
} poi_set;

/* A CSV with a header naming lat and lon columns; other columns ignored.
 * Invalid rows are counted and skipped; errors name lines, not fields. */
static int load_pois(const char *path, poi_set *pois)
{
    char err[ERR_MAX];
    ts_csv_reader *reader = ts_csv_open_table(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return -1;
    }
    int status = -1;
    int lat_column = ts_csv_column(reader, "lat|latitude");
    int lon_column = ts_csv_column(reader, "lon|lng|longitude");
    if (lat_column < 0 || lon_column < 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s: header has no '%s' column\n",
                path, lat_column < 0 ? "lat" : "lon");
        goto out;
    }
    uint64_t bad = 0;
    size_t line;
    int rc;
    while ((rc = ts_csv_next(reader, &line, err, sizeof err)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, err);
            goto out;
        }
        double lat, lon;
        if (rc != TS_CSV_ROW ||
            !is_number(ts_csv_field(reader, lat_column), &lat) ||
            !is_number(ts_csv_field(reader, lon_column), &lon) ||
            !ts_geo_valid(lat, lon)) {
            bad++;
            continue;
        }
        if (pois->n == pois->cap) {
            size_t cap = pois->cap ? pois->cap * 2 : 1024;
            double *grown_lat = realloc(pois->lat, cap * sizeof(double));
            if (grown_lat == NULL)
                goto oom;
            pois->lat = grown_lat;
            double *grown_lon = realloc(pois->lon, cap * sizeof(double));
            if (grown_lon == NULL)
                goto oom;
            pois->lon = grown_lon;
            pois->cap = cap;
        }
        pois->lat[pois->n] = lat;
        pois->lon[pois->n] = lon;
        pois->n++;
    }
    if (bad != 0)
        fprintf(stderr, "eval: %s: %" PRIu64 " rows without a valid lat/lon "
                "ignored\n", path, bad);
    status = 0;
    goto out;
oom:
    fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
out:
    ts_csv_close(reader);
    return status;
}

/* Fills knn_precision and knn_recall of every matched row. */
static int compute_knn(eval_data *data, const char *poi_path, size_t k,
                       size_t k_returned)
{
    poi_set pois = { NULL, NULL, 0, 0 };
    ts_poi_index *index = NULL;
    uint32_t *nearest = NULL;
    int status = -1;
    if (load_pois(poi_path, &pois) != 0)
        goto out;
    if (pois.n < k_returned) {
        fprintf(stderr, TS_TOOL_NAME ": %s has %zu usable POIs, fewer than "
                "the %zu of --knn-returned\n", poi_path, pois.n, k_returned);
        goto out;
    }
    index = ts_poi_index_new(pois.lat, pois.lon, pois.n);
    nearest = malloc((k + k_returned) * sizeof *nearest);
    if (index == NULL || nearest == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        goto out;
    }
    uint32_t *true_set = nearest, *returned_set = nearest + k;
    for (size_t i = 0; i < data->n_rows; i++) {
        true_row *r = &data->rows[i];
        if (!r->matched)
            continue;
        if (ts_poi_index_nearest(index, r->lat, r->lon, k, true_set) != k ||
            ts_poi_index_nearest(index, r->released_lat, r->released_lon,
                                 k_returned, returned_set) != k_returned) {
            fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
            goto out;
        }
        size_t common = 0;
        for (size_t a = 0; a < k; a++)
            for (size_t b = 0; b < k_returned; b++)
                if (true_set[a] == returned_set[b]) {
                    common++;
                    break;
                }
        r->knn_precision = (double)common / (double)k_returned;
        r->knn_recall = (double)common / (double)k;
    }
    status = 0;
out:
    free(nearest);
    ts_poi_index_free(index);
    free(pois.lat);
    free(pois.lon);
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
static size_t line_cells(const eval_data *data, const char *user,
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

static void print_line(int csv, const eval_data *data, const int *widths,
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
static int write_series(const eval_data *data, const char *path)
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
        const true_row *r = &data->rows[i];
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

static int report(eval_data *data, int csv)
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
                   is_overall ? OVERALL_LABEL
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
    print_line(csv, data, widths, OVERALL_LABEL, &printed[n_users]);
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

/* ------------------------------------------------- identity adversary */

typedef struct identity_cells {
    double side_m[MAX_IDENTITY_CELLS];
    size_t n;
} identity_cells;

static const char *take_cell(void *dest, const char *value)
{
    identity_cells *cells = dest;
    double side;
    if (ts_tool_parse_double(value, &side) != 0 || !(side > 0.0))
        return "needs a cell side in metres (a number > 0)";
    if (cells->n == MAX_IDENTITY_CELLS)
        return "is given too many times";
    cells->side_m[cells->n++] = side;
    return NULL;
}

/* The joined rows as the adversary sees them: the user and the released
 * point projected to metres (equirectangular about the centre of the
 * released points' bounding box, inference/grid.h), each on its side of
 * the split. */
static int identity_rows(const eval_data *data, ts_identity_obs *train,
                         size_t *n_train, ts_identity_obs *held_out,
                         size_t *n_held_out, double *distortion_sum)
{
    double lat_min = INFINITY, lat_max = -INFINITY;
    double lon_min = INFINITY, lon_max = -INFINITY;
    for (size_t i = 0; i < data->n_rows; i++) {
        const true_row *r = &data->rows[i];
        if (!r->matched)
            continue;
        lat_min = fmin(lat_min, r->released_lat);
        lat_max = fmax(lat_max, r->released_lat);
        lon_min = fmin(lon_min, r->released_lon);
        lon_max = fmax(lon_max, r->released_lon);
    }
    /* Only the projection of the grid is used: the adversary's cells are
     * keyed sparsely by the estimator, so one cell as wide as the whole
     * box keeps ts_grid_init's cell-count limit out of the way. The pad
     * keeps the box non-empty when every report is the same point. */
    const double pad = 1e-6;
    ts_grid grid;
    char err[ERR_MAX];
    if (ts_grid_init(&grid, fmax(lat_min - pad, -90.0),
                     fmax(lon_min - pad, -180.0), fmin(lat_max + pad, 90.0),
                     fmin(lon_max + pad, 180.0), 1e8, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " eval: the released points do not fit "
                "one planar projection: %s\n", err);
        return -1;
    }
    *n_train = *n_held_out = 0;
    *distortion_sum = 0.0;
    for (size_t i = 0; i < data->n_rows; i++) {
        const true_row *r = &data->rows[i];
        if (!r->matched)
            continue;
        const char *name = ts_name_index_name(data->users, r->user);
        ts_identity_obs obs = {
            r->user, ts_grid_project(&grid, r->released_lat, r->released_lon)
        };
        if (ts_identity_split(name, strlen(name), r->ts_ms))
            held_out[(*n_held_out)++] = obs;
        else
            train[(*n_train)++] = obs;
        *distortion_sum += r->error_m;
    }
    return 0;
}

static int identity_report(const eval_data *data, const identity_cells *cells)
{
    size_t n_users = ts_name_index_count(data->users);
    size_t n_matched = 0;
    for (size_t i = 0; i < data->n_rows; i++)
        n_matched += data->rows[i].matched != 0;
    ts_identity_obs *train = malloc((n_matched ? n_matched : 1) *
                                    sizeof *train);
    ts_identity_obs *held_out = malloc((n_matched ? n_matched : 1) *
                                       sizeof *held_out);
    int status = -1;
    if (train == NULL || held_out == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        goto out;
    }
    size_t n_train = 0, n_held_out = 0;
    double distortion_sum = 0.0;
    if (n_matched > 0 &&
        identity_rows(data, train, &n_train, held_out, &n_held_out,
                      &distortion_sum) != 0)
        goto out;
    fprintf(stderr, "eval --identity: %zu sanitized rows joined: %zu "
            "training (the adversary's MAP table), %zu held out (scored); "
            "split by a hash of (user, ts), "
            "docs/evaluation.md\n", n_matched, n_train, n_held_out);
    if (n_train == 0 || n_held_out == 0) {
        fprintf(stderr, TS_TOOL_NAME " eval: --identity needs sanitized rows "
                "on both sides of the split (%zu training, %zu held out)\n",
                n_train, n_held_out);
        goto out;
    }
    printf("cell_m,bayes_error,mi_bits,mean_distortion_m,users,rows\n");
    for (size_t c = 0; c < cells->n; c++) {
        ts_identity_result result;
        char err[ERR_MAX];
        if (ts_identity_estimate(train, n_train, held_out, n_held_out,
                                 n_users, cells->side_m[c], &result, err,
                                 sizeof err) != 0) {
            fprintf(stderr, TS_TOOL_NAME " eval: --cell-m %g: %s\n",
                    cells->side_m[c], err);
            goto out;
        }
        printf("%g,%.6f,%.6f,%.1f,%zu,%zu\n", cells->side_m[c],
               result.bayes_error, result.mi_bits,
               distortion_sum / (double)n_matched, result.users,
               n_matched);
        fprintf(stderr, "eval --identity: cell %g m: %zu cells hold "
                "training rows; %zu held-out rows fell outside them (guessed "
                "from the prior); resubstitution error (the paper's Eq. 27 "
                "on all rows) %.6f; first-order plug-in MI bias %.6f "
                "bits\n",
                cells->side_m[c], result.train_cells, result.eval_unseen,
                result.resubstitution_error, result.mi_bias_bits);
    }
    status = fflush(stdout) != 0 || ferror(stdout) ? -1 : 0;
    if (status != 0)
        fprintf(stderr, TS_TOOL_NAME ": cannot write the output\n");
out:
    free(train);
    free(held_out);
    return status;
}

/* -------------------------------------------------------------- plot */

typedef struct plot_options {
    const char *path;        /* NULL: no plot */
    ts_plot_size size;
    int size_given;
    const char *user;        /* NULL: the user with the most rows */
    const char *compared[MAX_COMPARED];
    size_t n_compared;
} plot_options;

static const char *take_compared(void *dest, const char *value)
{
    plot_options *plot = dest;
    if (plot->n_compared == MAX_COMPARED)
        return "is given too many times";
    plot->compared[plot->n_compared++] = value;
    return NULL;
}

/* The user the figure follows over time: --plot-user, which TRUE.csv must
 * have, else the one with the most sanitized rows (the first in TRUE.csv
 * on a tie). NULL (reported) when --plot-user names nobody. */
static const char *followed_user(const eval_data *data, const char *wanted)
{
    uint32_t user;
    if (wanted != NULL) {
        if (ts_name_index_find(data->users, wanted, &user))
            return wanted;
        fprintf(stderr, TS_TOOL_NAME " eval: --plot-user: TRUE.csv has no "
                "user '%s'\n", wanted);
        return NULL;
    }
    size_t n_users = ts_name_index_count(data->users);
    if (n_users == 0)
        return "";
    uint64_t *rows = calloc(n_users, sizeof *rows);
    if (rows == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        return NULL;
    }
    for (size_t i = 0; i < data->n_rows; i++)
        rows[data->rows[i].user] += data->rows[i].matched != 0;
    user = 0;
    for (uint32_t u = 1; u < n_users; u++)
        if (rows[u] > rows[user])
            user = u;
    free(rows);
    return ts_name_index_name(data->users, user);
}

static int add_to_figure(const eval_data *data, ts_eval_figure *figure,
                         const char *sanitized_path, const char *followed)
{
    uint32_t user;
    int have_user = ts_name_index_find(data->users, followed, &user);
    if (ts_eval_figure_begin_file(figure, sanitized_path) != 0)
        return -1;
    for (size_t i = 0; i < data->n_rows; i++) {
        const true_row *r = &data->rows[i];
        if (r->matched &&
            ts_eval_figure_add(
                figure, ts_name_index_name(data->profiles, r->profile_name),
                have_user && r->user == user, r->ts_ms, r->error_m,
                r->delta_set_size) != 0)
            return -1;
    }
    return 0;
}

/* Undoes the join with a sanitized file, so the true rows can be joined
 * with the next one. */
static void forget_sanitized(eval_data *data)
{
    for (size_t i = 0; i < data->n_rows; i++) {
        true_row *r = &data->rows[i];
        r->matched = 0;
        r->predicted = -1;
        r->window_start = 0;
        r->error_m = NAN;
        r->rho = NAN;
        r->delta_set_size = NAN;
        r->profile_slot = PROFILE_UNNAMED;
        r->profile_name = 0;
        r->drifted = -1;
        r->knn_precision = NAN;
        r->knn_recall = NAN;
    }
    key_entry *key, *tmp_key;
    HASH_ITER(hh, data->keys, key, tmp_key)
        key->used = 0;
}

/* The figure of SANITIZED.csv (already joined) and of each --compare file,
 * joined in turn. Comes last: it undoes SANITIZED.csv's join. */
static int write_plot(eval_data *data, const char *sanitized_path,
                      const plot_options *plot, const char *followed)
{
    ts_eval_figure *figure = ts_eval_figure_new(followed);
    int status = -1;
    if (figure == NULL ||
        add_to_figure(data, figure, sanitized_path, followed) != 0)
        goto oom;
    for (size_t i = 0; i < plot->n_compared; i++) {
        forget_sanitized(data);
        if (load_sanitized(data, plot->compared[i]) != 0)
            goto out;
        if (add_to_figure(data, figure, plot->compared[i], followed) != 0)
            goto oom;
    }
    char err[ERR_MAX];
    if (ts_eval_figure_write(figure, plot->path, plot->size, err,
                             sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " eval: --plot: %s\n", err);
        goto out;
    }
    status = 0;
    goto out;
oom:
    fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
out:
    ts_eval_figure_free(figure);
    return status;
}

/* The profile to replay, found in its pipeline as slot *slot; NULL
 * (reported) when it is not a delta-location-set profile. */
static const ts_profile *replayable(const ts_pipeline *pipeline,
                                    const ts_profile *profile, int *slot)
{
    if (profile->ops->replay == NULL) {
        fprintf(stderr, "eval: profile '%s' uses mechanism %s, which has "
                "no replay: no drift ratio\n", profile->name,
                profile->ops->name);
        return NULL;
    }
    size_t n = ts_pipeline_profile_count(pipeline);
    for (size_t i = 0; i < n; i++)
        if (ts_pipeline_profile_at(pipeline, i) == profile)
            *slot = (int)i;
    return profile;
}

int cmd_eval(int argc, char **argv)
{
    static const char *const formats[] = { "table", "csv", NULL };
    int csv = 0;
    const char *series_path = NULL;
    const char *poi_path = NULL;
    uint64_t knn = DEFAULT_KNN, knn_returned = 0;
    int identity = 0, format_given = 0, knn_given = 0;
    identity_cells cells = { .n = 0 };
    plot_options plot = {
        .size = { TS_PLOT_DEFAULT_WIDTH, TS_PLOT_DEFAULT_HEIGHT },
    };
    int plot_user_given = 0;
    const ts_tool_option options[] = {
        { "format", 'f', TS_ARG_CHOICE, .dest = &csv, .given = &format_given,
          .choices = formats },
        { "series", 's', TS_ARG_STRING, .dest = &series_path },
        { "poi", 0, TS_ARG_STRING, .dest = &poi_path },
        { "knn", 0, TS_ARG_U64, .dest = &knn, .given = &knn_given, .min = 1,
          .max = UINT32_MAX },
        { "knn-returned", 0, TS_ARG_U64, .dest = &knn_returned,
          .given = &knn_given, .min = 1, .max = UINT32_MAX },
        { "identity", 0, TS_ARG_FLAG, .dest = &identity },
        { "cell-m", 0, TS_ARG_HANDLER, .dest = &cells, .handle = take_cell },
        { "plot", 0, TS_ARG_STRING, .dest = &plot.path },
        { "plot-size", 0, TS_ARG_HANDLER, .dest = &plot.size,
          .given = &plot.size_given, .handle = ts_plot_take_size },
        { "plot-user", 0, TS_ARG_STRING, .dest = &plot.user,
          .given = &plot_user_given },
        { "compare", 0, TS_ARG_HANDLER, .dest = &plot,
          .handle = take_compared },
        { 0 },
    };
    const ts_tool_command command = {
        "eval", TS_OPT_CONFIG | TS_OPT_OVERRIDE | TS_OPT_PROFILE, options, 2,
        "TRUE.csv and SANITIZED.csv", usage,
    };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    const char *true_path = argv[first], *sanitized_path = argv[first + 1];
    if (cells.n != 0 && !identity) {
        fprintf(stderr, TS_TOOL_NAME " eval: --cell-m needs --identity\n");
        return 1;
    }
    if (identity &&
        ((format_given && !csv) || series_path != NULL || poi_path != NULL ||
         knn_given || common.config_path != NULL || common.profile != NULL ||
         common.n_overrides != 0)) {
        fprintf(stderr, TS_TOOL_NAME " eval: --identity writes CSV and takes "
                "only --cell-m\n");
        return 1;
    }
    if (plot.path == NULL &&
        (plot.size_given || plot_user_given || plot.n_compared != 0)) {
        fprintf(stderr, TS_TOOL_NAME " eval: --plot-size, --plot-user and "
                "--compare need --plot\n");
        return 1;
    }
    ts_plot_format plot_format;
    if (plot.path != NULL &&
        ts_plot_format_of(plot.path, &plot_format) != 0) {
        fprintf(stderr, TS_TOOL_NAME " eval: --plot %s: the file name must "
                "end in .svg or .png\n", plot.path);
        return 1;
    }
    if (identity && plot.path != NULL) {
        fprintf(stderr, TS_TOOL_NAME " eval: --identity takes no --plot\n");
        return 1;
    }
    if (identity && cells.n == 0) {
        cells.n = sizeof DEFAULT_IDENTITY_CELLS /
                  sizeof *DEFAULT_IDENTITY_CELLS;
        memcpy(cells.side_m, DEFAULT_IDENTITY_CELLS,
               sizeof DEFAULT_IDENTITY_CELLS);
    }
    if (knn_returned == 0)
        knn_returned = knn;
    if (knn_returned < knn) {
        fprintf(stderr, TS_TOOL_NAME " eval: --knn-returned must be at least "
                "--knn\n");
        return 1;
    }
    int stdin_uses = (strcmp(true_path, "-") == 0) +
                     (strcmp(sanitized_path, "-") == 0) +
                     (poi_path != NULL && strcmp(poi_path, "-") == 0);
    for (size_t i = 0; i < plot.n_compared; i++)
        stdin_uses += strcmp(plot.compared[i], "-") == 0;
    if (stdin_uses > 1) {
        fprintf(stderr, TS_TOOL_NAME " eval: only one of the files can be "
                "stdin\n");
        return 1;
    }

    eval_data data;
    memset(&data, 0, sizeof data);
    int status = 1;
    ts_tool_pipeline tool = { 0 };
    const ts_profile *replay_profile = NULL;
    int replay_slot = PROFILE_UNKNOWN;
    data.users = ts_name_index_new();
    data.profiles = ts_name_index_new();
    if (data.users == NULL || data.profiles == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        goto out;
    }
    if (common.config_path != NULL || common.profile != NULL ||
        common.n_overrides != 0) {
        /* The pipeline only lends its profiles here; nothing is released,
         * so its generator is never drawn from. */
        common.seed_given = 1;
        if (ts_tool_pipeline_open(&common, &tool) != 0)
            goto out;
        replay_profile = replayable(tool.pipeline, tool.profile, &replay_slot);
        data.pipeline = tool.pipeline;
    }
    data.has_drift = replay_profile != NULL;
    /* The layout depends on the options only, not on the profile found. */
    data.has_extra = tool.pipeline != NULL || poi_path != NULL;
    int loaded = load_truth(&data, true_path) == 0 &&
                 load_sanitized(&data, sanitized_path) == 0;
    const char *followed = NULL;
    if (loaded && plot.path != NULL &&
        (followed = followed_user(&data, plot.user)) == NULL)
        loaded = 0;
    if (loaded && identity) {
        if (identity_report(&data, &cells) == 0)
            status = 0;
    } else if (loaded &&
        (replay_profile == NULL ||
         replay_drift(&data, replay_profile, replay_slot) == 0) &&
        (poi_path == NULL ||
         compute_knn(&data, poi_path, (size_t)knn, (size_t)knn_returned) ==
             0) &&
        report(&data, csv) == 0 &&
        (series_path == NULL || write_series(&data, series_path) == 0) &&
        (plot.path == NULL ||
         write_plot(&data, sanitized_path, &plot, followed) == 0))
        status = 0;
out:
    free_data(&data);
    ts_tool_pipeline_close(&tool);
    return status;
}
