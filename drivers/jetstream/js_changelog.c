#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/log.h"

/* Publish attempts of a committed record's outcomes before the rebuild
 * gives up for now (and tries again later). */
#define PUBLISH_ATTEMPTS 2
#define NO_RECORD UINT32_MAX

/* ------------------------------------------------ partition's backend */

int ts_js_backend_load(void *ctx, const char *user_id, size_t id_len,
                       ts_user_record *record)
{
    partition *p = ctx;
    const void *bytes;
    size_t len;
    if (ts_record_map_get(p->replica.records, user_id, id_len, &bytes,
                          &len) == 0)
        return 0;
    return ts_record_decode(bytes, len, record) == 0 ? 1 : -1;
}

/* Remembers what the map held for the user before the group changed it:
 * the group may never be committed. */
static int remember(js_flight *f, const ts_record_map *map,
                    const char *user_id, size_t id_len)
{
    const void *before = NULL;
    size_t len = 0;
    uint16_t n = (uint16_t)id_len;
    uint32_t have = ts_record_map_get(map, user_id, id_len, &before, &len)
                        ? (uint32_t)len : NO_RECORD;
    if (id_len > UINT16_MAX ||
        ts_buf_append(&f->undo, &n, sizeof n) != 0 ||
        ts_buf_append(&f->undo, user_id, id_len) != 0 ||
        ts_buf_append(&f->undo, &have, sizeof have) != 0 ||
        (have != NO_RECORD && ts_buf_append(&f->undo, before, len) != 0))
        return -1;
    return 0;
}

/* The group's changed users go into its changelog record, and into the
 * map a later load (after expiry) reads: the map is always the newest
 * record of each user, undone for a group that is never committed. */
int ts_js_backend_save(void *ctx, const char *user_id, size_t id_len,
                       const ts_user_record *record)
{
    partition *p = ctx;
    ts_jetstream *m = p->mode;
    js_flight *f = m->filling;
    size_t need = ts_record_encode(record, m->encode_buf, m->encode_cap);
    if (need > m->encode_cap) {
        unsigned char *bigger = realloc(m->encode_buf, need);
        if (bigger == NULL)
            return -1;
        m->encode_buf = bigger;
        m->encode_cap = need;
        need = ts_record_encode(record, m->encode_buf, m->encode_cap);
    }
    if (need == 0 || f == NULL ||
        ts_changelog_add_user(&f->builder, user_id, id_len, m->encode_buf,
                              need) != 0 ||
        remember(f, p->replica.records, user_id, id_len) != 0 ||
        ts_record_map_put(p->replica.records, user_id, id_len,
                          m->encode_buf, need) != 0)
        return -1;
    return 0;
}

static size_t undo_entry_size(const unsigned char *at)
{
    uint16_t id_len;
    uint32_t len;
    memcpy(&id_len, at, 2);
    memcpy(&len, at + 2 + id_len, 4);
    return 2 + id_len + 4 + (len != NO_RECORD ? len : 0);
}

/* Back to what the map held before the group, its users in reverse
 * order (a user saved twice gets its first "before"). */
void ts_js_undo(partition *p, js_flight *f)
{
    size_t n = 0;
    for (size_t at = 0; at < f->undo.len; at += undo_entry_size(f->undo.data + at))
        n++;
    size_t *starts = malloc((n > 0 ? n : 1) * sizeof *starts);
    if (starts == NULL) {
        p->replica_broken = 1;  /* out of memory: read it all again */
        ts_buf_reset(&f->undo);
        return;
    }
    n = 0;
    for (size_t at = 0; at < f->undo.len; at += undo_entry_size(f->undo.data + at))
        starts[n++] = at;
    while (n-- > 0) {
        const unsigned char *e = f->undo.data + starts[n];
        uint16_t id_len;
        uint32_t len;
        memcpy(&id_len, e, 2);
        memcpy(&len, e + 2 + id_len, 4);
        const char *id = (const char *)e + 2;
        if (len == NO_RECORD)
            ts_record_map_remove(p->replica.records, id, id_len);
        else if (ts_record_map_put(p->replica.records, id, id_len,
                                   e + 6 + id_len, len) != 0)
            p->replica_broken = 1;
    }
    free(starts);
    ts_buf_reset(&f->undo);
}

/* --------------------------------------------------------- publishing */

typedef struct publish_ctx {
    jsCtx *js;
    uint32_t partition;
    size_t queued;
    int failed;
} publish_ctx;

