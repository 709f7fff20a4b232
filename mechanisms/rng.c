#include "mechanisms/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* One ChaCha20 call fills this many bytes. Large enough that the per-call
 * cost of ts_rng_u64 is a copy and a wipe; the refill (one ChaCha20 call on
 * 4 KiB, a few microseconds) is amortised over ~500 draws. */
#define KEYSTREAM_BYTES 4096
#define KEY_BYTES crypto_stream_chacha20_KEYBYTES

/* Domain separation: a seed keys this generator and nothing else, and a
 * future change of the derivation gets a new label instead of silently
 * changing every seeded test's noise. */
static const char seed_label[] = "tracesan.rng.seed.v1";

struct ts_rng {
    unsigned char key[KEY_BYTES];
    unsigned char keystream[KEYSTREAM_BYTES];
    size_t next;         /* first unread keystream byte */
    uint64_t bit_pool;   /* spare single bits (Laplace signs, boundary coin) */
    unsigned bit_count;
    int secure;
};

/* Fast key erasure: the first KEY_BYTES of each block of keystream replace
 * the key and are wiped from the buffer, so the state never holds anything
 * from which already-used output could be recomputed. Every key encrypts
 * exactly one buffer, which is why an all-zero nonce is safe. */
static void refill(ts_rng *rng)
{
    static const unsigned char zero_nonce[crypto_stream_chacha20_NONCEBYTES];

    crypto_stream_chacha20(rng->keystream, sizeof rng->keystream, zero_nonce,
                           rng->key);
    memcpy(rng->key, rng->keystream, KEY_BYTES);
    sodium_memzero(rng->keystream, KEY_BYTES);
    rng->next = KEY_BYTES;
}

static ts_rng *rng_from_key(unsigned char key[KEY_BYTES], int secure)
{
    ts_rng *rng = malloc(sizeof *rng);
    if (rng == NULL) {
        sodium_memzero(key, KEY_BYTES);
        return NULL;
    }
    memcpy(rng->key, key, KEY_BYTES);
    sodium_memzero(key, KEY_BYTES);
    rng->bit_pool = 0;
    rng->bit_count = 0;
    rng->secure = secure;
    refill(rng);
    return rng;
}

ts_rng *ts_rng_new_secure(void)
{
    unsigned char key[KEY_BYTES];

    /* sodium_init() selects and tests the OS entropy source (getrandom or
     * /dev/urandom); -1 means there is none we can trust. */
    if (sodium_init() < 0)
        return NULL;
    randombytes_buf(key, sizeof key);
    return rng_from_key(key, 1);
}

ts_rng *ts_rng_new_seeded(uint64_t seed)
{
    unsigned char message[sizeof seed_label - 1 + 8];
    unsigned char key[crypto_hash_sha256_BYTES];

    if (sodium_init() < 0)
        return NULL;
    memcpy(message, seed_label, sizeof seed_label - 1);
    /* Little-endian explicitly, so a seed gives the same noise on every
     * architecture. */
    for (int i = 0; i < 8; i++)
        message[sizeof seed_label - 1 + i] = (unsigned char)(seed >> (8 * i));
    crypto_hash_sha256(key, message, sizeof message);
    return rng_from_key(key, 0);
}

void ts_rng_free(ts_rng *rng)
{
    if (rng == NULL)
        return;
    sodium_memzero(rng, sizeof *rng);
    free(rng);
}

int ts_rng_is_secure(const ts_rng *rng)
{
    return rng->secure;
}

void ts_rng_bytes(ts_rng *rng, void *buf, size_t len)
{
    unsigned char *out = buf;

    while (len > 0) {
        if (rng->next == KEYSTREAM_BYTES)
            refill(rng);
        size_t take = KEYSTREAM_BYTES - rng->next;
        if (take > len)
            take = len;
        memcpy(out, rng->keystream + rng->next, take);
        /* Handed-out bytes are wiped at once (a plain memset suffices: the
         * buffer lives on in the heap, so the store cannot be elided). */
        memset(rng->keystream + rng->next, 0, take);
        rng->next += take;
        out += take;
        len -= take;
    }
}

uint64_t ts_rng_u64(ts_rng *rng)
{
    unsigned char raw[8];
    uint64_t value = 0;

    if (KEYSTREAM_BYTES - rng->next >= sizeof raw) {
        memcpy(raw, rng->keystream + rng->next, sizeof raw);
        memset(rng->keystream + rng->next, 0, sizeof raw);
        rng->next += sizeof raw;
    } else {
        ts_rng_bytes(rng, raw, sizeof raw);
    }
    for (int i = 7; i >= 0; i--)
        value = (value << 8) | raw[i];
    return value;
}

