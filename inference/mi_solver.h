/* Internals shared by the MI-optimal channel's solvers (not a public API):
 * the problem in sparse form, I(U; Z) and its gradient, the Frank-Wolfe
 * loop with its certificate, and the cells' neighbour graph for geo-ind.
 *
 *   mi_optimal.c     public entry: validation, dispatch
 *   mi_solver.c      this header's solver, gradient and Frank-Wolfe loop,
 *                    and I and E[d] of a channel (mi_problem.h)
 *   mi_plain.c       without geo-ind: exact linear step and mirror descent
 *   mi_geograph.c    the neighbour (Yao) graph and its exact stretch
 *   mi_geoind_lp.c   with geo-ind: Frank-Wolfe over GLPK's LP (at most
 *                    TS_MI_GEOIND_MAX_CELLS cells), the exact reference
 *   mi_geoind_pd.c   with geo-ind at city scale: a primal-dual method,
 *                    repaired to exact feasibility and certified by a
 *                    Lagrangian bound
 *
 * Notation. n cells, k users, m visited cells (p(x) > 0). C is n x n,
 * row-major, C[x * n + z] = P(z | x). J(u, z) = sum_x p(u, x) C(x, z),
 * P(z) = sum_u J(u, z), f(C) = I(U; Z) in nats = sum J log(J / (p(u) P(z))).
 * W(x, z) = p(x) cost(x, z) is the distortion weight: E[d] = <W, C>. */
#ifndef TRACESAN_INFERENCE_MI_SOLVER_H
#define TRACESAN_INFERENCE_MI_SOLVER_H

#include <stddef.h>
#include <stdint.h>

#include "inference/mi_problem.h"

typedef struct mi_entry {
    uint32_t index;   /* user (cell lists) or cell (user lists) */
    double p;         /* p(u, x) */
} mi_entry;

typedef struct mi_solver {
    const ts_mi_problem *pb;
    size_t n, k;
    double *px, *pu;         /* marginals, normalised */
    size_t *cell_start;      /* CSR: users of each cell */
    mi_entry *cell_users;
    size_t *user_start;      /* CSR: cells of each user */
    mi_entry *user_cells;
    uint32_t *visited;       /* cells with p(x) > 0 */
    uint32_t *row_of;        /* n: index into visited, or UINT32_MAX */
    size_t m;
    double *W;               /* m x n: p(x) cost(x, z), visited rows */
    double *J, *Pz;          /* k x n joint of (U, Z), n marginal */
    double *JS, *PzS;        /* the same for a Frank-Wolfe vertex S */
    double *G;               /* m x n gradient rows, visited cells only */
    double *logratio;        /* k x n: log(J / (p(u) P(z))) */
} mi_solver;

/* The distance between two cells' centres. */
double mi_centre_distance(const ts_vec2 *c, size_t a, size_t b);

/* The expected distance from the true points of cell x to centre z:
 * problem->cost when given, else between the centres. */
double mi_cost(const ts_mi_problem *pb, size_t x, size_t z);

int mi_solver_init(mi_solver *s, const ts_mi_problem *pb, double total,
                   char *err, size_t errlen);
void mi_solver_free(mi_solver *s);

/* J and P(z) of the channel alpha * A (rows of visited cells). */
void mi_joint_of(const mi_solver *s, const double *A, double alpha,
                 double *J, double *Pz);
/* s->logratio from s->J and s->Pz. */
void mi_logratio(mi_solver *s);
/* s->G from s->logratio. */
void mi_gradient_rows(mi_solver *s);
/* f in nats from s->J and s->logratio. */
double mi_objective(const mi_solver *s);
/* <W, C> over the visited rows. */
double mi_channel_distortion(const mi_solver *s, const double *C);

/* The linear minimisation step of Frank-Wolfe: writes the vertex S's joint
 * into s->JS / s->PzS, returns min <G, S> over the feasible set (or a valid
 * lower bound on it, which is what the certificate needs) in *lower, and
 * keeps whatever it needs to apply the step. 0, or -1 with err. */
typedef struct mi_fw_oracle {
    void *ctx;
    int (*lower)(void *ctx, mi_solver *s, double *lower, char *err,
                 size_t errlen);
    void (*vertex_joint)(void *ctx, mi_solver *s);
    /* A <- A + add * S (the channel is kept as alpha * A), or A <- S for
     * the whole step (whole != 0, add unused). */
    void (*apply)(void *ctx, mi_solver *s, double *A, double add, int whole);
} mi_fw_oracle;

/* Frank-Wolfe from the feasible channel A (rows of visited cells, or all
 * rows for a dense oracle), iteration count starting at *iterations, up to
 * max_iterations: stops when the gap is below tol_bits. Leaves the
 * channel in A (scaled, rows of visited cells as the oracle keeps them)
 * and the gap in result. */
