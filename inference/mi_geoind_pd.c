/* The geo-ind MI-optimal channel at city scale: a first-order primal-dual
 * method whose answer is made exactly feasible and certified by a
 * Lagrangian lower bound, so that no LP over n^2 entries is ever solved
 * (mi_geoind_lp.c does that, up to TS_MI_GEOIND_MAX_CELLS cells, and is
 * the exact reference this solver is tested against).
 *
 * The constraints. As in mi_geoind_lp.c, geo-ind between every pair of
 * centres is imposed through the edges of the neighbour graph only
 * (mi_geograph.c): C(a, z) <= r_e C(b, z) and C(b, z) <= r_e C(a, z) on
 * every edge e = (a, b) and output z, r_e = exp(e' len_e), e' = eps /
 * stretch less a margin; chained along shortest paths they give
 * C(x, z) <= exp(eps d(x, x')) C(x', z) for every pair. The other
 * constraints, rows on the simplex and E[d] <= L, are the "simple" set X.
 *
 * The iteration (a primal-dual method, Chambolle-Pock in form, with the
 * primal step in the rows' KL geometry). lambda >= 0 holds one multiplier
 * per edge constraint, and H = A^T lambda its share of the Lagrangian's
 * gradient. One step:
 *   C'(x, z) ∝ C(x, z) exp(-(eta / p(x)) (G + H)(x, z) - t cost(x, z)),
 * the generalised Blahut-Arimoto step of mi_plain.c with the edges'
 * prices added, t >= 0 chosen so that E[d] = L (1 - HEADROOM) exactly;
 * then each multiplier moves by the edge's relative violation at the
 * extrapolated point 2 C' - C, scaled so that one step of lambda moves
 * log C by about PD_THETA of it (a diagonal preconditioning: entries of
 * C span hundreds of orders of magnitude across outputs, and a violation
 * only means something relative to the entries it compares).
 * At a fixed point every row of G + H + (t / eta) W is constant over z
 * and lambda is complementary to the slack, which is the KKT system of the
 * problem: there the certificate below is exactly 0.
 *
 * The certificate does not trust the iteration. For ANY channel C-bar in
 * the domain with gradient G and ANY lambda, mu >= 0,
 *     f* >= min_{S feasible} <G, S>            (f convex, f(C) = <G, C>)
 *        >= sum_x min_z (G + A^T lambda + mu W)(x, z) - mu L
 * (weak duality: on a feasible S the added terms are <lambda, A S> <= 0
 * and mu (<W, S> - L) <= 0, and the rest is minimised over the rows'
 * simplices). mu is chosen by bisection on the bound's slope, and
 * lambda's scale by golden section; and since geo-ind only removes
 * channels, the certified optimum without it (mi_plain.c) is a bound too,
 * the floor of ours.
 *
 * The upper side is an exactly feasible channel made from the iterate
 * (pd_feasible): each column raised to its upper envelope at e' and the
 * rows renormalised, a few rounds (what is left breaks an edge only by
 * the ratio of two neighbouring rows' sums); mixed, by the least weight
 * that holds every edge, with the same made at 0.8 e', which holds every
 * edge with room to spare and is shaped like the iterate; then the exact
 * uniform repair against rounding (mi_geoind_repair); and, if E[d] ended
 * past L, a mix with S0, the least-distortion feasible channel held, by
 * the least weight that brings it back to L. The reported gap is the best
 * such f minus the best lower bound seen: it bounds the returned channel's
 * distance to the optimum whatever the iteration did. If the iteration
 * failed to converge the gap says so; it can never be wrong in the other
 * direction.
 *
 * S0 starts as the exponential channel exp(-(e'/2) d(x, z)) / N(x): on an
 * edge, exp((e'/2) (d(b, z) - d(a, z))) <= exp(e' len / 2) and
 * N(b) / N(a) <= exp(e' len / 2) by the triangle inequality, so it holds
 * every edge; the exponential rows at e' itself made feasible like an
 * iterate (pd_better_least) replace it when their E[d] is lower. L below
 * the E[d] of every channel held is refused with that least.
 *
 * What it reaches (docs/mi_channel.md, bench/bench_optimize.sh): on small
 * grids its certificate brackets the LP's optimum; at a thousand cells
 * the iteration does not settle (its iterate drifts after a hundred or so
 * steps, the best certificate is kept) and the gap stays loose.
 *
 * Cost: per step, the gradient (users of each cell x n per row), one pass
 * over the 8 n^2 edge constraints and one exponential per entry; memory
 * about 10 n^2 + 8 n^2 doubles (150 MB at 1,024 cells). */
