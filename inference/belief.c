#include "inference/belief.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct ts_belief_workspace {
    ts_markov_workspace product;
    uint32_t capacity;
    ts_belief_entry *candidates; /* cell_count: a product or the initial */
    ts_belief_entry *ranked;     /* max(cell_count, capacity): rank order */
    uint32_t *in_cells;          /* capacity: product input */
    double *in_weights;          /* capacity: product input, log weights */
};


size_t ts_belief_bytes(uint32_t capacity)
{
    if (capacity == 0 || capacity > TS_BELIEF_MAX_CAPACITY)
        return 0;
    return sizeof(ts_belief) + (size_t)capacity * sizeof(ts_belief_entry);
}

int ts_belief_init(ts_belief *b, uint32_t capacity)
{
    if (ts_belief_bytes(capacity) == 0)
        return -1;
    b->capacity = capacity;
    b->count = 0;
    return 0;
}

double ts_belief_prob(const ts_belief *b, uint32_t cell)
{
    size_t lo = 0, hi = b->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->entry[mid].cell < cell)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->count && b->entry[lo].cell == cell ? b->entry[lo].prob
                                                      : 0.0;
}

int ts_belief_params_check(const ts_belief_params *p, char *err,
                           size_t errlen)
{
    if (!(p->prune_threshold >= 0.0 && p->prune_threshold < 1.0)) {
        snprintf(err, errlen, "prune threshold must be in [0, 1)");
        return -1;
    }
    if (p->max_ticks > TS_BELIEF_MAX_TICKS) {
        snprintf(err, errlen, "max_ticks must be at most %u (a release "
                 "makes up to max_ticks products with the model)",
                 TS_BELIEF_MAX_TICKS);
        return -1;
    }
    return 0;
}

ts_belief_workspace *ts_belief_workspace_new(uint32_t cell_count,
                                             uint32_t capacity)
{
    if (cell_count == 0 || ts_belief_bytes(capacity) == 0)
        return NULL;
    ts_belief_workspace *ws = calloc(1, sizeof *ws);
    if (ws == NULL)
        return NULL;
    if (ts_markov_workspace_init(&ws->product, cell_count) != 0) {
        free(ws);
        return NULL;
    }
    ws->capacity = capacity;
    ws->candidates = malloc((size_t)cell_count * sizeof *ws->candidates);
    /* The delta-set copies a belief of up to `capacity` cells, pruning up
     * to cell_count candidates. */
    size_t rank_room = cell_count > capacity ? cell_count : capacity;
    ws->ranked = malloc(rank_room * sizeof *ws->ranked);
    ws->in_cells = malloc((size_t)capacity * sizeof *ws->in_cells);
    ws->in_weights = malloc((size_t)capacity * sizeof *ws->in_weights);
    if (!ws->candidates || !ws->ranked || !ws->in_cells || !ws->in_weights) {
        ts_belief_workspace_free(ws);
        return NULL;
    }
    return ws;
}

void ts_belief_workspace_free(ts_belief_workspace *ws)
{
    if (ws == NULL)
        return;
    ts_markov_workspace_free(&ws->product);
    free(ws->candidates);
    free(ws->ranked);
    free(ws->in_cells);
    free(ws->in_weights);
    free(ws);
}

/* ------------------------------------------------------------- ordering */

/* The rank order of the delta-set and of capacity pruning: more probable
 * first, then lower cell index. A strict total order for distinct cells,
 * so the selected sets do not depend on the algorithm that selects them. */
static inline int ranks_before(const ts_belief_entry *a,
                               const ts_belief_entry *b)
{
    return a->prob > b->prob || (a->prob == b->prob && a->cell < b->cell);
}

static inline void swap_entries(ts_belief_entry *a, ts_belief_entry *b)
{
    ts_belief_entry t = *a;
    *a = *b;
    *b = t;
}

static inline int cell_before(const ts_belief_entry *a,
                              const ts_belief_entry *b)
{
    return a->cell < b->cell;
}

