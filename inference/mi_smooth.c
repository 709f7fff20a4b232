/* Smoothed joints, figures of a channel on a joint, and the guard on rows
 * of cells without training mass (see mi_smooth.h). */
#include "inference/mi_smooth.h"
#include "inference/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL_REACH 3.0    /* bandwidths */

static double dist(const ts_vec2 *c, size_t a, size_t b)
{
    return hypot(c[a].x - c[b].x, c[a].y - c[b].y);
}

/* out[x] = sum_y in[y] K(y -> x), K normalised per source cell y. */
static void spread(const ts_vec2 *c, size_t n, const double *in,
                   double bandwidth_m, double *out, double *weights)
{
    memset(out, 0, n * sizeof *out);
    double reach = KERNEL_REACH * bandwidth_m;
    for (size_t y = 0; y < n; y++) {
        if (in[y] == 0.0)
            continue;
        double sum = 0.0;
        for (size_t x = 0; x < n; x++) {
            double d = dist(c, x, y);
            weights[x] = d <= reach
                         ? exp(-d * d / (2.0 * bandwidth_m * bandwidth_m))
                         : 0.0;
            sum += weights[x];
        }
        for (size_t x = 0; x < n; x++)
            out[x] += in[y] * weights[x] / sum;
    }
}

int ts_mi_smooth_joint(const ts_vec2 *centres, size_t n, size_t k,
                       const double *counts, double bandwidth_m,
                       double backoff, double *out, char *err,
                       size_t errlen)
{
    if (centres == NULL || counts == NULL || out == NULL || n == 0 ||
        k == 0)
        return ts_fail(err, errlen, "smooth: no cells, users or counts");
    if (!(bandwidth_m >= 0.0) || !isfinite(bandwidth_m))
        return ts_fail(err, errlen, "smooth: bandwidth %g m is not a "
                       "finite non-negative number", bandwidth_m);
    if (!(backoff >= 0.0 && backoff <= 1.0))
        return ts_fail(err, errlen, "smooth: back-off %g is not in [0, 1]",
                       backoff);
    double total = 0.0;
    for (size_t i = 0; i < n * k; i++) {
        if (!(counts[i] >= 0.0) || !isfinite(counts[i]))
            return ts_fail(err, errlen, "smooth: count %zu is not a finite "
                           "non-negative number", i);
        total += counts[i];
    }
    if (!(total > 0.0))
        return ts_fail(err, errlen, "smooth: no counts");
    double *pop = calloc(n, sizeof *pop);
    double *q = malloc(n * sizeof *q);
    double *w = malloc(n * sizeof *w);
    double *pu = calloc(k, sizeof *pu);
    if (pop == NULL || q == NULL || w == NULL || pu == NULL) {
        free(pop);
        free(q);
        free(w);
        free(pu);
        return ts_fail(err, errlen, "smooth: out of memory");
    }
    for (size_t u = 0; u < k; u++) {
        const double *row = counts + u * n;
        double *o = out + u * n;
        for (size_t x = 0; x < n; x++) {
            pu[u] += row[x] / total;
            pop[x] += row[x] / total;
        }
        if (bandwidth_m > 0.0)
            spread(centres, n, row, bandwidth_m, o, w);
        else
            memcpy(o, row, n * sizeof *o);
        for (size_t x = 0; x < n; x++)
            o[x] *= (1.0 - backoff) / total;
    }
    if (backoff > 0.0) {
        if (bandwidth_m > 0.0)
            spread(centres, n, pop, bandwidth_m, q, w);
        else
            memcpy(q, pop, n * sizeof *q);
        for (size_t x = 0; x < n; x++)
            q[x] = 0.5 * q[x] + 0.5 / (double)n;
        for (size_t u = 0; u < k; u++)
            for (size_t x = 0; x < n; x++)
                out[u * n + x] += backoff * pu[u] * q[x];
    }
    free(pop);
    free(q);
    free(w);
    free(pu);
    return 0;
}

/* J(u, z) = sum_x joint(u, x) C(x, z), users x cells; P(u) and P(z). */
static int joint_through(const double *joint, size_t n, size_t k,
                         const double *C, double *J, double *pu, double *pz)
{
    memset(J, 0, k * n * sizeof *J);
    memset(pu, 0, k * sizeof *pu);
    memset(pz, 0, n * sizeof *pz);
    double total = 0.0;
    for (size_t u = 0; u < k; u++)
        for (size_t x = 0; x < n; x++) {
            double p = joint[u * n + x];
            if (p == 0.0)
                continue;
            total += p;
            pu[u] += p;
            const double *row = C + x * n;
            double *j = J + u * n;
            for (size_t z = 0; z < n; z++)
                j[z] += p * row[z];
        }
    if (!(total > 0.0))
        return -1;
    for (size_t u = 0; u < k; u++) {
        pu[u] /= total;
        for (size_t z = 0; z < n; z++) {
            J[u * n + z] /= total;
            pz[z] += J[u * n + z];
        }
    }
    return 0;
}

