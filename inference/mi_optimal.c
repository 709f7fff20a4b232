/* The MI-optimal channel: validation and the choice of solver (I(U; Z)
 * and E[d] of a channel are in mi_solver.c, below every solver). The solvers live in mi_plain.c (without geo-ind),
 * and mi_geoind_lp.c (with it); mi_solver.h says how they
 * share the work. Every one of them certifies its answer the same way: a
 * lower bound on the optimum from the linearisation of the convex
 * objective (a Frank-Wolfe gap, or the dual of that linear step), so the
 * reported gap bounds how far the channel is from optimal whatever the
 * iteration count. */
#include "inference/mi_optimal.h"
#include "inference/mi_remap.h"
#include "inference/error.h"
#include "inference/mi_solver.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JOINT_SUM_TOLERANCE 1e-6

static int validate(const ts_mi_problem *pb, const ts_mi_params *params,
                    double *total, char *err, size_t errlen)
{
    if (pb == NULL || params == NULL)
        return ts_fail(err, errlen, "mi-optimal: no problem or parameters");
    if (pb->cells < 1 || pb->centres == NULL)
        return ts_fail(err, errlen, "mi-optimal: needs at least one cell");
    if (pb->cells > TS_MI_MAX_CELLS)
        return ts_fail(err, errlen, "mi-optimal: %zu cells exceed the limit "
                       "of %u (the channel is cells x cells)", pb->cells,
                       (unsigned)TS_MI_MAX_CELLS);
    if (pb->users < 1 || pb->joint == NULL)
        return ts_fail(err, errlen, "mi-optimal: needs at least one user");
    if (pb->users > TS_MI_MAX_USERS)
        return ts_fail(err, errlen, "mi-optimal: %zu users exceed the limit "
                       "of %u", pb->users, (unsigned)TS_MI_MAX_USERS);
    for (size_t i = 0; i < pb->cells; i++)
        if (!isfinite(pb->centres[i].x) || !isfinite(pb->centres[i].y))
            return ts_fail(err, errlen, "mi-optimal: centre %zu is not "
                           "finite", i);
    double sum = 0.0;
    for (size_t i = 0; i < pb->users * pb->cells; i++) {
        double v = pb->joint[i];
        if (!(v >= 0.0) || !isfinite(v))
            return ts_fail(err, errlen, "mi-optimal: joint[user %zu, cell "
                           "%zu] = %g is not a finite non-negative "
                           "probability", i / pb->cells, i % pb->cells, v);
        sum += v;
    }
    if (!(fabs(sum - 1.0) <= JOINT_SUM_TOLERANCE))
        return ts_fail(err, errlen, "mi-optimal: the joint sums to %.9g, "
                       "not 1", sum);
    if (pb->cost != NULL)
        for (size_t i = 0; i < pb->cells * pb->cells; i++)
            if (!(pb->cost[i] >= 0.0) || !isfinite(pb->cost[i]))
                return ts_fail(err, errlen, "mi-optimal: cost[cell %zu, "
                               "cell %zu] = %g is not a finite distance",
                               i / pb->cells, i % pb->cells, pb->cost[i]);
    if (!(pb->distortion_m >= 0.0) || !isfinite(pb->distortion_m))
        return ts_fail(err, errlen, "mi-optimal: distortion bound %g m is "
                       "not a finite non-negative number", pb->distortion_m);
    if (!(pb->geoind_epsilon >= 0.0) || !isfinite(pb->geoind_epsilon))
        return ts_fail(err, errlen, "mi-optimal: geoind_epsilon %g is not a "
                       "finite non-negative number", pb->geoind_epsilon);
    if (!(pb->row_entropy_weight >= 0.0) || !isfinite(pb->row_entropy_weight) ||
        (pb->row_entropy_weight > 0.0 && pb->geoind_epsilon > 0.0))
        return ts_fail(err, errlen, "mi-optimal: row entropy weight %g is "
                       "not a finite non-negative number (or comes with "
                       "geo-ind, which does not take it)",
                       pb->row_entropy_weight);
    if (!(params->gap_tolerance_bits > 0.0) ||
        !isfinite(params->gap_tolerance_bits))
        return ts_fail(err, errlen, "mi-optimal: gap tolerance %g is not a "
                       "positive number", params->gap_tolerance_bits);
    *total = sum;
    return 0;
}

