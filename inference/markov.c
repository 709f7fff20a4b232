#include "inference/markov.h"
#include "inference/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ts_markov_validate(const ts_markov *m, char *err, size_t errlen)
{
    if (!isfinite(m->tick_s) || !(m->tick_s >= TS_MARKOV_MIN_TICK_S))
        return ts_fail(err, errlen, "tick must be finite and at least %g s",
                       TS_MARKOV_MIN_TICK_S);
    if (m->cell_count == 0)
        return ts_fail(err, errlen, "model has no cells");
    if (m->fallback != NULL &&
        (m->fallback->cell_count != m->cell_count ||
         m->fallback->tick_s != m->tick_s || m->fallback->fallback != NULL))
        return ts_fail(err, errlen,
                    "fallback model has other cells, another tick or a "
                    "fallback itself");
    if (m->row_start[0] != 0 || m->row_start[m->cell_count] != m->nnz)
        return ts_fail(err, errlen,
                    "row index does not span the %llu entries",
                    (unsigned long long)m->nnz);
    for (uint32_t i = 0; i < m->cell_count; i++) {
        uint64_t begin = m->row_start[i], end = m->row_start[i + 1];
        if (end < begin || end > m->nnz)
            return ts_fail(err, errlen, "row %u: bad row index", i);
        if (end == begin && m->fallback == NULL)
            return ts_fail(err, errlen, "row %u has no entries", i);
        if (end == begin)
            continue;
        double sum = 0.0;
        for (uint64_t e = begin; e < end; e++) {
            if (m->col[e] >= m->cell_count)
                return ts_fail(err, errlen, "row %u: column %u out of range", i,
                            m->col[e]);
            if (e > begin && m->col[e] <= m->col[e - 1])
                return ts_fail(err, errlen,
                            "row %u: columns not strictly ascending at %u", i,
                            m->col[e]);
            double p = m->prob[e];
            if (!isfinite(p) || p < 0.0 || p > 1.0)
                return ts_fail(err, errlen,
                            "row %u: probability of column %u is not in [0, 1]",
                            i, m->col[e]);
            sum += p;
        }
        if (fabs(sum - 1.0) > TS_MARKOV_SUM_TOLERANCE)
            return ts_fail(err, errlen, "row %u does not sum to 1 (%.17g)",
                           i, sum);
    }
    double sum = 0.0;
    for (uint32_t i = 0; i < m->cell_count; i++) {
        double p = m->initial[i];
        if (!isfinite(p) || p < 0.0 || p > 1.0)
            return ts_fail(err, errlen,
                        "initial probability of cell %u is not in [0, 1]", i);
        sum += p;
    }
    if (fabs(sum - 1.0) > TS_MARKOV_SUM_TOLERANCE)
        return ts_fail(err, errlen,
                    "initial distribution does not sum to 1 (%.17g)", sum);
    return 0;
}

int64_t ts_markov_tick_index(double tick_s, int64_t ts_ms)
{
    /* Exact for any ts_ms below 2^53 ms (285 000 years). Beyond the clamp
     * (markov.h) the conversion would be undefined. */
    const double limit = 0x1p61;
    double index = floor((double)ts_ms / (1000.0 * tick_s));
    if (!(index < limit))
        return isnan(index) ? 0 : (int64_t)limit;
    if (!(index > -limit))
        return -(int64_t)limit;
    return (int64_t)index;
}

int64_t ts_markov_ticks_between(double tick_s, int64_t earlier_ms,
                                int64_t later_ms)
{
    if (!isfinite(tick_s) || !(tick_s > 0.0) || later_ms < earlier_ms)
        return -1;
    return ts_markov_tick_index(tick_s, later_ms) -
           ts_markov_tick_index(tick_s, earlier_ms);
}

int ts_markov_workspace_init(ts_markov_workspace *ws, uint32_t cell_count)
{
    memset(ws, 0, sizeof *ws);
    if (cell_count == 0)
        return -1;
    ws->acc = calloc(cell_count, sizeof *ws->acc);
    ws->seen = calloc(cell_count, sizeof *ws->seen);
    ws->touched = malloc((size_t)cell_count * sizeof *ws->touched);
    if (ws->acc == NULL || ws->seen == NULL || ws->touched == NULL) {
        ts_markov_workspace_free(ws);
        return -1;
    }
    ws->cell_count = cell_count;
    return 0;
}

void ts_markov_workspace_free(ts_markov_workspace *ws)
{
    free(ws->acc);
    free(ws->seen);
    free(ws->touched);
    memset(ws, 0, sizeof *ws);
}

void ts_markov_workspace_clear(ts_markov_workspace *ws)
{
    for (uint32_t i = 0; i < ws->touched_count; i++) {
        uint32_t c = ws->touched[i];
        ws->acc[c] = 0.0;
        ws->seen[c] = 0;
    }
    ws->touched_count = 0;
}

static inline const ts_markov *rows_of(const ts_markov *m, uint32_t i)
{
    return m->row_start[i] == m->row_start[i + 1] && m->fallback != NULL
               ? m->fallback
               : m;
}

int ts_markov_step(const ts_markov *m, const uint32_t *cells,
                   const double *weights, size_t n, ts_markov_workspace *ws)
{
    ts_markov_workspace_clear(ws);
    if (m->cell_count > ws->cell_count)
        return -1;
    uint64_t work = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t i = cells[k];
        if (i >= m->cell_count)
            return -1;
        const ts_markov *rows = rows_of(m, i);
        work += rows->row_start[i + 1] - rows->row_start[i];
    }
    double *acc = ws->acc;
    uint32_t *touched = ws->touched;
    uint32_t count = 0;
    /* Tracking first touches costs a branch and a store per entry; when
     * the product touches a good part of the grid anyway, accumulating
     * blindly and scanning the accumulator once is cheaper (and lists the
     * cells in ascending order). Same sums in the same order either way:
     * only the listing differs. */
    if (work >= m->cell_count / 4) {
        for (size_t k = 0; k < n; k++) {
            uint32_t i = cells[k];
            const ts_markov *rows = rows_of(m, i);
            double w = weights[k];
            uint64_t end = rows->row_start[i + 1];
            for (uint64_t e = rows->row_start[i]; e < end; e++)
                acc[rows->col[e]] += w * rows->prob[e];
        }
        for (uint32_t c = 0; c < m->cell_count; c++)
            if (acc[c] != 0.0)
                touched[count++] = c;
        ws->touched_count = count;
        return 0;
    }
    uint8_t *seen = ws->seen;
    for (size_t k = 0; k < n; k++) {
        uint32_t i = cells[k];
        const ts_markov *rows = rows_of(m, i);
        double w = weights[k];
        uint64_t end = rows->row_start[i + 1];
        for (uint64_t e = rows->row_start[i]; e < end; e++) {
            uint32_t j = rows->col[e];
            if (!seen[j]) {
                seen[j] = 1;
                touched[count++] = j;
            }
            acc[j] += w * rows->prob[e];
        }
    }
    ws->touched_count = count;
    return 0;
}