int mi_frank_wolfe(mi_solver *s, const mi_fw_oracle *oracle, double *A,
                   double tol_bits, unsigned max_iterations,
                   unsigned *iterations, ts_mi_result *result, char *err,
                   size_t errlen);

/* The rows' tilt towards E[d] = L, shared by the mirror steps of both
 * mi_plain.c and mi_geoind_pd.c: row i (of cell cell[i], or i itself when
 * cell is NULL) becomes C(x, z) ∝ exp(a(i, z) - t d(i, z)), entries
 * floored at exp(-600); E[d] = sum_i px[x] sum_z d(i, z) C(x, z). */
typedef struct mi_tilt {
    size_t rows;
    const uint32_t *cell;    /* NULL: row i is cell i */
    const double *d;         /* rows x n: cost of each entry, metres */
    const double *px;        /* by cell: the weight of its row in E[d] */
    const double *a;         /* rows x n: the untilted logs */
} mi_tilt;

/* Writes the tilted rows to A (at their cells' rows) and their logs to la
 * (rows x n); returns E[d] and its slope in t (minus the px-weighted
 * variance of d under the rows). */
double mi_tilt_rows(const mi_tilt *tl, size_t n, double t, double *la,
                    double *A, double *slope);
/* The tilt t >= 0 that makes E[d] = L (0 if L is slack there), writing
 * its channel: Newton kept in a bisection bracket, warm from t; past the
 * step cap it settles on the feasible end of its bracket; -1 if it has
 * none (L below what any tilt reaches). */
int mi_tilt_solve(const mi_tilt *tl, size_t n, double L, double t,
                  double *la, double *A, double *tilt);

/* ---------------------------------------------------- the plain polytope */

/* Without geo-ind: the best channel by mirror descent (and Frank-Wolfe if
 * mirror descent runs out of steps), rows of the visited cells in C. */
int mi_plain_solve(mi_solver *s, const ts_mi_params *params, double *C,
                   ts_mi_result *result, char *err, size_t errlen);

/* The Frank-Wolfe gap of a channel C (all n rows, E[d] <= L) for the plain
 * problem, row entropy aside: <G, C> - min_S <G, S> >= f(C) - f*, in
 * nats: how far any feasible channel is above the optimum. */
int mi_plain_gap(mi_solver *s, const double *C, double *gap, char *err,
                 size_t errlen);

/* ------------------------------------------------------- the geo-ind set */

/* The 8-cone Yao graph of the centres, symmetric, as undirected edges
 * a < b, and its exact stretch max sp(x, y) / d(x, y). */
typedef struct mi_geograph {
    size_t n;
    size_t edges;            /* undirected */
    uint32_t *a, *b;         /* edge endpoints, a < b */
    double *len;             /* metres */
    size_t *start;           /* CSR adjacency over directed edges */
    uint32_t *to;
    uint32_t *edge_of;       /* the undirected edge of each directed one */
    double stretch;
} mi_geograph;

/* A binary min-heap of (distance, cell) with lazy deletion (Dijkstra's
 * queue); room for every push must be allocated by the caller. */
typedef struct mi_heap_item {
    double d;
    uint32_t v;
} mi_heap_item;

void mi_heap_push(mi_heap_item *h, size_t *len, mi_heap_item it);
mi_heap_item mi_heap_pop(mi_heap_item *h, size_t *len);

int mi_geograph_init(mi_geograph *g, const ts_vec2 *centres, size_t n,
                     char *err, size_t errlen);
void mi_geograph_free(mi_geograph *g);

/* e' = eps / stretch, less a relative margin against the rounding of a
 * chain of ratios. */
double mi_edge_epsilon(const mi_geograph *g, double eps);

/* The smallest mix with the uniform channel that makes every edge
 * constraint C(a, z) <= exp(e' len) C(b, z) hold in floating point, applied
 * to C (all n rows, which must be stochastic); returns the weight used. */
double mi_geoind_repair(const mi_geograph *g, double eps_edge, double *C);
/* The least such weight, without applying it. */
double mi_geoind_repair_weight(const mi_geograph *g, double eps_edge,
                               const double *C);

/* With geo-ind, by Frank-Wolfe over GLPK's LP (mi_geoind_lp.c). */
int mi_geoind_lp_solve(mi_solver *s, const ts_mi_params *params, double *C,
                       ts_mi_result *result, char *err, size_t errlen);
/* With geo-ind, by the primal-dual method (mi_geoind_pd.c): all n rows of
 * C, exactly feasible, the gap a certified bound. */
int mi_geoind_pd_solve(mi_solver *s, const ts_mi_params *params, double *C,
                       ts_mi_result *result, char *err, size_t errlen);

#endif
