/* tracesan keygen: a CURVE key pair for tracesand or one of its clients.
 *
 * PREFIX.key holds the secret key and is created 0600 with O_EXCL, so an
 * existing key is never overwritten and the secret is never readable by
 * others, not even for an instant. PREFIX.pub holds the public key (0644):
 * it goes into the daemon's allow-list, or to clients as the server key.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "drivers/zmq/curve_keys.h"
#include "tools/commands.h"

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " keygen --out PREFIX\n"
        "\n"
        "Writes a new ZeroMQ CURVE key pair as Z85 text: PREFIX.key (secret,\n"
        "mode 0600) and PREFIX.pub (public, mode 0644). Refuses to overwrite\n"
        "either file.\n"
        "\n"
        "For tracesand: point security.server_secret_key_file and\n"
        "security.server_public_key_file at them and give PREFIX.pub to\n"
        "clients (--curve-server-key). For a client: add PREFIX.pub to the\n"
        "daemon's allow-list and pass --curve-key PREFIX to replay/tail.\n"
        "\n"
        "options:\n"
        "      --out PREFIX        path prefix of the two files\n"
        "  -h, --help              show this help\n",
        out);
}

/* Writes all of text to a new file; on failure removes what it created. */
static int write_new_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        fprintf(stderr, TS_TOOL_NAME ": keygen: cannot create %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    /* The umask may have removed bits from `mode`; set it exactly. */
    size_t len = strlen(text);
    size_t done = 0;
    int rc = fchmod(fd, mode);
    while (rc == 0 && done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = -1;
            break;
        }
        done += (size_t)n;
    }
    if (rc == 0)
        rc = fsync(fd);
    int saved = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0) {
        fprintf(stderr, TS_TOOL_NAME ": keygen: cannot write %s: %s\n", path,
                strerror(saved));
        unlink(path);
    }
    return rc;
}

int cmd_keygen(int argc, char **argv)
{
    const char *prefix = NULL;
    const ts_tool_option options[] = {
        { "out", 0, TS_ARG_STRING, .dest = &prefix },
        { 0 },
    };
    const ts_tool_command command = { "keygen", 0, options, 0, NULL, usage };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    if (prefix == NULL || prefix[0] == '\0') {
        fprintf(stderr, TS_TOOL_NAME " keygen: --out PREFIX is required\n");
        usage(stderr);
        return 1;
    }
    if (!zmq_has("curve")) {
        fprintf(stderr, TS_TOOL_NAME ": keygen: this libzmq was built "
                "without CURVE support\n");
        return 1;
    }
    size_t path_len = strlen(prefix) + 5;
    char *secret_path = malloc(path_len);
    char *public_path = malloc(path_len);
    char public_text[TS_CURVE_Z85_CHARS + 2];
    char secret_text[TS_CURVE_Z85_CHARS + 2];
    int status = 1;
    if (secret_path == NULL || public_path == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": keygen: out of memory\n");
        goto out;
    }
    snprintf(secret_path, path_len, "%s.key", prefix);
    snprintf(public_path, path_len, "%s.pub", prefix);
    if (zmq_curve_keypair(public_text, secret_text) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": keygen: cannot generate a key pair: "
                "%s\n", zmq_strerror(zmq_errno()));
        goto out;
    }
    strcat(public_text, "\n");
    strcat(secret_text, "\n");
    /* The public file first: if it already exists nothing is written, and
     * a secret key is never left without its public half. */
    if (write_new_file(public_path, public_text, 0644) != 0)
        goto out;
    if (write_new_file(secret_path, secret_text, 0600) != 0) {
        unlink(public_path);
        goto out;
    }
    fprintf(stderr, TS_TOOL_NAME ": keygen: wrote %s (secret) and %s "
            "(public)\n", secret_path, public_path);
    status = 0;
out:
    ts_curve_wipe(secret_text, sizeof secret_text);
    free(secret_path);
    free(public_path);
    return status;
}