int ts_mi_figures_of(const double *joint, size_t n, size_t k,
                     const ts_vec2 *centres, const double *cost,
                     const double *C, ts_mi_figures *out, char *err,
                     size_t errlen)
{
    if (joint == NULL || C == NULL || out == NULL || n == 0 || k == 0 ||
        (cost == NULL && centres == NULL))
        return ts_fail(err, errlen, "figures: missing input");
    double *J = malloc(k * n * sizeof *J);
    double *pu = malloc(k * sizeof *pu);
    double *pz = malloc(n * sizeof *pz);
    if (J == NULL || pu == NULL || pz == NULL) {
        free(J);
        free(pu);
        free(pz);
        return ts_fail(err, errlen, "figures: out of memory");
    }
    if (joint_through(joint, n, k, C, J, pu, pz) != 0) {
        free(J);
        free(pu);
        free(pz);
        return ts_fail(err, errlen, "figures: the joint has no mass");
    }
    double mi = 0.0, hit = 0.0, D = 0.0, total = 0.0;
    for (size_t z = 0; z < n; z++) {
        double best = 0.0;
        for (size_t u = 0; u < k; u++) {
            double j = J[u * n + z];
            if (j > 0.0)
                mi += j * log(j / (pu[u] * pz[z]));
            if (j > best)
                best = j;
        }
        hit += best;
    }
    for (size_t x = 0; x < n; x++) {
        double px = 0.0;
        for (size_t u = 0; u < k; u++)
            px += joint[u * n + x];
        if (px == 0.0)
            continue;
        total += px;
        double r = 0.0;
        for (size_t z = 0; z < n; z++)
            r += C[x * n + z] * (cost != NULL ? cost[x * n + z]
                                              : dist(centres, x, z));
        D += px * r;
    }
    out->mi_bits = mi > 0.0 ? mi / M_LN2 : 0.0;
    out->bayes_error = hit < 1.0 ? 1.0 - hit : 0.0;
    out->distortion_m = D / total;
    free(J);
    free(pu);
    free(pz);
    return 0;
}

int ts_mi_guard_rows(const double *train, size_t n, size_t k,
                     const ts_vec2 *centres, double *C, size_t *rows_fixed,
                     char *err, size_t errlen)
{
    if (train == NULL || centres == NULL || C == NULL || n == 0 || k == 0)
        return ts_fail(err, errlen, "guard: missing input");
    *rows_fixed = 0;
    /* One block: J (k x n), pu (k), pz, Dz, Vz (n each), then the empty
     * flags. */
    double *block = malloc((k * n + k + 3 * n) * sizeof *block + n);
    if (block == NULL)
        return ts_fail(err, errlen, "guard: out of memory");
    double *J = block, *pu = J + k * n, *pz = pu + k, *Dz = pz + n,
           *Vz = Dz + n;
    unsigned char *empty = (unsigned char *)(Vz + n);
    int rc = 0;
    if (joint_through(train, n, k, C, J, pu, pz) != 0) {
        rc = ts_fail(err, errlen, "guard: the training joint has no mass");
        goto out;
    }
    double I = 0.0, V = 0.0;
    for (size_t z = 0; z < n; z++) {
        Dz[z] = 0.0;
        Vz[z] = 0.0;
        if (pz[z] <= 0.0)
            continue;
        for (size_t u = 0; u < k; u++) {
            double post = J[u * n + z] / pz[z];
            if (post > 0.0)
                Dz[z] += post * log(post / pu[u]);
            if (post > Vz[z])
                Vz[z] = post;
        }
        I += pz[z] * Dz[z];
        V += pz[z] * Vz[z];
    }
    for (size_t x = 0; x < n; x++) {
        empty[x] = 1;
        for (size_t u = 0; u < k && empty[x]; u++)
            empty[x] = train[u * n + x] == 0.0;
    }
    for (size_t x = 0; x < n; x++) {
        if (!empty[x])
            continue;
        double *row = C + x * n, dx = 0.0, vx = 0.0;
        for (size_t z = 0; z < n; z++) {
            /* An output no training row reaches has no posterior: its
             * report would name nobody of the training population, and it
             * counts as the prior (D = 0, V = max P(u)). */
            double v = pz[z] > 0.0 ? Vz[z] : 0.0;
            if (pz[z] <= 0.0)
                for (size_t u = 0; u < k; u++)
                    v = pu[u] > v ? pu[u] : v;
            dx += row[z] * Dz[z];
            vx += row[z] * v;
        }
        if (dx <= I * (1.0 + 1e-12) && vx <= V * (1.0 + 1e-12))
            continue;
        /* The nearest output whose posterior is close to the prior (D at
         * most half the population's, V at most the population's), else
         * the nearest within the population's on both, else the
         * population's report distribution P(Z) itself, which meets both
         * bounds with equality. */
        size_t target = n;
        for (int pass = 0; pass < 2 && target == n; pass++) {
            double bd = INFINITY;
            for (size_t z = 0; z < n; z++) {
                if (!(pz[z] > 0.0 && Dz[z] <= (pass ? 1.0 : 0.5) * I &&
                      Vz[z] <= V))
                    continue;
                double d = dist(centres, x, z);
                if (d < bd) {
                    bd = d;
                    target = z;
                }
            }
        }
        double dt = target < n ? Dz[target] : I;
        double vt = target < n ? Vz[target] : V;
        double t = 0.0;
        if (dx > I)
            t = dt < dx ? (dx - I) / (dx - dt) : 1.0;
        if (vx > V) {
            double tv = vt < vx ? (vx - V) / (vx - vt) : 1.0;
            t = tv > t ? tv : t;
        }
        t = t * (1.0 + 1e-9) < 1.0 ? t * (1.0 + 1e-9) : 1.0;
        for (size_t z = 0; z < n; z++)
            row[z] = (1.0 - t) * row[z] + t * (target < n ? (z == target)
                                                          : pz[z]);
        (*rows_fixed)++;
    }
out:
    free(block);
    return rc;
}

