#include "drivers/jetstream/jetstream_mode.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include "state/changelog.h"
#include "ops/daemon_state.h"
#include "datapath/intake.h"
#include "drivers/jetstream/jetstream_setup.h"
#include "drivers/jetstream/partition_lease.h"
#include "engine/pipeline_reload.h"

#define ERR_MAX 512
#define SUBJECT_MAX 96
#define MAX_INSTANCES 256
#define HEALTH_TICK_MS 250
/* Commit latencies kept for the percentiles logged at exit. */
#define LATENCY_SAMPLES 65536
/* How long the thread sleeps when no owned partition had input. */
#define IDLE_SLEEP_US 2000
/* Publish attempts of a committed group's outcomes before the partition
 * is rebuilt (which republishes them). */
#define PUBLISH_ATTEMPTS 2
/* Users visited per partition per expiry sweep (as daemon/main.c). */
#define EXPIRE_SCAN_PER_TICK 10000
/* Pause between attempts to rebuild a partition. */
#define RESTORE_RETRY_MS 500
/* A starting instance waits this long for a forming cluster's JetStream
 * to accept the streams. */
#define SETUP_PATIENCE_MS 60000

static const double COMMIT_BOUNDS[] = { 0.001, 0.002, 0.005, 0.01, 0.02,
                                        0.05, 0.1, 0.2, 0.5, 1, 2, 5 };
#define N_COMMIT_BOUNDS (sizeof COMMIT_BOUNDS / sizeof COMMIT_BOUNDS[0])

typedef enum part_state {
    PART_IDLE = 0,       /* not ours */
    PART_RESTORE,        /* leased, state not rebuilt yet */
    PART_ACTIVE,         /* leased and consuming */
} part_state;

/* Counters the loop renders; written under the mode's mutex. */
typedef struct part_stats {
    int owned;
    uint64_t lag;                /* messages pending in the consumer */
    uint64_t messages;
    uint64_t updates;
    uint64_t commits;
    double commit_seconds_sum;
    uint64_t takeovers;
    uint64_t fenced;
    uint64_t republished;
} part_stats;

typedef struct partition {
    uint32_t index;
    part_state state;
    ts_lease_view view;          /* the lease as last read */
    /* Shared with the lease thread, under lease_lock: */
    int held;                    /* the lease thread renews it */
    int lost;                    /* a renewal found someone else's */
    uint64_t lease_rev;          /* our revision while we hold it */
    uint64_t epoch;              /* revision at acquisition */
    int64_t deadline_ms;         /* stop processing at this monotonic ms */
    ts_pipeline *pipeline;
    ts_record_map *records;
    ts_state_backend backend;
    natsSubscription *sub;
    uint64_t changelog_seq;      /* last subject sequence: the fence */
    uint64_t last_input_seq;     /* committed */
    size_t records_since_snapshot;
    int64_t retry_at_ms;         /* a failed restore waits until then */
    int64_t input_seen_ms;       /* last fetch that returned input */
    uint64_t last_delivery;      /* the consumer's sequence last seen */
    struct ts_jetstream *mode;
} partition;

typedef struct instance_view {
    char name[TS_LEASE_OWNER_MAX];
    uint64_t revision;
    int64_t seen_ms;
} instance_view;

struct ts_jetstream {
    ts_daemon *daemon;
    const ts_config *config;     /* what new pipelines are built from */
    ts_config *adopted;          /* owned: the last reload applied */
    ts_config *pending;          /* owned, under lock: a reload to apply */
    const ts_settings *settings;
    const struct ts_nats_settings *nats;
    ts_rng *rng;
    char self[TS_LEASE_OWNER_MAX];
    ts_js_conn conn;
    kvStore *kv;
    size_t max_payload;
    uint32_t n_partitions;
    partition *parts;
    instance_view instances[MAX_INSTANCES];
    size_t n_instances;
    int64_t next_lease_ms;
    int64_t last_lease_ok_ms;    /* under lease_lock */
    /* Renewals and the instance heartbeat run on a thread of their own, so
     * a data-path call stalled by a cluster electing a leader (a rebuild
     * can take seconds then) never lets a lease lapse by itself. */
    pthread_mutex_t lease_lock;
    jsCtx *lease_js;             /* answers awaited ttl/8 at most */
    kvStore *lease_kv;
    pthread_t lease_thread;
    int lease_thread_started;
    volatile int lease_stop;
    /* the group being built */
    ts_changelog_builder builder;
    ts_buf record;
    ts_buf topic, payload;
    unsigned char *encode_buf;
    size_t encode_cap;
    ts_codec_arena arena;
    ts_wire_update *wire;
    /* async publish failures reported by libnats' callback thread */
    pthread_mutex_t publish_lock;
    uint64_t publish_errors;
    /* shared with the loop */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    volatile int stop;
    part_stats *stats;
    uint64_t commit_buckets[N_COMMIT_BOUNDS + 1];
    uint64_t commit_count;
    double commit_sum;
    double *latencies;
    size_t n_latencies;
    int connected;
    char health[256];            /* "" = healthy */
    struct event *health_event;
    struct event *sigint_event, *sigterm_event;
};

/* ----------------------------------------------------------- helpers */

static int64_t mono_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static double mono_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* How long one publish may wait for JetStream: a renewal interval, so a
 * stalled stream (a leader being elected) never keeps the thread from
 * renewing the leases; what failed is retried through a rebuild. */
static int64_t wait_ms(const ts_jetstream *m)
{
    int64_t every = ts_lease_renew_interval(m->nats->lease_ttl_ms);
    return every > 500 ? every : 500;
}

static void lease_key(char *buf, size_t size, uint32_t p)
{
    snprintf(buf, size, "p.%u", p);
}

static void consumer_name(char *buf, size_t size, uint32_t p)
{
    snprintf(buf, size, "tracesan-p%u", p);
}

static void set_health(ts_jetstream *m, const char *reason)
{
    pthread_mutex_lock(&m->lock);
    snprintf(m->health, sizeof m->health, "%s", reason);
    pthread_mutex_unlock(&m->lock);
}

static void on_publish_error(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    (void)js;
    (void)pae;
    ts_jetstream *m = closure;
    pthread_mutex_lock(&m->publish_lock);
    m->publish_errors++;
    pthread_mutex_unlock(&m->publish_lock);
}

/* ------------------------------------------------ partition's backend */

static int backend_load(void *ctx, const char *user_id, size_t id_len,
                        ts_user_record *record)
{
    partition *p = ctx;
    const void *bytes;
    size_t len;
    if (ts_record_map_get(p->records, user_id, id_len, &bytes, &len) == 0)
        return 0;
    return ts_record_decode(bytes, len, record) == 0 ? 1 : -1;
}

/* The group's changed users go into its changelog record, and into the
 * map a later load (after expiry) reads. */
static int backend_save(void *ctx, const char *user_id, size_t id_len,
                        const ts_user_record *record)
{
    partition *p = ctx;
    ts_jetstream *m = p->mode;
    size_t need = ts_record_encode(record, m->encode_buf, m->encode_cap);
    if (need > m->encode_cap) {
        unsigned char *bigger = realloc(m->encode_buf, need);
        if (bigger == NULL)
            return -1;
        m->encode_buf = bigger;
        m->encode_cap = need;
        need = ts_record_encode(record, m->encode_buf, m->encode_cap);
    }
    if (need == 0 ||
        ts_changelog_add_user(&m->builder, user_id, id_len, m->encode_buf,
                              need) != 0 ||
        ts_record_map_put(p->records, user_id, id_len, m->encode_buf,
                          need) != 0)
        return -1;
    return 0;
}

/* --------------------------------------------------------- publishing */

