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
 *        K_ss(l_b), z_a = B_a y, B_a = [-A_a^T; I];
 *  mu_b = lambda_min(K_ss(l_b)). Hence alpha*(l) <= (sqrt(p) + sqrt(h) /
 *  sigma_z)^2 with p = lambda_max(A_a^T C_b^-1 A_a), h = lambda_max(H).
 * H1 is first order in sqrt(rho - 1), H2 in rho - 1 (both are computed and
 * the smaller kept). Below the first grid point l_0, by Fact 2,
 * alpha*(l) <= (||K_us(l_0)||_F / mu_0)^2 / sigma_z^2.
 *
 * Rounding: every block computed from K is exact for some K + E with
 * ||E|| <= ROUNDING(d) (Cholesky and triangular solves are backward
 * stable, Higham 2002, Theorems 10.3 and 8.5; GSL's symmetric
 * eigenvalues are accurate to eps ||M||). The bound widens each Loewner
 * step by that much. This is an argument, not interval arithmetic. */
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
    double mu;    /* lambda_min(K_ss(l)) less the rounding; <= 0: unusable */
    double a_fro; /* ||A||_F */
    double a_top; /* an upper bound on ||A||_2^2 */
    double g_top; /* an upper bound on lambda_max(K_{u|s}) */
    double alpha; /* alpha*(l) at the search's sigma_z */
    cip_blocks b;
} node;

