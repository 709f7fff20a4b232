/* Randomness for every mechanism.
 *
 * One generator type, two ways to key it. Both are a ChaCha20 keystream
 * with fast key erasure (the first 32 bytes of each refill become the next
 * key, so a later memory disclosure cannot reconstruct past noise):
 *   - ts_rng_new_secure keys it from the operating system (getrandom via
 *     libsodium) and is what the daemon and the CLI use by default;
 *   - ts_rng_new_seeded keys it from SHA-256 of a 64-bit seed, so tests and
 *     `--seed` get reproducible noise through exactly the same code path.
 * Not thread-safe: one generator per thread (the daemon is single-threaded).
 */
#ifndef TRACESAN_MECHANISMS_RNG_H
#define TRACESAN_MECHANISMS_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct ts_rng ts_rng;

/* NULL when the OS entropy source is unavailable (caller must fail closed). */
ts_rng *ts_rng_new_secure(void);
ts_rng *ts_rng_new_seeded(uint64_t seed);
void ts_rng_free(ts_rng *rng);

/* 1 when the generator was keyed from the OS, 0 when seeded. */
int ts_rng_is_secure(const ts_rng *rng);

void ts_rng_bytes(ts_rng *rng, void *buf, size_t len);
uint64_t ts_rng_u64(ts_rng *rng);

/* Uniform on the open interval (0, 1). Every double in (0, 1) has positive
 * probability, proportional to the width of the interval it rounds from:
 * the exponent is drawn geometrically from a stream of random bits and the
 * 52-bit mantissa uniformly (so values below 2^-53 are reachable too, unlike
 * the usual (u64 >> 11) * 2^-53 construction). */
double ts_rng_uniform_open(ts_rng *rng);

/* Uniform angle in [0, 2*pi). */
double ts_rng_angle(ts_rng *rng);

/* Centred Laplace with the given scale b (density exp(-|x|/b) / 2b). */
double ts_rng_laplace(ts_rng *rng, double scale);

/* Gamma(shape k, scale theta) for integer shape k >= 1 (sum of exponentials);
 * PIM needs shape 3. */
double ts_rng_gamma_int(ts_rng *rng, unsigned shape, double scale);

#endif
