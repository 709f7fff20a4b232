/* The CIP loss over every RBF length scale at once: a certified upper
 * bound on sup over 0 < l <= l_max of L*(l) (inference/cip.h; the argument
 * in full is docs/cip.md, "Every length scale at once").
 *
 * Notation. K(l) is the correlation matrix, rows S then U. For y in R^nu,
 * x_l(y) = -A(l)^T y minimises q_l(x) = (x; y)^T K(l) (x; y), and the
 * minimum is y^T K_{u|s}(l) y. alpha*(l) = lambda_max(A^T C^-1 A) =
 * sup_y |A(l)^T y|^2 / y^T C(l) y, with C(l) = sigma_x^2 K_{u|s}(l) +
 * sigma_z^2 I >= sigma_z^2 I.
 *
 * Fact 1 (Bochner). The RBF kernel's spectral density is
 * p_l(w) = l (2 pi)^-1/2 exp(-l^2 w^2 / 2), and p_l2 <= (l2 / l1) p_l1 for
 * l1 <= l2, so K(l2) <= (l2 / l1) K(l1) in the Loewner order, on any
 * finite set of times. Restricting to a block or taking a Schur complement
 * keeps the order.
 * Fact 2 (Schur product). For l <= l0, K(l) = K(l0) o K(l') with
 * 1/l'^2 = 1/l^2 - 1/l0^2, and lambda_min(P o Q) >= lambda_min(P) min Q_ii,
 * so lambda_min(K_ss(l)) >= lambda_min(K_ss(l0)); K_us(l)'s entries are
 * non-negative and grow with l.
 *
 * Between two grid points l_a < l_b, rho = l_b / l_a, for every l there:
 *  C(l) >= C_b = (sigma_x^2 / rho) K_{u|s}(l_b) + sigma_z^2 I, and
 *  |x_l(y) - x_a(y)|^2 <= y^T H y with either
 *   H1 = (rho K_{u|s}(l_a) - K_{u|s}(l_b)) / mu_b, from q_l(x_a) - q_l(x_l)
 *        = |x_a - x_l|^2 in K_ss(l)'s norm and Fact 1 both ways; or
 *   H2 = c rho B_a^T N B_a / mu_b, from the identity K_ss(l) (x_l - x_a) =
 *        (N(l) z_a)_s, N(l) = (l/l_a) K(l_a) - K(l) >= 0, by Cauchy-Schwarz
 *        in N: N <= N~ = rho K(l_a) - K(l_b) / rho, N~_ss <= (c / rho)
 *        K_ss(l_b), z_a = B_a y, B_a = [-A_a^T; I]; or
 *   H3 = (rho ||D_s.|| (1 + ||A_a||) / mu_b)^2 I, D = K(l_b) - K(l_a), from
 *        the same identity with (K(l_a) z_a)_s = 0 and K's entries
 *        monotone in l;
 *  and the same with l_b as the reference;
 *  mu_b = lambda_min(K_ss(l_b)). Hence alpha*(l) <= (sqrt(p) + sqrt(h) /
 *  sigma_z)^2 with p = lambda_max(A_a^T C_b^-1 A_a), h = lambda_max(H).
 * H1 is first order in sqrt(rho - 1), H2 and H3 in rho - 1, H3 vanishing
 * with the correlations (all are computed and the smallest kept). Below the
 * first grid point l_0, by Fact 2, alpha*(l) <= (||K_us(l_0)||_F / mu_0)^2 /
 * sigma_z^2.
 *
 * Rounding: every block computed from K is exact for some K + E with
 * ||E|| <= rounding(d) (Cholesky and triangular solves are backward
 * stable, Higham 2002, Theorems 10.3 and 8.5; the Sturm count is exact
 * for a matrix within about eps ||M||). The bound widens each Loewner
 * step by that much. This is an argument, not interval arithmetic. */

/* GSL's element accessors inline (they are most of the small-matrix
 * work here); range checks stay on. */
#define HAVE_INLINE 1
#include "inference/cip.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_blas.h>
#include <gsl/gsl_matrix.h>

#include "inference/cip_blocks.h"
#include "inference/error.h"

/* The first grid: this many length scales, log-spaced from below the
 * closest S-U pair's time difference up to l_max. */
#define INITIAL_NODES 9
/* The first grid point is this far below the closest S-U time difference
 * (correlation e^-32 there), and the tail is extended by this factor. */
#define TAIL_FACTOR 8.0
/* The grid's node data, at most (the evaluation cap shrinks with d). */
#define MEMORY_BUDGET (8u << 20)
/* Relative precision of the eigenvalue bounds inside an interval's bound:
 * each is an upper bound whatever the precision, which only costs
 * tightness. */
