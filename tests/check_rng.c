/* Unit tests for mechanisms/rng.c.
 *
 * White box: rng.c is compiled into this test so the exponent/mantissa
 * construction (a static function) can be driven with chosen random words;
 * regions of probability 2^-20 or 2^-1022 cannot be reached by sampling. The
 * library's copy of rng.o is then not linked (all its symbols are defined
 * here), so the statistical tests below exercise this same code.
 *
 * Assertions inside sampling loops are counted and checked once: Check
 * records every passing assertion with a write() to its log pipe.
 *
 * Statistical tolerances: fixed seeds make every run identical; the bounds
 * are still derived from theory (5 standard errors, or the Kolmogorov-Smirnov
 * critical value at alpha = 0.001, asymptotically 1.949 / sqrt(n)) so that a
 * correct generator passes for essentially any seed and a biased one fails.
 */
#include "mechanisms/rng.c"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/support/check_run.h"
#include "tests/support/ks.h"

/* ------------------------------------------------------------- helpers */

static double laplace_cdf(double x, double scale)
{
    return x < 0.0 ? 0.5 * exp(x / scale) : 1.0 - 0.5 * exp(-x / scale);
}

static double gamma3_cdf(double x, double scale)
{
    if (x <= 0.0)
        return 0.0;
    double t = x / scale;
    return 1.0 - exp(-t) * (1.0 + t + 0.5 * t * t);
}

static double uniform_angle_cdf(double x, double unused)
{
    (void)unused;
    return x / (2.0 * M_PI);
}

/* Scripted word source for uniform_from_words: returns the listed words,
 * then `tail` forever, and counts calls. */
typedef struct script {
    const uint64_t *words;
    size_t count;
    size_t calls;
    uint64_t tail;
} script;

static uint64_t script_next(void *ctx)
{
    script *s = ctx;
    uint64_t w = s->calls < s->count ? s->words[s->calls] : s->tail;
    s->calls++;
    return w;
}

static uint64_t first_word(uint64_t mantissa, unsigned boundary, uint64_t exponent_bits)
{
    return (mantissa << 12) | ((uint64_t)boundary << 11) | exponent_bits;
}

/* --------------------------------------------------------- determinism */

TS_TEST(test_seeded_reproducible)
{
    ts_rng *a = ts_rng_new_seeded(42);
    ts_rng *b = ts_rng_new_seeded(42);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(ts_rng_is_secure(a), 0);
    /* Mixed call sequence crossing several refills. */
    long mismatches = 0;
    for (int i = 0; i < 5000; i++) {
        mismatches += ts_rng_u64(a) != ts_rng_u64(b);
        mismatches += ts_rng_uniform_open(a) != ts_rng_uniform_open(b);
        mismatches += ts_rng_laplace(a, 3.0) != ts_rng_laplace(b, 3.0);
    }
    ck_assert_int_eq(mismatches, 0);
    ts_rng_free(a);
    ts_rng_free(b);
}
END_TEST

/* Pins the key derivation and the fast-key-erasure layout: key =
 * SHA-256("tracesan.rng.seed.v1" || le64(seed)); each 4096-byte ChaCha20
 * block (zero nonce) gives its first 32 bytes to the next key and the other
 * 4064 (508 words) to the caller. Values computed independently with
 * Python's hashlib and the cryptography package's ChaCha20. */
