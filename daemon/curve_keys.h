/* ZeroMQ CURVE key files: reading single keys and allow-lists, and the
 * client-side socket setup shared by the tools.
 *
 * Every key file is Z85 text (40 characters for a 32-byte key), the format
 * zmq_curve_keypair produces. A key file holds one key on one line; an
 * allow-list holds one public key per line, with blank lines and lines
 * starting with '#' ignored. Errors are "FILE:LINE: message" and never
 * quote key material, so they are safe to log even for secret keys.
 */
#ifndef TRACESAN_DAEMON_CURVE_KEYS_H
#define TRACESAN_DAEMON_CURVE_KEYS_H

#include <stddef.h>

#define TS_CURVE_KEY_BYTES 32
#define TS_CURVE_Z85_CHARS 40
/* Hex of the first 4 key bytes: enough to tell keys apart in a log. */
#define TS_CURVE_FINGERPRINT_CHARS 8

typedef struct ts_curve_allow_list {
    unsigned char (*keys)[TS_CURVE_KEY_BYTES];
    size_t n_keys;
} ts_curve_allow_list;

/* Reads the one key in PATH into key (binary). 0, or -1 with err filled. */
int ts_curve_read_key_file(const char *path,
                           unsigned char key[TS_CURVE_KEY_BYTES], char *err,
                           size_t errlen);

/* Reads an allow-list (may be empty: then nobody is allowed). The caller
 * frees it with ts_curve_allow_list_free. 0, or -1 with err filled. */
int ts_curve_read_allow_list(const char *path, ts_curve_allow_list *list,
                             char *err, size_t errlen);
void ts_curve_allow_list_free(ts_curve_allow_list *list);
/* Deep copy; 0, or -1 when out of memory. */
int ts_curve_allow_list_copy(ts_curve_allow_list *dst,
                             const ts_curve_allow_list *src);
int ts_curve_allow_list_contains(const ts_curve_allow_list *list,
                                 const unsigned char key[TS_CURVE_KEY_BYTES]);

/* 0 when public_key belongs to secret_key. */
int ts_curve_check_pair(const unsigned char secret_key[TS_CURVE_KEY_BYTES],
                        const unsigned char public_key[TS_CURVE_KEY_BYTES]);

void ts_curve_fingerprint(const unsigned char key[TS_CURVE_KEY_BYTES],
                          char out[TS_CURVE_FINGERPRINT_CHARS + 1]);

/* Makes `socket` a CURVE client of the server whose public key is in
 * server_public_file, using the client pair PREFIX.key/PREFIX.pub (as
 * written by `tracesan keygen --out PREFIX`). Call before connecting.
 * 0, or -1 with err filled. */
int ts_curve_client_setup(void *socket, const char *server_public_file,
                          const char *client_prefix, char *err,
                          size_t errlen);

/* Clears secret material in a way the compiler cannot drop. */
void ts_curve_wipe(void *data, size_t len);

#endif
