/* tracesan state: inspect, export and import a tracesand state store.
 *
 *   tracesan state --dir DIR [list]          users, one CSV row each
 *   tracesan state --dir DIR stats           sizes and totals
 *   tracesan state --dir DIR export          JSON lines, one user each
 *   tracesan state --dir DIR import FILE     JSON lines ('-' = stdin)
 *
 * `list` leaves out the last sanitized point even though it is public
 * output: an inventory of ledgers does not need locations. `export` carries
 * it, because a store restored without it would change what
 * on_exhausted = repeat publishes.
 *
 * `import` never lowers a ledger: users already present in the store are
 * kept and counted as skipped, so importing an old export cannot refund
 * budget.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state/store.h"
#include "tools/commands.h"

#define ERR_MAX 512
#define IMPORT_COMMIT_EVERY 10000
#define MAX_JSON_STRING 65536

static void state_usage(FILE *out)
{
    fputs("usage: " TS_TOOL_NAME " state --dir DIR [list|stats|export]\n"
          "       " TS_TOOL_NAME " state --dir DIR import FILE\n"
          "\n"
          "Inspect a tracesand state store (state.dir).\n"
          "  list    one CSV row per user: user,profile,window_start_ms,\n"
          "          window_ms,spent,last_ts_ms,state_bytes (no locations)\n"
          "  stats   schema version, user count, map and used sizes\n"
          "  export  every user as one JSON object per line\n"
          "  import  add users from an export; users already in the store\n"
          "          are kept (an import never lowers a ledger)\n"
          "\n"
          "options:\n"
          "  -d, --dir DIR           the state directory\n"
          "  -h, --help              show this help\n",
          out);
}

/* ------------------------------------------------------------ output */

static void csv_field(FILE *out, const char *s, size_t len)
{
    if (strcspn(s, ",\"\r\n") >= len) {
        fwrite(s, 1, len, out);
        return;
    }
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"')
            fputc('"', out);
        fputc(s[i], out);
    }
    fputc('"', out);
}

