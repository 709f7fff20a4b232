/* The geo-ind MI-optimal channel by Frank-Wolfe over GLPK's LP: exact
 * linear steps, so the reference the first-order solver (mi_geoind_pd.c) is
 * tested against; limited to TS_MI_GEOIND_MAX_CELLS cells because each
 * step is an LP over all n^2 entries with about 8 n^2 neighbour
 * constraints (mi_geograph.c), solved by GLPK's simplex, warm-started from
 * the previous step's basis (only the objective changes).
 *
 * GLPK's answers are feasible only to its tolerance, so every vertex is
 * repaired before use: negatives clamped, rows renormalised, and then
 * mixed with the uniform constant channel (ratio 1 on every pair, so
 * strictly inside every geo-ind constraint) by the least weight that makes
 * every edge constraint hold exactly. (Capping entries by their neighbours
 * first was tried and dropped: where GLPK rounds a tiny entry to zero, the
 * caps carry that zero along the whole column, and a row whose every
 * column met one became 0 / 0.) The uniform mix costs distortion, so the
 * LP runs with the distortion bound L (1 - rho) to leave room for it; when
 * that room is not enough (slips of 1e-6 relative on coarse grids with a
 * tight epsilon), the repaired vertex is further mixed with the repaired
 * least-distortion channel S0, by the least weight that brings E[d] back
 * to L. Both satisfy the linear edge constraints, so their mix does too,
 * and E[d] is linear, so that weight exists whenever E[d](S0) < L, which
 * is exactly when we accept L at all. So the least distortion we report
 * and require L to exceed is that of S0: a channel we hold and know to be
 * exactly geo-ind, not the LP's value, which is only near one.
 *
 * The certificate does not depend on the repair: the lower bound on the
 * optimum is the LP's value, the minimum of <G, S> over the tightened
 * polytope, corrected through the LP's dual value of the distortion row:
 * the LP value as a function of the bound is convex with slope -mu, so
 * the minimum over the full polytope is at least the tightened LP's value
 * minus mu rho L. The repaired vertex only sets the direction of the step,
 * and every iterate stays a convex combination of feasible channels. */
#include "inference/mi_solver.h"
#include "inference/error.h"

#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Relative tightening of the distortion row: the room the repair of
 * GLPK's vertices may use. */
#define GEOIND_RHO 1e-6
#define GEOIND_TIME_LIMIT_MS 60000

typedef struct geo_lp {
    glp_prob *lp;
    const mi_geograph *gg;
    double eps_edge;       /* e' */
    double *S;             /* n x n repaired vertex */
    double *S0;            /* n x n repaired least-distortion channel */
    double D0;             /* its E[d] */
    double rho;            /* the distortion row's tightening, relative */
    double L;
    double last_beta;
} geo_lp;

static int geo_lp_solve(geo_lp *gl, char *err, size_t errlen)
{
    glp_smcp control;
    glp_init_smcp(&control);
    control.msg_lev = GLP_MSG_OFF;
    control.tm_lim = GEOIND_TIME_LIMIT_MS;
    control.presolve = GLP_OFF;
    /* Tighter than GLPK's 1e-7: its slips cost distortion in the repair. */
    control.tol_bnd = 1e-10;
    int status = glp_simplex(gl->lp, &control);
    if (status != 0 || glp_get_status(gl->lp) != GLP_OPT) {
        /* A lost basis is worth one cold restart. It reports on the
         * terminal whatever msg_lev says. */
        int was = glp_term_out(GLP_OFF);
        glp_adv_basis(gl->lp, 0);
        glp_term_out(was);
        status = glp_simplex(gl->lp, &control);
    }
    if (status == GLP_ETMLIM)
        return ts_fail(err, errlen, "mi-optimal: the geo-ind LP ran out of "
                       "its %d s", GEOIND_TIME_LIMIT_MS / 1000);
    if (status != 0)
        return ts_fail(err, errlen, "mi-optimal: the geo-ind LP failed "
                       "(glp_simplex returned %d)", status);
    if (glp_get_status(gl->lp) == GLP_NOFEAS)
        return ts_fail(err, errlen, "mi-optimal: no channel meets the "
                       "distortion bound under this geo-ind epsilon");
    if (glp_get_status(gl->lp) != GLP_OPT)
        return ts_fail(err, errlen, "mi-optimal: the geo-ind LP found no "
                       "optimum (status %d)", glp_get_status(gl->lp));
    return 0;
}

