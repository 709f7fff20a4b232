#include "inference/learn.h"
#include "inference/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Marks a break in the resampled sequence (gap, outside, new user). */
#define BREAK UINT32_MAX

void ts_learned_free(ts_learned *l)
{
    free(l->row_start);
    free(l->col);
    free(l->prob);
    free(l->initial);
    memset(l, 0, sizeof *l);
}

int ts_learn_params_check(const ts_learn_params *p, char *err, size_t errlen)
{
    if (!isfinite(p->tick_s) || !(p->tick_s >= TS_MARKOV_MIN_TICK_S))
        return ts_fail(err, errlen, "tick must be finite and at least %g s",
                       TS_MARKOV_MIN_TICK_S);
    if (!isfinite(p->max_speed_mps) || !(p->max_speed_mps > 0.0))
        return ts_fail(err, errlen, "maximum speed must be positive and finite");
    if (!isfinite(p->max_gap_s) || !(p->max_gap_s > 0.0))
        return ts_fail(err, errlen, "maximum gap must be positive and finite");
    /* Every tick boundary inside a gap becomes a position. */
    if (p->max_gap_s / p->tick_s > TS_LEARN_MAX_GAP_TICKS)
        return ts_fail(err, errlen,
                       "maximum gap of %g s is %.3g ticks: one gap would be "
                       "resampled into more than %.0f positions; lower it or "
                       "raise the tick", p->max_gap_s,
                       p->max_gap_s / p->tick_s, TS_LEARN_MAX_GAP_TICKS);
    if (!isfinite(p->alpha) || p->alpha < 0.0)
        return ts_fail(err, errlen, "alpha must be finite and >= 0");
    if (p->smoothing != TS_LEARN_SMOOTH_UNIFORM &&
        p->smoothing != TS_LEARN_SMOOTH_DISPLACEMENT)
        return ts_fail(err, errlen, "unknown smoothing");
    if (!isfinite(p->backoff) || p->backoff < 0.0)
        return ts_fail(err, errlen, "backoff must be finite and >= 0");
    return 0;
}

/* ----------------------------------------------------------- reachability */

/* Closest distance between two squares of side cell whose centres are
 * (dc, dr) cells apart is cell * |(max(0, |dc| - 1), max(0, |dr| - 1))|. */
static int offset_reachable(long dc, long dr, double cell_m, double reach_m)
{
    double gx = (double)(labs(dc) > 0 ? labs(dc) - 1 : 0);
    double gy = (double)(labs(dr) > 0 ? labs(dr) - 1 : 0);
    return cell_m * sqrt(gx * gx + gy * gy) <= reach_m;
}

int ts_learn_reachable(const ts_grid *g, double reach_m, uint32_t from,
                       uint32_t to)
{
    long dc = (long)ts_grid_cell_col(g, to) - (long)ts_grid_cell_col(g, from);
    long dr = (long)ts_grid_cell_row(g, to) - (long)ts_grid_cell_row(g, from);
    return offset_reachable(dc, dr, g->cell_m, reach_m);
}

typedef struct offset {
    long dr, dc;
} offset;

/* Reachable offsets in (dr, dc) order, so that the cells of a row come out
 * in ascending index order. Offsets beyond the grid are useless and are
 * not generated. */
static offset *reachable_offsets(const ts_grid *g, double reach_m,
                                 size_t *count)
{
    double span = ceil(reach_m / g->cell_m) + 1.0;
    long rmax = (long)fmin(span, (double)g->rows - 1);
    long cmax = (long)fmin(span, (double)g->cols - 1);
    size_t room = (size_t)(2 * rmax + 1) * (size_t)(2 * cmax + 1);
    offset *v = malloc(room * sizeof *v);
    if (v == NULL)
        return NULL;
    size_t n = 0;
    for (long dr = -rmax; dr <= rmax; dr++)
        for (long dc = -cmax; dc <= cmax; dc++)
            if (offset_reachable(dc, dr, g->cell_m, reach_m))
                v[n++] = (offset){dr, dc};
    *count = n;
    return v;
}

/* ------------------------------------------------------------- resampling */

typedef struct sequence {
    uint32_t *cell;           /* cells and BREAK marks */
    size_t count, cap;
    size_t *user_start;       /* user_count + 1 offsets into cell[] */
} sequence;