#define BOUND_TOL 1e-3
/* Intervals at most this wide (l_b / l_a) skip H1: H2, second order,
 * is the smaller there (measured on the irregular trace of check_cip). */
#define H1_MIN_RATIO 1.1
/* Halvings of the sigma_z bisection before it gives up (see cip.c). */
#define MAX_BISECTION_STEPS 200

/* A Loewner bound on the rounding of any block computed from a d x d
 * correlation matrix: (d + 1) u per entry from the Cholesky factor and the
 * solves, times d for the spectral norm, doubled. */
static double rounding(size_t d)
{
    return 8.0 * (double)((d + 1) * d) * DBL_EPSILON;
}

typedef struct node {
    double l;
    double mu;     /* lambda_min(K_ss(l)) less the rounding; <= 0: unusable */
    double a_fro;  /* ||A||_F */
    double a_top;  /* an upper bound on ||A||_2^2 */
    double g_top;  /* an upper bound on lambda_max(K_{u|s}) */
    double alpha;  /* alpha*(l) at the search's sigma_z */
    gsl_matrix *k; /* d x d: K(l), rows S then U */
    cip_blocks b;
} node;

/* Between two adjacent grid points. NAN: not computed yet. */
typedef struct interval {
    /* With each end r (0: l_a, 1: l_b) as the reference: a bound on
     * |x_l(y) - computed x_r(y)| / |y| over the interval. */
    double root_h[2];
    double bound; /* the alpha* bound at the search's sigma_z */
} interval;

static const interval stale = {{NAN, NAN}, NAN};

typedef struct search {
    const cip_split *sp;
    const ts_cip_prior *prior;
    double radius, order, sigma_z;
    double e; /* rounding(d) */
    size_t n, cap, evaluations;
    node *nodes;      /* ascending l, the last at l_max */
    interval *iv;     /* iv[i]: between nodes i and i + 1 */
    double tail_root; /* ||A(l)|| bound for l <= nodes[0].l */
    cip_work w;
} search;

static double loss_of(const search *s, double alpha)
{
    return cip_eq4(alpha, s->sp->ns, s->sigma_z, s->radius, s->order);
}

/* The certified L* from a certified alpha*: the eigenvalue computations'
 * relative rounding is covered by the factor. */
static double certified_loss(const search *s, double alpha)
{
    size_t d = s->sp->ns + s->sp->nu;
    return loss_of(s, alpha) * (1.0 + 64.0 * (double)d * DBL_EPSILON);
}

static void node_free(node *n)
{
    cip_blocks_free(&n->b);
    gsl_matrix_free(n->k);
    n->k = NULL;
}

static void search_free(search *s)
{
    for (size_t i = 0; i < s->n; i++)
        node_free(&s->nodes[i]);
    free(s->nodes);
    free(s->iv);
    cip_work_free(&s->w);
}

static int search_init(search *s, const cip_split *sp,
                       const ts_cip_prior *prior, double sigma_z, double radius,
                       double order, size_t cap, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->sp = sp;
    s->prior = prior;
    s->sigma_z = sigma_z;
    s->radius = radius;
    s->order = order;
    size_t d = sp->ns + sp->nu;
    s->e = rounding(d);
    size_t node_bytes = sizeof(double) * (sp->ns * sp->ns + sp->nu * sp->ns +
                                          sp->nu * sp->nu + d * d);
    size_t affordable = MEMORY_BUDGET / (node_bytes + sizeof(node));
    s->cap = cap < affordable ? cap : affordable;
    if (s->cap < INITIAL_NODES + 1)
        s->cap = INITIAL_NODES + 1;
    s->nodes = calloc(s->cap, sizeof *s->nodes);
    s->iv = calloc(s->cap, sizeof *s->iv);
    if (s->nodes == NULL || s->iv == NULL ||
        cip_work_alloc(&s->w, sp, 1, err, errlen) != 0) {
        free(s->nodes);
        free(s->iv);
        memset(s, 0, sizeof *s);
        return ts_fail(err, errlen, "out of memory");
    }
    return 0;
}