typedef struct publish_ctx {
    ts_jetstream *m;
    uint32_t partition;
    size_t queued;
    int failed;
} publish_ctx;

static int publish_one(void *arg, uint64_t input_seq, uint32_t index,
                       const char *subject, size_t subject_len,
                       const void *payload, size_t len)
{
    publish_ctx *ctx = arg;
    char subj[SUBJECT_MAX];
    char id[64];
    snprintf(subj, sizeof subj, "%.*s", (int)subject_len, subject);
    ts_changelog_msg_id(id, sizeof id, ctx->partition, input_seq, index);
    natsMsg *msg = NULL;
    natsStatus s = natsMsg_Create(&msg, subj, NULL, payload, (int)len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(msg, "Nats-Msg-Id", id);
    if (s == NATS_OK)
        s = js_PublishMsgAsync(ctx->m->conn.js, &msg, NULL);
    if (msg != NULL)
        natsMsg_Destroy(msg);
    if (s != NATS_OK) {
        ctx->failed = 1;
        return 1;
    }
    ctx->queued++;
    return 0;
}

/* Publishes a committed record's outcomes and waits until the stream has
 * acknowledged every one. Repeating it is harmless: the message ids make
 * the server drop copies. 0, or -1. */
static int publish_outcomes(ts_jetstream *m, uint32_t partition,
                            const void *record, size_t len)
{
    for (int attempt = 0; attempt < PUBLISH_ATTEMPTS; attempt++) {
        pthread_mutex_lock(&m->publish_lock);
        m->publish_errors = 0;
        pthread_mutex_unlock(&m->publish_lock);
        publish_ctx ctx = { m, partition, 0, 0 };
        ts_changelog_visitor visitor = { &ctx, NULL, publish_one };
        ts_changelog_header header;
        if (ts_changelog_decode(record, len, &header, &visitor) < 0)
            return -1;
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = wait_ms(m);
        natsStatus s = js_PublishAsyncComplete(m->conn.js, &po);
        pthread_mutex_lock(&m->publish_lock);
        uint64_t errors = m->publish_errors;
        pthread_mutex_unlock(&m->publish_lock);
        if (s == NATS_OK && !ctx.failed && errors == 0)
            return 0;
        /* Messages whose answer was lost (a server went away) stay pending
         * in the context for ever and would time out every later wait:
         * take them back; the next attempt sends the record again. */
        natsMsgList pending = { 0 };
        if (js_PublishAsyncGetPendingList(&pending, m->conn.js) == NATS_OK)
            natsMsgList_Destroy(&pending);
        ts_log(TS_LOG_WARN, "partition %u: publishing outcomes failed (%s, "
               "%" PRIu64 " rejected), retrying", partition,
               natsStatus_GetText(s), errors);
        /* A stream electing a new leader answers nothing for a moment. */
        usleep(200000);
    }
    return -1;
}

/* Appends a record to the partition's changelog, fenced on the sequence
 * the partition last saw. 1 appended, 0 fenced out (someone else wrote),
 * -1 unknown (timeout: it may or may not be stored). */
static int append_record(ts_jetstream *m, partition *p, const ts_buf *record,
                         int rollup)
{
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    natsMsg *msg = NULL;
    natsStatus s = natsMsg_Create(&msg, subj, NULL,
                                  (const char *)record->data,
                                  (int)record->len);
    if (s == NATS_OK && rollup)
        s = natsMsgHeader_Set(msg, "Nats-Rollup", "sub");
    if (s != NATS_OK) {
        natsMsg_Destroy(msg);
        return -1;
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = wait_ms(m);
    if (p->changelog_seq > 0)
        po.ExpectLastSubjectSeq = p->changelog_seq;
    else
        po.ExpectNoMessage = true;
    jsPubAck *ack = NULL;
    jsErrCode code = 0;
    s = js_PublishMsg(&ack, m->conn.js, msg, &po, &code);
    natsMsg_Destroy(msg);
    if (s == NATS_OK) {
        p->changelog_seq = ack->Sequence;
        jsPubAck_Destroy(ack);
        return 1;
    }
    if (code == JSStreamWrongLastSequenceErr)
        return 0;
    char err[ERR_MAX];
    ts_js_describe(err, sizeof err, "changelog append", s, code);
    ts_log(TS_LOG_WARN, "partition %u: %s", p->index, err);
    return -1;
}

/* ------------------------------------------------- owning, releasing */

/* at_ms is wall-clock time, comparable between instances of one host
 * (the tests check that no two instances' intervals overlap). A partition
 * noticed lost after its deadline (a frozen process) is logged at the
 * deadline: nothing was committed after it (the fence refuses it). */
static void log_lease(const char *what, const partition *p, const char *why)
{
    int64_t at = ts_wall_clock_ms();
    pthread_mutex_lock(&p->mode->lease_lock);
    int64_t deadline = p->deadline_ms;
    pthread_mutex_unlock(&p->mode->lease_lock);
    int64_t late = mono_ms() - deadline;
    if (strcmp(what, "released") == 0 && deadline > 0 && late > 0)
        at -= late;
    ts_log(TS_LOG_INFO, "lease %s partition=%u epoch=%" PRIu64
           " at_ms=%" PRId64 "%s%s", what, p->index, p->epoch, at,
           why != NULL ? " reason=" : "", why != NULL ? why : "");
}

static void drop_state(ts_jetstream *m, partition *p)
{
    if (p->sub != NULL) {
        natsSubscription_Destroy(p->sub);
        p->sub = NULL;
    }
    if (p->pipeline != NULL)
        ts_pipeline_free(p->pipeline);
    p->pipeline = NULL;
    if (p->records != NULL)
        ts_record_map_clear(p->records);
    (void)m;
}

/* Stops processing `p` now. With release the lease is handed back (the
 * next owner need not wait for it to age). */
static void lose_partition(ts_jetstream *m, partition *p, const char *why,
                           int release)
{
    if (p->state == PART_IDLE)
        return;
    drop_state(m, p);
    p->state = PART_IDLE;
    log_lease("released", p, why);
    pthread_mutex_lock(&m->lease_lock);
    uint64_t lease_rev = p->lease_rev;
    p->held = 0;
    pthread_mutex_unlock(&m->lease_lock);
    /* Handing back is a courtesy (the lease ages out anyway): not while
     * disconnected, where each attempt would wait for its timeout. */
    if (release && m->kv != NULL &&
        natsConnection_Status(m->conn.nc) == NATS_CONN_STATUS_CONNECTED) {
        char key[32];
        lease_key(key, sizeof key, p->index);
        uint64_t rev = 0;
        kvStore_UpdateString(&rev, m->kv, key, TS_LEASE_FREE, lease_rev);
    }
    memset(&p->view, 0, sizeof p->view);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].owned = 0;
    m->stats[p->index].lag = 0;
    pthread_mutex_unlock(&m->lock);
}

/* Rebuilds the partition from its changelog, fences older owners out,
 * republishes what may not have been published, and (re)creates its
 * consumer from the first input not committed. 0; -1 (logged; the lease
 * is kept and the restore retried); -2 when another writer appended after
 * our read (a newer owner: give the partition up). */
typedef struct restore_ctx {
    partition *p;
    uint64_t ack_floor;
    ts_buf *republish;           /* records to publish again, each
                                    prefixed by its u32 length */
    int bad;
} restore_ctx;

static int restore_user(void *arg, const char *id, size_t id_len,
                        const void *record, size_t len)
{
    restore_ctx *ctx = arg;
    return ts_record_map_put(ctx->p->records, id, id_len, record, len) == 0
               ? 0 : 1;
}

static int restore_visit(void *arg, natsMsg *msg, uint64_t seq)
{
    restore_ctx *ctx = arg;
    partition *p = ctx->p;
    const void *data = natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    ts_changelog_header header;
    ts_changelog_visitor visitor = { ctx, NULL, NULL };
    if (ts_changelog_decode(data, len, &header, &visitor) < 0) {
        ctx->bad = 1;
        return 1;
    }
    if (header.kind == TS_CHANGELOG_SNAPSHOT) {
        ts_record_map_clear(p->records);
        ts_buf_reset(ctx->republish);
        p->records_since_snapshot = 0;
    }
    visitor.user = restore_user;
    if (ts_changelog_decode(data, len, &header, &visitor) != 0) {
        ctx->bad = 1;
        return 1;
    }
    if (header.last_input_seq > p->last_input_seq)
        p->last_input_seq = header.last_input_seq;
    p->changelog_seq = seq;
    p->records_since_snapshot++;
    if (header.kind == TS_CHANGELOG_DELTA &&
        header.last_input_seq > ctx->ack_floor) {
        uint32_t n = (uint32_t)len;
        if (ts_buf_append(ctx->republish, &n, sizeof n) != 0 ||
            ts_buf_append(ctx->republish, data, len) != 0) {
            ctx->bad = 1;
            return 1;
        }
    }
    return 0;
}

static int restore_partition(ts_jetstream *m, partition *p)
{
    char err[ERR_MAX];
    char durable[64];
    consumer_name(durable, sizeof durable, p->index);
    drop_state(m, p);
    p->changelog_seq = 0;
    p->last_input_seq = 0;
    p->records_since_snapshot = 0;
    p->last_delivery = 0;  /* a new consumer counts from 1 */
    /* What the input consumer acknowledged was published (acks follow
     * publishing), so only later records need publishing again. */
    uint64_t ack_floor = 0;
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;
    if (js_GetConsumerInfo(&ci, m->conn.js, TS_JS_STREAM_IN, durable, NULL,
                           &code) == NATS_OK) {
        ack_floor = ci->AckFloor.Stream;
        jsConsumerInfo_Destroy(ci);
    }
    ts_buf republish = { 0 };
    restore_ctx ctx = { p, ack_floor, &republish, 0 };
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    double started = mono_s();
    if (ts_js_read_stream(&m->conn, TS_JS_STREAM_STATE, subj, restore_visit,
                          &ctx, err, sizeof err) != 0 || ctx.bad) {
        ts_log(TS_LOG_WARN, "partition %u: cannot read its changelog: %s",
               p->index, ctx.bad ? "undecodable record" : err);
        ts_buf_free(&republish);
        return -1;
    }
    /* The fence: from here on an older owner's append fails. */
    ts_changelog_header header = {
        .kind = TS_CHANGELOG_FENCE, .owner = m->self,
        .owner_len = strlen(m->self), .epoch = p->epoch,
        .last_input_seq = p->last_input_seq,
    };
    ts_changelog_builder_reset(&m->builder);
    int appended = -1;
    if (ts_changelog_finish(&m->builder, &header, &m->record) == 0)
        appended = append_record(m, p, &m->record, 0);
    if (appended != 1) {
        ts_log(TS_LOG_WARN, "partition %u: fence record %s", p->index,
               appended == 0 ? "refused: the changelog moved on" : "failed");
        ts_buf_free(&republish);
        return appended == 0 ? -2 : -1;
    }
    size_t republished = 0;
    for (size_t at = 0; at + 4 <= republish.len;) {
        uint32_t n;
        memcpy(&n, republish.data + at, 4);
        if (publish_outcomes(m, p->index, republish.data + at + 4, n) != 0) {
            ts_log(TS_LOG_WARN, "partition %u: republishing failed",
                   p->index);
            ts_buf_free(&republish);
            return -1;
        }
        republished++;
        at += 4 + n;
    }
    ts_buf_free(&republish);
    /* The consumer starts after the last committed input: a copy left by
     * the previous owner may have delivered (not committed) further. */
    js_DeleteConsumer(m->conn.js, TS_JS_STREAM_IN, durable, NULL, &code);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = durable;
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_IN ".%u", p->index);
    cc.FilterSubject = subj;
    cc.AckPolicy = js_AckAll;
    cc.AckWait = (int64_t)60 * 1000000000;
    cc.MaxAckPending = (int64_t)m->nats->max_ack_pending;
    if (p->last_input_seq > 0) {
        cc.DeliverPolicy = js_DeliverByStartSequence;
        cc.OptStartSeq = p->last_input_seq + 1;
    }
    ci = NULL;
    natsStatus s = js_AddConsumer(&ci, m->conn.js, TS_JS_STREAM_IN, &cc, NULL,
                                  &code);
    if (s != NATS_OK) {
        ts_js_describe(err, sizeof err, "cannot create the consumer", s, code);
        ts_log(TS_LOG_WARN, "partition %u: %s", p->index, err);
        return -1;
    }
    jsConsumerInfo_Destroy(ci);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = TS_JS_STREAM_IN;
    so.Consumer = durable;
    s = js_PullSubscribe(&p->sub, m->conn.js, subj, durable, NULL, &so, &code);
    if (s != NATS_OK) {
        ts_js_describe(err, sizeof err, "cannot bind the consumer", s, code);
        ts_log(TS_LOG_WARN, "partition %u: %s", p->index, err);
        return -1;
    }
    p->pipeline = ts_config_make_pipeline(m->config, m->rng, err, sizeof err);
    if (p->pipeline == NULL) {
        ts_log(TS_LOG_ERROR, "partition %u: %s", p->index, err);
        return -1;
    }
    p->backend = (ts_state_backend){ p, backend_load, backend_save };
    ts_pipeline_set_state_backend(p->pipeline, &p->backend);
    p->state = PART_ACTIVE;
    ts_log(TS_LOG_INFO, "partition %u restored: %zu users, last input "
           "%" PRIu64 ", %zu records republished, %.0f ms", p->index,
           ts_record_map_count(p->records), p->last_input_seq, republished,
           (mono_s() - started) * 1000);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].owned = 1;
    m->stats[p->index].takeovers++;
    m->stats[p->index].republished += republished;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