/* 0, -1 when memory ran out, -2 past TS_LEARN_MAX_POSITIONS. */
static int push(sequence *s, uint32_t cell)
{
    if (cell == BREAK && s->count > 0 && s->cell[s->count - 1] == BREAK)
        return 0;
    if (s->count == TS_LEARN_MAX_POSITIONS)
        return -2;
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4096;
        uint32_t *c = realloc(s->cell, cap * sizeof *c);
        if (c == NULL)
            return -1;
        s->cell = c;
        s->cap = cap;
    }
    s->cell[s->count++] = cell;
    return 0;
}

/* A fix whose tick index would not fit 64 bits (|ts_s / tick| >= 2^62,
 * about 1.5e14 years at the finest tick) is as unusable as a NaN. */
static int point_usable(const ts_learn_point *p, double tick)
{
    return isfinite(p->ts_s) && isfinite(p->lat) && isfinite(p->lon) &&
           fabs(p->ts_s / tick) < 0x1p62;
}

static int emit_position(const ts_grid *g, sequence *s, double lat,
                         double lon, ts_learn_stats *st)
{
    uint32_t cell;
    if (ts_grid_cell_of_latlon(g, lat, lon, &cell) == 0) {
        st->positions++;
        return push(s, cell);
    }
    st->outside++;
    return push(s, BREAK);
}

static int on_boundary(double ts_s, double tick)
{
    return (double)(int64_t)floor(ts_s / tick) * tick == ts_s;
}

/* The error of a failed push (or emit_position). */
static int push_failed(int rc, char *err, size_t errlen)
{
    if (rc == -2)
        return ts_fail(err, errlen,
                       "the traces resample into more than %zu positions: "
                       "raise the tick, lower the maximum gap or learn from "
                       "fewer points", TS_LEARN_MAX_POSITIONS);
    return ts_fail(err, errlen, "out of memory");
}

/* Resamples every user's trace; s->user_start[u] .. [u + 1] is user u's
 * part, which starts with a break so nothing links two users. */
static int resample(const ts_grid *g, const ts_learn_params *p,
                    const ts_learn_point *pts, size_t n, uint32_t user_count,
                    sequence *s, ts_learn_stats *st, char *err,
                    size_t errlen)
{
    s->user_start = calloc((size_t)user_count + 1, sizeof *s->user_start);
    if (s->user_start == NULL)
        return ts_fail(err, errlen, "out of memory");
    const double tick = p->tick_s;
    size_t i = 0;
    int rc;
    for (uint32_t u = 0; u < user_count; u++) {
        if ((rc = push(s, BREAK)) != 0)
            return push_failed(rc, err, errlen);
        s->user_start[u] = s->count - 1;
        size_t before = st->positions;
        const ts_learn_point *prev = NULL;
        for (; i < n && pts[i].user == u; i++) {
            const ts_learn_point *cur = &pts[i];
            st->points++;
            if (!point_usable(cur, tick)) {
                st->skipped++;
                continue;
            }
            if (prev != NULL && cur->ts_s < prev->ts_s)
                return ts_fail(err, errlen,
                            "points are not sorted by time (index %zu)", i);
            if (prev != NULL && cur->ts_s > prev->ts_s) {
                if (cur->ts_s - prev->ts_s > p->max_gap_s) {
                    /* A fix exactly on a boundary still gives its
                     * position; the boundaries inside the gap do not. */
                    st->gaps++;
                    if ((on_boundary(prev->ts_s, tick) &&
                         (rc = emit_position(g, s, prev->lat, prev->lon,
                                             st)) != 0) ||
                        (rc = push(s, BREAK)) != 0)
                        return push_failed(rc, err, errlen);
                } else {
                    /* Boundaries in [prev, cur); one at cur itself is the
                     * next interval's (or the final check's). At most
                     * max_gap_s / tick + 1 of them (params check). */
                    double span = cur->ts_s - prev->ts_s;
                    for (int64_t k = (int64_t)ceil(prev->ts_s / tick);
                         (double)k * tick < cur->ts_s; k++) {
                        double f = ((double)k * tick - prev->ts_s) / span;
                        if ((rc = emit_position(
                                 g, s, prev->lat + f * (cur->lat - prev->lat),
                                 prev->lon + f * (cur->lon - prev->lon),
                                 st)) != 0)
                            return push_failed(rc, err, errlen);
                    }
                }
            }
            prev = cur;
        }
        if (prev != NULL && on_boundary(prev->ts_s, tick) &&
            (rc = emit_position(g, s, prev->lat, prev->lon, st)) != 0)
            return push_failed(rc, err, errlen);
        if (st->positions > before)
            st->users++;
        if (i < n && pts[i].user < u + 1 && pts[i].user != u)
            return ts_fail(err, errlen,
                        "points are not sorted by user (index %zu)", i);
    }
    if (i < n)
        return ts_fail(err, errlen,
                    i > 0 && pts[i].user < pts[i - 1].user
                        ? "points are not sorted by user (index %zu)"
                        : "user index out of range (index %zu)",
                    i);
    s->user_start[user_count] = s->count;
    return 0;
}