static int geo_lp_init(geo_lp *gl, const mi_solver *s, const mi_geograph *gg,
                       double eps, char *err, size_t errlen)
{
    size_t n = s->n;
    double L = s->pb->distortion_m;
    memset(gl, 0, sizeof *gl);
    gl->gg = gg;
    gl->L = L;
    gl->eps_edge = mi_edge_epsilon(gg, eps);
    gl->S = malloc(n * n * sizeof *gl->S);
    gl->S0 = malloc(n * n * sizeof *gl->S0);
    size_t nz = n * n + s->m * n + 4 * gg->edges * n;
    int *ia = malloc((nz + 1) * sizeof *ia);
    int *ja = malloc((nz + 1) * sizeof *ja);
    double *ar = malloc((nz + 1) * sizeof *ar);
    if (gl->S == NULL || gl->S0 == NULL || ia == NULL || ja == NULL ||
        ar == NULL) {
        free(gl->S);
        free(gl->S0);
        free(ia);
        free(ja);
        free(ar);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    glp_prob *lp = glp_create_prob();
    gl->lp = lp;
    glp_set_obj_dir(lp, GLP_MIN);
    size_t rows = n + 1 + 2 * gg->edges * n;
    glp_add_rows(lp, (int)rows);
    glp_add_cols(lp, (int)(n * n));
    for (size_t j = 1; j <= n * n; j++)
        glp_set_col_bnds(lp, (int)j, GLP_LO, 0.0, 0.0);
    size_t t = 0;
    for (size_t x = 0; x < n; x++) {
        glp_set_row_bnds(lp, (int)x + 1, GLP_FX, 1.0, 1.0);
        for (size_t z = 0; z < n; z++) {
            t++;
            ia[t] = (int)x + 1;
            ja[t] = (int)(x * n + z) + 1;
            ar[t] = 1.0;
        }
    }
    /* The distortion row in units of L; free until the start point is
     * known. */
    glp_set_row_bnds(lp, (int)n + 1, GLP_FR, 0.0, 0.0);
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        for (size_t z = 0; z < n; z++) {
            double w = s->W[i * n + z] / L;
            if (w == 0.0)
                continue;
            t++;
            ia[t] = (int)n + 1;
            ja[t] = (int)(x * n + z) + 1;
            ar[t] = w;
        }
    }
    size_t r = n + 1;
    /* Rows by cell, neighbours in increasing order (the CSR's order):
     * GLPK's simplex is sensitive to the order of its rows. */
    for (size_t x = 0; x < n; x++)
        for (size_t d = gg->start[x]; d < gg->start[x + 1]; d++) {
            size_t y = gg->to[d];
            double ratio = exp(gl->eps_edge * gg->len[gg->edge_of[d]]);
            for (size_t z = 0; z < n; z++) {
                r++;
                glp_set_row_bnds(lp, (int)r, GLP_UP, 0.0, 0.0);
                t++;
                ia[t] = (int)r;
                ja[t] = (int)(x * n + z) + 1;
                ar[t] = 1.0;
                t++;
                ia[t] = (int)r;
                ja[t] = (int)(y * n + z) + 1;
                ar[t] = -ratio;
            }
        }
    glp_load_matrix(lp, (int)t, ia, ja, ar);
    free(ia);
    free(ja);
    free(ar);
    /* Scaling reports on the terminal whatever msg_lev says. */
    int was = glp_term_out(GLP_OFF);
    glp_scale_prob(lp, GLP_SF_AUTO);
    glp_term_out(was);
    return 0;
}

