/* The MI-optimal channel by Frank-Wolfe (conditional gradient), and,
 * without geo-ind, by mirror descent certified with the same gap.
 *
 * Why mirror descent first in the plain case (measured on the bench's
 * synthetic joints at a 1e-3 bit gap): the generalised Blahut-Arimoto step
 * (md_solve below) moves every entry of every row at once, where a FW step
 * moves the whole channel towards one vertex, so it needs 130-380 steps
 * where FW needs 500-9,000, and it is 2-10x faster overall (61.8 s -> 6.0 s
 * at 1,024 cells x 20 users). Its iterates are feasible, so the FW gap at
 * each, from the exact linear step below, certifies it exactly as it does
 * FW's; if mirror descent runs out of steps, FW continues from its channel
 * with the same certificate. SQUAREM extrapolation of the log channel was
 * tried and dropped: its steps were almost always rejected by the
 * monotonicity safeguard (entries dying at a constant log rate dominate
 * the step length), so it only cost a third more work per step.
 *
 * Why Frank-Wolfe. The feasible set is a polytope (rows on the simplex, one
 * linear distortion constraint, optionally linear geo-ind constraints) and
 * the objective f(C) = I(U; Z) is convex and smooth wherever every used
 * output carries every user (which the start point arranges and every step
 * keeps, below). Conditional gradient needs only a linear minimisation over
 * the polytope per step, and that minimisation gives for free the
 * certificate: for the step's vertex S,
 *     gap(C) = <grad f(C), C - S> >= f(C) - f*
 * by convexity (f* >= f(C) + <grad f(C), C* - C> >= f(C) - gap). We stop when
 * the gap is below the tolerance, so the reported gap bounds the returned
 * channel's distance to the optimum exactly, whatever the iteration count.
 *
 * The linear step without geo-ind. Dualising the single distortion
 * constraint with mu >= 0, min <G, S> over the polytope equals
 * max_mu [ sum_x min_z (G(x,z) + mu p(x) d(x,z)) - mu L ]: each row picks a
 * cell of the lower envelope of the lines G(x,z) + mu w(x,z) in mu. The
 * rows' envelopes are built in O(n) each (cells pre-sorted by distance), and
 * a sweep over their breakpoints in increasing mu finds where the total
 * distortion falls to L; the row switching there is mixed between its two
 * cells so that E[d] = L exactly. That point is an exact LP optimum (it is
 * feasible and satisfies complementary slackness with that mu), so the gap
 * is exact, not an estimate.
 *
 * The step length. Along C + g (S - C) the joint P(u, z) is affine in g, so
 * f is cheap to differentiate there; the exact line search is a safeguarded
 * Newton iteration on f'(g) (f is convex along the segment). f'(g) tends to
 * +infinity as g -> 1 whenever S drops an output some user still reaches,
 * so the step stays below 1 and every entry that starts positive stays
 * positive: no output ever carries only some users, which is what keeps
 * the gradient finite (a partially used output has derivative -infinity).
 *
 * Gradient. With J(u, z) = sum_x p(u, x) C(x, z) and P(z) = sum_u J(u, z),
 * f = sum_{u,z} J log(J / (p(u) P(z))), and
 *     df/dC(x, z) = sum_u p(u, x) log(J(u, z) / (p(u) P(z)))
 * (the +1 terms of the derivative cancel because rows sum to one). Only the
 * users of cell x enter row x, so a row costs (users of x) x n: the joint's
 * sparsity is what makes 1,000 cells cheap.
 *
 * The channel is kept as alpha * A with a scalar alpha, so that the update
 * C <- (1 - g) C + g S touches only S's support in the plain case.
 *
 * Geo-indistinguishability. eps-geo-ind over all n^2 pairs is implied by
 * constraints between neighbours only: if C(a, z) <= exp(e' d(a, b)) C(b, z)
 * on every edge of a graph, then chaining along a shortest path gives
 * C(x, z) <= exp(e' sp(x, x')) C(x', z) for every pair, where sp is the
 * graph's path length. With e' = eps / s and s = max sp(x, x') / d(x, x')
 * (the graph's stretch, computed exactly by Dijkstra from every cell), this
 * is <= exp(eps d(x, x')) C(x', z): the guarantee is eps for every pair,
 * not weakened. The graph is the 8-cone Yao graph (each cell linked to its
 * nearest cell in each 45-degree cone, symmetrised): on a square grid it is
 * the 8-neighbour grid (stretch 1/cos(22.5 deg) ~ 1.0824), on rectangular
 * cells it adapts to their aspect, and on any point set it is connected. A
 * margin of 1e-9 on e' absorbs the rounding of a chain of multiplications.
 *
 * With these constraints the linear step is an LP over all n^2 entries and
 * about 8 n^2 constraints, solved by GLPK's simplex, warm-started from the
 * previous step's basis (only the objective changes). Its size grows as n^2
 * x 8 n^2, so above TS_MI_GEOIND_MAX_CELLS cells we refuse rather than drop
 * constraints. GLPK's answers are feasible only to its tolerance, so every
 * vertex is repaired before use: negatives clamped, rows renormalised, and
 * then mixed with the uniform constant channel (ratio 1 on every pair, so
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
#include "inference/mi_optimal.h"
#include "inference/error.h"

#include <glpk.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JOINT_SUM_TOLERANCE 1e-6
/* Relative tightening of the distortion row in the geo-ind LP: the room
 * the repair of GLPK's vertices may use. */
#define GEOIND_RHO 1e-6
/* Relative margin on e' against the rounding of chained ratios. */
#define GEOIND_EPS_MARGIN 1e-9
#define GEOIND_TIME_LIMIT_MS 60000
/* alpha of C = alpha * A is folded into A below this. */
#define ALPHA_FLOOR 1e-150

typedef struct entry {
    uint32_t index;   /* user (cell lists) or cell (user lists) */
    double p;         /* p(u, x) */
} entry;

