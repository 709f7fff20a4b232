/* The neighbour graph that carries the geo-ind constraints, and the repair
 * that makes a channel hold them exactly.
 *
 * eps-geo-ind over all n^2 pairs is implied by constraints between
 * neighbours only: if C(a, z) <= exp(e' d(a, b)) C(b, z) on every edge of a
 * graph, then chaining along a shortest path gives
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
 * The Yao graph's construction is O(n^2) and the stretch takes n heap
 * Dijkstras, O(n E log n) (it was O(n^3) with the array scan). */
#include "inference/mi_solver.h"
#include "inference/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GEOIND_EPS_MARGIN 1e-9

void mi_geograph_free(mi_geograph *g)
{
    free(g->a);
    free(g->b);
    free(g->len);
    free(g->start);
    free(g->to);
    free(g->edge_of);
    memset(g, 0, sizeof *g);
}

double mi_edge_epsilon(const mi_geograph *g, double eps)
{
    return eps / g->stretch * (1.0 - GEOIND_EPS_MARGIN);
}

static int compare_u64(const void *p, const void *q)
{
    uint64_t a = *(const uint64_t *)p, b = *(const uint64_t *)q;
    return (a > b) - (a < b);
}

void mi_heap_push(mi_heap_item *h, size_t *len, mi_heap_item it)
{
    size_t i = (*len)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].d <= it.d)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

mi_heap_item mi_heap_pop(mi_heap_item *h, size_t *len)
{
    mi_heap_item top = h[0], last = h[--(*len)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *len)
            break;
        if (c + 1 < *len && h[c + 1].d < h[c].d)
            c++;
        if (h[c].d >= last.d)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*len > 0)
        h[i] = last;
    return top;
}

/* max over y of sp(src, y) / d(src, y); INFINITY if some y is unreached. */
static double stretch_from(const mi_geograph *g, const ts_vec2 *c,
                           size_t src, double *sp, mi_heap_item *heap)
{
    size_t n = g->n, len = 0;
    for (size_t y = 0; y < n; y++)
        sp[y] = INFINITY;
    sp[src] = 0.0;
    mi_heap_push(heap, &len, (mi_heap_item){ 0.0, (uint32_t)src });
    while (len > 0) {
        mi_heap_item it = mi_heap_pop(heap, &len);
        if (it.d > sp[it.v])
            continue;
        for (size_t t = g->start[it.v]; t < g->start[it.v + 1]; t++) {
            double nd = it.d + g->len[g->edge_of[t]];
            if (nd < sp[g->to[t]]) {
                sp[g->to[t]] = nd;
                mi_heap_push(heap, &len, (mi_heap_item){ nd, g->to[t] });
            }
        }
    }
    double worst = 1.0;
    for (size_t y = 0; y < n; y++) {
        double d = mi_centre_distance(c, src, y);
        if (d == 0.0)
            continue;
        if (!isfinite(sp[y]))
            return INFINITY;
        if (sp[y] / d > worst)
            worst = sp[y] / d;
    }
    return worst;
}

