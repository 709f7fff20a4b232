/* The CLI side of the JetStream mode (docs/scale-out.md):
 *   tracesan replay --jetstream URLS ...   producer: user u to partition
 *                                          p = FNV-1a(u) mod P
 *   tracesan jetstream outputs|ledger|changelog|status --server URLS
 *                                          read the streams back (tests,
 *                                          audits, the bench)
 * Both take --creds, --nkey-seed/--nkey-public, --tls-ca and
 * --tls-cert/--tls-key (the daemon's nats.* connection keys).
 * Every call blocks; this is a command-line tool. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "state/changelog.h"
#include "drivers/jetstream/jetstream_setup.h"
#include "state/store.h"
#include "tools/commands.h"
#include "tools/csv.h"

#define ERR_MAX 512
#define DEFAULT_SERVERS "nats://127.0.0.1:4222"

static void nats_defaults(struct ts_nats_settings *nats, const char *servers,
                          long partitions, long replicas)
{
    ts_nats_settings_defaults(nats);
    nats->servers = servers;
    if (partitions > 0)
        nats->partitions = (size_t)partitions;
    if (replicas > 0)
        nats->replicas = (size_t)replicas;
}

/* Authentication and TLS, shared by both commands: the options fill the
 * daemon's nats.creds_file, nats.nkey_seed_file, nats.nkey_public,
 * nats.tls_ca_file, nats.tls_cert_file and nats.tls_key_file. */
enum {
    OPT_CREDS = 1000,
    OPT_NKEY_SEED,
    OPT_NKEY_PUBLIC,
    OPT_TLS_CA,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
};

#define SECURITY_LONG_OPTIONS                                          \
    { "creds", required_argument, NULL, OPT_CREDS },                   \
    { "nkey-seed", required_argument, NULL, OPT_NKEY_SEED },           \
    { "nkey-public", required_argument, NULL, OPT_NKEY_PUBLIC },       \
    { "tls-ca", required_argument, NULL, OPT_TLS_CA },                 \
    { "tls-cert", required_argument, NULL, OPT_TLS_CERT },             \
    { "tls-key", required_argument, NULL, OPT_TLS_KEY }

#define SECURITY_USAGE                                                  \
    "connection (as the daemon's nats.* keys, docs/scale-out.md):\n"    \
    "  --creds FILE         credentials file (user JWT and NKey seed)\n" \
    "  --nkey-seed FILE     NKey seed file, with --nkey-public KEY "     \
    "(U...)\n"                                                          \
    "  --tls-ca FILE        CA certificates: the connection requires "   \
    "TLS\n"                                                             \
    "  --tls-cert FILE      client certificate chain, with --tls-key "   \
    "FILE\n"

typedef struct security_opts {
    const char *creds;
    const char *nkey_seed;
    const char *nkey_public;
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
} security_opts;

/* 1 when c is one of SECURITY_LONG_OPTIONS (arg stored), else 0. */
static int security_option(security_opts *sec, int c, const char *arg)
{
    switch (c) {
    case OPT_CREDS: sec->creds = arg; return 1;
    case OPT_NKEY_SEED: sec->nkey_seed = arg; return 1;
    case OPT_NKEY_PUBLIC: sec->nkey_public = arg; return 1;
    case OPT_TLS_CA: sec->tls_ca = arg; return 1;
    case OPT_TLS_CERT: sec->tls_cert = arg; return 1;
    case OPT_TLS_KEY: sec->tls_key = arg; return 1;
    default: return 0;
    }
}

/* Checks the combination and copies it into nats; -1 (message printed)
 * when the options do not go together. */
static int security_apply(struct ts_nats_settings *nats,
                          const security_opts *sec, const char *command)
{
    const char *problem = NULL;
    if (sec->creds != NULL && sec->nkey_seed != NULL)
        problem = "--creds and --nkey-seed are exclusive";
    else if ((sec->nkey_seed != NULL) != (sec->nkey_public != NULL))
        problem = "--nkey-seed and --nkey-public go together";
    else if ((sec->tls_cert != NULL) != (sec->tls_key != NULL))
        problem = "--tls-cert and --tls-key go together";
    if (problem != NULL) {
        fprintf(stderr, TS_TOOL_NAME " %s: %s\n", command, problem);
        return -1;
    }
    nats->creds_file = sec->creds;
    nats->nkey_seed_file = sec->nkey_seed;
    nats->nkey_public = sec->nkey_public;
    nats->tls_ca_file = sec->tls_ca;
    nats->tls_cert_file = sec->tls_cert;
    nats->tls_key_file = sec->tls_key;
    return 0;
}