#include "inference/mi_solver.h"
#include "inference/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Entries stay at or above exp(PD_LOG_FLOOR), the floor of mi_tilt_rows. */
#define PD_LOG_FLOOR (-600.0)
/* The primal step (1: Blahut-Arimoto's) and the dual's relative step. */
#define PD_ETA 1.0
#define PD_THETA 0.25
/* The iterates aim at E[d] = L (1 - PD_HEADROOM): room for the repair's
 * uniform mix. */
#define PD_HEADROOM 1e-4
/* Once the repair is cheap (its relative mix below PD_TARGET_BETA) but
 * still takes E[d] past L, the steps aim lower by PD_TARGET_GAIN times
 * the excess; the aim only ever moves down, so it cannot oscillate. */
#define PD_TARGET_GAIN 1.5
#define PD_TARGET_BETA 0.01
/* The dual step is relative to the entries an edge compares down to
 * this over n, absolute below. */
#define PD_RELATIVE_FLOOR 1.0
#define PD_ROW_FLOOR 0.1
/* A certificate every this many steps (and at the last). */
#define PD_CERT_EVERY 10
/* Golden-section steps over the multipliers' scale in the bound. */
#define PD_SCALE_STEPS 12
/* The repair's envelope-and-normalise rounds, and the relative slack of
 * its strictly feasible partner. */
#define PD_ENVELOPE_ROUNDS 4
#define PD_SLACK 0.2
static const double PD_LEAST_SLACK[3] = { 0.02, 0.1, 0.3 };

typedef struct pd {
    mi_geograph g;
    double eps_edge;
    size_t n;
    double *ratio;      /* per edge: exp(e' len) */
    double *pt;         /* n: the step's weight p(x) (visited) */
    double *lc, *lcn;   /* n x n: log channel, current and next */
    double *C, *Cn;     /* n x n: channel, current and next */
    double *a;          /* n x n: the untilted step */
    double *d;          /* n x n: cost(x, z) on visited rows, 0 on others */
    double *lam;        /* 2 edges x n multipliers */
    double *H;          /* n x n: A^T lambda */
    double *F;          /* n x n: the repaired iterate */
    double *lF;         /* n x n: its logs while it is repaired */
    double *lab;        /* n: a column's labels */
    mi_heap_item *heap; /* n + 2 edges */
    double *best;       /* n x n: the best feasible channel so far */
    double *S0;         /* n x n: the exponential channel */
    double D0;
} pd;

static void pd_free(pd *w)
{
    mi_geograph_free(&w->g);
    free(w->ratio);
    free(w->pt);
    free(w->lc);
    free(w->lcn);
    free(w->C);
    free(w->Cn);
    free(w->a);
    free(w->d);
    free(w->lam);
    free(w->H);
    free(w->F);
    free(w->lF);
    free(w->lab);
    free(w->heap);
    free(w->best);
    free(w->S0);
}

