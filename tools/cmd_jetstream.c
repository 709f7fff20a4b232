/* The CLI side of the JetStream mode (docs/scale-out.md):
 *   tracesan replay --jetstream URLS ...   producer: user u to partition
 *                                          p = FNV-1a(u) mod P
 *   tracesan jetstream outputs|ledger|changelog|status --server URLS
 *                                          read the streams back (tests,
 *                                          audits, the bench)
 * Both take --creds, --nkey-seed/--nkey-public, --tls-ca and
 * --tls-cert/--tls-key (the daemon's nats.* connection keys).
 * Every call blocks; this is a command-line tool. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "state/changelog.h"
#include "drivers/jetstream/jetstream_setup.h"
#include "ops/catalog.h"
#include "state/store.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/js_producer.h"

#define ERR_MAX 512
/* Exit status of a replay that sent everything but updates too large for
 * any message (as tools/cmd_replay.c). */
#define EXIT_REFUSED 2
#define MAX_SKIP_WARNINGS 100
/* Room for the message id header within the server's max_payload. */
#define HEADER_ROOM 256
/* nats.partitions' upper bound. */
#define MAX_PARTITIONS 4096

/* The nats.* options of both commands. NULL/0: not given, the daemon's
 * configuration (--config/-o) or the defaults decide. */
typedef struct nats_options {
    const char *servers;
    uint64_t partitions;
    uint64_t replicas;
    int partitions_given;
    int replicas_given;
    const char *creds;
    const char *nkey_seed;
    const char *nkey_public;
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
} nats_options;

#define NATS_SECURITY_OPTIONS(o)                                          \
    { "creds", 0, TS_ARG_STRING, .dest = &(o).creds },                    \
    { "nkey-seed", 0, TS_ARG_STRING, .dest = &(o).nkey_seed },            \
    { "nkey-public", 0, TS_ARG_STRING, .dest = &(o).nkey_public },        \
    { "tls-ca", 0, TS_ARG_STRING, .dest = &(o).tls_ca },                  \
    { "tls-cert", 0, TS_ARG_STRING, .dest = &(o).tls_cert },              \
    { "tls-key", 0, TS_ARG_STRING, .dest = &(o).tls_key }

#define SECURITY_USAGE                                                  \
    "connection (as the daemon's nats.* keys, docs/scale-out.md; each\n" \
    "option replaces the key of --config/-o):\n"                        \
    "  -c, --config FILE    the daemons' configuration: nats.servers,\n" \
    "                       nats.partitions, nats.replicas and the keys\n" \
    "                       below come from it\n"                       \
    "  -o, --override PATH=VALUE\n"                                     \
    "                       override its settings; repeatable\n"        \
    "  --creds FILE         credentials file (user JWT and NKey seed)\n" \
    "  --nkey-seed FILE     NKey seed file, with --nkey-public KEY "     \
    "(U...)\n"                                                          \
    "  --tls-ca FILE        CA certificates: the connection requires "   \
    "TLS\n"                                                             \
    "  --tls-cert FILE      client certificate chain, with --tls-key "   \
    "FILE\n"

/* The daemon's nats.* settings as --config/-o give them (the defaults
 * without), with the command line's options over them; the input limits
 * of the same configuration. *config keeps the strings alive (NULL
 * without --config/-o). -1 (reported) on an error. */
