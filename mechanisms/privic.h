/* PRIVIC (Biswas & Palamidessi): the Blahut-Arimoto elastic mechanism on
 * a grid, its channel re-fitted each cycle to the IBU estimate of the
 * profile's own published reports (mechanisms/population.h). A report is
 * the centre of a cell drawn from the true cell's row; it is
 * 2 beta-geo-indistinguishable between cell centres, whatever the channel
 * version (docs/privic.md). */
#ifndef TRACESAN_MECHANISMS_PRIVIC_H
#define TRACESAN_MECHANISMS_PRIVIC_H

#include "mechanisms/mechanism.h"

extern const ts_mechanism_ops ts_privic_ops;

#endif
