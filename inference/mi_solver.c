/* The MI-optimal channel's common machinery: the joint in sparse form,
 * I(U; Z) and its gradient, and the Frank-Wolfe loop whose gap is the
 * certificate of every solver (see mi_solver.h for the notation).
 *
 * Gradient. With J(u, z) = sum_x p(u, x) C(x, z) and P(z) = sum_u J(u, z),
 * f = sum_{u,z} J log(J / (p(u) P(z))), and
 *     df/dC(x, z) = sum_u p(u, x) log(J(u, z) / (p(u) P(z)))
 * (the +1 terms of the derivative cancel because rows sum to one). Only the
 * users of cell x enter row x, so a row costs (users of x) x n: the joint's
 * sparsity is what makes 1,000 cells cheap.
 *
 * Frank-Wolfe. The feasible set is a polytope and f is convex, so for the
 * linear step's vertex S
 *     gap(C) = <grad f(C), C - S> >= f(C) - f*
 * by convexity (f* >= f(C) + <grad f(C), C* - C> >= f(C) - gap); a valid
 * lower bound on min <G, S> in place of the minimum keeps the inequality.
 * We stop when the gap is below the tolerance, so the reported gap bounds
 * the returned channel's distance to the optimum exactly, whatever the
 * iteration count.
 *
 * The step length. Along C + g (S - C) the joint P(u, z) is affine in g, so
 * f is cheap to differentiate there; the exact line search is a safeguarded
 * Newton iteration on f'(g) (f is convex along the segment). f'(g) tends to
 * +infinity as g -> 1 whenever S drops an output some user still reaches,
 * so the step stays below 1 and every entry that starts positive stays
 * positive: no output ever carries only some users, which is what keeps
 * the gradient finite (a partially used output has derivative -infinity).
 *
 * The channel is kept as alpha * A with a scalar alpha, so that the update
 * C <- (1 - g) C + g S touches only S's support in the plain case. */
#include "inference/mi_solver.h"
#include "inference/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The tilt's entries stay at or above exp(TILT_LOG_FLOOR) (about
 * 1e-261): a hard zero could never grow back under a multiplicative
 * update (mi_plain.c, mi_geoind_pd.c). */
#define TILT_LOG_FLOOR (-600.0)
/* The multiplier is solved to this relative precision on E[d]. */
#define MU_PRECISION 1e-12
#define MU_MAX_STEPS 200
/* alpha of C = alpha * A is folded into A below this. */
#define ALPHA_FLOOR 1e-150
/* Caps of the line search's Newton-bisection. */
#define LINE_SEARCH_MAX_STEPS 100

double mi_centre_distance(const ts_vec2 *c, size_t a, size_t b)
{
    return hypot(c[a].x - c[b].x, c[a].y - c[b].y);
}

double mi_cost(const ts_mi_problem *pb, size_t x, size_t z)
{
    if (pb->cost != NULL)
        return pb->cost[x * pb->cells + z];
    return mi_centre_distance(pb->centres, x, z);
}

void mi_solver_free(mi_solver *s)
{
    free(s->px);
    free(s->pu);
    free(s->cell_start);
    free(s->cell_users);
    free(s->user_start);
    free(s->user_cells);
    free(s->visited);
    free(s->row_of);
    free(s->W);
    free(s->J);
    free(s->Pz);
    free(s->JS);
    free(s->PzS);
    free(s->G);
    free(s->logratio);
    memset(s, 0, sizeof *s);
}

