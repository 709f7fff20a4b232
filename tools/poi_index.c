#include "tools/poi_index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"

/* Few points per leaf: scanning them is cheaper than more tree levels. */
#define LEAF_POINTS 8
/* Candidate distances of a query live on the stack up to this k. */
#define STACK_CANDIDATES 64

typedef struct kd_node {
    uint32_t lo, hi;         /* the node's points: order[lo .. hi) */
    uint32_t left, right;    /* children (node numbers); 0 = leaf */
    int axis;
    double split;            /* left: coordinate <= split; right: >= */
} kd_node;

struct ts_poi_index {
    size_t n;
    double (*xyz)[3];        /* by input index */
    uint32_t *order;         /* input indices, grouped by leaf */
    kd_node *nodes;
    size_t n_nodes, nodes_cap;
};

void ts_poi_unit_vector(double lat, double lon, double out[3])
{
    double phi = lat * (M_PI / 180.0), lambda = lon * (M_PI / 180.0);
    double c = cos(phi);
    out[0] = c * cos(lambda);
    out[1] = c * sin(lambda);
    out[2] = sin(phi);
}

double ts_poi_chord2(const double a[3], const double b[3])
{
    double dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
    return dx * dx + dy * dy + dz * dz;
}

/* Rearranges order[lo .. hi) so that order[nth] holds the point whose
 * `axis` coordinate would be there if sorted, with no larger one before it
 * and no smaller one after it (Hoare quickselect, middle pivot). */
static void select_nth(const double (*xyz)[3], uint32_t *order, size_t lo,
                       size_t hi, size_t nth, int axis)
{
    ptrdiff_t left = (ptrdiff_t)lo, right = (ptrdiff_t)hi - 1;
    ptrdiff_t target = (ptrdiff_t)nth;
    while (left < right) {
        double pivot = xyz[order[left + (right - left) / 2]][axis];
        ptrdiff_t i = left, j = right;
        while (i <= j) {
            while (xyz[order[i]][axis] < pivot)
                i++;
            while (xyz[order[j]][axis] > pivot)
                j--;
            if (i <= j) {
                uint32_t t = order[i];
                order[i] = order[j];
                order[j] = t;
                i++;
                j--;
            }
        }
        /* Now [left, j] <= pivot, [i, right] >= pivot, and anything in
         * between equals the pivot and is in place. */
        if (target <= j)
            right = j;
        else if (target >= i)
            left = i;
        else
            return;
    }
}

static int add_node(ts_poi_index *index, uint32_t *number)
{
    if (index->n_nodes == index->nodes_cap) {
        size_t cap = index->nodes_cap ? index->nodes_cap * 2 : 64;
        kd_node *grown = realloc(index->nodes, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        index->nodes = grown;
        index->nodes_cap = cap;
    }
    memset(&index->nodes[index->n_nodes], 0, sizeof(kd_node));
    *number = (uint32_t)index->n_nodes++;
    return 0;
}

static int build(ts_poi_index *index, uint32_t lo, uint32_t hi,
                 uint32_t *number)
{
    if (add_node(index, number) != 0)
        return -1;
    kd_node *node = &index->nodes[*number];
    node->lo = lo;
    node->hi = hi;
    if (hi - lo <= LEAF_POINTS)
        return 0;
    double low[3], high[3];
    for (int a = 0; a < 3; a++)
        low[a] = high[a] = index->xyz[index->order[lo]][a];
    for (uint32_t i = lo + 1; i < hi; i++)
        for (int a = 0; a < 3; a++) {
            double v = index->xyz[index->order[i]][a];
            if (v < low[a])
                low[a] = v;
            if (v > high[a])
                high[a] = v;
        }
    int axis = 0;
    for (int a = 1; a < 3; a++)
        if (high[a] - low[a] > high[axis] - low[axis])
            axis = a;
    uint32_t mid = lo + (hi - lo) / 2;
    select_nth(index->xyz, index->order, lo, hi, mid, axis);
    double split = index->xyz[index->order[mid]][axis];
    uint32_t left, right;
    if (build(index, lo, mid, &left) != 0 || build(index, mid, hi, &right) != 0)
        return -1;
    /* Re-fetch: the node array may have moved while children were added. */
    node = &index->nodes[*number];
    node->axis = axis;
    node->split = split;
    node->left = left;
    node->right = right;
    return 0;
}

ts_poi_index *ts_poi_index_new(const double *lat, const double *lon, size_t n)
{
    if (n == 0 || n > UINT32_MAX)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!ts_geo_valid(lat[i], lon[i]))
            return NULL;
    ts_poi_index *index = calloc(1, sizeof *index);
    if (index == NULL)
        return NULL;
    index->n = n;
    index->xyz = malloc(n * sizeof *index->xyz);
    index->order = malloc(n * sizeof *index->order);
    if (index->xyz == NULL || index->order == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        ts_poi_unit_vector(lat[i], lon[i], index->xyz[i]);
        index->order[i] = (uint32_t)i;
    }
    uint32_t root;
    if (build(index, 0, (uint32_t)n, &root) != 0)
        goto fail;
    return index;
fail:
    ts_poi_index_free(index);
    return NULL;
}