/* Evaluates the length scale l into *n (its blocks allocated here). */
static int node_eval(search *s, double l, node *n, char *err, size_t errlen)
{
    const cip_split *sp = s->sp;
    cip_work *w = &s->w;
    memset(n, 0, sizeof *n);
    n->l = l;
    n->k = gsl_matrix_alloc(sp->ns + sp->nu, sp->ns + sp->nu);
    if (n->k == NULL || cip_blocks_alloc(&n->b, sp) != 0)
        return ts_fail(err, errlen, "out of memory");
    s->evaluations++;
    cip_correlations(sp, l, n->k);
    if (cip_blocks_build(sp, n->k, 0.0, 0, &n->b, w) != 0)
        return ts_fail(err, errlen,
                       "the secret points' correlation matrix "
                       "does not factor at length scale %g",
                       l);
    gsl_matrix_const_view k_ss =
        gsl_matrix_const_submatrix(n->k, 0, 0, sp->ns, sp->ns);
    gsl_matrix_memcpy(w->ss, &k_ss.matrix);
    double lo;
    if (cip_eigen_range(w->ss, w->eig, 1e-6, &lo, NULL) != 0)
        return ts_fail(err, errlen, "K_ss has an entry that is not finite");
    n->mu = lo - s->e;
    double fro = 0.0, trace = 0.0;
    for (size_t i = 0; i < sp->nu; i++) {
        for (size_t j = 0; j < sp->ns; j++)
            fro += gsl_matrix_get(n->b.a, i, j) * gsl_matrix_get(n->b.a, i, j);
        trace += gsl_matrix_get(n->b.cond, i, i);
    }
    n->a_fro = sqrt(fro);
    /* K_{u|s} is PSD up to its rounding: its trace bounds its top
     * eigenvalue. */
    n->g_top =
        fmax(0.0, trace) + (double)sp->nu * s->e * pow(1.0 + n->a_fro, 2.0);
    double var = s->prior->sigma_x * s->prior->sigma_x;
    if (cip_effective(n->b.a, n->b.cond, var, 0.0, s->sigma_z, NULL, &n->alpha,
                      w, err, errlen) != 0)
        return -1;
    /* C <= (sigma_z^2 + sigma_x^2 g_top) I, so ||A||^2 <= alpha* times
     * that (with the eigenvalue's relative rounding). */
    n->a_top = fmin(fro, n->alpha * (1.0 + 1e-9) *
                             (s->sigma_z * s->sigma_z + var * n->g_top));
    return 0;
}

/* w->dd = N~ = rho K(l_a) - K(l_b) / rho, rho = l_b / l_a. */
static void fill_n(search *s, const node *a, const node *b)
{
    double rho = b->l / a->l;
    gsl_matrix_memcpy(s->w.dd, a->k);
    gsl_matrix_scale(s->w.dd, rho);
    for (size_t i = 0; i < a->k->size1; i++)
        for (size_t j = 0; j < a->k->size2; j++)
            *gsl_matrix_ptr(s->w.dd, i, j) -= gsl_matrix_get(b->k, i, j) / rho;
}

/* lambda_max(B^T N~ B) for B = [-A^T; I] (d x nu), N~ in w->dd. */
static int quadratic_top(search *s, const gsl_matrix *a, double *top)
{
    cip_work *w = &s->w;
    size_t ns = s->sp->ns, nu = s->sp->nu;
    gsl_matrix *bm = w->du, *nb = w->du2;
    for (size_t r = 0; r < ns; r++)
        for (size_t col = 0; col < nu; col++)
            gsl_matrix_set(bm, r, col, -gsl_matrix_get(a, col, r));
    for (size_t r = 0; r < nu; r++)
        for (size_t col = 0; col < nu; col++)
            gsl_matrix_set(bm, ns + r, col, r == col ? 1.0 : 0.0);
    gsl_blas_dgemm(CblasNoTrans, CblasNoTrans, 1.0, w->dd, bm, 0.0, nb);
    gsl_blas_dgemm(CblasTrans, CblasNoTrans, 1.0, bm, nb, 0.0, w->uu);
    cip_symmetrize(w->uu);
    if (cip_eigen_range(w->uu, w->eig, BOUND_TOL, NULL, top) != 0)
        return -1;
    *top = fmax(0.0, *top);
    return 0;
}

/* For interval i and each of its ends as the reference r (0: l_a, 1:
 * l_b), a bound on |x_l(y) - computed x_r(y)| / |y| for every l in the
 * interval: sqrt(h) plus the reference's rounding. */
