/* The MI-optimal channel without geo-ind: mirror descent, certified by the
 * exact Frank-Wolfe gap, and Frank-Wolfe itself when mirror descent runs
 * out of steps.
 *
 * Why mirror descent first (measured on the bench's synthetic joints at a
 * 1e-3 bit gap): the generalised Blahut-Arimoto step (md_solve below)
 * moves every entry of every row at once, where a FW step moves the whole
 * channel towards one vertex, so it needs 130-380 steps where FW needs
 * 500-9,000, and it is 2-10x faster overall (61.8 s -> 6.0 s at 1,024
 * cells x 20 users). Its iterates are feasible, so the FW gap at each, from
 * the exact linear step below, certifies it exactly as it does FW's; if
 * mirror descent runs out of steps, FW continues from its channel with the
 * same certificate. SQUAREM extrapolation of the log channel was tried and
 * dropped: its steps were almost always rejected by the monotonicity
 * safeguard (entries dying at a constant log rate dominate the step
 * length), so it only cost a third more work per step.
 *
 * The linear step. Dualising the single distortion constraint with
 * mu >= 0, min <G, S> over the polytope equals
 * max_mu [ sum_x min_z (G(x,z) + mu W(x,z)) - mu L ]: each row picks a cell
 * of the lower envelope of the lines G(x,z) + mu W(x,z) in mu. The rows'
 * envelopes are built in O(n) each (cells pre-sorted by W), and a sweep
 * over their breakpoints in increasing mu finds where the total
 * distortion falls to L; the row switching there is mixed between its two
 * cells so that E[d] = L exactly. That point is an exact LP optimum (it is
 * feasible and satisfies complementary slackness with that mu), so the gap
 * is exact, not an estimate. */
#include "inference/mi_solver.h"
#include "inference/error.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Entries of the mirror-descent channel stay at or above exp(-600), the
 * floor of mi_tilt_rows (mi_solver.c): a hard zero could never grow back
 * under a multiplicative update, and a column some users reach and others
 * not would have an infinite gradient. Times p(u, x) this is still a
 * normal double, so J never underflows. The floor moves E[d] by at most
 * n exp(-600) times the largest cost, far below the 1e-9 allowed. The
 * multiplier's steps are capped at MU_MAX_STEPS there too. */
#define MU_MAX_STEPS 200
#define ETA_MAX 1024.0

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

typedef struct keyed {
    double w;
    uint32_t z;
} keyed;

/* Largest W first; ties by index, so that the order is a function of the
 * data. */
static int compare_far_first(const void *a, const void *b)
{
    const keyed *p = a, *q = b;
    if (p->w != q->w)
        return (p->w < q->w) - (p->w > q->w);
    return (p->z > q->z) - (p->z < q->z);
}

typedef struct envelope {
    uint32_t *order;     /* m x n: cells by W(x, .), largest first */
    uint32_t *hull;      /* m x n: envelope cells per row */
    double *bp;          /* m x n: breakpoints */
    size_t *len;         /* envelope length per row */
    size_t *pos;         /* current piece per row */
    breakpoint *all;
    uint32_t *records;   /* n */
} envelope;

static void envelope_free(envelope *ev)
{
    free(ev->order);
    free(ev->hull);
    free(ev->bp);
    free(ev->len);
    free(ev->pos);
    free(ev->all);
    free(ev->records);
}

