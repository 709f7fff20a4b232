/* tracesan learn: a Markov mobility model from CSV traces.
 *
 * Reads user,ts,lat,lon rows (tools/csv.h), learns the popular model and
 * optionally one personal model per user (inference/learn.h), and writes a
 * model file (inference/model_file.h) to --output FILE or to stdout. Prints
 * the model's size and the learning time on stderr. Messages never show
 * coordinates: a skipped row is named by its line number only.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uthash.h>

#include "inference/grid.h"
#include "inference/learn.h"
#include "inference/model_file.h"
#include "geometry/geo.h"
#include "tools/commands.h"
#include "tools/csv.h"

#define ERR_MAX 512
#define DEFAULT_MAX_SPEED_KMH 120.0
#define DEFAULT_ALPHA 0.01
#define DEFAULT_BACKOFF 20.0
#define MIN_DEFAULT_GAP_S 60.0
#define MAX_REPORTED_BAD_ROWS 10

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " learn --region LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "                      --cell-m METRES --tick-s SECONDS [options]\n"
        "                      [--output FILE] IN.csv\n"
        "\n"
        "Learns a Markov mobility model over a grid of square cells from the\n"
        "traces in IN.csv (header naming user,ts,lat,lon; gzip read\n"
        "transparently; '-' reads stdin): each trace is resampled at the tick,\n"
        "cell transitions are counted and smoothed toward the cells reachable\n"
        "at the maximum speed within one tick. See docs/inference.md.\n"
        "\n"
        "options:\n"
        "      --region LAT_MIN,LON_MIN,LAT_MAX,LON_MAX\n"
        "                          bounding box, degrees\n"
        "      --cell-m METRES     side of a cell\n"
        "      --tick-s SECONDS    model tick: one step of the transition\n"
        "                          matrix\n"
        "      --max-speed-kmh V   fastest plausible movement (default 120)\n"
        "      --max-gap-s S       fixes further apart break a trace\n"
        "                          (default: the larger of 60 s and 2 ticks)\n"
        "      --alpha A           smoothing pseudo-count per reachable cell\n"
        "                          (uniform) or per offset of the displacement\n"
        "                          kernel (default 0.01; 0 disables smoothing)\n"
        "      --smoothing displacement|uniform\n"
        "                          a row's pseudo-counts follow the kernel of\n"
        "                          all training moves (default), or alpha per\n"
        "                          reachable cell evenly (the first learner)\n"
        "      --backoff B         displacement: pseudo-counts per row drawn\n"
        "                          from the kernel (default 20)\n"
        "      --held-out-users LIST\n"
        "                          learn without these users and report how\n"
        "                          well the model predicts their traces\n"
        "                          (mean log-likelihood per transition)\n"
        "      --per-user          also learn one personal model per user\n"
        "                          (users without transitions use the popular\n"
        "                          model)\n"
        "      --users LIST        learn only from these users\n"
        "                          (comma-separated)\n"
        "      --exclude-users LIST\n"
        "                          learn from every user except these\n"
        "      --output FILE       write the model to FILE (atomically, by\n"
        "                          rename) instead of stdout; '-o FILE' is\n"
        "                          deprecated\n"
        "  -h, --help              show this help\n"
        "\n"
        "stderr: learning statistics, the model's size and the learning time.\n"
        "Exit status: 0 on success, 1 on a usage, input or output error.\n",
        out);
}

/* ------------------------------------------------------------- user ids */

typedef struct user_entry {
    char *id;
    uint32_t index;
    UT_hash_handle hh;
} user_entry;

static user_entry *user_find(user_entry *table, const char *id)
{
    user_entry *e = NULL;
    HASH_FIND_STR(table, id, e);
    return e;
}

/* Adds id with the next index; NULL on allocation failure. */
static user_entry *user_add(user_entry **table, const char *id,
                            uint32_t index)
{
    user_entry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->id = strdup(id);
    if (e->id == NULL) {
        free(e);
        return NULL;
    }
    e->index = index;
    HASH_ADD_KEYPTR(hh, *table, e->id, strlen(e->id), e);
    if (e->hh.tbl == NULL) { /* uthash could not allocate its table */
        free(e->id);
        free(e);
        return NULL;
    }
    return e;
}