/* ------------------------------------------------------------- leases */

static void observe_instances(ts_jetstream *m, int64_t now)
{
    kvKeysList keys = { 0 };
    if (kvStore_Keys(&keys, m->kv, NULL) != NATS_OK)
        return;
    for (int i = 0; i < keys.Count; i++) {
        const char *key = keys.Keys[i];
        if (strncmp(key, "i.", 2) != 0)
            continue;
        kvEntry *entry = NULL;
        if (kvStore_Get(&entry, m->kv, key) != NATS_OK)
            continue;
        uint64_t rev = kvEntry_Revision(entry);
        kvEntry_Destroy(entry);
        instance_view *view = NULL;
        for (size_t j = 0; j < m->n_instances && view == NULL; j++)
            if (strcmp(m->instances[j].name, key + 2) == 0)
                view = &m->instances[j];
        if (view == NULL && m->n_instances < MAX_INSTANCES) {
            view = &m->instances[m->n_instances++];
            snprintf(view->name, sizeof view->name, "%s", key + 2);
        }
        if (view != NULL && view->revision != rev) {
            view->revision = rev;
            view->seen_ms = now;
        }
    }
    kvKeysList_Destroy(&keys);
}

static size_t live_instances(const ts_jetstream *m, int64_t now)
{
    size_t live = 1;  /* this one */
    int64_t ttl = m->nats->lease_ttl_ms;
    for (size_t j = 0; j < m->n_instances; j++)
        if (strcmp(m->instances[j].name, m->self) != 0 &&
            now - m->instances[j].seen_ms < ttl)
            live++;
    return live;
}

static int connected(const ts_jetstream *m)
{
    return natsConnection_Status(m->conn.nc) == NATS_CONN_STATUS_CONNECTED;
}