static int interval_root_h(search *s, size_t i, double root_h[2])
{
    const node *a = &s->nodes[i], *b = &s->nodes[i + 1];
    const cip_split *sp = s->sp;
    cip_work *w = &s->w;
    size_t ns = sp->ns;
    double rho = b->l / a->l, e = s->e;
    if (!(a->mu > 0.0) || !(b->mu > 0.0)) {
        root_h[0] = root_h[1] = INFINITY;
        return 0;
    }
    double zeta = e * pow(1.0 + fmax(a->a_fro, b->a_fro), 2.0);

    /* H1 = (rho K_{u|s}(l_a) - K_{u|s}(l_b)) / mu_b, for either
     * reference; smaller than H2 on wide intervals only. */
    double h1 = INFINITY;
    if (rho > H1_MIN_RATIO) {
        gsl_matrix_memcpy(w->uu, a->b.cond);
        gsl_matrix_scale(w->uu, rho);
        gsl_matrix_sub(w->uu, b->b.cond);
        double top1;
        if (cip_eigen_range(w->uu, w->eig, BOUND_TOL, NULL, &top1) != 0)
            return -1;
        h1 = (fmax(0.0, top1) + (1.0 + rho) * zeta) / b->mu;
    }

    /* H2 = c rho B_r^T N~ B_r / mu_b, c = rho lambda_max(L_b^-1 N~_ss
     * L_b^-T) widened by the rounding of K_ss(l_b)'s factor. */
    fill_n(s, a, b);
    gsl_matrix_view n_ss = gsl_matrix_submatrix(w->dd, 0, 0, ns, ns);
    gsl_matrix_memcpy(w->ss, &n_ss.matrix);
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, 1.0,
                   b->b.chol, w->ss);
    gsl_blas_dtrsm(CblasRight, CblasLower, CblasTrans, CblasNonUnit, 1.0,
                   b->b.chol, w->ss);
    cip_symmetrize(w->ss);
    double top_c;
    if (cip_eigen_range(w->ss, w->eig, BOUND_TOL, NULL, &top_c) != 0)
        return -1;
    double kappa = 4.0 * e / b->mu;
    double c = rho * (fmax(0.0, top_c) * (1.0 + kappa) + kappa);
    /* H3: the scaling part of N cancels in (N z_r)_s, as (K(l_r) z_r)_s
     * = 0, leaving ((K(l_r) - K(l)) z_r)_s, whose entries K's
     * monotonicity in l bounds by |K(l_b) - K(l_a)|: |x_l - x_r| <=
     * ||D_s.|| |z_r| / lambda_min(K_ss(l)). First order in rho - 1, and
     * zero where the correlations are. */
    double d_fro = 0.0;
    for (size_t i = 0; i < ns; i++)
        for (size_t j = 0; j < a->k->size2; j++) {
            double v = gsl_matrix_get(b->k, i, j) - gsl_matrix_get(a->k, i, j);
            d_fro += v * v;
        }
    d_fro = sqrt(d_fro) + 2.0 * e;
    const node *ends[2] = {a, b};
    for (int r = 0; r < 2; r++) {
        double h3_root = rho * d_fro * (1.0 + ends[r]->a_fro) / b->mu;
        double top_w;
        if (quadratic_top(s, ends[r]->b.a, &top_w) != 0)
            return -1;
        double wbar = top_w + (1.0 + rho) * e * pow(1.0 + ends[r]->a_fro, 2.0);
        double h2 = c * rho * wbar / b->mu;
        /* The reference is the computed x_r: its residual in q_r is at
         * most e |z_r| <= e (1 + ||A_r||) |y|, which moves x_l's bound by
         * at most rho^2 e (1 + ||A_r||) / mu_b (doubled for the solves). */
        double tau = 2.0 * rho * rho * e * (1.0 + ends[r]->a_fro) / b->mu;
        root_h[r] = fmin(sqrt(fmin(h1, h2)), h3_root) + tau;
        if (isnan(root_h[r]))
            return -1;
    }
    return 0;
}

/* The alpha* bound over interval i at the search's sigma_z: the smaller
 * of the bounds from either end. */
static int interval_bound(search *s, size_t i, double *bound)
{
    const node *a = &s->nodes[i], *b = &s->nodes[i + 1];
    const node *ends[2] = {a, b};
    double sz = s->sigma_z;
    double rho = b->l / a->l;
    double var = s->prior->sigma_x * s->prior->sigma_x / rho;
    double zeta_b = s->e * pow(1.0 + b->a_fro, 2.0);
    *bound = INFINITY;
    for (int r = 0; r < 2; r++) {
        if (!isfinite(s->iv[i].root_h[r]))
            continue;
        /* p <= ||A_r||^2 / sigma_z^2, as C_b >= sigma_z^2 I. Where
         * sigma_x^2 K_{u|s} is not negligible next to sigma_z^2, p itself,
         * with C_b less the rounding of K_{u|s}(l_b). */
        double p = ends[r]->a_top / (sz * sz), pc;
        if (var * b->g_top > 1e-6 * sz * sz &&
            cip_effective(ends[r]->b.a, b->b.cond, var, zeta_b, sz, NULL, &pc,
                          &s->w, NULL, 0) == 0)
            p = fmin(p, pc * (1.0 + 1e-9));
        double root = sqrt(p) + s->iv[i].root_h[r] / sz;
        *bound = fmin(*bound, root * root);
    }
    return 0;
}

/* Inserts a node at l as nodes[at] (0 < at < n: inside interval at - 1,
 * which splits; at = 0: below the grid). */