TS_TEST(test_seeded_known_answer)
{
    ts_rng *rng = ts_rng_new_seeded(42);
    ck_assert_uint_eq(ts_rng_u64(rng), UINT64_C(0xfa15d0f30508b38f));
    ck_assert_uint_eq(ts_rng_u64(rng), UINT64_C(0xf549589a8d56f3d8));
    for (int i = 2; i < 508; i++)
        (void)ts_rng_u64(rng);
    ck_assert_uint_eq(ts_rng_u64(rng), UINT64_C(0x8fcbd78121e21b3b));
    ts_rng_free(rng);

    rng = ts_rng_new_seeded(0);
    ck_assert_uint_eq(ts_rng_u64(rng), UINT64_C(0xbcd1aef721a61be2));
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_seed_sensitivity)
{
    const uint64_t seeds[] = {0, 1, 42, 43, UINT64_C(1) << 63, UINT64_MAX};
    const size_t n = sizeof seeds / sizeof seeds[0];
    unsigned char out[sizeof seeds / sizeof seeds[0]][32];

    for (size_t i = 0; i < n; i++) {
        ts_rng *rng = ts_rng_new_seeded(seeds[i]);
        ts_rng_bytes(rng, out[i], sizeof out[i]);
        ts_rng_free(rng);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            ck_assert_msg(memcmp(out[i], out[j], sizeof out[i]) != 0,
                          "seeds %zu and %zu collide", i, j);
}
END_TEST

/* ts_rng_bytes and ts_rng_u64 read the same little-endian stream, whatever
 * the chunking and across refills. */
TS_TEST(test_bytes_and_words_agree)
{
    enum { WORDS = 2000 };
    static unsigned char stream[WORDS * 8];
    ts_rng *a = ts_rng_new_seeded(7);
    ts_rng *b = ts_rng_new_seeded(7);

    size_t chunks[] = {1, 3, 8, 13, 4096, 5000, 31};
    size_t filled = 0;
    for (size_t i = 0; filled < sizeof stream; i++) {
        size_t take = chunks[i % (sizeof chunks / sizeof chunks[0])];
        if (take > sizeof stream - filled)
            take = sizeof stream - filled;
        ts_rng_bytes(a, stream + filled, take);
        filled += take;
    }
    int first_mismatch = -1;
    for (int w = 0; w < WORDS; w++) {
        uint64_t expect = 0;
        for (int k = 7; k >= 0; k--)
            expect = (expect << 8) | stream[w * 8 + k];
        if (ts_rng_u64(b) != expect && first_mismatch < 0)
            first_mismatch = w;
    }
    ck_assert_int_eq(first_mismatch, -1);
    ts_rng_free(a);
    ts_rng_free(b);
}
END_TEST

TS_TEST(test_secure_generator)
{
    ts_rng *s1 = ts_rng_new_secure();
    ts_rng *s2 = ts_rng_new_secure();
    ck_assert_ptr_nonnull(s1);
    ck_assert_ptr_nonnull(s2);
    ck_assert_int_eq(ts_rng_is_secure(s1), 1);

    unsigned char a[32], b[32], seeded[32];
    ts_rng_bytes(s1, a, sizeof a);
    ts_rng_bytes(s2, b, sizeof b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    const uint64_t seeds[] = {0, 1, 42};
    for (size_t i = 0; i < 3; i++) {
        ts_rng *r = ts_rng_new_seeded(seeds[i]);
        ts_rng_bytes(r, seeded, sizeof seeded);
        ck_assert(memcmp(a, seeded, sizeof a) != 0);
        ts_rng_free(r);
    }
    /* The secure generator runs the same sampling code. */
    long out_of_range = 0;
    for (int i = 0; i < 10000; i++) {
        double u = ts_rng_uniform_open(s1);
        out_of_range += !(u > 0.0 && u < 1.0);
    }
    ck_assert_int_eq(out_of_range, 0);
    ts_rng_free(s1);
    ts_rng_free(s2);
}
END_TEST

/* ------------------------------------------------------------- uniform */

enum { UNIFORM_N = 1 << 22 };

TS_TEST(test_uniform_moments_and_range)
{
    ts_rng *rng = ts_rng_new_seeded(1001);
    double sum = 0.0, sum_sq = 0.0;
    long out_of_range = 0;
    for (long i = 0; i < UNIFORM_N; i++) {
        double u = ts_rng_uniform_open(rng);
        out_of_range += !(u > 0.0 && u < 1.0);
        sum += u;
        sum_sq += (u - 0.5) * (u - 0.5);
    }
    ck_assert_int_eq(out_of_range, 0);
    double n = UNIFORM_N;
    /* Mean 1/2, SE sqrt(1/12 / n). Variance 1/12: (u - 1/2)^2 has variance
     * E[(u-1/2)^4] - 1/144 = 1/80 - 1/144 = 1/180, SE sqrt(1/180 / n). */
    ck_assert_double_le(fabs(sum / n - 0.5), 5.0 * sqrt(1.0 / 12.0 / n));
    ck_assert_double_le(fabs(sum_sq / n - 1.0 / 12.0), 5.0 * sqrt(1.0 / 180.0 / n));
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_uniform_exponent_geometric)
{
    enum { LEVELS = 20 };
    long below[LEVELS + 1] = {0};
    ts_rng *rng = ts_rng_new_seeded(2002);
    for (long i = 0; i < UNIFORM_N; i++) {
        int exponent;
        (void)frexp(ts_rng_uniform_open(rng), &exponent);
        /* u in [2^(e-1), 2^e) is below 2^-k exactly when e <= -k. */
        for (int k = 1; k <= LEVELS && exponent <= -k; k++)
            below[k]++;
    }
    /* P(u < 2^-k) = 2^-k (up to a 2^-54 rounding sliver); the count is
     * Binomial(n, 2^-k). 5 sd each; the smallest level has mean 4 and sd 2,
     * so the tolerance is never below a few units. */
    double n = UNIFORM_N;
    for (int k = 1; k <= LEVELS; k++) {
        double p = ldexp(1.0, -k);
        double sd = sqrt(n * p * (1.0 - p));
        ck_assert_msg(fabs((double)below[k] - n * p) <= 5.0 * sd + 1.0,
                      "u < 2^-%d: %ld samples, expected %.1f (sd %.2f)", k,
                      below[k], n * p, sd);
    }
    ts_rng_free(rng);
}
END_TEST

/* The usual (u64 >> 11) * 2^-53 has spacing 2^-53 everywhere, so in
 * [2^-12, 2^-11) the lowest 11 of the 52 mantissa bits are always zero, and
 * in [0.5, 1) the lowest bit is fine. Here every binade uses its full
 * mantissa: the lowest bit is 1 half the time, and all-zero low 11 bits are
 * rare (probability 2^-11). */
TS_TEST(test_uniform_low_mantissa_bits)
{
    ts_rng *rng = ts_rng_new_seeded(3003);
    long top_n = 0, top_odd = 0, deep_n = 0, deep_odd = 0, deep_low11_zero = 0;
    for (long i = 0; i < UNIFORM_N; i++) {
        double u = ts_rng_uniform_open(rng);
        uint64_t bits;
        memcpy(&bits, &u, sizeof bits);
        if (u >= 0.5) {
            top_n++;
            top_odd += (long)(bits & 1u);
        } else if (u >= 0x1p-12 && u < 0x1p-11) {
            deep_n++;
            deep_odd += (long)(bits & 1u);
            deep_low11_zero += (bits & 0x7ffu) == 0;
        }
    }
    /* Expected counts n/2 and n/4096 (about 1024); fraction of odd mantissas
     * 1/2 with sd 0.5/sqrt(count). */
    ck_assert_int_gt(deep_n, 800);
    ck_assert_double_le(fabs((double)top_odd / top_n - 0.5), 5.0 * 0.5 / sqrt(top_n));
    ck_assert_double_le(fabs((double)deep_odd / deep_n - 0.5), 5.0 * 0.5 / sqrt(deep_n));
    /* Expected about 0.5; (u64 >> 11) would give deep_n (about 1024). */
    ck_assert_int_le(deep_low11_zero, 5);
    ts_rng_free(rng);
}
END_TEST

/* Same property in [2^-20, 2^-19), reached by scripting the exponent words
 * (sampling would need ~2^20 draws per hit) while the mantissa words come
 * from the generator. */
TS_TEST(test_uniform_low_bits_deep_binade)
{
    ts_rng *rng = ts_rng_new_seeded(3004);
    const uint64_t nineteen_zeros = UINT64_C(1) << 8; /* 11 + 8 zero bits */
    long n = 100000, odd = 0, out_of_binade = 0;
    for (long i = 0; i < n; i++) {
        script s = {.words = &nineteen_zeros, .count = 1, .tail = 0};
        double u = uniform_from_words(ts_rng_u64(rng) & ~UINT64_C(0x7ff), script_next, &s);
        uint64_t bits;
        memcpy(&bits, &u, sizeof bits);
        out_of_binade += !(u >= 0x1p-20 && u <= 0x1p-19);
        if (u < 0x1p-19)
            odd += (long)(bits & 1u);
    }
    ck_assert_int_eq(out_of_binade, 0);
    ck_assert_double_le(fabs((double)odd / n - 0.5), 5.0 * 0.5 / sqrt(n));
    ts_rng_free(rng);
}
END_TEST

/* Exact outputs of the construction for chosen words. */
TS_TEST(test_uniform_construction)
{
    const uint64_t m = UINT64_C(0x123456789abcd); /* 49 significant bits */
    script none = {.words = NULL, .count = 0, .tail = 0};

    /* Lowest exponent bit set: no zero bits, top binade [1/2, 1); bit 10
     * set: ten zero bits, binade [2^-11, 2^-10). */
    ck_assert(uniform_from_words(first_word(m, 0, 1), script_next, &none) ==
              ldexp(1.0 + ldexp((double)m, -52), -1));
    ck_assert(uniform_from_words(first_word(m, 1, 0x400), script_next, &none) ==
              ldexp(1.0 + ldexp((double)m, -52), -11));
    ck_assert_uint_eq(none.calls, 0);

    /* Mantissa 0: the boundary bit moves 2^e up to 2^(e+1)... */
    ck_assert(uniform_from_words(first_word(0, 0, 2), script_next, &none) == 0.25);
    ck_assert(uniform_from_words(first_word(0, 1, 2), script_next, &none) == 0.5);
    /* ...and from the top binade that would be 1.0: refused (0 = redraw). */
    ck_assert(uniform_from_words(first_word(0, 1, 1), script_next, &none) == 0.0);
    ck_assert(uniform_from_words(first_word(0, 0, 1), script_next, &none) == 0.5);

    /* Exponent continued over further words: 11 + 15 * 64 + 3 zeros. */
    uint64_t deep[16] = {0};
    deep[15] = UINT64_C(1) << 3;
    script s = {.words = deep, .count = 16, .tail = 0};
    double u = uniform_from_words(first_word(m, 0, 0), script_next, &s);
    ck_assert(u == ldexp(1.0 + ldexp((double)m, -52), -1 - (11 + 15 * 64 + 3)));
    ck_assert_uint_eq(s.calls, 16);

    /* Below 2^-1022: subnormals, spacing 2^-1074, and the loop ends. */
    script zeros = {.words = NULL, .count = 0, .tail = 0};
    u = uniform_from_words(first_word(m, 0, 0), script_next, &zeros);
    ck_assert(u == ldexp((double)m, -1074));
    ck_assert_int_eq(fpclassify(u), FP_SUBNORMAL);
    ck_assert_uint_le(zeros.calls, 17);
    zeros.calls = 0;
    ck_assert(uniform_from_words(first_word(1, 0, 0), script_next, &zeros) == 0x1p-1074);
    zeros.calls = 0;
    ck_assert(uniform_from_words(first_word(0, 0, 0), script_next, &zeros) == 0.0);
    zeros.calls = 0;
    ck_assert(uniform_from_words(first_word(0, 1, 0), script_next, &zeros) == 0x1p-1022);
}
END_TEST

/* ------------------------------------------------------- distributions */

enum { DIST_N = 100000 };

/* Each test's draws (every test runs in a process of its own). */
static double samples[DIST_N];

/* The draws fit the law: the KS distance to its CDF is below the 1 %
 * critical value. */
static void assert_ks_fits(double (*cdf)(double, double), double param)
{
    double d = ts_ks_statistic(samples, DIST_N, cdf, param);
    ck_assert_double_lt(d, KS_CRITICAL_001 / sqrt(DIST_N));
}

TS_TEST(test_angle_uniform)
{
    ts_rng *rng = ts_rng_new_seeded(4004);
    long out_of_range = 0;
    for (int i = 0; i < DIST_N; i++) {
        samples[i] = ts_rng_angle(rng);
        out_of_range += !(samples[i] >= 0.0 && samples[i] < 2.0 * M_PI);
    }
    ck_assert_int_eq(out_of_range, 0);
    assert_ks_fits(uniform_angle_cdf, 0.0);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_laplace_ks)
{
    const double scale = 2.5;
    ts_rng *rng = ts_rng_new_seeded(5005);
    long not_finite = 0;
    for (int i = 0; i < DIST_N; i++) {
        samples[i] = ts_rng_laplace(rng, scale);
        not_finite += !isfinite(samples[i]);
    }
    ck_assert_int_eq(not_finite, 0);
    assert_ks_fits(laplace_cdf, scale);
    /* Test the test: the same samples against the wrong scale fail. */
    ck_assert_double_gt(ts_ks_statistic(samples, DIST_N, laplace_cdf, 1.1 * scale),
                        KS_CRITICAL_001 / sqrt(DIST_N));
    ts_rng_free(rng);
}
END_TEST

TS_TEST(test_gamma3)
{
    const double scale = 40.0;
    ts_rng *rng = ts_rng_new_seeded(6006);
    double sum = 0.0;
    long bad = 0;
    for (int i = 0; i < DIST_N; i++) {
        samples[i] = ts_rng_gamma_int(rng, 3, scale);
        bad += !(samples[i] > 0.0 && isfinite(samples[i]));
        sum += samples[i];
    }
    ck_assert_int_eq(bad, 0);
    /* Gamma(3, s): mean 3s, variance 3s^2, so SE of the mean s sqrt(3/n). */
    ck_assert_double_le(fabs(sum / DIST_N - 3.0 * scale),
                        5.0 * scale * sqrt(3.0 / DIST_N));
    assert_ks_fits(gamma3_cdf, scale);
    ck_assert(isnan(ts_rng_gamma_int(rng, 0, scale)));
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    /* Generous for sanitizer builds; these take well under a second. */
    return ts_check_main("rng", 120, NULL, NULL);
}
