/* Rebuilding partitions, on up to nats.restores_at_once workers at once,
 * and warm standby copies of the partitions others own.
 *
 * A rebuild reads the partition's changelog after what its replica holds
 * (everything, for a replica reset; only the tail for the replica of a
 * partition this instance owned or kept warm), fences older owners out,
 * republishes what may not have been published, and (re)creates the
 * consumer. Each step is retried with backoff while the lease holds: a
 * cluster that lost a node answers again once it elected new leaders,
 * and a rebuild that got as far as the consumer does not start over. */
#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/log.h"

#define BACKOFF_FIRST_MS 250
#define BACKOFF_MAX_MS 4000

/* Waits *delay_ms (doubled for next time, to BACKOFF_MAX_MS) unless the
 * lease is gone or the driver stops. 1 to try again, 0 to give up. */
static int back_off(ts_jetstream *m, partition *p, int64_t *delay_ms)
{
    int64_t until = ts_js_mono_ms() + *delay_ms;
    *delay_ms = *delay_ms * 2 < BACKOFF_MAX_MS ? *delay_ms * 2
                                               : BACKOFF_MAX_MS;
    while (ts_js_mono_ms() < until) {
        if (m->restore_stop || !ts_js_lease_ok(m, p))
            return 0;
        usleep(20000);
    }
    return !m->restore_stop && ts_js_lease_ok(m, p);
}

typedef struct tail_ctx {
    ts_jetstream *m;
    partition *p;
    size_t read;
    int last_is_ours;            /* the last record read: this owner's,
                                    this epoch */
    uint64_t epoch;
} tail_ctx;

static int apply_record(void *arg, natsMsg *msg, uint64_t seq)
{
    tail_ctx *ctx = arg;
    partition *p = ctx->p;
    if (seq <= p->replica.changelog_seq)
        return 0;
    ts_changelog_header h;
    if (ts_changelog_replica_apply(&p->replica, natsMsg_GetData(msg),
                                   (size_t)natsMsg_GetDataLength(msg), seq,
                                   &h) != 0)
        return 1;
    ctx->read++;
    ctx->last_is_ours = h.epoch == ctx->epoch &&
                        h.owner_len == strlen(ctx->m->self) &&
                        memcmp(h.owner, ctx->m->self, h.owner_len) == 0;
    return 0;
}

/* The tail of the changelog after what the replica holds. 0, or -1. */
static int read_tail(js_worker *w, tail_ctx *ctx)
{
    partition *p = ctx->p;
    char err[ERR_MAX];
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    int rc = ts_js_read_stream(w->js, TS_JS_STREAM_STATE, subj,
                               p->replica.changelog_seq + 1, apply_record,
                               ctx, &ctx->m->graveyard, err, sizeof err);
    if (rc != 0) {
        /* A record that cannot be applied leaves the replica half
         * changed: from the start next time. */
        if (rc > 0)
            ts_changelog_replica_reset(&p->replica);
        ts_log(TS_LOG_WARN, "partition %u: cannot read its changelog: %s",
               p->index, rc > 0 ? "undecodable record" : err);
        return -1;
    }
    return 0;
}

static void on_worker_publish_error(jsCtx *js, jsPubAckErr *pae,
                                    void *closure)
{
    (void)js;
    (void)pae;
    js_worker *w = closure;
    pthread_mutex_lock(&w->lock);
    w->publish_errors++;
    pthread_mutex_unlock(&w->lock);
}

/* The outcomes of the closed groups above the consumer's acknowledgement
 * floor (acks follow publishing, so the rest was published), read back by
 * sequence. The number of records, or -1. */
static long republish(ts_jetstream *m, js_worker *w, partition *p,
                      uint64_t ack_floor)
{
    ts_buf seqs = { 0 };
    long count = 0;
    if (ts_changelog_replica_closed_above(&p->replica, ack_floor, &seqs) != 0)
        count = -1;
    for (size_t at = 0; count >= 0 && at + 8 <= seqs.len; at += 8) {
        uint64_t seq;
        memcpy(&seq, seqs.data + at, 8);
        natsMsg *msg = NULL;
        jsErrCode code = 0;
        if (js_GetMsg(&msg, w->js, TS_JS_STREAM_STATE, seq, NULL, &code) !=
                NATS_OK ||
            ts_js_publish_outcomes_sync(m, w->js, &w->lock,
                                        &w->publish_errors, p->index,
                                        natsMsg_GetData(msg),
                                        (size_t)natsMsg_GetDataLength(msg)) !=
                0)
            count = -1;
        else
            count++;
        natsMsg_Destroy(msg);
    }
    ts_buf_free(&seqs);
    return count;
}

