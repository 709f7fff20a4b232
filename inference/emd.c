#include "inference/emd.h"
#include "inference/error.h"

#include <glpk.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EMD_SUM_TOLERANCE 1e-6
/* The moved mass is handed to GLPK scaled to this total. Its feasibility
 * tolerance is absolute (1e-7): two estimates a cycle apart differ by
 * ~1e-7 a cell, and bounds that small left its simplex cycling for many
 * minutes. At this scale a difference of 1e-13 of the moved mass is
 * still ten times the tolerance. */
#define EMD_SCALED_MASS 1e6
/* A hard stop, so that no input can hang a caller. */
#define EMD_TIME_LIMIT_MS 120000

static int check_distribution(const double *w, size_t n, const char *name,
                              double *total, char *err, size_t errlen)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!(w[i] >= 0.0) || !isfinite(w[i]))
            return ts_fail(err, errlen, "EMD: %s[%zu] = %g is not a finite "
                           "non-negative weight", name, i, w[i]);
        sum += w[i];
    }
    if (!(fabs(sum - 1.0) <= EMD_SUM_TOLERANCE))
        return ts_fail(err, errlen, "EMD: %s sums to %.9g, not 1", name, sum);
    *total = sum;
    return 0;
}

int ts_emd(const ts_vec2 *points, size_t n, const double *p, const double *q,
           ts_emd_result *result, char *err, size_t errlen)
{
    memset(result, 0, sizeof *result);
    if (n == 0 || points == NULL || p == NULL || q == NULL)
        return ts_fail(err, errlen, "EMD needs at least one point and two "
                       "distributions");
    if (n > (size_t)INT32_MAX / 2)
        return ts_fail(err, errlen, "EMD: %zu points are too many", n);
    double p_total, q_total;
    if (check_distribution(p, n, "p", &p_total, err, errlen) != 0 ||
        check_distribution(q, n, "q", &q_total, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(points[i].x) || !isfinite(points[i].y))
            return ts_fail(err, errlen, "EMD: point %zu is not finite", i);

    /* excess[i] > 0: cell i sends that much; < 0: it receives. */
    double *excess = malloc(n * sizeof *excess);
    size_t *source = malloc(n * sizeof *source);
    size_t *sink = malloc(n * sizeof *sink);
    if (excess == NULL || source == NULL || sink == NULL) {
        free(excess);
        free(source);
        free(sink);
        return ts_fail(err, errlen, "out of memory");
    }
    size_t n_sources = 0, n_sinks = 0;
    double moved = 0.0;
    for (size_t i = 0; i < n; i++) {
        excess[i] = p[i] / p_total - q[i] / q_total;
        if (excess[i] > 0.0) {
            source[n_sources++] = i;
            moved += excess[i];
        } else if (excess[i] < 0.0) {
            sink[n_sinks++] = i;
        }
    }
    result->sources = n_sources;
    result->sinks = n_sinks;
    int rc = 0;
    if (n_sources == 0 || n_sinks == 0)
        goto done;   /* identical after renormalisation: nothing moves */

    /* Sources and sinks carry the same mass up to rounding; both are
     * scaled to EMD_SCALED_MASS in all. */
    double sink_mass = 0.0;
    for (size_t t = 0; t < n_sinks; t++)
        sink_mass -= excess[sink[t]];
    for (size_t s = 0; s < n_sources; s++)
        excess[source[s]] *= EMD_SCALED_MASS / moved;
    for (size_t t = 0; t < n_sinks; t++)
        excess[sink[t]] *= EMD_SCALED_MASS / sink_mass;
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    /* Rows: one per source (sends at most its excess) and one per sink
     * (receives exactly its shortfall). Both totals are the same mass up
     * to rounding, so the sources' rows are upper bounds: equality on
     * both sides could turn a 1e-17 rounding gap into infeasibility. */
    glp_add_rows(lp, (int)(n_sources + n_sinks));
    for (size_t s = 0; s < n_sources; s++)
        glp_set_row_bnds(lp, (int)s + 1, GLP_UP, 0.0, excess[source[s]]);
    for (size_t t = 0; t < n_sinks; t++)
        glp_set_row_bnds(lp, (int)(n_sources + t) + 1, GLP_FX,
                         -excess[sink[t]], -excess[sink[t]]);
    size_t n_columns = n_sources * n_sinks;
    if (n_columns > (size_t)INT32_MAX) {
        glp_delete_prob(lp);
        rc = ts_fail(err, errlen, "EMD: %zu x %zu flows are too many",
                     n_sources, n_sinks);
        goto done;
    }
    glp_add_cols(lp, (int)n_columns);
    int index[3];
    double value[3] = { 0.0, 1.0, 1.0 };
    int column = 1;
    for (size_t s = 0; s < n_sources; s++) {
        for (size_t t = 0; t < n_sinks; t++, column++) {
            ts_vec2 a = points[source[s]], b = points[sink[t]];
            glp_set_col_bnds(lp, column, GLP_LO, 0.0, 0.0);
            glp_set_obj_coef(lp, column, hypot(a.x - b.x, a.y - b.y));
            index[1] = (int)s + 1;
            index[2] = (int)(n_sources + t) + 1;
            glp_set_mat_col(lp, column, 2, index, value);
        }
    }
    glp_smcp control;
    glp_init_smcp(&control);
    control.msg_lev = GLP_MSG_OFF;
    control.tm_lim = EMD_TIME_LIMIT_MS;
    int status = glp_simplex(lp, &control);
    if (status == GLP_ETMLIM) {
        rc = ts_fail(err, errlen, "EMD: the simplex solver ran out of its "
                     "%d s", EMD_TIME_LIMIT_MS / 1000);
    } else if (status != 0) {
        rc = ts_fail(err, errlen, "EMD: the simplex solver failed "
                     "(glp_simplex returned %d)", status);
    } else if (glp_get_status(lp) != GLP_OPT) {
        rc = ts_fail(err, errlen, "EMD: the simplex solver found no optimum "
                     "(status %d)", glp_get_status(lp));
    } else {
        result->distance = glp_get_obj_val(lp) / EMD_SCALED_MASS * moved;
        result->simplex_iterations = (unsigned)glp_get_it_cnt(lp);
    }
    glp_delete_prob(lp);
done:
    free(excess);
    free(source);
    free(sink);
    return rc;
}