/* 0 when the lease thread lost the lease or its deadline passed. */
static int lease_ok(ts_jetstream *m, partition *p)
{
    pthread_mutex_lock(&m->lease_lock);
    int ok = p->held && !p->lost && mono_ms() < p->deadline_ms;
    pthread_mutex_unlock(&m->lease_lock);
    return ok;
}

/* Lost or out of time: stop now (the data path checks before every fetch
 * and commit as well). 1 when it was stopped. */
static int enforce_lease(ts_jetstream *m, partition *p)
{
    pthread_mutex_lock(&m->lease_lock);
    int lost = p->lost;
    int late = mono_ms() >= p->deadline_ms;
    pthread_mutex_unlock(&m->lease_lock);
    if (lost)
        lose_partition(m, p, "lease taken", 0);
    else if (late)
        lose_partition(m, p, "lease not renewed in time", 0);
    return lost || late;
}

static void *lease_thread_main(void *arg)
{
    ts_jetstream *m = arg;
    int64_t ttl = m->nats->lease_ttl_ms;
    char key[TS_LEASE_OWNER_MAX + 8];
    while (!m->lease_stop) {
        int64_t start = mono_ms();
        if (connected(m)) {
            uint64_t rev = 0;
            snprintf(key, sizeof key, "i.%s", m->self);
            int ok = kvStore_PutString(&rev, m->lease_kv, key, "alive") ==
                     NATS_OK;
            for (uint32_t i = 0; i < m->n_partitions && !m->lease_stop; i++) {
                partition *p = &m->parts[i];
                pthread_mutex_lock(&m->lease_lock);
                int renew = p->held && !p->lost;
                uint64_t last = p->lease_rev;
                pthread_mutex_unlock(&m->lease_lock);
                if (!renew)
                    continue;
                lease_key(key, sizeof key, i);
                int64_t sent = mono_ms();
                natsStatus s = kvStore_UpdateString(&rev, m->lease_kv, key,
                                                    m->self, last);
                const char *why = s != NATS_OK ? nats_GetLastError(NULL)
                                               : NULL;
                int taken = why != NULL && strstr(why, "wrong last") != NULL;
                pthread_mutex_lock(&m->lease_lock);
                /* Unless the data path let it go meanwhile. */
                if (p->held && p->lease_rev == last) {
                    if (s == NATS_OK) {
                        p->lease_rev = rev;
                        p->deadline_ms = ts_lease_deadline(sent, ttl);
                    } else if (taken) {
                        p->lost = 1;
                    } else {
                        ok = 0;
                    }
                }
                pthread_mutex_unlock(&m->lease_lock);
            }
            if (ok) {
                pthread_mutex_lock(&m->lease_lock);
                m->last_lease_ok_ms = start;
                pthread_mutex_unlock(&m->lease_lock);
            }
        }
        /* After a failed round, try again soon: the deadline is 3/4 ttl
         * from the last success. */
        int64_t every = ts_lease_renew_interval(ttl);
        pthread_mutex_lock(&m->lease_lock);
        if (m->last_lease_ok_ms != start)
            every = every / 4 > 50 ? every / 4 : 50;
        pthread_mutex_unlock(&m->lease_lock);
        while (!m->lease_stop && mono_ms() < start + every)
            usleep(10000);
    }
    return NULL;
}

static void lease_tick(ts_jetstream *m)
{
    int64_t ttl = m->nats->lease_ttl_ms;
    int64_t now = mono_ms();
    m->next_lease_ms = now + ts_lease_renew_interval(ttl);
    for (uint32_t i = 0; i < m->n_partitions; i++)
        if (m->parts[i].state != PART_IDLE)
            enforce_lease(m, &m->parts[i]);
    /* Disconnected, every KV call would wait for its timeout. */
    if (!connected(m))
        return;
    char key[TS_LEASE_OWNER_MAX + 8];
    uint64_t rev = 0;
    observe_instances(m, now);
    size_t owned = 0;
    for (uint32_t i = 0; i < m->n_partitions && !m->stop; i++) {
        partition *p = &m->parts[i];
        lease_key(key, sizeof key, i);
        if (p->state != PART_IDLE) {
            owned++;  /* renewed by the lease thread */
            continue;
        }
        kvEntry *entry = NULL;
        natsStatus s = kvStore_Get(&entry, m->kv, key);
        if (s == NATS_OK) {
            const char *owner = kvEntry_ValueString(entry);
            ts_lease_observe(&p->view, kvEntry_Revision(entry), owner,
                             owner != NULL ? strlen(owner) : 0, now);
            kvEntry_Destroy(entry);
        } else if (s == NATS_NOT_FOUND) {
            ts_lease_observe(&p->view, 0, "", 0, now);
        }
    }
    size_t fair = ts_lease_fair_share(m->n_partitions, live_instances(m, now));
    /* Hand back the surplus, highest partitions first, so a joining
     * instance gets its share without waiting for leases to age. */
    for (uint32_t i = m->n_partitions; i-- > 0 && owned > fair;) {
        if (m->parts[i].state != PART_IDLE) {
            lose_partition(m, &m->parts[i], "rebalance", 1);
            owned--;
        }
    }
    for (uint32_t i = 0; i < m->n_partitions && owned < fair; i++) {
        partition *p = &m->parts[i];
        if (p->state != PART_IDLE ||
            !ts_lease_takeable(&p->view, m->self, now, ttl))
            continue;
        lease_key(key, sizeof key, i);
        int64_t sent = mono_ms();
        natsStatus s = p->view.revision == 0
                           ? kvStore_CreateString(&rev, m->kv, key, m->self)
                           : kvStore_UpdateString(&rev, m->kv, key, m->self,
                                                  p->view.revision);
        if (s != NATS_OK) {
            memset(&p->view, 0, sizeof p->view);
            continue;
        }
        pthread_mutex_lock(&m->lease_lock);
        p->lease_rev = rev;
        p->deadline_ms = ts_lease_deadline(sent, ttl);
        p->held = 1;
        p->lost = 0;
        pthread_mutex_unlock(&m->lease_lock);
        p->epoch = rev;
        p->state = PART_RESTORE;
        owned++;
        log_lease("acquired", p, p->view.revision == 0 || ts_lease_is_free(&p->view)
                                      ? "free" : "expired");
    }
}

/* ---------------------------------------------------------- the data */

static void add_outcome(ts_jetstream *m, uint32_t partition, uint64_t seq,
                        uint32_t *index)
{
    char subj[SUBJECT_MAX];
    size_t n = ts_changelog_output_subject((const char *)m->topic.data,
                                           m->topic.len, subj, sizeof subj);
    if (ts_changelog_add_outcome(&m->builder, seq, (*index)++, subj, n,
                                 m->payload.data, m->payload.len) != 0)
        ts_log(TS_LOG_ERROR, "partition %u: out of memory for an outcome",
               partition);
}

static void reject_message(ts_jetstream *m, partition *p, uint64_t seq,
                           uint32_t *index, ts_reason reason,
                           const char *detail)
{
    ts_pipeline_count_rejection(p->pipeline, reason);
    ts_buf_reset(&m->topic);
    ts_buf_reset(&m->payload);
    if (ts_codec_encode_rejection(reason, NULL, 0, NULL, detail, &m->topic,
                                  &m->payload) == 0)
        add_outcome(m, p->index, seq, index);
}

