/* The identity adversary of Romanelli, Chatzikokolakis, Palamidessi &
 * Piantanida (CSF 2020, Section IV-B): how well can someone who sees a
 * sanitized report Z guess which user U sent it?
 *
 * The paper's estimator bins the reports on a square grid of the report
 * space and takes, per cell j, the maximum a-posteriori guess
 * argmax_u P(u | j) from the counts (its Eqs. 25-26); the Bayes error is
 * the probability that this guess is wrong (Eq. 27):
 *
 *   B = 1 - sum_j P(j) max_u P(u | j).
 *
 * Computed on the very rows the counts came from (resubstitution), B is
 * biased towards 0: the paper notes that once every cell holds at most one
 * hit the estimate is 0 for any mechanism, however noisy. So here the MAP
 * table is fitted on one set of rows (the adversary's training rows) and
 * its error is measured on a disjoint, held-out set (the evaluation rows):
 * an honest misclassification rate of a classifier that never saw them.
 * The resubstitution figure of Eq. 27 is returned as well, to show the gap.
 *
 * Cells. Column c and row r of the grid are floor((x - x0) / s) and
 * floor((y - y0) / s), (x0, y0) the south-west corner of the bounding box
 * of every report given (training and evaluation), s the cell side. The
 * grid is never materialised: only occupied cells exist, so a continent-
 * wide spread of noisy reports costs nothing at a 50 m cell.
 *
 * MAP rule. In a cell with training rows: the user with most training rows
 * there; ties go to the smallest user index, so the result is a function
 * of the data only. In a cell without training rows: the prior guess,
 * the user with most training rows overall (same tie rule), which is what
 * the MAP rule gives when the cell says nothing.
 *
 * Mutual information. The plug-in estimate of I(U; Z) in bits on the
 * binned reports of both sets pooled (more rows, less bias):
 *
 *   I = sum_{j,u} n_ju / n * log2(n_ju * n / (n_j * n_u)).
 *
 * The plug-in estimate is biased upwards by about
 * (k - 1)(C - 1) / (2 n ln 2) bits for k users and C occupied cells
 * (Miller-Madow), so an identity-free channel reads slightly above 0 on a
 * fine grid; mi_bias_bits returns that first-order bias to compare with.
 *
 * Pure: no I/O, no globals; allocation failure is reported as an error. */
#ifndef TRACESAN_INFERENCE_IDENTITY_H
#define TRACESAN_INFERENCE_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "geometry/plane.h"

/* One sanitized report: who sent it and where it landed (metres of a
 * plane). */
typedef struct ts_identity_obs {
    uint32_t user;              /* below the users count */
    ts_vec2 z;
} ts_identity_obs;

typedef struct ts_identity_result {
    double bayes_error;         /* held-out misclassification rate, [0, 1] */
    double resubstitution_error; /* the paper's Eq. 27 on both sets pooled */
    double mi_bits;             /* plug-in I(U; Z), both sets pooled, >= 0 */
    double mi_bias_bits;        /* (k' - 1)(C - 1) / (2 n ln 2), see above */
    size_t users;               /* users with at least one row (k') */
    size_t train_rows, eval_rows;
    size_t train_cells;         /* cells holding training rows */
    size_t pooled_cells;        /* cells holding any row (C) */
    size_t eval_unseen;         /* evaluation rows in cells without training
                                 * rows, guessed from the prior */
    uint32_t prior_guess;       /* the prior's argmax user */
} ts_identity_result;

/* The estimator above for a cell side of cell_m metres. users bounds the
 * user indices (every obs.user < users). Both sets must be non-empty (the
 * prior needs a training row, the rate an evaluation row). -1 with err on
 * bad input (a NULL array, an empty set, a user out of range, a
 * non-finite point, cell_m not positive and finite, a bounding box wider
 * than 2^31 cells) or when memory runs out. */
int ts_identity_estimate(const ts_identity_obs *train, size_t n_train,
                         const ts_identity_obs *eval, size_t n_eval,
                         size_t users, double cell_m,
                         ts_identity_result *result, char *err,
                         size_t errlen);

/* The split of a trace's rows into the adversary's training rows (0) and
 * held-out evaluation rows (1): half each in expectation, decided by a
 * 64-bit hash of the row's key, the user name bytes and the timestamp in
 * ms. A hash rather than alternate rows because it depends on the row
 * alone: the same row falls on the same side whatever the file order,
 * whatever other rows are present, whatever the cell size or the
 * sanitizer's seed, so runs of different mechanisms on the same trace are
 * judged on the same held-out rows; and it does not follow the time
 * structure of a trace the way taking every other row would. Rows sharing
 * a key share a side: when a trace repeats each true row to draw several
 * reports of it (the paper's several "hits" per location), the adversary
 * is never scored on a report whose twin it was fitted on. */
int ts_identity_split(const char *user, size_t user_len, int64_t ts_ms);

#endif