static int insert_node(search *s, size_t at, double l, char *err, size_t errlen)
{
    node fresh;
    if (node_eval(s, l, &fresh, err, errlen) != 0) {
        node_free(&fresh);
        return -1;
    }
    memmove(&s->nodes[at + 1], &s->nodes[at], (s->n - at) * sizeof *s->nodes);
    s->nodes[at] = fresh;
    memmove(&s->iv[at + 1], &s->iv[at], (s->n - 1 - at) * sizeof *s->iv);
    s->iv[at] = stale;
    if (at > 0)
        s->iv[at - 1] = stale;
    s->n++;
    return 0;
}

/* ||K_us(l_0)||_F / mu_0: ||A(l)|| for every l <= l_0 (Fact 2). */
static void update_tail(search *s)
{
    const node *first = &s->nodes[0];
    const cip_split *sp = s->sp;
    double fro = 0.0;
    for (size_t i = 0; i < sp->ns; i++)
        for (size_t j = 0; j < sp->nu; j++) {
            double k = gsl_matrix_get(first->k, i, sp->ns + j);
            fro += k * k;
        }
    s->tail_root = first->mu > 0.0
                       ? sqrt(fro) * (1.0 + 4.0 * DBL_EPSILON) / first->mu
                       : INFINITY;
}

/* Brings every interval's root_h and bound up to date at s->sigma_z;
 * *alpha_bound receives the certified alpha* bound, *peak the largest
 * alpha* evaluated and *peak_at its node. */
static int refresh(search *s, double *alpha_bound, double *peak,
                   size_t *peak_at, char *err, size_t errlen)
{
    update_tail(s);
    double tail = s->tail_root / s->sigma_z;
    double worst = tail * tail, best = -1.0;
    for (size_t i = 0; i < s->n; i++)
        if (s->nodes[i].alpha > best) {
            best = s->nodes[i].alpha;
            *peak_at = i;
        }
    for (size_t i = 0; i + 1 < s->n; i++) {
        interval *v = &s->iv[i];
        if (isnan(v->root_h[0]) && interval_root_h(s, i, v->root_h) != 0)
            return ts_fail(err, errlen,
                           "the bound between length scales "
                           "%g and %g did not compute",
                           s->nodes[i].l, s->nodes[i + 1].l);
        if (isnan(v->bound))
            interval_bound(s, i, &v->bound);
        worst = fmax(worst, v->bound);
    }
    *alpha_bound = best >= 0.0 ? fmax(worst, best) : worst;
    *peak = best;
    return 0;
}

/* Moves the search to sigma_z: the intervals' bounds are recomputed on
 * the next refresh, the nodes' alpha* now when nodes_too (else NAN, left
 * out of refresh's maximum). */
static int set_sigma_z(search *s, double sigma_z, int nodes_too, char *err,
                       size_t errlen)
{
    s->sigma_z = sigma_z;
    double var = s->prior->sigma_x * s->prior->sigma_x;
    for (size_t i = 0; i < s->n; i++) {
        s->nodes[i].alpha = NAN;
        if (nodes_too && cip_effective(s->nodes[i].b.a, s->nodes[i].b.cond, var,
                                       0.0, sigma_z, NULL, &s->nodes[i].alpha,
                                       &s->w, err, errlen) != 0)
            return -1;
    }
    for (size_t i = 0; i + 1 < s->n; i++)
        s->iv[i].bound = NAN;
    return 0;
}

static void fill_result(const search *s, double alpha_bound, double peak,
                        size_t peak_at, ts_cip_sup_result *out)
{
    out->loss = certified_loss(s, alpha_bound);
    out->peak_loss = loss_of(s, peak);
    out->peak_length_scale = s->nodes[peak_at].l;
    out->evaluations = s->evaluations;
    out->ill_conditioned = 0;
}

static const ts_cip_sup_goal default_goal = {.slack = TS_CIP_SUP_SLACK,
                                             .abs_slack = 0.0,
                                             .enough = 0.0,
                                             .give_up = INFINITY};