int mi_solver_init(mi_solver *s, const ts_mi_problem *pb, double total,
                   char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->pb = pb;
    s->n = pb->cells;
    s->k = pb->users;
    size_t n = s->n, k = s->k;
    size_t nnz = 0;
    for (size_t i = 0; i < n * k; i++)
        nnz += pb->joint[i] > 0.0;
    s->px = calloc(n, sizeof *s->px);
    s->pu = calloc(k, sizeof *s->pu);
    s->cell_start = calloc(n + 1, sizeof *s->cell_start);
    s->cell_users = malloc((nnz + 1) * sizeof *s->cell_users);
    s->user_start = calloc(k + 1, sizeof *s->user_start);
    s->user_cells = malloc((nnz + 1) * sizeof *s->user_cells);
    s->visited = malloc(n * sizeof *s->visited);
    s->row_of = malloc(n * sizeof *s->row_of);
    s->J = malloc(k * n * sizeof *s->J);
    s->Pz = malloc(n * sizeof *s->Pz);
    s->JS = malloc(k * n * sizeof *s->JS);
    s->PzS = malloc(n * sizeof *s->PzS);
    s->logratio = malloc(k * n * sizeof *s->logratio);
    if (!s->px || !s->pu || !s->cell_start || !s->cell_users ||
        !s->user_start || !s->user_cells || !s->visited || !s->row_of ||
        !s->J || !s->Pz || !s->JS || !s->PzS || !s->logratio) {
        mi_solver_free(s);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    size_t e = 0;
    for (size_t u = 0; u < k; u++) {
        s->user_start[u] = e;
        for (size_t x = 0; x < n; x++) {
            double p = pb->joint[u * n + x] / total;
            if (p > 0.0) {
                s->user_cells[e++] = (mi_entry){ (uint32_t)x, p };
                s->pu[u] += p;
                s->px[x] += p;
            }
        }
    }
    s->user_start[k] = e;
    e = 0;
    for (size_t x = 0; x < n; x++) {
        s->cell_start[x] = e;
        for (size_t u = 0; u < k; u++) {
            double p = pb->joint[u * n + x] / total;
            if (p > 0.0)
                s->cell_users[e++] = (mi_entry){ (uint32_t)u, p };
        }
        s->row_of[x] = UINT32_MAX;
        if (s->px[x] > 0.0) {
            s->row_of[x] = (uint32_t)s->m;
            s->visited[s->m++] = (uint32_t)x;
        }
    }
    s->cell_start[n] = e;
    s->G = malloc(s->m * n * sizeof *s->G);
    s->W = malloc(s->m * n * sizeof *s->W);
    if (s->G == NULL || s->W == NULL) {
        mi_solver_free(s);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        for (size_t z = 0; z < n; z++)
            s->W[i * n + z] = s->px[x] * mi_cost(pb, x, z);
    }
    return 0;
}

void mi_joint_of(const mi_solver *s, const double *A, double alpha,
                 double *J, double *Pz)
{
    size_t n = s->n;
    memset(J, 0, s->k * n * sizeof *J);
    for (size_t u = 0; u < s->k; u++) {
        double *row = J + u * n;
        for (size_t e = s->user_start[u]; e < s->user_start[u + 1]; e++) {
            const double *c = A + (size_t)s->user_cells[e].index * n;
            double w = s->user_cells[e].p * alpha;
            for (size_t z = 0; z < n; z++)
                row[z] += w * c[z];
        }
    }
    memset(Pz, 0, n * sizeof *Pz);
    for (size_t u = 0; u < s->k; u++)
        for (size_t z = 0; z < n; z++)
            Pz[z] += J[u * n + z];
}

void mi_logratio(mi_solver *s)
{
    size_t n = s->n;
    for (size_t u = 0; u < s->k; u++)
        for (size_t z = 0; z < n; z++) {
            double j = s->J[u * n + z];
            /* Zero J(u, z) only where no visited row reaches z at all
             * (then P(z) = 0 too); no row of user u's cells has mass
             * there, and the entry is a dead column. The start points
             * leave no such column in use, see above. */
            s->logratio[u * n + z] =
                j > 0.0 ? log(j / (s->pu[u] * s->Pz[z])) : 0.0;
        }
}

void mi_gradient_rows(mi_solver *s)
{
    size_t n = s->n;
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        double *g = s->G + i * n;
        memset(g, 0, n * sizeof *g);
        for (size_t e = s->cell_start[x]; e < s->cell_start[x + 1]; e++) {
            const double *lr =
                s->logratio + (size_t)s->cell_users[e].index * n;
            double p = s->cell_users[e].p;
            for (size_t z = 0; z < n; z++)
                g[z] += p * lr[z];
        }
    }
}

double mi_objective(const mi_solver *s)
{
    double f = 0.0;
    for (size_t i = 0; i < s->k * s->n; i++)
        f += s->J[i] * s->logratio[i];
    return f;
}

double mi_channel_distortion(const mi_solver *s, const double *C)
{
    double D = 0.0;
    for (size_t i = 0; i < s->m; i++) {
        const double *c = C + (size_t)s->visited[i] * s->n;
        const double *w = s->W + i * s->n;
        for (size_t z = 0; z < s->n; z++)
            D += w[z] * c[z];
    }
    return D;
}

/* f'(g) and f''(g) along J + g (JS - J). */
static void line_derivs(const mi_solver *s, double g, double *d1,
                        double *d2)
{
    size_t n = s->n;
    double a = 0.0, b = 0.0;
    for (size_t u = 0; u < s->k; u++) {
        if (s->pu[u] <= 0.0)
            continue;
        for (size_t z = 0; z < n; z++) {
            double j0 = s->J[u * n + z], j1 = s->JS[u * n + z];
            double dj = j1 - j0;
            if (dj == 0.0)
                continue;
            double j = j0 + g * dj;
            double pz = s->Pz[z] + g * (s->PzS[z] - s->Pz[z]);
            if (j <= 0.0) {
                a = dj < 0.0 ? INFINITY : -INFINITY;
                b = INFINITY;
                continue;
            }
            a += dj * log(j / (s->pu[u] * pz));
            b += dj * dj / j;
        }
    }
    for (size_t z = 0; z < n; z++) {
        double dp = s->PzS[z] - s->Pz[z];
        double pz = s->Pz[z] + g * dp;
        if (dp != 0.0 && pz > 0.0)
            b -= dp * dp / pz;
    }
    *d1 = a;
    *d2 = b > 0.0 ? b : 0.0;
}