/* Grid Laplace rows at eps for the cells the joint visits (others 0);
 * returns their mean distortion over the joint. */
static double laplace_rows_of(const double *joint, size_t n, size_t k,
                              const ts_vec2 *centres, const double *cost,
                              double eps, double *C)
{
    double D = 0.0, total = 0.0;
    for (size_t x = 0; x < n; x++) {
        double px = 0.0, *row = C + x * n;
        for (size_t u = 0; u < k; u++)
            px += joint[u * n + x];
        if (px == 0.0) {
            memset(row, 0, n * sizeof *row);
            continue;
        }
        double sum = 0.0, r = 0.0;
        for (size_t z = 0; z < n; z++)
            sum += row[z] = exp(-eps * dist(centres, x, z));
        for (size_t z = 0; z < n; z++) {
            row[z] /= sum;
            r += row[z] * (cost != NULL ? cost[x * n + z]
                                        : dist(centres, x, z));
        }
        D += px * r;
        total += px;
    }
    return D / total;
}

int ts_mi_laplace_reference(const double *joint, size_t n, size_t k,
                            const ts_vec2 *centres, const double *cost,
                            double distortion_m, ts_mi_figures *out,
                            double *epsilon_per_m, char *err, size_t errlen)
{
    if (joint == NULL || centres == NULL || out == NULL || n < 2 || k == 0)
        return ts_fail(err, errlen, "laplace reference: missing input");
    double *C = malloc(n * n * sizeof *C);
    if (C == NULL)
        return ts_fail(err, errlen, "laplace reference: out of memory");
    double extent = 0.0, side = INFINITY;
    for (size_t x = 0; x < n; x++)
        for (size_t z = x + 1; z < n; z++) {
            double d = dist(centres, x, z);
            extent = fmax(extent, d);
            side = fmin(side, d);
        }
    /* Bisection on log eps between nearly uniform rows and rows that
     * stay in their cell: E[d] falls with eps. */
    double lo = log(0.01 / extent), hi = log(40.0 / side);
    for (int i = 0; i < 60; i++) {
        double mid = 0.5 * (lo + hi);
        if (laplace_rows_of(joint, n, k, centres, cost, exp(mid), C) >
            distortion_m)
            lo = mid;
        else
            hi = mid;
    }
    laplace_rows_of(joint, n, k, centres, cost, exp(hi), C);
    int rc = ts_mi_figures_of(joint, n, k, centres, cost, C, out, err,
                              errlen);
    if (epsilon_per_m != NULL)
        *epsilon_per_m = exp(hi);
    free(C);
    return rc;
}
