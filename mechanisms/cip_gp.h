/* cip-gp: the Gaussian mechanism calibrated for Conditional Inferential
 * Privacy against Gaussian-process priors (Meehan & Chaudhuri, Location
 * Trace Privacy Under Conditional Priors; docs/cip.md).
 *
 * Each point gets N(0, sigma_z^2 I) noise in metres on the plane. A user's
 * points form traces of at most window_points points; a trace's sigma_z is
 * the smallest that keeps the worst-case Renyi loss L* (inference/cip.h) of
 * the trace at most epsilon against every RBF prior with length scale up to
 * length_scale_max_s, computed from the public timestamps the user has just
 * shown. Every point spends the increase of L* it causes on the trace's
 * actual timestamps, so a trace spends exactly its loss (<= epsilon), and a
 * point that would push the trace past epsilon starts a new trace instead.
 * The guarantee is CIP (a Renyi divergence bound against GP conditional
 * priors), not epsilon-DP and not geo-indistinguishability. */
#ifndef TRACESAN_MECHANISMS_CIP_GP_H
#define TRACESAN_MECHANISMS_CIP_GP_H

#include "mechanisms/mechanism.h"

/* Largest window_points: a point costs an eigendecomposition of up to this
 * size (bench/bench_cip_gp). */
#define TS_CIP_GP_MAX_WINDOW 64

extern const ts_mechanism_ops ts_cip_gp_ops;

#endif