static int pd_init(pd *w, const mi_solver *s, char *err, size_t errlen)
{
    size_t n = s->n;
    memset(w, 0, sizeof *w);
    w->n = n;
    if (mi_geograph_init(&w->g, s->pb->centres, n, err, errlen) != 0)
        return -1;
    w->eps_edge = mi_edge_epsilon(&w->g, s->pb->geoind_epsilon);
    size_t nn = n * n, E = w->g.edges;
    w->ratio = malloc((E + 1) * sizeof *w->ratio);
    w->pt = malloc(n * sizeof *w->pt);
    w->lc = malloc(nn * sizeof *w->lc);
    w->lcn = malloc(nn * sizeof *w->lcn);
    w->C = malloc(nn * sizeof *w->C);
    w->Cn = malloc(nn * sizeof *w->Cn);
    w->a = malloc(nn * sizeof *w->a);
    w->d = calloc(nn, sizeof *w->d);
    w->lam = calloc(2 * E * n + 1, sizeof *w->lam);
    w->H = malloc(nn * sizeof *w->H);
    w->F = malloc(nn * sizeof *w->F);
    w->lF = malloc(nn * sizeof *w->lF);
    w->lab = malloc(n * sizeof *w->lab);
    w->heap = malloc((n + 2 * E + 1) * sizeof *w->heap);
    w->best = malloc(nn * sizeof *w->best);
    w->S0 = malloc(nn * sizeof *w->S0);
    if (!w->ratio || !w->pt || !w->lc || !w->lcn || !w->C || !w->Cn ||
        !w->a || !w->d || !w->lam || !w->H || !w->F || !w->lF || !w->lab ||
        !w->heap || !w->best || !w->S0) {
        pd_free(w);
        return ts_fail(err, errlen, "mi-optimal: out of memory for the "
                       "geo-ind solver at %zu cells", n);
    }
    for (size_t e = 0; e < E; e++)
        w->ratio[e] = exp(w->eps_edge * w->g.len[e]);
    /* The tilt's costs: rows nobody visits carry no distortion, so they
     * are not tilted. */
    for (size_t i = 0; i < s->m; i++) {
        size_t x = s->visited[i];
        for (size_t z = 0; z < n; z++)
            w->d[x * n + z] = mi_cost(s->pb, x, z);
    }
    /* Rows nobody visits have no gradient of their own; their steps are
     * weighted like the lightest visited row's. */
    double pmin = INFINITY;
    for (size_t x = 0; x < n; x++)
        if (s->px[x] > 0.0 && s->px[x] < pmin)
            pmin = s->px[x];
    /* ... and no row's weight below PD_ROW_FLOOR / n: a row that holds
     * almost no mass would otherwise take steps long enough to swing
     * its prices out of balance with its neighbours'. */
    double pfloor = PD_ROW_FLOOR / (double)n;
    if (pmin < pfloor)
        pmin = pfloor;
    for (size_t x = 0; x < n; x++)
        w->pt[x] = s->px[x] > pmin ? s->px[x] : pmin;
    return 0;
}

/* S0 (see the top), repaired, and its E[d] in w->D0. */
static void pd_exponential_channel(pd *w, const mi_solver *s)
{
    size_t n = w->n;
    double half = 0.5 * w->eps_edge;
    for (size_t x = 0; x < n; x++) {
        double *row = w->S0 + x * n, sum = 0.0;
        for (size_t z = 0; z < n; z++) {
            row[z] = exp(-half * mi_centre_distance(s->pb->centres, x, z));
            sum += row[z];
        }
        for (size_t z = 0; z < n; z++)
            row[z] /= sum;
    }
    mi_geoind_repair(&w->g, w->eps_edge, w->S0);
    w->D0 = mi_channel_distortion(s, w->S0);
}

/* H = A^T lambda. */
static void pd_prices(pd *w)
{
    size_t n = w->n;
    memset(w->H, 0, n * n * sizeof *w->H);
    for (size_t e = 0; e < w->g.edges; e++) {
        double r = w->ratio[e];
        double *ha = w->H + (size_t)w->g.a[e] * n;
        double *hb = w->H + (size_t)w->g.b[e] * n;
        const double *l0 = w->lam + 2 * e * n, *l1 = l0 + n;
        for (size_t z = 0; z < n; z++) {
            ha[z] += l0[z] - r * l1[z];
            hb[z] += l1[z] - r * l0[z];
        }
    }
}

static double clamp_unit(double v)
{
    return v > 1.0 ? 1.0 : v < -1.0 ? -1.0 : v;
}

