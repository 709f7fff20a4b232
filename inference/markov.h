/* The Markov mobility model: a row-stochastic transition matrix M over the
 * cells of a grid for one model tick of tick_s seconds, plus an initial
 * distribution (Xiao & Xiong, CCS 2015, Section 2.2: p_t = p_{t-1} M).
 *
 * M is stored in compressed sparse rows: row i (moves out of cell i) has
 * its entries at positions row_start[i] .. row_start[i + 1] - 1 of col[]
 * (destination cells, strictly ascending) and prob[] (probabilities that
 * sum to 1). The struct is a read-only VIEW: the arrays belong to whoever
 * built it (a memory-mapped model file, inference/model_file.h, or a
 * learner, inference/learn.h) and are shared by every user of the model.
 *
 * Personal models are sparse overrides: a model with a `fallback` may leave
 * rows empty, and an empty row means "use the fallback's row" (a user's
 * model only holds the rows where that user has data; the popular model
 * fills in the rest). A model without fallback must have every row.
 *
 * Time. One step of M is one tick. Updates arrive at irregular times; the
 * number of steps between two releases at times t1 <= t2 is
 *     k = floor(t2 / tick_s) - floor(t1 / tick_s),
 * the number of tick boundaries (multiples of tick_s since the Unix epoch)
 * crossed. The learner resamples traces at the same boundaries, so a user
 * who reports every 0.4 ticks moves by one step 40 % of the time, as the
 * model expects, instead of never (round-down of the gap) or always.
 * Timestamps are published, so k is public.
 */
#ifndef TRACESAN_INFERENCE_MARKOV_H
#define TRACESAN_INFERENCE_MARKOV_H

#include <stddef.h>
#include <stdint.h>

/* Rows and the initial distribution must sum to 1 within this. */
#define TS_MARKOV_SUM_TOLERANCE 1e-9
/* Shortest tick, seconds: timestamps are in milliseconds, so a finer tick
 * resolves nothing, and tick indices of any timestamp then fit 64 bits. */
#define TS_MARKOV_MIN_TICK_S 1e-3

typedef struct ts_markov {
    uint32_t cell_count;
    double tick_s;
    uint64_t nnz;
    const uint64_t *row_start;   /* cell_count + 1 entries */
    const uint32_t *col;         /* nnz entries */
    const double *prob;          /* nnz entries */
    const double *initial;       /* cell_count entries */
    const struct ts_markov *fallback; /* rows left empty here; NULL: none */
} ts_markov;

/* Checks the structure and the numbers: row_start[0] = 0, non-decreasing,
 * row_start[cell_count] = nnz; columns in range and strictly ascending per
 * row; probabilities finite in [0, 1]; every row and the initial
 * distribution sum to 1 within TS_MARKOV_SUM_TOLERANCE; an empty row only
 * with a fallback (a user must go somewhere), which must have the same
 * cells and tick and no fallback itself; tick_s finite and at least
 * TS_MARKOV_MIN_TICK_S. -1
 * with a message naming the row otherwise. O(cell_count + nnz); the
 * fallback is not validated again. */
int ts_markov_validate(const ts_markov *model, char *err, size_t errlen);

/* Index of the tick interval containing ts_ms: floor(ts_ms / tick),
 * clamped to +-2^61 so that the difference of two fits int64. Only a tick
 * below TS_MARKOV_MIN_TICK_S or a timestamp near the end of int64 gets
 * there, where the conversion would overflow. */
int64_t ts_markov_tick_index(double tick_s, int64_t ts_ms);

/* Ticks between two release times (see the header comment); -1 when
 * later_ms < earlier_ms or tick_s is not positive and finite. */
int64_t ts_markov_ticks_between(double tick_s, int64_t earlier_ms,
                                int64_t later_ms);

/* Scratch for sparse vector-matrix products, sized for models of up to
 * cell_count cells: a dense accumulator, kept all-zero between products,
 * and the list of cells a product touched. One per thread. */
typedef struct ts_markov_workspace {
    uint32_t cell_count;
    double *acc;           /* acc[cell]: value of the product at cell */
    uint8_t *seen;         /* seen[cell]: cell is in touched[] */
    uint32_t *touched;     /* cells with an entry, in first-touch order */
    uint32_t touched_count;
} ts_markov_workspace;

int ts_markov_workspace_init(ts_markov_workspace *ws, uint32_t cell_count);
void ts_markov_workspace_free(ts_markov_workspace *ws);

/* One product y = x M for the sparse row vector x (n entries: distinct
 * cells[] below model->cell_count with weights[]); empty rows of M are
 * read from its fallback. The result is left in
 * ws: y[c] = ws->acc[c] for the ws->touched_count cells of ws->touched
 * (every cell with a non-zero value is listed; the order of the list is
 * unspecified). Rows are visited in the order of cells[] and columns in
 * ascending order, so the values are a deterministic function of the
 * input. The caller reads the result and then calls
 * ts_markov_workspace_clear. -1 when the model is larger than the
 * workspace or a cell is out of range (ws left clear). */
int ts_markov_step(const ts_markov *model, const uint32_t *cells,
                   const double *weights, size_t n, ts_markov_workspace *ws);

/* Zeroes the touched entries of the accumulator: O(touched). */
void ts_markov_workspace_clear(ts_markov_workspace *ws);

#endif
