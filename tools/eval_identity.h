/* tracesan eval --identity: the identity adversary of Romanelli et al.
 * (CSF 2020, Section IV-B; inference/identity.h) on a joined trace
 * (tools/eval_join.h): per cell size, the held-out Bayes error of a MAP
 * guess of the user from the binned released point, the plug-in I(U; Z)
 * and the mean distortion. Only joined rows count (a rejected row
 * published nothing to guess from). The rows are split by
 * ts_identity_split into the adversary's training rows and the held-out
 * rows it is scored on, the split printed on stderr. */
#ifndef TRACESAN_TOOLS_EVAL_IDENTITY_H
#define TRACESAN_TOOLS_EVAL_IDENTITY_H

#include <stddef.h>

#include "tools/eval_join.h"

#define TS_EVAL_MAX_IDENTITY_CELLS 32

/* The grid cell sides (metres) the adversary bins released points on. */
typedef struct ts_eval_identity_cells {
    double side_m[TS_EVAL_MAX_IDENTITY_CELLS];
    size_t n;
} ts_eval_identity_cells;

/* --cell-m's handler for the tools' option tables (tools/options.h):
 * appends a side to the ts_eval_identity_cells at dest. */
const char *ts_eval_take_cell(void *dest, const char *value);

/* The paper's cells: 50, 100, 200 and 400 m. */
void ts_eval_identity_defaults(ts_eval_identity_cells *cells);

/* Prints cell_m,bayes_error,mi_bits,mean_distortion_m,users,rows on
 * stdout, one line per cell. Returns -1 (reported) on an error. */
int ts_eval_identity_report(const ts_eval_data *data,
                            const ts_eval_identity_cells *cells);

#endif
