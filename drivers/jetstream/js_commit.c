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
 * waits (ts_js_wait_ms), or some refused, sends those not acknowledged
 * again (a refusal after a pause doubling from PUBLISH_RESEND_FIRST_MS up
 * to PUBLISH_RESEND_MAX_MS); after PUBLISH_ROUNDS sends the partition is
 * rebuilt, which republishes. */
#define PUBLISH_PATIENCE_WAITS 2
#define PUBLISH_ROUNDS 12
#define PUBLISH_RESEND_FIRST_MS 100
#define PUBLISH_RESEND_MAX_MS 2000
/* An append that failed without an answer that settles it (a timeout, no
 * responders: a stream electing its leader after a node's loss) is sent
 * again, the same record expecting the same sequence, this many times at
 * most, the pause doubling from APPEND_RESEND_FIRST_MS up to
 * APPEND_RESEND_MAX_MS (about 20 s in all, a leader election's length);
 * then the partition is rebuilt as before. */
#define APPEND_ATTEMPTS 12
#define APPEND_RESEND_FIRST_MS 100
#define APPEND_RESEND_MAX_MS 2000

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
        if (pa != NULL && m->drop_append_every > 0 &&
            ++m->appends_answered % m->drop_append_every == 0) {
            /* Test hook: as an answer lost on its way. */
            f->append_result = APPEND_FAILED;
        } else if (pa != NULL) {
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
static int parse_msg_id(const char *id, unsigned long *p, uint64_t *seq,
                        unsigned long *index)
{
    char *end = NULL;
    if (id == NULL)
        return -1;
    *p = strtoul(id, &end, 10);
    if (end == id || *end != '.')
        return -1;
    const char *at = end + 1;
    *seq = strtoull(at, &end, 10);
    if (end == at || *end != '.')
        return -1;
    at = end + 1;
    *index = strtoul(at, &end, 10);
    return end == at || *end != '\0' ? -1 : 0;
}

static int key_cmp(const js_outcome_key *a, const js_outcome_key *b)
{
    if (a->input_seq != b->input_seq)
        return a->input_seq < b->input_seq ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

static int key_qsort_cmp(const void *a, const void *b)
{
    return key_cmp(a, b);
}

/* Where `key` is among the group's outcomes, or -1. */
static long find_outcome(const js_flight *f, const js_outcome_key *key)
{
    size_t lo = 0, hi = f->n_outcomes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_cmp(&f->outcome_keys[mid], key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->n_outcomes && key_cmp(&f->outcome_keys[lo], key) == 0
               ? (long)lo : -1;
}

static void on_outcome_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa,
                           jsPubAckErr *pae, void *closure)
{
    (void)js;
    (void)pae;
    ts_jetstream *m = closure;
    const char *id = NULL;
    unsigned long partition_index = 0, index = 0;
    uint64_t seq = 0;
    natsMsgHeader_Get(msg, "Nats-Msg-Id", &id);
    if (parse_msg_id(id, &partition_index, &seq, &index) == 0 &&
        partition_index < m->n_partitions && index <= UINT32_MAX) {
        partition *p = &m->parts[partition_index];
        js_outcome_key key = { seq, (uint32_t)index };
        pthread_mutex_lock(&m->flight_lock);
        for (size_t i = 0; i < MAX_FLIGHTS; i++) {
            js_flight *f = &p->flights[i];
            if (f->stage != FLIGHT_PUBLISHING || f->outcomes_pending == 0 ||
                seq < f->first_input_seq || seq > f->last_input_seq)
                continue;
            long at = find_outcome(f, &key);
            if (at < 0 || f->outcome_acked[at])
                break;
            if (pa == NULL) {
                f->publish_failed = 1;
            } else if (m->drop_outcome_every > 0 &&
                       ++m->outcomes_answered % m->drop_outcome_every == 0) {
                /* Test hook: as an answer lost on its way (stored). */
            } else {
                f->outcome_acked[at] = 1;
                f->outcomes_pending--;
            }
            if (f->outcomes_pending == 0 || pa == NULL) {
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
    hook = getenv("TRACESAND_TEST_DROP_APPEND_ANSWER_EVERY");
    if (hook != NULL)
        m->drop_append_every = strtoull(hook, NULL, 10);
    hook = getenv("TRACESAND_TEST_DROP_OUTCOME_ANSWER_EVERY");
    if (hook != NULL)
        m->drop_outcome_every = strtoull(hook, NULL, 10);
    hook = getenv("TRACESAND_TEST_DROP_RENEWAL_ANSWER_EVERY");
    if (hook != NULL)
        m->drop_renewal_every = strtoull(hook, NULL, 10);
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
    f->sending_record = 0;
    f->append_attempts = 0;
    f->resend_at_ms = 0;
    f->first_input_seq = f->last_input_seq = 0;
    f->input_bytes = 0;
    f->n_outcomes = 0;
    f->append_result = APPEND_PENDING;
    f->append_expect = f->append_seq = 0;
    f->outcomes_pending = 0;
    f->publish_failed = 0;
    f->publish_rounds = 0;
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

/* Sends the record at f->sending_record, expecting the sequence of the
 * one before it on the partition's changelog subject. */
static void append_sending(ts_jetstream *m, partition *p, js_flight *f)
{
    const void *record = NULL;
    size_t len = 0;
    size_t at = f->sending_record;
    ts_changelog_next_split(&f->records, &at, &record, &len);
    f->append_attempts++;
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

/* Sends the group's next record (its first attempt). */
static void append_next(ts_jetstream *m, partition *p, js_flight *f)
{
    f->sending_record = f->next_record;
    const void *record = NULL;
    size_t len = 0;
    ts_changelog_next_split(&f->records, &f->next_record, &record, &len);
    f->append_attempts = 0;
    f->resend_at_ms = 0;
    append_sending(m, p, f);
}

/* A send of the record on its way was refused because the subject's last
 * sequence is not the one it expects. After an earlier send of the same
 * record went unanswered, that can be the earlier send itself, stored:
 * then the subject's last record is byte for byte the one on its way
 * (the chained expectation lets at most one copy in, and no other writer
 * sends this owner's records). Anything else there is a newer owner's.
 * APPEND_STORED (*seq set), APPEND_FENCED, or APPEND_FAILED when the
 * stream could not be read (the caller rebuilds). */
static int settle_refusal(ts_jetstream *m, partition *p, js_flight *f,
                          uint64_t *seq)
{
    if (f->append_attempts < 2)
        return APPEND_FENCED;
    const void *record = NULL;
    size_t len = 0;
    size_t at = f->sending_record;
    ts_changelog_next_split(&f->records, &at, &record, &len);
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    natsMsg *last = NULL;
    jsErrCode code = 0;
    /* The JetStream thread waits here: no longer than an append would. */
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = ts_js_wait_ms(m);
    natsStatus s = js_GetLastMsg(&last, m->conn.js, TS_JS_STREAM_STATE, subj,
                                 &jo, &code);
    if (s != NATS_OK)
        return s == NATS_NOT_FOUND ? APPEND_FENCED : APPEND_FAILED;
    if (natsMsg_GetSequence(last) == p->chain_seq) {
        /* What the send expects is there after all: not settled. */
        natsMsg_Destroy(last);
        return APPEND_FAILED;
    }
    int ours = (size_t)natsMsg_GetDataLength(last) == len &&
               memcmp(natsMsg_GetData(last), record, len) == 0;
    *seq = natsMsg_GetSequence(last);
    natsMsg_Destroy(last);
    if (ours)
        ts_log(TS_LOG_INFO, "partition %u: a changelog append answered "
               "late was stored (sequence %" PRIu64 ")", p->index, *seq);
    return ours ? APPEND_STORED : APPEND_FENCED;
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
    js_flight *f;
    uint32_t partition;
    int again;                   /* a later send: skip what is stored */
    size_t unsent;
} async_publish;

static int publish_async_one(void *arg, uint64_t input_seq, uint32_t index,
                             const char *subject, size_t subject_len,
                             const void *payload, size_t len)
{
    async_publish *ctx = arg;
    if (ctx->again) {
        js_outcome_key key = { input_seq, index };
        pthread_mutex_lock(&ctx->m->flight_lock);
        long at = find_outcome(ctx->f, &key);
        int acked = at >= 0 && ctx->f->outcome_acked[at];
        pthread_mutex_unlock(&ctx->m->flight_lock);
        if (acked)
            return 0;
    }
    /* No per-message MaxWait: libnats would keep a timer entry per
     * outcome (and wake for each at its deadline); the group as a whole
     * is sent again instead (PUBLISH_PATIENCE_WAITS). */
    natsStatus s = ts_js_publish_outcome(ctx->m->publish_js, ctx->partition,
                                         input_seq, index, subject,
                                         subject_len, payload, len);
    if (s != NATS_OK)
        ctx->unsent++;
    return 0;
}

/* Sends every outcome of the group the stream has not acknowledged. */
static void send_outcomes(ts_jetstream *m, partition *p, js_flight *f)
{
    pthread_mutex_lock(&m->flight_lock);
    f->publish_failed = 0;
    pthread_mutex_unlock(&m->flight_lock);
    async_publish ctx = { m, f, p->index, f->publish_rounds > 0, 0 };
    f->publish_rounds++;
    f->published_ms = ts_js_mono_ms();
    ts_changelog_visitor visitor = { &ctx, NULL, publish_async_one, NULL };
    const void *record;
    size_t len, at = 0;
    ts_changelog_header header;
    while (ts_changelog_next_split(&f->records, &at, &record, &len))
        ts_changelog_decode(record, len, &header, &visitor);
    if (ctx.unsent > 0) {
        pthread_mutex_lock(&m->flight_lock);
        f->publish_failed = 1;
        pthread_mutex_unlock(&m->flight_lock);
    }
}

/* Only for a group whose every record the quorum stored: its outcomes
 * go to TRACESAN_OUT, each under its message id (so a second send of one
 * the stream stored is dropped there as a duplicate). */
static void publish_outcomes(ts_jetstream *m, partition *p, js_flight *f)
{
    /* Noted in processing order (inputs by sequence, each one's outcomes
     * by index): ascending already, unless that order ever changes. */
    for (size_t i = 1; i < f->n_outcomes; i++)
        if (key_cmp(&f->outcome_keys[i - 1], &f->outcome_keys[i]) >= 0) {
            qsort(f->outcome_keys, f->n_outcomes, sizeof *f->outcome_keys,
                  key_qsort_cmp);
            break;
        }
    if (f->n_outcomes > 0)
        memset(f->outcome_acked, 0, f->n_outcomes);
    pthread_mutex_lock(&m->flight_lock);
    f->outcomes_pending = f->n_outcomes;
    pthread_mutex_unlock(&m->flight_lock);
    send_outcomes(m, p, f);
}

/* The group's last record is stored: it is committed. */
static void committed(ts_jetstream *m, partition *p, js_flight *f)
{
    /* What it changed is the partition's state now: nothing to take
     * back, and a rebuild reads on after its last record. */
    ts_buf_reset(&f->undo);
    if (ts_changelog_replica_add_producers(&p->replica, &f->builder) != 0)
        p->replica_broken = 1;  /* out of memory: read it all again */
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

/* The pause before the next send after `sends` sends: first_ms, doubling
 * with each send, max_ms at most. */
static int64_t doubling_pause(int sends, int64_t first_ms, int64_t max_ms)
{
    int64_t pause = first_ms;
    for (int i = 1; i < sends && pause < max_ms; i++)
        pause *= 2;
    return pause < max_ms ? pause : max_ms;
}

/* The group being appended: its record stored (the next sent, or the
 * group committed), refused (settled: ours stored late, or fenced), or
 * failed (sent again after a pause, or, past patience, a rebuild). */
static js_verdict move_append(ts_jetstream *m, partition *p, js_flight *f,
                              const char **why)
{
    pthread_mutex_lock(&m->flight_lock);
    int result = f->append_result;
    uint64_t seq = f->append_seq;
    pthread_mutex_unlock(&m->flight_lock);
    if (result == APPEND_FENCED) {
        result = settle_refusal(m, p, f, &seq);
        pthread_mutex_lock(&m->flight_lock);
        f->append_result = result;
        f->append_seq = seq;
        pthread_mutex_unlock(&m->flight_lock);
    }
    switch (result) {
    case APPEND_FENCED:
        return JS_FENCED;
    case APPEND_FAILED:
        if (f->resend_at_ms == 0) {
            if (f->append_attempts >= APPEND_ATTEMPTS) {
                *why = "a changelog append failed";
                return JS_REBUILD;
            }
            int64_t pause = doubling_pause(f->append_attempts,
                                           APPEND_RESEND_FIRST_MS,
                                           APPEND_RESEND_MAX_MS);
            if (f->append_attempts == 1)
                ts_log(TS_LOG_WARN, "partition %u: a changelog append went "
                       "unanswered or failed; sending it again", p->index);
            f->resend_at_ms = ts_js_mono_ms() + pause;
        }
        if (ts_js_mono_ms() < f->resend_at_ms)
            return JS_IDLE;
        if (!ts_js_lease_ok(m, p)) {
            *why = "lease lost";
            return JS_STOP;
        }
        f->resend_at_ms = 0;
        append_sending(m, p, f);
        return JS_MOVED;
    case APPEND_STORED:
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
        return JS_MOVED;
    default:
        return JS_IDLE;
    }
}

js_verdict ts_js_advance(ts_jetstream *m, partition *p, const char **why)
{
    js_verdict moved = JS_IDLE;
    js_flight *f = p->appending;
    if (f != NULL) {
        moved = move_append(m, p, f, why);
        if (moved != JS_IDLE && moved != JS_MOVED)
            return moved;
    }
    while (p->count > 0) {
        f = flight_at(p, 0);
        if (f->stage != FLIGHT_PUBLISHING)
            break;
        pthread_mutex_lock(&m->flight_lock);
        size_t pending = f->outcomes_pending;
        int failed = f->publish_failed;
        pthread_mutex_unlock(&m->flight_lock);
        int64_t waited = ts_js_mono_ms() - f->published_ms;
        int unanswered = pending > 0 &&
                         waited > PUBLISH_PATIENCE_WAITS * ts_js_wait_ms(m);
        if (failed || unanswered) {
            /* Committed, not all stored: sent again (a duplicate of one
             * stored is dropped by its message id), or rebuilt. */
            if (f->publish_rounds >= PUBLISH_ROUNDS) {
                *why = failed ? "publishing outcomes failed"
                              : "publishing outcomes went unanswered";
                return JS_REBUILD;
            }
            int64_t pause = doubling_pause(f->publish_rounds,
                                           PUBLISH_RESEND_FIRST_MS,
                                           PUBLISH_RESEND_MAX_MS);
            if (!unanswered && waited < pause)
                break;
            if (!ts_js_lease_ok(m, p)) {
                *why = "lease lost";
                return JS_STOP;
            }
            if (f->publish_rounds == 1)
                ts_log(TS_LOG_WARN, "partition %u: outcomes %s; sending "
                       "those not acknowledged again", p->index,
                       failed ? "refused" : "unanswered");
            send_outcomes(m, p, f);
            moved = JS_MOVED;
            break;
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
