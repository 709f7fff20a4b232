/* Planar Isotropic Mechanism (Xiao & Xiong, CCS 2015, Algorithm 2): the
 * noise stage, given a delta-location set.
 *
 * Units: every point is in metres of a local planar projection chosen by
 * the caller (the grid decides it); epsilon is unitless (delta-location-set
 * differential privacy: any two cells of the set are epsilon-neighbours).
 *
 * Degenerate sets. Each cell of the set stands for its whole square
 * (centre +- cell_m / 2), so the convex hull is Conv(centres) + square and
 * the sensitivity hull is K = Conv(centres) - Conv(centres) + [-cell_m,
 * cell_m]^2. K therefore always has positive area: one cell gives a square,
 * collinear cells a hexagon or rectangle. Enlarging K only adds noise, and
 * for any two points s1, s2 inside the squares of the set s1 - s2 lies in K,
 * so the guarantee P(z | s1) <= e^eps P(z | s2) holds for them all (for the
 * cell centres as well as for an exact location inside a cell).
 *
 * Distribution. z = x + r T^{-1} z' with z' uniform on K_I = T K,
 * r ~ Gamma(3, 1/eps), T = E[y y^T]^{-1/2} for y uniform on K (exact closed
 * form). In K_I coordinates r z' has the K-norm density
 * eps^2 / (2 Area(K_I)) exp(-eps ||w||_{K_I}) (the paper's Section 5.3
 * formula). As a density of z in METRES (the convention of every function
 * below) it picks up the Jacobian |det T|:
 *     f(z | s) = eps^2 |det T| / (2 Area(K_I)) exp(-eps ||T (z - s)||_{K_I})
 *              = eps^2 / (2 Area(K)) exp(-eps ||z - s||_K),
 * which integrates to 1 over the plane. The factor |det T| is the same for
 * every candidate s, so a posterior computed with either form is identical.
 *
 * Cost: building a context is O(n log n) for n cells (hull of the centres)
 * plus O(h) for the h hull vertices; a sample is O(log h); a density is
 * O(h).
 */
#ifndef TRACESAN_MECHANISMS_PIM_H
#define TRACESAN_MECHANISMS_PIM_H

#include <stddef.h>

#include "mechanisms/hull.h"
#include "mechanisms/polygon.h"
#include "mechanisms/rng.h"

/* Everything PIM derives from one delta-location set. Read-only for
 * callers; valid after a successful ts_pim_context_build until the next build
 * or ts_pim_context_free. Reusable: a rebuild only allocates when the set is
 * larger than any set built before. */
typedef struct ts_pim_context {
    ts_vec2 *hull;          /* Conv of the cells' squares, metres */
    size_t hull_count;
    ts_vec2 *k;             /* sensitivity hull K, centred at the origin */
    ts_vec2 *k_iso;         /* K_I = T K, vertex for vertex */
    size_t k_count;          /* 0 when the context is not usable */
    ts_vec2 *k_iso_forms; /* gauge forms of K_I (ts_gauge_prepare) */
    ts_vec2 *k_forms;       /* the same forms in metres: T^T k_iso_forms */
    int k_forms_paired;      /* k_forms[i + k_count/2] == -k_forms[i] */
    double *k_iso_fan; /* fan table of K_I (ts_polygon_fan_table) */
    ts_sym2 moment;         /* E[y y^T], y uniform on K, metres^2 */
    ts_mat2 transform;      /* T = moment^{-1/2}, 1/metres */
    ts_mat2 inverse;        /* T^{-1} = moment^{1/2}, metres */
    double det_transform;    /* det T > 0 */
    double area_k;           /* metres^2 */
    double area_k_iso;       /* unitless; = det T * area_k */
    double log_norm_unit;    /* log det T - log(2 area_k_iso) */

    /* private: working storage */
    ts_vec2 *scratch;
    size_t capacity;         /* number of cells the buffers are sized for */
} ts_pim_context;

/* An empty context (no allocation). */
void ts_pim_context_init(ts_pim_context *ctx);
void ts_pim_context_free(ts_pim_context *ctx);

/* Builds the geometry for the cells whose centres are given (metres) with
 * side cell_m (metres). Order and duplicates of the centres do not matter.
 * -1 (and the context unusable) on n == 0, a non-finite centre, a cell size
 * that is not positive and finite, or an allocation failure. */
int ts_pim_context_build(ts_pim_context *ctx, const ts_vec2 *centres, size_t n,
                         double cell_m);

/* One release: z = released + r T^{-1} z'. `released` is the true location
 * or its surrogate, in metres. -1 (z untouched) when the context is not
 * built, eps is not positive and finite, or the result is not finite. */
int ts_pim_sample(const ts_pim_context *ctx, ts_vec2 released, double eps,
                  ts_rng *rng, ts_vec2 *z);

/* ||v||_K for a displacement v in metres, = ||T v||_{K_I}, evaluated with
 * the metre-space forms. NaN when the context is not built. */
double ts_pim_k_norm(const ts_pim_context *ctx, ts_vec2 v);

/* log of the density's normalising constant, log(eps^2 det T /
 * (2 area(K_I))): the density is exp(ts_pim_log_norm - eps ||z - s||_K).
 * Separate so that a caller evaluating many s for one z and eps computes
 * it once. NaN when the context is not built or eps is not usable. */
double ts_pim_log_norm(const ts_pim_context *ctx, double eps);

/* Emission density f(z | s) per square metre, see the header comment, and
 * its logarithm (use the log for posteriors: far candidates underflow).
 * NaN when the context is not built or eps is not positive and finite. */
double ts_pim_log_density(const ts_pim_context *ctx, double eps, ts_vec2 z,
                          ts_vec2 s);
double ts_pim_density(const ts_pim_context *ctx, double eps, ts_vec2 z,
                      ts_vec2 s);

/* The emission of Section 5.3 as inference/belief.h's ts_log_emission_fn:
 * ts_pim_log_density of a context built on the SAME delta-set that released
 * z, with the same epsilon. ts_pim_emission_make computes the normalising
 * constant once for the whole posterior. */
typedef struct ts_pim_emission {
    const ts_pim_context *pim;
    double eps;
    double log_norm; /* ts_pim_log_norm(pim, eps) */
} ts_pim_emission;
ts_pim_emission ts_pim_emission_make(const ts_pim_context *pim, double eps);
double ts_pim_log_emission(const void *ctx, ts_vec2 z, ts_vec2 s);

#endif