/* The consumer, anew: a copy left by the previous owner may have
 * delivered (not committed) further. 0, or -1 (logged). */
static int make_consumer(ts_jetstream *m, js_worker *w, partition *p)
{
    char err[ERR_MAX];
    char durable[64];
    char subj[SUBJECT_MAX];
    ts_js_consumer_name(durable, sizeof durable, p->index);
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_IN ".%u", p->index);
    jsErrCode code = 0;
    js_DeleteConsumer(w->js, TS_JS_STREAM_IN, durable, NULL, &code);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = durable;
    cc.FilterSubject = subj;
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = (int64_t)TS_JS_ACK_WAIT_MS * 1000000;
    cc.MaxAckPending = (int64_t)m->nats->max_ack_pending;
    /* A work queue holds only what was never acknowledged: from its
     * start (inputs up to the last committed one are acknowledged as
     * they come, without processing). Otherwise after the last committed
     * input. */
    if (!m->input_work_queue && p->replica.last_input_seq > 0) {
        cc.DeliverPolicy = js_DeliverByStartSequence;
        cc.OptStartSeq = p->replica.last_input_seq + 1;
    }
    jsConsumerInfo *ci = NULL;
    natsStatus s = js_AddConsumer(&ci, w->js, TS_JS_STREAM_IN, &cc, NULL,
                                  &code);
    if (s != NATS_OK) {
        ts_js_describe(err, sizeof err, "cannot create the consumer", s, code);
        ts_log(TS_LOG_WARN, "partition %u: %s; trying again", p->index, err);
        return -1;
    }
    jsConsumerInfo_Destroy(ci);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = TS_JS_STREAM_IN;
    so.Consumer = durable;
    s = js_PullSubscribe(&p->sub, w->js, subj, durable, NULL, &so, &code);
    if (s != NATS_OK) {
        ts_js_describe(err, sizeof err, "cannot bind the consumer", s, code);
        ts_log(TS_LOG_WARN, "partition %u: %s; trying again", p->index, err);
        p->sub = NULL;
        return -1;
    }
    return 0;
}

/* 0; -1 (the lease went, or the driver stops); -2 fenced out. */
static int restore(ts_jetstream *m, js_worker *w, partition *p)
{
    double started = ts_js_mono_s();
    int64_t delay = BACKOFF_FIRST_MS;
    char durable[64];
    ts_js_consumer_name(durable, sizeof durable, p->index);
    pthread_mutex_lock(&m->lease_lock);
    uint64_t epoch = p->epoch;
    pthread_mutex_unlock(&m->lease_lock);
    tail_ctx tail = { m, p, 0, 0, epoch };
    if (p->replica_broken) {
        ts_changelog_replica_reset(&p->replica);
        p->replica_broken = 0;
    }
    long republished = -1;
    uint64_t ack_floor = 0;
    for (;;) {
        /* What the input consumer acknowledged was published (acks
         * follow publishing), so only later records need publishing
         * again. */
        jsConsumerInfo *ci = NULL;
        jsErrCode code = 0;
        natsStatus s = js_GetConsumerInfo(&ci, w->js, TS_JS_STREAM_IN,
                                          durable, NULL, &code);
        if (s == NATS_OK) {
            ack_floor = ci->AckFloor.Stream;
            jsConsumerInfo_Destroy(ci);
        } else if (code != JSConsumerNotFoundErr) {
            if (!back_off(m, p, &delay))
                return -1;
            continue;
        }
        if (read_tail(w, &tail) != 0) {
            if (!back_off(m, p, &delay))
                return -1;
            continue;
        }
        /* The fence: from here on an older owner's append fails. */
        ts_changelog_builder builder = { 0 };
        ts_buf record = { 0 };
        ts_changelog_header header = {
            .kind = TS_CHANGELOG_FENCE, .owner = m->self,
            .owner_len = strlen(m->self), .epoch = epoch,
            .last_input_seq = p->replica.last_input_seq,
        };
        int appended = -1;
        if (ts_changelog_finish(&builder, &header, &record) == 0)
            appended = ts_js_append_sync(m, w->js, p, record.data,
                                         record.len, 0);
        ts_buf_free(&record);
        ts_changelog_builder_free(&builder);
        if (appended == 1)
            break;
        if (appended == 0) {
            /* Someone appended after what we read: a newer owner (the
             * partition is theirs), or this owner (an append whose answer
             * was lost before the rebuild, or this fence): read on and
             * fence again. */
            tail.last_is_ours = 0;
            if (read_tail(w, &tail) == 0 && !tail.last_is_ours) {
                ts_log(TS_LOG_WARN, "partition %u: fence refused: another "
                       "owner wrote to its changelog", p->index);
                ts_changelog_replica_reset(&p->replica);
                return -2;
            }
            continue;
        }
        if (!back_off(m, p, &delay))
            return -1;
    }
    p->replica.records_since_snapshot++;
    while ((republished = republish(m, w, p, ack_floor)) < 0) {
        ts_log(TS_LOG_WARN, "partition %u: republishing failed; trying "
               "again", p->index);
        if (!back_off(m, p, &delay))
            return -1;
    }
    /* After a node is lost, creating a consumer waits for the cluster's
     * new meta leader: tried again with backoff, with everything read so
     * far kept. */
    delay = BACKOFF_FIRST_MS;
    while (make_consumer(m, w, p) != 0)
        if (!back_off(m, p, &delay))
            return -1;
    ts_log(TS_LOG_INFO, "partition %u restored: %zu users, last input "
           "%" PRIu64 ", %zu records read, %ld records republished, "
           "%.0f ms, at_ms=%" PRId64, p->index,
           ts_record_map_count(p->replica.records),
           p->replica.last_input_seq, tail.read, republished,
           (ts_js_mono_s() - started) * 1000, ts_wall_clock_ms());
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].takeovers++;
    m->stats[p->index].republished += (uint64_t)republished;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