/* ------------------------------------------------------------- replay */

typedef struct pending_batch {
    ts_input *inputs;
    char **users;                /* owned copies: the CSV row is reused */
    char **profiles;
    size_t n;
} pending_batch;

static void batch_clear(pending_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->users[i]);
        free(b->profiles[i]);
    }
    b->n = 0;
}

/* Messages JetStream refused (no stream leader during a failover, ...)
 * are sent again from libnats' callback, as its documentation shows; the
 * message ids make a copy that did get stored a duplicate the stream
 * drops. */
#define RESEND_LIMIT 100000
static volatile long resends;

static void resend_refused(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    (void)closure;
    if (resends++ > RESEND_LIMIT)
        return;
    usleep(100000);
    js_PublishMsgAsync(js, &pae->Msg, NULL);
}

static int send_batch(ts_js_conn *conn, uint32_t p, pending_batch *b,
                      ts_buf *payload, uint64_t *messages, const char *run)
{
    if (b->n == 0)
        return 0;
    ts_buf_reset(payload);
    if (ts_codec_encode_batch(b->inputs, b->n, payload) != 0)
        return -1;
    char subject[64];
    char id[96];
    snprintf(subject, sizeof subject, TS_JS_SUBJECT_IN ".%u", p);
    snprintf(id, sizeof id, "%s.%" PRIu64, run, *messages);
    natsMsg *msg = NULL;
    natsStatus s = natsMsg_Create(&msg, subject, NULL,
                                  (const char *)payload->data,
                                  (int)payload->len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(msg, "Nats-Msg-Id", id);
    if (s == NATS_OK)
        s = js_PublishMsgAsync(conn->js, &msg, NULL);
    if (msg != NULL)
        natsMsg_Destroy(msg);
    batch_clear(b);
    if (s != NATS_OK) {
        fprintf(stderr, TS_TOOL_NAME " replay: publish failed: %s\n",
                natsStatus_GetText(s));
        return -1;
    }
    (*messages)++;
    return 0;
}

int cmd_replay_jetstream(int argc, char **argv)
{
    static const struct option options[] = {
        { "jetstream", required_argument, NULL, 'J' },
        { "partitions", required_argument, NULL, 'P' },
        { "replicas", required_argument, NULL, 'R' },
        { "batch", required_argument, NULL, 'b' },
        { "rate", required_argument, NULL, 'r' },
        { "profile", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' },
        SECURITY_LONG_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    const char *servers = DEFAULT_SERVERS;
    long partitions = 16, replicas = 1, batch = 100;
    double rate = 0;
    const char *profile = NULL;
    security_opts sec = { 0 };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "J:P:R:b:r:p:h", options, NULL)) !=
           -1) {
        switch (c) {
        case 'J': servers = optarg; break;
        case 'P': partitions = strtol(optarg, NULL, 10); break;
        case 'R': replicas = strtol(optarg, NULL, 10); break;
        case 'b': batch = strtol(optarg, NULL, 10); break;
        case 'r': rate = strtod(optarg, NULL); break;
        case 'p': profile = optarg; break;
        case 'h':
            printf("usage: " TS_TOOL_NAME " replay --jetstream URLS "
                   "[--partitions P] [--replicas R] [--batch N] [--rate N]\n"
                   "                       [--profile NAME] [connection "
                   "options] IN.csv\n"
                   "Publishes the rows of a CSV trace to the JetStream "
                   "stream TRACESAN_IN,\nuser u on subject tracesan.in.<p>, "
                   "p = FNV-1a(u) mod P (docs/scale-out.md).\n"
                   SECURITY_USAGE);
            return 0;
        default:
            if (security_option(&sec, c, optarg))
                break;
            return 1;
        }
    }
    if (optind + 1 != argc || partitions < 1 || partitions > 4096 ||
        batch < 1 || replicas < 1) {
        fprintf(stderr, TS_TOOL_NAME " replay --jetstream: expected valid "
                "--partitions/--batch and one input file\n");
        return 1;
    }
    char err[ERR_MAX];
    ts_csv_reader *reader = ts_csv_open(argv[optind], err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        return 1;
    }
    struct ts_nats_settings nats;
    nats_defaults(&nats, servers, partitions, replicas);
    if (security_apply(&nats, &sec, "replay") != 0) {
        ts_csv_close(reader);
        return 1;
    }
    ts_js_conn conn;
    char run[48];
    snprintf(run, sizeof run, "replay-%ld-%ld", (long)time(NULL),
             (long)getpid());
    if (ts_js_connect(&conn, &nats, "tracesan-replay", resend_refused, NULL,
                      err, sizeof err) != 0 ||
        ts_js_ensure_streams(&conn, &nats, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        ts_csv_close(reader);
        return 1;
    }
    pending_batch *batches = calloc((size_t)partitions, sizeof *batches);
    int status = 0;
    for (long p = 0; p < partitions && batches != NULL; p++) {
        batches[p].inputs = calloc((size_t)batch, sizeof(ts_input));
        batches[p].users = calloc((size_t)batch, sizeof(char *));
        batches[p].profiles = calloc((size_t)batch, sizeof(char *));
        if (batches[p].inputs == NULL || batches[p].users == NULL ||
            batches[p].profiles == NULL)
            status = 1;
    }
    ts_buf payload = { 0 };
    uint64_t points = 0, messages = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    ts_csv_row row;
    int rc;
    while (status == 0 && batches != NULL &&
           (rc = ts_csv_read(reader, &row, err, sizeof err)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
            status = 1;
            break;
        }
        if (rc == TS_CSV_BAD_ROW) {
            fprintf(stderr, TS_TOOL_NAME " replay: line %zu skipped: %s\n",
                    row.line, err);
            continue;
        }
        uint32_t p = ts_partition_of(row.user, strlen(row.user),
                                     (uint32_t)partitions);
        pending_batch *b = &batches[p];
        const char *prof = row.profile != NULL ? row.profile : profile;
        b->users[b->n] = strdup(row.user);
        b->profiles[b->n] = prof != NULL ? strdup(prof) : NULL;
        b->inputs[b->n] = (ts_input){
            .user_id = b->users[b->n], .ts_ms = row.ts_ms, .lat = row.lat,
            .lon = row.lon, .has_accuracy = row.has_accuracy,
            .accuracy_m = row.accuracy_m, .profile = b->profiles[b->n],
        };
        b->n++;
        points++;
        if (b->n == (size_t)batch &&
            send_batch(&conn, p, b, &payload, &messages, run) != 0)
            status = 1;
        if (rate > 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            double ahead = (double)points / rate -
                           ((double)(now.tv_sec - start.tv_sec) +
                            (double)(now.tv_nsec - start.tv_nsec) / 1e9);
            if (ahead > 0.001)
                usleep((useconds_t)(ahead * 1e6));
        }
    }
    for (long p = 0; p < partitions && status == 0; p++)
        if (send_batch(&conn, (uint32_t)p, &batches[p], &payload,
                       &messages, run) != 0)
            status = 1;
    /* Unanswered publishes (their answer lost with a server) are sent
     * again until every one is acknowledged. */
    natsStatus done = NATS_TIMEOUT;
    for (int attempt = 0; status == 0 && attempt < 12; attempt++) {
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = 10000;
        done = js_PublishAsyncComplete(conn.js, &po);
        if (done != NATS_TIMEOUT)
            break;
        natsMsgList pending = { 0 };
        if (js_PublishAsyncGetPendingList(&pending, conn.js) == NATS_OK) {
            for (int i = 0; i < pending.Count; i++)
                js_PublishMsgAsync(conn.js, &pending.Msgs[i], NULL);
            natsMsgList_Destroy(&pending);
        }
    }
    if (status == 0 && done != NATS_OK) {
        fprintf(stderr, TS_TOOL_NAME " replay: not every message was "
                "acknowledged by JetStream\n");
        status = 1;
    }
    if (status == 0)
        fprintf(stderr, TS_TOOL_NAME " replay: sent %" PRIu64 " points in %"
                PRIu64 " messages to %ld partitions\n", points, messages,
                partitions);
    for (long p = 0; batches != NULL && p < partitions; p++) {
        batch_clear(&batches[p]);
        free(batches[p].inputs);
        free(batches[p].users);
        free(batches[p].profiles);
    }
    free(batches);
    ts_buf_free(&payload);
    ts_js_close(&conn);
    ts_csv_close(reader);
    return status;
}

/* ------------------------------------------------------------ reading */

static int print_output(void *ctx, natsMsg *msg, uint64_t seq)
{
    (void)ctx;
    const char *id = "";
    natsMsgHeader_Get(msg, "Nats-Msg-Id", &id);
    const char *subject = natsMsg_GetSubject(msg);
    const uint8_t *data = (const uint8_t *)natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    if (strncmp(subject, "tracesan.out.", 13) == 0) {
        Tracesan__V1__SanitizedLocation *loc =
            tracesan__v1__sanitized_location__unpack(NULL, len, data);
        if (loc == NULL)
            return 0;
        printf("%" PRIu64 ",%s,sanitized,%s,%" PRId64 ",%.12g,%.12g,%.12g,%"
               PRId64 "\n", seq, id, loc->user_id != NULL ? loc->user_id : "",
               loc->timestamp_ms, loc->eps_point, loc->eps_spent_window,
               loc->eps_remaining, loc->window_start_ms);
        tracesan__v1__sanitized_location__free_unpacked(loc, NULL);
    } else {
        Tracesan__V1__Rejection *rej =
            tracesan__v1__rejection__unpack(NULL, len, data);
        if (rej == NULL)
            return 0;
        printf("%" PRIu64 ",%s,rejected,%s,%" PRId64 ",0,0,0,%d\n", seq, id,
               rej->user_id != NULL ? rej->user_id : "", rej->timestamp_ms,
               (int)rej->reason);
        tracesan__v1__rejection__free_unpacked(rej, NULL);
    }
    return 0;
}

typedef struct ledger_ctx {
    ts_record_map **maps;        /* per partition */
    uint32_t partition;
    int changelog;               /* print records instead */
} ledger_ctx;

static int ledger_user(void *arg, const char *id, size_t id_len,
                       const void *record, size_t len)
{
    ledger_ctx *ctx = arg;
    return ts_record_map_put(ctx->maps[ctx->partition], id, id_len, record,
                             len) == 0 ? 0 : 1;
}

static int ledger_record(void *arg, natsMsg *msg, uint64_t seq)
{
    ledger_ctx *ctx = arg;
    const char *subject = natsMsg_GetSubject(msg);
    const char *dot = strrchr(subject, '.');
    uint32_t p = dot != NULL ? (uint32_t)strtoul(dot + 1, NULL, 10) : 0;
    if (p >= 4096)
        return 0;
    ts_changelog_header header;
    ts_changelog_visitor visitor = { ctx, NULL, NULL };
    const void *data = natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    if (ts_changelog_decode(data, len, &header, &visitor) < 0) {
        fprintf(stderr, TS_TOOL_NAME " jetstream: undecodable record %"
                PRIu64 "\n", seq);
        return 1;
    }
    if (ctx->changelog) {
        static const char *const kinds[] = { "", "delta", "snapshot",
                                             "fence" };
        printf("%" PRIu64 ",%u,%s,%.*s,%" PRIu64 ",%" PRIu64 "\n", seq, p,
               kinds[header.kind], (int)header.owner_len, header.owner,
               header.epoch, header.last_input_seq);
        return 0;
    }
    if (ctx->maps[p] == NULL && (ctx->maps[p] = ts_record_map_new()) == NULL)
        return 1;
    if (header.kind == TS_CHANGELOG_SNAPSHOT)
        ts_record_map_clear(ctx->maps[p]);
    ctx->partition = p;
    visitor.user = ledger_user;
    return ts_changelog_decode(data, len, &header, &visitor) == 0 ? 0 : 1;
}

typedef struct print_ctx {
    uint32_t partition;
} print_ctx;

static int print_user(void *arg, const char *id, size_t id_len,
                      const void *record, size_t len)
{
    print_ctx *ctx = arg;
    ts_user_record r;
    if (ts_record_decode(record, len, &r) != 0)
        return 0;
    printf("%.*s,%u,%s,%" PRId64 ",%" PRId64 ",%.12g\n", (int)id_len, id,
           ctx->partition, r.profile != NULL ? r.profile : "",
           r.window_start_ms, r.window_ms, r.spent);
    return 0;
}

/* One line per stream: its name, messages and last sequence. */
static int print_status(ts_js_conn *conn, char *err, size_t errlen)
{
    static const char *const streams[] = { TS_JS_STREAM_IN, TS_JS_STREAM_OUT,
                                           TS_JS_STREAM_STATE };
    for (size_t i = 0; i < 3; i++) {
        jsStreamInfo *info = NULL;
        jsErrCode code = 0;
        natsStatus s = js_GetStreamInfo(&info, conn->js, streams[i], NULL,
                                        &code);
        if (s != NATS_OK) {
            ts_js_describe(err, errlen, streams[i], s, code);
            return -1;
        }
        printf("stream=%s msgs=%" PRIu64 " last_seq=%" PRIu64 "\n",
               streams[i], info->State.Msgs, info->State.LastSeq);
        jsStreamInfo_Destroy(info);
    }
    return 0;
}

int cmd_jetstream(int argc, char **argv)
{
    static const struct option options[] = {
        { "server", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' },
        SECURITY_LONG_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    const char *servers = DEFAULT_SERVERS;
    security_opts sec = { 0 };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:h", options, NULL)) != -1) {
        switch (c) {
        case 's': servers = optarg; break;
        case 'h':
            printf("usage: " TS_TOOL_NAME " jetstream [--server URLS] "
                   "[connection options]\n"
                   "                 status|outputs|ledger|changelog\n"
                   "  status     messages and last sequence of each stream\n"
                   "  outputs    CSV of TRACESAN_OUT: seq,msg_id,kind,user,"
                   "ts_ms,eps_point,eps_spent_window,\n"
                   "             eps_remaining,window_start_ms|reason\n"
                   "  ledger     CSV of the replicated ledger rebuilt from "
                   "TRACESAN_STATE:\n"
                   "             user,partition,profile,window_start_ms,"
                   "window_ms,spent\n"
                   "  changelog  CSV of TRACESAN_STATE's records: seq,"
                   "partition,kind,owner,epoch,last_input_seq\n"
                   SECURITY_USAGE);
            return 0;
        default:
            if (security_option(&sec, c, optarg))
                break;
            return 1;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, TS_TOOL_NAME " jetstream: expected status, outputs, "
                "ledger or changelog\n");
        return 1;
    }
    const char *what = argv[optind];
    int status_only = strcmp(what, "status") == 0;
    int outputs = strcmp(what, "outputs") == 0;
    int ledger = strcmp(what, "ledger") == 0;
    int changelog = strcmp(what, "changelog") == 0;
    if (!outputs && !ledger && !changelog && !status_only) {
        fprintf(stderr, TS_TOOL_NAME " jetstream: unknown '%s'\n", what);
        return 1;
    }
    struct ts_nats_settings nats;
    nats_defaults(&nats, servers, 0, 0);
    if (security_apply(&nats, &sec, "jetstream") != 0)
        return 1;
    ts_js_conn conn;
    char err[ERR_MAX];
    if (ts_js_connect(&conn, &nats, "tracesan-jetstream", NULL, NULL, err,
                      sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " jetstream: %s\n", err);
        return 1;
    }
    int rc;
    if (status_only) {
        rc = print_status(&conn, err, sizeof err);
    } else if (outputs) {
        rc = ts_js_read_stream(&conn, TS_JS_STREAM_OUT, NULL, print_output,
                               NULL, err, sizeof err);
    } else {
        ts_record_map **maps = calloc(4096, sizeof *maps);
        ledger_ctx ctx = { maps, 0, changelog };
        rc = maps == NULL ? -1
                          : ts_js_read_stream(&conn, TS_JS_STREAM_STATE, NULL,
                                              ledger_record, &ctx, err,
                                              sizeof err);
        for (uint32_t p = 0; maps != NULL && p < 4096; p++) {
            if (maps[p] == NULL)
                continue;
            print_ctx pc = { p };
            if (rc == 0)
                ts_record_map_each(maps[p], print_user, &pc);
            ts_record_map_free(maps[p]);
        }
        free(maps);
    }
    if (rc != 0)
        fprintf(stderr, TS_TOOL_NAME " jetstream: %s\n",
                rc < 0 ? err : "stopped");
    ts_js_close(&conn);
    return rc == 0 ? 0 : 1;
}