static int envelope_init(envelope *ev, const mi_solver *s, char *err,
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
    ev->records = malloc(n * sizeof *ev->records);
    keyed *tmp = malloc(n * sizeof *tmp);
    if (!ev->order || !ev->hull || !ev->bp || !ev->len || !ev->pos ||
        !ev->all || !ev->records || !tmp) {
        free(tmp);
        envelope_free(ev);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    for (size_t i = 0; i < m; i++) {
        for (size_t z = 0; z < n; z++)
            tmp[z] = (keyed){ s->W[i * n + z], (uint32_t)z };
        qsort(tmp, n, sizeof *tmp, compare_far_first);
        for (size_t z = 0; z < n; z++)
            ev->order[i * n + z] = tmp[z].z;
    }
    free(tmp);
    return 0;
}

/* Vertex of the plain polytope minimising <G, S>: S's row i is cell
 * z_of[i], except row mix_row, which puts mix_theta on mix_z. */
typedef struct vertex {
    uint32_t *z_of;
    size_t mix_row;     /* SIZE_MAX: none */
    uint32_t mix_z;
    double mix_theta;
} vertex;

/* Returns min <G, S>. */
static double plain_lmo(const mi_solver *s, envelope *ev, double L,
                        vertex *v)
{
    size_t m = s->m, n = s->n;
    double D = 0.0;
    size_t nb = 0;
    for (size_t i = 0; i < m; i++) {
        const double *g = s->G + i * n, *w = s->W + i * n;
        const uint32_t *o = ev->order + i * n;
        uint32_t *h = ev->hull + i * n;
        double *bp = ev->bp + i * n;
        /* Only a cell whose G is below that of every cheaper cell can be
         * lowest for some mu >= 0: one pass from the cheapest cell keeps
         * those records, and the hull is built over them alone, dearest
         * first. */
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
            const double *w = s->W + i * n;
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

typedef struct plain_oracle {
    envelope ev;
    vertex v;
    double L;
} plain_oracle;

static int plain_lower(void *ctx, mi_solver *s, double *lower, char *err,
                       size_t errlen)
{
    (void)err;
    (void)errlen;
    plain_oracle *o = ctx;
    *lower = plain_lmo(s, &o->ev, o->L, &o->v);
    return 0;
}

static void plain_vertex_joint(void *ctx, mi_solver *s)
{
    const vertex *v = &((plain_oracle *)ctx)->v;
    size_t n = s->n;
    memset(s->JS, 0, s->k * n * sizeof *s->JS);
    for (size_t u = 0; u < s->k; u++) {
        double *row = s->JS + u * n;
        for (size_t e = s->user_start[u]; e < s->user_start[u + 1]; e++) {
            size_t i = s->row_of[s->user_cells[e].index];
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

static void plain_apply(void *ctx, mi_solver *s, double *A, double add,
                        int whole)
{
    const vertex *v = &((plain_oracle *)ctx)->v;
    size_t n = s->n;
    for (size_t i = 0; i < s->m; i++) {
        double *row = A + (size_t)s->visited[i] * n;
        if (whole) {
            memset(row, 0, n * sizeof *row);
            add = 1.0;
        }
        if (i == v->mix_row) {
            row[v->z_of[i]] += add * (1.0 - v->mix_theta);
            row[v->mix_z] += add * v->mix_theta;
        } else {
            row[v->z_of[i]] += add;
        }
    }
}

/* ------------------------------------------------------ mirror descent */

typedef struct md {
    double *d;          /* m x n: W / p(x), the cost of each entry */
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

static int md_init(md *w, const mi_solver *s, char *err, size_t errlen)
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
            w->d[i * n + z] = mi_cost(s->pb, s->visited[i], z);
    return 0;
}

/* sum_x p(x) sum_z C log C over the visited rows (<= 0). */
static double row_entropy(const mi_solver *s, const double *C)
{
    double e = 0.0;
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        const double *row = C + x * s->n;
        double r = 0.0;
        for (size_t z = 0; z < s->n; z++)
            if (row[z] > 0.0)
                r += row[z] * log(row[z]);
        e += s->px[x] * r;
    }
    return e;
}

/* With the row entropy (weight tau): a lower bound on the optimum of
 * f + tau sum p C log C. By convexity of I, f* >= min over the feasible
 * set of <G, S> + tau sum p S log S (the +f(C) - <G, C> cancel: f is
 * homogeneous), and for any mu >= 0 that minimum is at least
 *   sum_x -tau p(x) log sum_z exp(-(G + mu W)(x, z) / (tau p(x))) - mu L
 * (weak duality; the rows are Gibbs). The best mu puts the Gibbs rows'
 * E[d] on L, found by bisection in a bracket; any mu is valid. */
static double entropic_dual(const mi_solver *s, double tau, double mu,
                            double L, double *D)
{
    size_t n = s->n;
    double value = -mu * L;
    *D = 0.0;
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        const double *g = s->G + i * n, *w = s->W + i * n;
        double k = 1.0 / (tau * s->px[x]), top = -INFINITY;
        for (size_t z = 0; z < n; z++) {
            double e = -(g[z] + mu * w[z]) * k;
            top = e > top ? e : top;
        }
        double s0 = 0.0, s1 = 0.0;
        for (size_t z = 0; z < n; z++) {
            double e = exp(-(g[z] + mu * w[z]) * k - top);
            s0 += e;
            s1 += e * w[z];
        }
        value -= tau * s->px[x] * (top + log(s0));
        *D += s1 / s0;
    }
    return value;
}

#define ENTROPIC_BISECTIONS 60
static double entropic_bound(const mi_solver *s, const md *w, double tau,
                             double L)
{
    double D, best = entropic_dual(s, tau, 0.0, L, &D);
    if (D <= L)
        return best;
    /* E[d] of the Gibbs rows falls as mu grows: bracket, then bisect;
     * the best value seen is the bound. */
    double lo = 0.0, hi = w->mu > 0.0 ? 2.0 * w->mu : 1.0 / L;
    for (int i = 0; i < ENTROPIC_BISECTIONS; i++) {
        double v = entropic_dual(s, tau, hi, L, &D);
        best = v > best ? v : best;
        if (D <= L)
            break;
        lo = hi;
        hi *= 2.0;
    }
    for (int i = 0; i < ENTROPIC_BISECTIONS; i++) {
        double mid = 0.5 * (lo + hi);
        double v = entropic_dual(s, tau, mid, L, &D);
        best = v > best ? v : best;
        if (D > L)
            lo = mid;
        else
            hi = mid;
    }
    return best;
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
 * it (the exact linear step above) is the certificate; we stop there.
 * tol in nats. */
static int md_solve(mi_solver *s, plain_oracle *o, double tol,
                    unsigned max_it, double *A, unsigned *iters,
                    double *gap_out, char *err, size_t errlen)
{
    md w;
    if (md_init(&w, s, err, errlen) != 0)
        return -1;
    size_t m = s->m, n = s->n;
    double L = o->L;
    double *cur = A, *cand = w.B;
    double lu = -log((double)n);
    for (size_t i = 0; i < m * n; i++)
        w.la[i] = lu;
    for (size_t i = 0; i < m; i++)
        for (size_t z = 0; z < n; z++)
            cur[(size_t)s->visited[i] * n + z] = 1.0 / (double)n;
    mi_joint_of(s, cur, 1.0, s->J, s->Pz);
    mi_logratio(s);
    double f0 = mi_objective(s), eta = 1.0;
    double tau = s->pb->row_entropy_weight;
    unsigned it = 0;
    int fresh = 1;    /* s->G is stale: the current channel just changed */
    int started = 0;  /* the uniform start is not feasible: no gap there */
    int rc = 0;
    *gap_out = INFINITY;
    for (;;) {
        if (fresh) {
            mi_gradient_rows(s);
            fresh = 0;
            if (started) {
                double gap = tau > 0.0
                             ? f0 + tau * row_entropy(s, cur) -
                               entropic_bound(s, &w, tau, L)
                             : f0 - plain_lmo(s, &o->ev, L, &o->v);
                *gap_out = gap > 0.0 ? gap : 0.0;
                if (gap <= tol)
                    break;
            }
        }
        if (it >= max_it)
            break;
        it++;
        /* The row entropy's share is taken exactly (a proximal step):
         * l' = (l - eta (h + mu d)) / (1 + eta tau). */
        double shrink = 1.0 / (1.0 + eta * tau);
        for (size_t i = 0; i < m; i++) {
            double step = eta / s->px[s->visited[i]];
            const double *g = s->G + i * n, *l = w.la + i * n;
            double *a = w.a + i * n;
            for (size_t z = 0; z < n; z++)
                a[z] = (l[z] - g[z] * step) * shrink;
        }
        double t;
        mi_tilt tl = { m, s->visited, w.d, s->px, w.a };
        if (mi_tilt_solve(&tl, n, L, eta * w.mu * shrink, w.lb, cand,
                          &t) != 0) {
            rc = ts_fail(err, errlen, "mi-optimal: the distortion "
                         "multiplier did not converge in %d steps",
                         MU_MAX_STEPS);
            break;
        }
        mi_joint_of(s, cand, 1.0, s->J, s->Pz);
        mi_logratio(s);
        double f1 = mi_objective(s);
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
            w.mu = t / (eta * shrink);
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
    return rc;
}

/* ----------------------------------------------------------- the driver */

int mi_plain_solve(mi_solver *s, const ts_mi_params *params, double *A,
                   ts_mi_result *result, char *err, size_t errlen)
{
    size_t n = s->n, m = s->m;
    double L = s->pb->distortion_m;
    /* The least distortion: each row on its cheapest output (the own
     * cell between centres; with costs of true points, usually too). */
    uint32_t *cheapest = malloc(m * sizeof *cheapest);
    if (cheapest == NULL)
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    double D_min = 0.0, D_unif = 0.0;
    for (size_t i = 0; i < m; i++) {
        const double *w = s->W + i * n;
        uint32_t best = 0;
        double row = 0.0;
        for (size_t z = 0; z < n; z++) {
            if (w[z] < w[best])
                best = (uint32_t)z;
            row += w[z];
        }
        cheapest[i] = best;
        D_min += w[best];
        D_unif += row / (double)n;
    }
    int rc = 0;
    plain_oracle o = { .L = L };
    if (L < D_min) {
        rc = ts_fail(err, errlen, "mi-optimal: no channel has E[d] <= %g m: "
                     "the least is %.9g m (every true point reported at its "
                     "nearest centre)", L, D_min);
        goto out;
    }
    if (L <= D_min * (1.0 + 1e-12) || L == 0.0) {
        /* Only the least-distortion rows are feasible (up to ties); the
         * gap below certifies them. */
        for (size_t i = 0; i < m; i++) {
            double *row = A + (size_t)s->visited[i] * n;
            memset(row, 0, n * sizeof *row);
            row[cheapest[i]] = 1.0;
        }
        if (D_min == 0.0) {
            result->converged = 1;
            goto out;
        }
    } else {
        /* The best constant channel reports the W-weighted 1-median: with
         * L at or above its distortion, I = 0 is reachable and no
         * iteration is needed. Of the constant channels within L we give
         * the one with the most uniform mass (any is optimal). */
        size_t z_med = 0;
        double D_med = INFINITY;
        for (size_t z = 0; z < n; z++) {
            double D = 0.0;
            for (size_t i = 0; i < m; i++)
                D += s->W[i * n + z];
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
            /* I >= 0 bounds the optimum: the gap is I itself (rounding). */
            result->gap_bits = ts_mi_bits(s->pb, A);
            result->converged =
                result->gap_bits <= params->gap_tolerance_bits;
            goto out;
        }
        /* Frank-Wolfe's start: the least-distortion rows mixed with the
         * uniform constant channel, as much uniform as L allows: every
         * visited row positive in every column, feasible. */
        double theta = D_unif > L ? (L - D_min) / (D_unif - D_min) : 1.0;
        for (size_t i = 0; i < m; i++) {
            double *row = A + (size_t)s->visited[i] * n;
            for (size_t z = 0; z < n; z++)
                row[z] = theta / (double)n +
                         (z == cheapest[i] ? 1.0 - theta : 0.0);
        }
    }
    o.v.z_of = malloc((m + 1) * sizeof *o.v.z_of);
    if (o.v.z_of == NULL) {
        rc = ts_fail(err, errlen, "mi-optimal: out of memory");
        goto out;
    }
    if (envelope_init(&o.ev, s, err, errlen) != 0) {
        rc = -1;
        goto out;
    }
    unsigned iterations = 0;
    double md_gap = INFINITY;
    if ((!params->frank_wolfe_only || s->pb->row_entropy_weight > 0.0) &&
        L > D_min * (1.0 + 1e-12)) {
        /* Mirror descent runs to the tolerance itself: handing over to FW
         * at 1.5 times it was faster on most bench instances but took
         * 128 s instead of 15 s on 1,024 x 50, where FW's gap stalled. FW
         * only continues if the steps run out. */
        if (md_solve(s, &o, params->gap_tolerance_bits * M_LN2,
                     params->max_iterations, A, &iterations, &md_gap, err,
                     errlen) != 0) {
            rc = -1;
            goto envelope;
        }
        /* E[d] = L to 1e-12 relative; a hair above is mixed with the
         * least-distortion rows, which keeps every entry positive. */
        double D = mi_channel_distortion(s, A);
        if (D > L) {
            double t = (D - L) / (D - D_min) * (1.0 + 1e-9);
            for (size_t i = 0; i < m; i++) {
                double *row = A + (size_t)s->visited[i] * n;
                for (size_t z = 0; z < n; z++)
                    row[z] = (1.0 - t) * row[z] +
                             (z == cheapest[i] ? t : 0.0);
            }
        }
    }
    if (s->pb->row_entropy_weight > 0.0) {
        /* Frank-Wolfe cannot take the entropy (its gradient is unbounded
         * at 0): mirror descent's own certificate stands. */
        result->gap_bits = md_gap / M_LN2;
        result->converged = result->gap_bits <= params->gap_tolerance_bits;
        result->iterations = iterations;
        goto envelope;
    }
    mi_fw_oracle oracle = { &o, plain_lower, plain_vertex_joint,
                            plain_apply };
    rc = mi_frank_wolfe(s, &oracle, A, params->gap_tolerance_bits,
                        params->max_iterations, &iterations, result, err,
                        errlen);
    result->iterations = iterations;
envelope:
    envelope_free(&o.ev);
out:
    free(o.v.z_of);
    free(cheapest);
    if (rc == 0) {
        /* Rows of visited cells only: renormalise against the rounding of
         * the steps. */
        for (size_t i = 0; i < m; i++) {
            double *row = A + (size_t)s->visited[i] * n, sum = 0.0;
            for (size_t z = 0; z < n; z++)
                sum += row[z];
            for (size_t z = 0; z < n; z++)
                row[z] /= sum;
        }
    }
    return rc;
}

int mi_plain_gap(mi_solver *s, const double *C, double *gap, char *err,
                 size_t errlen)
{
    plain_oracle o = { .L = s->pb->distortion_m };
    o.v.z_of = malloc((s->m + 1) * sizeof *o.v.z_of);
    if (o.v.z_of == NULL)
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    if (envelope_init(&o.ev, s, err, errlen) != 0) {
        free(o.v.z_of);
        return -1;
    }
    mi_joint_of(s, C, 1.0, s->J, s->Pz);
    mi_logratio(s);
    mi_gradient_rows(s);
    /* <G, C> = f(C): f is positively homogeneous in each column. */
    double g = mi_objective(s) - plain_lmo(s, &o.ev, o.L, &o.v);
    *gap = g > 0.0 ? g : 0.0;
    envelope_free(&o.ev);
    free(o.v.z_of);
    return 0;
}