static void json_string(FILE *out, const char *s, size_t len)
{
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

typedef void (*print_fn)(FILE *out, const char *id, size_t id_len,
                         const ts_user_record *r);

typedef struct visit_state {
    FILE *out;
    print_fn print;          /* NULL: count only */
    size_t users;
    size_t bad;
    size_t record_bytes;
    double spent_total;
} visit_state;

/* Every record of the store: counted, decoded (one that does not decode
 * counted as bad) and printed by vs->print. */
static int visit(void *ctx, const char *id, size_t id_len, const void *bytes,
                 size_t len)
{
    visit_state *vs = ctx;
    ts_user_record r;
    vs->record_bytes += len;
    if (ts_record_decode(bytes, len, &r) != 0) {
        vs->bad++;
        return 0;
    }
    if (vs->print != NULL)
        vs->print(vs->out, id, id_len, &r);
    vs->users++;
    vs->spent_total += r.spent;
    return 0;
}

static void print_list(FILE *out, const char *id, size_t id_len,
                       const ts_user_record *r)
{
    csv_field(out, id, id_len);
    fputc(',', out);
    if (r->profile != NULL)
        csv_field(out, r->profile, strlen(r->profile));
    fprintf(out, ",%" PRId64 ",%" PRId64 ",%.9g,%" PRId64 ",%zu\n",
            r->window_start_ms, r->window_ms, r->spent, r->last_ts_ms,
            r->state_len);
}

static void print_export(FILE *out, const char *id, size_t id_len,
                         const ts_user_record *r)
{
    fputs("{\"user\":", out);
    json_string(out, id, id_len);
    fprintf(out, ",\"has_window\":%s", r->has_window ? "true" : "false");
    fputs(",\"profile\":", out);
    if (r->profile != NULL)
        json_string(out, r->profile, strlen(r->profile));
    else
        fputs("null", out);
    fprintf(out,
            ",\"window_start_ms\":%" PRId64 ",\"window_ms\":%" PRId64
            ",\"spent\":%.17g,\"last_ts_ms\":%" PRId64 ",\"has_last\":%s",
            r->window_start_ms, r->window_ms, r->spent, r->last_ts_ms,
            r->has_last ? "true" : "false");
    if (r->has_last)
        fprintf(out, ",\"last_lat\":%.17g,\"last_lon\":%.17g", r->last_lat,
                r->last_lon);
    fputs(",\"state\":\"", out);
    const unsigned char *state = r->state;
    for (size_t i = 0; i < r->state_len; i++)
        fprintf(out, "%02x", i < r->state_stored_len ? state[i] : 0);
    fputs("\"}\n", out);
}

/* ------------------------------------------------------------ import */

/* A flat JSON object of string, number, boolean and null values: exactly
 * what export writes. */
typedef struct json_field {
    char key[32];
    int is_string;
    char *text;          /* string value (decoded) or the raw literal */
    size_t len;
} json_field;

#define MAX_FIELDS 16

static void skip_space(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\r' || **p == '\n')
        (*p)++;
}

static int put_utf8(char *out, size_t *n, unsigned cp)
{
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xc0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp >= 0xd800 && cp <= 0xdfff) {
        return -1;
    } else {
        out[(*n)++] = (char)(0xe0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
    return 0;
}

/* Decodes a string starting after the opening quote into a new buffer. */
static char *parse_string(const char **p, size_t *len)
{
    char *out = malloc(MAX_JSON_STRING);
    if (out == NULL)
        return NULL;
    size_t n = 0;
    const char *s = *p;
    while (*s != '"') {
        if (*s == '\0' || n + 4 >= MAX_JSON_STRING)
            goto fail;
        if (*s != '\\') {
            out[n++] = *s++;
            continue;
        }
        s++;
        char c = *s++;
        switch (c) {
        case '"': case '\\': case '/': out[n++] = c; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp = 0;
            for (int i = 0; i < 4; i++) {
                char h = *s++;
                cp <<= 4;
                if (h >= '0' && h <= '9') cp |= (unsigned)(h - '0');
                else if (h >= 'a' && h <= 'f') cp |= (unsigned)(h - 'a' + 10);
                else if (h >= 'A' && h <= 'F') cp |= (unsigned)(h - 'A' + 10);
                else goto fail;
            }
            if (put_utf8(out, &n, cp) != 0)
                goto fail;
            break;
        }
        default:
            goto fail;
        }
    }
    *p = s + 1;
    out[n] = '\0';
    *len = n;
    return out;
fail:
    free(out);
    return NULL;
}

static void free_fields(json_field *fields, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(fields[i].text);
}

static int parse_object(const char *line, json_field *fields, size_t *count)
{
    const char *p = line;
    size_t n = 0;
    skip_space(&p);
    if (*p++ != '{')
        return -1;
    skip_space(&p);
    if (*p == '}') {
        *count = 0;
        return 0;
    }
    for (;;) {
        skip_space(&p);
        if (*p++ != '"' || n == MAX_FIELDS)
            goto fail;
        size_t klen;
        char *key = parse_string(&p, &klen);
        if (key == NULL)
            goto fail;
        if (klen >= sizeof fields[n].key) {
            free(key);
            goto fail;
        }
        memcpy(fields[n].key, key, klen + 1);
        free(key);
        skip_space(&p);
        if (*p++ != ':')
            goto fail;
        skip_space(&p);
        if (*p == '"') {
            p++;
            fields[n].is_string = 1;
            fields[n].text = parse_string(&p, &fields[n].len);
        } else {
            size_t l = strcspn(p, ",} \t\r\n");
            if (l == 0)
                goto fail;
            fields[n].is_string = 0;
            fields[n].text = strndup(p, l);
            fields[n].len = l;
            p += l;
        }
        if (fields[n].text == NULL)
            goto fail;
        n++;
        skip_space(&p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}')
            goto fail;
        skip_space(&p);
        if (*p != '\0')
            goto fail;
        *count = n;
        return 0;
    }
fail:
    free_fields(fields, n);
    return -1;
}

static const json_field *field(const json_field *fields, size_t n,
                               const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

static int field_int(const json_field *f, int64_t *out)
{
    if (f == NULL || f->is_string)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(f->text, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int field_double(const json_field *f, double *out)
{
    if (f == NULL || f->is_string)
        return -1;
    char *end;
    double v = strtod(f->text, &end);
    if (*end != '\0' || end == f->text)
        return -1;
    *out = v;
    return 0;
}

static int field_bool(const json_field *f, int *out)
{
    if (f == NULL || f->is_string)
        return -1;
    if (strcmp(f->text, "true") == 0)
        *out = 1;
    else if (strcmp(f->text, "false") == 0)
        *out = 0;
    else
        return -1;
    return 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Record from one export line; `state` receives the decoded bytes. */
static const char *record_from_fields(const json_field *fields, size_t n,
                                      ts_user_record *r,
                                      unsigned char **state)
{
    memset(r, 0, sizeof *r);
    const json_field *profile = field(fields, n, "profile");
    const json_field *hex = field(fields, n, "state");
    if (field_bool(field(fields, n, "has_window"), &r->has_window) != 0)
        return "has_window";
    if (profile != NULL && profile->is_string)
        r->profile = profile->text;
    else if (r->has_window)
        return "profile";
    if (field_int(field(fields, n, "window_start_ms"), &r->window_start_ms) ||
        field_int(field(fields, n, "window_ms"), &r->window_ms))
        return "window_start_ms/window_ms";
    if (field_double(field(fields, n, "spent"), &r->spent) != 0 ||
        !(r->spent >= 0.0))
        return "spent";
    if (field_int(field(fields, n, "last_ts_ms"), &r->last_ts_ms) != 0)
        return "last_ts_ms";
    if (field_bool(field(fields, n, "has_last"), &r->has_last) != 0)
        return "has_last";
    if (r->has_last &&
        (field_double(field(fields, n, "last_lat"), &r->last_lat) != 0 ||
         field_double(field(fields, n, "last_lon"), &r->last_lon) != 0))
        return "last_lat/last_lon";
    if (hex == NULL || !hex->is_string || hex->len % 2 != 0)
        return "state";
    *state = malloc(hex->len / 2 + 1);
    if (*state == NULL)
        return "state (out of memory)";
    for (size_t i = 0; i < hex->len / 2; i++) {
        int hi = hex_value(hex->text[2 * i]);
        int lo = hex_value(hex->text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return "state";
        (*state)[i] = (unsigned char)(hi << 4 | lo);
    }
    r->state = *state;
    r->state_len = hex->len / 2;
    r->state_stored_len = r->state_len;
    return NULL;
}

static int import_file(ts_store *store, const char *path)
{
    FILE *in = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (in == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s: %s\n", path, strerror(errno));
        return 1;
    }
    char err[ERR_MAX];
    char *line = NULL;
    size_t cap = 0;
    size_t line_no = 0, imported = 0, skipped = 0, in_txn = 0;
    unsigned char *buf = NULL;
    size_t buf_cap = 0;
    int status = 1;
    if (ts_store_begin(store, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        goto out;
    }
    while (getline(&line, &cap, in) != -1) {
        line_no++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue;
        json_field fields[MAX_FIELDS];
        size_t n;
        if (parse_object(line, fields, &n) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: line %zu: not a JSON object "
                    "of the export format\n", path, line_no);
            ts_store_abort(store);
            goto out;
        }
        const json_field *user = field(fields, n, "user");
        ts_user_record record;
        unsigned char *state = NULL;
        /* A key of the daemon's own records is no user's. */
        const char *bad = user == NULL || !user->is_string ||
                                  user->len == 0 ||
                                  ts_store_is_own_key(user->text, user->len)
                              ? "user"
                              : record_from_fields(fields, n, &record, &state);
        if (bad != NULL) {
            fprintf(stderr, TS_TOOL_NAME ": %s: line %zu: missing or invalid "
                    "'%s'\n", path, line_no, bad);
            free(state);
            free_fields(fields, n);
            ts_store_abort(store);
            goto out;
        }
        if (in_txn >= IMPORT_COMMIT_EVERY) {
            if (ts_store_commit(store, err, sizeof err) != 0 ||
                ts_store_begin(store, err, sizeof err) != 0) {
                fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
                free(state);
                free_fields(fields, n);
                goto out;
            }
            in_txn = 0;
        }
        const void *existing;
        size_t existing_len;
        int found = ts_store_get(store, user->text, user->len, &existing,
                                 &existing_len);
        int rc = 0;
        if (found < 0) {
            snprintf(err, sizeof err, "cannot read the store");
            rc = -1;
        } else if (found > 0) {
            skipped++;
        } else {
            size_t need = ts_record_encode(&record, buf, buf_cap);
            if (need > buf_cap) {
                unsigned char *grown = realloc(buf, need);
                if (grown == NULL) {
                    rc = -1;
                    snprintf(err, sizeof err, "out of memory");
                } else {
                    buf = grown;
                    buf_cap = need;
                    ts_record_encode(&record, buf, buf_cap);
                }
            }
            if (rc == 0 && need == 0) {
                rc = -1;
                snprintf(err, sizeof err, "record too large");
            }
            if (rc == 0)
                rc = ts_store_put(store, user->text, user->len, buf, need, err,
                                  sizeof err);
            if (rc == 0) {
                imported++;
                in_txn++;
            }
        }
        free(state);
        free_fields(fields, n);
        if (rc != 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: line %zu: %s\n", path, line_no,
                    err);
            ts_store_abort(store);
            goto out;
        }
    }
    if (ts_store_commit(store, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        goto out;
    }
    fprintf(stderr, "import: imported=%zu skipped_existing=%zu\n", imported,
            skipped);
    status = 0;
out:
    free(line);
    free(buf);
    if (in != stdin)
        fclose(in);
    return status;
}

/* -------------------------------------------------------------- main */

static int usage_error(const char *problem, const char *argument)
{
    if (argument != NULL)
        fprintf(stderr, TS_TOOL_NAME " state: %s '%s'\n", problem, argument);
    else
        fprintf(stderr, TS_TOOL_NAME " state: %s\n", problem);
    state_usage(stderr);
    return 1;
}

int cmd_state(int argc, char **argv)
{
    const char *dir = NULL;
    const ts_tool_option options[] = {
        { "dir", 'd', TS_ARG_STRING, .dest = &dir },
        { 0 },
    };
    const ts_tool_command command = { "state", 0, options, -1, NULL,
                                      state_usage };
    ts_tool_common common;
    int next = ts_tool_parse(&command, argc, argv, &common);
    if (next <= 0)
        return next == 0 ? 0 : 1;
    const char *action = next < argc ? argv[next++] : "list";
    const char *import_path = NULL;
    int import = strcmp(action, "import") == 0;
    if (import && next == argc)
        return usage_error("import needs a FILE", NULL);
    if (import)
        import_path = argv[next++];
    else if (strcmp(action, "list") != 0 && strcmp(action, "stats") != 0 &&
             strcmp(action, "export") != 0)
        return usage_error("unknown action", action);
    if (next != argc)
        return usage_error("unexpected argument", argv[next]);
    if (dir == NULL)
        return usage_error("--dir DIR is required", NULL);

    char err[ERR_MAX];
    /* Inspection never creates a store where there was none. The size only
     * matters for writing; LMDB keeps an existing larger map. */
    ts_store *store = ts_store_open(dir, TS_STORE_SYNC_FULL, 1024,
                                    import_path == NULL, err, sizeof err);
    if (store == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": %s\n", err);
        return 1;
    }
    int status = 0;
    visit_state vs = { .out = stdout };
    if (import_path != NULL) {
        status = import_file(store, import_path);
    } else if (strcmp(action, "stats") == 0) {
        ts_store_info info;
        if (ts_store_iterate(store, visit, &vs) != 0 ||
            ts_store_get_info(store, &info) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: cannot read the store\n", dir);
            status = 1;
        } else {
            printf("schema_version=%u\nusers=%zu\nundecodable=%zu\n"
                   "record_bytes=%zu\nspent_total=%.9g\nmap_size_bytes=%zu\n"
                   "used_bytes=%zu\npage_size=%zu\n",
                   info.schema_version, vs.users, vs.bad, vs.record_bytes,
                   vs.spent_total, info.map_size_bytes, info.used_bytes,
                   info.page_size);
        }
    } else {
        int export = strcmp(action, "export") == 0;
        if (!export)
            printf("user,profile,window_start_ms,window_ms,spent,last_ts_ms,"
                   "state_bytes\n");
        vs.print = export ? print_export : print_list;
        if (ts_store_iterate(store, visit, &vs) != 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: cannot read the store\n", dir);
            status = 1;
        }
        if (vs.bad > 0) {
            fprintf(stderr, TS_TOOL_NAME ": %s: %zu undecodable records "
                    "skipped\n", dir, vs.bad);
            status = 1;
        }
    }
    if (fflush(stdout) != 0)
        status = 1;
    ts_store_close(store);
    return status;
}