/* Unvisited rows copy the row of the nearest visited cell (lowest index on
 * ties): a report from such a cell is then distributed exactly like one
 * from a cell the training trace knows, so it adds no output of its own,
 * and its distortion is at most the distance to that cell plus that
 * cell's own. (Whether that row identifies someone is the caller's
 * question: tracesan optimize fits a smoothed joint that leaves no cell of
 * the box unvisited, and ts_mi_guard_rows bounds what such rows tell.) */
static void fill_unvisited(const mi_solver *s, double *C)
{
    size_t n = s->n;
    for (size_t x = 0; x < n; x++) {
        if (s->px[x] > 0.0)
            continue;
        size_t best = SIZE_MAX;
        double bd = INFINITY;
        for (size_t i = 0; i < s->m; i++) {
            double d = mi_centre_distance(s->pb->centres, x, s->visited[i]);
            if (d < bd) {
                bd = d;
                best = s->visited[i];
            }
        }
        if (best == SIZE_MAX) {
            for (size_t z = 0; z < n; z++)
                C[x * n + z] = z == x;
        } else {
            memcpy(C + x * n, C + best * n, n * sizeof *C);
        }
    }
}

int ts_mi_optimize(const ts_mi_problem *problem, const ts_mi_params *params,
                   double *channel, ts_mi_result *result, char *err,
                   size_t errlen)
{
    double total = 1.0;
    if (result != NULL)
        memset(result, 0, sizeof *result);
    if (channel == NULL || result == NULL)
        return ts_fail(err, errlen, "mi-optimal: no channel or result "
                       "buffer");
    if (validate(problem, params, &total, err, errlen) != 0)
        return -1;
    int geo = problem->geoind_epsilon > 0.0;
    int first_order =
        params->geoind_solver == TS_MI_GEOIND_FIRST_ORDER ||
        (params->geoind_solver == TS_MI_GEOIND_AUTO &&
         problem->cells > TS_MI_GEOIND_MAX_CELLS);
    if (geo && !first_order && problem->cells > TS_MI_GEOIND_MAX_CELLS)
        return ts_fail(err, errlen, "mi-optimal: with geoind_epsilon the "
                       "exact LP solver's linear steps are LPs over cells^2 "
                       "entries; %zu cells exceed its limit of %u (use the "
                       "first-order solver or larger cells)",
                       problem->cells, (unsigned)TS_MI_GEOIND_MAX_CELLS);
    if (geo && problem->distortion_m == 0.0)
        return ts_fail(err, errlen, "mi-optimal: no geo-indistinguishable "
                       "channel has zero distortion");
    if (params->family == TS_MI_REMAPPED_LAPLACE && geo)
        return ts_fail(err, errlen, "mi-optimal: the remapped Laplace "
                       "channel is not built with geoind_epsilon");
    mi_solver s;
    if (mi_solver_init(&s, problem, total, err, errlen) != 0)
        return -1;
    int rc;
    if (params->family == TS_MI_REMAPPED_LAPLACE) {
        double gap = 0.0;
        rc = ts_mi_remap_laplace(problem, channel,
                                 &result->laplace_epsilon_per_m, err,
                                 errlen);
        if (rc == 0)
            rc = mi_plain_gap(&s, channel, &gap, err, errlen);
        result->gap_bits = gap / M_LN2;
        result->converged = result->gap_bits <= params->gap_tolerance_bits;
    } else if (!geo) {
        rc = mi_plain_solve(&s, params, channel, result, err, errlen);
        if (rc == 0)
            fill_unvisited(&s, channel);
    } else if (first_order) {
        result->solver_first_order = 1;
        rc = mi_geoind_pd_solve(&s, params, channel, result, err, errlen);
    } else {
        rc = mi_geoind_lp_solve(&s, params, channel, result, err, errlen);
    }
    if (rc == 0) {
        result->mi_bits = ts_mi_bits(problem, channel);
        result->distortion_m = ts_mi_distortion(problem, channel);
    }
    mi_solver_free(&s);
    return rc;
}