/* ------------------------------------------------------------ workers */

static partition *next_queued(ts_jetstream *m, uint32_t *cursor)
{
    for (uint32_t k = 0; k < m->n_partitions; k++) {
        partition *p = &m->parts[(*cursor + k) % m->n_partitions];
        if (p->restore_queued) {
            *cursor = (p->index + 1) % m->n_partitions;
            return p;
        }
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    js_worker *w = arg;
    ts_jetstream *m = w->mode;
    uint32_t cursor = (uint32_t)(w - m->workers);
    pthread_mutex_lock(&m->restore_lock);
    while (!m->restore_stop) {
        partition *p = next_queued(m, &cursor);
        if (p == NULL) {
            pthread_cond_wait(&m->restore_cond, &m->restore_lock);
            continue;
        }
        p->restore_queued = 0;
        p->restore_running = 1;
        pthread_mutex_unlock(&m->restore_lock);
        int result = restore(m, w, p);
        pthread_mutex_lock(&m->restore_lock);
        p->restore_running = 0;
        p->restore_done = 1;
        p->restore_result = result;
        pthread_mutex_unlock(&m->restore_lock);
        ts_js_wake(m);
        pthread_mutex_lock(&m->restore_lock);
    }
    pthread_mutex_unlock(&m->restore_lock);
    return NULL;
}

int ts_js_restore_open(ts_jetstream *m, char *err, size_t errlen)
{
    size_t n = m->nats->restores_at_once;
    if (n > MAX_RESTORE_WORKERS)
        n = MAX_RESTORE_WORKERS;
    if (n > m->n_partitions)
        n = m->n_partitions;
    for (size_t i = 0; i < n; i++) {
        js_worker *w = &m->workers[i];
        w->mode = m;
        pthread_mutex_init(&w->lock, NULL);
        m->n_workers = i + 1;
        jsOptions jo;
        jsOptions_Init(&jo);
        jo.Wait = TS_JS_WAIT_MS;
        jo.PublishAsync.MaxPending = 65536;
        jo.PublishAsync.ErrHandler = on_worker_publish_error;
        jo.PublishAsync.ErrHandlerClosure = w;
        natsStatus s = natsConnection_JetStream(&w->js, m->conn.nc, &jo);
        if (s != NATS_OK) {
            ts_js_describe(err, errlen, "jetstream context", s, 0);
            return -1;
        }
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            snprintf(err, errlen, "cannot start a restore worker");
            return -1;
        }
        w->started = 1;
    }
    return 0;
}