/* ----------------------------------------------------------------- build */

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Builds a model from the sequence part [begin, end). fallback: rows and
 * initial prior of a personal model, NULL for the popular one. Sets
 * out->transitions = 0 and allocates nothing when the part has no
 * transition and fallback is given. */
static int build(const ts_grid *g, const ts_learn_params *p,
                 const offset *offs, size_t n_offs, const double *kernel,
                 const uint32_t *seq,
                 size_t begin, size_t end, const ts_markov *fallback,
                 ts_learned *out, ts_learn_stats *st, char *err,
                 size_t errlen)
{
    memset(out, 0, sizeof *out);
    const uint32_t cells = g->cell_count;
    const double reach = p->max_speed_mps * p->tick_s;
    const double alpha = p->alpha;

    size_t n_keys = 0;
    for (size_t i = begin + 1; i < end; i++)
        if (seq[i] != BREAK && seq[i - 1] != BREAK)
            n_keys++;
    uint64_t *keys = malloc((n_keys ? n_keys : 1) * sizeof *keys);
    double *visits = calloc(cells, sizeof *visits);
    uint32_t *row_counts = calloc(cells, sizeof *row_counts);
    int rc = -1;
    if (keys == NULL || visits == NULL || row_counts == NULL) {
        ts_fail(err, errlen, "out of memory");
        goto done;
    }
    n_keys = 0;
    for (size_t i = begin; i < end; i++) {
        if (seq[i] == BREAK)
            continue;
        visits[seq[i]] += 1.0;
        out->visits++;
        if (i == begin || seq[i - 1] == BREAK)
            continue;
        if (!ts_learn_reachable(g, reach, seq[i - 1], seq[i])) {
            if (st != NULL)
                st->unreachable++;
            continue;
        }
        keys[n_keys++] = ((uint64_t)seq[i - 1] << 32) | seq[i];
    }
    out->transitions = n_keys;
    if (st != NULL)
        st->transitions += n_keys;
    if (fallback != NULL && n_keys == 0) {
        rc = 0;
        goto done;
    }
    if (fallback == NULL && out->visits == 0 && alpha == 0.0) {
        ts_fail(err, errlen, "no position inside the region");
        goto done;
    }
    qsort(keys, n_keys, sizeof *keys, compare_u64);
    /* Distinct destinations per row, for the alpha == 0 row lengths. */
    for (size_t k = 0; k < n_keys; k++)
        if (k == 0 || keys[k] != keys[k - 1])
            row_counts[keys[k] >> 32]++;

    /* Pass 1: row lengths. */
    out->row_start = malloc(((size_t)cells + 1) * sizeof *out->row_start);
    if (out->row_start == NULL) {
        ts_fail(err, errlen, "out of memory");
        goto done;
    }
    size_t k = 0;
    uint64_t nnz = 0;
    out->row_start[0] = 0;
    for (uint32_t i = 0; i < cells; i++) {
        long row = (long)ts_grid_cell_row(g, i), col = (long)ts_grid_cell_col(g, i);
        uint64_t reachable = 0;
        for (size_t o = 0; o < n_offs; o++) {
            long r = row + offs[o].dr, c = col + offs[o].dc;
            if (r >= 0 && r < (long)g->rows && c >= 0 && c < (long)g->cols)
                reachable++;
        }
        int has_data = k < n_keys && (keys[k] >> 32) == i;
        while (k < n_keys && (keys[k] >> 32) == i)
            k++;
        uint64_t len;
        if (has_data)
            len = alpha > 0.0 ? reachable : row_counts[i];
        else if (fallback != NULL)
            len = 0; /* the fallback's row */
        else
            len = alpha > 0.0 ? reachable : 1;
        nnz += len;
        if (nnz > TS_LEARN_MAX_NNZ) {
            ts_fail(err, errlen,
                 "model would have more than %llu transitions: lower the "
                 "maximum speed or use larger cells",
                 (unsigned long long)TS_LEARN_MAX_NNZ);
            goto done;
        }
        out->row_start[i + 1] = nnz;
    }
    out->col = malloc((nnz ? nnz : 1) * sizeof *out->col);
    out->prob = malloc((nnz ? nnz : 1) * sizeof *out->prob);
    out->initial = malloc((size_t)cells * sizeof *out->initial);
    if (out->col == NULL || out->prob == NULL || out->initial == NULL) {
        ts_fail(err, errlen, "out of memory");
        goto done;
    }

    /* Pass 2: values. Row i's keys are keys[k .. k_end), sorted by
     * destination, and all reachable, so they merge with the reachable
     * cells (ascending) in one sweep. */
    k = 0;
    for (uint32_t i = 0; i < cells; i++) {
        uint64_t e = out->row_start[i];
        size_t k_end = k;
        while (k_end < n_keys && (keys[k_end] >> 32) == i)
            k_end++;
        double n_i = (double)(k_end - k);
        if (k_end == k && fallback != NULL)
            continue;
        int self_loop = k_end == k; /* no data: one pseudo-count of staying */
        if (self_loop)
            n_i = 1.0;
        long row = (long)ts_grid_cell_row(g, i), col = (long)ts_grid_cell_col(g, i);
        double reachable = (double)(out->row_start[i + 1] - out->row_start[i]);
        if (alpha > 0.0) {
            /* Pseudo-counts: alpha on every reachable cell, or (with a
             * kernel) the kernel clipped to the grid and renormalised,
             * weighted by the back-off; a row without data is then the
             * kernel alone. */
            double clipped = 1.0, weight = alpha;
            double denom = n_i + alpha * reachable;
            if (kernel != NULL) {
                clipped = 0.0;
                for (size_t o = 0; o < n_offs; o++) {
                    long r = row + offs[o].dr, c = col + offs[o].dc;
                    if (r >= 0 && r < (long)g->rows && c >= 0 &&
                        c < (long)g->cols)
                        clipped += kernel[o];
                }
                weight = self_loop ? 1.0 : p->backoff;
                denom = self_loop ? 1.0 : n_i + p->backoff;
            }
            for (size_t o = 0; o < n_offs; o++) {
                long r = row + offs[o].dr, c = col + offs[o].dc;
                if (r < 0 || r >= (long)g->rows || c < 0 || c >= (long)g->cols)
                    continue;
                uint32_t j = (uint32_t)(r * (long)g->cols + c);
                double count = 0.0;
                while (k < k_end && (uint32_t)keys[k] == j) {
                    count += 1.0;
                    k++;
                }
                if (kernel == NULL && self_loop && j == i)
                    count = 1.0;
                double pseudo = kernel != NULL ? weight * kernel[o] / clipped
                                               : alpha;
                out->col[e] = j;
                out->prob[e] = (count + pseudo) / denom;
                e++;
            }
        } else if (self_loop) {
            out->col[e] = i;
            out->prob[e] = 1.0;
            e++;
        } else {
            while (k < k_end) {
                uint32_t j = (uint32_t)keys[k];
                double count = 0.0;
                while (k < k_end && (uint32_t)keys[k] == j) {
                    count += 1.0;
                    k++;
                }
                out->col[e] = j;
                out->prob[e] = count / n_i;
                e++;
            }
        }
        if (alpha > 0.0 && k != k_end) {
            ts_fail(err, errlen, "internal error: row %u has an unreachable count",
                 i);
            goto done;
        }
        k = k_end;
        if (e != out->row_start[i + 1]) {
            ts_fail(err, errlen, "internal error: row %u length mismatch", i);
            goto done;
        }
    }

    /* Initial distribution. */
    double total = (double)out->visits + alpha * (double)cells;
    for (uint32_t c = 0; c < cells; c++) {
        double prior = fallback != NULL ? fallback->initial[c] * (double)cells
                                        : 1.0;
        out->initial[c] = (visits[c] + alpha * prior) / total;
    }

    out->markov.cell_count = cells;
    out->markov.tick_s = p->tick_s;
    out->markov.nnz = nnz;
    out->markov.row_start = out->row_start;
    out->markov.col = out->col;
    out->markov.prob = out->prob;
    out->markov.initial = out->initial;
    out->markov.fallback = fallback;
    char why[200];
    if (ts_markov_validate(&out->markov, why, sizeof why) != 0) {
        ts_fail(err, errlen, "internal error: learned model invalid: %s", why);
        goto done;
    }
    rc = 0;
done:
    if (rc != 0 || out->markov.cell_count == 0) {
        uint64_t t = out->transitions, v = out->visits;
        ts_learned_free(out);
        if (rc == 0) {
            out->transitions = t;
            out->visits = v;
        }
    }
    free(keys);
    free(visits);
    free(row_counts);
    return rc;
}