static void process_message(ts_jetstream *m, partition *p, natsMsg *msg,
                            uint64_t seq)
{
    ts_inbound in = { natsMsg_GetData(msg),
                      (size_t)natsMsg_GetDataLength(msg), 1 };
    uint32_t index = 0;
    Tracesan__V1__LocationBatch *batch = NULL;
    ts_reason reason;
    char detail[160];
    if (ts_intake_open(m->settings, &in, m->wire, &m->arena, &batch, &reason,
                       detail, sizeof detail) != 0) {
        reject_message(m, p, seq, &index, reason, detail);
        return;
    }
    ts_time_bounds bounds = ts_intake_time_bounds(m->settings,
                                                  ts_wall_clock_ms());
    if (bounds.earliest_ms > 0)
        ts_pipeline_set_expiry_floor(p->pipeline, bounds.earliest_ms);
    for (size_t i = 0; i < batch->n_updates; i++) {
        ts_input input;
        ts_outcome outcome;
        ts_codec_input_from_update(batch->updates[i], &input);
        ts_codec_input_wire(&m->wire[i], &input);
        const char *user = input.user_id != NULL ? input.user_id : "";
        size_t user_len = input.has_wire_lengths &&
                                  input.user_id_wire_len != SIZE_MAX
                              ? input.user_id_wire_len
                              : strlen(user);
        memset(&outcome, 0, sizeof outcome);
        /* A user's ledger lives in one partition only; one sent to
         * another would be debited from a second, independent budget. */
        if (user[0] != '\0' &&
            ts_partition_of(user, user_len, m->n_partitions) != p->index) {
            outcome.user_id = user;
            outcome.ts_ms = input.ts_ms;
            outcome.reason = TS_REASON_INVALID_USER_ID;
            snprintf(outcome.detail, sizeof outcome.detail,
                     "user belongs to partition %u, not %u",
                     ts_partition_of(user, user_len, m->n_partitions),
                     p->index);
            ts_pipeline_count_rejection(p->pipeline, outcome.reason);
        } else if (ts_intake_check_time(m->settings, &bounds, input.ts_ms,
                                        &reason, detail,
                                        sizeof detail) != 0) {
            outcome.user_id = user;
            outcome.ts_ms = input.ts_ms;
            outcome.reason = reason;
            memcpy(outcome.detail, detail, sizeof detail);
            ts_pipeline_count_rejection(p->pipeline, reason);
        } else {
            ts_pipeline_process(p->pipeline, &input, &outcome);
        }
        ts_buf_reset(&m->topic);
        ts_buf_reset(&m->payload);
        if (ts_codec_encode_outcome(&outcome, &m->topic, &m->payload) == 0)
            add_outcome(m, p->index, seq, &index);
        else
            ts_log(TS_LOG_ERROR, "partition %u: cannot encode an outcome",
                   p->index);
    }
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].updates += batch->n_updates;
    pthread_mutex_unlock(&m->lock);
    ts_codec_batch_release(&m->arena, batch);
}

static void observe_commit(ts_jetstream *m, partition *p, double seconds)
{
    pthread_mutex_lock(&m->lock);
    size_t b = 0;
    while (b < N_COMMIT_BOUNDS && seconds > COMMIT_BOUNDS[b])
        b++;
    m->commit_buckets[b]++;
    m->commit_count++;
    m->commit_sum += seconds;
    m->stats[p->index].commits++;
    m->stats[p->index].commit_seconds_sum += seconds;
    if (m->n_latencies < LATENCY_SAMPLES)
        m->latencies[m->n_latencies++] = seconds;
    else
        m->latencies[m->commit_count % LATENCY_SAMPLES] = seconds;
    pthread_mutex_unlock(&m->lock);
}

typedef struct snapshot_ctx {
    ts_changelog_builder *builder;
    int failed;
} snapshot_ctx;

static int snapshot_user(void *arg, const char *id, size_t id_len,
                         const void *record, size_t len)
{
    snapshot_ctx *ctx = arg;
    if (ts_changelog_add_user(ctx->builder, id, id_len, record, len) != 0) {
        ctx->failed = 1;
        return 1;
    }
    return 0;
}

/* After the acknowledgement of everything before it is confirmed, one
 * record with every user replaces the partition's older records. */
static void maybe_snapshot(ts_jetstream *m, partition *p, natsMsg *last)
{
    if (p->records_since_snapshot < m->nats->snapshot_every)
        return;
    jsErrCode code = 0;
    if (natsMsg_AckSync(last, NULL, &code) != NATS_OK)
        return;  /* tried again after the next group */
    ts_changelog_builder_reset(&m->builder);
    snapshot_ctx ctx = { &m->builder, 0 };
    ts_record_map_each(p->records, snapshot_user, &ctx);
    ts_changelog_header header = {
        .kind = TS_CHANGELOG_SNAPSHOT, .owner = m->self,
        .owner_len = strlen(m->self), .epoch = p->epoch,
        .last_input_seq = p->last_input_seq,
    };
    if (ctx.failed ||
        ts_changelog_size(&m->builder, &header) > m->max_payload ||
        ts_changelog_finish(&m->builder, &header, &m->record) != 0)
        return;
    int appended = append_record(m, p, &m->record, 1);
    if (appended == 1)
        p->records_since_snapshot = 0;
    else if (appended == 0)
        lose_partition(m, p, "fenced out", 0);
    else
        p->state = PART_RESTORE;  /* stored or not: read it back */
}

/* An empty fetch looks the same whether there is no input or the
 * consumer is gone (deleted by an operator, a stream recreated): after a
 * quiet ttl, ask; a missing consumer is recreated by a rebuild. */
static void check_consumer(ts_jetstream *m, partition *p)
{
    int64_t now = mono_ms();
    if (now - p->input_seen_ms < m->nats->lease_ttl_ms)
        return;
    p->input_seen_ms = now;
    char durable[64];
    consumer_name(durable, sizeof durable, p->index);
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = wait_ms(m);  /* a stalled cluster must not hold the thread */
    natsStatus s = js_GetConsumerInfo(&ci, m->conn.js, TS_JS_STREAM_IN,
                                      durable, &jo, &code);
    if (s == NATS_OK) {
        jsConsumerInfo_Destroy(ci);
    } else if (code == JSConsumerNotFoundErr) {
        ts_log(TS_LOG_WARN, "partition %u: its consumer is gone; "
               "rebuilding", p->index);
        drop_state(m, p);
        p->state = PART_RESTORE;
    }
}

/* One group of one partition: fetch, process, commit, publish, ack. 1
 * when it had input. */
