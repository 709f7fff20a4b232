/* The commit path of a partition's groups, pipelined (docs/scale-out.md,
 * "Groups in flight"). Several groups of a partition may be on their way
 * at once, but each one's steps keep the order the privacy argument
 * needs, and each step is a plain function here:
 *
 *   seal_and_append()  the group's debits into its record(s), appended
 *                      asynchronously, each expecting the changelog
 *                      sequence of the record before (so appends are
 *                      chained in order, and a newer owner's fence
 *                      refuses them);
 *   committed()        called only once the group's last record is
 *                      acknowledged by the quorum: then, and only then,
 *                      its outcomes are published;
 *   retire()           called only once every outcome of the group is
 *                      stored and every group before it retired: then,
 *                      and only then, its inputs are acknowledged.
 *
 * libnats' threads only record acknowledgements (under flight_lock) and
 * wake the JetStream thread, which makes every transition. */
#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/log.h"

/* Room left in a changelog record for the publish's headers. */
#define RECORD_SLACK_BYTES 1024
/* Outstanding asynchronous publishes per context (flow control is the
 * groups in flight; this only bounds a runaway). */
#define MAX_PENDING_PUBLISHES 262144
/* A group whose outcomes are not all acknowledged after this many publish
 * waits (ts_js_wait_ms) is given up on: rebuilt, which republishes. */
#define GROUP_PUBLISH_PATIENCE 4

/* ----------------------------------------- libnats' threads: record */

/* The partition named by the last token of `subject` after `prefix`. */
static partition *partition_of(ts_jetstream *m, const char *subject,
                               const char *prefix)
{
    size_t n = strlen(prefix);
    if (subject == NULL || strncmp(subject, prefix, n) != 0)
        return NULL;
    char *end = NULL;
    unsigned long p = strtoul(subject + n, &end, 10);
    if (end == subject + n || *end != '\0' || p >= m->n_partitions)
        return NULL;
    return &m->parts[p];
}

static void on_append_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa,
                          jsPubAckErr *pae, void *closure)
{
    (void)js;
    ts_jetstream *m = closure;
    partition *p = partition_of(m, natsMsg_GetSubject(msg),
                                TS_JS_SUBJECT_STATE ".");
    const char *expect_text = NULL;
    uint64_t expect = 0;
    if (natsMsgHeader_Get(msg, "Nats-Expected-Last-Subject-Sequence",
                          &expect_text) == NATS_OK && expect_text != NULL)
        expect = strtoull(expect_text, NULL, 10);
    pthread_mutex_lock(&m->flight_lock);
    js_flight *f = p != NULL ? p->appending : NULL;
    /* An answer to an append the partition gave up on (a rebuild since)
     * expects another sequence, or finds nothing appending. */
    if (f != NULL && f->stage == FLIGHT_APPENDING &&
        f->append_result == APPEND_PENDING && f->append_expect == expect) {
        if (pa != NULL) {
            f->append_result = APPEND_STORED;
            f->append_seq = pa->Sequence;
        } else {
            f->append_result = pae != NULL &&
                                       pae->ErrCode ==
                                           JSStreamWrongLastSequenceErr
                                   ? APPEND_FENCED : APPEND_FAILED;
        }
        m->wakeups++;
        pthread_cond_signal(&m->flight_cond);
    }
    pthread_mutex_unlock(&m->flight_lock);
    natsMsg_Destroy(msg);
}

/* "<p>.<input seq>.<index>" */
static int parse_msg_id(const char *id, unsigned long *p, uint64_t *seq)
{
    char *end = NULL;
    if (id == NULL)
        return -1;
    *p = strtoul(id, &end, 10);
    if (end == id || *end != '.')
        return -1;
    const char *at = end + 1;
    *seq = strtoull(at, &end, 10);
    return end == at || *end != '.' ? -1 : 0;
}

