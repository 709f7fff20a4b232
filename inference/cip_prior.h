/* The Gaussian-process prior of CIP (Meehan & Chaudhuri, Section 3.2) and
 * the largest trace it is computed on: below both the loss at one length
 * scale (inference/cip.h) and the blocks of its correlation matrix
 * (inference/cip_blocks.h), which share them. */
#ifndef TRACESAN_INFERENCE_CIP_PRIOR_H
#define TRACESAN_INFERENCE_CIP_PRIOR_H

/* Largest trace the calibration accepts: the matrices are dense d x d. */
#define TS_CIP_MAX_POINTS 2048

typedef struct ts_cip_prior {
    double sigma_x;      /* prior standard deviation per axis, in
                          * [1e-150, 1e150] (it is squared) */
    double length_scale; /* l, in the timestamps' unit; > 0 unless
                          * independent; l_max for the sup */
    int independent;     /* Sigma = sigma_x^2 I */
} ts_cip_prior;

#endif