natsStatus ts_js_publish_outcome(jsCtx *js, uint32_t partition,
                                 uint64_t input_seq, uint32_t index,
                                 const char *subject, size_t subject_len,
                                 const void *payload, size_t len)
{
    char subj[SUBJECT_MAX];
    char id[64];
    snprintf(subj, sizeof subj, "%.*s", (int)subject_len, subject);
    ts_changelog_msg_id(id, sizeof id, partition, input_seq, index);
    natsMsg *msg = NULL;
    natsStatus s = natsMsg_Create(&msg, subj, NULL, payload, (int)len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(msg, "Nats-Msg-Id", id);
    if (s == NATS_OK)
        s = js_PublishMsgAsync(js, &msg, NULL);
    natsMsg_Destroy(msg);  /* NULL once the library took it */
    return s;
}

static int publish_one(void *arg, uint64_t input_seq, uint32_t index,
                       const char *subject, size_t subject_len,
                       const void *payload, size_t len)
{
    publish_ctx *ctx = arg;
    natsStatus s = ts_js_publish_outcome(ctx->js, ctx->partition, input_seq,
                                         index, subject, subject_len,
                                         payload, len);
    if (s != NATS_OK) {
        ctx->failed = 1;
        return 1;
    }
    ctx->queued++;
    return 0;
}

/* What the stream acknowledged, to the observer (the feed sees what this
 * instance published, under the topics the other drivers use). */
static int announce_one(void *arg, uint64_t input_seq, uint32_t index,
                        const char *subject, size_t subject_len,
                        const void *payload, size_t len)
{
    (void)input_seq;
    (void)index;
    const ts_observer *o = arg;
    char topic[SUBJECT_MAX];
    size_t n = ts_changelog_output_topic(subject, subject_len, topic,
                                         sizeof topic);
    o->published(o->arg, topic, n, payload, len);
    return 0;
}

void ts_js_announce_published(ts_jetstream *m, const void *record,
                              size_t len, size_t published)
{
    pthread_mutex_lock(&m->lock);
    m->totals.published += published;
    pthread_mutex_unlock(&m->lock);
    const ts_observer *o = m->group.observer;
    if (o == NULL || o->published == NULL)
        return;
    ts_changelog_visitor visitor = { (void *)o, NULL, announce_one, NULL };
    ts_changelog_header header;
    ts_changelog_decode(record, len, &header, &visitor);
}

/* Publishes a committed record's outcomes and waits until the stream has
 * acknowledged every one. Repeating it is harmless: the message ids make
 * the server drop copies. `js` is the caller's own context (a rebuild's),
 * so the wait is for these outcomes only. 0, or -1. */
int ts_js_publish_outcomes_sync(ts_jetstream *m, jsCtx *js,
                                pthread_mutex_t *lock, uint64_t *errors,
                                uint32_t partition, const void *record,
                                size_t len)
{
    for (int attempt = 0; attempt < PUBLISH_ATTEMPTS; attempt++) {
        pthread_mutex_lock(lock);
        *errors = 0;
        pthread_mutex_unlock(lock);
        publish_ctx ctx = { js, partition, 0, 0 };
        ts_changelog_visitor visitor = { &ctx, NULL, publish_one, NULL };
        ts_changelog_header header;
        if (ts_changelog_decode(record, len, &header, &visitor) < 0)
            return -1;
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = ts_js_wait_ms(m);
        natsStatus s = js_PublishAsyncComplete(js, &po);
        pthread_mutex_lock(lock);
        uint64_t rejected = *errors;
        pthread_mutex_unlock(lock);
        if (s == NATS_OK && !ctx.failed && rejected == 0) {
            ts_js_announce_published(m, record, len, ctx.queued);
            return 0;
        }
        /* Messages whose answer was lost (a server went away) stay pending
         * in the context for ever and would time out every later wait:
         * take them back; the next attempt sends the record again. */
        natsMsgList pending = { 0 };
        if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK)
            natsMsgList_Destroy(&pending);
        ts_log(TS_LOG_WARN, "partition %u: publishing outcomes failed (%s, "
               "%" PRIu64 " rejected), retrying", partition,
               natsStatus_GetText(s), rejected);
        /* A stream electing a new leader answers nothing for a moment. */
        usleep(200000);
    }
    return -1;
}

/* Appends a record to the partition's changelog, fenced on the sequence
 * the replica last saw, and waits. 1 appended, 0 fenced out (someone
 * else wrote), -1 unknown (timeout: it may or may not be stored). */
int ts_js_append_sync(ts_jetstream *m, jsCtx *js, partition *p,
                      const void *record, size_t len, int rollup)
{
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    natsMsg *msg = NULL;
    natsStatus s = natsMsg_Create(&msg, subj, NULL, (const char *)record,
                                  (int)len);
    if (s == NATS_OK && rollup)
        s = natsMsgHeader_Set(msg, "Nats-Rollup", "sub");
    if (s != NATS_OK) {
        natsMsg_Destroy(msg);
        return -1;
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = ts_js_wait_ms(m);
    if (p->replica.changelog_seq > 0)
        po.ExpectLastSubjectSeq = p->replica.changelog_seq;
    else
        po.ExpectNoMessage = true;
    jsPubAck *ack = NULL;
    jsErrCode code = 0;
    s = js_PublishMsg(&ack, js, msg, &po, &code);
    natsMsg_Destroy(msg);
    if (s == NATS_OK) {
        p->replica.changelog_seq = ack->Sequence;
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

/* ------------------------------------------------------------ the sink */

/* Counts an outcome added to f's record, keyed for its acknowledgement
 * (js_commit.c). 0, or -1 out of memory. */
static int note_outcome(js_flight *f, uint64_t input_seq, uint32_t index)
{
    if (f->n_outcomes == f->outcome_cap) {
        size_t cap = f->outcome_cap > 0 ? f->outcome_cap * 2 : 64;
        js_outcome_key *keys = realloc(f->outcome_keys, cap * sizeof *keys);
        if (keys == NULL)
            return -1;
        f->outcome_keys = keys;
        unsigned char *acked = realloc(f->outcome_acked, cap);
        if (acked == NULL)
            return -1;
        f->outcome_acked = acked;
        f->outcome_cap = cap;
    }
    f->outcome_keys[f->n_outcomes++] = (js_outcome_key){ input_seq, index };
    return 0;
}


int ts_js_sink_put(void *arg, const void *topic, size_t topic_len,
                   const void *payload, size_t len)
{
    ts_js_sink *sink = arg;
    char subj[SUBJECT_MAX];
    size_t n = ts_changelog_output_subject(topic, topic_len, subj,
                                           sizeof subj);
    uint32_t index = sink->index++;
    if (ts_changelog_add_outcome(&sink->flight->builder, sink->input_seq,
                                 index, subj, n, payload, len) != 0 ||
        note_outcome(sink->flight, sink->input_seq, index) != 0) {
        ts_log(TS_LOG_ERROR, "partition %u: out of memory for an outcome",
               sink->partition);
        return -1;
    }
    return 0;
}
