/* tracesan cip-loss: the worst-case CIP loss of Gaussian noise against RBF
 * Gaussian-process priors for an evenly sampled trace (inference/cip.h),
 * so that an operator can choose sigma_z before deploying. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "inference/cip.h"
#include "tools/commands.h"
#include "tools/plot.h"

#define ERR_MAX 256
#define DEFAULT_RADIUS_M 100.0
#define DEFAULT_RENYI_ORDER 2.0
#define DEFAULT_SIGMA_X_M 1.0
#define EPSILON_REL_TOL 1e-6

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " cip-loss --points D --interval-s T\n"
        "                         (--length-scale-s L... | --independent)\n"
        "                         (--sigma-z-m S... | --epsilon E)\n"
        "                         [--secret every_other|all] [--radius-m R]\n"
        "                         [--renyi-order LAMBDA] [--sigma-x-m X]\n"
        "                         [--plot FILE.svg|FILE.png [--plot-size WxH]]\n"
        "\n"
        "Worst-case Conditional Inferential Privacy loss (Meehan & Chaudhuri,\n"
        "Eq. 4) of adding N(0, sigma_z^2) noise per axis to each of D points\n"
        "sampled every T seconds, against an RBF Gaussian-process prior of\n"
        "length scale L seconds: a Renyi divergence bound on what the release\n"
        "reveals about the secret points to within R metres, through the\n"
        "secret points themselves and through their correlated neighbours.\n"
        "It is not epsilon-DP and not geo-indistinguishability. The loss\n"
        "grows with L: a sigma_z chosen at L = l_max covers every L <= l_max.\n"
        "\n"
        "options:\n"
        "      --points D            trace length d of the guarantee\n"
        "      --interval-s T        seconds between points\n"
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
        "      --secret every_other|all\n"
        "                            the secret subsequence S (default\n"
        "                            every_other, the paper's Fig. 2)\n"
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
        "of the prior Sigma + nugget I). Exit status: 0 on success, 1 on a\n"
        "usage or numerical error.\n",
        out);
}

static const char *const secret_choices[] = {"every_other", "all", NULL};

/* Fig. 2(a): loss[p * n_sz + k] for prior p and sigma_z szs[k], against
 * sigma_z^2, on a log loss axis. */
static int draw_figure(const char *path, ts_plot_size size,
                       const ts_tool_numbers *szs, const ts_tool_numbers *ls,
                       int independent, const double *loss, size_t d,
                       double interval)
{
    char title[160];
    snprintf(title, sizeof title,
             "Worst-case CIP loss, %zu points every %g s", d, interval);
    ts_plot *plot = ts_plot_new(title);
    ts_plot_panel *panel =
        plot == NULL ? NULL
                     : ts_plot_add_panel(plot, NULL, "sigma_z^2 (m^2)",
                                         TS_PLOT_LINEAR, "loss L*",
                                         TS_PLOT_LOG);
    double x[TS_TOOL_MAX_NUMBERS];
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

int cmd_cip_loss(int argc, char **argv)
{
    uint64_t points = 0;
    double interval = NAN, epsilon = NAN;
    double radius = DEFAULT_RADIUS_M, renyi = DEFAULT_RENYI_ORDER;
    double sigma_x = DEFAULT_SIGMA_X_M;
    int independent = 0, secret = 0;
    ts_tool_numbers ls = {.n = 0}, szs = {.n = 0};
    const char *plot_path = NULL;
    ts_plot_size plot_size = {TS_PLOT_DEFAULT_WIDTH, TS_PLOT_DEFAULT_HEIGHT};
    const ts_tool_option options[] = {
        {"points", 0, TS_ARG_U64, .dest = &points, .min = 1,
         .max = TS_CIP_MAX_POINTS},
        {"interval-s", 0, TS_ARG_POSITIVE, .dest = &interval},
        {"length-scale-s", 0, TS_ARG_POSITIVE_EACH, .dest = &ls},
        {"independent", 0, TS_ARG_FLAG, .dest = &independent},
        {"sigma-z-m", 0, TS_ARG_POSITIVE_EACH, .dest = &szs},
        {"epsilon", 0, TS_ARG_POSITIVE, .dest = &epsilon},
        {"secret", 0, TS_ARG_CHOICE, .dest = &secret,
         .choices = secret_choices},
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
    if (points == 0 || !isfinite(interval) ||
        (ls.n == 0 && !independent) ||
        (szs.n == 0) == !isfinite(epsilon)) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: --points, --interval-s, "
                "--length-scale-s or --independent, and exactly one of "
                "--sigma-z-m and --epsilon are required\n");
        usage(stderr);
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

    size_t d = (size_t)points;
    double *t = malloc(d * sizeof *t);
    unsigned char *in_s = malloc(d);
    double *losses =
        malloc((ls.n + 1) * TS_TOOL_MAX_NUMBERS * sizeof *losses);
    char err[ERR_MAX];
    int status = 1;
    if (t == NULL || in_s == NULL || losses == NULL) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < d; i++)
        t[i] = (double)i * interval;
    if (ts_cip_secret_mask(secret == 0 ? TS_CIP_SECRET_EVERY_OTHER
                                       : TS_CIP_SECRET_ALL,
                           t, d, 0.0, 0.0, in_s, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " cip-loss: %s\n", err);
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
    if (status == 0 && plot_path != NULL &&
        draw_figure(plot_path, plot_size, &szs, &ls, independent, losses, d,
                    interval) != 0)
        status = 1;
out:
    free(losses);
    free(in_s);
    free(t);
    return status;
}