static int nats_settings(const ts_tool_common *common,
                         const nats_options *o, const char *command,
                         struct ts_nats_settings *nats,
                         ts_tool_input_limits *limits, ts_config **config)
{
    *config = NULL;
    ts_settings defaults;
    const ts_settings *settings = &defaults;
    ts_settings_defaults(&defaults);
    ts_nats_settings_defaults(nats);
    if (common->config_path != NULL || common->n_overrides > 0) {
        char err[ERR_MAX];
        *config = ts_config_load(common->config_path, common->overrides,
                                 common->n_overrides, err, sizeof err);
        if (*config == NULL) {
            fprintf(stderr, TS_TOOL_NAME " %s: %s\n", command, err);
            return -1;
        }
        settings = ts_config_settings(*config);
        *nats = *ts_nats_settings_of(*config);
    }
    limits->max_message_bytes = settings->max_message_bytes;
    limits->max_batch_updates = settings->max_batch_updates;
    if (o->servers != NULL)
        nats->servers = o->servers;
    if (o->partitions_given)
        nats->partitions = (size_t)o->partitions;
    if (o->replicas_given)
        nats->replicas = (size_t)o->replicas;
    const char *const given[] = { o->creds, o->nkey_seed, o->nkey_public,
                                  o->tls_ca, o->tls_cert, o->tls_key };
    const char **keys[] = { &nats->creds_file, &nats->nkey_seed_file,
                            &nats->nkey_public, &nats->tls_ca_file,
                            &nats->tls_cert_file, &nats->tls_key_file };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (given[i] != NULL)
            *keys[i] = given[i];
    const char *problem = NULL;
    if (nats->creds_file != NULL && nats->nkey_seed_file != NULL)
        problem = "--creds and --nkey-seed are exclusive";
    else if ((nats->nkey_seed_file != NULL) != (nats->nkey_public != NULL))
        problem = "--nkey-seed and --nkey-public go together";
    else if ((nats->tls_cert_file != NULL) != (nats->tls_key_file != NULL))
        problem = "--tls-cert and --tls-key go together";
    if (problem != NULL) {
        fprintf(stderr, TS_TOOL_NAME " %s: %s\n", command, problem);
        ts_config_free(*config);
        *config = NULL;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- replay */

void ts_replay_jetstream_usage(FILE *out)
{
    fputs(
        "JetStream mode (docs/scale-out.md):\n"
        "  " TS_TOOL_NAME " replay --jetstream URLS [--partitions P] "
        "[--replicas R] [--batch N]\n"
        "                 [--rate N] [--profile NAME] [--producer NAME]\n"
        "                 [connection options] IN.csv\n"
        "Publishes the rows of a CSV trace to the JetStream stream "
        "TRACESAN_IN,\n"
        "user u on subject tracesan.in.<p>, p = FNV-1a(u) mod P. Each "
        "partition's\n"
        "messages are stored in file order, also across a server's failure: "
        "a\n"
        "partition has one message unacknowledged at a time, and a refused "
        "or\n"
        "unanswered one is published again before the next.\n"
        "  -J, --jetstream URLS  the NATS servers (default: nats.servers)\n"
        "  -P, --partitions P    partitions, as the daemons' "
        "nats.partitions\n"
        "                        (default: from --config/-o, else 16)\n"
        "  -R, --replicas R      replicas of the streams when this command "
        "has\n"
        "                        to create them, as the daemons' "
        "nats.replicas\n"
        "                        (default: from --config/-o). Without "
        "either,\n"
        "                        streams that do not exist yet are not "
        "created:\n"
        "                        start a tracesand first, or say R.\n"
        "  -b, --batch N         updates per message (default 100)\n"
        "  -r, --rate N          send at most N points per second\n"
        "  -p, --profile NAME    profile for rows without one\n"
        "      --producer NAME   the name in each message's id, "
        "NAME.<p>.<n> (default\n"
        "                        replay-<time>-<pid>): the daemons process "
        "a partition's\n"
        "                        message n of a producer once, even when "
        "the broker\n"
        "                        stores it twice; a second replay of the "
        "same file\n"
        "                        (same --batch) under the same NAME is not "
        "processed\n"
        "                        again.\n"
        "                        Letters, digits, '-' and '_', at most 40.\n"
        SECURITY_USAGE
        "Exit status 0 once every message is stored, 2 when updates too "
        "large for\n"
        "a message were left out, 1 on an error.\n",
        out);
}

static void replay_jetstream_usage(FILE *out)
{
    fputs("usage: " TS_TOOL_NAME " replay --jetstream URLS [options] "
          "IN.csv\n\n", out);
    ts_replay_jetstream_usage(out);
}

/* Creates the streams when absent. Without the daemons' replica count
 * (--replicas, or --config/-o) a missing TRACESAN_IN is an error: a
 * stream made with a guessed R1 would stay unreplicated under a cluster's
 * daemons, which leave existing streams as they are. */
static int ensure_streams(ts_js_conn *conn, const struct ts_nats_settings *nats,
                          int replicas_known, int replicas_given)
{
    char err[ERR_MAX];
    jsStreamInfo *info = NULL;
    jsErrCode code = 0;
    natsStatus s = js_GetStreamInfo(&info, conn->js, TS_JS_STREAM_IN, NULL,
                                    &code);
    if (s == NATS_OK) {
        int64_t have = info->Config != NULL ? info->Config->Replicas : 0;
        if (replicas_given && have > 0 && (size_t)have != nats->replicas)
            fprintf(stderr, TS_TOOL_NAME " replay: warning: "
                    TS_JS_STREAM_IN " exists with %" PRId64 " replicas; "
                    "--replicas %zu changes nothing\n", have,
                    nats->replicas);
        /* The daemons list one subject per partition: a producer with
         * another P would send users to the wrong partitions (refused),
         * or to subjects no stream takes (refused by the server). */
        int exact = info->Config != NULL && info->Config->SubjectsLen > 0 &&
                    strchr(info->Config->Subjects[0], '*') == NULL;
        int theirs = exact ? info->Config->SubjectsLen : 0;
        jsStreamInfo_Destroy(info);
        if (exact && (size_t)theirs != nats->partitions) {
            fprintf(stderr, TS_TOOL_NAME " replay: " TS_JS_STREAM_IN " takes "
                    "%d partitions (the daemons' nats.partitions), not "
                    "--partitions %zu\n", theirs, nats->partitions);
            return -1;
        }
        return 0;
    }
    if (s != NATS_NOT_FOUND && code != JSStreamNotFoundErr) {
        ts_js_describe(err, sizeof err, "cannot read " TS_JS_STREAM_IN, s,
                       code);
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        return -1;
    }
    if (!replicas_known) {
        fprintf(stderr, TS_TOOL_NAME " replay: " TS_JS_STREAM_IN " does not "
                "exist yet: start a tracesand first, or give the daemons' "
                "nats.replicas with --replicas R (or their configuration "
                "with --config) so that the streams are created as they "
                "would create them\n");
        return -1;
    }
    if (ts_js_ensure_streams(conn, nats, NULL, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        return -1;
    }
    return 0;
}

static void pace(double rate, uint64_t points, const struct timespec *start)
{
    if (rate <= 0)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double ahead = (double)points / rate -
                   ((double)(now.tv_sec - start->tv_sec) +
                    (double)(now.tv_nsec - start->tv_nsec) / 1e9);
    if (ahead > 0.001)
        usleep((useconds_t)(ahead * 1e6));
}

/* Reads the trace into the producer. 0, 1 on an error (reported). */
static int produce(ts_js_producer *producer, ts_csv_reader *reader,
                   uint32_t partitions, const char *profile, double rate,
                   uint64_t *points, uint64_t *refused)
{
    char err[ERR_MAX];
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    ts_csv_row row;
    int rc;
    while ((rc = ts_csv_read(reader, &row, err, sizeof err)) != TS_CSV_EOF) {
        if (rc == TS_CSV_IO_ERROR) {
            fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
            return 1;
        }
        if (rc == TS_CSV_BAD_ROW) {
            fprintf(stderr, TS_TOOL_NAME " replay: line %zu skipped: %s\n",
                    row.line, err);
            continue;
        }
        uint32_t p = ts_partition_of(row.user, strlen(row.user), partitions);
        ts_input input = ts_csv_input(&row, profile);
        ts_replay_batch *batch = ts_js_producer_batch(producer, p);
        size_t before = batch->payload.len, bytes;
        if (ts_codec_encode_batch(&input, 1, &batch->payload) != 0) {
            fprintf(stderr, TS_TOOL_NAME " replay: out of memory\n");
            return 1;
        }
        int added = ts_js_producer_added(producer, p, before, &bytes, err,
                                         sizeof err);
        if (added < 0) {
            fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
            return 1;
        }
        if (added == TS_BATCH_TOO_LARGE) {
            if (++*refused <= MAX_SKIP_WARNINGS)
                fprintf(stderr, TS_TOOL_NAME " replay: line %zu: not sent: "
                        "the update takes %zu bytes, more than a message "
                        "may (%zu)\n", row.line, bytes, batch->max_bytes);
            continue;
        }
        ++*points;
        pace(rate, *points, &start);
    }
    if (ts_js_producer_finish(producer, err, sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        return 1;
    }
    return 0;
}

/* A producer name is a prefix of message ids (docs/scale-out.md,
 * "Producers"): kept to characters no id parser or subject treats
 * specially, as a profile's name. */
static int valid_producer_name(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= 40 && ts_config_plain_name(name);
}

int cmd_replay_jetstream(int argc, char **argv)
{
    nats_options o = { 0 };
    uint64_t batch = 100;
    double rate = 0;
    const char *producer_name = NULL;
    const ts_tool_option options[] = {
        { "jetstream", 'J', TS_ARG_STRING, .dest = &o.servers },
        { "producer", 0, TS_ARG_STRING, .dest = &producer_name },
        { "partitions", 'P', TS_ARG_U64, .dest = &o.partitions,
          .given = &o.partitions_given, .min = 1, .max = 4096 },
        { "replicas", 'R', TS_ARG_U64, .dest = &o.replicas,
          .given = &o.replicas_given, .min = 1, .max = 5 },
        { "batch", 'b', TS_ARG_U64, .dest = &batch, .min = 1,
          .max = 100000000 },
        { "rate", 'r', TS_ARG_POSITIVE, .dest = &rate },
        NATS_SECURITY_OPTIONS(o),
        { 0 },
    };
    const ts_tool_command command = {
        "replay", TS_OPT_CONFIG | TS_OPT_OVERRIDE | TS_OPT_PROFILE, options,
        1, "one input file", replay_jetstream_usage,
    };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    struct ts_nats_settings nats;
    ts_tool_input_limits limits;
    ts_config *config;
    if (producer_name != NULL && !valid_producer_name(producer_name)) {
        fprintf(stderr, TS_TOOL_NAME " replay: --producer '%s': letters, "
                "digits, '-' and '_' only, 1 to 40 of them\n",
                producer_name);
        return 1;
    }
    if (nats_settings(&common, &o, "replay", &nats, &limits, &config) != 0)
        return 1;
    int configured = config != NULL;
    int status = 1;
    ts_js_conn conn = { 0 };
    ts_js_producer *producer = NULL;
    char err[ERR_MAX];
    ts_csv_reader *reader = ts_csv_open(argv[first], err, sizeof err);
    if (reader == NULL) {
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        goto out;
    }
    if (batch > limits.max_batch_updates) {
        fprintf(stderr, TS_TOOL_NAME " replay: --batch %" PRIu64 " is more "
                "than the daemon takes in one message (input.max_batch_updates "
                "= %zu)\n", batch, limits.max_batch_updates);
        goto out;
    }
    if (ts_js_connect(&conn, &nats, "tracesan-replay", NULL, NULL, err,
                      sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        goto out;
    }
    if (ensure_streams(&conn, &nats, o.replicas_given || configured,
                       o.replicas_given) != 0)
        goto out;
    size_t max_bytes = limits.max_message_bytes;
    int64_t max_payload = natsConnection_GetMaxPayload(conn.nc);
    if (max_payload > HEADER_ROOM &&
        (size_t)(max_payload - HEADER_ROOM) < max_bytes)
        max_bytes = (size_t)(max_payload - HEADER_ROOM);
    char run[48];
    snprintf(run, sizeof run, "replay-%ld-%ld", (long)time(NULL),
             (long)getpid());
    if (producer_name != NULL)
        snprintf(run, sizeof run, "%s", producer_name);
    producer = ts_js_producer_new(conn.nc, (uint32_t)nats.partitions,
                                  (size_t)batch, max_bytes, run, err,
                                  sizeof err);
    if (producer == NULL) {
        fprintf(stderr, TS_TOOL_NAME " replay: %s\n", err);
        goto out;
    }
    uint64_t points = 0, refused = 0;
    status = produce(producer, reader, (uint32_t)nats.partitions,
                     common.profile, rate, &points, &refused);
    ts_js_producer_stats stats = ts_js_producer_get_stats(producer);
    if (stats.resent > 0)
        fprintf(stderr, TS_TOOL_NAME " replay: %" PRIu64 " messages refused "
                "or unanswered were published again, in order\n",
                stats.resent);
    if (status == 0)
        fprintf(stderr, TS_TOOL_NAME " replay: sent %" PRIu64 " points in %"
                PRIu64 " messages to %zu partitions\n", stats.updates,
                stats.messages, nats.partitions);
    if (status == 0 && refused > 0) {
        fprintf(stderr, TS_TOOL_NAME " replay: refused %" PRIu64 " updates "
                "larger than a message may be (%zu bytes)\n", refused,
                max_bytes);
        status = EXIT_REFUSED;
    }
out:
    ts_js_producer_free(producer);
    ts_js_close(&conn);
    ts_csv_close(reader);
    ts_config_free(config);
    return status;
}

/* ------------------------------------------------------------ reading */

#define OUTPUTS_HEADER                                                  \
    "seq,msg_id,kind,user,ts_ms,lat,lon,eps_point,eps_spent_window,"    \
    "eps_remaining,window_start_ms,reason"
#define LEDGER_HEADER "user,partition,profile,window_start_ms,window_ms,spent"
#define CHANGELOG_HEADER "seq,partition,kind,owner,epoch,last_input_seq"

/* One line of OUTPUTS_HEADER: the sanitized columns empty for a
 * rejection, the reason empty for a sanitized point. */
static int print_output(void *ctx, natsMsg *msg, uint64_t seq)
{
    (void)ctx;
    const char *id = "";
    natsMsgHeader_Get(msg, "Nats-Msg-Id", &id);
    const char *subject = natsMsg_GetSubject(msg);
    const uint8_t *data = (const uint8_t *)natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    if (strncmp(subject, "tracesan.density.", 17) == 0)
        return 0;  /* an estimate (DensityEstimate), not an outcome */
    if (strncmp(subject, "tracesan.out.", 13) == 0) {
        Tracesan__V1__SanitizedLocation *loc =
            tracesan__v1__sanitized_location__unpack(NULL, len, data);
        if (loc == NULL)
            return 0;
        char lat[40], lon[40];
        ts_csv_format_fixed7(loc->lat, lat, sizeof lat);
        ts_csv_format_fixed7(loc->lon, lon, sizeof lon);
        printf("%" PRIu64 ",%s,sanitized,", seq, id);
        ts_csv_write_field(stdout, loc->user_id != NULL ? loc->user_id : "");
        printf(",%" PRId64 ",%s,%s,%.12g,%.12g,%.12g,%" PRId64 ",\n",
               loc->timestamp_ms, lat, lon, loc->eps_point,
               loc->eps_spent_window, loc->eps_remaining,
               loc->window_start_ms);
        tracesan__v1__sanitized_location__free_unpacked(loc, NULL);
    } else {
        Tracesan__V1__Rejection *rej =
            tracesan__v1__rejection__unpack(NULL, len, data);
        if (rej == NULL)
            return 0;
        printf("%" PRIu64 ",%s,rejected,", seq, id);
        ts_csv_write_field(stdout, rej->user_id != NULL ? rej->user_id : "");
        printf(",%" PRId64 ",,,,,,,%s\n", rej->timestamp_ms,
               ts_tool_reason_name(rej->has_reason ? (int)rej->reason : 0));
        tracesan__v1__rejection__free_unpacked(rej, NULL);
    }
    return 0;
}

typedef struct ledger_ctx {
    ts_changelog_replica *replicas;      /* per partition, made on use */
    int changelog;               /* print records instead */
} ledger_ctx;

static int ledger_record(void *arg, natsMsg *msg, uint64_t seq)
{
    ledger_ctx *ctx = arg;
    const char *subject = natsMsg_GetSubject(msg);
    const char *dot = strrchr(subject, '.');
    uint64_t p = 0;
    if (dot == NULL || ts_tool_parse_u64(dot + 1, &p) != 0 ||
        p >= MAX_PARTITIONS)
        return 0;
    ts_changelog_header header;
    const void *data = natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    if (ts_changelog_decode(data, len, &header, NULL) < 0) {
        fprintf(stderr, TS_TOOL_NAME " jetstream: undecodable record %"
                PRIu64 "\n", seq);
        return 1;
    }
    if (ctx->changelog) {
        printf("%" PRIu64 ",%" PRIu64 ",%s,%.*s,%" PRIu64 ",%" PRIu64 "\n",
               seq, p, ts_changelog_kind_name(header.kind),
               (int)header.owner_len, header.owner, header.epoch,
               header.last_input_seq);
        return 0;
    }
    /* Parts count only with the delta that closes their chain, as the
     * daemons read them. */
    ts_changelog_replica *r = &ctx->replicas[p];
    if (r->records == NULL && ts_changelog_replica_init(r) != 0)
        return 1;
    return ts_changelog_replica_apply(r, data, len, seq, NULL) == 0 ? 0 : 1;
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

/* One line per stream: its name, messages, last sequence, replicas and
 * retention; then one per partition with inputs not yet acknowledged
 * (its backlog: stored and waiting, or delivered and not acknowledged). */
static int print_status(ts_js_conn *conn, uint32_t configured, char *err,
                        size_t errlen)
{
    static const char *const streams[] = { TS_JS_STREAM_IN, TS_JS_STREAM_OUT,
                                           TS_JS_STREAM_STATE };
    static const char *const retention[] = { "limits", "interest",
                                             "workqueue" };
    int work_queue = 0;
    uint32_t partitions = 0;
    for (size_t i = 0; i < 3; i++) {
        jsStreamInfo *info = NULL;
        jsErrCode code = 0;
        natsStatus s = js_GetStreamInfo(&info, conn->js, streams[i], NULL,
                                        &code);
        if (s != NATS_OK) {
            ts_js_describe(err, errlen, streams[i], s, code);
            return -1;
        }
        const jsStreamConfig *c = info->Config;
        unsigned policy = c != NULL ? (unsigned)c->Retention : 0;
        printf("stream=%s msgs=%" PRIu64 " last_seq=%" PRIu64
               " replicas=%" PRId64 " retention=%s\n", streams[i],
               info->State.Msgs, info->State.LastSeq,
               c != NULL ? c->Replicas : 0,
               policy < 3 ? retention[policy] : "?");
        if (i == 0 && c != NULL) {
            work_queue = c->Retention == js_WorkQueuePolicy;
            /* One subject per partition (tracesan.in.* before issue 25:
             * then nats.partitions says how many). */
            partitions = c->SubjectsLen > 1 ||
                                 (c->SubjectsLen == 1 &&
                                  strchr(c->Subjects[0], '*') == NULL)
                             ? (uint32_t)c->SubjectsLen : configured;
        }
        jsStreamInfo_Destroy(info);
    }
    uint64_t *backlog = calloc(partitions > 0 ? partitions : 1,
                               sizeof *backlog);
    if (backlog == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = ts_js_partition_backlog(conn->js, partitions, work_queue,
                                     backlog, err, errlen);
    for (uint32_t p = 0; rc == 0 && p < partitions; p++)
        if (backlog[p] > 0)
            printf("partition=%u pending=%" PRIu64 "\n", p, backlog[p]);
    free(backlog);
    return rc;
}

static int read_ledger(ts_js_conn *conn, int changelog, char *err,
                       size_t errlen)
{
    ts_changelog_replica *replicas = calloc(MAX_PARTITIONS, sizeof *replicas);
    if (replicas == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ledger_ctx ctx = { replicas, changelog };
    puts(changelog ? CHANGELOG_HEADER : LEDGER_HEADER);
    int rc = ts_js_read_stream(conn->js, TS_JS_STREAM_STATE, NULL, 0,
                               ledger_record, &ctx, NULL, err, errlen);
    for (uint32_t p = 0; p < MAX_PARTITIONS; p++) {
        if (replicas[p].records == NULL)
            continue;
        print_ctx pc = { p };
        if (rc == 0)
            ts_record_map_each(replicas[p].records, print_user, &pc);
        ts_changelog_replica_free(&replicas[p]);
    }
    free(replicas);
    return rc;
}

static void jetstream_usage(FILE *out)
{
    fputs("usage: " TS_TOOL_NAME " jetstream [--server URLS] "
          "[connection options]\n"
          "                 status|outputs|ledger|changelog\n"
          "  status     messages, last sequence, replicas and retention of\n"
          "             each stream; then partition=P pending=N for each\n"
          "             partition with N inputs not yet acknowledged\n"
          "  outputs    CSV of TRACESAN_OUT, with the header\n"
          "             " OUTPUTS_HEADER "\n"
          "             (a rejection has only its reason after ts_ms; seq is\n"
          "             the TRACESAN_OUT sequence, msg_id the output's\n"
          "             Nats-Msg-Id <partition>.<input seq>.<index>: the\n"
          "             TRACESAN_IN sequence of the input message, the\n"
          "             update's index in it)\n"
          "  ledger     CSV of the replicated ledger rebuilt from "
          "TRACESAN_STATE:\n"
          "             " LEDGER_HEADER "\n"
          "  changelog  CSV of TRACESAN_STATE's records:\n"
          "             " CHANGELOG_HEADER "\n"
          "  -s, --server URLS    the NATS servers (default: nats.servers)\n"
          SECURITY_USAGE, out);
}

int cmd_jetstream(int argc, char **argv)
{
    nats_options o = { 0 };
    const ts_tool_option options[] = {
        { "server", 's', TS_ARG_STRING, .dest = &o.servers },
        NATS_SECURITY_OPTIONS(o),
        { 0 },
    };
    const ts_tool_command command = {
        "jetstream", TS_OPT_CONFIG | TS_OPT_OVERRIDE, options, 1,
        "status, outputs, ledger or changelog", jetstream_usage,
    };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    static const char *const whats[] = { "status", "outputs", "ledger",
                                         "changelog" };
    const char *what = argv[first];
    size_t which = 0;
    while (which < 4 && strcmp(what, whats[which]) != 0)
        which++;
    if (which == 4) {
        fprintf(stderr, TS_TOOL_NAME " jetstream: unknown '%s': expected "
                "status, outputs, ledger or changelog\n", what);
        return 1;
    }
    struct ts_nats_settings nats;
    ts_tool_input_limits limits;
    ts_config *config;
    if (nats_settings(&common, &o, "jetstream", &nats, &limits, &config) != 0)
        return 1;
    ts_js_conn conn;
    char err[ERR_MAX];
    if (ts_js_connect(&conn, &nats, "tracesan-jetstream", NULL, NULL, err,
                      sizeof err) != 0) {
        fprintf(stderr, TS_TOOL_NAME " jetstream: %s\n", err);
        ts_config_free(config);
        return 1;
    }
    int rc;
    if (which == 0) {
        rc = print_status(&conn, (uint32_t)nats.partitions, err, sizeof err);
    } else if (which == 1) {
        puts(OUTPUTS_HEADER);
        rc = ts_js_read_stream(conn.js, TS_JS_STREAM_OUT, NULL, 0,
                               print_output, NULL, NULL, err, sizeof err);
    } else {
        rc = read_ledger(&conn, which == 3, err, sizeof err);
    }
    if (rc != 0)
        fprintf(stderr, TS_TOOL_NAME " jetstream: %s\n",
                rc < 0 ? err : "stopped");
    ts_js_close(&conn);
    ts_config_free(config);
    return rc == 0 ? 0 : 1;
}
