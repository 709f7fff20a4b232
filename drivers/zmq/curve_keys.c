#include "drivers/zmq/curve_keys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "engine/safe_open.h"

void ts_curve_wipe(void *data, size_t len)
{
    /* A volatile pointer makes every store observable, so the clearing of a
     * buffer that is about to be freed is not optimised away. */
    volatile unsigned char *p = data;
    while (len-- > 0)
        *p++ = 0;
}

/* Trims in place; returns the meaningful text or NULL for a blank or
 * comment line. */
static char *key_text(char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    size_t len = strlen(line);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' ||
                       line[len - 1] == ' ' || line[len - 1] == '\t'))
        line[--len] = '\0';
    if (len == 0 || line[0] == '#')
        return NULL;
    return line;
}

/* The message names the length only: the text may be a secret key. */
static int decode_key(const char *text, unsigned char key[TS_CURVE_KEY_BYTES],
                      const char *path, size_t line_no, char *err,
                      size_t errlen)
{
    size_t len = strlen(text);
    if (len != TS_CURVE_Z85_CHARS) {
        snprintf(err, errlen, "%s:%zu: expected a %d-character Z85 CURVE key, "
                 "found %zu characters", path, line_no, TS_CURVE_Z85_CHARS,
                 len);
        return -1;
    }
    if (zmq_z85_decode(key, text) == NULL) {
        snprintf(err, errlen, "%s:%zu: not a valid Z85 CURVE key", path,
                 line_no);
        return -1;
    }
    return 0;
}

static FILE *open_key_file(const char *path, char *err, size_t errlen)
{
    char why[128];
    FILE *file = ts_fopen_regular(path, why, sizeof why);
    if (file == NULL)
        snprintf(err, errlen, "%s: cannot read: %s", path, why);
    return file;
}

/* Calls add(ctx, text, line_no) for each key line of `path` in order (the
 * callback decodes it) until one fails. Returns the lines read, or -1 with
 * err set. The line buffer is wiped: a key file may hold a secret key. */
typedef int (*key_line_fn)(void *ctx, const char *text, const char *path,
                           size_t line_no, char *err, size_t errlen);

