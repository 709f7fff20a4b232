#include "mechanisms/ba_channel.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The output marginal is kept at or above this. BA drives the marginal of
 * cells the prior rarely visits towards 0; once log c(y) nears the bottom
 * of the double range, exp() would flush the entries of the rows far from
 * y to 0 and leave those of the near rows positive, and an output that
 * only some inputs can reach is a leak. With c(y) >= 1e-30 and
 * beta d <= TS_BA_MAX_EXPONENT every entry stays above exp(-670), a normal
 * double. Any positive marginal gives a channel of the elastic form, so
 * the 2 beta d-privacy argument is unaffected. */
#define MARGINAL_FLOOR 1e-30

/* SQUAREM's step-backs per extrapolation: each halves alpha's distance
 * from -1 (the plain step); after this many the plain step is taken
 * outright. */
#define STEP_BACK_LIMIT 64u

static double distance_units(ts_vec2 a, ts_vec2 b, double unit_m)
{
    return hypot(a.x - b.x, a.y - b.y) / unit_m;
}

/* One BA step: the channel of the marginal `c`. kernel[x * n + y] =
 * exp(-beta d(x, y)) >= exp(-TS_BA_MAX_EXPONENT) and c >= MARGINAL_FLOOR,
 * so every product is a normal double and so is every entry. */
static void channel_of_marginal(const double *kernel, size_t n,
                                const double *c, double *channel)
{
    for (size_t x = 0; x < n; x++) {
        const double *k = kernel + x * n;
        double *row = channel + x * n;
        double sum = 0.0;
        for (size_t y = 0; y < n; y++) {
            row[y] = c[y] * k[y];
            sum += row[y];
        }
        double inverse = 1.0 / sum;
        for (size_t y = 0; y < n; y++)
            row[y] *= inverse;
    }
}

/* Clamps a marginal at the floor and rescales it to sum 1. */
static void normalise_marginal(double *c, size_t n)
{
    double sum = 0.0;
    for (size_t y = 0; y < n; y++) {
        if (!(c[y] >= MARGINAL_FLOOR))
            c[y] = MARGINAL_FLOOR;
        sum += c[y];
    }
    for (size_t y = 0; y < n; y++)
        c[y] /= sum;
}

/* sum_i a[i] b[i] with four partial sums: without -ffast-math the
 * compiler may not reorder one long sum, and the BA step is two n x n
 * products of these. */
static double dot(const double *a, const double *b, size_t n)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* One plain BA step without forming the channel: with Z = K c (each row's
 * normaliser), c'(y) = c(y) sum_x pi(x) K(x, y) / Z(x). The kernel is
 * symmetric, so both products read it row by row. Returns
 * max_y |c'(y) - c(y)|. */
static double ba_step(const double *kernel, size_t n, const double *prior,
                      const double *c, double *out, double *weight)
{
    for (size_t x = 0; x < n; x++) {
        weight[x] = prior[x] / dot(kernel + x * n, c, n);
    }
    for (size_t y = 0; y < n; y++) {
        out[y] = c[y] * dot(kernel + y * n, weight, n);
    }
    normalise_marginal(out, n);
    double change = 0.0;
    for (size_t y = 0; y < n; y++) {
        double delta = fabs(out[y] - c[y]);
        if (delta > change)
            change = delta;
    }
    return change;
}