/* One quicksort for the two orders (rank, cell), instantiated per order so
 * that the comparison inlines. partition_<order> partitions v[lo, hi)
 * (hi - lo >= 2) around a median-of-three pivot and returns p with
 * v[lo, p) before v[p] and v[p + 1, hi) after it; sort_<order>_all sorts:
 * quicksort on the smaller side recursively and the larger iteratively
 * (depth <= log2 n), insertion sort below 16 elements. Both orders are
 * strict on distinct cells, so the result is unique. */
#define DEFINE_ENTRY_ORDER(order, before)                                    \
    static size_t partition_##order(ts_belief_entry *v, size_t lo,          \
                                    size_t hi)                               \
    {                                                                        \
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;                      \
        if (before(&v[mid], &v[lo]))                                         \
            swap_entries(&v[mid], &v[lo]);                                   \
        if (before(&v[last], &v[lo]))                                        \
            swap_entries(&v[last], &v[lo]);                                  \
        if (before(&v[mid], &v[last]))                                       \
            swap_entries(&v[mid], &v[last]);                                 \
        ts_belief_entry pivot = v[last];                                     \
        size_t store = lo;                                                   \
        for (size_t i = lo; i < last; i++)                                   \
            if (before(&v[i], &pivot))                                       \
                swap_entries(&v[i], &v[store++]);                            \
        swap_entries(&v[store], &v[last]);                                   \
        return store;                                                        \
    }                                                                        \
    static void sort_##order##_all(ts_belief_entry *v, size_t n)             \
    {                                                                        \
        while (n > 16) {                                                     \
            size_t store = partition_##order(v, 0, n);                       \
            size_t left = store, right = n - store - 1;                      \
            if (left < right) {                                              \
                sort_##order##_all(v, left);                                 \
                v += store + 1;                                              \
                n = right;                                                   \
            } else {                                                         \
                sort_##order##_all(v + store + 1, right);                    \
                n = left;                                                    \
            }                                                                \
        }                                                                    \
        for (size_t i = 1; i < n; i++) {                                     \
            ts_belief_entry e = v[i];                                        \
            size_t j = i;                                                    \
            while (j > 0 && before(&e, &v[j - 1])) {                         \
                v[j] = v[j - 1];                                             \
                j--;                                                         \
            }                                                                \
            v[j] = e;                                                        \
        }                                                                    \
    }

DEFINE_ENTRY_ORDER(rank, ranks_before)
DEFINE_ENTRY_ORDER(cell, cell_before)

/* Rearranges v so that v[0..k) are the k top-ranked entries (in no
 * particular order). Quickselect. */
static void select_top(ts_belief_entry *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1 && k > lo && k < hi) {
        size_t store = partition_rank(v, lo, hi);
        if (store == k || store + 1 == k)
            return;
        if (k < store)
            hi = store;
        else
            lo = store + 1;
    }
}

/* Sorts by ascending cell. */
static void sort_by_cell(ts_belief_entry *v, size_t n)
{
    /* Products, posteriors and resets already arrive in cell order. */
    size_t sorted = 1;
    while (sorted < n && v[sorted - 1].cell < v[sorted].cell)
        sorted++;
    if (sorted < n)
        sort_cell_all(v, n);
}

/* --------------------------------------------------------------- pruning */

/* Prunes the n candidates (distinct cells, weights >= 0) into the belief;
 * see the header comment for the rule. `scratch` has room for n entries.
 * Returns the kept fraction of the mass or -1 (belief emptied) when there
 * is no positive finite mass. */
