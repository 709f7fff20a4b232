/* The MI-optimal channel problem (inference/mi_optimal.h): its input, the
 * optimizer's parameters and result, and the two figures of a channel.
 * Below the solvers, so each of them and the public entry share it
 * without depending on one another. */
#ifndef TRACESAN_INFERENCE_MI_PROBLEM_H
#define TRACESAN_INFERENCE_MI_PROBLEM_H

#include <stddef.h>

#include "geometry/plane.h"

/* The channel and the optimizer's workspaces are cells x cells. */
#define TS_MI_MAX_CELLS 4096u
#define TS_MI_MAX_USERS 100000u
/* With geoind_epsilon the exact solver's linear steps are LPs over
 * cells^2 entries and about 8 cells^2 neighbour constraints
 * (mi_geoind_lp.c): it takes at most this many cells. */
#define TS_MI_GEOIND_MAX_CELLS 144u
/* The first-order geo-ind solver (mi_geoind_pd.c) keeps 8 cells^2
 * multipliers and about 10 cells^2 other doubles: 330 MB at this many. */
#define TS_MI_GEOIND_PD_MAX_CELLS 1600u

/* Which geo-ind solver ts_mi_optimize runs. */
typedef enum ts_mi_geoind_solver {
    TS_MI_GEOIND_AUTO = 0,      /* the LP up to TS_MI_GEOIND_MAX_CELLS */
    TS_MI_GEOIND_LP,            /* Frank-Wolfe over GLPK's LP (exact) */
    TS_MI_GEOIND_FIRST_ORDER,   /* the primal-dual method, any size */
} ts_mi_geoind_solver;

/* Which channel ts_mi_optimize builds (without geo-ind). */
typedef enum ts_mi_family {
    TS_MI_OPTIMAL = 0,          /* the MI-optimal channel */
    /* planar Laplace on the grid remapped to the location prior
     * (inference/mi_remap.h), scaled to E[d] = L; the gap certifies how
     * far its I(U; Z) is above the optimum */
    TS_MI_REMAPPED_LAPLACE,
} ts_mi_family;

typedef struct ts_mi_problem {
    size_t cells;               /* n: inputs and outputs are the same cells */
    const ts_vec2 *centres;     /* n cell centres, metres of a plane */
    size_t users;               /* k */
    /* k x n, row-major: the empirical joint P(U = u, X = x) of a training
     * trace; non-negative, sums to 1. */
    const double *joint;
    /* L >= 0. L = 0 gives the identity (I(U; Z) = I(U; X), gap 0); with
     * geo-ind, L must exceed the least distortion an eps-geo-ind channel
     * can have, else an error says what that least distortion is (that
     * of an exactly geo-ind channel the optimizer builds, within about
     * 1e-6 relative of the LP's minimum; any larger L is accepted). */
    double distortion_m;
    double geoind_epsilon;      /* per metre; 0: no geo-ind constraint */
    /* Optional, cells x cells: cost[x * cells + z] = the mean distance in
     * metres from the true points of cell x to the centre of z, so that
     * E[d] = sum_x p(x) sum_z cost(x, z) C(x, z) is the mean distortion of
     * the true points themselves (tracesan optimize --distortion-on
     * points). Finite, >= 0. NULL: the distance between the centres. */
    const double *cost;
    /* tau >= 0: minimise I(U; Z) + tau sum_x p(x) sum_z C log C instead,
     * rows regularised towards spread (the max-entropy rows under the
     * distortion bound as tau grows). Without geo-ind only; the gap is
     * then that of the regularised objective (an entropic dual bound). */
    double row_entropy_weight;
} ts_mi_problem;

typedef struct ts_mi_params {
    double gap_tolerance_bits;  /* stop when the duality gap is below */
    unsigned max_iterations;
    /* Without geo-ind: 0 (the default) runs the accelerated mirror
     * descent of mi_optimal.c and polishes with Frank-Wolfe only if it
     * stalls; 1 runs Frank-Wolfe alone (for comparison). The result's
     * guarantees are the same either way. */
    int frank_wolfe_only;
    ts_mi_geoind_solver geoind_solver;
    ts_mi_family family;
} ts_mi_params;

typedef struct ts_mi_result {
    double mi_bits;             /* I(U; Z) of the returned channel */
    double distortion_m;        /* its E[d(X, Z)] (<= L up to 1e-9 relative) */
    double gap_bits;            /* certificate: mi_bits - optimum <= gap */
    unsigned iterations;
    int converged;              /* gap_bits <= gap_tolerance_bits */
    /* With geo-ind: the ratio bound per metre actually imposed on the
     * neighbour edges (eps / stretch, see mi_geograph.c), the neighbour
     * graph's stretch, and the weight of the uniform channel the last
     * repair mixed in (0 when the iterate already held every edge). */
    double edge_epsilon;
    double stretch;
    double repair_weight;
    /* With geo-ind: the least E[d] of an exactly geo-ind channel the
     * solver found (metres; L at or below it is refused), and the LP's
     * value of that least, a hair below (GLPK's tolerance). */
    double least_distortion_m;
    double least_distortion_lower_m;
    /* The certificate's lower bound on the optimum, bits: mi_bits -
     * gap_bits when the gap is positive (the first-order geo-ind solver,
     * which names the solver it was in solver_first_order = 1). */
    double lower_bound_bits;
    int solver_first_order;
    /* TS_MI_REMAPPED_LAPLACE: the Laplace scale used, per metre. */
    double laplace_epsilon_per_m;
} ts_mi_result;

/* I(U; Z) in bits and E[d(X, Z)] in metres of a channel for a problem. */
double ts_mi_bits(const ts_mi_problem *problem, const double *channel);
double ts_mi_distortion(const ts_mi_problem *problem, const double *channel);

#endif