void ts_poi_index_free(ts_poi_index *index)
{
    if (index == NULL)
        return;
    free(index->xyz);
    free(index->order);
    free(index->nodes);
    free(index);
}

size_t ts_poi_index_size(const ts_poi_index *index)
{
    return index->n;
}

/* The best `found` candidates so far, sorted by (distance, index). */
typedef struct candidates {
    size_t k, found;
    uint32_t *id;
    double *d2;
} candidates;

static int before(double d2_a, uint32_t id_a, double d2_b, uint32_t id_b)
{
    return d2_a < d2_b || (d2_a == d2_b && id_a < id_b);
}

static void offer(candidates *c, double d2, uint32_t id)
{
    if (c->found == c->k &&
        !before(d2, id, c->d2[c->k - 1], c->id[c->k - 1]))
        return;
    size_t at = c->found < c->k ? c->found++ : c->k - 1;
    while (at > 0 && before(d2, id, c->d2[at - 1], c->id[at - 1])) {
        c->d2[at] = c->d2[at - 1];
        c->id[at] = c->id[at - 1];
        at--;
    }
    c->d2[at] = d2;
    c->id[at] = id;
}

static void search(const ts_poi_index *index, uint32_t number,
                   const double q[3], candidates *c)
{
    const kd_node *node = &index->nodes[number];
    if (node->left == 0) {
        for (uint32_t i = node->lo; i < node->hi; i++) {
            uint32_t id = index->order[i];
            offer(c, ts_poi_chord2(q, index->xyz[id]), id);
        }
        return;
    }
    double diff = q[node->axis] - node->split;
    uint32_t near = diff <= 0.0 ? node->left : node->right;
    uint32_t far = diff <= 0.0 ? node->right : node->left;
    search(index, near, q, c);
    /* Every point beyond the split plane is at least |diff| away, and the
     * rounded distance keeps that order (subtraction, squaring and adding
     * non-negative terms are monotone), so this prunes nothing that could
     * enter. Equal distances are still visited: a lower index may win. */
    if (c->found < c->k || diff * diff <= c->d2[c->k - 1])
        search(index, far, q, c);
}

size_t ts_poi_index_nearest(const ts_poi_index *index, double lat, double lon,
                            size_t k, uint32_t *nearest)
{
    if (k > index->n)
        k = index->n;
    if (k == 0)
        return 0;
    double stack_d2[STACK_CANDIDATES];
    double *d2 = k <= STACK_CANDIDATES ? stack_d2 : malloc(k * sizeof *d2);
    if (d2 == NULL)
        return 0;
    candidates c = { .k = k, .found = 0, .id = nearest, .d2 = d2 };
    double q[3];
    ts_poi_unit_vector(lat, lon, q);
    search(index, 0, q, &c);
    if (d2 != stack_d2)
        free(d2);
    return c.found;
}