static long read_key_lines(const char *path, key_line_fn add, void *ctx,
                           char *err, size_t errlen)
{
    FILE *file = open_key_file(path, err, errlen);
    if (file == NULL)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    size_t line_no = 0;
    int rc = 0;
    while (getline(&line, &cap, file) >= 0) {
        line_no++;
        char *text = key_text(line);
        if (text != NULL && add(ctx, text, path, line_no, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(file)) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        rc = -1;
    }
    if (line != NULL)
        ts_curve_wipe(line, cap);
    free(line);
    fclose(file);
    return rc != 0 ? -1 : (long)line_no;
}

typedef struct single_key {
    unsigned char *key;
    int found;
} single_key;

static int take_single_key(void *ctx, const char *text, const char *path,
                           size_t line_no, char *err, size_t errlen)
{
    single_key *single = ctx;
    if (single->found) {
        snprintf(err, errlen, "%s:%zu: a key file holds exactly one key",
                 path, line_no);
        return -1;
    }
    single->found = 1;
    return decode_key(text, single->key, path, line_no, err, errlen);
}

int ts_curve_read_key_file(const char *path,
                           unsigned char key[TS_CURVE_KEY_BYTES], char *err,
                           size_t errlen)
{
    single_key single = { .key = key };
    long lines = read_key_lines(path, take_single_key, &single, err, errlen);
    int rc = lines < 0 ? -1 : 0;
    if (rc == 0 && !single.found) {
        snprintf(err, errlen, "%s:%ld: no key in the file", path,
                 lines > 0 ? lines : 1);
        rc = -1;
    }
    if (rc != 0)
        ts_curve_wipe(key, TS_CURVE_KEY_BYTES);
    return rc;
}

typedef struct growing_list {
    ts_curve_allow_list *list;
    size_t allocated;
} growing_list;

static int append_key(void *ctx, const char *text, const char *path,
                      size_t line_no, char *err, size_t errlen)
{
    growing_list *grow = ctx;
    ts_curve_allow_list *list = grow->list;
    if (list->n_keys == grow->allocated) {
        size_t grown = grow->allocated > 0 ? grow->allocated * 2 : 8;
        void *keys = realloc(list->keys, grown * sizeof *list->keys);
        if (keys == NULL) {
            snprintf(err, errlen, "%s:%zu: out of memory", path, line_no);
            return -1;
        }
        list->keys = keys;
        grow->allocated = grown;
    }
    if (decode_key(text, list->keys[list->n_keys], path, line_no, err,
                   errlen) != 0)
        return -1;
    list->n_keys++;
    return 0;
}

int ts_curve_read_allow_list(const char *path, ts_curve_allow_list *list,
                             char *err, size_t errlen)
{
    list->keys = NULL;
    list->n_keys = 0;
    growing_list grow = { .list = list };
    if (read_key_lines(path, append_key, &grow, err, errlen) < 0) {
        ts_curve_allow_list_free(list);
        return -1;
    }
    return 0;
}

void ts_curve_allow_list_free(ts_curve_allow_list *list)
{
    if (list == NULL)
        return;
    free(list->keys);
    list->keys = NULL;
    list->n_keys = 0;
}

int ts_curve_allow_list_copy(ts_curve_allow_list *dst,
                             const ts_curve_allow_list *src)
{
    dst->keys = NULL;
    dst->n_keys = 0;
    if (src == NULL || src->n_keys == 0)
        return 0;
    dst->keys = malloc(src->n_keys * sizeof *dst->keys);
    if (dst->keys == NULL)
        return -1;
    memcpy(dst->keys, src->keys, src->n_keys * sizeof *dst->keys);
    dst->n_keys = src->n_keys;
    return 0;
}

int ts_curve_allow_list_contains(const ts_curve_allow_list *list,
                                 const unsigned char key[TS_CURVE_KEY_BYTES])
{
    for (size_t i = 0; i < list->n_keys; i++)
        if (memcmp(list->keys[i], key, TS_CURVE_KEY_BYTES) == 0)
            return 1;
    return 0;
}

int ts_curve_check_pair(const unsigned char secret_key[TS_CURVE_KEY_BYTES],
                        const unsigned char public_key[TS_CURVE_KEY_BYTES])
{
    char secret_text[TS_CURVE_Z85_CHARS + 1];
    char derived_text[TS_CURVE_Z85_CHARS + 1];
    unsigned char derived[TS_CURVE_KEY_BYTES];
    int rc = -1;
    if (zmq_z85_encode(secret_text, secret_key, TS_CURVE_KEY_BYTES) != NULL &&
        zmq_curve_public(derived_text, secret_text) == 0 &&
        zmq_z85_decode(derived, derived_text) != NULL)
        rc = memcmp(derived, public_key, TS_CURVE_KEY_BYTES) == 0 ? 0 : -1;
    ts_curve_wipe(secret_text, sizeof secret_text);
    return rc;
}

void ts_curve_fingerprint(const unsigned char key[TS_CURVE_KEY_BYTES],
                          char out[TS_CURVE_FINGERPRINT_CHARS + 1])
{
    for (int i = 0; i < TS_CURVE_FINGERPRINT_CHARS / 2; i++)
        snprintf(out + 2 * i, 3, "%02x", key[i]);
}

int ts_curve_client_setup(void *socket, const char *server_public_file,
                          const char *client_prefix, char *err,
                          size_t errlen)
{
    unsigned char server_public[TS_CURVE_KEY_BYTES];
    unsigned char client_public[TS_CURVE_KEY_BYTES];
    unsigned char client_secret[TS_CURVE_KEY_BYTES];
    size_t prefix_len = strlen(client_prefix);
    char *path = malloc(prefix_len + 5);
    if (path == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    if (ts_curve_read_key_file(server_public_file, server_public, err,
                               errlen) != 0)
        goto out;
    snprintf(path, prefix_len + 5, "%s.pub", client_prefix);
    if (ts_curve_read_key_file(path, client_public, err, errlen) != 0)
        goto out;
    snprintf(path, prefix_len + 5, "%s.key", client_prefix);
    if (ts_curve_read_key_file(path, client_secret, err, errlen) != 0)
        goto out;
    if (ts_curve_check_pair(client_secret, client_public) != 0) {
        snprintf(err, errlen, "%s.pub is not the public key of %s.key",
                 client_prefix, client_prefix);
        goto out;
    }
    if (zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, server_public,
                       TS_CURVE_KEY_BYTES) != 0 ||
        zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, client_public,
                       TS_CURVE_KEY_BYTES) != 0 ||
        zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, client_secret,
                       TS_CURVE_KEY_BYTES) != 0) {
        snprintf(err, errlen, "cannot enable CURVE on the socket: %s",
                 zmq_strerror(zmq_errno()));
        goto out;
    }
    rc = 0;
