/* tracesan cip-loss: the worst-case CIP loss of Gaussian noise against RBF
 * Gaussian-process priors for one trace (inference/cip.h), at given length
 * scales or certified over every length scale up to one, so that an
 * operator can choose sigma_z before deploying. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/cip.h"
#include "tools/commands.h"
#include "tools/plot.h"

#define ERR_MAX 256
#define MAX_VALUES 64
#define DEFAULT_RADIUS_M 100.0
#define DEFAULT_RENYI_ORDER 2.0
#define DEFAULT_SIGMA_X_M 1.0
#define EPSILON_REL_TOL 1e-6

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " cip-loss (--points D --interval-s T |\n"
        "                          --times T1,T2,...)\n"
        "                         (--length-scale-s L... | --independent)\n"
        "                         (--sigma-z-m S... | --epsilon E)\n"
        "                         [--secret every_other|all |\n"
        "                          --secret-points I,J,...]\n"
        "                         [--every-length-scale] [--radius-m R]\n"
        "                         [--renyi-order LAMBDA] [--sigma-x-m X]\n"
        "                         [--plot FILE.svg|FILE.png [--plot-size WxH]]\n"
        "\n"
        "Worst-case Conditional Inferential Privacy loss (Meehan & Chaudhuri,\n"
        "Eq. 4) of adding N(0, sigma_z^2) noise per axis to each point of one\n"
        "trace, against an RBF Gaussian-process prior of length scale L\n"
        "seconds: a Renyi divergence bound, for an adversary who knows the\n"
        "prior and the timestamps, on what the release reveals about the\n"
        "secret subsequence S taken as a whole (two values of S whose\n"
        "difference is at most R sqrt(|S|) metres in Euclidean norm, which\n"
        "includes every pair within R per point), through S's own points\n"
        "and through the correlated rest of the trace.\n"
        "\n"
        "What it does not bound (docs/cip.md, with the numbers re-derived by\n"
        "tests/check_cip): a subsequence of S, whose points the adversary\n"
        "reads through the rest (with all ten points of a trace secret at the\n"
        "noise that holds S to 1, the last two alone reach 70.8); several\n"
        "traces together under a prior that correlates them (two ten-point\n"
        "traces, every other point secret: 1.4e4 where each holds 1); priors\n"
        "outside the RBF class. It is not epsilon-DP and not\n"
        "geo-indistinguishability, and per-trace losses added up bound\n"
        "nothing across traces.\n"
        "\n"
        "For irregular timestamps the loss is not monotone in L: the loss at\n"
        "L does not cover shorter length scales. --every-length-scale\n"
        "prints a certified bound on the largest loss over every l in\n"
        "(0, L] instead.\n"
        "\n"
        "options:\n"
        "      --points D            D points sampled every --interval-s T\n"
        "                            seconds\n"
        "      --times T1,T2,...     the trace's timestamps, seconds (instead\n"
        "                            of --points and --interval-s)\n"
        "      --length-scale-s L    RBF length scale, s; repeatable\n"
        "      --independent         also the independent prior (Sigma =\n"
        "                            sigma_x^2 I, what geo-ind. assumes),\n"
        "                            printed with length_scale_s 'independent'\n"
        "      --sigma-z-m S         noise standard deviation per axis, m;\n"
        "                            repeatable: prints\n"
        "                            sigma_z_m,length_scale_s,loss\n"
        "      --epsilon E           instead of --sigma-z-m: the smallest\n"
        "                            sigma_z (relative tolerance 1e-6) with\n"
        "                            loss <= E, printed as\n"
        "                            length_scale_s,sigma_z_m,loss\n"
        "      --every-length-scale  the loss is the certified bound over\n"
        "                            every l in (0, L] (what cip-gp charges);\n"
        "                            two more columns give the largest loss\n"
        "                            evaluated and its l: ...,loss,peak_loss,\n"
        "                            peak_length_scale_s\n"
        "      --secret every_other|all\n"
        "                            the secret subsequence S (default\n"
        "                            every_other, the paper's Fig. 2)\n"
        "      --secret-points I,J,...\n"
        "                            S as 0-based point indices instead\n"
        "      --radius-m R          radius protected around each secret\n"
        "                            point, m (default 100)\n"
        "      --renyi-order LAMBDA  Renyi order, >= 1 (default 2)\n"
        "      --sigma-x-m X         prior standard deviation per axis, m\n"
        "                            (default 1). The loss falls as X grows,\n"
        "                            so a small X is the cautious choice; at\n"
        "                            sigma_z >> X it is the X -> 0 worst case.\n"
        "                            For the paper's normalised units, pass\n"
        "                            --radius-m 1 --sigma-x-m 1.\n"
        "      --plot FILE           with --sigma-z-m: also draw the loss\n"
        "                            against sigma_z^2, one line per prior\n"
        "                            (the paper's Fig. 2(a)), with cairo\n"
        "      --plot-size WxH       the figure's size in pixels (default\n"
        "                            " TS_PLOT_DEFAULT_SIZE_TEXT ")\n"
        "  -h, --help                show this help\n"
        "\n"
        "stderr: a note when Sigma_ss needed a nugget (the loss is then that\n"
        "of the prior Sigma + nugget I; --every-length-scale refuses such a\n"
        "trace). Exit status: 0 on success, 1 on a usage or numerical error.\n",
        out);
}

typedef struct values {
    double v[MAX_VALUES];
    size_t n;
} values;

static const char *take_positive(void *dest, const char *text)
{
    values *list = dest;
    double x;
    if (list->n == MAX_VALUES)
        return "is repeated too often (at most 64 values)";
    if (ts_tool_parse_double(text, &x) != 0 || !(x > 0.0) || !isfinite(x))
        return "needs a positive number";
    list->v[list->n++] = x;
    return NULL;
}

/* A comma-separated list: the trace's timestamps, or S's indices. */
typedef struct number_list {
    double v[TS_CIP_MAX_POINTS];
    size_t n;
    int integers; /* indices: non-negative integers */
} number_list;

