/* tracesan eval: utility and budget figures of a sanitized trace against
 * the true one, as in Section 5 of the predictive-mechanism paper. The
 * command reads its options and runs the pieces, each in its module:
 *   tools/eval_join.h      the true trace joined with the sanitized one
 *                          by (user, ts)
 *   tools/eval_metrics.h   evaluation-only figures per release, appended
 *                          as three columns ("-" when not computed) when
 *                          --config/--profile/-o or --poi is given: the
 *                          drift ratio of a pim or lm-delta profile,
 *                          replayed from the published points, and the
 *                          kNN precision and recall against --poi
 *   tools/eval_report.h    the report per user and overall, and --series
 *   tools/eval_identity.h  --identity: the identity adversary of Romanelli
 *                          et al. instead of the report
 * Repeats (on_exhausted = "repeat") are sanitized rows spending 0 and would
 * count as covered; evaluate with "drop".
 *
 * --plot FILE draws, with cairo (tools/eval_figure.h), the error CDF per
 * profile, the error over time of one user and, for delta-location-set
 * profiles, |ΔX| over time; --compare adds the profiles of more sanitized
 * outputs of the same true trace to the figure (not to the report).
 *
 * The output holds aggregates only, never a coordinate; so does the plot.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/eval_figure.h"
#include "tools/eval_identity.h"
#include "tools/eval_join.h"
#include "tools/eval_metrics.h"
#include "tools/eval_report.h"
#include "tools/plot.h"

#define DEFAULT_KNN 5
#define MAX_COMPARED 16

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
        "row is labelled " TS_EVAL_OVERALL_LABEL ". Evaluate runs made with\n"
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
static const char *followed_user(const ts_eval_data *data, const char *wanted)
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

static int add_to_figure(const ts_eval_data *data, ts_eval_figure *figure,
                         const char *sanitized_path, const char *followed)
{
    uint32_t user;
    int have_user = ts_name_index_find(data->users, followed, &user);
    if (ts_eval_figure_begin_file(figure, sanitized_path) != 0)
        return -1;
    for (size_t i = 0; i < data->n_rows; i++) {
        const ts_eval_row *r = &data->rows[i];
        if (r->matched &&
            ts_eval_figure_add(
                figure, ts_name_index_name(data->profiles, r->profile_name),
                have_user && r->user == user, r->ts_ms, r->error_m,
                r->delta_set_size) != 0)
            return -1;
    }
    return 0;
}

/* The figure of SANITIZED.csv (already joined) and of each --compare file,
 * joined in turn. Comes last: it undoes SANITIZED.csv's join. */
static int write_plot(ts_eval_data *data, const char *sanitized_path,
                      const plot_options *plot, const char *followed)
{
    ts_eval_figure *figure = ts_eval_figure_new(followed);
    int status = -1;
    if (figure == NULL ||
        add_to_figure(data, figure, sanitized_path, followed) != 0)
        goto oom;
    for (size_t i = 0; i < plot->n_compared; i++) {
        ts_eval_forget_sanitized(data);
        if (ts_eval_load_sanitized(data, plot->compared[i]) != 0)
            goto out;
        if (add_to_figure(data, figure, plot->compared[i], followed) != 0)
            goto oom;
    }
    char err[TS_EVAL_ERR_MAX];
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

int cmd_eval(int argc, char **argv)
{
    static const char *const formats[] = { "table", "csv", NULL };
    int csv = 0;
    const char *series_path = NULL;
    const char *poi_path = NULL;
    uint64_t knn = DEFAULT_KNN, knn_returned = 0;
    int identity = 0, format_given = 0, knn_given = 0;
    ts_tool_numbers cells = { .n = 0 };
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
        { "cell-m", 0, TS_ARG_POSITIVE_EACH, .dest = &cells },
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
    if (identity && cells.n == 0)
        ts_eval_identity_defaults(&cells);
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

    ts_eval_data data;
    memset(&data, 0, sizeof data);
    int status = 1;
    ts_tool_pipeline tool = { 0 };
    const ts_profile *replay_profile = NULL;
    int replay_slot = TS_EVAL_PROFILE_UNKNOWN;
    data.profiles = ts_name_index_new();
    if (data.profiles == NULL) {
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
        replay_profile =
            ts_eval_replayable(tool.pipeline, tool.profile, &replay_slot);
        data.pipeline = tool.pipeline;
    }
    data.has_drift = replay_profile != NULL;
    /* The layout depends on the options only, not on the profile found. */
    data.has_extra = tool.pipeline != NULL || poi_path != NULL;
    int loaded = ts_eval_load_truth(&data, true_path) == 0 &&
                 ts_eval_load_sanitized(&data, sanitized_path) == 0;
    const char *followed = NULL;
    if (loaded && plot.path != NULL &&
        (followed = followed_user(&data, plot.user)) == NULL)
        loaded = 0;
    if (loaded && identity) {
        if (ts_eval_identity_report(&data, &cells) == 0)
            status = 0;
    } else if (loaded &&
        (replay_profile == NULL ||
         ts_eval_replay_drift(&data, replay_profile, replay_slot) == 0) &&
        (poi_path == NULL ||
         ts_eval_knn(&data, poi_path, (size_t)knn, (size_t)knn_returned) ==
             0) &&
        ts_eval_report(&data, csv) == 0 &&
        (series_path == NULL ||
         ts_eval_write_series(&data, series_path) == 0) &&
        (plot.path == NULL ||
         write_plot(&data, sanitized_path, &plot, followed) == 0))
        status = 0;
out:
    ts_eval_data_free(&data);
    ts_tool_pipeline_close(&tool);
    return status;
}