/* argmin over [0, 1] of f along the segment, given f'(0) = -gap < 0:
 * Newton on f' kept inside a bracket that bisection shrinks. The step cap
 * only ends the search early: any point of the bracket descends. */
static double line_search(const mi_solver *s, double gap)
{
    double d1, d2;
    line_derivs(s, 1.0, &d1, &d2);
    if (d1 <= 0.0)
        return 1.0;
    double lo = 0.0, hi = 1.0, g = 0.5;
    double target = 1e-6 * gap;
    for (int it = 0; it < LINE_SEARCH_MAX_STEPS; it++) {
        line_derivs(s, g, &d1, &d2);
        if (fabs(d1) <= target)
            break;
        if (d1 < 0.0)
            lo = g;
        else
            hi = g;
        if (hi - lo < 1e-15)
            break;
        double next = d2 > 0.0 && isfinite(d1) ? g - d1 / d2 : -1.0;
        g = next > lo && next < hi ? next : 0.5 * (lo + hi);
    }
    /* Never the endpoint: it would drop outputs some user still reaches. */
    if (g >= 1.0)
        g = 0.5 * (lo + 1.0);
    return g;
}

int mi_frank_wolfe(mi_solver *s, const mi_fw_oracle *oracle, double *A,
                   double tol_bits, unsigned max_iterations,
                   unsigned *iterations, ts_mi_result *result, char *err,
                   size_t errlen)
{
    size_t n = s->n;
    double alpha = 1.0;
    unsigned it = *iterations;
    for (;;) {
        /* The joint follows the steps affinely; recomputing it from the
         * channel now and then keeps rounding from drifting. */
        if (it % 64 == 0 || it == *iterations)
            mi_joint_of(s, A, alpha, s->J, s->Pz);
        mi_logratio(s);
        mi_gradient_rows(s);
        /* <G, C> = sum_{u,z} J log(J / (p(u) P(z))) = f(C) in nats: f is
         * positively homogeneous in each output's column. */
        double at_c = mi_objective(s);
        double lower;
        if (oracle->lower(oracle->ctx, s, &lower, err, errlen) != 0)
            return -1;
        double gap = at_c - lower;
        if (gap < 0.0)
            gap = 0.0;
        result->gap_bits = gap / M_LN2;
        if (result->gap_bits <= tol_bits) {
            result->converged = 1;
            break;
        }
        if (it >= max_iterations)
            break;
        it++;
        oracle->vertex_joint(oracle->ctx, s);
        /* The line search's own gap is <G, C - S> for the vertex actually
         * used (a repaired one under geo-ind). */
        double step_gap = at_c;
        for (size_t i = 0; i < s->k * n; i++)
            step_gap -= s->JS[i] * s->logratio[i];
        if (!(step_gap > 0.0))
            break;   /* no descent left at double precision */
        double g = line_search(s, step_gap);
        if (g >= 1.0) {
            /* The whole step: f decreases all the way to S (which then
             * reaches every output the users reach, or f'(1) would be
             * +infinity), and alpha * (1 - g) would be 0 and divide
             * below. */
            oracle->apply(oracle->ctx, s, A, 0.0, 1);
            alpha = 1.0;
        } else {
            double na = alpha * (1.0 - g);
            if (na < ALPHA_FLOOR) {
                for (size_t i = 0; i < n * n; i++)
                    A[i] *= alpha;
                alpha = 1.0;
                na = 1.0 - g;
            }
            oracle->apply(oracle->ctx, s, A, g / na, 0);
            alpha = na;
        }
        for (size_t i = 0; i < s->k * n; i++)
            s->J[i] += g * (s->JS[i] - s->J[i]);
        for (size_t z = 0; z < n; z++)
            s->Pz[z] += g * (s->PzS[z] - s->Pz[z]);
    }
    *iterations = it;
    for (size_t i = 0; i < n * n; i++)
        A[i] *= alpha;
    return 0;
}

