/* The remapped grid Laplace channel (see mi_remap.h). */
#include "inference/mi_remap.h"
#include "inference/error.h"
#include "inference/mi_solver.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Bisection steps on log eps over a bracket of a factor 2: eps ends
 * within a relative 10^-4 of the boundary of E[d] <= L. */
#define SCALE_STEPS 13
/* The same for the Laplace alone, over the whole bracket (about 10^7). */
#define LAPLACE_STEPS 28
/* A cell whose posterior weight is below this fraction of the largest
 * moves a target's expected cost by less than n * 1e-10 of it. */
#define NEGLIGIBLE_WEIGHT 1e-10
/* Targets are searched within this many Laplace scales (1 / eps), plus a
 * cell diagonal, of the report or of its posterior's mean. */
#define SEARCH_SCALES 4.0

typedef struct remap_work {
    size_t n;
    const double *px;     /* n, normalised */
    double *cost;         /* n x n: cost(x, r) */
    double *dist;         /* n x n: centre distances */
    double *K;            /* n x n: the Laplace rows */
    const ts_vec2 *centres;
    double diagonal;      /* of a cell, metres */
    uint32_t *sig, *cand; /* n: cells of weight, target candidates */
    double *w;            /* n: posterior weights of one report */
    uint32_t *target;     /* n: r(z') */
} remap_work;

static void laplace_rows(remap_work *rw, double eps)
{
    size_t n = rw->n;
    for (size_t x = 0; x < n; x++) {
        double *row = rw->K + x * n, sum = 0.0;
        for (size_t z = 0; z < n; z++)
            sum += row[z] = exp(-eps * rw->dist[x * n + z]);
        for (size_t z = 0; z < n; z++)
            row[z] /= sum;
    }
}

/* E[d] of the current K with each report z' moved to target[z'] (NULL:
 * left where it fell). */
static double expected_cost(const remap_work *rw, const uint32_t *target)
{
    size_t n = rw->n;
    double d = 0.0;
    for (size_t x = 0; x < n; x++) {
        if (rw->px[x] <= 0.0)
            continue;
        const double *k = rw->K + x * n, *c = rw->cost + x * n;
        double r = 0.0;
        for (size_t zp = 0; zp < n; zp++)
            r += k[zp] * c[target != NULL ? target[zp] : zp];
        d += rw->px[x] * r;
    }
    return d;
}

/* r(z') for every report z' of the current K, and the channel's E[d].
 * The target is searched among the cells within reach of the report and
 * of its posterior's mean: the expected-distance minimiser lies among
 * the posterior's mass, which the Laplace factor keeps within a few 1/eps
 * of the report unless the prior pulls it towards its mean. Restricting
 * the search only ever costs distortion, never privacy: any remap is
 * post-processing. */
static double remap_targets(remap_work *rw, double eps)
{
    size_t n = rw->n;
    double reach = SEARCH_SCALES / eps + rw->diagonal;
    for (size_t zp = 0; zp < n; zp++) {
        double top = 0.0, mass = 0.0, mx = 0.0, my = 0.0;
        for (size_t x = 0; x < n; x++) {
            double w = rw->w[x] = rw->px[x] * rw->K[x * n + zp];
            if (w > top)
                top = w;
            mass += w;
            mx += w * rw->centres[x].x;
            my += w * rw->centres[x].y;
        }
        /* No posterior mass (a report no cell with p(x) > 0 can reach
         * in floating point): leave it where it is. */
        size_t best = zp;
        if (top > 0.0) {
            mx /= mass;
            my /= mass;
            size_t ns = 0, nc = 0;
            for (size_t x = 0; x < n; x++) {
                if (rw->w[x] > top * NEGLIGIBLE_WEIGHT)
                    rw->sig[ns++] = (uint32_t)x;
                double dz = rw->dist[zp * n + x];
                double dm = hypot(rw->centres[x].x - mx,
                                  rw->centres[x].y - my);
                if (dz <= reach || dm <= reach)
                    rw->cand[nc++] = (uint32_t)x;
            }
            double best_cost = INFINITY;
            for (size_t c = 0; c < nc; c++) {
                size_t r = rw->cand[c];
                double e = 0.0;
                for (size_t i = 0; i < ns; i++) {
                    size_t x = rw->sig[i];
                    e += rw->w[x] * rw->cost[x * n + r];
                }
                if (e < best_cost) {
                    best_cost = e;
                    best = r;
                }
            }
        }
        rw->target[zp] = (uint32_t)best;
    }
    return expected_cost(rw, rw->target);
}

/* E[d] of the grid Laplace at eps, every report left where it fell. */
static double laplace_distortion(remap_work *rw, double eps)
{
    laplace_rows(rw, eps);
    return expected_cost(rw, NULL);
}

static double distortion_at(remap_work *rw, double eps)
{
    laplace_rows(rw, eps);
    return remap_targets(rw, eps);
}

static void write_channel(const remap_work *rw, double *C)
{
    size_t n = rw->n;
    memset(C, 0, n * n * sizeof *C);
    for (size_t x = 0; x < n; x++)
        for (size_t zp = 0; zp < n; zp++)
            C[x * n + rw->target[zp]] += rw->K[x * n + zp];
}