/* Refines the grid until the goal is met or the evaluations run out. */
static int refine(search *s, const ts_cip_sup_goal *goal,
                  ts_cip_sup_result *out, char *err, size_t errlen)
{
    for (;;) {
        double alpha_bound, peak;
        size_t peak_at = 0;
        if (refresh(s, &alpha_bound, &peak, &peak_at, err, errlen) != 0)
            return -1;
        fill_result(s, alpha_bound, peak, peak_at, out);
        double peak_loss = loss_of(s, peak);
        double target = fmax(
            fmax((1.0 + goal->slack) * peak_loss, peak_loss + goal->abs_slack),
            goal->enough);
        if (out->loss <= target || peak_loss > goal->give_up || s->n >= s->cap)
            return 0;
        /* Split every interval above the target, from the right so that
         * the indices still to visit do not move. */
        for (size_t i = s->n - 1; i-- > 0 && s->n < s->cap;)
            if (certified_loss(s, s->iv[i].bound) > target &&
                insert_node(s, i + 1, sqrt(s->nodes[i].l * s->nodes[i + 1].l),
                            err, errlen) != 0)
                return -1;
        double tail = s->tail_root / s->sigma_z;
        if (certified_loss(s, tail * tail) > target && s->n < s->cap &&
            insert_node(s, 0, s->nodes[0].l / TAIL_FACTOR, err, errlen) != 0)
            return -1;
    }
}

/* The grid's starting nodes: ls[0..count-1], ascending, the last l_max. */
static int seed(search *s, const double *ls, size_t count, char *err,
                size_t errlen)
{
    for (size_t i = 0; i < count; i++) {
        if (node_eval(s, ls[i], &s->nodes[s->n], err, errlen) != 0) {
            node_free(&s->nodes[s->n]);
            return -1;
        }
        s->iv[s->n] = stale;
        s->n++;
    }
    return 0;
}

/* INITIAL_NODES length scales log-spaced from l_0 (TAIL_FACTOR below the
 * closest S-U time difference) to l_max. */
static size_t initial_grid(const cip_split *sp, double l_max, double *ls)
{
    double gap = INFINITY;
    for (size_t i = 0; i < sp->ns; i++)
        for (size_t j = 0; j < sp->nu; j++)
            gap = fmin(gap, fabs(cip_split_time(sp, i) -
                                 cip_split_time(sp, sp->ns + j)));
    double l0 = gap / TAIL_FACTOR;
    if (!(l0 > 0.0) || !(l0 < l_max))
        l0 = l_max / TAIL_FACTOR;
    for (size_t i = 0; i < INITIAL_NODES; i++)
        ls[i] = l0 * pow(l_max / l0, (double)i / (INITIAL_NODES - 1));
    ls[INITIAL_NODES - 1] = l_max;
    return INITIAL_NODES;
}

/* The cases without a search: an independent prior or an empty U have
 * alpha* = 0 at every l; Sigma_ss at l_max needing a nugget is refused.
 * 1 when *out is final, 0 to search, -1 on error. */
static int trivial_case(const double *t, size_t d, const unsigned char *in_s,
                        const ts_cip_prior *prior, const cip_split *sp,
                        double sigma_z, double radius, double renyi_order,
                        ts_cip_sup_result *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    ts_cip_result at;
    if (ts_cip_loss(t, d, in_s, prior, sigma_z, radius, renyi_order, &at, err,
                    errlen) != 0)
        return -1;
    out->evaluations = 1;
    out->peak_length_scale = prior->independent ? 0.0 : prior->length_scale;
    if (at.jitter > 0.0) {
        out->loss = out->peak_loss = INFINITY;
        out->ill_conditioned = 1;
        return 1;
    }
    if (prior->independent || sp->nu == 0) {
        out->loss = out->peak_loss = at.loss;
        return 1;
    }
    return 0;
}

static int check_sup_model(const double *t, size_t d, const unsigned char *in_s,
                           const ts_cip_prior *prior, double radius,
                           double renyi_order, const ts_cip_sup_result *out,
                           char *err, size_t errlen)
{
    if (out == NULL)
        return ts_fail(err, errlen, "missing output");
    if (d > TS_CIP_SUP_MAX_POINTS)
        return ts_fail(err, errlen,
                       "trace of %zu points: the search over "
                       "length scales takes at most %d",
                       d, TS_CIP_SUP_MAX_POINTS);
    if (cip_check_loss_params(radius, renyi_order, err, errlen) != 0 ||
        cip_check_model(t, d, in_s, prior, 1.0, err, errlen) != 0)
        return -1;
    return 0;
}