static double prune_into(ts_belief *b, ts_belief_entry *cand, size_t n,
                         double threshold, ts_belief_entry *scratch)
{
    double total = 0.0;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!(cand[i].prob >= 0.0)) { /* NaN or negative */
            b->count = 0;
            return -1.0;
        }
        total += cand[i].prob;
        if (cand[i].prob > 0.0 &&
            (best == SIZE_MAX || ranks_before(&cand[i], &cand[best])))
            best = i;
    }
    if (!(total > 0.0) || !isfinite(total)) {
        b->count = 0;
        return -1.0;
    }
    double cut = threshold * total;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (cand[i].prob > 0.0 && (cand[i].prob >= cut || i == best)) {
            cand[i].reserved = 0;
            cand[kept++] = cand[i];
        }
    }
    if (kept > b->capacity) {
        /* The capacity-th entry in rank order, found on a copy so that the
         * candidates keep their (usually cell) order: the order is strict,
         * so exactly `capacity` entries rank at or before it. */
        memcpy(scratch, cand, kept * sizeof *cand);
        select_top(scratch, kept, b->capacity);
        ts_belief_entry last = scratch[0];
        for (size_t i = 1; i < b->capacity; i++)
            if (ranks_before(&last, &scratch[i]))
                last = scratch[i];
        size_t top = 0;
        for (size_t i = 0; i < kept; i++)
            if (!ranks_before(&last, &cand[i]))
                cand[top++] = cand[i];
        kept = top;
    }
    sort_by_cell(cand, kept);
    double mass = 0.0;
    for (size_t i = 0; i < kept; i++)
        mass += cand[i].prob;
    double scale = 1.0 / mass;
    for (size_t i = 0; i < kept; i++) {
        b->entry[i] = cand[i];
        b->entry[i].prob *= scale;
    }
    b->count = (uint32_t)kept;
    return fmin(1.0, mass / total);
}

double ts_belief_assign(ts_belief *b, const uint32_t *cells,
                        const double *weights, size_t n,
                        double prune_threshold, ts_belief_workspace *ws)
{
    if (n > ws->product.cell_count || b->capacity > ws->capacity ||
        !(prune_threshold >= 0.0 && prune_threshold < 1.0)) {
        b->count = 0;
        return -1.0;
    }
    for (size_t i = 0; i < n; i++) {
        if (cells[i] >= ws->product.cell_count) {
            b->count = 0;
            return -1.0;
        }
        ws->candidates[i] =
            (ts_belief_entry){.cell = cells[i], .reserved = 0,
                              .prob = weights[i]};
    }
    return prune_into(b, ws->candidates, n, prune_threshold, ws->ranked);
}

/* ------------------------------------------------------------------ prior */

int ts_belief_reset(ts_belief *b, const ts_markov *m,
                    const ts_belief_params *params, ts_belief_workspace *ws,
                    double *certified)
{
    if (m->cell_count > ws->product.cell_count ||
        b->capacity > ws->capacity) {
        b->count = 0;
        return TS_BELIEF_ERROR;
    }
    size_t n = 0;
    for (uint32_t c = 0; c < m->cell_count; c++)
        if (m->initial[c] > 0.0)
            ws->candidates[n++] =
                (ts_belief_entry){.cell = c, .reserved = 0,
                                  .prob = m->initial[c]};
    double kept = prune_into(b, ws->candidates, n, params->prune_threshold,
                             ws->ranked);
    if (kept < 0.0)
        return TS_BELIEF_ERROR;
    /* The initial distribution sums to 1; what pruning dropped is no
     * longer certified to be anywhere. */
    if (certified != NULL)
        *certified = kept;
    return TS_BELIEF_RESET;
}

/* The product's cells as candidates, in cell order when that is cheap:
 * the touched list of a sparse product is in first-touch order, but its
 * cells form a compact patch around the belief, so scanning the
 * accumulator between the smallest and largest touched cell lists them
 * sorted in far less time than sorting them. Cells that were touched yet
 * hold exactly 0 are skipped, as pruning would drop them. */
