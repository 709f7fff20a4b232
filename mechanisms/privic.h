/* PRIVIC (Biswas & Palamidessi): the Blahut-Arimoto elastic mechanism on
 * a grid, its channel re-fitted each cycle to the IBU estimate of the
 * profile's own published reports (mechanisms/population.h). A report is
 * the centre of a cell drawn from the true cell's row; it is 2 beta metric
 * private between cell centres, whatever the channel version. On true
 * points that is not geo-indistinguishability: two points d apart get
 * e^{eps_point d + eps_floor}, eps_floor = eps_point times the cell
 * diagonal, which every report publishes and the ledger's per-metre spend
 * carries (docs/privic.md). */
#ifndef TRACESAN_MECHANISMS_PRIVIC_H
#define TRACESAN_MECHANISMS_PRIVIC_H

#include "mechanisms/mechanism.h"

extern const ts_mechanism_ops ts_privic_ops;

#endif