static int sup_loss(const double *t, size_t d, const unsigned char *in_s,
                    const ts_cip_prior *prior, double sigma_z, double radius,
                    double renyi_order, const ts_cip_sup_goal *goal,
                    const double *ls, size_t n_ls, ts_cip_sup_result *out,
                    char *err, size_t errlen)
{
    if (check_sup_model(t, d, in_s, prior, radius, renyi_order, out, err,
                        errlen) != 0)
        return -1;
    cip_split sp;
    if (cip_split_init(&sp, t, d, in_s, err, errlen) != 0)
        return -1;
    int rc = trivial_case(t, d, in_s, prior, &sp, sigma_z, radius, renyi_order,
                          out, err, errlen);
    if (rc != 0) {
        cip_split_free(&sp);
        return rc < 0 ? -1 : 0;
    }
    double grid[INITIAL_NODES];
    int refining = ls == NULL;
    if (refining)
        n_ls = initial_grid(&sp, prior->length_scale, grid);
    search s;
    rc = -1;
    if (search_init(&s, &sp, prior, sigma_z, radius, renyi_order,
                    refining ? TS_CIP_SUP_MAX_EVALUATIONS : n_ls, err,
                    errlen) != 0) {
        cip_split_free(&sp);
        return -1;
    }
    if (!refining && n_ls > s.cap) {
        ts_fail(err, errlen,
                "a grid of %zu length scales is more than the "
                "%zu this trace's size allows",
                n_ls, s.cap);
        goto out;
    }
    if (seed(&s, refining ? grid : ls, n_ls, err, errlen) != 0)
        goto out;
    if (refining) {
        rc = refine(&s, goal != NULL ? goal : &default_goal, out, err, errlen);
    } else {
        double alpha_bound, peak;
        size_t peak_at = 0;
        rc = refresh(&s, &alpha_bound, &peak, &peak_at, err, errlen);
        if (rc == 0)
            fill_result(&s, alpha_bound, peak, peak_at, out);
    }
out:
    search_free(&s);
    cip_split_free(&sp);
    return rc;
}

int ts_cip_sup_loss(const double *t, size_t d, const unsigned char *in_s,
                    const ts_cip_prior *prior, double sigma_z, double radius,
                    double renyi_order, const ts_cip_sup_goal *goal,
                    ts_cip_sup_result *out, char *err, size_t errlen)
{
    return sup_loss(t, d, in_s, prior, sigma_z, radius, renyi_order, goal, NULL,
                    0, out, err, errlen);
}

int ts_cip_sup_loss_on_grid(const double *t, size_t d,
                            const unsigned char *in_s,
                            const ts_cip_prior *prior, double sigma_z,
                            double radius, double renyi_order, const double *ls,
                            size_t n, ts_cip_sup_result *out, char *err,
                            size_t errlen)
{
    if (ls == NULL || n == 0 || prior == NULL || prior->independent)
        return ts_fail(err, errlen, "a grid of length scales is needed");
    for (size_t i = 0; i < n; i++)
        if (!(ls[i] > 0.0) || !(ls[i] <= prior->length_scale) ||
            (i > 0 && !(ls[i] > ls[i - 1])))
            return ts_fail(err, errlen,
                           "grid point %zu (%g) is not in "
                           "(0, l_max] above the one before",
                           i, ls[i]);
    if (ls[n - 1] != prior->length_scale)
        return ts_fail(err, errlen, "the grid must end at l_max = %g",
                       prior->length_scale);
    return sup_loss(t, d, in_s, prior, sigma_z, radius, renyi_order, NULL, ls,
                    n, out, err, errlen);
}

/* The certified bound of s's grid at sigma_z (no refinement), the nodes'
 * own losses left out (the intervals' bounds cover them). */
static int bound_at(search *s, double sigma_z, double *loss, char *err,
                    size_t errlen)
{
    if (set_sigma_z(s, sigma_z, 0, err, errlen) != 0)
        return -1;
    double alpha_bound, peak;
    size_t peak_at = 0;
    if (refresh(s, &alpha_bound, &peak, &peak_at, err, errlen) != 0)
        return -1;
    *loss = certified_loss(s, alpha_bound);
    return 0;
}

/* The sigma_z at which s's grid certifies epsilon if sigma_x were 0:
 * with p <= ||A_a||^2 / sigma_z^2 every bound is c (1 + M) / sigma_z^2. */
static double closed_form_sigma_z(const search *s, double epsilon,
                                  double *g_top)
{
    double m = s->tail_root * s->tail_root;
    *g_top = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        m = fmax(m, s->nodes[i].a_top);
        *g_top = fmax(*g_top, s->nodes[i].g_top);
    }
    for (size_t i = 0; i + 1 < s->n; i++) {
        double best = INFINITY;
        for (int r = 0; r < 2; r++) {
            double root = sqrt(s->nodes[i + r].a_top) + s->iv[i].root_h[r];
            best = fmin(best, root * root);
        }
        m = fmax(m, best);
    }
    size_t d = s->sp->ns + s->sp->nu;
    double c = 0.5 * s->order * (double)s->sp->ns * s->radius * s->radius;
    return sqrt(c * (1.0 + m) * (1.0 + 64.0 * (double)d * DBL_EPSILON) /
                epsilon) *
           (1.0 + 1e-9);
}