int mi_geograph_init(mi_geograph *g, const ts_vec2 *c, size_t n, char *err,
                     size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->n = n;
    /* Each cell's 8 cone neighbours, then symmetrised as a sorted,
     * deduplicated list of (a, b) with a < b. */
    uint64_t *pairs = malloc(16 * n * sizeof *pairs + 1);
    size_t np = 0;
    if (pairs == NULL)
        return ts_fail(err, errlen, "mi-optimal: out of memory");
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
            if (best[q] != SIZE_MAX) {
                uint64_t lo = x < best[q] ? x : best[q];
                uint64_t hi = x < best[q] ? best[q] : x;
                pairs[np++] = lo << 32 | hi;
            }
    }
    qsort(pairs, np, sizeof *pairs, compare_u64);
    size_t edges = 0;
    for (size_t i = 0; i < np; i++)
        if (i == 0 || pairs[i] != pairs[i - 1])
            pairs[edges++] = pairs[i];
    g->edges = edges;
    g->a = malloc((edges + 1) * sizeof *g->a);
    g->b = malloc((edges + 1) * sizeof *g->b);
    g->len = malloc((edges + 1) * sizeof *g->len);
    g->start = calloc(n + 1, sizeof *g->start);
    g->to = malloc((2 * edges + 1) * sizeof *g->to);
    g->edge_of = malloc((2 * edges + 1) * sizeof *g->edge_of);
    double *sp = malloc(n * sizeof *sp);
    mi_heap_item *heap = malloc((2 * edges + n + 1) * sizeof *heap);
    if (!g->a || !g->b || !g->len || !g->start || !g->to || !g->edge_of ||
        !sp || !heap) {
        free(pairs);
        free(sp);
        free(heap);
        mi_geograph_free(g);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    for (size_t e = 0; e < edges; e++) {
        g->a[e] = (uint32_t)(pairs[e] >> 32);
        g->b[e] = (uint32_t)(pairs[e] & 0xffffffffu);
        g->len[e] = mi_centre_distance(c, g->a[e], g->b[e]);
        g->start[g->a[e] + 1]++;
        g->start[g->b[e] + 1]++;
    }
    free(pairs);
    for (size_t x = 0; x < n; x++)
        g->start[x + 1] += g->start[x];
    size_t *fill = calloc(n, sizeof *fill);
    if (fill == NULL) {
        free(sp);
        free(heap);
        mi_geograph_free(g);
        return ts_fail(err, errlen, "mi-optimal: out of memory");
    }
    for (size_t e = 0; e < edges; e++) {
        size_t ia = g->start[g->a[e]] + fill[g->a[e]]++;
        size_t ib = g->start[g->b[e]] + fill[g->b[e]]++;
        g->to[ia] = g->b[e];
        g->edge_of[ia] = (uint32_t)e;
        g->to[ib] = g->a[e];
        g->edge_of[ib] = (uint32_t)e;
    }
    free(fill);
    double stretch = 1.0;
    for (size_t src = 0; src < n && isfinite(stretch); src++) {
        double s = stretch_from(g, c, src, sp, heap);
        if (s > stretch)
            stretch = s;
    }
    free(sp);
    free(heap);
    g->stretch = stretch;
    if (!isfinite(stretch)) {
        mi_geograph_free(g);
        return ts_fail(err, errlen, "mi-optimal: the cells' neighbour graph "
                       "is not connected (duplicate centres?)");
    }
    return 0;
}

double mi_geoind_repair_weight(const mi_geograph *g, double eps_edge,
                               const double *C)
{
    size_t n = g->n;
    double unif = 1.0 / (double)n, beta = 0.0;
    for (size_t e = 0; e < g->edges; e++) {
        const double *ca = C + (size_t)g->a[e] * n;
        const double *cb = C + (size_t)g->b[e] * n;
        double ratio = exp(eps_edge * g->len[e]);
        double room = (ratio - 1.0) * unif;
        for (size_t z = 0; z < n; z++) {
            double viol = ca[z] - ratio * cb[z];
            if (viol < cb[z] - ratio * ca[z])
                viol = cb[z] - ratio * ca[z];
            if (viol > 0.0) {
                double b = viol / (viol + room);
                if (b > beta)
                    beta = b;
            }
        }
    }
    return beta;
}

double mi_geoind_repair(const mi_geograph *g, double eps_edge, double *C)
{
    size_t n = g->n;
    double unif = 1.0 / (double)n;
    double beta = mi_geoind_repair_weight(g, eps_edge, C);
    if (beta > 0.0) {
        /* Twice the least weight, against the rounding of the mix. */
        beta = 2.0 * beta + 1e-15;
        if (beta > 1.0)
            beta = 1.0;
        for (size_t i = 0; i < n * n; i++)
            C[i] = (1.0 - beta) * C[i] + beta * unif;
    }
    return beta;
}