out:
    ts_curve_wipe(client_secret, sizeof client_secret);
    free(path);
    return rc;
}

void ts_curve_server_material_free(ts_curve_server_material *material)
{
    if (material == NULL)
        return;
    if (material->secret != NULL)
        ts_curve_wipe(material->secret, TS_CURVE_KEY_BYTES);
    free(material->secret);
    ts_curve_allow_list_free(&material->input_allow);
    ts_curve_allow_list_free(&material->output_allow);
    memset(material, 0, sizeof *material);
}

static int server_material_fail(ts_curve_server_material *material,
                                const char **blamed, const char *key)
{
    *blamed = key;
    ts_curve_server_material_free(material);
    return -1;
}

int ts_curve_load_server_material(const char *secret_file,
                                  const char *public_file,
                                  const char *input_allow_file,
                                  const char *output_allow_file,
                                  ts_curve_server_material *material,
                                  const char **blamed, char *err,
                                  size_t errlen)
{
    memset(material, 0, sizeof *material);
    struct stat st;
    if (stat(secret_file, &st) == 0 &&
        (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        snprintf(err, errlen, "%s: a secret key must not be accessible by "
                 "group or others (chmod 600)", secret_file);
        return server_material_fail(material, blamed,
                                    "server_secret_key_file");
    }
    material->secret = calloc(1, TS_CURVE_KEY_BYTES);
    if (material->secret == NULL) {
        snprintf(err, errlen, "%s: out of memory", secret_file);
        return server_material_fail(material, blamed,
                                    "server_secret_key_file");
    }
    if (ts_curve_read_key_file(secret_file, material->secret, err,
                               errlen) != 0)
        return server_material_fail(material, blamed,
                                    "server_secret_key_file");
    if (ts_curve_read_key_file(public_file, material->public_key, err,
                               errlen) != 0)
        return server_material_fail(material, blamed,
                                    "server_public_key_file");
    if (ts_curve_check_pair(material->secret, material->public_key) != 0) {
        snprintf(err, errlen, "%s is not the public key of %s", public_file,
                 secret_file);
        return server_material_fail(material, blamed,
                                    "server_public_key_file");
    }
    if (ts_curve_read_allow_list(input_allow_file, &material->input_allow,
                                 err, errlen) != 0)
        return server_material_fail(material, blamed,
                                    "input_allow_keys_file");
    if (output_allow_file != NULL) {
        if (ts_curve_read_allow_list(output_allow_file,
                                     &material->output_allow, err,
                                     errlen) != 0)
            return server_material_fail(material, blamed,
                                        "output_allow_keys_file");
        material->has_output_allow = 1;
    }
    return 0;
}