typedef struct solver {
    const ts_mi_problem *pb;
    size_t n, k;
    double total;            /* sum of the joint, for normalising */
    double *px, *pu;         /* marginals, normalised */
    size_t *cell_start;      /* CSR: users of each cell */
    entry *cell_users;
    size_t *user_start;      /* CSR: cells of each user */
    entry *user_cells;
    uint32_t *visited;       /* cells with p(x) > 0 */
    size_t m;
    double *J, *Pz;          /* k x n joint of (U, Z), n marginal */
    double *JS, *PzS;        /* the same for the vertex S */
    double *G;               /* m x n gradient rows, visited cells only */
    double *logratio;        /* k x n: log(J / (p(u) P(z))) */
} solver;

static double dist(const ts_vec2 *c, size_t a, size_t b)
{
    return hypot(c[a].x - c[b].x, c[a].y - c[b].y);
}

static void solver_free(solver *s)
{
    free(s->px);
    free(s->pu);
    free(s->cell_start);
    free(s->cell_users);
    free(s->user_start);
    free(s->user_cells);
    free(s->visited);
    free(s->J);
    free(s->Pz);
    free(s->JS);
    free(s->PzS);
    free(s->G);
    free(s->logratio);
}

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
    if (!(pb->distortion_m >= 0.0) || !isfinite(pb->distortion_m))
        return ts_fail(err, errlen, "mi-optimal: distortion bound %g m is "
                       "not a finite non-negative number", pb->distortion_m);
    if (!(pb->geoind_epsilon >= 0.0) || !isfinite(pb->geoind_epsilon))
        return ts_fail(err, errlen, "mi-optimal: geoind_epsilon %g is not a "
                       "finite non-negative number", pb->geoind_epsilon);
    if (!(params->gap_tolerance_bits > 0.0) ||
        !isfinite(params->gap_tolerance_bits))
        return ts_fail(err, errlen, "mi-optimal: gap tolerance %g is not a "
                       "positive number", params->gap_tolerance_bits);
    *total = sum;
    return 0;
}