static unsigned random_bit(ts_rng *rng)
{
    if (rng->bit_count == 0) {
        rng->bit_pool = ts_rng_u64(rng);
        rng->bit_count = 64;
    }
    unsigned bit = (unsigned)(rng->bit_pool & 1u);
    rng->bit_pool >>= 1;
    rng->bit_count--;
    return bit;
}

/* ---------------------------------------------------------------- uniform */

#define MANTISSA_BITS 52
#define MANTISSA_MASK ((UINT64_C(1) << MANTISSA_BITS) - 1)
#define EXPONENT_BIAS 1023
/* Zero bits after which the value is below the smallest normal 2^-1022. */
#define SUBNORMAL_ZEROS 1022

typedef uint64_t (*word_source)(void *ctx);

static double double_from_bits(uint64_t bits)
{
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* Builds one candidate uniform double from random words, or returns 0.0 when
 * the candidate is 0 or 1 and must be redrawn.
 *
 * Think of a real u uniform in [0, 1) rounded to the nearest double. The
 * binade [2^e, 2^(e+1)) holds u with probability 2^e, so e = -1 - Z with Z
 * the number of zero bits before the first one in a stream of fair bits.
 * Within the binade the doubles are equally spaced: a uniform 52-bit
 * mantissa m picks the nearest one, except that m = 0 stands for the two
 * half-width intervals at both ends of the binade (rounding to 2^e or up to
 * 2^(e+1)), decided by one more fair bit. Every double in (0, 1) therefore
 * comes out with the probability of the interval that rounds to it.
 *
 * `first` supplies, from its top down: 52 mantissa bits, the boundary bit,
 * and 11 bits that start the zero count; with probability 1 - 2^-11 those
 * settle the exponent and no further word is needed. */
static double uniform_from_words(uint64_t first, word_source more, void *ctx)
{
    uint64_t mantissa = first >> 12;
    unsigned boundary_up = (unsigned)(first >> 11) & 1u;
    uint64_t exponent_bits = first & 0x7ffu;
    unsigned zeros;

    if (exponent_bits != 0) {
        zeros = (unsigned)__builtin_ctzll(exponent_bits);
    } else {
        zeros = 11;
        for (;;) {
            uint64_t word = more(ctx);
            if (word != 0) {
                zeros += (unsigned)__builtin_ctzll(word);
                break;
            }
            zeros += 64;
            if (zeros >= SUBNORMAL_ZEROS)
                break;
        }
    }

    if (zeros >= SUBNORMAL_ZEROS) {
        /* [0, 2^-1022) is one evenly spaced range of subnormals with the
         * same spacing as the lowest normal binade; reached with
         * probability 2^-1022, kept exact for completeness. */
        if (mantissa == 0)
            return boundary_up ? 0x1p-1022 : 0.0;
        return double_from_bits(mantissa);
    }

    int exponent = -1 - (int)zeros;
    if (mantissa == 0 && boundary_up)
        exponent += 1;
    if (exponent >= 0)
        return 0.0; /* rounded up to 1.0: outside the open interval */
    return double_from_bits(((uint64_t)(exponent + EXPONENT_BIAS)
                             << MANTISSA_BITS) | mantissa);
}

static uint64_t rng_word(void *ctx)
{
    return ts_rng_u64(ctx);
}

double ts_rng_uniform_open(ts_rng *rng)
{
    for (;;) {
        double value = uniform_from_words(ts_rng_u64(rng), rng_word, rng);
        if (value > 0.0)
            return value;
    }
}

double ts_rng_angle(ts_rng *rng)
{
    const double two_pi = 2.0 * M_PI;

    for (;;) {
        double angle = two_pi * ts_rng_uniform_open(rng);
        /* u < 1 can still round up to 2 pi in the product; the header
         * promises a half-open range. */
        if (angle < two_pi)
            return angle;
    }
}

double ts_rng_laplace(ts_rng *rng, double scale)
{
    /* |X| is exponential: -scale * ln(u) with u in (0, 1) is finite and
     * positive; an independent fair bit gives the sign. */
    double magnitude = -scale * log(ts_rng_uniform_open(rng));
    return random_bit(rng) ? -magnitude : magnitude;
}

double ts_rng_gamma_int(ts_rng *rng, unsigned shape, double scale)
{
    if (shape == 0)
        return NAN;
    /* Sum of logs rather than log of a product: a product of many u can
     * underflow to 0. */
    double sum = 0.0;
    for (unsigned i = 0; i < shape; i++)
        sum += log(ts_rng_uniform_open(rng));
    return -scale * sum;
}