int ts_ba_channel(const ts_vec2 *centres, size_t n, const double *prior,
                  const ts_ba_params *p, double *channel, double *marginal,
                  ts_ba_result *result, char *err, size_t errlen)
{
    memset(result, 0, sizeof *result);
    if (n == 0 || !(p->beta > 0.0) || !isfinite(p->beta) ||
        !(p->unit_m > 0.0) || !isfinite(p->unit_m) ||
        !(p->precision > 0.0) ||
        (p->max_iterations == 0 && p->plain_steps == 0)) {
        snprintf(err, errlen, "BA needs cells, beta > 0, a unit > 0, a "
                 "precision > 0 and at least one iteration");
        return -1;
    }
    double total = 0.0;
    for (size_t x = 0; x < n; x++) {
        if (!(prior[x] > 0.0) || !isfinite(prior[x])) {
            snprintf(err, errlen, "BA needs a full-support prior (cell %zu "
                     "has %g)", x, prior[x]);
            return -1;
        }
        total += prior[x];
    }
    if (fabs(total - 1.0) > 1e-9) {
        snprintf(err, errlen, "BA prior sums to %.12g, not 1", total);
        return -1;
    }
    double widest = 0.0;
    for (size_t x = 0; x < n; x++)
        for (size_t y = x + 1; y < n; y++) {
            double d = distance_units(centres[x], centres[y], p->unit_m);
            if (d > widest)
                widest = d;
        }
    if (!(p->beta * widest <= TS_BA_MAX_EXPONENT)) {
        snprintf(err, errlen, "beta %g over a grid %g units across exceeds "
                 "beta * diameter <= %g: lower beta or use a smaller grid",
                 p->beta, widest, TS_BA_MAX_EXPONENT);
        return -1;
    }

    double *kernel = malloc(n * n * sizeof *kernel);
    double *c = malloc(n * sizeof *c);
    double *next = malloc(n * sizeof *next);
    double *c1 = malloc(n * sizeof *c1);
    double *c2 = malloc(n * sizeof *c2);
    double *scratch = malloc(n * sizeof *scratch);
    if (kernel == NULL || c == NULL || next == NULL || c1 == NULL ||
        c2 == NULL || scratch == NULL) {
        free(kernel);
        free(c);
        free(next);
        free(c1);
        free(c2);
        free(scratch);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t x = 0; x < n; x++)
        for (size_t y = 0; y < n; y++)
            kernel[x * n + y] =
                exp(-p->beta * distance_units(centres[x], centres[y],
                                              p->unit_m));
    for (size_t y = 0; y < n; y++)
        c[y] = 1.0 / (double)n;
    /* Accelerated fixed-point iteration (SQUAREM, Varadhan & Roland 2008,
     * scheme S3): two plain BA steps c1 = F(c), c2 = F(c1) give the
     * extrapolation c - 2 a r + a^2 v (r = c1 - c, v = c2 - c1 - r,
     * a = -|r| / |v|), and one plain step from there stabilises it. From a
     * uniform prior plain BA crawls (8,795 steps at beta 0.5 on the 24 x 17
     * grid); the extrapolation cuts that several-fold. It changes only
     * which positive marginal the iteration stops at, and the channel of
     * any positive marginal is 2 beta d-private, so the guarantee does not
     * depend on it. The stopping rule is the plain one: the last plain
     * step moved no entry by more than the precision. */
    unsigned steps = 0;
    double change = INFINITY;
    /* The paper's truncated BA: plain steps only, a fixed number. */
    for (; steps < p->plain_steps; steps++) {
        change = ba_step(kernel, n, prior, c, next, scratch);
        memcpy(c, next, n * sizeof *c);
    }
    while (p->plain_steps == 0 && steps < p->max_iterations) {
        if (p->max_iterations - steps < 3) {
            change = ba_step(kernel, n, prior, c, next, scratch);
            memcpy(c, next, n * sizeof *c);
            steps++;
            if (change <= p->precision)
                break;
            continue;
        }
        double first = ba_step(kernel, n, prior, c, c1, scratch);
        if (first <= p->precision) {
            memcpy(c, c1, n * sizeof *c);
            change = first;
            steps++;
            break;
        }
        ba_step(kernel, n, prior, c1, c2, scratch);
        steps += 2;
        double rr = 0.0, vv = 0.0;
        for (size_t y = 0; y < n; y++) {
            double r = c1[y] - c[y], v = c2[y] - 2.0 * c1[y] + c[y];
            rr += r * r;
            vv += v * v;
        }
        double alpha = vv > 0.0 ? -sqrt(rr / vv) : -1.0;
        /* -1 is exactly the second plain step; a ratio that overflowed
         * (vv subnormal) or is not a number extrapolates nowhere useful. */
        if (!(alpha <= -1.0) || !isfinite(alpha))
            alpha = -1.0;
        /* Step back towards the plain step until every entry stays at or
         * above the floor: an extrapolated marginal must remain one. Each
         * step back halves alpha's distance from -1, and after
         * STEP_BACK_LIMIT of them the plain step is taken outright. */
        for (unsigned back = 0;; back++) {
            int positive = 1;
            for (size_t y = 0; y < n; y++) {
                double r = c1[y] - c[y], v = c2[y] - 2.0 * c1[y] + c[y];
                next[y] = c[y] - 2.0 * alpha * r + alpha * alpha * v;
                if (!(next[y] >= MARGINAL_FLOOR) || !isfinite(next[y]))
                    positive = 0;
            }
            if (positive || alpha == -1.0)
                break;
            alpha = back + 1 >= STEP_BACK_LIMIT ? -1.0 : (alpha - 1.0) / 2.0;
            if (alpha > -1.0)
                alpha = -1.0;
        }
        normalise_marginal(next, n);
        change = ba_step(kernel, n, prior, next, c, scratch);
        steps++;
        if (change <= p->precision)
            break;
    }
    result->iterations = steps;
    result->last_change = change;
    result->converged = change <= p->precision;
    /* Every step normalises a floored marginal, so this cannot happen;
     * if it ever did, the channel would not be of the elastic form and
     * must not be released through. */
    int rc = 0;
    for (size_t y = 0; y < n && rc == 0; y++)
        if (!(c[y] >= MARGINAL_FLOOR / 2) || !isfinite(c[y])) {
            snprintf(err, errlen, "BA: the output marginal left the "
                     "simplex (cell %zu has %g)", y, c[y]);
            memset(result, 0, sizeof *result);
            rc = -1;
        }
    if (rc == 0) {
        /* The published channel is the one of the final marginal. */
        channel_of_marginal(kernel, n, c, channel);
        if (marginal != NULL)
            memcpy(marginal, c, n * sizeof *c);
    }
    free(kernel);
    free(c);
    free(next);
    free(c1);
    free(c2);
    free(scratch);
    return rc;
}