static void on_outcome_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa,
                           jsPubAckErr *pae, void *closure)
{
    (void)js;
    (void)pae;
    ts_jetstream *m = closure;
    const char *id = NULL;
    unsigned long index = 0;
    uint64_t seq = 0;
    natsMsgHeader_Get(msg, "Nats-Msg-Id", &id);
    if (parse_msg_id(id, &index, &seq) == 0 && index < m->n_partitions) {
        partition *p = &m->parts[index];
        pthread_mutex_lock(&m->flight_lock);
        for (size_t i = 0; i < MAX_FLIGHTS; i++) {
            js_flight *f = &p->flights[i];
            if (f->stage != FLIGHT_PUBLISHING || f->outcomes_pending == 0 ||
                seq < f->first_input_seq || seq > f->last_input_seq)
                continue;
            if (pa == NULL)
                f->publish_failed = 1;
            if (--f->outcomes_pending == 0 || pa == NULL) {
                m->wakeups++;
                pthread_cond_signal(&m->flight_cond);
            }
            break;
        }
        pthread_mutex_unlock(&m->flight_lock);
    }
    natsMsg_Destroy(msg);
}

int ts_js_commit_open(ts_jetstream *m, char *err, size_t errlen)
{
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = TS_JS_WAIT_MS;
    jo.PublishAsync.MaxPending = MAX_PENDING_PUBLISHES;
    jo.PublishAsync.StallWait = ts_js_wait_ms(m);
    jo.PublishAsync.AckHandler = on_append_ack;
    jo.PublishAsync.AckHandlerClosure = m;
    natsStatus s = natsConnection_JetStream(&m->append_js,
                                            m->commit_conn.nc, &jo);
    if (s == NATS_OK) {
        jo.PublishAsync.AckHandler = on_outcome_ack;
        s = natsConnection_JetStream(&m->publish_js, m->conn.nc, &jo);
    }
    if (s != NATS_OK) {
        ts_js_describe(err, errlen, "jetstream context", s, 0);
        return -1;
    }
    const char *hook = getenv("TRACESAND_TEST_EXIT_BEFORE_PUBLISH");
    if (hook != NULL)
        m->exit_before_publish = strtoull(hook, NULL, 10);
    hook = getenv("TRACESAND_TEST_GAP_EVERY");
    if (hook != NULL)
        m->gap_every = strtoull(hook, NULL, 10);
    return 0;
}

void ts_js_commit_close(ts_jetstream *m)
{
    if (m->append_js != NULL)
        jsCtx_Destroy(m->append_js);
    if (m->publish_js != NULL)
        jsCtx_Destroy(m->publish_js);
    m->append_js = m->publish_js = NULL;
}

/* ------------------------------------------------ the group's slots */

static js_flight *flight_at(partition *p, size_t i)
{
    return &p->flights[(p->head + i) % MAX_FLIGHTS];
}

static void free_inputs(js_flight *f)
{
    for (size_t i = 0; i < f->n_inputs; i++)
        natsMsg_Destroy(f->inputs[i]);
    f->n_inputs = 0;
}

/* Empties the slot for its next group, keeping its buffers. */
static void clear_flight(js_flight *f)
{
    free_inputs(f);
    ts_changelog_builder_reset(&f->builder);
    ts_buf_reset(&f->undo);
    ts_buf_reset(&f->records);
    ts_buf_reset(&f->seqs);
    f->next_record = f->records_left = 0;
    f->first_input_seq = f->last_input_seq = 0;
    f->input_bytes = 0;
    f->n_outcomes = 0;
    f->append_result = APPEND_PENDING;
    f->append_expect = f->append_seq = 0;
    f->outcomes_pending = 0;
    f->publish_failed = 0;
}

js_flight *ts_js_open_flight(ts_jetstream *m, partition *p)
{
    if (p->count > 0 && flight_at(p, p->count - 1)->stage == FLIGHT_OPEN)
        return flight_at(p, p->count - 1);
    if (p->count >= m->nats->groups_in_flight)
        return NULL;
    js_flight *f = flight_at(p, p->count);
    clear_flight(f);
    f->started = ts_js_mono_s();
    pthread_mutex_lock(&m->flight_lock);
    f->stage = FLIGHT_OPEN;
    p->count++;
    pthread_mutex_unlock(&m->flight_lock);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].in_flight = p->count;
    pthread_mutex_unlock(&m->lock);
    return f;
}

void ts_js_close_empty_flight(ts_jetstream *m, partition *p)
{
    if (p->count == 0)
        return;
    js_flight *f = flight_at(p, p->count - 1);
    if (f->stage != FLIGHT_OPEN || f->n_inputs > 0)
        return;
    clear_flight(f);
    pthread_mutex_lock(&m->flight_lock);
    f->stage = FLIGHT_FREE;
    p->count--;
    pthread_mutex_unlock(&m->flight_lock);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].in_flight = p->count;
    pthread_mutex_unlock(&m->lock);
}

