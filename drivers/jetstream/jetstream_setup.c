#include "drivers/jetstream/jetstream_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/safe_open.h"

/* Handshakes tried when the server refuses an NKey or creds signature. */
#define AUTH_ATTEMPTS 4

#define MAX_SERVERS 32
/* "tracesan.in.<p>", p printed as a size_t of up to 20 digits */
#define SUBJECT_NAME_MAX 40
#define SUBSCRIBE_ATTEMPTS 5

void ts_js_describe(char *err, size_t errlen, const char *what,
                    natsStatus status, jsErrCode code)
{
    const char *last = nats_GetLastError(NULL);
    char js_code[48] = "";
    if (code != 0)
        snprintf(js_code, sizeof js_code, " (jetstream error %d)", (int)code);
    snprintf(err, errlen, "%s: %s%s%s%s", what, natsStatus_GetText(status),
             last != NULL ? ": " : "", last != NULL ? last : "", js_code);
}

static int fail(char *err, size_t errlen, const char *what, natsStatus s)
{
    ts_js_describe(err, errlen, what, s, 0);
    return -1;
}

int ts_js_connect(ts_js_conn *conn, const struct ts_nats_settings *nats,
                  const char *name, jsPubAckErrHandler on_publish_error,
                  void *closure, char *err, size_t errlen)
{
    memset(conn, 0, sizeof *conn);
    /* libnats opens these itself, and a FIFO would block it: refuse what
     * is not a regular file first (issue 25, item 5). A missing one is
     * left to libnats, which says so. */
    const struct { const char *key, *path; } files[] = {
        { "nats.creds_file", nats->creds_file },
        { "nats.nkey_seed_file", nats->nkey_seed_file },
        { "nats.tls_ca_file", nats->tls_ca_file },
        { "nats.tls_cert_file", nats->tls_cert_file },
        { "nats.tls_key_file", nats->tls_key_file },
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char why[128];
        if (files[i].path != NULL &&
            ts_check_regular(files[i].path, 1, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s %s: %s", files[i].key, files[i].path,
                     why);
            return -1;
        }
    }
    char *urls = strdup(nats->servers != NULL ? nats->servers : "");
    const char *servers[MAX_SERVERS];
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(urls, ", ", &save);
         tok != NULL && n < MAX_SERVERS; tok = strtok_r(NULL, ", ", &save))
        servers[n++] = tok;
    /* Unpaired keys never get here: the configuration check refuses them
     * with their line (engine/config.c), the CLI with its option names
     * (tools/cmd_jetstream.c); libnats would refuse them too. */
    /* Which option failed, for the error message. */
    char what[320] = "nats options";
    natsOptions *opts = NULL;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK && n > 0)
        s = natsOptions_SetServers(opts, servers, n);
    if (s == NATS_OK && name != NULL)
        s = natsOptions_SetName(opts, name);
    /* The daemon outlives server restarts and failovers: reconnect for
     * ever, quickly, and buffer what is published meanwhile. */
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(opts, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(opts, 250);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(opts, 2000);
    if (s == NATS_OK && nats->creds_file != NULL) {
        snprintf(what, sizeof what, "nats.creds_file %s", nats->creds_file);
        s = natsOptions_SetUserCredentialsFromFiles(opts, nats->creds_file,
                                                    NULL);
    }
    if (s == NATS_OK && nats->nkey_seed_file != NULL &&
        nats->creds_file == NULL) {
        snprintf(what, sizeof what, "nats.nkey_seed_file %s",
                 nats->nkey_seed_file);
        s = natsOptions_SetNKeyFromSeed(opts, nats->nkey_public,
                                        nats->nkey_seed_file);
    }
    /* A tls:// URL alone would let libnats fall back to clear text with a
     * server that offers no TLS: asking for TLS makes that an error. */
    int secure = nats->tls_ca_file != NULL ||
                 strstr(nats->servers != NULL ? nats->servers : "",
                        "tls://") != NULL;
    if (s == NATS_OK && secure) {
        snprintf(what, sizeof what, "TLS");
        s = natsOptions_SetSecure(opts, true);
    }
    if (s == NATS_OK && nats->tls_ca_file != NULL) {
        snprintf(what, sizeof what, "nats.tls_ca_file %s", nats->tls_ca_file);
        s = natsOptions_LoadCATrustedCertificates(opts, nats->tls_ca_file);
    }
    if (s == NATS_OK && nats->tls_cert_file != NULL) {
        snprintf(what, sizeof what, "nats.tls_cert_file %s / tls_key_file %s",
                 nats->tls_cert_file, nats->tls_key_file);
        s = natsOptions_LoadCertificatesChain(opts, nats->tls_cert_file,
                                              nats->tls_key_file);
    }
    if (s != NATS_OK) {
        natsOptions_Destroy(opts);
        free(urls);
        return fail(err, errlen, what, s);
    }
    /* A refused NKey handshake is tried again with a fresh nonce: with
     * nats-server 2.9 and libnats 3.4 about one handshake in 250 with a
     * valid key is refused (1 of 240 in a loop on loopback), which would
     * otherwise stop an instance at start. A wrong key fails every time,
     * so this only delays its error by a few hundred ms. */
    for (int attempt = 0;; attempt++) {
        s = natsConnection_Connect(&conn->nc, opts);
        if (s != NATS_CONNECTION_AUTH_FAILED || attempt + 1 >= AUTH_ATTEMPTS ||
            (nats->nkey_seed_file == NULL && nats->creds_file == NULL))
            break;
        nats_Sleep(100);
    }
    natsOptions_Destroy(opts);
    free(urls);
    if (s != NATS_OK) {
        fail(err, errlen, "cannot connect to nats.servers", s);
        /* A server that wants a client certificate drops a client without
         * one once the handshake is over; all the client sees is a closed
         * connection. */
        const char *hint = NULL;
        if ((s == NATS_PROTOCOL_ERROR || s == NATS_IO_ERROR ||
             s == NATS_CONNECTION_CLOSED) && secure &&
            nats->tls_cert_file == NULL)
            hint = "the server closed the connection after the TLS "
                   "handshake: it may require a client certificate, and "
                   "none is configured";
        else if (s == NATS_SSL_ERROR && nats->tls_ca_file == NULL)
            hint = "no CA certificates are configured to verify the "
                   "server's certificate";
        else if ((s == NATS_CONNECTION_AUTH_FAILED ||
                  s == NATS_NOT_PERMITTED) && nats->creds_file == NULL &&
                 nats->nkey_seed_file == NULL)
            hint = "the server requires authentication, and no credentials "
                   "or NKey are configured";
        else if (s == NATS_CONNECTION_AUTH_FAILED || s == NATS_NOT_PERMITTED)
            hint = "the server refused the credentials or NKey";
        size_t used = strlen(err);
        if (hint != NULL && used + 3 < errlen)
            snprintf(err + used, errlen - used, " (%s)", hint);
        return -1;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = TS_JS_WAIT_MS;
    jo.PublishAsync.MaxPending = 8192;
    jo.PublishAsync.ErrHandler = on_publish_error;
    jo.PublishAsync.ErrHandlerClosure = closure;
    s = natsConnection_JetStream(&conn->js, conn->nc, &jo);
    if (s != NATS_OK) {
        ts_js_close(conn);
        return fail(err, errlen, "jetstream context", s);
    }
    return 0;
}

void ts_js_close(ts_js_conn *conn)
{
    if (conn->js != NULL)
        jsCtx_Destroy(conn->js);
    if (conn->nc != NULL) {
        natsConnection_Close(conn->nc);
        natsConnection_Destroy(conn->nc);
    }
    conn->js = NULL;
    conn->nc = NULL;
}

#define MAX_STREAM_SUBJECTS 16

/* Sets an existing stream's subjects, the rest of its configuration
 * kept. 0, or -1 with err ("<what>: <cause>"). */
static int set_subjects(ts_js_conn *conn, const jsStreamConfig *have,
                        const char **subjects, int n, const char *what,
                        char *err, size_t errlen)
{
    jsStreamConfig update = *have;
    update.Subjects = subjects;
    update.SubjectsLen = n;
    jsStreamInfo *info = NULL;
    jsErrCode code = 0;
    natsStatus s = js_UpdateStream(&info, conn->js, &update, NULL, &code);
    if (info != NULL)
        jsStreamInfo_Destroy(info);
    if (s == NATS_OK)
        return 0;
    ts_js_describe(err, errlen, what, s, code);
    return -1;
}

/* A stream made by an older version may lack a subject this one
 * publishes on (tracesan.batch): it is added, the rest of the stream's
 * configuration kept. 0, or -1 with err. */
static int add_missing_subjects(ts_js_conn *conn, const jsStreamConfig *have,
                                const jsStreamConfig *want, char *err,
                                size_t errlen)
{
    const char *merged[MAX_STREAM_SUBJECTS];
    int n = 0, added = 0;
    for (int i = 0; i < have->SubjectsLen && n < MAX_STREAM_SUBJECTS; i++)
        merged[n++] = have->Subjects[i];
    for (int j = 0; j < want->SubjectsLen && n < MAX_STREAM_SUBJECTS; j++) {
        int found = 0;
        for (int i = 0; i < have->SubjectsLen && !found; i++)
            found = strcmp(have->Subjects[i], want->Subjects[j]) == 0;
        if (!found) {
            merged[n++] = want->Subjects[j];
            added = 1;
        }
    }
    if (!added)
        return 0;
    char what[128];
    snprintf(what, sizeof what, "cannot add subjects to stream %s",
             want->Name);
    return set_subjects(conn, have, merged, n, what, err, errlen);
}

static int fit_input_stream(ts_js_conn *conn, const jsStreamConfig *have,
                            const jsStreamConfig *want, int *work_queue,
                            char *err, size_t errlen);

/* work_queue: NULL for a stream whose subjects are merged; else the input
 * stream's, set to whether it is a work queue. */
static int add_stream(ts_js_conn *conn, jsStreamConfig *cfg, int *work_queue,
                      char *err, size_t errlen)
{
    jsStreamInfo *info = NULL;
    jsErrCode code = 0;
    natsStatus s = js_GetStreamInfo(&info, conn->js, cfg->Name, NULL, &code);
    if (s == NATS_OK) {
        int rc = work_queue != NULL
                     ? fit_input_stream(conn, info->Config, cfg, work_queue,
                                        err, errlen)
                     : add_missing_subjects(conn, info->Config, cfg, err,
                                            errlen);
        jsStreamInfo_Destroy(info);
        return rc;
    }
    s = js_AddStream(&info, conn->js, cfg, NULL, &code);
    if (s == NATS_OK || code == JSStreamNameExistErr) {
        if (info != NULL)
            jsStreamInfo_Destroy(info);
        return 0;
    }
    char what[128];
    snprintf(what, sizeof what, "cannot create stream %s", cfg->Name);
    ts_js_describe(err, errlen, what, s, code);
    return -1;
}

/* A replicated KV bucket keeping `history` values per key. */
static int ensure_bucket(ts_js_conn *conn, const struct ts_nats_settings *nats,
                         const char *bucket, int history, char *err,
                         size_t errlen)
{
    kvStore *kv = NULL;
    natsStatus s = js_KeyValue(&kv, conn->js, bucket);
    if (s != NATS_OK) {
        kvConfig kc;
        kvConfig_Init(&kc);
        kc.Bucket = bucket;
        kc.History = (uint8_t)history;
        kc.StorageType = js_FileStorage;
        kc.Replicas = (int)nats->replicas;
        s = js_CreateKeyValue(&kv, conn->js, &kc);
    }
    if (s != NATS_OK) {
        char what[96];
        snprintf(what, sizeof what, "cannot create the KV bucket %s", bucket);
        return fail(err, errlen, what, s);
    }
    kvStore_Destroy(kv);
    return 0;
}

/* TRACESAN_IN's subjects: exactly one per partition. */
static const char **input_subjects(size_t partitions)
{
    const char **subjects = calloc(partitions, sizeof *subjects);
    for (size_t p = 0; subjects != NULL && p < partitions; p++) {
        char name[SUBJECT_NAME_MAX];
        snprintf(name, sizeof name, TS_JS_SUBJECT_IN ".%zu", p);
        if ((subjects[p] = strdup(name)) == NULL) {
            for (size_t q = 0; q < p; q++)
                free((char *)subjects[q]);
            free(subjects);
            subjects = NULL;
        }
    }
    return subjects;
}

static void free_subjects(const char **subjects, size_t n)
{
    for (size_t i = 0; subjects != NULL && i < n; i++)
        free((char *)subjects[i]);
    free(subjects);
}

/* An existing TRACESAN_IN takes exactly the partitions' subjects (an
 * older version listened on tracesan.in.*); its retention is reported. */
static int fit_input_stream(ts_js_conn *conn, const jsStreamConfig *have,
                            const jsStreamConfig *want, int *work_queue,
                            char *err, size_t errlen)
{
    if (work_queue != NULL)
        *work_queue = have->Retention == js_WorkQueuePolicy;
    int same = have->SubjectsLen == want->SubjectsLen;
    for (int i = 0; same && i < want->SubjectsLen; i++)
        same = strcmp(have->Subjects[i], want->Subjects[i]) == 0;
    if (same)
        return 0;
    return set_subjects(conn, have, want->Subjects, want->SubjectsLen,
                        "cannot set the subjects of stream " TS_JS_STREAM_IN,
                        err, errlen);
}

int ts_js_ensure_streams(ts_js_conn *conn, const struct ts_nats_settings *nats,
                         int *input_work_queue, char *err, size_t errlen)
{
    static const char *const out_subjects[] = {
        "tracesan.out.>", "tracesan.rejected", "tracesan.other",
        "tracesan.batch", "tracesan.density.>"
    };
    static const char *const state_subjects[] = { TS_JS_SUBJECT_STATE ".*" };
    const char **in_subjects = input_subjects(nats->partitions);
    if (in_subjects == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const struct {
        const char *name;
        const char *const *subjects;
        int n_subjects;
        int dedupes;         /* the output's duplicate window */
        int rolls_up;        /* snapshots replace a partition's older
                                records atomically */
        int work_queue;      /* an input leaves once acknowledged */
    } streams[] = {
        { TS_JS_STREAM_IN, in_subjects, (int)nats->partitions, 0, 0, 1 },
        { TS_JS_STREAM_OUT, out_subjects, 5, 1, 0, 0 },
        { TS_JS_STREAM_STATE, state_subjects, 1, 0, 1, 0 },
    };
    if (input_work_queue != NULL)
        *input_work_queue = 1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof streams / sizeof streams[0];
         i++) {
        jsStreamConfig cfg;
        jsStreamConfig_Init(&cfg);
        cfg.Name = streams[i].name;
        cfg.Subjects = (const char **)streams[i].subjects;
        cfg.SubjectsLen = streams[i].n_subjects;
        cfg.Storage = js_FileStorage;
        cfg.Replicas = (int64_t)nats->replicas;
        if (streams[i].dedupes)  /* nanoseconds */
            cfg.Duplicates = nats->dedupe_window_ms * 1000000;
        cfg.AllowRollup = streams[i].rolls_up != 0;
        cfg.DenyDelete = streams[i].rolls_up != 0;
        if (streams[i].work_queue)
            cfg.Retention = js_WorkQueuePolicy;
        rc = add_stream(conn, &cfg, streams[i].work_queue ? input_work_queue
                                                          : NULL,
                        err, errlen);
    }
    free_subjects(in_subjects, nats->partitions);
    if (rc != 0)
        return -1;
    if (ensure_bucket(conn, nats, TS_JS_LEASE_BUCKET, 1, err, errlen) != 0)
        return -1;
    return ensure_bucket(conn, nats, TS_JS_POPULATION_BUCKET,
                         TS_JS_POPULATION_HISTORY, err, errlen);
}

int ts_js_lease_reads_own(kvStore *kv, const char *key, const char *owner,
                          uint64_t expect, uint64_t *revision)
{
    kvEntry *entry = NULL;
    natsStatus s = kvStore_Get(&entry, kv, key);
    if (s == NATS_NOT_FOUND)
        return 0;
    if (s != NATS_OK)
        return -1;
    const char *value = kvEntry_Operation(entry) == kvOp_Put
                            ? kvEntry_ValueString(entry) : NULL;
    *revision = kvEntry_Revision(entry);
    int own = value != NULL && strcmp(value, owner) == 0 && *revision > expect;
    kvEntry_Destroy(entry);
    return own;
}

natsStatus ts_js_next_stream_msg(natsSubscription *sub, int64_t timeout_ms,
                                 natsMsg **msg, uint64_t *seq,
                                 uint64_t *pending)
{
    for (;;) {
        natsStatus s = natsSubscription_NextMsg(msg, sub, timeout_ms);
        if (s != NATS_OK)
            return s;
        jsMsgMetaData *meta = NULL;
        if (natsMsg_GetMetaData(&meta, *msg) != NATS_OK) {
            natsMsg_Destroy(*msg);
            *msg = NULL;
            continue;  /* a heartbeat or flow-control message */
        }
        *seq = meta->Sequence.Stream;
        *pending = meta->NumPending;
        jsMsgMetaData_Destroy(meta);
        return NATS_OK;
    }
}

int ts_js_partition_backlog(jsCtx *js, uint32_t partitions, int work_queue,
                            uint64_t *backlog, char *err, size_t errlen)
{
    memset(backlog, 0, partitions * sizeof *backlog);
    jsErrCode code = 0;
    natsStatus s;
    if (work_queue) {
        jsOptions jo;
        jsOptions_Init(&jo);
        jo.Stream.Info.SubjectsFilter = TS_JS_SUBJECT_IN ".*";
        jsStreamInfo *info = NULL;
        s = js_GetStreamInfo(&info, js, TS_JS_STREAM_IN, &jo, &code);
        if (s != NATS_OK) {
            ts_js_describe(err, errlen, "cannot read " TS_JS_STREAM_IN, s,
                           code);
            return -1;
        }
        const jsStreamStateSubjects *subjects = info->State.Subjects;
        size_t prefix = strlen(TS_JS_SUBJECT_IN ".");
        for (int i = 0; subjects != NULL && i < subjects->Count; i++) {
            const char *name = subjects->List[i].Subject;
            char *end = NULL;
            unsigned long p = strtoul(name + prefix, &end, 10);
            if (strncmp(name, TS_JS_SUBJECT_IN ".", prefix) == 0 &&
                end != name + prefix && *end == '\0' && p < partitions)
                backlog[p] = subjects->List[i].Msgs;
        }
        jsStreamInfo_Destroy(info);
        return 0;
    }
    for (uint32_t p = 0; p < partitions; p++) {
        char durable[64];
        snprintf(durable, sizeof durable, TS_JS_CONSUMER_PREFIX "%u", p);
        jsConsumerInfo *ci = NULL;
        s = js_GetConsumerInfo(&ci, js, TS_JS_STREAM_IN, durable, NULL,
                               &code);
        if (s == NATS_OK) {
            backlog[p] = ci->NumPending + (uint64_t)ci->NumAckPending;
            jsConsumerInfo_Destroy(ci);
        } else if (code != JSConsumerNotFoundErr) {
            ts_js_describe(err, errlen, "cannot read a consumer", s, code);
            return -1;
        }
    }
    return 0;
}

int ts_js_read_stream(jsCtx *js, const char *stream, const char *subject,
                      uint64_t from_seq, ts_js_visit_fn visit, void *ctx,
                      ts_sub_graveyard *graveyard, char *err, size_t errlen)
{
    uint64_t last = 0;
    jsErrCode code = 0;
    natsStatus s;
    if (subject != NULL && strpbrk(subject, "*>") == NULL) {
        natsMsg *msg = NULL;
        s = js_GetLastMsg(&msg, js, stream, subject, NULL, &code);
        if (s == NATS_NOT_FOUND)
            return 0;
        if (s != NATS_OK) {
            ts_js_describe(err, errlen, "cannot read the last message", s,
                           code);
            return -1;
        }
        last = natsMsg_GetSequence(msg);
        natsMsg_Destroy(msg);
        if (last < from_seq)
            return 0;
    } else {
        jsStreamInfo *info = NULL;
        s = js_GetStreamInfo(&info, js, stream, NULL, &code);
        if (s != NATS_OK) {
            ts_js_describe(err, errlen, "cannot read the stream info", s,
                           code);
            return -1;
        }
        last = info->State.LastSeq;
        uint64_t msgs = info->State.Msgs;
        jsStreamInfo_Destroy(info);
        if (msgs == 0 || last < from_seq)
            return 0;
    }
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    if (from_seq > 1) {
        so.Config.DeliverPolicy = js_DeliverByStartSequence;
        so.Config.OptStartSeq = from_seq;
    }
    natsSubscription *sub = NULL;
    /* Creating the reading consumer can time out while a cluster moves
     * a leader after losing a node. */
    for (int attempt = 0; attempt < SUBSCRIBE_ATTEMPTS; attempt++) {
        s = js_SubscribeSync(&sub, js,
                             subject != NULL ? subject : ">", NULL, &so,
                             &code);
        if (s == NATS_OK || s != NATS_TIMEOUT)
            break;
        nats_Sleep(500);
    }
    if (s != NATS_OK) {
        ts_js_describe(err, errlen, "cannot subscribe to read the stream", s,
                       code);
        return -1;
    }
    int rc = 0;
    for (;;) {
        natsMsg *msg = NULL;
        uint64_t seq, pending;
        s = ts_js_next_stream_msg(sub, TS_JS_WAIT_MS, &msg, &seq, &pending);
        if (s != NATS_OK) {
            ts_js_describe(err, errlen, "reading the stream", s, 0);
            rc = -1;
            break;
        }
        rc = visit(ctx, msg, seq);
        natsMsg_Destroy(msg);
        if (rc != 0 || seq >= last || pending == 0)
            break;
    }
    ts_sub_graveyard_bury(graveyard, sub);
    return rc;
}
