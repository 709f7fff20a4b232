/* mi-channel: releases through a fixed channel file written by `tracesan
 * optimize` (inference/channel_file.h), the channel on a grid that
 * minimises the information I(U;Z) a report gives about who sent it
 * under a distortion bound (Romanelli et al., CSF 2020). A report is the
 * centre of a cell drawn from the true cell's row.
 *
 * The guarantee depends on the file (docs/mi_channel.md): with a geo-ind
 * epsilon the reports are epsilon metric-private between cell centres,
 * and on true points d apart e^{epsilon d + eps_floor}, eps_floor =
 * epsilon times the cell diagonal (published on every report; the ledger
 * books epsilon per metre of distance plus diagonal); without one it is
 * information-theoretic only (I(U;Z), the Bayes error of guessing the
 * user), NOT differential privacy, and releases are counted against a
 * per-window cap instead of spending budget. */
#ifndef TRACESAN_MECHANISMS_MI_CHANNEL_H
#define TRACESAN_MECHANISMS_MI_CHANNEL_H

#include "mechanisms/mechanism.h"

extern const ts_mechanism_ops ts_mi_channel_ops;

#endif