/* The multipliers' step at the extrapolated 2 Cn - C. */
static void pd_dual_step(pd *w, double theta)
{
    size_t n = w->n;
    for (size_t e = 0; e < w->g.edges; e++) {
        size_t A = w->g.a[e], B = w->g.b[e];
        double r = w->ratio[e];
        double q = theta / PD_ETA * (w->pt[A] < w->pt[B] ? w->pt[A]
                                                          : w->pt[B]) /
                   (8.0 * (1.0 + r * r) / (1.0 + r));
        double cfloor = PD_RELATIVE_FLOOR / (double)n;
        const double *ca = w->Cn + A * n, *cb = w->Cn + B * n;
        const double *oa = w->C + A * n, *ob = w->C + B * n;
        double *l0 = w->lam + 2 * e * n, *l1 = l0 + n;
        for (size_t z = 0; z < n; z++) {
            double xa = 2.0 * ca[z] - oa[z], xb = 2.0 * cb[z] - ob[z];
            /* Relative to the entries compared, and at most 1 either
             * way: where an entry just fell by orders of magnitude, the
             * extrapolation is no measure of anything. */
            double d0 = ca[z] + r * cb[z], d1 = cb[z] + r * ca[z];
            double v0 = l0[z] + q * clamp_unit((xa - r * xb) /
                                               (d0 > cfloor ? d0 : cfloor));
            double v1 = l1[z] + q * clamp_unit((xb - r * xa) /
                                               (d1 > cfloor ? d1 : cfloor));
            l0[z] = v0 > 0.0 ? v0 : 0.0;
            l1[z] = v1 > 0.0 ? v1 : 0.0;
        }
    }
}

/* sum_x min_z (G + H + mu W)(x, z) - mu L in nats, and its slope in mu. */
static double pd_bound_at(const pd *w, const mi_solver *s, double scale,
                          double mu, double L, double *slope)
{
    size_t n = w->n;
    double v = -mu * L, D = 0.0;
    for (size_t x = 0; x < n; x++) {
        uint32_t i = s->row_of[x];
        const double *h = w->H + x * n;
        double lo = INFINITY, wlo = 0.0;
        if (i == UINT32_MAX) {
            for (size_t z = 0; z < n; z++)
                if (scale * h[z] < lo)
                    lo = scale * h[z];
        } else {
            const double *g = s->G + (size_t)i * n, *wr = s->W + (size_t)i * n;
            for (size_t z = 0; z < n; z++) {
                double m = g[z] + scale * h[z] + mu * wr[z];
                if (m < lo) {
                    lo = m;
                    wlo = wr[z];
                }
            }
        }
        v += lo;
        D += wlo;
    }
    *slope = D - L;
    return v;
}

/* The best of the bounds over mu >= 0 (concave in mu: bisection on the
 * sign of its slope from a bracket grown from the hint). Every value it
 * evaluates is a valid bound; the largest is returned. */
static double pd_lower_bound_scaled(const pd *w, const mi_solver *s,
                                    double scale, double L, double mu_hint)
{
    double slope, best = pd_bound_at(w, s, scale, 0.0, L, &slope);
    if (slope <= 0.0)
        return best;
    double lo = 0.0, hi = mu_hint > 0.0 ? 2.0 * mu_hint : 1.0 / L;
    for (int it = 0; it < 200; it++) {
        double v = pd_bound_at(w, s, scale, hi, L, &slope);
        if (v > best)
            best = v;
        if (slope < 0.0)
            break;
        lo = hi;
        hi *= 2.0;
    }
    for (int it = 0; it < 60 && hi - lo > 1e-12 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        double v = pd_bound_at(w, s, scale, mid, L, &slope);
        if (v > best)
            best = v;
        if (slope > 0.0)
            lo = mid;
        else
            hi = mid;
    }
    return best;
}

/* Column z of w->lF replaced by its largest minorant that holds every
 * edge: l(x) <- min_y l(y) + e' sp(x, y), a Dijkstra from every cell at
 * once with the labels as starting distances. */