static void users_free(user_entry **table)
{
    user_entry *e, *tmp;
    HASH_ITER(hh, *table, e, tmp) {
        HASH_DEL(*table, e);
        free(e->id);
        free(e);
    }
}

/* Splits a comma-separated list into a set. -1 on an empty item or
 * allocation failure. */
static int parse_user_list(const char *list, user_entry **set)
{
    char *copy = strdup(list);
    if (copy == NULL)
        return -1;
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        if (*item == '\0' || user_find(*set, item) != NULL)
            continue;
        if (user_add(set, item, 0) == NULL) {
            rc = -1;
            break;
        }
    }
    if (rc == 0 && HASH_COUNT(*set) == 0)
        rc = -1;
    free(copy);
    return rc;
}

/* --------------------------------------------------------------- points */

typedef struct point_array {
    ts_learn_point *v;
    size_t count, cap;
} point_array;

static int points_push(point_array *a, ts_learn_point p)
{
    ts_learn_point *v =
        ts_tool_reserve(a->v, a->count, &a->cap, sizeof *v, 65536);
    if (v == NULL)
        return -1;
    a->v = v;
    a->v[a->count++] = p;
    return 0;
}

typedef struct sortable_point {
    ts_learn_point p;
    size_t seq;
} sortable_point;

static int compare_points(const void *a, const void *b)
{
    const sortable_point *x = a, *y = b;
    if (x->p.user != y->p.user)
        return x->p.user < y->p.user ? -1 : 1;
    if (x->p.ts_s != y->p.ts_s)
        return x->p.ts_s < y->p.ts_s ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sorts by user then time, keeping file order among equal times (so "the
 * later fix wins" means later in the file). */
static int sort_points(point_array *a)
{
    int sorted = 1;
    for (size_t i = 1; i < a->count && sorted; i++)
        if (a->v[i].user < a->v[i - 1].user ||
            (a->v[i].user == a->v[i - 1].user &&
             a->v[i].ts_s < a->v[i - 1].ts_s))
            sorted = 0;
    if (sorted)
        return 0;
    sortable_point *s = malloc(a->count * sizeof *s);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < a->count; i++)
        s[i] = (sortable_point){a->v[i], i};
    qsort(s, a->count, sizeof *s, compare_points);
    for (size_t i = 0; i < a->count; i++)
        a->v[i] = s[i].p;
    free(s);
    return 0;
}

/* ------------------------------------------------------------------ main */

/* --region: four finite numbers. */
static const char *take_region(void *dest, const char *text)
{
    double *v = dest;
    static const char *const needs = "needs LAT_MIN,LON_MIN,LAT_MAX,LON_MAX";
    char *copy = strdup(text);
    if (copy == NULL)
        return needs;
    int n = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        if (n == 4 || ts_tool_parse_double(item, &v[n]) != 0) {
            free(copy);
            return needs;
        }
        n++;
    }
    free(copy);
    return n == 4 ? NULL : needs;
}

static const char *take_user_list(void *dest, const char *list)
{
    user_entry **set = dest;
    if (*set != NULL)
        return "is given twice";
    return parse_user_list(list, set) == 0
               ? NULL
               : "needs a non-empty comma-separated list of users";
}

/* -o meant --output here before every other command took -o for an
 * override; old scripts keep working, warned. */
static const char *take_deprecated_output(void *dest, const char *path)
{
    fprintf(stderr, TS_TOOL_NAME " learn: -o FILE is deprecated, use "
            "--output FILE\n");
    *(const char **)dest = path;
    return NULL;
}