typedef struct search {
    const cip_split *sp;
    const ts_cip_prior *prior;
    double radius, order, sigma_z;
    double e; /* rounding(d) */
    size_t n, cap, evaluations;
    node *nodes;      /* ascending l, the last at l_max */
    double *root_h;   /* interval i (nodes i, i+1): sqrt(h) + rounding */
    double *bound;    /* interval i: alpha* bound at sigma_z */
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

static void search_free(search *s)
{
    for (size_t i = 0; i < s->n; i++)
        cip_blocks_free(&s->nodes[i].b);
    free(s->nodes);
    free(s->root_h);
    free(s->bound);
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
    s->e = rounding(sp->ns + sp->nu);
    size_t node_bytes =
        sizeof(double) * (sp->ns * sp->ns + sp->nu * sp->ns + sp->nu * sp->nu);
    size_t affordable = MEMORY_BUDGET / (node_bytes + sizeof(node));
    s->cap = cap < affordable ? cap : affordable;
    if (s->cap < INITIAL_NODES + 1)
        s->cap = INITIAL_NODES + 1;
    s->nodes = calloc(s->cap, sizeof *s->nodes);
    s->root_h = calloc(s->cap, sizeof *s->root_h);
    s->bound = calloc(s->cap, sizeof *s->bound);
    if (s->nodes == NULL || s->root_h == NULL || s->bound == NULL ||
        cip_work_alloc(&s->w, sp, 1, err, errlen) != 0) {
        free(s->nodes);
        free(s->root_h);
        free(s->bound);
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
    if (cip_blocks_alloc(&n->b, sp) != 0)
        return ts_fail(err, errlen, "out of memory");
    s->evaluations++;
    if (cip_blocks_build(sp, l, 0.0, 0, &n->b, w) != 0)
        return ts_fail(err, errlen,
                       "the secret points' correlation matrix "
                       "does not factor at length scale %g",
                       l);
    for (size_t i = 0; i < sp->ns; i++)
        for (size_t j = 0; j < sp->ns; j++)
            gsl_matrix_set(w->ss, i, j,
                           cip_correlation(l, cip_split_time(sp, i),
                                           cip_split_time(sp, j)));
    double lo;
    if (cip_eigen_range(w->ss, w->eig, &lo, NULL) != 0)
        return ts_fail(err, errlen, "eigenvalues of K_ss did not converge");
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
static void fill_n(search *s, double l_a, double l_b)
{
    const cip_split *sp = s->sp;
    size_t d = sp->ns + sp->nu;
    double rho = l_b / l_a;
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) {
            double ti = cip_split_time(sp, i), tj = cip_split_time(sp, j);
            gsl_matrix_set(s->w.dd, i, j,
                           rho * cip_correlation(l_a, ti, tj) -
                               cip_correlation(l_b, ti, tj) / rho);
        }
}

/* sqrt(h) for interval i, plus the rounding of A_a: a bound on
 * |x_l(y) - computed x_a(y)| / |y| for every l in the interval. */
static int interval_root_h(search *s, size_t i, double *root_h)
{
    const node *a = &s->nodes[i], *b = &s->nodes[i + 1];
    const cip_split *sp = s->sp;
    cip_work *w = &s->w;
    size_t ns = sp->ns, nu = sp->nu;
    double rho = b->l / a->l, e = s->e;
    if (!(a->mu > 0.0) || !(b->mu > 0.0)) {
        *root_h = INFINITY;
        return 0;
    }
    double zeta = e * pow(1.0 + fmax(a->a_fro, b->a_fro), 2.0);

    /* H1 = (rho K_{u|s}(l_a) - K_{u|s}(l_b)) / mu_b, smaller than H2 on
     * wide intervals only. */
    double h1 = INFINITY;
    if (rho > H1_MIN_RATIO) {
        gsl_matrix_memcpy(w->uu, a->b.cond);
        gsl_matrix_scale(w->uu, rho);
        gsl_matrix_sub(w->uu, b->b.cond);
        double top1;
        if (cip_eigen_range(w->uu, w->eig, NULL, &top1) != 0)
            return -1;
        h1 = (fmax(0.0, top1) + (1.0 + rho) * zeta) / b->mu;
    }

    /* H2 = c rho B_a^T N~ B_a / mu_b, c = rho lambda_max(L_b^-1 N~_ss
     * L_b^-T) widened by the rounding of K_ss(l_b)'s factor. */
    fill_n(s, a->l, b->l);
    gsl_matrix_view n_ss = gsl_matrix_submatrix(w->dd, 0, 0, ns, ns);
    gsl_matrix_memcpy(w->ss, &n_ss.matrix);
    gsl_blas_dtrsm(CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, 1.0,
                   b->b.chol, w->ss);
    gsl_blas_dtrsm(CblasRight, CblasLower, CblasTrans, CblasNonUnit, 1.0,
                   b->b.chol, w->ss);
    cip_symmetrize(w->ss);
    double top_c;
    if (cip_eigen_range(w->ss, w->eig, NULL, &top_c) != 0)
        return -1;
    double kappa = 4.0 * e / b->mu;
    double c = rho * (fmax(0.0, top_c) * (1.0 + kappa) + kappa);
    /* B_a = [-A_a^T; I] (d x nu), then B_a^T N~ B_a. */
    gsl_matrix *ba = w->du;
    for (size_t r = 0; r < ns; r++)
        for (size_t col = 0; col < nu; col++)
            gsl_matrix_set(ba, r, col, -gsl_matrix_get(a->b.a, col, r));
    for (size_t r = 0; r < nu; r++)
        for (size_t col = 0; col < nu; col++)
            gsl_matrix_set(ba, ns + r, col, r == col ? 1.0 : 0.0);
    gsl_matrix *nb = w->du2;
    gsl_blas_dgemm(CblasNoTrans, CblasNoTrans, 1.0, w->dd, ba, 0.0, nb);
    gsl_blas_dgemm(CblasTrans, CblasNoTrans, 1.0, ba, nb, 0.0, w->uu);
    cip_symmetrize(w->uu);
    double top_w;
    if (cip_eigen_range(w->uu, w->eig, NULL, &top_w) != 0)
        return -1;
    double wbar = fmax(0.0, top_w) + (1.0 + rho) * e * pow(1.0 + a->a_fro, 2.0);
    double h2 = c * rho * wbar / b->mu;

    /* The reference is the computed x_a: its residual in q_a is at most
     * e |z_a| <= e (1 + ||A_a||) |y|, which moves x_l's bound by at most
     * rho^2 e (1 + ||A_a||) / mu_b (doubled for the solves). */
    double tau = 2.0 * rho * rho * e * (1.0 + a->a_fro) / b->mu;
    *root_h = sqrt(fmin(h1, h2)) + tau;
    return isnan(*root_h) ? -1 : 0;
}

/* The alpha* bound over interval i at the search's sigma_z. */
static int interval_bound(search *s, size_t i, double *bound)
{
    const node *a = &s->nodes[i], *b = &s->nodes[i + 1];
    double sz = s->sigma_z;
    if (!isfinite(s->root_h[i])) {
        *bound = INFINITY;
        return 0;
    }
    /* p <= ||A_a||^2 / sigma_z^2, as C_b >= sigma_z^2 I. Where sigma_x^2
     * K_{u|s} is not negligible next to sigma_z^2, p itself, with C_b less
     * the rounding of K_{u|s}(l_b). */
    double rho = b->l / a->l;
    double var = s->prior->sigma_x * s->prior->sigma_x / rho;
    double p = a->a_top / (sz * sz), pc;
    if (var * b->g_top > 1e-6 * sz * sz) {
        double zeta_b = s->e * pow(1.0 + b->a_fro, 2.0);
        if (cip_effective(a->b.a, b->b.cond, var, zeta_b, sz, NULL, &pc, &s->w,
                          NULL, 0) == 0)
            p = fmin(p, pc * (1.0 + 1e-9));
    }
    double root = sqrt(p) + s->root_h[i] / sz;
    *bound = root * root;
    return 0;
}

/* Inserts a node at l between nodes[i] and nodes[i + 1]. */
static int insert_node(search *s, size_t i, double l, char *err, size_t errlen)
{
    node fresh;
    if (node_eval(s, l, &fresh, err, errlen) != 0) {
        cip_blocks_free(&fresh.b);
        return -1;
    }
    size_t at = i + 1;
    memmove(&s->nodes[at + 1], &s->nodes[at], (s->n - at) * sizeof *s->nodes);
    s->nodes[at] = fresh;
    /* Interval i splits into i and i + 1; those after move up one. */
    if (s->n >= 2 && at <= s->n - 1) {
        memmove(&s->root_h[at + 1], &s->root_h[at],
                (s->n - 1 - at) * sizeof *s->root_h);
        memmove(&s->bound[at + 1], &s->bound[at],
                (s->n - 1 - at) * sizeof *s->bound);
    }
    s->n++;
    s->root_h[i] = s->root_h[at] = NAN;
    s->bound[i] = s->bound[at] = NAN;
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
            double k = cip_correlation(first->l, cip_split_time(sp, i),
                                       cip_split_time(sp, sp->ns + j));
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
        if (isnan(s->root_h[i]) && interval_root_h(s, i, &s->root_h[i]) != 0)
            return ts_fail(err, errlen,
                           "the bound between length scales "
                           "%g and %g did not compute",
                           s->nodes[i].l, s->nodes[i + 1].l);
        if (isnan(s->bound[i]) && interval_bound(s, i, &s->bound[i]) != 0)
            return ts_fail(err, errlen, "out of memory");
        worst = fmax(worst, s->bound[i]);
    }
    *alpha_bound = fmax(worst, best);
    *peak = best;
    return 0;
}

/* Re-evaluates every node's alpha* and every bound at sigma_z. */
static int set_sigma_z(search *s, double sigma_z, char *err, size_t errlen)
{
    s->sigma_z = sigma_z;
    double var = s->prior->sigma_x * s->prior->sigma_x;
    for (size_t i = 0; i < s->n; i++)
        if (cip_effective(s->nodes[i].b.a, s->nodes[i].b.cond, var, 0.0,
                          sigma_z, NULL, &s->nodes[i].alpha, &s->w, err,
                          errlen) != 0)
            return -1;
    for (size_t i = 0; i + 1 < s->n; i++)
        s->bound[i] = NAN;
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

/* Refines the grid until the bound is within TS_CIP_SUP_SLACK of the peak
 * or the evaluations run out. */
static int refine(search *s, ts_cip_sup_result *out, char *err, size_t errlen)
{
    for (;;) {
        double alpha_bound, peak;
        size_t peak_at = 0;
        if (refresh(s, &alpha_bound, &peak, &peak_at, err, errlen) != 0)
            return -1;
        fill_result(s, alpha_bound, peak, peak_at, out);
        double target = (1.0 + TS_CIP_SUP_SLACK) * loss_of(s, peak);
        if (out->loss <= target || s->n >= s->cap)
            return 0;
        /* Split every interval above the target, from the right so that
         * the indices still to visit do not move. */
        for (size_t i = s->n - 1; i-- > 0 && s->n < s->cap;)
            if (certified_loss(s, s->bound[i]) > target &&
                insert_node(s, i, sqrt(s->nodes[i].l * s->nodes[i + 1].l), err,
                            errlen) != 0)
                return -1;
        double tail = s->tail_root / s->sigma_z;
        if (certified_loss(s, tail * tail) > target && s->n < s->cap) {
            /* A new first node: the old first interval is kept. */
            node fresh;
            if (node_eval(s, s->nodes[0].l / TAIL_FACTOR, &fresh, err,
                          errlen) != 0) {
                cip_blocks_free(&fresh.b);
                return -1;
            }
            memmove(&s->nodes[1], &s->nodes[0], s->n * sizeof *s->nodes);
            memmove(&s->root_h[1], &s->root_h[0],
                    (s->n - 1) * sizeof *s->root_h);
            memmove(&s->bound[1], &s->bound[0], (s->n - 1) * sizeof *s->bound);
            s->nodes[0] = fresh;
            s->root_h[0] = s->bound[0] = NAN;
            s->n++;
        }
    }
}

/* The grid's starting nodes: ls[0..count-1], ascending, the last l_max. */
static int seed(search *s, const double *ls, size_t count, char *err,
                size_t errlen)
{
    for (size_t i = 0; i < count; i++) {
        if (node_eval(s, ls[i], &s->nodes[s->n], err, errlen) != 0) {
            cip_blocks_free(&s->nodes[s->n].b);
            return -1;
        }
        s->root_h[s->n] = s->bound[s->n] = NAN;
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
                    double renyi_order, const double *ls, size_t n_ls,
                    ts_cip_sup_result *out, char *err, size_t errlen)
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
        rc = refine(&s, out, err, errlen);
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
                    double renyi_order, ts_cip_sup_result *out, char *err,
                    size_t errlen)
{
    return sup_loss(t, d, in_s, prior, sigma_z, radius, renyi_order, NULL, 0,
                    out, err, errlen);
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
    return sup_loss(t, d, in_s, prior, sigma_z, radius, renyi_order, ls, n, out,
                    err, errlen);
}

/* The certified bound of s's grid at sigma_z (no refinement). */
static int bound_at(search *s, double sigma_z, double *loss, char *err,
                    size_t errlen)
{
    if (set_sigma_z(s, sigma_z, err, errlen) != 0)
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
        double root = sqrt(s->nodes[i].a_top) + s->root_h[i];
        m = fmax(m, root * root);
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
    /* The sup is at least L*(l_max): its sigma_z is a lower end. */
    double lo;
    ts_cip_result at_max;
    if (ts_cip_min_sigma_z(t, d, in_s, prior, radius, renyi_order, epsilon,
                           rel_tol, &lo, &at_max, err, errlen) != 0)
        return -1;
    if (at_max.jitter > 0.0) {
        memset(out, 0, sizeof *out);
        out->loss = out->peak_loss = INFINITY;
        out->ill_conditioned = 1;
        *sigma_z = INFINITY;
        return 0;
    }
    /* Certify there; above it, the bound on the grid refined there is
     * decreasing in sigma_z: bisect it. */
    *sigma_z = lo;
    cip_split sp;
    if (cip_split_init(&sp, t, d, in_s, err, errlen) != 0)
        return -1;
    int rc = trivial_case(t, d, in_s, prior, &sp, lo, radius, renyi_order, out,
                          err, errlen);
    if (rc != 0) {
        cip_split_free(&sp);
        return rc < 0 ? -1 : 0;
    }
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
        refine(&s, out, err, errlen) != 0)
        goto out;
    if (out->loss <= epsilon) {
        rc = 0;
        goto out;
    }
    double g_top, hi = closed_form_sigma_z(&s, epsilon, &g_top);
    if (!cip_scale_ok(hi)) {
        ts_fail(err, errlen,
                "no sigma_z up to %g is certified to meet "
                "epsilon %g at every length scale up to %g",
                CIP_MAX_SCALE, epsilon, prior->length_scale);
        goto out;
    }
    hi = fmax(hi, lo);
    /* sigma_x shortens the bound by a factor of at most 1 + sigma_x^2
     * g_top / sigma_z^2: when that is within the tolerance, the closed
     * form is the answer. */
    double var = prior->sigma_x * prior->sigma_x;
    if (var * g_top / (lo * lo) > rel_tol) {
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
    /* Rounding in the bisection's last step can leave the bound a hair
     * above epsilon: a few tolerance steps up settle it. */
    double loss = INFINITY;
    for (int k = 0; k < 4; k++) {
        if (bound_at(&s, hi, &loss, err, errlen) != 0)
            goto out;
        if (loss <= epsilon)
            break;
        hi *= 1.0 + rel_tol;
    }
    double alpha_bound, peak;
    size_t peak_at = 0;
    if (refresh(&s, &alpha_bound, &peak, &peak_at, err, errlen) != 0)
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