void ts_js_drop_flights(ts_jetstream *m, partition *p)
{
    /* Newest first: a user saved by two groups gets back what it had
     * before the older one. */
    for (size_t i = p->count; i-- > 0;) {
        js_flight *f = flight_at(p, i);
        if (f->stage == FLIGHT_OPEN || f->stage == FLIGHT_APPENDING)
            ts_js_undo(p, f);
    }
    pthread_mutex_lock(&m->flight_lock);
    for (size_t i = 0; i < MAX_FLIGHTS; i++)
        p->flights[i].stage = FLIGHT_FREE;
    p->appending = NULL;
    p->head = p->count = 0;
    pthread_mutex_unlock(&m->flight_lock);
    for (size_t i = 0; i < MAX_FLIGHTS; i++)
        clear_flight(&p->flights[i]);
    /* The appends were chained on what was committed. */
    p->chain_seq = p->replica.changelog_seq;
    if (m->filling != NULL && m->filling >= p->flights &&
        m->filling < p->flights + MAX_FLIGHTS)
        m->filling = NULL;
}

/* -------------------------------------------------------- 1. commit */

/* Sends the group's next record, expecting the sequence of the one
 * before it on the partition's changelog subject. */
static void append_next(ts_jetstream *m, partition *p, js_flight *f)
{
    const void *record = NULL;
    size_t len = 0;
    ts_changelog_next_split(&f->records, &f->next_record, &record, &len);
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    natsMsg *msg = NULL;
    natsStatus s = natsMsg_Create(&msg, subj, NULL, (const char *)record,
                                  (int)len);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = ts_js_wait_ms(m);
    if (p->chain_seq > 0)
        po.ExpectLastSubjectSeq = p->chain_seq;
    else
        po.ExpectNoMessage = true;
    pthread_mutex_lock(&m->flight_lock);
    f->append_result = APPEND_PENDING;
    f->append_expect = p->chain_seq;
    pthread_mutex_unlock(&m->flight_lock);
    if (s == NATS_OK)
        s = js_PublishMsgAsync(m->append_js, &msg, &po);
    natsMsg_Destroy(msg);
    if (s != NATS_OK) {
        pthread_mutex_lock(&m->flight_lock);
        f->append_result = APPEND_FAILED;
        pthread_mutex_unlock(&m->flight_lock);
    }
}

/* The group's debits, saved into its record(s), go to the changelog. */
static js_verdict seal_and_append(ts_jetstream *m, partition *p,
                                  js_flight *f, const char **why)
{
    m->filling = f;
    int saved = ts_pipeline_save_dirty(p->pipeline);
    m->filling = NULL;
    if (saved != 0) {
        *why = "cannot encode user records";
        return JS_GIVE_UP;
    }
    /* The map holds the saved records now (undone if the group fails),
     * so the pipeline need not keep them from expiring. */
    ts_pipeline_mark_in_flight(p->pipeline);
    ts_pipeline_mark_durable(p->pipeline);
    ts_changelog_header header = {
        .kind = TS_CHANGELOG_DELTA, .owner = m->self,
        .owner_len = strlen(m->self), .epoch = p->epoch,
        .last_input_seq = f->last_input_seq,
    };
    size_t n_records = 0;
    if (ts_changelog_finish_split(&f->builder, &header,
                                  m->max_payload - RECORD_SLACK_BYTES,
                                  &f->records, &n_records) != 0) {
        ts_log(TS_LOG_ERROR, "partition %u: a user record or an outcome "
               "alone exceeds the server's max_payload (%zu bytes): lower "
               "output.batch_outcomes or raise max_payload", p->index,
               m->max_payload);
        *why = "record too large";
        return JS_GIVE_UP;
    }
    f->records_left = n_records;
    f->next_record = 0;
    pthread_mutex_lock(&m->flight_lock);
    f->stage = FLIGHT_APPENDING;
    p->appending = f;
    pthread_mutex_unlock(&m->flight_lock);
    append_next(m, p, f);
    return JS_MOVED;
}