void ts_js_restore_close(ts_jetstream *m)
{
    pthread_mutex_lock(&m->restore_lock);
    m->restore_stop = 1;
    pthread_cond_broadcast(&m->restore_cond);
    pthread_mutex_unlock(&m->restore_lock);
    for (size_t i = 0; i < m->n_workers; i++) {
        js_worker *w = &m->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        w->started = 0;
    }
    for (size_t i = 0; i < m->n_workers; i++) {
        if (m->workers[i].js != NULL)
            jsCtx_Destroy(m->workers[i].js);
        m->workers[i].js = NULL;
        pthread_mutex_destroy(&m->workers[i].lock);
    }
    m->n_workers = 0;
}

void ts_js_queue_restore(ts_jetstream *m, partition *p)
{
    ts_js_standby_stop(p);
    pthread_mutex_lock(&m->restore_lock);
    p->restore_queued = 1;
    p->restore_done = 0;
    pthread_cond_signal(&m->restore_cond);
    pthread_mutex_unlock(&m->restore_lock);
}

int ts_js_restore_result(ts_jetstream *m, partition *p, int *result)
{
    pthread_mutex_lock(&m->restore_lock);
    int done = p->restore_done;
    if (done) {
        *result = p->restore_result;
        p->restore_done = 0;
    }
    pthread_mutex_unlock(&m->restore_lock);
    return done;
}

/* ------------------------------------------------------- standby copies */

static void on_standby_record(natsConnection *nc, natsSubscription *sub,
                              natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    partition *p = closure;
    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
        uint64_t seq = meta->Sequence.Stream;
        pthread_mutex_lock(&p->standby_lock);
        if (p->standby_live && seq > p->replica.changelog_seq &&
            ts_changelog_replica_apply(&p->replica, natsMsg_GetData(msg),
                                       (size_t)natsMsg_GetDataLength(msg),
                                       seq, NULL) != 0) {
            /* Cannot follow it: the next owner reads it all itself. */
            ts_changelog_replica_reset(&p->replica);
            p->standby_live = 0;
        }
        pthread_mutex_unlock(&p->standby_lock);
        jsMsgMetaData_Destroy(meta);
    }
    natsMsg_Destroy(msg);
}

/* Tails p's changelog from after what its replica holds (an ordered
 * consumer: libnats recreates it after a gap or a lost server). */
void ts_js_standby_start(ts_jetstream *m, partition *p)
{
    if (!m->nats->standby || p->standby != NULL)
        return;
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = TS_JS_STREAM_STATE;
    so.Ordered = true;
    if (p->replica.changelog_seq > 0) {
        so.Config.DeliverPolicy = js_DeliverByStartSequence;
        so.Config.OptStartSeq = p->replica.changelog_seq + 1;
    }
    pthread_mutex_lock(&p->standby_lock);
    p->standby_live = 1;
    pthread_mutex_unlock(&p->standby_lock);
    jsErrCode code = 0;
    natsStatus s = js_Subscribe(&p->standby, m->conn.js, subj,
                                on_standby_record, p, NULL, &so, &code);
    if (s != NATS_OK) {
        char err[ERR_MAX];
        ts_js_describe(err, sizeof err, "standby copy", s, code);
        ts_log(TS_LOG_DEBUG, "partition %u: %s", p->index, err);
        pthread_mutex_lock(&p->standby_lock);
        p->standby_live = 0;
        pthread_mutex_unlock(&p->standby_lock);
        p->standby = NULL;
    }
}

/* Standby copies whose subscription could not be made (a cluster
 * electing its leaders) are tried again. */
void ts_js_standby_keep(ts_jetstream *m)
{
    if (!m->nats->standby || m->leaving)
        return;
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        partition *p = &m->parts[i];
        pthread_mutex_lock(&p->standby_lock);
        int live = p->standby_live;
        pthread_mutex_unlock(&p->standby_lock);
        if (p->state != PART_IDLE || live)
            continue;
        /* A copy that could not follow its changelog starts over. */
        ts_js_standby_stop(p);
        ts_changelog_replica_reset(&p->replica);
        ts_js_standby_start(m, p);
    }
}

/* After this returns, no record is applied to p's replica any more (a
 * callback under way finishes first, under the lock). */
void ts_js_standby_stop(partition *p)
{
    pthread_mutex_lock(&p->standby_lock);
    p->standby_live = 0;
    pthread_mutex_unlock(&p->standby_lock);
    ts_jetstream *m = (ts_jetstream *)p->mode;
    ts_sub_graveyard_bury(&m->graveyard, p->standby);
    p->standby = NULL;
}