static int run_group(ts_jetstream *m, partition *p)
{
    if (enforce_lease(m, p))
        return 0;
    natsMsgList list = { 0 };
    jsFetchRequest req;
    jsFetchRequest_Init(&req);
    req.Batch = (int)m->nats->fetch_batch;
    req.NoWait = true;
    /* Bounds the group's record: outcomes take a few times the input's
     * bytes, and the record must fit one message. */
    req.MaxBytes = (int64_t)(m->max_payload / 8);
    natsStatus s = natsSubscription_FetchRequest(&list, p->sub, &req);
    if (s != NATS_OK || list.Count == 0) {
        natsMsgList_Destroy(&list);
        check_consumer(m, p);
        return 0;
    }
    p->input_seen_ms = mono_ms();
    double started = mono_s();
    ts_changelog_builder_reset(&m->builder);
    uint64_t last_seq = p->last_input_seq;
    uint64_t lag = 0;
    natsMsg *last = NULL;
    /* A delivery lost on its way (a server went away with our pull
     * request's answer) shows as a gap in the consumer's sequence. The
     * acknowledgement of a later message would acknowledge it too
     * (AckAll), so the group stops before the gap and the partition is
     * rebuilt, which recreates the consumer at the first input not
     * committed. */
    int gap = 0;
    for (int i = 0; i < list.Count && !gap; i++) {
        jsMsgMetaData *meta = NULL;
        if (natsMsg_GetMetaData(&meta, list.Msgs[i]) != NATS_OK) {
            gap = 1;
            break;
        }
        uint64_t seq = meta->Sequence.Stream;
        uint64_t delivery = meta->Sequence.Consumer;
        lag = meta->NumPending;
        jsMsgMetaData_Destroy(meta);
        if (delivery != p->last_delivery + 1 ||
            (seq <= last_seq && seq > p->last_input_seq)) {
            gap = 1;
            break;
        }
        p->last_delivery = delivery;
        last = list.Msgs[i];
        if (seq <= p->last_input_seq)
            continue;  /* committed before: its outcomes were republished */
        process_message(m, p, list.Msgs[i], seq);
        last_seq = seq;
    }
    if (gap)
        ts_log(TS_LOG_WARN, "partition %u: a gap in the consumer's "
               "deliveries; rebuilding after this group", p->index);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].messages += (uint64_t)list.Count;
    m->stats[p->index].lag = lag;
    pthread_mutex_unlock(&m->lock);
    if (last_seq == p->last_input_seq) {
        /* Only inputs committed before: nothing to write. */
        if (last != NULL)
            natsMsg_Ack(last, NULL);
        natsMsgList_Destroy(&list);
        if (gap) {
            drop_state(m, p);
            p->state = PART_RESTORE;
        }
        return 1;
    }
    if (ts_pipeline_save_dirty(p->pipeline) != 0) {
        lose_partition(m, p, "cannot encode user records", 1);
        natsMsgList_Destroy(&list);
        return 1;
    }
    ts_pipeline_mark_in_flight(p->pipeline);
    ts_changelog_header header = {
        .kind = TS_CHANGELOG_DELTA, .owner = m->self,
        .owner_len = strlen(m->self), .epoch = p->epoch,
        .last_input_seq = last_seq,
    };
    if (ts_changelog_size(&m->builder, &header) > m->max_payload) {
        ts_log(TS_LOG_ERROR, "partition %u: a group's record exceeds the "
               "server's max_payload (%zu bytes); raise it", p->index,
               m->max_payload);
        lose_partition(m, p, "record too large", 1);
        natsMsgList_Destroy(&list);
        return 1;
    }
    int appended = -1;
    if (lease_ok(m, p) &&
        ts_changelog_finish(&m->builder, &header, &m->record) == 0)
        appended = append_record(m, p, &m->record, 0);
    if (appended != 1) {
        /* Nothing of the group is published. Fenced: someone else owns
         * the partition. Unknown: the record may be stored, so the state
         * is read back from the changelog before going on. */
        if (appended == 0) {
            pthread_mutex_lock(&m->lock);
            m->stats[p->index].fenced++;
            pthread_mutex_unlock(&m->lock);
            lose_partition(m, p, "fenced out", 0);
        } else if (enforce_lease(m, p)) {
            /* stopped */
        } else {
            drop_state(m, p);
            p->state = PART_RESTORE;
        }
        natsMsgList_Destroy(&list);
        return 1;
    }
    ts_pipeline_mark_durable(p->pipeline);
    p->last_input_seq = last_seq;
    p->records_since_snapshot++;
    observe_commit(m, p, mono_s() - started);
    if (publish_outcomes(m, p->index, m->record.data, m->record.len) != 0) {
        /* Committed but not (all) published: the rebuild republishes. */
        drop_state(m, p);
        p->state = PART_RESTORE;
        natsMsgList_Destroy(&list);
        return 1;
    }
    /* AckAll: the last message acknowledges the whole group. */
    if (last != NULL) {
        natsMsg_Ack(last, NULL);
        if (!gap)
            maybe_snapshot(m, p, last);
    }
    natsMsgList_Destroy(&list);
    if (gap && p->state == PART_ACTIVE) {
        drop_state(m, p);
        p->state = PART_RESTORE;
    }
    return 1;
}

/* ---------------------------------------------------------- the thread */

/* Idle users leave memory as in the ZeroMQ mode (daemon/main.c); their
 * records stay in the partition's map, which a returning user is loaded
 * from. Between groups only: every user is durable then. */
static void expire_users(ts_jetstream *m)
{
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        partition *p = &m->parts[i];
        if (p->state != PART_ACTIVE)
            continue;
        if (m->settings->max_backdate_ms > 0)
            ts_pipeline_set_expiry_floor(p->pipeline,
                                         ts_wall_clock_ms() -
                                             m->settings->max_backdate_ms);
        ts_pipeline_expire(p->pipeline, EXPIRE_SCAN_PER_TICK);
    }
}

static int64_t lease_silent_ms(ts_jetstream *m)
{
    pthread_mutex_lock(&m->lease_lock);
    int64_t last = m->last_lease_ok_ms;
    pthread_mutex_unlock(&m->lease_lock);
    return mono_ms() - last;
}

void ts_jetstream_adopt_config(void *mode, ts_config *fresh)
{
    ts_jetstream *m = mode;
    pthread_mutex_lock(&m->lock);
    ts_config *superseded = m->pending;
    m->pending = fresh;
    pthread_mutex_unlock(&m->lock);
    if (superseded != NULL)
        ts_config_free(superseded);
}

/* Between two groups: every partition's pipeline takes the profiles of
 * the configuration a SIGHUP validated (the same names, order, mechanisms
 * and state sizes, or the reload was refused), so users keep their
 * windows and spend, as on the ZeroMQ path. */
static void apply_pending_reload(ts_jetstream *m)
{
    pthread_mutex_lock(&m->lock);
    ts_config *fresh = m->pending;
    m->pending = NULL;
    pthread_mutex_unlock(&m->lock);
    if (fresh == NULL)
        return;
    size_t applied = 0, failed = 0;
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        partition *p = &m->parts[i];
        if (p->pipeline == NULL)
            continue;
        char err[ERR_MAX];
        ts_profile *profiles = NULL;
        size_t n_profiles = 0, default_index = 0;
        if (ts_config_build_profiles(fresh, &profiles, &n_profiles,
                                     &default_index, err, sizeof err) != 0 ||
            ts_pipeline_replace_profiles(p->pipeline, profiles, n_profiles,
                                         default_index, err,
                                         sizeof err) != 0) {
            /* The template accepted the same profiles; a failure here is
             * out of memory. The partition is rebuilt from its changelog,
             * with pipelines made from the new configuration. */
            ts_log(TS_LOG_ERROR, "reload: partition %u: %s; rebuilding it",
                   p->index, err);
            drop_state(m, p);
            p->state = PART_RESTORE;
            p->retry_at_ms = 0;
            failed++;
            continue;
        }
        applied++;
    }
    m->config = fresh;
    if (m->adopted != NULL)
        ts_config_free(m->adopted);
    m->adopted = fresh;
    ts_log(TS_LOG_INFO, "reload: profiles applied to %zu active partitions"
           "%s", applied, failed > 0 ? " (some rebuilt)" : "");
}