static uint32_t user_count_of(const ts_learn_point *pts, size_t n)
{
    uint32_t users = 0;
    for (size_t i = 0; i < n; i++)
        if (pts[i].user >= users)
            users = pts[i].user + 1;
    return users;
}

/* The displacement kernel of TS_LEARN_SMOOTH_DISPLACEMENT over the
 * reachable offsets: g(o) = (h(o) + alpha) / (H + alpha |O|), h the
 * reachable transitions of the whole sequence by offset. NULL on
 * allocation failure. */
static double *displacement_kernel(const ts_grid *g, const ts_learn_params *p,
                                   const offset *offs, size_t n_offs,
                                   const sequence *s)
{
    long rmax = 0, cmax = 0;
    for (size_t o = 0; o < n_offs; o++) {
        rmax = labs(offs[o].dr) > rmax ? labs(offs[o].dr) : rmax;
        cmax = labs(offs[o].dc) > cmax ? labs(offs[o].dc) : cmax;
    }
    size_t width = (size_t)(2 * cmax + 1);
    size_t room = (size_t)(2 * rmax + 1) * width;
    long *index = malloc(room * sizeof *index);
    double *kernel = calloc(n_offs ? n_offs : 1, sizeof *kernel);
    if (index == NULL || kernel == NULL) {
        free(index);
        free(kernel);
        return NULL;
    }
    for (size_t i = 0; i < room; i++)
        index[i] = -1;
    for (size_t o = 0; o < n_offs; o++)
        index[(size_t)(offs[o].dr + rmax) * width + (size_t)(offs[o].dc + cmax)] =
            (long)o;
    double total = 0.0;
    for (size_t i = 1; i < s->count; i++) {
        uint32_t from = s->cell[i - 1], to = s->cell[i];
        if (from == BREAK || to == BREAK)
            continue;
        long dr = (long)ts_grid_cell_row(g, to) - (long)ts_grid_cell_row(g, from);
        long dc = (long)ts_grid_cell_col(g, to) - (long)ts_grid_cell_col(g, from);
        if (labs(dr) > rmax || labs(dc) > cmax)
            continue;
        long o = index[(size_t)(dr + rmax) * width + (size_t)(dc + cmax)];
        if (o < 0)
            continue;
        kernel[o] += 1.0;
        total += 1.0;
    }
    for (size_t o = 0; o < n_offs; o++)
        kernel[o] = (kernel[o] + p->alpha) /
                    (total + p->alpha * (double)n_offs);
    free(index);
    return kernel;
}