static const char *take_list(void *dest, const char *text)
{
    number_list *list = dest;
    const char *need = list->integers
                           ? "needs comma-separated point indices (0-based)"
                           : "needs comma-separated finite numbers";
    char item[64];
    list->n = 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || list->n == TS_CIP_MAX_POINTS)
            return need;
        memcpy(item, p, len);
        item[len] = '\0';
        double x;
        uint64_t k;
        if (list->integers) {
            if (ts_tool_parse_u64(item, &k) != 0 || k >= TS_CIP_MAX_POINTS)
                return need;
            x = (double)k;
        } else if (ts_tool_parse_double(item, &x) != 0 || !isfinite(x)) {
            return need;
        }
        list->v[list->n++] = x;
        if (p[len] == '\0')
            return NULL;
        p += len + 1;
    }
}

static const char *const secret_choices[] = {"every_other", "all", NULL};

/* Fig. 2(a): loss[p * n_sz + k] for prior p and sigma_z szs[k], against
 * sigma_z^2, on a log loss axis. */
static int draw_figure(const char *path, ts_plot_size size, const values *szs,
                       const values *ls, int independent, const double *loss,
                       const char *title)
{
    ts_plot *plot = ts_plot_new(title);
    ts_plot_panel *panel =
        plot == NULL ? NULL
                     : ts_plot_add_panel(plot, NULL, "sigma_z^2 (m^2)",
                                         TS_PLOT_LINEAR, "loss L*",
                                         TS_PLOT_LOG);
    double x[MAX_VALUES];
    for (size_t k = 0; k < szs->n; k++)
        x[k] = szs->v[k] * szs->v[k];
    size_t n_priors = ls->n + (independent ? 1 : 0);
    int rc = panel == NULL ? -1 : 0;
    for (size_t p = 0; rc == 0 && p < n_priors; p++) {
        char label[64];
        if (p < ls->n)
            snprintf(label, sizeof label, "l = %g s", ls->v[p]);
        else
            snprintf(label, sizeof label, "independent");
        rc = ts_plot_add_series(panel, label, TS_PLOT_LINE_MARKED, x,
                                loss + p * szs->n, szs->n);
    }
    char err[ERR_MAX] = "out of memory";
    if (rc == 0)
        rc = ts_plot_write(plot, path, size, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, TS_TOOL_NAME " cip-loss: %s: %s\n", path, err);
    ts_plot_free(plot);
    return rc;
}

/* The trace's timestamps and S: from --times or --points/--interval-s,
 * and from --secret-points or --secret. */
static int build_trace(const number_list *times, uint64_t points,
                       double interval, const number_list *secret_points,
                       int secret, double *t, unsigned char *in_s, size_t *d)
{
    char err[ERR_MAX];
    if (times->n > 0) {
        *d = times->n;
        memcpy(t, times->v, *d * sizeof *t);
    } else {
        *d = (size_t)points;
        for (size_t i = 0; i < *d; i++)
            t[i] = (double)i * interval;
    }
    if (secret_points->n == 0) {
        if (ts_cip_secret_mask(secret == 0 ? TS_CIP_SECRET_EVERY_OTHER
                                           : TS_CIP_SECRET_ALL,
                               t, *d, 0.0, 0.0, in_s, err, sizeof err) != 0) {
            fprintf(stderr, TS_TOOL_NAME " cip-loss: %s\n", err);
            return -1;
        }
        return 0;
    }
    memset(in_s, 0, *d);
    for (size_t k = 0; k < secret_points->n; k++) {
        size_t i = (size_t)secret_points->v[k];
        if (i >= *d) {
            fprintf(stderr, TS_TOOL_NAME " cip-loss: --secret-points: %zu "
                    "is not a point of a %zu-point trace\n", i, *d);
            return -1;
        }
        in_s[i] = 1;
    }
    return 0;
}

