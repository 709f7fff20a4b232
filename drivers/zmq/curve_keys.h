/* ZeroMQ CURVE key files: reading single keys and allow-lists, and the
 * client-side socket setup shared by the tools.
 *
 * Every key file is Z85 text (40 characters for a 32-byte key), the format
 * zmq_curve_keypair produces. A key file holds one key on one line; an
 * allow-list holds one public key per line, with blank lines and lines
 * starting with '#' ignored. Errors are "FILE:LINE: message" and never
 * quote key material, so they are safe to log even for secret keys.
 */
#ifndef TRACESAN_DRIVERS_ZMQ_CURVE_KEYS_H
#define TRACESAN_DRIVERS_ZMQ_CURVE_KEYS_H

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

/* Everything the daemon's CURVE sockets need, read from the four files
 * of the `security` settings. The secret lives on the heap so that copies
 * of the settings that point at it do not copy it. */
typedef struct ts_curve_server_material {
    unsigned char *secret;               /* TS_CURVE_KEY_BYTES, or NULL */
    unsigned char public_key[TS_CURVE_KEY_BYTES];
    ts_curve_allow_list input_allow;
    ts_curve_allow_list output_allow;
    int has_output_allow;                /* 0: any CURVE client may read */
} ts_curve_server_material;

/* Reads the key pair (the secret file must be mode 0600 or stricter, and
 * the public key must be its pair) and the allow-lists (output_allow_file
 * may be NULL). On failure returns -1, sets *blamed to the name of the
 * setting whose file is at fault ("server_secret_key_file", ...) and fills
 * err; the material is then freed. */
int ts_curve_load_server_material(const char *secret_file,
                                  const char *public_file,
                                  const char *input_allow_file,
                                  const char *output_allow_file,
                                  ts_curve_server_material *material,
                                  const char **blamed, char *err,
                                  size_t errlen);
/* Wipes the secret and frees everything (NULL-safe). */
void ts_curve_server_material_free(ts_curve_server_material *material);

/* Clears secret material in a way the compiler cannot drop. */
void ts_curve_wipe(void *data, size_t len);

#endif