static void pd_envelope_column(pd *w, size_t z, double eps_env)
{
    size_t n = w->n, len = 0;
    double *lab = w->lab;
    for (size_t x = 0; x < n; x++) {
        lab[x] = w->lF[x * n + z];
        mi_heap_push(w->heap, &len, (mi_heap_item){ lab[x], (uint32_t)x });
    }
    while (len > 0) {
        mi_heap_item it = mi_heap_pop(w->heap, &len);
        if (it.d > lab[it.v])
            continue;
        for (size_t d = w->g.start[it.v]; d < w->g.start[it.v + 1]; d++) {
            uint32_t y = w->g.to[d];
            double nd = it.d + eps_env * w->g.len[w->g.edge_of[d]];
            if (nd < lab[y]) {
                lab[y] = nd;
                mi_heap_push(w->heap, &len, (mi_heap_item){ nd, y });
            }
        }
    }
    for (size_t x = 0; x < n; x++)
        w->lF[x * n + z] = lab[x];
}

static void pd_normalise_logs(pd *w)
{
    size_t n = w->n;
    for (size_t x = 0; x < n; x++) {
        double *l = w->lF + x * n, top = -INFINITY, sum = 0.0;
        for (size_t z = 0; z < n; z++)
            if (l[z] > top)
                top = l[z];
        for (size_t z = 0; z < n; z++)
            sum += exp(l[z] - top);
        double shift = top + log(sum);
        for (size_t z = 0; z < n; z++)
            l[z] -= shift;
    }
}

/* The largest excess of log C(a, z) - log C(b, z) over e' len on any
 * edge, either way, in w->lF (<= 0: every edge holds in the logs). */
static double pd_log_violation(const pd *w)
{
    size_t n = w->n;
    double worst = -INFINITY;
    for (size_t e = 0; e < w->g.edges; e++) {
        const double *la = w->lF + (size_t)w->g.a[e] * n;
        const double *lb = w->lF + (size_t)w->g.b[e] * n;
        double room = w->eps_edge * w->g.len[e];
        for (size_t z = 0; z < n; z++) {
            double v = fabs(la[z] - lb[z]) - room;
            if (v > worst)
                worst = v;
        }
    }
    return worst;
}

/* The bound is concave in lambda, so in its scale too: the best over
 * lambda's scale in [0, 1] (golden section) is still a bound, and never
 * worse than the plain problem's (scale 0) while the multipliers are
 * far from balanced. */
static double pd_lower_bound(const pd *w, const mi_solver *s, double L,
                             double mu_hint)
{
    const double phi = 0.5 * (sqrt(5.0) - 1.0);
    double lo = 0.0, hi = 1.0;
    double best = pd_lower_bound_scaled(w, s, 1.0, L, mu_hint);
    double at0 = pd_lower_bound_scaled(w, s, 0.0, L, mu_hint);
    if (at0 > best)
        best = at0;
    double a = hi - phi * (hi - lo), b = lo + phi * (hi - lo);
    double fa = pd_lower_bound_scaled(w, s, a, L, mu_hint);
    double fb = pd_lower_bound_scaled(w, s, b, L, mu_hint);
    for (int it = 0; it < PD_SCALE_STEPS; it++) {
        if (fa > best)
            best = fa;
        if (fb > best)
            best = fb;
        if (fa < fb) {
            lo = a;
            a = b;
            fa = fb;
            b = lo + phi * (hi - lo);
            fb = pd_lower_bound_scaled(w, s, b, L, mu_hint);
        } else {
            hi = b;
            b = a;
            fb = fa;
            a = hi - phi * (hi - lo);
            fa = pd_lower_bound_scaled(w, s, a, L, mu_hint);
        }
    }
    return best > fa ? (best > fb ? best : fb) : (fa > fb ? fa : fb);
}

/* w->lF <- the iterate's logs raised to their upper envelopes at
 * e' (1 - slack), l(x) <- max_y l(y) - e' (1 - slack) sp(x, y) (the
 * lower envelope of -l), and renormalised, `rounds` times; returns the
 * logs' largest edge excess (<= 0: every edge holds, by at least its
 * minus). Raising, not cutting: a column's violations sit mostly in its
 * far tail, where an entry fell faster than the edges allow, and raising
 * such an entry costs next to no mass, where cutting its neighbours down
 * to it would carry the cut all the way to the column's peak. */