int cmd_learn(int argc, char **argv)
{
    double region[4] = {NAN, NAN, NAN, NAN};
    double cell_m = NAN, max_speed_kmh = DEFAULT_MAX_SPEED_KMH;
    ts_learn_params params = {.tick_s = NAN, .max_gap_s = NAN,
                              .alpha = DEFAULT_ALPHA};
    int per_user = 0;
    const char *output = NULL;
    user_entry *only = NULL, *exclude = NULL, *held_out = NULL;
    static const char *const smoothing_names[] = {"uniform", "displacement",
                                                  NULL};
    int smoothing = TS_LEARN_SMOOTH_DISPLACEMENT;
    params.backoff = DEFAULT_BACKOFF;
    int status = 1;
    const ts_tool_option options[] = {
        {"region", 0, TS_ARG_HANDLER, .dest = region, .handle = take_region},
        {"cell-m", 0, TS_ARG_NUMBER, .dest = &cell_m},
        {"tick-s", 0, TS_ARG_NUMBER, .dest = &params.tick_s},
        {"max-speed-kmh", 0, TS_ARG_POSITIVE, .dest = &max_speed_kmh},
        {"max-gap-s", 0, TS_ARG_POSITIVE, .dest = &params.max_gap_s},
        {"alpha", 0, TS_ARG_NON_NEGATIVE, .dest = &params.alpha},
        {"smoothing", 0, TS_ARG_CHOICE, .dest = &smoothing,
         .choices = smoothing_names},
        {"backoff", 0, TS_ARG_NON_NEGATIVE, .dest = &params.backoff},
        {"held-out-users", 0, TS_ARG_HANDLER, .dest = &held_out,
         .handle = take_user_list},
        {"per-user", 0, TS_ARG_FLAG, .dest = &per_user},
        {"users", 0, TS_ARG_HANDLER, .dest = &only, .handle = take_user_list},
        {"exclude-users", 0, TS_ARG_HANDLER, .dest = &exclude,
         .handle = take_user_list},
        {"output", 0, TS_ARG_STRING, .dest = &output},
        {NULL, 'o', TS_ARG_HANDLER, .dest = &output,
         .handle = take_deprecated_output},
        {0},
    };
    const ts_tool_command command = {"learn", 0, options, 1,
                                     "one input file", usage};
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0) {
        status = first == 0 ? 0 : 1;
        goto out;
    }
    if (!isfinite(region[0]) || !isfinite(cell_m) ||
        !isfinite(params.tick_s)) {
        fprintf(stderr, TS_TOOL_NAME
                " learn: --region, --cell-m and --tick-s are required\n");
        usage(stderr);
        goto out;
    }
    if (only != NULL && exclude != NULL) {
        fprintf(stderr, TS_TOOL_NAME
                " learn: --users and --exclude-users are exclusive\n");
        goto out;
    }
    if (output == NULL && isatty(STDOUT_FILENO)) {
        fprintf(stderr, TS_TOOL_NAME
                " learn: refusing to write a binary model to a terminal: "
                "redirect stdout or use --output FILE\n");
        goto out;
    }
    params.max_speed_mps = max_speed_kmh / 3.6;
    params.smoothing = (ts_learn_smoothing)smoothing;
    if (!isfinite(params.max_gap_s))
        params.max_gap_s = fmax(MIN_DEFAULT_GAP_S, 2.0 * params.tick_s);

    char err[ERR_MAX];
    ts_grid grid;
    if (ts_grid_init(&grid, region[0], region[1], region[2], region[3],
                     cell_m, err, sizeof err) != 0 ||
        ts_learn_params_check(&params, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " learn: %s\n", err);
        goto out;
    }

    /* Read. */
    double started = ts_tool_now();
    const char *path = argv[first];
    ts_csv_reader *reader = ts_csv_open(path, err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME " learn: %s\n", err);
        goto out;
    }
    user_entry *users = NULL;
    point_array points = {0}, held = {0};
    user_entry *held_users = NULL;
    uint32_t held_count = 0;
    char **user_ids = NULL;
    size_t user_ids_cap = 0;
    uint64_t rows = 0, bad_rows = 0, invalid = 0, filtered = 0;
    ts_learned popular = {0};
    ts_learned *personal = NULL;
    uint32_t user_count = 0;
    int read_failed = 0;
    for (;;) {
        ts_csv_row row;
        int r = ts_csv_read(reader, &row, err, sizeof err);
        if (r == TS_CSV_EOF)
            break;
        if (r == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME " learn: %s\n", err);
            read_failed = 1;
            break;
        }
        rows++;
        if (r == TS_CSV_BAD_ROW) {
            if (bad_rows++ < MAX_REPORTED_BAD_ROWS)
                fprintf(stderr, TS_TOOL_NAME " learn: line %zu: skipped: %s\n",
                        row.line, err);
            continue;
        }
        if ((only != NULL && user_find(only, row.user) == NULL) ||
            (exclude != NULL && user_find(exclude, row.user) != NULL)) {
            filtered++;
            continue;
        }
        if (row.user[0] == '\0' || !isfinite(row.ts_s) ||
            !ts_geo_valid(row.lat, row.lon)) {
            invalid++;
            continue;
        }
        if (held_out != NULL && user_find(held_out, row.user) != NULL) {
            /* Scored, never learnt from. */
            user_entry *h = user_find(held_users, row.user);
            if (h == NULL && (h = user_add(&held_users, row.user,
                                           held_count++)) == NULL) {
                fprintf(stderr, TS_TOOL_NAME " learn: out of memory\n");
                read_failed = 1;
                break;
            }
            ts_learn_point hp = {.user = h->index, .ts_s = row.ts_s,
                                 .lat = row.lat, .lon = row.lon};
            if (points_push(&held, hp) != 0) {
                fprintf(stderr, TS_TOOL_NAME " learn: out of memory\n");
                read_failed = 1;
                break;
            }
            filtered++;
            continue;
        }
        user_entry *u = user_find(users, row.user);
        if (u == NULL) {
            if (user_count == UINT32_MAX - 1) {
                fprintf(stderr, TS_TOOL_NAME " learn: too many users\n");
                read_failed = 1;
                break;
            }
            char **grown = ts_tool_reserve(user_ids, user_count,
                                           &user_ids_cap, sizeof *grown, 64);
            if (grown == NULL) {
                fprintf(stderr, TS_TOOL_NAME " learn: out of memory\n");
                read_failed = 1;
                break;
            }
            user_ids = grown;
            u = user_add(&users, row.user, user_count);
            if (u == NULL) {
                fprintf(stderr, TS_TOOL_NAME " learn: out of memory\n");
                read_failed = 1;
                break;
            }
            user_ids[user_count++] = u->id;
        }
        ts_learn_point p = {.user = u->index, .ts_s = row.ts_s,
                            .lat = row.lat, .lon = row.lon};
        if (points_push(&points, p) != 0) {
            fprintf(stderr, TS_TOOL_NAME " learn: out of memory\n");
            read_failed = 1;
            break;
        }
    }
    ts_csv_close(reader);
    if (read_failed)
        goto cleanup;
    if (bad_rows > MAX_REPORTED_BAD_ROWS)
        fprintf(stderr, TS_TOOL_NAME " learn: ... %" PRIu64
                " unparsable rows skipped in all\n",
                bad_rows);
    if (sort_points(&points) != 0 || sort_points(&held) != 0) {
        fprintf(stderr, TS_TOOL_NAME " learn: out of memory\n");
        goto cleanup;
    }
    double read_s = ts_tool_now() - started;

    /* Learn. */
    started = ts_tool_now();
    ts_learn_stats stats;
    if (ts_learn_popular(&grid, &params, points.v, points.count, &popular,
                         &stats, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " learn: %s\n", err);
        goto cleanup;
    }
    if (per_user && user_count > 0) {
        personal = calloc(user_count, sizeof *personal);
        if (personal == NULL ||
            ts_learn_personal(&grid, &params, points.v, points.count,
                              user_count, &popular.markov, personal, err,
                              sizeof err) != 0) {
            fprintf(stderr, TS_TOOL_NAME " learn: %s\n",
                    personal == NULL ? "out of memory" : err);
            goto cleanup;
        }
    }
    double learn_s = ts_tool_now() - started;

    if (held_out != NULL) {
        ts_learn_fit fit;
        if (ts_learn_fit_model(&grid, &params, &popular.markov, held.v,
                               held.count, &fit, err, sizeof err) != 0) {
            fprintf(stderr, TS_TOOL_NAME " learn: held out: %s\n", err);
            goto cleanup;
        }
        /* Impossible transitions have likelihood 0: reported apart, as
         * their share, rather than as an infinite mean. */
        uint64_t possible = fit.transitions - fit.impossible;
        fprintf(stderr,
                "learn: held out: users=%u transitions=%" PRIu64
                " impossible=%" PRIu64 " (%.4f) mean_log_lik=%.4f"
                " visits=%" PRIu64 " mean_initial_log_lik=%.4f\n",
                held_count, fit.transitions, fit.impossible,
                fit.transitions ? (double)fit.impossible /
                                      (double)fit.transitions
                                : 0.0,
                possible ? fit.log_lik / (double)possible : 0.0, fit.visits,
                fit.visits ? fit.initial_log_lik / (double)fit.visits : 0.0);
    }

    /* Write. */
    ts_model_source pop = {.user = NULL, .markov = &popular.markov,
                           .transitions = popular.transitions};
    ts_model_source *sources = NULL;
    size_t n_sources = 0;
    if (personal != NULL) {
        sources = calloc(user_count, sizeof *sources);
        if (sources == NULL) {
            fprintf(stderr, TS_TOOL_NAME " learn: out of memory\n");
            goto cleanup;
        }
        for (uint32_t u = 0; u < user_count; u++)
            if (personal[u].markov.cell_count != 0)
                sources[n_sources++] = (ts_model_source){
                    .user = user_ids[u], .user_len = strlen(user_ids[u]),
                    .markov = &personal[u].markov,
                    .transitions = personal[u].transitions};
    }
    uint64_t bytes = 0;
    int wrc = output != NULL
                  ? ts_model_write_file(output, &grid, params.max_speed_mps,
                                        &pop, sources, n_sources, &bytes, err,
                                        sizeof err)
                  : ts_model_write(stdout, &grid, params.max_speed_mps, &pop,
                                   sources, n_sources, &bytes, err,
                                   sizeof err);
    free(sources);
    if (wrc != 0) {
        fprintf(stderr, TS_TOOL_NAME " learn: %s\n", err);
        goto cleanup;
    }
    fprintf(stderr,
            "learn: rows=%" PRIu64 " used=%zu invalid=%" PRIu64
            " unparsable=%" PRIu64 " filtered=%" PRIu64 " users=%u\n",
            rows, points.count, invalid, bad_rows, filtered, user_count);
    fprintf(stderr,
            "learn: positions=%" PRIu64 " outside=%" PRIu64 " gaps=%" PRIu64
            " transitions=%" PRIu64 " unreachable=%" PRIu64
            " reachable_per_cell=%u\n",
            stats.positions, stats.outside, stats.gaps, stats.transitions,
            stats.unreachable, stats.reachable);
    fprintf(stderr,
            "learn: model cells=%u (%u x %u, %.0f m) tick=%gs nnz=%" PRIu64
            " personal=%zu bytes=%" PRIu64 " (%.1f MiB) read=%.3fs "
            "learn=%.3fs\n",
            grid.cell_count, grid.cols, grid.rows, grid.cell_m, params.tick_s,
            popular.markov.nnz, n_sources, bytes,
            (double)bytes / (1024.0 * 1024.0), read_s, learn_s);
    status = 0;

cleanup:
    ts_learned_free(&popular);
    if (personal != NULL) {
        for (uint32_t u = 0; u < user_count; u++)
            ts_learned_free(&personal[u]);
        free(personal);
    }
    free(user_ids);
    users_free(&users);
    users_free(&held_users);
    free(points.v);
    free(held.v);
out:
    users_free(&only);
    users_free(&exclude);
    users_free(&held_out);
    return status;
}
