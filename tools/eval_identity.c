/* The identity adversary of tracesan eval --identity
 * (tools/eval_identity.h). */
#include "tools/eval_identity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/grid.h"
#include "inference/identity.h"
#include "tools/commands.h"

/* The paper's evaluation grids (Section IV-B). */
static const double DEFAULT_IDENTITY_CELLS[] = { 50.0, 100.0, 200.0, 400.0 };

void ts_eval_identity_defaults(ts_tool_numbers *cells)
{
    cells->n = sizeof DEFAULT_IDENTITY_CELLS / sizeof *DEFAULT_IDENTITY_CELLS;
    memcpy(cells->v, DEFAULT_IDENTITY_CELLS,
           sizeof DEFAULT_IDENTITY_CELLS);
}

/* The joined rows as the adversary sees them: the user and the released
 * point projected to metres (equirectangular about the centre of the
 * released points' bounding box, inference/grid.h), each on its side of
 * the split. */
static int identity_rows(const ts_eval_data *data, ts_identity_obs *train,
                         size_t *n_train, ts_identity_obs *held_out,
                         size_t *n_held_out, double *distortion_sum)
{
    double lat_min = INFINITY, lat_max = -INFINITY;
    double lon_min = INFINITY, lon_max = -INFINITY;
    for (size_t i = 0; i < data->n_rows; i++) {
        const ts_eval_row *r = &data->rows[i];
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
    char err[TS_EVAL_ERR_MAX];
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
        const ts_eval_row *r = &data->rows[i];
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

int ts_eval_identity_report(const ts_eval_data *data,
                            const ts_tool_numbers *cells)
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
        char err[TS_EVAL_ERR_MAX];
        if (ts_identity_estimate(train, n_train, held_out, n_held_out,
                                 n_users, cells->v[c], &result, err,
                                 sizeof err) != 0) {
            fprintf(stderr, TS_TOOL_NAME " eval: --cell-m %g: %s\n",
                    cells->v[c], err);
            goto out;
        }
        printf("%g,%.6f,%.6f,%.1f,%zu,%zu\n", cells->v[c],
               result.bayes_error, result.mi_bits,
               distortion_sum / (double)n_matched, result.users,
               n_matched);
        fprintf(stderr, "eval --identity: cell %g m: %zu cells hold "
                "training rows; %zu held-out rows fell outside them (guessed "
                "from the prior); resubstitution error (the paper's Eq. 27 "
                "on all rows) %.6f; first-order plug-in MI bias %.6f "
                "bits\n",
                cells->v[c], result.train_cells, result.eval_unseen,
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