static void geo_lp_free(geo_lp *gl)
{
    if (gl->lp != NULL)
        glp_delete_prob(gl->lp);
    free(gl->S);
    free(gl->S0);
}

/* Reads GLPK's vertex into gl->S and repairs it as the comment at the top
 * says; returns its E[d]. With S0 (the least-distortion channel, of E[d]
 * gl->D0 < L) the result is also brought within L; without, it is the
 * plain repair, used to make S0 itself. */
static double geo_lp_vertex(geo_lp *gl, const mi_solver *s, const double *S0)
{
    size_t n = s->n;
    double *S = gl->S, unif = 1.0 / (double)n;
    for (size_t x = 0; x < n; x++) {
        double sum = 0.0;
        for (size_t z = 0; z < n; z++) {
            double v = glp_get_col_prim(gl->lp, (int)(x * n + z) + 1);
            S[x * n + z] = v > 0.0 ? v : 0.0;
            sum += S[x * n + z];
        }
        /* Cannot happen for a row constrained to sum to 1, unless GLPK
         * returned garbage; the uniform row is geo-ind with anything the
         * mix below makes of the others. */
        for (size_t z = 0; z < n; z++)
            S[x * n + z] = sum > 0.0 ? S[x * n + z] / sum : unif;
    }
    gl->last_beta = mi_geoind_repair(gl->gg, gl->eps_edge, S);
    double D = mi_channel_distortion(s, S);
    if (S0 != NULL && D > gl->L) {
        /* (1 - t) D + t D0 = L; the relative 1e-9 lands it just inside
         * against the rounding of the mix, and t <= 1 since D0 < L. */
        double t = (D - gl->L) / (D - gl->D0) * (1.0 + 1e-9);
        if (t > 1.0)
            t = 1.0;
        for (size_t i = 0; i < n * n; i++)
            S[i] = (1.0 - t) * S[i] + t * S0[i];
        D = (1.0 - t) * D + t * gl->D0;
    }
    return D;
}

static int lp_lower(void *ctx, mi_solver *s, double *lower, char *err,
                    size_t errlen)
{
    geo_lp *gl = ctx;
    size_t n = s->n;
    double gmax = 0.0;
    for (size_t i = 0; i < s->m * n; i++)
        if (fabs(s->G[i]) > gmax)
            gmax = fabs(s->G[i]);
    double scale = gmax > 0.0 ? 1.0 / gmax : 1.0;
    for (size_t j = 1; j <= n * n; j++)
        glp_set_obj_coef(gl->lp, (int)j, 0.0);
    for (size_t i = 0; i < s->m; i++)
        for (size_t z = 0; z < n; z++)
            glp_set_obj_coef(gl->lp, (int)(s->visited[i] * n + z) + 1,
                             s->G[i * n + z] * scale);
    if (geo_lp_solve(gl, err, errlen) != 0)
        return -1;
    /* The row dual is <= 0 for an upper bound of a minimum: the value
     * gained by relaxing the bound from L (1 - rho) to L. */
    double dual = glp_get_row_dual(gl->lp, (int)n + 1);
    *lower = (glp_get_obj_val(gl->lp) + (dual < 0.0 ? dual : 0.0) * gl->rho) /
             scale;
    geo_lp_vertex(gl, s, gl->S0);
    return 0;
}

static void lp_vertex_joint(void *ctx, mi_solver *s)
{
    mi_joint_of(s, ((geo_lp *)ctx)->S, 1.0, s->JS, s->PzS);
}