void ts_js_wait_news(ts_jetstream *m, uint64_t seen, long wait_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += wait_ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&m->flight_lock);
    if (m->wakeups == seen)
        pthread_cond_timedwait(&m->flight_cond, &m->flight_lock, &until);
    pthread_mutex_unlock(&m->flight_lock);
}

/* ------------------------------------------------------- 2. publish */

typedef struct async_publish {
    ts_jetstream *m;
    uint32_t partition;
    size_t unsent;
} async_publish;

static int publish_async_one(void *arg, uint64_t input_seq, uint32_t index,
                             const char *subject, size_t subject_len,
                             const void *payload, size_t len)
{
    async_publish *ctx = arg;
    /* No per-message MaxWait: libnats would keep a timer entry per
     * outcome (and wake for each at its deadline); the group as a whole
     * is given up on instead (GROUP_PUBLISH_PATIENCE). */
    natsStatus s = ts_js_publish_outcome(ctx->m->publish_js, ctx->partition,
                                         input_seq, index, subject,
                                         subject_len, payload, len);
    if (s != NATS_OK)
        ctx->unsent++;
    return 0;
}

/* Only for a group whose every record the quorum stored: its outcomes
 * go to TRACESAN_OUT, each under its message id. */
static void publish_outcomes(ts_jetstream *m, partition *p, js_flight *f)
{
    pthread_mutex_lock(&m->flight_lock);
    f->outcomes_pending = f->n_outcomes;
    f->publish_failed = 0;
    pthread_mutex_unlock(&m->flight_lock);
    f->published_ms = ts_js_mono_ms();
    async_publish ctx = { m, p->index, 0 };
    ts_changelog_visitor visitor = { &ctx, NULL, publish_async_one };
    const void *record;
    size_t len, at = 0;
    ts_changelog_header header;
    while (ts_changelog_next_split(&f->records, &at, &record, &len))
        ts_changelog_decode(record, len, &header, &visitor);
    if (ctx.unsent > 0) {
        pthread_mutex_lock(&m->flight_lock);
        f->publish_failed = 1;
        f->outcomes_pending -= ctx.unsent < f->outcomes_pending
                                   ? ctx.unsent : f->outcomes_pending;
        pthread_mutex_unlock(&m->flight_lock);
    }
}

/* The group's last record is stored: it is committed. */
static void committed(ts_jetstream *m, partition *p, js_flight *f)
{
    /* What it changed is the partition's state now: nothing to take
     * back, and a rebuild reads on after its last record. */
    ts_buf_reset(&f->undo);
    for (size_t at = 0; at + 8 <= f->seqs.len; at += 8) {
        uint64_t pair[2];
        memcpy(&pair[0], f->seqs.data + at, 8);
        pair[1] = f->last_input_seq;
        ts_buf_append(&p->replica.closed, pair, sizeof pair);
    }
    p->replica.changelog_seq = p->chain_seq;
    p->replica.last_input_seq = f->last_input_seq;
    p->replica.records_since_snapshot += f->seqs.len / 8;
    if (p->replica.records_since_snapshot >= m->nats->snapshot_every)
        p->snapshot_due = 1;
    double seconds = ts_js_mono_s() - f->started;
    ts_js_observe_commit(m, p, seconds);
    const ts_observer *o = m->group.observer;
    if (o != NULL && o->commit != NULL)
        o->commit(o->arg, seconds, f->n_outcomes);
    pthread_mutex_lock(&m->flight_lock);
    p->appending = NULL;
    f->stage = FLIGHT_PUBLISHING;
    pthread_mutex_unlock(&m->flight_lock);
    if (m->exit_before_publish > 0 &&
        ++m->commits_seen >= m->exit_before_publish && p->count >= 2) {
        /* Test hook: as a kill -9 between this record's quorum
         * acknowledgement and its first publish. */
        ts_log(TS_LOG_WARN, "test hook: exiting at_ms=%" PRId64 " after "
               "partition %u's record of inputs up to %" PRIu64 " was "
               "stored, before publishing it, with %zu groups in flight",
               ts_wall_clock_ms(), p->index, f->last_input_seq, p->count);
        _exit(137);
    }
    publish_outcomes(m, p, f);
}

/* ----------------------------------------------------------- 3. ack */