/* One row of --every-length-scale output; 0 or 1 on error. */
static int certified_row(const double *t, size_t d, const unsigned char *in_s,
                         const ts_cip_prior *prior, double sigma_z,
                         double epsilon, double radius, double renyi)
{
    char err[ERR_MAX];
    ts_cip_sup_result res;
    double sz = sigma_z;
    int rc = isfinite(epsilon)
                 ? ts_cip_min_sigma_z_sup(t, d, in_s, prior, radius, renyi,
                                          epsilon, EPSILON_REL_TOL, &sz, &res,
                                          err, sizeof err)
                 : ts_cip_sup_loss(t, d, in_s, prior, sz, radius, renyi, NULL,
                                   &res, err, sizeof err);
    if (rc == 0 && res.ill_conditioned) {
        rc = -1;
        snprintf(err, sizeof err, "the secret points' prior covariance needs "
                 "a nugget to factor at l = %g: no certified bound",
                 prior->length_scale);
    }
    if (rc != 0) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: %.17g: %s\n",
                prior->length_scale, err);
        return 1;
    }
    if (isfinite(epsilon))
        printf("%.17g,%.9g,%.9g,%.9g,%.9g\n", prior->length_scale, sz,
               res.loss, res.peak_loss, res.peak_length_scale);
    else
        printf("%.9g,%.17g,%.9g,%.9g,%.9g\n", sz, prior->length_scale,
               res.loss, res.peak_loss, res.peak_length_scale);
    return 0;
}