static void *jetstream_thread(void *arg)
{
    ts_jetstream *m = arg;
    int64_t next_expiry_ms = 0;
    m->last_lease_ok_ms = mono_ms();
    if (pthread_create(&m->lease_thread, NULL, lease_thread_main, m) != 0) {
        ts_log(TS_LOG_ERROR, "cannot start the lease thread");
        set_health(m, "lease thread not running");
        return NULL;
    }
    m->lease_thread_started = 1;
    while (!m->stop) {
        apply_pending_reload(m);
        int64_t now = mono_ms();
        if (now >= m->next_lease_ms)
            lease_tick(m);
        if (now >= next_expiry_ms) {
            expire_users(m);
            next_expiry_ms = now + (m->settings->expire_interval_ms > 0
                                        ? m->settings->expire_interval_ms
                                        : 1000);
        }
        int busy = 0;
        /* One rebuild per pass: a rebuild waits on the cluster (seconds
         * right after a node is lost), and the partitions already active
         * get a group in between instead of waiting for all of them. */
        int rebuilt = 0;
        for (uint32_t i = 0; i < m->n_partitions && !m->stop; i++) {
            partition *p = &m->parts[i];
            if (mono_ms() >= m->next_lease_ms)
                lease_tick(m);
            if (!connected(m))
                break;
            if (p->state == PART_RESTORE) {
                if (rebuilt || mono_ms() < p->retry_at_ms)
                    continue;
                rebuilt = 1;
                busy = 1;
                int restored = restore_partition(m, p);
                if (restored == -2) {
                    lose_partition(m, p, "fenced out", 0);
                } else if (restored != 0) {
                    p->retry_at_ms = mono_ms() + RESTORE_RETRY_MS;
                    enforce_lease(m, p);
                }
                continue;
            }
            if (p->state == PART_ACTIVE)
                busy |= run_group(m, p);
        }
        int is_connected = connected(m);
        char health[256] = "";
        if (!is_connected)
            snprintf(health, sizeof health, "not connected to NATS");
        else if (lease_silent_ms(m) > m->nats->lease_ttl_ms)
            snprintf(health, sizeof health, "lease bucket unreachable for "
                     "more than nats.lease_ttl_s");
        set_health(m, health);
        pthread_mutex_lock(&m->lock);
        m->connected = is_connected;
        pthread_mutex_unlock(&m->lock);
        if (!busy)
            usleep(IDLE_SLEEP_US);
    }
    /* Renewals stop first, so that handing back finds our revisions. */
    m->lease_stop = 1;
    pthread_join(m->lease_thread, NULL);
    m->lease_thread_started = 0;
    /* Hand every partition back so others take over at once. */
    for (uint32_t i = 0; i < m->n_partitions; i++)
        lose_partition(m, &m->parts[i], "shutdown", 1);
    char key[TS_LEASE_OWNER_MAX + 8];
    snprintf(key, sizeof key, "i.%s", m->self);
    if (connected(m))
        kvStore_Delete(m->kv, key);
    return NULL;
}

/* ------------------------------------------------------- the loop side */

static void on_health_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_jetstream *m = arg;
    char reason[256];
    pthread_mutex_lock(&m->lock);
    snprintf(reason, sizeof reason, "%s", m->health);
    pthread_mutex_unlock(&m->lock);
    if (reason[0] != '\0') {
        ts_metrics_set_healthy();
        ts_metrics_set_unhealthy(reason);
    } else {
        ts_metrics_set_healthy();
    }
}

static void on_signal(evutil_socket_t signum, short what, void *arg)
{
    (void)what;
    ts_jetstream *m = arg;
    ts_log(TS_LOG_INFO, "received %s, shutting down",
           signum == SIGINT ? "SIGINT" : "SIGTERM");
    event_base_loopbreak(m->daemon->base);
}

int ts_jetstream_render_metrics(ts_jetstream *m, ts_buf *out)
{
    char line[256];
    int rc = 0;
#define PUT(...)                                                            \
    do {                                                                    \
        int n_ = snprintf(line, sizeof line, __VA_ARGS__);                  \
        if (rc == 0 && ts_buf_append(out, line, (size_t)n_) != 0)           \
            rc = -1;                                                        \
    } while (0)
    pthread_mutex_lock(&m->lock);
    PUT("# HELP tracesand_jetstream_connected 1 while connected to NATS\n"
        "# TYPE tracesand_jetstream_connected gauge\n"
        "tracesand_jetstream_connected %d\n", m->connected);
    static const struct { const char *name, *type, *help; } rows[] = {
        { "tracesand_partition_owned", "gauge",
          "1 while this instance holds the partition's lease" },
        { "tracesand_partition_lag_messages", "gauge",
          "input messages waiting in the partition's consumer" },
        { "tracesand_partition_messages_total", "counter",
          "input messages processed" },
        { "tracesand_partition_updates_total", "counter",
          "updates processed" },
        { "tracesand_partition_commits_total", "counter",
          "changelog records committed" },
        { "tracesand_partition_commit_seconds_sum", "counter",
          "time from fetch to the changelog acknowledgement" },
        { "tracesand_partition_takeovers_total", "counter",
          "times this instance took the partition over" },
        { "tracesand_partition_fenced_total", "counter",
          "commits refused because another owner wrote first" },
        { "tracesand_partition_republished_total", "counter",
          "changelog records republished on takeover" },
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        PUT("# HELP %s %s\n# TYPE %s %s\n", rows[r].name, rows[r].help,
            rows[r].name, rows[r].type);
        for (uint32_t i = 0; i < m->n_partitions; i++) {
            const part_stats *s = &m->stats[i];
            switch (r) {
            case 0: PUT("%s{partition=\"%u\"} %d\n", rows[r].name, i, s->owned); break;
            case 1: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->lag); break;
            case 2: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->messages); break;
            case 3: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->updates); break;
            case 4: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->commits); break;
            case 5: PUT("%s{partition=\"%u\"} %.6f\n", rows[r].name, i, s->commit_seconds_sum); break;
            case 6: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->takeovers); break;
            case 7: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->fenced); break;
            default: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->republished); break;
            }
        }
    }
    PUT("# HELP tracesand_jetstream_commit_seconds fetch to changelog "
        "acknowledgement, per group\n"
        "# TYPE tracesand_jetstream_commit_seconds histogram\n");
    uint64_t cumulative = 0;
    for (size_t b = 0; b < N_COMMIT_BOUNDS; b++) {
        cumulative += m->commit_buckets[b];
        PUT("tracesand_jetstream_commit_seconds_bucket{le=\"%g\"} %" PRIu64
            "\n", COMMIT_BOUNDS[b], cumulative);
    }
    cumulative += m->commit_buckets[N_COMMIT_BOUNDS];
    PUT("tracesand_jetstream_commit_seconds_bucket{le=\"+Inf\"} %" PRIu64
        "\ntracesand_jetstream_commit_seconds_sum %.6f\n"
        "tracesand_jetstream_commit_seconds_count %" PRIu64 "\n",
        cumulative, m->commit_sum, m->commit_count);
    pthread_mutex_unlock(&m->lock);
#undef PUT
    return rc;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void log_latencies(ts_jetstream *m)
{
    if (m->n_latencies == 0)
        return;
    qsort(m->latencies, m->n_latencies, sizeof *m->latencies, compare_double);
    size_t n = m->n_latencies;
    uint64_t updates = 0;
    for (uint32_t i = 0; i < m->n_partitions; i++)
        updates += m->stats[i].updates;
    ts_log(TS_LOG_INFO, "jetstream summary updates=%" PRIu64 " commits=%"
           PRIu64 " commit_ms p50=%.2f p90=%.2f p99=%.2f max=%.2f", updates,
           m->commit_count, m->latencies[n / 2] * 1000,
           m->latencies[n * 9 / 10] * 1000, m->latencies[n * 99 / 100] * 1000,
           m->latencies[n - 1] * 1000);
}

/* ---------------------------------------------------- transport table */

static const char *endpoint(const ts_transport *transport)
{
    (void)transport;
    return "jetstream";
}

static void no_counters(const ts_transport *transport,
                        ts_transport_counters *out)
{
    (void)transport;
    memset(out, 0, sizeof *out);
}

static int no_allow_lists(ts_transport *transport, const ts_settings *settings,
                          char *err, size_t errlen)
{
    (void)transport;
    (void)settings;
    (void)err;
    (void)errlen;
    return 0;
}

/* What the operations side asks of a transport; the data path of this
 * mode is the JetStream thread's. */
static const ts_transport_ops jetstream_ops = {
    .name = "jetstream",
    .input_endpoint = endpoint,
    .output_endpoint = endpoint,
    .get_counters = no_counters,
    .reload_allow_lists = no_allow_lists,
};