/* Only for the oldest group, once every outcome of it is stored: its
 * inputs are acknowledged (a work queue then drops them). Before a
 * snapshot the last acknowledgement is confirmed, so the new owner of a
 * snapshot never needs the records it rolled up. */
static void retire(ts_jetstream *m, partition *p, js_flight *f)
{
    int confirm = p->snapshot_due && p->count == 1;
    for (size_t i = 0; i < f->n_inputs; i++) {
        jsErrCode code = 0;
        if (confirm && i + 1 == f->n_inputs) {
            if (natsMsg_AckSync(f->inputs[i], NULL, &code) != NATS_OK)
                p->snapshot_due = 0;  /* tried again later */
        } else {
            natsMsg_Ack(f->inputs[i], NULL);
        }
    }
    const void *record;
    size_t len, at = 0;
    while (ts_changelog_next_split(&f->records, &at, &record, &len))
        ts_js_announce_published(m, record, len, 0);
    pthread_mutex_lock(&m->lock);
    m->totals.published += f->n_outcomes;
    pthread_mutex_unlock(&m->lock);
    clear_flight(f);
    pthread_mutex_lock(&m->flight_lock);
    f->stage = FLIGHT_FREE;
    p->head = (p->head + 1) % MAX_FLIGHTS;
    p->count--;
    pthread_mutex_unlock(&m->flight_lock);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].in_flight = p->count;
    pthread_mutex_unlock(&m->lock);
}

/* ------------------------------------------------------- moving on */

js_verdict ts_js_advance(ts_jetstream *m, partition *p, const char **why)
{
    js_verdict moved = JS_IDLE;
    js_flight *f = p->appending;
    if (f != NULL) {
        pthread_mutex_lock(&m->flight_lock);
        int result = f->append_result;
        uint64_t seq = f->append_seq;
        pthread_mutex_unlock(&m->flight_lock);
        if (result == APPEND_FENCED)
            return JS_FENCED;
        if (result == APPEND_FAILED) {
            *why = "a changelog append failed";
            return JS_REBUILD;
        }
        if (result == APPEND_STORED) {
            p->chain_seq = seq;
            ts_buf_append(&f->seqs, &seq, sizeof seq);
            if (--f->records_left > 0) {
                if (!ts_js_lease_ok(m, p)) {
                    *why = "lease lost";
                    return JS_STOP;
                }
                append_next(m, p, f);
            } else {
                committed(m, p, f);
            }
            moved = JS_MOVED;
        }
    }
    while (p->count > 0) {
        f = flight_at(p, 0);
        if (f->stage != FLIGHT_PUBLISHING)
            break;
        pthread_mutex_lock(&m->flight_lock);
        size_t pending = f->outcomes_pending;
        int failed = f->publish_failed;
        pthread_mutex_unlock(&m->flight_lock);
        if (failed) {
            /* Committed, not all published: the rebuild republishes. */
            *why = "publishing outcomes failed";
            return JS_REBUILD;
        }
        if (pending > 0 && ts_js_mono_ms() - f->published_ms >
                               GROUP_PUBLISH_PATIENCE * ts_js_wait_ms(m)) {
            *why = "publishing outcomes went unanswered";
            return JS_REBUILD;
        }
        if (pending > 0)
            break;
        retire(m, p, f);
        moved = JS_MOVED;
    }
    /* The newest group goes once nothing is being appended: its record
     * must expect the one before it. */
    if (p->appending == NULL && p->count > 0) {
        f = flight_at(p, p->count - 1);
        if (f->stage == FLIGHT_OPEN && f->n_inputs > 0) {
            if (f->first_input_seq == 0) {
                /* Only inputs committed before: nothing to write or
                 * publish, only to acknowledge in turn. */
                pthread_mutex_lock(&m->flight_lock);
                f->stage = FLIGHT_PUBLISHING;
                pthread_mutex_unlock(&m->flight_lock);
                moved = JS_MOVED;
            } else if (!ts_js_lease_ok(m, p)) {
                *why = "lease lost";
                return JS_STOP;
            } else {
                js_verdict sealed = seal_and_append(m, p, f, why);
                if (sealed != JS_MOVED)
                    return sealed;
                moved = JS_MOVED;
            }
        }
    }
    return moved;
}
