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
#include "tools/options.h"

/* The grid cell sides (metres) the adversary bins released points on:
 * the paper's, 50, 100, 200 and 400 m. */
void ts_eval_identity_defaults(ts_tool_numbers *cells);

/* Prints cell_m,bayes_error,mi_bits,mean_distortion_m,users,rows on
 * stdout, one line per cell. Returns -1 (reported) on an error. */
int ts_eval_identity_report(const ts_eval_data *data,
                            const ts_tool_numbers *cells);

#endif