static double pd_envelope_rounds(pd *w, double slack, int rounds)
{
    size_t n = w->n, nn = n * n;
    double worst = INFINITY;
    memcpy(w->lF, w->lc, nn * sizeof *w->lF);
    for (int round = 0; round < rounds && worst > 0.0; round++) {
        for (size_t i = 0; i < nn; i++)
            w->lF[i] = -w->lF[i];
        for (size_t z = 0; z < n; z++)
            pd_envelope_column(w, z, w->eps_edge * (1.0 - slack));
        for (size_t i = 0; i < nn; i++)
            w->lF[i] = -w->lF[i];
        pd_normalise_logs(w);
        worst = pd_log_violation(w);
    }
    return worst;
}

/* The least beta with (1 - beta) F + beta T holding every edge, for T
 * that holds each strictly where F breaks it; 1 if T does not. */
static double pd_mix_weight(const pd *w, const double *F, const double *T)
{
    size_t n = w->n;
    double beta = 0.0;
    for (size_t e = 0; e < w->g.edges; e++) {
        size_t A = w->g.a[e], B = w->g.b[e];
        double r = w->ratio[e];
        const double *fa = F + A * n, *fb = F + B * n;
        const double *ta = T + A * n, *tb = T + B * n;
        for (size_t z = 0; z < n; z++)
            for (int dir = 0; dir < 2; dir++) {
                double vf = dir ? fb[z] - r * fa[z] : fa[z] - r * fb[z];
                if (!(vf > 0.0))
                    continue;
                double vt = dir ? tb[z] - r * ta[z] : ta[z] - r * tb[z];
                if (!(vt < 0.0))
                    return 1.0;
                double need = vf / (vf - vt);
                if (need > beta)
                    beta = need;
            }
    }
    return beta;
}

/* The iterate made exactly feasible in w->F (see the top): its envelope
 * at e', renormalised, breaks an edge only by the ratio of two
 * neighbouring rows' sums, a relative excess of about 1e-3; mixed with the
 * same made at e' (1 - PD_SLACK), which holds every edge with room to
 * spare and is as peaked as the iterate, by the least weight that makes
 * it hold (the uniform channel's room, (r - 1) / n, is too little next to
 * entries near 1 at a thousand cells); then the exact repair against
 * rounding. E[d] moves by the cut peaks: if past L, mixed with S0. The
 * weight of the relative mix in *beta. 0, or -1 when it is not within L. */
static int pd_feasible(pd *w, const mi_solver *s, double L, double *beta,
                       double *repaired_distortion)
{
    size_t n = w->n, nn = n * n;
    double *T = w->Cn;   /* free between steps */
    double held = pd_envelope_rounds(w, PD_SLACK, PD_ENVELOPE_ROUNDS);
    for (size_t i = 0; i < nn; i++)
        T[i] = exp(w->lF[i]);
    double worst = pd_envelope_rounds(w, 0.0, PD_ENVELOPE_ROUNDS);
    for (size_t i = 0; i < nn; i++)
        w->F[i] = exp(w->lF[i]);
    *beta = 0.0;
    if (worst > 0.0) {
        double b = held < 0.0 ? pd_mix_weight(w, w->F, T) : 1.0;
        if (b >= 1.0)
            memcpy(w->F, T, nn * sizeof *w->F);
        else
            for (size_t i = 0; i < nn; i++)
                w->F[i] = (1.0 - b) * w->F[i] + b * T[i];
        *beta = b;
    }
    mi_geoind_repair(&w->g, w->eps_edge, w->F);
    double D = mi_channel_distortion(s, w->F);
    *repaired_distortion = D;
    if (D <= L)
        return 0;
    if (!(w->D0 < L))
        return -1;
    double t = (D - L) / (D - w->D0) * (1.0 + 1e-9);
    if (t > 1.0)
        t = 1.0;
    for (size_t i = 0; i < nn; i++)
        w->F[i] = (1.0 - t) * w->F[i] + t * w->S0[i];
    return 0;
}