/* ------------------------------------------------------------ alias */

int ts_alias_build(ts_alias_table *table, const double *weights, size_t n)
{
    memset(table, 0, sizeof *table);
    if (n == 0 || n > UINT32_MAX)
        return -1;
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!(weights[i] >= 0.0) || !isfinite(weights[i]))
            return -1;
        total += weights[i];
    }
    if (!(total > 0.0) || !isfinite(total))
        return -1;
    table->accept = malloc(n * sizeof *table->accept);
    table->alias = malloc(n * sizeof *table->alias);
    uint32_t *small = malloc(n * sizeof *small);
    uint32_t *large = malloc(n * sizeof *large);
    if (table->accept == NULL || table->alias == NULL || small == NULL ||
        large == NULL) {
        free(small);
        free(large);
        ts_alias_free(table);
        return -1;
    }
    table->n = n;
    size_t n_small = 0, n_large = 0;
    for (size_t i = 0; i < n; i++) {
        table->accept[i] = weights[i] * (double)n / total;
        table->alias[i] = (uint32_t)i;
        if (table->accept[i] < 1.0)
            small[n_small++] = (uint32_t)i;
        else
            large[n_large++] = (uint32_t)i;
    }
    while (n_small > 0 && n_large > 0) {
        uint32_t s = small[--n_small];
        uint32_t l = large[n_large - 1];
        table->alias[s] = l;
        table->accept[l] -= 1.0 - table->accept[s];
        if (table->accept[l] < 1.0) {
            n_large--;
            small[n_small++] = l;
        }
    }
    /* What is left holds probability 1 up to rounding. */
    while (n_large > 0)
        table->accept[large[--n_large]] = 1.0;
    while (n_small > 0)
        table->accept[small[--n_small]] = 1.0;
    free(small);
    free(large);
    return 0;
}

void ts_alias_free(ts_alias_table *table)
{
    free(table->accept);
    free(table->alias);
    memset(table, 0, sizeof *table);
}

uint32_t ts_alias_sample(const ts_alias_table *table, ts_rng *rng)
{
    /* An unbiased column by rejection on the top bits, then the coin. */
    uint64_t n = table->n;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do
        r = ts_rng_u64(rng);
    while (r >= limit);
    uint32_t column = (uint32_t)(r % n);
    return ts_rng_uniform_open(rng) < table->accept[column]
               ? column
               : table->alias[column];
}