static size_t collect_product(const ts_markov_workspace *pw,
                              ts_belief_entry *cand)
{
    size_t touched = pw->touched_count, n = 0;
    if (touched == 0)
        return 0;
    uint32_t lo = pw->touched[0], hi = pw->touched[0];
    for (size_t i = 1; i < touched; i++) {
        uint32_t c = pw->touched[i];
        lo = c < lo ? c : lo;
        hi = c > hi ? c : hi;
    }
    if ((size_t)(hi - lo) < 16 * touched) {
        for (uint32_t c = lo; c <= hi; c++)
            if (pw->acc[c] != 0.0)
                cand[n++] = (ts_belief_entry){.cell = c, .reserved = 0,
                                              .prob = pw->acc[c]};
        return n;
    }
    for (size_t i = 0; i < touched; i++) {
        uint32_t c = pw->touched[i];
        cand[n++] = (ts_belief_entry){.cell = c, .reserved = 0,
                                      .prob = pw->acc[c]};
    }
    return n;
}

int ts_belief_predict(ts_belief *b, const ts_markov *m, uint64_t ticks,
                      const ts_belief_params *params,
                      ts_belief_workspace *ws, double *certified)
{
    if (b->capacity > ws->capacity || b->count > b->capacity) {
        b->count = 0;
        return TS_BELIEF_ERROR;
    }
    /* The cap holds even for parameters that skipped the check. */
    if (b->count == 0 || ticks > params->max_ticks ||
        ticks > TS_BELIEF_MAX_TICKS)
        return ts_belief_reset(b, m, params, ws, certified);
    ts_markov_workspace *pw = &ws->product;
    for (uint64_t step = 0; step < ticks; step++) {
        uint32_t n = b->count;
        for (uint32_t i = 0; i < n; i++) {
            ws->in_cells[i] = b->entry[i].cell;
            ws->in_weights[i] = b->entry[i].prob;
        }
        if (ts_markov_step(m, ws->in_cells, ws->in_weights, n, pw) != 0) {
            b->count = 0;
            return TS_BELIEF_ERROR;
        }
        size_t n_out = collect_product(pw, ws->candidates);
        ts_markov_workspace_clear(pw);
        /* M's rows sum to 1, so the product keeps the belief's mass and
         * the certified lower bound shrinks exactly by what pruning
         * dropped (relative to the product's own total, which absorbs
         * the rounding of the rows). */
        double kept = prune_into(b, ws->candidates, n_out,
                                 params->prune_threshold, ws->ranked);
        if (kept < 0.0)
            return TS_BELIEF_ERROR;
        if (certified != NULL)
            *certified *= kept;
    }
    return TS_BELIEF_UPDATED;
}

int ts_belief_mix_initial(ts_belief *b, const ts_markov *m, double weight,
                          const ts_belief_params *params,
                          ts_belief_workspace *ws, double *certified)
{
    if (b->capacity > ws->capacity || b->count > b->capacity ||
        m->cell_count > ws->product.cell_count ||
        !(weight >= 0.0 && weight <= 1.0)) {
        b->count = 0;
        return TS_BELIEF_ERROR;
    }
    if (b->count == 0 || weight == 0.0)
        return ts_belief_reset(b, m, params, ws, certified);
    if (weight == 1.0)
        return TS_BELIEF_UPDATED;
    /* Merge the (cell-sorted) belief with the dense initial distribution. */
    size_t n = 0, k = 0;
    for (uint32_t c = 0; c < m->cell_count; c++) {
        double mass = (1.0 - weight) * m->initial[c];
        if (k < b->count && b->entry[k].cell == c)
            mass += weight * b->entry[k++].prob;
        if (mass > 0.0)
            ws->candidates[n++] =
                (ts_belief_entry){.cell = c, .reserved = 0, .prob = mass};
    }
    if (k != b->count) { /* a cell beyond the model: corrupt */
        b->count = 0;
        return TS_BELIEF_ERROR;
    }
    /* c r <= p and the initial part is exact, so
     * w c r + (1 - w) initial >= c (w r + (1 - w) initial): the
     * certificate carries over, times what pruning keeps. */
    double kept = prune_into(b, ws->candidates, n, params->prune_threshold,
                             ws->ranked);
    if (kept < 0.0)
        return TS_BELIEF_ERROR;
    if (certified != NULL)
        *certified *= kept;
    return TS_BELIEF_UPDATED;
}

