/* Test helper: a fresh NATS user NKey, made with libsodium.
 *   nkey_keypair SEED_FILE
 * writes the seed ("SU...", one line, mode 0600) to SEED_FILE and prints
 * the public key ("U...") on stdout.
 *
 * Encodings (the NATS nkeys format): base32 (RFC 4648 alphabet, no
 * padding) of
 *   public key: [20 << 3] + 32-byte Ed25519 public key + CRC16
 *   seed:       [(18 << 3) | ((20 << 3) >> 5), ((20 << 3) & 31) << 3]
 *               + 32-byte Ed25519 seed + CRC16
 * where CRC16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0) of the
 * bytes before it, stored little-endian. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#define PREFIX_SEED (18u << 3)
#define PREFIX_USER (20u << 3)
#define KEY_BYTES 32

static uint16_t crc16_xmodem(const uint8_t *data, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(data[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) != 0 ? (uint16_t)((crc << 1) ^ 0x1021)
                                      : (uint16_t)(crc << 1);
    }
    return crc;
}

/* RFC 4648 base32 without padding; out holds at least len * 8 / 5 + 2. */
static void base32(const uint8_t *data, size_t len, char *out)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        acc = (acc << 8) | data[i];
        bits += 8;
        while (bits >= 5) {
            bits -= 5;
            out[o++] = alphabet[(acc >> bits) & 31];
        }
    }
    if (bits > 0)
        out[o++] = alphabet[(acc << (5 - bits)) & 31];
    out[o] = '\0';
}

/* buf = prefix + key + CRC16 LE; len of prefix given; returns the total. */
static size_t with_crc(uint8_t *buf, size_t prefix_len, const uint8_t *key)
{
    memcpy(buf + prefix_len, key, KEY_BYTES);
    size_t n = prefix_len + KEY_BYTES;
    uint16_t crc = crc16_xmodem(buf, n);
    buf[n] = (uint8_t)(crc & 0xff);
    buf[n + 1] = (uint8_t)(crc >> 8);
    return n + 2;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: nkey_keypair SEED_FILE\n");
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "nkey_keypair: libsodium initialisation failed\n");
        return 1;
    }
    uint8_t seed[KEY_BYTES];
    uint8_t pk[crypto_sign_PUBLICKEYBYTES];
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
    randombytes_buf(seed, sizeof seed);
    if (crypto_sign_seed_keypair(pk, sk, seed) != 0) {
        fprintf(stderr, "nkey_keypair: key generation failed\n");
        return 1;
    }

    uint8_t raw[2 + KEY_BYTES + 2];
    char public_text[sizeof raw * 8 / 5 + 2];
    char seed_text[sizeof raw * 8 / 5 + 2];
    raw[0] = (uint8_t)PREFIX_USER;
    base32(raw, with_crc(raw, 1, pk), public_text);
    raw[0] = (uint8_t)(PREFIX_SEED | (PREFIX_USER >> 5));
    raw[1] = (uint8_t)((PREFIX_USER & 31) << 3);
    base32(raw, with_crc(raw, 2, seed), seed_text);
    sodium_memzero(raw, sizeof raw);
    sodium_memzero(seed, sizeof seed);
    sodium_memzero(sk, sizeof sk);

    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) {
        fprintf(stderr, "nkey_keypair: %s: %s\n", argv[1], strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    size_t len = strlen(seed_text);
    seed_text[len++] = '\n';
    ssize_t w = write(fd, seed_text, len);
    sodium_memzero(seed_text, sizeof seed_text);
    int closed = close(fd);
    if (w != (ssize_t)len || closed != 0) {
        fprintf(stderr, "nkey_keypair: cannot write %s\n", argv[1]);
        return 1;
    }
    printf("%s\n", public_text);
    return 0;
}
