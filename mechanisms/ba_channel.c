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

int ts_ba_channel(const ts_vec2 *centres, size_t n, const double *prior,
                  const ts_ba_params *p, double *channel, double *marginal,
                  ts_ba_result *result, char *err, size_t errlen)
{
    memset(result, 0, sizeof *result);
    if (n == 0 || !(p->beta > 0.0) || !isfinite(p->beta) ||
        !(p->unit_m > 0.0) || !isfinite(p->unit_m) ||
        !(p->precision > 0.0) || p->max_iterations == 0) {
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
    if (kernel == NULL || c == NULL || next == NULL) {
        free(kernel);
        free(c);
        free(next);
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
    for (unsigned t = 1; t <= p->max_iterations; t++) {
        channel_of_marginal(kernel, n, c, channel);
        memset(next, 0, n * sizeof *next);
        for (size_t x = 0; x < n; x++) {
            const double *row = channel + x * n;
            for (size_t y = 0; y < n; y++)
                next[y] += prior[x] * row[y];
        }
        double sum = 0.0;
        for (size_t y = 0; y < n; y++) {
            if (next[y] < MARGINAL_FLOOR)
                next[y] = MARGINAL_FLOOR;
            sum += next[y];
        }
        double change = 0.0;
        for (size_t y = 0; y < n; y++) {
            next[y] /= sum;
            double delta = fabs(next[y] - c[y]);
            if (delta > change)
                change = delta;
            c[y] = next[y];
        }
        result->iterations = t;
        result->last_change = change;
        if (change <= p->precision) {
            result->converged = 1;
            break;
        }
    }
    /* The published channel is the one of the final marginal. */
    channel_of_marginal(kernel, n, c, channel);
    if (marginal != NULL)
        memcpy(marginal, c, n * sizeof *c);
    free(kernel);
    free(c);
    free(next);
    return 0;
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