static int prepare(const ts_grid *g, const ts_learn_params *p,
                   const ts_learn_point *pts, size_t n, uint32_t user_count,
                   sequence *s, offset **offs, size_t *n_offs,
                   ts_learn_stats *st, char *err, size_t errlen)
{
    if (ts_learn_params_check(p, err, errlen) != 0)
        return -1;
    *offs = reachable_offsets(g, p->max_speed_mps * p->tick_s, n_offs);
    if (*offs == NULL)
        return ts_fail(err, errlen, "out of memory");
    st->reachable = (uint32_t)*n_offs;
    if ((double)*n_offs * (double)g->cell_count > (double)TS_LEARN_MAX_NNZ &&
        p->alpha > 0.0)
        return ts_fail(err, errlen,
                    "model would have about %.0f transitions (%zu reachable "
                    "cells per row): lower the maximum speed or use larger "
                    "cells",
                    (double)*n_offs * (double)g->cell_count, *n_offs);
    return resample(g, p, pts, n, user_count, s, st, err, errlen);
}

int ts_learn_popular(const ts_grid *g, const ts_learn_params *p,
                     const ts_learn_point *pts, size_t n, ts_learned *out,
                     ts_learn_stats *stats, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    ts_learn_stats st;
    memset(&st, 0, sizeof st);
    sequence s = {0};
    offset *offs = NULL;
    size_t n_offs = 0;
    double *kernel = NULL;
    int rc = prepare(g, p, pts, n, user_count_of(pts, n), &s, &offs, &n_offs,
                     &st, err, errlen);
    if (rc == 0 && p->smoothing == TS_LEARN_SMOOTH_DISPLACEMENT &&
        (kernel = displacement_kernel(g, p, offs, n_offs, &s)) == NULL)
        rc = ts_fail(err, errlen, "out of memory");
    if (rc == 0)
        rc = build(g, p, offs, n_offs, kernel, s.cell, 0, s.count, NULL, out,
                   &st, err, errlen);
    if (stats != NULL)
        *stats = st;
    free(kernel);
    free(offs);
    free(s.cell);
    free(s.user_start);
    return rc;
}