/* A feasible channel of less distortion than the exponential one at
 * half the edge epsilon, when the envelopes can make one: the exponential
 * rows at the edge epsilon itself (their columns hold every edge; only
 * the rows' normalisations break them) raised to their envelopes at a
 * little less and renormalised until every edge holds. Replaces S0 if
 * its E[d] is lower. Uses w->lc, w->lF and w->F as scratch. */
static void pd_better_least(pd *w, const mi_solver *s)
{
    size_t n = w->n, nn = n * n;
    for (size_t x = 0; x < n; x++) {
        double *l = w->lc + x * n;
        for (size_t z = 0; z < n; z++)
            l[z] = -w->eps_edge * mi_centre_distance(s->pb->centres, x, z);
    }
    for (int k = 0; k < 3; k++) {
        double slack = PD_LEAST_SLACK[k];
        if (!(pd_envelope_rounds(w, slack, PD_ENVELOPE_ROUNDS) < 0.0))
            continue;
        for (size_t i = 0; i < nn; i++)
            w->F[i] = exp(w->lF[i]);
        mi_geoind_repair(&w->g, w->eps_edge, w->F);
        double D = mi_channel_distortion(s, w->F);
        if (D < w->D0) {
            memcpy(w->S0, w->F, nn * sizeof *w->S0);
            w->D0 = D;
        }
    }
}