int cmd_cip_loss(int argc, char **argv)
{
    uint64_t points = 0;
    double interval = NAN, epsilon = NAN;
    double radius = DEFAULT_RADIUS_M, renyi = DEFAULT_RENYI_ORDER;
    double sigma_x = DEFAULT_SIGMA_X_M;
    int independent = 0, secret = 0, every_l = 0;
    values ls = {.n = 0}, szs = {.n = 0};
    static number_list times, secret_points;
    times.n = 0;
    times.integers = 0;
    secret_points.n = 0;
    secret_points.integers = 1;
    const char *plot_path = NULL;
    ts_plot_size plot_size = {TS_PLOT_DEFAULT_WIDTH, TS_PLOT_DEFAULT_HEIGHT};
    const ts_tool_option options[] = {
        {"points", 0, TS_ARG_U64, .dest = &points, .min = 1,
         .max = TS_CIP_MAX_POINTS},
        {"interval-s", 0, TS_ARG_POSITIVE, .dest = &interval},
        {"times", 0, TS_ARG_HANDLER, .dest = &times, .handle = take_list},
        {"length-scale-s", 0, TS_ARG_HANDLER, .dest = &ls,
         .handle = take_positive},
        {"independent", 0, TS_ARG_FLAG, .dest = &independent},
        {"sigma-z-m", 0, TS_ARG_HANDLER, .dest = &szs,
         .handle = take_positive},
        {"epsilon", 0, TS_ARG_POSITIVE, .dest = &epsilon},
        {"every-length-scale", 0, TS_ARG_FLAG, .dest = &every_l},
        {"secret", 0, TS_ARG_CHOICE, .dest = &secret,
         .choices = secret_choices},
        {"secret-points", 0, TS_ARG_HANDLER, .dest = &secret_points,
         .handle = take_list},
        {"radius-m", 0, TS_ARG_POSITIVE, .dest = &radius},
        {"renyi-order", 0, TS_ARG_POSITIVE, .dest = &renyi},
        {"sigma-x-m", 0, TS_ARG_POSITIVE, .dest = &sigma_x},
        {"plot", 0, TS_ARG_STRING, .dest = &plot_path},
        {"plot-size", 0, TS_ARG_HANDLER, .dest = &plot_size,
         .handle = ts_plot_take_size},
        {0},
    };
    const ts_tool_command command = {"cip-loss", 0, options, 0, "no operands",
                                     usage};
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    int evenly = points != 0 && isfinite(interval);
    int listed = times.n > 0;
    if (evenly == listed || (listed && (points || isfinite(interval))) ||
        (ls.n == 0 && !independent) || (szs.n == 0) == !isfinite(epsilon)) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: either --points and "
                "--interval-s or --times, --length-scale-s or --independent, "
                "and exactly one of --sigma-z-m and --epsilon are required\n");
        usage(stderr);
        return 1;
    }
    if (every_l && (independent || plot_path != NULL)) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: --every-length-scale takes "
                "neither --independent nor --plot\n");
        return 1;
    }
    ts_plot_format format;
    if (plot_path != NULL &&
        (isfinite(epsilon) || ts_plot_format_of(plot_path, &format) != 0)) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: --plot needs --sigma-z-m "
                "and a file name ending in .svg or .png\n");
        return 1;
    }
    if (!(renyi >= 1.0)) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: --renyi-order must be "
                ">= 1\n");
        return 1;
    }

    size_t d_max = times.n > 0 ? times.n : (size_t)points;
    double *t = malloc(d_max * sizeof *t);
    unsigned char *in_s = malloc(d_max);
    double *losses = malloc((ls.n + 1) * MAX_VALUES * sizeof *losses);
    char err[ERR_MAX];
    int status = 1;
    size_t d;
    if (t == NULL || in_s == NULL || losses == NULL) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: out of memory\n");
        goto out;
    }
    if (build_trace(&times, points, interval, &secret_points, secret, t, in_s,
                    &d) != 0)
        goto out;
    if (every_l) {
        if (isfinite(epsilon))
            printf("length_scale_max_s,sigma_z_m,loss,peak_loss,"
                   "peak_length_scale_s\n");
        else
            printf("sigma_z_m,length_scale_max_s,loss,peak_loss,"
                   "peak_length_scale_s\n");
        size_t rows = isfinite(epsilon) ? 1 : szs.n;
        for (size_t k = 0; k < rows; k++)
            for (size_t p = 0; p < ls.n; p++) {
                ts_cip_prior prior = {.sigma_x = sigma_x,
                                      .length_scale = ls.v[p]};
                if (certified_row(t, d, in_s, &prior,
                                  isfinite(epsilon) ? NAN : szs.v[k], epsilon,
                                  radius, renyi) != 0)
                    goto out;
            }
        status = fflush(stdout) == 0 ? 0 : 1;
        goto out;
    }
    /* The RBF length scales, then the independent prior as one more row
     * (index ls.n). */
    size_t n_priors = ls.n + (independent ? 1 : 0);
    if (isfinite(epsilon))
        printf("length_scale_s,sigma_z_m,loss\n");
    else
        printf("sigma_z_m,length_scale_s,loss\n");
    size_t n_sz = isfinite(epsilon) ? 1 : szs.n;
    for (size_t k = 0; k < n_sz; k++)
        for (size_t p = 0; p < n_priors; p++) {
            ts_cip_prior prior = {.sigma_x = sigma_x};
            char label[64];
            if (p < ls.n) {
                prior.length_scale = ls.v[p];
                snprintf(label, sizeof label, "%.17g", ls.v[p]);
            } else {
                prior.independent = 1;
                snprintf(label, sizeof label, "independent");
            }
            ts_cip_result res;
            double sz;
            if (isfinite(epsilon)) {
                if (ts_cip_min_sigma_z(t, d, in_s, &prior, radius, renyi,
                                       epsilon, EPSILON_REL_TOL, &sz, &res,
                                       err, sizeof err) != 0) {
                    fprintf(stderr, TS_TOOL_NAME " cip-loss: %s: %s\n",
                            label, err);
                    goto out;
                }
                printf("%s,%.9g,%.9g\n", label, sz, res.loss);
            } else {
                sz = szs.v[k];
                if (ts_cip_loss(t, d, in_s, &prior, sz, radius, renyi, &res,
                                err, sizeof err) != 0) {
                    fprintf(stderr, TS_TOOL_NAME " cip-loss: %s: %s\n",
                            label, err);
                    goto out;
                }
                printf("%.9g,%s,%.9g\n", sz, label, res.loss);
                losses[p * szs.n + k] = res.loss;
            }
            if (res.jitter > 0.0)
                fprintf(stderr, TS_TOOL_NAME " cip-loss: length scale %s: "
                        "nugget %g m^2 added to the prior's diagonal\n",
                        label, res.jitter);
        }
    status = fflush(stdout) == 0 ? 0 : 1;
    if (status == 0 && plot_path != NULL) {
        char title[160];
        if (evenly)
            snprintf(title, sizeof title,
                     "Worst-case CIP loss, %zu points every %g s", d,
                     interval);
        else
            snprintf(title, sizeof title, "Worst-case CIP loss, %zu points",
                     d);
        if (draw_figure(plot_path, plot_size, &szs, &ls, independent, losses,
                        title) != 0)
            status = 1;
    }
out:
    free(losses);
    free(in_s);
    free(t);
    return status;
}