int ts_cip_min_sigma_z_sup(const double *t, size_t d, const unsigned char *in_s,
                           const ts_cip_prior *prior, double radius,
                           double renyi_order, double epsilon, double rel_tol,
                           double *sigma_z, ts_cip_sup_result *at, char *err,
                           size_t errlen)
{
    ts_cip_sup_result scratch;
    ts_cip_sup_result *out = at != NULL ? at : &scratch;
    if (sigma_z == NULL)
        return ts_fail(err, errlen, "missing output");
    if (cip_check_epsilon(epsilon, rel_tol, err, errlen) != 0 ||
        check_sup_model(t, d, in_s, prior, radius, renyi_order, out, err,
                        errlen) != 0)
        return -1;
    cip_split sp;
    if (cip_split_init(&sp, t, d, in_s, err, errlen) != 0)
        return -1;
    /* The independent prior's sigma_z is a lower end (alpha* >= 0), and
     * exact when alpha* = 0 at every l. */
    double lo = cip_independent_sigma_z(sp.ns, radius, renyi_order, epsilon);
    *sigma_z = INFINITY;
    if (!cip_scale_ok(lo)) {
        cip_split_free(&sp);
        return ts_fail(err, errlen,
                       "no computable sigma_z meets epsilon %g "
                       "(sigma_z outside [%g, %g])",
                       epsilon, CIP_MIN_SCALE, CIP_MAX_SCALE);
    }
    int rc = trivial_case(t, d, in_s, prior, &sp, lo, radius, renyi_order, out,
                          err, errlen);
    if (rc != 0) {
        if (rc > 0 && !out->ill_conditioned)
            *sigma_z = lo;
        cip_split_free(&sp);
        return rc < 0 ? -1 : 0;
    }
    /* Refine the grid there: with sigma_x << sigma_z the bound's ratio to
     * the largest loss evaluated does not depend on sigma_z, so the same
     * grid serves every sigma_z tried below, and on a fixed grid the bound
     * decreases with sigma_z. */
    search s;
    if (search_init(&s, &sp, prior, lo, radius, renyi_order,
                    TS_CIP_SUP_MAX_EVALUATIONS, err, errlen) != 0) {
        cip_split_free(&sp);
        return -1;
    }
    rc = -1;
    double grid[INITIAL_NODES];
    size_t n0 = initial_grid(&sp, prior->length_scale, grid);
    if (seed(&s, grid, n0, err, errlen) != 0 ||
        refine(&s, &default_goal, out, err, errlen) != 0)
        goto out;
    double g_top, hi = closed_form_sigma_z(&s, epsilon, &g_top);
    if (!cip_scale_ok(hi)) {
        ts_fail(err, errlen,
                "no sigma_z up to %g is certified to meet "
                "epsilon %g at every length scale up to %g",
                CIP_MAX_SCALE, epsilon, prior->length_scale);
        goto out;
    }
    /* sigma_x shortens the bound by a factor of at most 1 + sigma_x^2
     * g_top / sigma_z^2, and the sigma_z that meets it by half that: when
     * that is within the tolerance even at hi / 2, the closed form is the
     * answer; else bisect. */
    double var = prior->sigma_x * prior->sigma_x;
    if (2.0 * var * g_top / (hi * hi) > rel_tol) {
        for (int k = 0; hi > lo * (1.0 + rel_tol); k++) {
            double mid = sqrt(lo * hi), loss;
            if (k == MAX_BISECTION_STEPS) {
                ts_fail(err, errlen,
                        "the search for sigma_z did not "
                        "converge");
                goto out;
            }
            if (bound_at(&s, mid, &loss, err, errlen) != 0)
                goto out;
            if (loss <= epsilon)
                hi = mid;
            else
                lo = mid;
        }
    }
    /* Rounding in the last step can leave the bound a hair above
     * epsilon: a few tolerance steps up settle it. */
    double loss = INFINITY;
    for (int k = 0; k < 4 && !(loss <= epsilon); k++) {
        if (k > 0)
            hi *= 1.0 + rel_tol;
        if (bound_at(&s, hi, &loss, err, errlen) != 0)
            goto out;
    }
    double alpha_bound, peak;
    size_t peak_at = 0;
    if (set_sigma_z(&s, hi, 1, err, errlen) != 0 ||
        refresh(&s, &alpha_bound, &peak, &peak_at, err, errlen) != 0)
        goto out;
    fill_result(&s, alpha_bound, peak, peak_at, out);
    if (!(out->loss <= epsilon)) {
        ts_fail(err, errlen,
                "sigma_z %g does not certify epsilon %g "
                "(certified %g)",
                hi, epsilon, out->loss);
        goto out;
    }
    *sigma_z = hi;
    rc = 0;
out:
    search_free(&s);
    cip_split_free(&sp);
    return rc;
}