static void lp_apply(void *ctx, mi_solver *s, double *A, double add,
                     int whole)
{
    const double *S = ((geo_lp *)ctx)->S;
    size_t nn = s->n * s->n;
    if (whole)
        memcpy(A, S, nn * sizeof *A);
    else
        for (size_t i = 0; i < nn; i++)
            A[i] += add * S[i];
}

int mi_geoind_lp_solve(mi_solver *s, const ts_mi_params *params, double *A,
                       ts_mi_result *result, char *err, size_t errlen)
{
    const ts_mi_problem *pb = s->pb;
    size_t n = s->n;
    double L = pb->distortion_m;
    if (n > TS_MI_GEOIND_MAX_CELLS)
        return ts_fail(err, errlen, "mi-optimal: the LP reference solver "
                       "takes at most %u cells, not %zu",
                       (unsigned)TS_MI_GEOIND_MAX_CELLS, n);
    mi_geograph gg;
    if (mi_geograph_init(&gg, pb->centres, n, err, errlen) != 0)
        return -1;
    geo_lp gl;
    int rc = 0;
    if (geo_lp_init(&gl, s, &gg, pb->geoind_epsilon, err, errlen) != 0) {
        mi_geograph_free(&gg);
        return -1;
    }
    result->edge_epsilon = gl.eps_edge;
    result->stretch = gg.stretch;
    /* Least distortion under geo-ind, with the distortion row free. */
    for (size_t i = 0; i < s->m; i++)
        for (size_t z = 0; z < n; z++)
            glp_set_obj_coef(gl.lp, (int)(s->visited[i] * n + z) + 1,
                             s->W[i * n + z] / L);
    if (geo_lp_solve(&gl, err, errlen) != 0) {
        rc = -1;
        goto out;
    }
    double D_lp = glp_get_obj_val(gl.lp) * L;
    gl.D0 = geo_lp_vertex(&gl, s, NULL);
    memcpy(gl.S0, gl.S, n * n * sizeof *gl.S0);
    result->least_distortion_m = gl.D0;
    result->least_distortion_lower_m = D_lp;
    if (!(gl.D0 < L)) {
        rc = ts_fail(err, errlen, "mi-optimal: no channel with geo-ind "
                     "epsilon %g per m has E[d] <= %g m: the least is "
                     "%.9g m", pb->geoind_epsilon, L, gl.D0);
        goto out;
    }
    /* The LP's own bound leaves rho of room for the uniform mix of the
     * repair, but not below the least distortion: then the LP would be
     * infeasible, and the mix with S0 does all the work. */
    gl.rho = D_lp < L * (1.0 - 10 * GEOIND_RHO) ? GEOIND_RHO : 0.0;
    glp_set_row_bnds(gl.lp, (int)n + 1, GLP_UP, 0.0, 1.0 - gl.rho);
    /* Start: S0 mixed with the uniform constant channel, which makes every
     * entry positive (see the line search), as far as L allows with a
     * little slack kept. */
    double D_unif = 0.0;
    for (size_t i = 0; i < s->m * n; i++)
        D_unif += s->W[i] / (double)n;
    double target = L * (1.0 - 2 * GEOIND_RHO);
    if (!(target > gl.D0))
        target = 0.5 * (gl.D0 + L);
    double theta = D_unif <= target ? 1.0
                   : (target - gl.D0) / (D_unif - gl.D0);
    if (theta > 1.0)
        theta = 1.0;
    for (size_t i = 0; i < n * n; i++)
        A[i] = (1.0 - theta) * gl.S0[i] + theta / (double)n;
    mi_fw_oracle oracle = { &gl, lp_lower, lp_vertex_joint, lp_apply };
    unsigned iterations = 0;
    rc = mi_frank_wolfe(s, &oracle, A, params->gap_tolerance_bits,
                        params->max_iterations, &iterations, result, err,
                        errlen);
    result->iterations = iterations;
    result->repair_weight = gl.last_beta;
out:
    geo_lp_free(&gl);
    mi_geograph_free(&gg);
    return rc;
}