/* ------------------------------------------------------------- running */

static void mode_free(ts_jetstream *m)
{
    if (m->parts != NULL) {
        for (uint32_t i = 0; i < m->n_partitions; i++) {
            drop_state(m, &m->parts[i]);
            ts_record_map_free(m->parts[i].records);
        }
    }
    if (m->kv != NULL)
        kvStore_Destroy(m->kv);
    if (m->lease_kv != NULL)
        kvStore_Destroy(m->lease_kv);
    if (m->lease_js != NULL)
        jsCtx_Destroy(m->lease_js);
    ts_js_close(&m->conn);
    if (m->health_event != NULL)
        event_free(m->health_event);
    if (m->sigint_event != NULL)
        event_free(m->sigint_event);
    if (m->sigterm_event != NULL)
        event_free(m->sigterm_event);
    free(m->parts);
    free(m->stats);
    free(m->latencies);
    free(m->wire);
    free(m->encode_buf);
    if (m->pending != NULL)
        ts_config_free(m->pending);
    if (m->adopted != NULL)
        ts_config_free(m->adopted);
    ts_changelog_builder_free(&m->builder);
    ts_buf_free(&m->record);
    ts_buf_free(&m->topic);
    ts_buf_free(&m->payload);
    ts_codec_arena_free(&m->arena);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->publish_lock);
    pthread_mutex_destroy(&m->lease_lock);
    free(m);
}

int ts_jetstream_run(ts_daemon *daemon, const ts_config *config, ts_rng *rng,
                     const char *config_path, const char *const *overrides,
                     size_t n_overrides)
{
    const ts_settings *settings = daemon->settings;
    char err[ERR_MAX];
    if (settings->output_kind != TS_OUTPUT_JETSTREAM) {
        ts_log(TS_LOG_ERROR, "input.type = \"jetstream\" needs output.type "
               "= \"jetstream\"");
        return 1;
    }
    if (settings->state_dir != NULL)
        ts_log(TS_LOG_INFO, "state.dir is not used with input.type = "
               "\"jetstream\": ledgers live in the TRACESAN_STATE stream");
    ts_jetstream *m = calloc(1, sizeof *m);
    if (m == NULL)
        return 1;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->publish_lock, NULL);
    pthread_mutex_init(&m->lease_lock, NULL);
    m->daemon = daemon;
    m->config = config;
    m->settings = settings;
    m->nats = &settings->nats;
    m->rng = rng;
    m->n_partitions = (uint32_t)m->nats->partitions;
    ts_codec_arena_init(&m->arena);
    if (m->nats->instance_id != NULL && m->nats->instance_id[0] != '\0') {
        snprintf(m->self, sizeof m->self, "%s", m->nats->instance_id);
    } else {
        char host[48] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(m->self, sizeof m->self, "%s-%ld", host, (long)getpid());
    }
    for (char *c = m->self; *c != '\0'; c++)
        if (*c == '.' || *c == '*' || *c == '>' || *c == ' ')
            *c = '_';
    int status = 1;
    m->parts = calloc(m->n_partitions, sizeof *m->parts);
    m->stats = calloc(m->n_partitions, sizeof *m->stats);
    m->latencies = calloc(LATENCY_SAMPLES, sizeof *m->latencies);
    m->wire = calloc(settings->max_batch_updates, sizeof *m->wire);
    if (m->parts == NULL || m->stats == NULL || m->latencies == NULL ||
        m->wire == NULL) {
        ts_log(TS_LOG_ERROR, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        m->parts[i].index = i;
        m->parts[i].mode = m;
        m->parts[i].records = ts_record_map_new();
        if (m->parts[i].records == NULL) {
            ts_log(TS_LOG_ERROR, "out of memory");
            goto out;
        }
    }
    if (ts_js_connect(&m->conn, m->nats, m->self, on_publish_error, m, err,
                      sizeof err) != 0) {
        ts_log(TS_LOG_ERROR, "%s", err);
        goto out;
    }
    /* A cluster that is still electing its JetStream leader refuses API
     * calls for a few seconds. */
    for (int64_t give_up = mono_ms() + SETUP_PATIENCE_MS;;) {
        if (ts_js_ensure_streams(&m->conn, m->nats, err, sizeof err) == 0)
            break;
        if (mono_ms() >= give_up) {
            ts_log(TS_LOG_ERROR, "%s", err);
            goto out;
        }
        ts_log(TS_LOG_INFO, "%s; retrying", err);
        sleep(1);
    }
    /* Renewals give up quickly and try again: the deadline leaves room
     * for several attempts while a leader is being elected. */
    jsOptions lease_opts;
    jsOptions_Init(&lease_opts);
    lease_opts.Wait = m->nats->lease_ttl_ms / 8 > 250
                          ? m->nats->lease_ttl_ms / 8 : 250;
    if (js_KeyValue(&m->kv, m->conn.js, TS_JS_LEASE_BUCKET) != NATS_OK ||
        natsConnection_JetStream(&m->lease_js, m->conn.nc, &lease_opts) !=
            NATS_OK ||
        js_KeyValue(&m->lease_kv, m->lease_js, TS_JS_LEASE_BUCKET) !=
            NATS_OK) {
        ts_log(TS_LOG_ERROR, "cannot open the lease bucket");
        goto out;
    }
    m->max_payload = (size_t)natsConnection_GetMaxPayload(m->conn.nc);
    m->connected = 1;
    daemon->base = event_base_new();
    if (daemon->base == NULL) {
        ts_log(TS_LOG_ERROR, "cannot create event loop");
        goto out;
    }
    daemon->transport_ops = &jetstream_ops;
    daemon->transport = NULL;
    daemon->jetstream = m;
    m->sigint_event = evsignal_new(daemon->base, SIGINT, on_signal, m);
    m->sigterm_event = evsignal_new(daemon->base, SIGTERM, on_signal, m);
    m->health_event = event_new(daemon->base, -1, EV_PERSIST, on_health_tick,
                                m);
    struct timeval tick = { 0, HEALTH_TICK_MS * 1000 };
    if (m->sigint_event == NULL || m->sigterm_event == NULL ||
        m->health_event == NULL || evsignal_add(m->sigint_event, NULL) != 0 ||
        evsignal_add(m->sigterm_event, NULL) != 0 ||
        event_add(m->health_event, &tick) != 0) {
        ts_log(TS_LOG_ERROR, "cannot set up signal and timer events");
        goto out;
    }
    struct event *sighup_event = NULL;
    if (ts_daemon_start_operations(daemon, config_path, overrides,
                                   n_overrides, &sighup_event) != 0)
        goto out;
    if (pthread_create(&m->thread, NULL, jetstream_thread, m) != 0) {
        ts_log(TS_LOG_ERROR, "cannot start the JetStream thread");
        ts_daemon_stop_operations(daemon, sighup_event);
        goto out;
    }
    m->thread_started = 1;
    ts_log_always("ready input=jetstream output=jetstream instance=%s "
                  "partitions=%u%s%s", m->self, m->n_partitions,
                  daemon->http != NULL ? " http=" : "",
                  daemon->http != NULL ? ts_ops_http_address(daemon->http)
                                       : "");
    sd_notify(0, "READY=1");
    int loop = event_base_dispatch(daemon->base);
    sd_notify(0, "STOPPING=1");
    m->stop = 1;
    pthread_join(m->thread, NULL);
    m->thread_started = 0;
    log_latencies(m);
    ts_daemon_stop_operations(daemon, sighup_event);
    status = loop < 0 ? 1 : 0;
out:
    if (m->thread_started) {
        m->stop = 1;
        pthread_join(m->thread, NULL);
    }
    daemon->jetstream = NULL;
    mode_free(m);
    return status;
}