int mi_geoind_pd_solve(mi_solver *s, const ts_mi_params *params, double *out,
                       ts_mi_result *result, char *err, size_t errlen)
{
    size_t n = s->n, nn = n * n;
    double L = s->pb->distortion_m;
    if (n > TS_MI_GEOIND_PD_MAX_CELLS)
        return ts_fail(err, errlen, "mi-optimal: with geoind_epsilon at most "
                       "%u cells, not %zu (the multipliers take 8 cells^2 "
                       "doubles; use larger cells)",
                       (unsigned)TS_MI_GEOIND_PD_MAX_CELLS, n);
    pd w;
    if (pd_init(&w, s, err, errlen) != 0)
        return -1;
    result->edge_epsilon = w.eps_edge;
    result->stretch = w.g.stretch;
    pd_exponential_channel(&w, s);
    pd_better_least(&w, s);
    /* Geo-ind only removes channels, so the problem without it bounds
     * ours from below: its certified optimum (mirror descent with the
     * exact Frank-Wolfe gap, mi_plain.c) is the floor of our bound, and
     * often far above what unbalanced multipliers give. w.F is scratch. */
    double plain_lower = -INFINITY;
    {
        ts_mi_result plain;
        memset(&plain, 0, sizeof plain);
        if (mi_plain_solve(s, params, w.F, &plain, err, errlen) != 0) {
            pd_free(&w);
            return -1;
        }
        plain_lower = ts_mi_bits(s->pb, w.F) * M_LN2 -
                      plain.gap_bits * M_LN2;
    }
    int rc = 0;
    /* Start: S0 mixed with the uniform channel as far as L allows, an
     * exactly feasible channel; when S0 is too far from L to need any
     * of it, the uniform channel (I = 0). */
    double D_unif = 0.0;
    for (size_t i = 0; i < s->m * n; i++)
        D_unif += s->W[i] / (double)n;
    double target0 = L * (1.0 - PD_HEADROOM);
    double theta = D_unif <= target0 || !(w.D0 < target0)
                   ? 1.0 : (target0 - w.D0) / (D_unif - w.D0);
    for (size_t i = 0; i < nn; i++) {
        w.C[i] = (1.0 - theta) * w.S0[i] + theta / (double)n;
        w.lc[i] = log(w.C[i]);
    }
    memset(w.H, 0, nn * sizeof *w.H);
    double best_upper = INFINITY, best_lower = plain_lower, best_beta = 0.0;
    if (theta < 1.0 || w.D0 < target0) {
        /* The start is a mix of two exactly feasible channels: the first
         * upper bound, once repaired against the rounding of the mix. */
        memcpy(w.best, w.C, nn * sizeof *w.best);
        best_beta = mi_geoind_repair(&w.g, w.eps_edge, w.best);
        if (mi_channel_distortion(s, w.best) <= L)
            best_upper = ts_mi_bits(s->pb, w.best) * M_LN2;
    }
    double target = L * (1.0 - PD_HEADROOM), t = 0.0;
    double least = w.D0;
    unsigned it = 0, max_it = params->max_iterations;
    /* A certificate costs about as much as n / 10 steps (the repair's
     * Dijkstras): so often that it takes a tenth of the time at most. */
    unsigned cert_every = n / PD_CERT_EVERY > PD_CERT_EVERY
                          ? (unsigned)(n / PD_CERT_EVERY) : PD_CERT_EVERY;
    double tol = params->gap_tolerance_bits * M_LN2;
    for (;;) {
        mi_joint_of(s, w.C, 1.0, s->J, s->Pz);
        mi_logratio(s);
        mi_gradient_rows(s);
        pd_prices(&w);
        int last = it >= max_it;
        if (it > 0 && (it % cert_every == 0 || last)) {
            double lower = pd_lower_bound(&w, s, L, t / PD_ETA);
            if (lower > best_lower)
                best_lower = lower;
            double beta, D_rep;
            int ok = pd_feasible(&w, s, L, &beta, &D_rep);
            /* The repair moves E[d] by what it cuts off the peaks; the
             * steps aim that much lower (or higher) from now on. */
            if (beta < PD_TARGET_BETA && D_rep > L &&
                target > L - PD_TARGET_GAIN * (D_rep - L))
                target = L - PD_TARGET_GAIN * (D_rep - L);
            if (ok == 0) {
                double D = mi_channel_distortion(s, w.F);
                if (D < least)
                    least = D;
                double f = ts_mi_bits(s->pb, w.F) * M_LN2;
                if (f < best_upper) {
                    best_upper = f;
                    best_beta = beta;
                    memcpy(w.best, w.F, nn * sizeof *w.best);
                }
            }
            if (best_upper - best_lower <= tol || last)
                break;
        }
        /* The primal step. */
        for (size_t x = 0; x < n; x++) {
            uint32_t i = s->row_of[x];
            const double *g = i == UINT32_MAX ? NULL : s->G + (size_t)i * n;
            const double *h = w.H + x * n, *l = w.lc + x * n;
            double step = PD_ETA / w.pt[x], *a = w.a + x * n;
            for (size_t z = 0; z < n; z++)
                a[z] = l[z] - step * ((g != NULL ? g[z] : 0.0) + h[z]);
        }
        mi_tilt tl = { n, NULL, w.d, s->px, w.a };
        if (mi_tilt_solve(&tl, n, target, t, w.lcn, w.Cn, &t) != 0) {
            /* The rows collapsed (a step too long for them): the best
             * certified channel so far stands, and the gap says how good
             * it is. */
            break;
        }
        pd_dual_step(&w, PD_THETA);
        double *tmp = w.C;
        w.C = w.Cn;
        w.Cn = tmp;
        tmp = w.lc;
        w.lc = w.lcn;
        w.lcn = tmp;
        it++;
    }
    result->least_distortion_m = least;
    result->least_distortion_lower_m = NAN;
    if (!isfinite(best_upper)) {
        rc = ts_fail(err, errlen, "mi-optimal: no exactly geo-ind channel "
                     "(epsilon %g per m) within E[d] <= %g m was found in %u "
                     "steps: the least held is %.9g m (more steps, a larger "
                     "L, or the lp solver up to %u cells)",
                     s->pb->geoind_epsilon, L, it, least,
                     (unsigned)TS_MI_GEOIND_MAX_CELLS);
        goto out;
    }
    memcpy(out, w.best, nn * sizeof *out);
    result->iterations = it;
    result->repair_weight = best_beta;
    double gap = best_upper - best_lower;
    result->gap_bits = (gap > 0.0 ? gap : 0.0) / M_LN2;
    result->lower_bound_bits = best_lower / M_LN2;
    result->converged = result->gap_bits <= params->gap_tolerance_bits;
out:
    pd_free(&w);
    return rc;
}