double ts_mi_bits(const ts_mi_problem *problem, const double *channel)
{
    size_t n = problem->cells, k = problem->users;
    double total = 0.0;
    for (size_t i = 0; i < n * k; i++)
        total += problem->joint[i];
    double *J = calloc(k * n, sizeof *J);
    double *Pz = calloc(n, sizeof *Pz);
    double *pu = calloc(k, sizeof *pu);
    if (J == NULL || Pz == NULL || pu == NULL || !(total > 0.0)) {
        free(J);
        free(Pz);
        free(pu);
        return NAN;
    }
    for (size_t u = 0; u < k; u++)
        for (size_t x = 0; x < n; x++) {
            double p = problem->joint[u * n + x] / total;
            if (p <= 0.0)
                continue;
            pu[u] += p;
            for (size_t z = 0; z < n; z++)
                J[u * n + z] += p * channel[x * n + z];
        }
    for (size_t u = 0; u < k; u++)
        for (size_t z = 0; z < n; z++)
            Pz[z] += J[u * n + z];
    double f = 0.0;
    for (size_t u = 0; u < k; u++)
        for (size_t z = 0; z < n; z++) {
            double j = J[u * n + z];
            if (j > 0.0)
                f += j * log(j / (pu[u] * Pz[z]));
        }
    free(J);
    free(Pz);
    free(pu);
    return f > 0.0 ? f / M_LN2 : 0.0;
}

double ts_mi_distortion(const ts_mi_problem *problem, const double *channel)
{
    size_t n = problem->cells, k = problem->users;
    double total = 0.0, D = 0.0;
    for (size_t i = 0; i < n * k; i++)
        total += problem->joint[i];
    for (size_t x = 0; x < n; x++) {
        double px = 0.0;
        for (size_t u = 0; u < k; u++)
            px += problem->joint[u * n + x];
        if (px <= 0.0)
            continue;
        double r = 0.0;
        for (size_t z = 0; z < n; z++)
            r += mi_cost(problem, x, z) * channel[x * n + z];
        D += px / total * r;
    }
    return D;
}

double mi_tilt_rows(const mi_tilt *tl, size_t n, double t, double *la,
                    double *A, double *slope)
{
    double D = 0.0, dD = 0.0;
    double floor_value = exp(TILT_LOG_FLOOR);
    for (size_t i = 0; i < tl->rows; i++) {
        size_t x = tl->cell != NULL ? tl->cell[i] : i;
        const double *a = tl->a + i * n, *d = tl->d + i * n;
        double *row = A + x * n, *lrow = la + i * n;
        double top = -INFINITY;
        for (size_t z = 0; z < n; z++) {
            double e = a[z] - t * d[z];
            lrow[z] = e;
            if (e > top)
                top = e;
        }
        double s0 = 0.0, s1 = 0.0, s2 = 0.0;
        for (size_t z = 0; z < n; z++) {
            double e = exp(lrow[z] - top);
            row[z] = e;
            s0 += e;
            s1 += e * d[z];
            s2 += e * d[z] * d[z];
        }
        double mean = s1 / s0;
        double var = s2 / s0 - mean * mean;
        D += tl->px[x] * mean;
        dD -= tl->px[x] * (var > 0.0 ? var : 0.0);
        double shift = top + log(s0), inv = 1.0 / s0;
        for (size_t z = 0; z < n; z++) {
            double l = lrow[z] - shift;
            if (l < TILT_LOG_FLOOR) {
                lrow[z] = TILT_LOG_FLOOR;
                row[z] = floor_value;
            } else {
                lrow[z] = l;
                row[z] *= inv;
            }
        }
    }
    *slope = dD;
    return D;
}

int mi_tilt_solve(const mi_tilt *tl, size_t n, double L, double t,
                  double *la, double *A, double *tilt)
{
    double lo = 0.0, hi = INFINITY, slope;
    int tried_zero = 0;
    for (int it = 0;; it++) {
        tried_zero |= t == 0.0;
        double D = mi_tilt_rows(tl, n, t, la, A, &slope);
        if (fabs(D - L) <= MU_PRECISION * L)
            break;
        if (D > L) {
            lo = t;
        } else {
            hi = t;
            if (t == 0.0)
                break;   /* the bound is slack: no tilt */
        }
        int capped = it + 1 >= MU_MAX_STEPS;
        if (capped && !isfinite(hi))
            return -1;
        if (capped || (isfinite(hi) && hi - lo <= 1e-15 * hi)) {
            /* Rounding floor, or the cap: settle on the feasible side. */
            if (D > L)
                mi_tilt_rows(tl, n, hi, la, A, &slope);
            t = hi;
            break;
        }
        double next = slope < 0.0 ? t - (D - L) / slope : NAN;
        if (!(next > lo && next < hi)) {
            if (!(next > lo) && lo == 0.0 && !tried_zero)
                next = 0.0;
            else if (isfinite(hi))
                next = 0.5 * (lo + hi);
            else
                next = 2.0 * t + 1.0 / L;
        }
        t = next;
    }
    *tilt = t;
    return 0;
}