/* ----------------------------------------------------------- delta set */

size_t ts_belief_delta_set(const ts_belief *b, double delta, double certified,
                           uint32_t *cells, ts_belief_workspace *ws)
{
    size_t n = b->count;
    if (n == 0 || n > ws->capacity || !(delta >= 0.0 && delta < 1.0) ||
        !(certified > 0.0 && certified <= 1.0))
        return 0;
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += b->entry[i].prob;
    /* The set's mass under the exact prior is at least certified times its
     * share of the stored belief; that must reach 1 - delta. */
    double share = (1.0 - delta) / certified;
    if (share > 1.0 + TS_BELIEF_DELTA_SLACK)
        return 0;
    double target = share * total - TS_BELIEF_DELTA_SLACK * total;

    /* The set is the shortest prefix of the rank order whose running sum,
     * added in that order, reaches the target. Sorting only a prefix that
     * surely contains it: partitions split v into blocks that are in rank
     * order relative to each other; a block boundary whose prefix mass
     * clears the target by more than any rounding of a sum of n terms
     * (n u total < 1e-9 total for n <= 2^20) bounds the set. Should the
     * sorted prefix still fall short, the rest is sorted and the scan goes
     * on, so the result never depends on that margin. */
    ts_belief_entry *v = ws->ranked;
    memcpy(v, b->entry, n * sizeof *v);
    double sure = target + 1e-9 * total, before = 0.0;
    size_t lo = 0, hi = n;
    while (hi - lo > 32) {
        size_t p = partition_rank(v, lo, hi);
        double mass = v[p].prob;
        for (size_t i = lo; i < p; i++)
            mass += v[i].prob;
        if (before + mass >= sure) {
            hi = p + 1;
        } else {
            before += mass;
            lo = p + 1;
        }
    }
    sort_rank_all(v, hi);
    size_t taken = 0;
    double mass = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (i == hi)
            sort_rank_all(v + hi, n - hi);
        cells[taken++] = v[i].cell;
        mass += v[i].prob;
        if (mass >= target)
            break;
    }
    return taken;
}

int ts_delta_set_contains(const uint32_t *cells, size_t n, uint32_t cell)
{
    /* No early exit: the time taken must not tell the cell's rank. */
    unsigned found = 0;
    for (size_t i = 0; i < n; i++)
        found |= (unsigned)(cells[i] == cell);
    return (int)found;
}

int ts_delta_set_surrogate(const ts_grid *grid, const uint32_t *cells,
                           size_t n, ts_vec2 truth, uint32_t *surrogate)
{
    if (n == 0 || !isfinite(truth.x) || !isfinite(truth.y))
        return -1;
    uint32_t best = 0;
    double best_d2 = INFINITY;
    for (size_t i = 0; i < n; i++) {
        ts_vec2 c = ts_grid_cell_centre(grid, cells[i]);
        double dx = c.x - truth.x, dy = c.y - truth.y;
        double d2 = dx * dx + dy * dy;
        /* Masks, not branches (a ternary here compiles to jumps), so the
         * instructions per cell are the same wherever the truth lies. */
        unsigned better = (unsigned)(d2 < best_d2) |
                          ((unsigned)(d2 == best_d2) &
                           (unsigned)(cells[i] < best));
        uint32_t mask = 0u - (uint32_t)better;
        uint64_t wide_mask = 0u - (uint64_t)better;
        best = (best & ~mask) | (cells[i] & mask);
        uint64_t d2_bits, best_bits;
        memcpy(&d2_bits, &d2, sizeof d2_bits);
        memcpy(&best_bits, &best_d2, sizeof best_bits);
        best_bits = (best_bits & ~wide_mask) | (d2_bits & wide_mask);
        memcpy(&best_d2, &best_bits, sizeof best_d2);
    }
    *surrogate = best;
    return 0;
}