static int solver_init(solver *s, const ts_mi_problem *pb, double total,
                       char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->pb = pb;
    s->n = pb->cells;
    s->k = pb->users;
    s->total = total;
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
    s->J = malloc(k * n * sizeof *s->J);
    s->Pz = malloc(n * sizeof *s->Pz);
    s->JS = malloc(k * n * sizeof *s->JS);
    s->PzS = malloc(n * sizeof *s->PzS);
    s->logratio = malloc(k * n * sizeof *s->logratio);
    if (!s->px || !s->pu || !s->cell_start || !s->cell_users ||
        !s->user_start || !s->user_cells || !s->visited || !s->J || !s->Pz ||
        !s->JS || !s->PzS || !s->logratio) {
        solver_free(s);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    size_t e = 0;
    for (size_t u = 0; u < k; u++) {
        s->user_start[u] = e;
        for (size_t x = 0; x < n; x++) {
            double p = pb->joint[u * n + x] / total;
            if (p > 0.0) {
                s->user_cells[e++] = (entry){ (uint32_t)x, p };
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
                s->cell_users[e++] = (entry){ (uint32_t)u, p };
        }
        if (s->px[x] > 0.0)
            s->visited[s->m++] = (uint32_t)x;
    }
    s->cell_start[n] = e;
    s->G = malloc(s->m * n * sizeof *s->G);
    if (s->G == NULL) {
        solver_free(s);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    return 0;
}

/* J and P(z) of the channel alpha * A (rows of visited cells). */
static void joint_of(const solver *s, const double *A, double alpha,
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

/* log(J / (p(u) P(z))) at the joint J. */
static void logratio_of(solver *s)
{
    size_t n = s->n;
    for (size_t u = 0; u < s->k; u++)
        for (size_t z = 0; z < n; z++) {
            double j = s->J[u * n + z];
            /* Zero J(u, z) only where no visited row reaches z at all
             * (then P(z) = 0 too); no row of user u's cells has mass
             * there, and the entry is a dead column. The start point
             * leaves no such column in use, see above. */
            s->logratio[u * n + z] =
                j > 0.0 ? log(j / (s->pu[u] * s->Pz[z])) : 0.0;
        }
}

/* Gradient rows of visited cells from the log ratios. */
static void gradient_rows(solver *s)
{
    size_t n = s->n;
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        double *g = s->G + i * n;
        memset(g, 0, n * sizeof *g);
        for (size_t e = s->cell_start[x]; e < s->cell_start[x + 1]; e++) {
            const double *lr = s->logratio + (size_t)s->cell_users[e].index * n;
            double p = s->cell_users[e].p;
            for (size_t z = 0; z < n; z++)
                g[z] += p * lr[z];
        }
    }
}

static void gradient(solver *s)
{
    logratio_of(s);
    gradient_rows(s);
}

/* f'(g) and f''(g) along J + g (JS - J). */
static void line_derivs(const solver *s, double g, double *d1, double *d2)
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
 * Newton on f' kept inside a bracket that bisection shrinks. */
static double line_search(const solver *s, double gap)
{
    double d1, d2;
    line_derivs(s, 1.0, &d1, &d2);
    if (d1 <= 0.0)
        return 1.0;
    double lo = 0.0, hi = 1.0, g = 0.5;
    double target = 1e-6 * gap;
    for (int it = 0; it < 100; it++) {
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

/* ------------------------------------------------ the plain linear step */

typedef struct breakpoint {
    double mu;
    uint32_t row;     /* index into visited */
} breakpoint;

static int compare_breakpoints(const void *a, const void *b)
{
    double x = ((const breakpoint *)a)->mu, y = ((const breakpoint *)b)->mu;
    return (x > y) - (x < y);
}

typedef struct envelope {
    uint32_t *order;     /* m x n: cells by distance from x, farthest first */
    uint32_t *hull;      /* m x n: envelope cells per row */
    double *bp;          /* m x n: breakpoints */
    size_t *len;         /* envelope length per row */
    size_t *pos;         /* current piece per row */
    breakpoint *all;
    double *w;           /* m x n: p(x) d(x, z) */
    uint32_t *records;   /* n */
} envelope;

static const ts_vec2 *sort_centres;
static size_t sort_from;

static int compare_far_first(const void *a, const void *b)
{
    double da = dist(sort_centres, sort_from, *(const uint32_t *)a);
    double db = dist(sort_centres, sort_from, *(const uint32_t *)b);
    return (da < db) - (da > db);
}

static void envelope_free(envelope *ev)
{
    free(ev->order);
    free(ev->hull);
    free(ev->bp);
    free(ev->len);
    free(ev->pos);
    free(ev->all);
    free(ev->w);
    free(ev->records);
}

static int envelope_init(envelope *ev, const solver *s, char *err,
                         size_t errlen)
{
    size_t m = s->m, n = s->n;
    memset(ev, 0, sizeof *ev);
    ev->order = malloc(m * n * sizeof *ev->order);
    ev->hull = malloc(m * n * sizeof *ev->hull);
    ev->bp = malloc(m * n * sizeof *ev->bp);
    ev->len = malloc(m * sizeof *ev->len);
    ev->pos = malloc(m * sizeof *ev->pos);
    ev->all = malloc(m * n * sizeof *ev->all);
    ev->w = malloc(m * n * sizeof *ev->w);
    ev->records = malloc(n * sizeof *ev->records);
    if (!ev->order || !ev->hull || !ev->bp || !ev->len || !ev->pos ||
        !ev->all || !ev->w || !ev->records) {
        envelope_free(ev);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    /* qsort has no context argument; the sort is single-threaded and
     * the statics are only read by the comparator during it. */
    sort_centres = s->pb->centres;
    for (size_t i = 0; i < m; i++) {
        size_t x = s->visited[i];
        uint32_t *o = ev->order + i * n;
        for (size_t z = 0; z < n; z++) {
            o[z] = (uint32_t)z;
            ev->w[i * n + z] = s->px[x] * dist(s->pb->centres, x, z);
        }
        sort_from = x;
        qsort(o, n, sizeof *o, compare_far_first);
    }
    return 0;
}

/* Vertex of the plain polytope minimising <G, S>: S's row i is cell
 * z_of[i], except row mix_row, which puts mix_theta on mix_z. Returns
 * <G, S>. */
typedef struct vertex {
    uint32_t *z_of;
    size_t mix_row;     /* SIZE_MAX: none */
    uint32_t mix_z;
    double mix_theta;
} vertex;

static double plain_lmo(const solver *s, envelope *ev, double L, vertex *v)
{
    size_t m = s->m, n = s->n;
    double D = 0.0;
    size_t nb = 0;
    for (size_t i = 0; i < m; i++) {
        const double *g = s->G + i * n, *w = ev->w + i * n;
        const uint32_t *o = ev->order + i * n;
        uint32_t *h = ev->hull + i * n;
        double *bp = ev->bp + i * n;
        /* Only a cell whose G is below that of every nearer cell can be
         * lowest for some mu >= 0: one pass from the nearest cell keeps
         * those records, and the hull is built over
         * them alone, farthest first. */
        uint32_t *rec = ev->records;
        size_t nrec = 0;
        double best = INFINITY;
        for (size_t t = n; t-- > 0;) {
            uint32_t c = o[t];
            if (g[c] < best) {
                best = g[c];
                rec[nrec++] = c;
            }
        }
        size_t len = 0;
        for (size_t t = nrec; t-- > 0;) {
            uint32_t c = rec[t];
            if (len > 0 && w[h[len - 1]] == w[c]) {
                if (g[c] >= g[h[len - 1]])
                    continue;
                len--;
            }
            while (len >= 2) {
                uint32_t a = h[len - 2], b = h[len - 1];
                /* b is never strictly lowest when the crossing of a and
                 * c comes no later than that of a and b. */
                if ((g[c] - g[a]) * (w[a] - w[b]) <=
                    (g[b] - g[a]) * (w[a] - w[c]))
                    len--;
                else
                    break;
            }
            h[len++] = c;
        }
        /* Breakpoints; drop the pieces that end at mu <= 0 (ties at 0 go
         * to the cheaper cell). */
        size_t first = 0;
        for (size_t t = 0; t + 1 < len; t++) {
            uint32_t a = h[t], b = h[t + 1];
            bp[t] = (g[b] - g[a]) / (w[a] - w[b]);
            if (bp[t] <= 0.0)
                first = t + 1;
        }
        ev->pos[i] = first;
        ev->len[i] = len;
        D += w[h[first]];
        for (size_t t = first; t + 1 < len; t++)
            ev->all[nb++] = (breakpoint){ bp[t], (uint32_t)i };
    }
    v->mix_row = SIZE_MAX;
    if (D > L) {
        qsort(ev->all, nb, sizeof *ev->all, compare_breakpoints);
        for (size_t b = 0; b < nb; b++) {
            size_t i = ev->all[b].row;
            const uint32_t *h = ev->hull + i * n;
            const double *w = ev->w + i * n;
            size_t p = ev->pos[i];
            double drop = w[h[p]] - w[h[p + 1]];
            if (D - drop <= L) {
                v->mix_row = i;
                v->mix_z = h[p + 1];
                v->mix_theta = drop > 0.0 ? (D - L) / drop : 1.0;
                if (v->mix_theta > 1.0)
                    v->mix_theta = 1.0;
                break;
            }
            D -= drop;
            ev->pos[i] = p + 1;
        }
    }
    double value = 0.0;
    for (size_t i = 0; i < m; i++) {
        const double *g = s->G + i * n;
        uint32_t z = ev->hull[i * n + ev->pos[i]];
        v->z_of[i] = z;
        if (i == v->mix_row)
            value += (1.0 - v->mix_theta) * g[z] + v->mix_theta * g[v->mix_z];
        else
            value += g[z];
    }
    return value;
}

static void plain_vertex_joint(solver *s, const vertex *v,
                               const uint32_t *row_of)
{
    size_t n = s->n;
    memset(s->JS, 0, s->k * n * sizeof *s->JS);
    for (size_t u = 0; u < s->k; u++) {
        double *row = s->JS + u * n;
        for (size_t e = s->user_start[u]; e < s->user_start[u + 1]; e++) {
            size_t i = row_of[s->user_cells[e].index];
            double p = s->user_cells[e].p;
            if (i == v->mix_row) {
                row[v->z_of[i]] += p * (1.0 - v->mix_theta);
                row[v->mix_z] += p * v->mix_theta;
            } else {
                row[v->z_of[i]] += p;
            }
        }
    }
    memset(s->PzS, 0, n * sizeof *s->PzS);
    for (size_t u = 0; u < s->k; u++)
        for (size_t z = 0; z < n; z++)
            s->PzS[z] += s->JS[u * n + z];
}

/* ------------------------------------- the plain case: mirror descent */

/* Entries of the mirror-descent channel stay at or above exp(LOG_FLOOR)
 * (about 1e-261): a hard zero could never grow back under a
 * multiplicative update, and a column some users reach and others not
 * would have an infinite gradient. Times p(u, x) this is still a normal
 * double, so J never underflows. The floor moves E[d] by at most
 * n exp(LOG_FLOOR) times the diameter, far below the 1e-9 allowed. */
#define LOG_FLOOR (-600.0)
/* The multiplier is solved to this relative precision on E[d]. */
#define MU_PRECISION 1e-12
#define ETA_MAX 1024.0

typedef struct md {
    double *d;          /* m x n: d(visited[i], z) */
    double *a;          /* m x n: ln C - eta h, the untilted weights */
    double *la, *lb;    /* m x n: log channels, current and candidate */
    double *B;          /* n x n: the candidate channel */
    double mu;          /* last multiplier (per metre, of f) */
} md;

static void md_free(md *w)
{
    free(w->d);
    free(w->a);
    free(w->la);
    free(w->lb);
    free(w->B);
}

static int md_init(md *w, const solver *s, char *err, size_t errlen)
{
    size_t m = s->m, n = s->n;
    memset(w, 0, sizeof *w);
    w->d = malloc(m * n * sizeof *w->d);
    w->a = malloc(m * n * sizeof *w->a);
    w->la = malloc(m * n * sizeof *w->la);
    w->lb = malloc(m * n * sizeof *w->lb);
    w->B = malloc(n * n * sizeof *w->B);
    if (!w->d || !w->a || !w->la || !w->lb || !w->B) {
        md_free(w);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    for (size_t i = 0; i < m; i++)
        for (size_t z = 0; z < n; z++)
            w->d[i * n + z] = dist(s->pb->centres, s->visited[i], z);
    return 0;
}

/* The tilted rows C(x, z) ∝ exp(a(x, z) - t d(x, z)): writes them to A
 * (visited rows) and their logs to la, returns E[d] and its derivative in
 * t (minus the p(x)-weighted variance of d under the rows). */
static double md_tilt(const md *w, const solver *s, double t, double *la,
                      double *A, double *slope)
{
    size_t n = s->n;
    double D = 0.0, dD = 0.0;
    double floor_value = exp(LOG_FLOOR);
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        const double *a = w->a + i * n, *d = w->d + i * n;
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
        D += s->px[x] * mean;
        dD -= s->px[x] * (var > 0.0 ? var : 0.0);
        double shift = top + log(s0), inv = 1.0 / s0;
        for (size_t z = 0; z < n; z++) {
            double l = lrow[z] - shift;
            if (l < LOG_FLOOR) {
                lrow[z] = LOG_FLOOR;
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

/* The tilt t >= 0 that makes E[d] = L (0 if L is slack there), writing
 * its channel. E[d] falls as t grows (its slope is minus a variance), so
 * a Newton iteration kept in a bisection bracket, started from the last
 * step's multiplier, takes two or three passes once warm. */
static double md_solve_tilt(const md *w, const solver *s, double L,
                            double t, double *la, double *A)
{
    double lo = 0.0, hi = INFINITY, slope;
    int tried_zero = 0;
    for (int it = 0; it < 200; it++) {
        tried_zero |= t == 0.0;
        double D = md_tilt(w, s, t, la, A, &slope);
        if (fabs(D - L) <= MU_PRECISION * L)
            break;
        if (D > L) {
            lo = t;
        } else {
            hi = t;
            if (t == 0.0)
                break;   /* the bound is slack: no tilt */
        }
        if (isfinite(hi) && hi - lo <= 1e-15 * hi) {
            /* Rounding floor: settle on the feasible side. */
            if (D > L)
                md_tilt(w, s, hi, la, A, &slope);
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
    return t;
}

/* f in nats from s->J and s->logratio. */
static double md_objective(const solver *s)
{
    double f = 0.0;
    for (size_t i = 0; i < s->k * s->n; i++)
        f += s->J[i] * s->logratio[i];
    return f;
}

/* Mirror descent on the rows in the KL geometry weighted by p(x),
 * restricted to E[d] <= L: C'(x, z) ∝ C(x, z) exp(-eta (h(x, z) +
 * mu d(x, z))) with h = G / p(x) and mu >= 0 the multiplier that makes
 * E[d] = L. With eta = 1 and U = X this is Blahut-Arimoto.
 *
 * Why it is a descent method: f = sum_u p(u) (-H(P(.|u))) + H(P(Z)) up to
 * a constant, and phi(C) = sum_x p(x) sum_z C ln C exceeds the first part
 * by sum_u p(u) I(X; Z | U = u), convex in C for a fixed p(x|u); the
 * second part is concave. So phi - f is convex: f is 1-smooth relative
 * to phi, and the step with eta = 1 never increases f on feasible
 * channels (Lu, Freund & Nesterov 2018). The bound is loose when a user's
 * visits spread over many cells (each row then moves P(z|u) little), and
 * step 1 crawls; so eta grows while the sufficient-decrease test
 *     f(C') <= f(C) + <G, C' - C> + KL_p(C' || C) / eta
 * passes and halves (down to 1, where it always passes) when it fails.
 *
 * Every accepted iterate after the first is feasible, and the FW gap at
 * it (the exact linear step below) is the certificate; we stop there. */
/* tol in nats. */
static int md_solve(solver *s, envelope *ev, vertex *v, double L, double tol,
                    unsigned max_it, double *A, unsigned *iters,
                    char *err, size_t errlen)
{
    md w;
    if (md_init(&w, s, err, errlen) != 0)
        return -1;
    size_t m = s->m, n = s->n;
    double *cur = A, *cand = w.B;
    double lu = -log((double)n);
    for (size_t i = 0; i < m * n; i++)
        w.la[i] = lu;
    for (size_t i = 0; i < m; i++)
        for (size_t z = 0; z < n; z++)
            cur[(size_t)s->visited[i] * n + z] = 1.0 / (double)n;
    joint_of(s, cur, 1.0, s->J, s->Pz);
    logratio_of(s);
    double f0 = md_objective(s), eta = 1.0;
    unsigned it = 0;
    int fresh = 1;    /* s->G is stale: the current channel just changed */
    int started = 0;  /* the uniform start is not feasible: no gap there */
    for (;;) {
        if (fresh) {
            gradient_rows(s);
            fresh = 0;
            if (started) {
                double gap = f0 - plain_lmo(s, ev, L, v);
                if (gap <= tol)
                    break;
            }
        }
        if (it >= max_it)
            break;
        it++;
        for (size_t i = 0; i < m; i++) {
            double step = eta / s->px[s->visited[i]];
            const double *g = s->G + i * n, *l = w.la + i * n;
            double *a = w.a + i * n;
            for (size_t z = 0; z < n; z++)
                a[z] = l[z] - g[z] * step;
        }
        double t = md_solve_tilt(&w, s, L, eta * w.mu, w.lb, cand);
        joint_of(s, cand, 1.0, s->J, s->Pz);
        logratio_of(s);
        double f1 = md_objective(s);
        int accept = !started || eta <= 1.0;
        if (!accept) {
            double lin = 0.0, kl = 0.0;
            for (size_t i = 0; i < m; i++) {
                size_t x = s->visited[i];
                const double *g = s->G + i * n, *l0 = w.la + i * n,
                             *l1 = w.lb + i * n;
                const double *c0 = cur + x * n, *c1 = cand + x * n;
                double r = 0.0;
                for (size_t z = 0; z < n; z++) {
                    lin += g[z] * (c1[z] - c0[z]);
                    r += c1[z] * (l1[z] - l0[z]);
                }
                kl += s->px[x] * r;
            }
            accept = f1 <= f0 + lin + kl / eta + 1e-12 * fabs(f0);
        }
        if (accept) {
            double *tmp = cur;
            cur = cand;
            cand = tmp;
            tmp = w.la;
            w.la = w.lb;
            w.lb = tmp;
            f0 = f1;
            w.mu = t / eta;
            started = 1;
            fresh = 1;
            eta = eta * 2.0 < ETA_MAX ? eta * 2.0 : ETA_MAX;
        } else {
            /* J and the log ratios now belong to the candidate; G, used
             * for the retry, still belongs to the current channel. The
             * retry's own evaluation restores them. */
            eta = eta / 2.0 > 1.0 ? eta / 2.0 : 1.0;
        }
    }
    if (cur != A)
        for (size_t i = 0; i < m; i++)
            memcpy(A + (size_t)s->visited[i] * n,
                   cur + (size_t)s->visited[i] * n, n * sizeof *A);
    else
        w.B = cand;
    *iters = it;
    md_free(&w);
    return 0;
}

/* ------------------------------------------------- the geo-ind polytope */

typedef struct geo_graph {
    size_t *start;      /* CSR adjacency, symmetric */
    uint32_t *to;
    double *len;
    size_t edges;       /* directed */
    double stretch;
} geo_graph;

static void geo_graph_free(geo_graph *gg)
{
    free(gg->start);
    free(gg->to);
    free(gg->len);
}

/* The 8-cone Yao graph and its exact stretch. */
static int geo_graph_init(geo_graph *gg, const ts_vec2 *c, size_t n,
                          char *err, size_t errlen)
{
    memset(gg, 0, sizeof *gg);
    unsigned char *adj = calloc(n * n, 1);
    double *sp = malloc(n * sizeof *sp);
    unsigned char *done = malloc(n);
    if (adj == NULL || sp == NULL || done == NULL) {
        free(adj);
        free(sp);
        free(done);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    for (size_t x = 0; x < n; x++) {
        size_t best[8];
        double bestd[8];
        for (int q = 0; q < 8; q++) {
            best[q] = SIZE_MAX;
            bestd[q] = INFINITY;
        }
        for (size_t y = 0; y < n; y++) {
            double dx = c[y].x - c[x].x, dy = c[y].y - c[x].y;
            double d = hypot(dx, dy);
            if (y == x || d == 0.0)
                continue;
            /* Cones centred on the axes and the diagonals. */
            double a = atan2(dy, dx) + M_PI / 8.0;
            int q = (int)floor(a / (M_PI / 4.0));
            q = ((q % 8) + 8) % 8;
            if (d < bestd[q]) {
                bestd[q] = d;
                best[q] = y;
            }
        }
        for (int q = 0; q < 8; q++)
            if (best[q] != SIZE_MAX)
                adj[x * n + best[q]] = adj[best[q] * n + x] = 1;
    }
    size_t edges = 0;
    for (size_t i = 0; i < n * n; i++)
        edges += adj[i];
    gg->start = malloc((n + 1) * sizeof *gg->start);
    gg->to = malloc((edges + 1) * sizeof *gg->to);
    gg->len = malloc((edges + 1) * sizeof *gg->len);
    if (!gg->start || !gg->to || !gg->len) {
        free(adj);
        free(sp);
        free(done);
        geo_graph_free(gg);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    size_t e = 0;
    for (size_t x = 0; x < n; x++) {
        gg->start[x] = e;
        for (size_t y = 0; y < n; y++)
            if (adj[x * n + y]) {
                gg->to[e] = (uint32_t)y;
                gg->len[e++] = dist(c, x, y);
            }
    }
    gg->start[n] = e;
    gg->edges = e;
    /* Dijkstra from every cell; O(n^2) each is fine at the sizes the LP
     * allows. */
    double stretch = 1.0;
    for (size_t src = 0; src < n; src++) {
        for (size_t y = 0; y < n; y++) {
            sp[y] = INFINITY;
            done[y] = 0;
        }
        sp[src] = 0.0;
        for (size_t it = 0; it < n; it++) {
            size_t b = SIZE_MAX;
            for (size_t y = 0; y < n; y++)
                if (!done[y] && (b == SIZE_MAX || sp[y] < sp[b]))
                    b = y;
            if (b == SIZE_MAX || !isfinite(sp[b]))
                break;
            done[b] = 1;
            for (size_t t = gg->start[b]; t < gg->start[b + 1]; t++) {
                double nd = sp[b] + gg->len[t];
                if (nd < sp[gg->to[t]])
                    sp[gg->to[t]] = nd;
            }
        }
        for (size_t y = 0; y < n; y++) {
            double d = dist(c, src, y);
            if (d == 0.0)
                continue;
            if (!isfinite(sp[y])) {
                stretch = INFINITY;
                break;
            }
            if (sp[y] / d > stretch)
                stretch = sp[y] / d;
        }
    }
    free(adj);
    free(sp);
    free(done);
    gg->stretch = stretch;
    if (!isfinite(stretch)) {
        geo_graph_free(gg);
        return ts_fail(err, errlen, "mi-optimal: the cells' neighbour graph "
                       "is not connected (duplicate centres?)");
    }
    return 0;
}

typedef struct geo_lp {
    glp_prob *lp;
    const geo_graph *gg;
    double eps_edge;       /* e' */
    double *S;             /* n x n repaired vertex */
    double *S0;            /* n x n repaired least-distortion channel */
    double D0;             /* its E[d] */
    double rho;            /* the distortion row's tightening, relative */
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

static int geo_lp_init(geo_lp *gl, const solver *s, const geo_graph *gg,
                       double eps, char *err, size_t errlen)
{
    size_t n = s->n;
    memset(gl, 0, sizeof *gl);
    gl->gg = gg;
    gl->eps_edge = eps / gg->stretch * (1.0 - GEOIND_EPS_MARGIN);
    gl->S = malloc(n * n * sizeof *gl->S);
    gl->S0 = malloc(n * n * sizeof *gl->S0);
    size_t nz = n * n + s->m * n + 2 * gg->edges * n;
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
    size_t rows = n + 1 + gg->edges * n;
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
    double L = s->pb->distortion_m;
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        for (size_t z = 0; z < n; z++) {
            double w = s->px[x] * dist(s->pb->centres, x, z) / L;
            if (w == 0.0)
                continue;
            t++;
            ia[t] = (int)n + 1;
            ja[t] = (int)(x * n + z) + 1;
            ar[t] = w;
        }
    }
    size_t r = n + 1;
    for (size_t x = 0; x < n; x++)
        for (size_t e = gg->start[x]; e < gg->start[x + 1]; e++) {
            size_t y = gg->to[e];
            double ratio = exp(gl->eps_edge * gg->len[e]);
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
static double geo_lp_vertex(geo_lp *gl, const solver *s, double L,
                            const double *S0)
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
    const geo_graph *gg = gl->gg;
    double beta = 0.0;
    for (size_t x = 0; x < n; x++)
        for (size_t e = gg->start[x]; e < gg->start[x + 1]; e++) {
            size_t y = gg->to[e];
            double ratio = exp(gl->eps_edge * gg->len[e]);
            double room = (ratio - 1.0) * unif;
            for (size_t z = 0; z < n; z++) {
                double viol = S[x * n + z] - ratio * S[y * n + z];
                if (viol > 0.0) {
                    double b = viol / (viol + room);
                    if (b > beta)
                        beta = b;
                }
            }
        }
    if (beta > 0.0) {
        /* Twice the least weight, against the rounding of the mix. */
        beta = 2.0 * beta + 1e-15;
        if (beta > 1.0)
            beta = 1.0;
        for (size_t i = 0; i < n * n; i++)
            S[i] = (1.0 - beta) * S[i] + beta * unif;
    }
    double D = 0.0;
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        for (size_t z = 0; z < n; z++)
            D += s->px[x] * dist(s->pb->centres, x, z) * S[x * n + z];
    }
    if (S0 != NULL && D > L) {
        /* (1 - t) D + t D0 = L; the relative 1e-9 lands it just inside
         * against the rounding of the mix, and t <= 1 since D0 < L. */
        double t = (D - L) / (D - gl->D0) * (1.0 + 1e-9);
        if (t > 1.0)
            t = 1.0;
        for (size_t i = 0; i < n * n; i++)
            S[i] = (1.0 - t) * S[i] + t * S0[i];
        D = (1.0 - t) * D + t * gl->D0;
    }
    return D;
}

static void dense_vertex_joint(solver *s, const double *S)
{
    joint_of(s, S, 1.0, s->JS, s->PzS);
}

/* ------------------------------------------------------------ the driver */

static double channel_distortion(const solver *s, const double *C)
{
    double D = 0.0;
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        double r = 0.0;
        for (size_t z = 0; z < s->n; z++)
            r += dist(s->pb->centres, x, z) * C[x * s->n + z];
        D += s->px[x] * r;
    }
    return D;
}

/* Unvisited rows copy the row of the nearest visited cell (lowest index on
 * ties): a report from such a cell is then distributed exactly like one
 * from a cell the training trace knows, so it adds no output and no
 * identifying power, and its distortion is at most the distance to that
 * cell plus that cell's own. */
static void fill_unvisited(const solver *s, double *C)
{
    size_t n = s->n;
    for (size_t x = 0; x < n; x++) {
        if (s->px[x] > 0.0)
            continue;
        size_t best = SIZE_MAX;
        double bd = INFINITY;
        for (size_t i = 0; i < s->m; i++) {
            double d = dist(s->pb->centres, x, s->visited[i]);
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

static void normalise_rows(double *C, size_t n, const solver *s, int all)
{
    for (size_t x = 0; x < n; x++) {
        if (!all && s->px[x] <= 0.0)
            continue;
        double sum = 0.0;
        for (size_t z = 0; z < n; z++)
            sum += C[x * n + z];
        for (size_t z = 0; z < n; z++)
            C[x * n + z] /= sum;
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
    if (geo && problem->cells > TS_MI_GEOIND_MAX_CELLS)
        return ts_fail(err, errlen, "mi-optimal: with geoind_epsilon the "
                       "linear steps are LPs over cells^2 entries; %zu cells "
                       "exceed the limit of %u (use larger cells)",
                       problem->cells, (unsigned)TS_MI_GEOIND_MAX_CELLS);
    solver s;
    if (solver_init(&s, problem, total, err, errlen) != 0)
        return -1;
    size_t n = s.n;
    double L = problem->distortion_m;
    double *A = channel;
    double alpha = 1.0;
    int rc = 0;
    envelope ev = { 0 };
    vertex v = { 0 };
    uint32_t *row_of = NULL;
    geo_graph gg = { 0 };
    geo_lp gl = { 0 };
    int have_ev = 0, have_gg = 0, have_gl = 0;
    unsigned md_iterations = 0;

    /* D_U: distortion of the uniform constant channel. */
    double D_unif = 0.0;
    for (size_t i = 0; i < s.m; i++) {
        size_t x = s.visited[i];
        double r = 0.0;
        for (size_t z = 0; z < n; z++)
            r += dist(problem->centres, x, z);
        D_unif += s.px[x] * r / (double)n;
    }

    if (!geo && L == 0.0) {
        /* Only the identity has no distortion on visited rows (distinct
         * centres); it is the optimum with gap 0. */
        for (size_t i = 0; i < n * n; i++)
            A[i] = (i / n) == (i % n);
        fill_unvisited(&s, A);
        result->converged = 1;
        goto report;
    }

    if (!geo) {
        /* The best constant channel reports the p(x)-weighted 1-median:
         * with L at or above its distortion, I = 0 is reachable and no
         * iteration is needed. Of the constant channels within L we give
         * the one with the most uniform mass (any is optimal). */
        size_t z_med = 0;
        double D_med = INFINITY;
        for (size_t z = 0; z < n; z++) {
            double D = 0.0;
            for (size_t i = 0; i < s.m; i++)
                D += s.px[s.visited[i]] *
                     dist(problem->centres, s.visited[i], z);
            if (D < D_med) {
                D_med = D;
                z_med = z;
            }
        }
        if (L >= D_med) {
            double theta = D_unif <= L ? 1.0
                           : (L - D_med) / (D_unif - D_med);
            for (size_t x = 0; x < n; x++)
                for (size_t z = 0; z < n; z++)
                    A[x * n + z] = theta / (double)n +
                                   (z == z_med ? 1.0 - theta : 0.0);
            result->mi_bits = ts_mi_bits(problem, channel);
            /* I >= 0 bounds the optimum: the gap is I itself (rounding). */
            result->gap_bits = result->mi_bits;
            result->converged = result->gap_bits <=
                                params->gap_tolerance_bits;
            result->distortion_m = ts_mi_distortion(problem, channel);
            goto out;
        }
        /* Start: identity mixed with the uniform constant channel, as
         * much uniform as L allows: every visited row positive in every
         * column, feasible. */
        double theta = D_unif > L ? L / D_unif : 1.0;
        for (size_t x = 0; x < n; x++)
            for (size_t z = 0; z < n; z++)
                A[x * n + z] = theta / (double)n + (x == z ? 1.0 - theta : 0);
        row_of = malloc(n * sizeof *row_of);
        v.z_of = malloc((s.m + 1) * sizeof *v.z_of);
        if (row_of == NULL || v.z_of == NULL) {
            rc = ts_fail(err, errlen, "mi-optimal: out of memory");
            goto out;
        }
        for (size_t i = 0; i < s.m; i++)
            row_of[s.visited[i]] = (uint32_t)i;
        if (envelope_init(&ev, &s, err, errlen) != 0) {
            rc = -1;
            goto out;
        }
        have_ev = 1;
        if (!params->frank_wolfe_only) {
            /* Mirror descent runs to the tolerance itself: handing over
             * to FW at 1.5 times it was faster on most bench instances
             * but took 128 s instead of 15 s on 1,024 x 50, where FW's
             * gap stalled. FW only continues if the steps run out. */
            if (md_solve(&s, &ev, &v, L, params->gap_tolerance_bits * M_LN2,
                         params->max_iterations, A, &md_iterations, err,
                         errlen) != 0) {
                rc = -1;
                goto out;
            }
            /* E[d] = L to 1e-12 relative; a hair above is mixed with the
             * identity (distortion 0), whose rows keep every entry
             * positive. */
            double D = channel_distortion(&s, A);
            if (D > L) {
                double t = (D - L) / D * (1.0 + 1e-9);
                for (size_t i = 0; i < s.m; i++) {
                    size_t x = s.visited[i];
                    for (size_t z = 0; z < n; z++)
                        A[x * n + z] = (1.0 - t) * A[x * n + z] +
                                       (z == x ? t : 0.0);
                }
            }
        }
    } else {
        if (L == 0.0) {
            rc = ts_fail(err, errlen, "mi-optimal: no geo-indistinguishable "
                         "channel has zero distortion");
            goto out;
        }
        if (geo_graph_init(&gg, problem->centres, n, err, errlen) != 0) {
            rc = -1;
            goto out;
        }
        have_gg = 1;
        if (geo_lp_init(&gl, &s, &gg, problem->geoind_epsilon, err,
                        errlen) != 0) {
            rc = -1;
            goto out;
        }
        have_gl = 1;
        /* Least distortion under geo-ind, with the distortion row free. */
        for (size_t i = 0; i < s.m; i++) {
            size_t x = s.visited[i];
            for (size_t z = 0; z < n; z++)
                glp_set_obj_coef(gl.lp, (int)(x * n + z) + 1,
                                 s.px[x] * dist(problem->centres, x, z) / L);
        }
        if (geo_lp_solve(&gl, err, errlen) != 0) {
            rc = -1;
            goto out;
        }
        double D_lp = glp_get_obj_val(gl.lp) * L;
        gl.D0 = geo_lp_vertex(&gl, &s, L, NULL);
        memcpy(gl.S0, gl.S, n * n * sizeof *gl.S0);
        if (!(gl.D0 < L)) {
            rc = ts_fail(err, errlen, "mi-optimal: no channel with "
                         "geo-ind epsilon %g per m has E[d] <= %g m: the "
                         "least is %.9g m", problem->geoind_epsilon, L,
                         gl.D0);
            goto out;
        }
        /* The LP's own bound leaves rho of room for the uniform mix of
         * the repair, but not below the least distortion: then the LP
         * would be infeasible, and the mix with S0 does all the work. */
        gl.rho = D_lp < L * (1.0 - 10 * GEOIND_RHO) ? GEOIND_RHO : 0.0;
        glp_set_row_bnds(gl.lp, (int)n + 1, GLP_UP, 0.0, 1.0 - gl.rho);
        /* Start: S0 mixed with the uniform constant channel, which makes
         * every entry positive (see the line search), as far as L allows
         * with a little slack kept. */
        double target = L * (1.0 - 2 * GEOIND_RHO);
        if (!(target > gl.D0))
            target = 0.5 * (gl.D0 + L);
        double theta = D_unif <= target ? 1.0
                       : (target - gl.D0) / (D_unif - gl.D0);
        if (theta > 1.0)
            theta = 1.0;
        for (size_t i = 0; i < n * n; i++)
            A[i] = (1.0 - theta) * gl.S0[i] + theta / (double)n;
    }

    double gap = INFINITY;
    unsigned it = md_iterations;
    for (;;) {
        /* The joint follows the steps affinely; recomputing it from the
         * channel now and then keeps rounding from drifting. */
        if (it % 64 == 0)
            joint_of(&s, A, alpha, s.J, s.Pz);
        gradient(&s);
        /* <G, C> = sum_{u,z} J log(J / (p(u) P(z))) = f(C) in nats: f is
         * positively homogeneous in each output's column. */
        double at_c = 0.0;
        for (size_t i = 0; i < s.k * n; i++)
            at_c += s.J[i] * s.logratio[i];
        double lower;
        if (!geo) {
            lower = plain_lmo(&s, &ev, L, &v);
        } else {
            double gmax = 0.0;
            for (size_t i = 0; i < s.m * n; i++)
                if (fabs(s.G[i]) > gmax)
                    gmax = fabs(s.G[i]);
            double scale = gmax > 0.0 ? 1.0 / gmax : 1.0;
            for (size_t j = 1; j <= n * n; j++)
                glp_set_obj_coef(gl.lp, (int)j, 0.0);
            for (size_t i = 0; i < s.m; i++)
                for (size_t z = 0; z < n; z++)
                    glp_set_obj_coef(gl.lp, (int)(s.visited[i] * n + z) + 1,
                                     s.G[i * n + z] * scale);
            if (geo_lp_solve(&gl, err, errlen) != 0) {
                rc = -1;
                goto out;
            }
            /* The row dual is <= 0 for an upper bound of a minimum: the
             * value gained by relaxing the bound from L (1 - rho) to L. */
            double dual = glp_get_row_dual(gl.lp, (int)n + 1);
            lower = (glp_get_obj_val(gl.lp) + (dual < 0.0 ? dual : 0.0) *
                     gl.rho) / scale;
            geo_lp_vertex(&gl, &s, L, gl.S0);
        }
        gap = at_c - lower;
        if (gap < 0.0)
            gap = 0.0;
        result->gap_bits = gap / M_LN2;
        if (result->gap_bits <= params->gap_tolerance_bits) {
            result->converged = 1;
            break;
        }
        if (it >= params->max_iterations)
            break;
        it++;
        if (!geo)
            plain_vertex_joint(&s, &v, row_of);
        else
            dense_vertex_joint(&s, gl.S);
        double step_gap = at_c;
        {
            /* The line search's own gap is <G, C - S> for the vertex
             * actually used (the repaired one under geo-ind). */
            double at_s = 0.0;
            for (size_t u = 0; u < s.k; u++)
                for (size_t z = 0; z < n; z++)
                    at_s += s.JS[u * n + z] * s.logratio[u * n + z];
            step_gap -= at_s;
        }
        if (!(step_gap > 0.0))
            break;   /* no descent left at double precision */
        double g = line_search(&s, step_gap);
        if (g >= 1.0) {
            /* The whole step: f decreases all the way to S (which then
             * reaches every output the users reach, or f'(1) would be
             * +infinity), and alpha * (1 - g) would be 0 and divide
             * below. A repaired geo-ind vertex, mixed with the uniform
             * channel or S0, is the usual case. */
            if (!geo) {
                for (size_t i = 0; i < s.m; i++) {
                    double *row = A + (size_t)s.visited[i] * n;
                    memset(row, 0, n * sizeof *row);
                    if (i == v.mix_row) {
                        row[v.z_of[i]] += 1.0 - v.mix_theta;
                        row[v.mix_z] += v.mix_theta;
                    } else {
                        row[v.z_of[i]] = 1.0;
                    }
                }
            } else {
                memcpy(A, gl.S, n * n * sizeof *A);
            }
            alpha = 1.0;
        } else {
            double na = alpha * (1.0 - g);
            if (na < ALPHA_FLOOR) {
                for (size_t i = 0; i < n * n; i++)
                    A[i] *= alpha;
                alpha = 1.0;
                na = 1.0 - g;
            }
            double add = g / na;
            if (!geo) {
                for (size_t i = 0; i < s.m; i++) {
                    double *row = A + (size_t)s.visited[i] * n;
                    if (i == v.mix_row) {
                        row[v.z_of[i]] += add * (1.0 - v.mix_theta);
                        row[v.mix_z] += add * v.mix_theta;
                    } else {
                        row[v.z_of[i]] += add;
                    }
                }
            } else {
                for (size_t i = 0; i < n * n; i++)
                    A[i] += add * gl.S[i];
            }
            alpha = na;
        }
        for (size_t i = 0; i < s.k * n; i++)
            s.J[i] += g * (s.JS[i] - s.J[i]);
        for (size_t z = 0; z < n; z++)
            s.Pz[z] += g * (s.PzS[z] - s.Pz[z]);
    }
    result->iterations = it;
    for (size_t i = 0; i < n * n; i++)
        A[i] *= alpha;
    if (!geo) {
        normalise_rows(A, n, &s, 0);
        fill_unvisited(&s, A);
    }
    /* Under geo-ind every row is an LP variable and already a convex
     * combination of repaired vertices. */
report:
    result->mi_bits = ts_mi_bits(problem, channel);
    result->distortion_m = ts_mi_distortion(problem, channel);
out:
    if (have_ev)
        envelope_free(&ev);
    if (have_gl)
        geo_lp_free(&gl);
    if (have_gg)
        geo_graph_free(&gg);
    free(v.z_of);
    free(row_of);
    solver_free(&s);
    return rc;
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
            r += dist(problem->centres, x, z) * channel[x * n + z];
        D += px / total * r;
    }
    return D;
}