static void work_free(remap_work *rw, double *px)
{
    free(rw->cost);
    free(rw->dist);
    free(rw->K);
    free(rw->sig);
    free(rw->cand);
    free(rw->w);
    free(rw->target);
    free(px);
}

int ts_mi_remap_laplace(const ts_mi_problem *pb, double *C,
                        double *epsilon_per_m, char *err, size_t errlen)
{
    if (pb == NULL || C == NULL || epsilon_per_m == NULL ||
        pb->centres == NULL || pb->joint == NULL || pb->cells < 2 ||
        pb->cells > TS_MI_MAX_CELLS || pb->users == 0)
        return ts_fail(err, errlen, "remap: no problem, channel or cells");
    if (!(pb->distortion_m >= 0.0) || !isfinite(pb->distortion_m))
        return ts_fail(err, errlen, "remap: distortion bound %g m is not "
                       "a finite non-negative number", pb->distortion_m);
    size_t n = pb->cells, k = pb->users;
    double *px = calloc(n, sizeof *px), total = 0.0;
    remap_work rw = {
        .n = n,
        .px = px,
        .cost = malloc(n * n * sizeof *rw.cost),
        .dist = malloc(n * n * sizeof *rw.dist),
        .K = malloc(n * n * sizeof *rw.K),
        .centres = pb->centres,
        .sig = malloc(n * sizeof *rw.sig),
        .cand = malloc(n * sizeof *rw.cand),
        .w = malloc(n * sizeof *rw.w),
        .target = malloc(n * sizeof *rw.target),
    };
    if (px == NULL || rw.cost == NULL || rw.dist == NULL || rw.K == NULL ||
        rw.sig == NULL || rw.cand == NULL || rw.w == NULL || rw.target == NULL) {
        work_free(&rw, px);
        return ts_fail(err, errlen, "remap: out of memory");
    }
    for (size_t u = 0; u < k; u++)
        for (size_t x = 0; x < n; x++) {
            double p = pb->joint[u * n + x];
            if (!(p >= 0.0) || !isfinite(p)) {
                work_free(&rw, px);
                return ts_fail(err, errlen, "remap: joint entry (%zu, %zu) "
                               "is not a finite non-negative number", u, x);
            }
            px[x] += p;
            total += p;
        }
    if (!(total > 0.0)) {
        work_free(&rw, px);
        return ts_fail(err, errlen, "remap: the joint has no mass");
    }
    double extent = 0.0, side = INFINITY;
    for (size_t x = 0; x < n; x++) {
        px[x] /= total;
        for (size_t z = 0; z < n; z++) {
            double d = mi_centre_distance(pb->centres, x, z);
            rw.dist[x * n + z] = d;
            rw.cost[x * n + z] = mi_cost(pb, x, z);
            if (d > extent)
                extent = d;
            if (z != x && d < side)
                side = d;
        }
    }
    /* Square-ish cells: the nearest centres are a side apart. */
    rw.diagonal = side * M_SQRT2;
    if (!(side > 0.0) || !isfinite(side)) {
        work_free(&rw, px);
        return ts_fail(err, errlen, "remap: cells share a centre");
    }
    /* At eps_hi a report leaves its cell with probability about
     * 8 e^-40: the least distortion a remap reaches. At eps_lo the
     * Laplace rows are uniform over the grid to within 1 %. */
    double eps_hi = 40.0 / side, eps_lo = 0.01 / extent;
    double L = pb->distortion_m;
    double d_hi = distortion_at(&rw, eps_hi);
    if (d_hi > L * (1.0 + 1e-9)) {
        work_free(&rw, px);
        return ts_fail(err, errlen, "remap: the distortion bound %.1f m is "
                       "below the least a remapped Laplace reaches on this "
                       "grid, %.1f m", L, d_hi);
    }
    /* Every remap step is O(n^2) per report, the Laplace alone O(n^2) in
     * all: the scale at which the Laplace alone meets L is found first,
     * and the remap meets L there too (leaving each report in place is
     * one of its choices, so it never adds distortion). The remap's own
     * scale is below; it is bracketed by halving, then bisected. */
    double lo = eps_lo, hi = eps_hi;
    if (laplace_distortion(&rw, eps_lo) <= L) {
        hi = eps_lo;
    } else {
        for (int i = 0; i < LAPLACE_STEPS; i++) {
            double mid = sqrt(lo * hi);
            if (laplace_distortion(&rw, mid) <= L)
                hi = mid;
            else
                lo = mid;
        }
    }
    double best = hi;
    lo = hi;
    while (lo > eps_lo) {
        lo = fmax(0.5 * lo, eps_lo);
        if (distortion_at(&rw, lo) > L)
            break;
        best = hi = lo;
    }
    if (lo < hi) {
        for (int i = 0; i < SCALE_STEPS; i++) {
            double mid = sqrt(lo * hi);
            if (distortion_at(&rw, mid) <= L)
                best = hi = mid;
            else
                lo = mid;
        }
    }
    distortion_at(&rw, best);
    write_channel(&rw, C);
    *epsilon_per_m = best;
    work_free(&rw, px);
    return 0;
}