int ts_learn_personal(const ts_grid *g, const ts_learn_params *p,
                      const ts_learn_point *pts, size_t n,
                      uint32_t user_count, const ts_markov *popular,
                      ts_learned *out, char *err, size_t errlen)
{
    for (uint32_t u = 0; u < user_count; u++)
        memset(&out[u], 0, sizeof out[u]);
    if (popular->cell_count != g->cell_count || popular->tick_s != p->tick_s)
        return ts_fail(err, errlen,
                    "popular model does not match the grid and tick");
    ts_learn_stats st;
    memset(&st, 0, sizeof st);
    sequence s = {0};
    offset *offs = NULL;
    size_t n_offs = 0;
    double *kernel = NULL;
    int rc = prepare(g, p, pts, n, user_count, &s, &offs, &n_offs, &st, err,
                     errlen);
    if (rc == 0 && p->smoothing == TS_LEARN_SMOOTH_DISPLACEMENT &&
        (kernel = displacement_kernel(g, p, offs, n_offs, &s)) == NULL)
        rc = ts_fail(err, errlen, "out of memory");
    for (uint32_t u = 0; rc == 0 && u < user_count; u++)
        rc = build(g, p, offs, n_offs, kernel, s.cell, s.user_start[u],
                   s.user_start[u + 1], popular, &out[u], NULL, err, errlen);
    free(kernel);
    if (rc != 0)
        for (uint32_t u = 0; u < user_count; u++)
            ts_learned_free(&out[u]);
    free(offs);
    free(s.cell);
    free(s.user_start);
    return rc;
}

/* ------------------------------------------------------------ held out */

/* M[from][to], through the fallback for an empty row; 0 when absent. */
static double transition_prob(const ts_markov *m, uint32_t from, uint32_t to)
{
    if (m->row_start[from] == m->row_start[from + 1] && m->fallback != NULL)
        m = m->fallback;
    uint64_t lo = m->row_start[from], hi = m->row_start[from + 1];
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (m->col[mid] < to)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->row_start[from + 1] && m->col[lo] == to ? m->prob[lo]
                                                           : 0.0;
}

int ts_learn_fit_model(const ts_grid *g, const ts_learn_params *p,
                       const ts_markov *m, const ts_learn_point *pts,
                       size_t n, ts_learn_fit *fit, char *err, size_t errlen)
{
    memset(fit, 0, sizeof *fit);
    if (ts_learn_params_check(p, err, errlen) != 0)
        return -1;
    if (m->cell_count != g->cell_count || m->tick_s != p->tick_s)
        return ts_fail(err, errlen, "model does not match the grid and tick");
    ts_learn_stats st;
    memset(&st, 0, sizeof st);
    sequence s = {0};
    int rc = resample(g, p, pts, n, user_count_of(pts, n), &s, &st, err,
                      errlen);
    for (size_t i = 0; rc == 0 && i < s.count; i++) {
        uint32_t to = s.cell[i];
        if (to == BREAK)
            continue;
        fit->visits++;
        fit->initial_log_lik += log(m->initial[to]);
        if (i == 0 || s.cell[i - 1] == BREAK)
            continue;
        fit->transitions++;
        double prob = transition_prob(m, s.cell[i - 1], to);
        if (prob > 0.0)
            fit->log_lik += log(prob);
        else
            fit->impossible++;
    }
    free(s.cell);
    free(s.user_start);
    return rc;
}
