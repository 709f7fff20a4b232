/* cip-gp: the Gaussian mechanism calibrated for Conditional Inferential
 * Privacy against Gaussian-process priors (Meehan & Chaudhuri, Location
 * Trace Privacy Under Conditional Priors; docs/cip.md).
 *
 * Each point gets N(0, sigma_z^2 I) noise in metres on the plane. A user's
 * points form traces of at most window_points points; a trace's sigma_z is
 * the smallest whose certified bound (inference/cip.h,
 * ts_cip_min_sigma_z_sup) on the worst-case Renyi loss L* over every RBF
 * length scale l in (0, length_scale_max_s] is at most epsilon, for the
 * cadence the user has just shown (public timestamps). On the actual
 * timestamps, a trace is charged the running maximum of its prefixes'
 * certified bounds, each point spending its increment; a point that would
 * take the bound past epsilon starts a new trace instead.
 *
 * What that bounds: the secret subsequence S of one trace, as a whole
 * (pairs of values of all of S within radius_m per point). Not a
 * subsequence of S, not several traces together (the GP prior correlates
 * them, and the ledger's sum is only a count of per-trace bounds). The
 * guarantee is CIP, not epsilon-DP and not geo-indistinguishability. */
#ifndef TRACESAN_MECHANISMS_CIP_GP_H
#define TRACESAN_MECHANISMS_CIP_GP_H

#include "mechanisms/mechanism.h"

/* Largest window_points: a point costs a certified search over length
 * scales on matrices of up to this size, about 1.8 ms of CPU at 10, 4.8 ms
 * at 32 and 18 ms at 64 on a steady 30 s cadence (docs/cip.md, "Cost"). */
#define TS_CIP_GP_MAX_WINDOW 64

extern const ts_mechanism_ops ts_cip_gp_ops;

#endif
