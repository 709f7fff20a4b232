/* The geo-ind MI-optimal channel by a first-order method (in progress:
 * for now the LP reference). */
#include "inference/mi_solver.h"

int mi_geoind_solve(mi_solver *s, const ts_mi_params *params, double *C,
                    ts_mi_result *result, char *err, size_t errlen)
{
    return mi_geoind_lp_solve(s, params, C, result, err, errlen);
}