/* -------------------------------------------------------------- posterior */

int ts_belief_posterior(ts_belief *b, const ts_grid *grid, ts_vec2 z,
                        ts_log_emission_fn log_emission,
                        const void *emission_ctx,
                        const ts_belief_params *params,
                        ts_belief_workspace *ws, double *certified)
{
    return ts_belief_posterior_at(b, grid, NULL, z, log_emission,
                                  emission_ctx, params, ws, certified);
}

int ts_belief_posterior_at(ts_belief *b, const ts_grid *grid,
                           const ts_vec2 *where, ts_vec2 z,
                           ts_log_emission_fn log_emission,
                           const void *emission_ctx,
                           const ts_belief_params *params,
                           ts_belief_workspace *ws, double *certified)
{
    size_t n = b->count;
    if (n == 0 || n > ws->capacity || n > ws->product.cell_count ||
        !isfinite(z.x) || !isfinite(z.y))
        return TS_BELIEF_ERROR;
    /* Work in logs: likelihoods of far cells underflow, and only ratios
     * matter, so everything is scaled by the largest term. */
    double *logw = ws->in_weights;
    double top = -INFINITY, top_ll = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const ts_belief_entry *e = &b->entry[i];
        if (e->cell >= grid->cell_count)
            return TS_BELIEF_ERROR;
        double ll = log_emission(emission_ctx, z,
                                 where != NULL
                                     ? where[i]
                                     : ts_grid_cell_centre(grid, e->cell));
        if (isnan(ll) || ll == INFINITY)
            return TS_BELIEF_ERROR;
        logw[i] = log(e->prob) + ll;
        if (logw[i] > top)
            top = logw[i];
        if (ll > top_ll)
            top_ll = ll;
    }
    double c = certified != NULL ? *certified : 1.0;
    if (!(c >= 0.0 && c <= 1.0))
        return TS_BELIEF_ERROR;
    if (top == -INFINITY) {
        /* No stored cell explains z. With the whole prior certified the
         * model calls z impossible and the prior stands; otherwise the
         * exact posterior lies in the uncertified mass, and nothing of the
         * stored belief is certified any more. */
        if (c < 1.0 && certified != NULL)
            *certified = 0.0;
        return TS_BELIEF_UNINFORMATIVE;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        ws->candidates[i] = (ts_belief_entry){
            .cell = b->entry[i].cell, .reserved = 0,
            .prob = exp(logw[i] - top)};
        sum += ws->candidates[i].prob;
    }
    /* Exact posterior p+(i) = p(i) L(i) / sum_j p(j) L(j), with the stored
     * belief a lower bound c r <= p. The numerator is at least c r(i) L(i);
     * the denominator is at most c S + (1 - c) L_max, S = sum r L, L_max
     * the largest likelihood of any cell, bounded by the emission at s = z
     * (both noises' densities peak at zero displacement). So the
     * normalised r L / S is certified with factor c S / (c S + (1-c) L_max),
     * computed in logs: 1 / (1 + e^a), a = log((1-c) L_max) - log(c S). */
    double factor = 1.0;
    if (c < 1.0) {
        double log_peak = log_emission(emission_ctx, z, z);
        if (isnan(log_peak) || log_peak == INFINITY)
            return TS_BELIEF_ERROR;
        if (c == 0.0) {
            factor = 0.0;
        } else {
            double log_s = top + log(sum);
            double a = log1p(-c) + fmax(log_peak, top_ll) - log(c) - log_s;
            factor = 1.0 / (1.0 + exp(a));
        }
    }
    double kept = prune_into(b, ws->candidates, n, params->prune_threshold,
                             ws->ranked);
    if (kept < 0.0)
        return TS_BELIEF_ERROR;
    if (certified != NULL)
        *certified = factor * kept;
    return TS_BELIEF_UPDATED;
}
