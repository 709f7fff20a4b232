#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/config.h"
#include "engine/log.h"

/* Rebuilds the partition from its changelog, fences older owners out,
 * republishes what may not have been published, and (re)creates its
 * consumer from the first input not committed. 0; -1 (logged; the lease
 * is kept and the restore retried); -2 when another writer appended after
 * our read (a newer owner: give the partition up). */
static int restore_visit(void *arg, natsMsg *msg, uint64_t seq)
{
    partition *p = arg;
    return ts_changelog_replica_apply(&p->replica, natsMsg_GetData(msg),
                                      (size_t)natsMsg_GetDataLength(msg),
                                      seq, NULL) == 0 ? 0 : 1;
}

/* The outcomes of the closed groups whose inputs the consumer had not
 * acknowledged (acks follow publishing, so the rest was published), read
 * back by sequence. The number of records, or -1. */
static long republish(ts_jetstream *m, partition *p, uint64_t ack_floor)
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
        if (js_GetMsg(&msg, m->conn.js, TS_JS_STREAM_STATE, seq, NULL,
                      &code) != NATS_OK ||
            ts_js_publish_outcomes(m, p->index, natsMsg_GetData(msg),
                                   (size_t)natsMsg_GetDataLength(msg)) != 0)
            count = -1;
        else
            count++;
        natsMsg_Destroy(msg);
    }
    ts_buf_free(&seqs);
    return count;
}

int ts_js_restore_partition(ts_jetstream *m, partition *p)
{
    char err[ERR_MAX];
    char durable[64];
    ts_js_consumer_name(durable, sizeof durable, p->index);
    ts_js_drop_state(m, p);
    p->last_delivery = 0;  /* a new consumer counts from 1 */
    uint64_t ack_floor = 0;
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;
    if (js_GetConsumerInfo(&ci, m->conn.js, TS_JS_STREAM_IN, durable, NULL,
                           &code) == NATS_OK) {
        ack_floor = ci->AckFloor.Stream;
        jsConsumerInfo_Destroy(ci);
    }
    char subj[SUBJECT_MAX];
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_STATE ".%u", p->index);
    double started = ts_js_mono_s();
    if (ts_js_read_stream(m->conn.js, TS_JS_STREAM_STATE, subj, 0,
                          restore_visit, p, err, sizeof err) != 0) {
        ts_log(TS_LOG_WARN, "partition %u: cannot read its changelog: %s",
               p->index, err);
        ts_changelog_replica_reset(&p->replica);
        return -1;
    }
    /* The fence: from here on an older owner's append fails. */
    ts_changelog_header header = {
        .kind = TS_CHANGELOG_FENCE, .owner = m->self,
        .owner_len = strlen(m->self), .epoch = p->epoch,
        .last_input_seq = p->replica.last_input_seq,
    };
    ts_changelog_builder_reset(&m->builder);
    int appended = -1;
    if (ts_changelog_finish(&m->builder, &header, &m->record) == 0)
        appended = ts_js_append_record(m, p, &m->record, 0);
    if (appended != 1) {
        ts_log(TS_LOG_WARN, "partition %u: fence record %s", p->index,
               appended == 0 ? "refused: the changelog moved on" : "failed");
        return appended == 0 ? -2 : -1;
    }
    p->replica.records_since_snapshot++;
    long republished = republish(m, p, ack_floor);
    if (republished < 0) {
        ts_log(TS_LOG_WARN, "partition %u: republishing failed", p->index);
        return -1;
    }
    /* The consumer starts after the last committed input: a copy left by
     * the previous owner may have delivered (not committed) further. */
    js_DeleteConsumer(m->conn.js, TS_JS_STREAM_IN, durable, NULL, &code);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = durable;
    snprintf(subj, sizeof subj, TS_JS_SUBJECT_IN ".%u", p->index);
    cc.FilterSubject = subj;
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = (int64_t)60 * 1000000000;
    cc.MaxAckPending = (int64_t)m->nats->max_ack_pending;
    /* A work queue holds only what was never acknowledged: from its
     * start (inputs up to the last committed one are acknowledged as
     * they come, without processing). Otherwise after the last committed
     * input. */
    if (!m->input_work_queue && p->replica.last_input_seq > 0) {
        cc.DeliverPolicy = js_DeliverByStartSequence;
        cc.OptStartSeq = p->replica.last_input_seq + 1;
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
    /* Every partition shares the mechanisms the configuration's load
     * built, so a model or channel is in memory once. */
    const ts_config *config = m->adopted != NULL ? m->adopted : m->env.config;
    p->pipeline = ts_config_make_shared_pipeline(config, m->env.rng, err,
                                                 sizeof err);
    if (p->pipeline != NULL)
        p->config = ts_config_ref(config);
    if (p->pipeline == NULL) {
        ts_log(TS_LOG_ERROR, "partition %u: %s", p->index, err);
        return -1;
    }
    p->backend = (ts_state_backend){ p, ts_js_backend_load, ts_js_backend_save };
    ts_pipeline_set_state_backend(p->pipeline, &p->backend);
    p->state = PART_ACTIVE;
    ts_log(TS_LOG_INFO, "partition %u restored: %zu users, last input "
           "%" PRIu64 ", %ld records republished, %.0f ms", p->index,
           ts_record_map_count(p->replica.records),
           p->replica.last_input_seq, republished,
           (ts_js_mono_s() - started) * 1000);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].owned = 1;
    m->stats[p->index].takeovers++;
    m->stats[p->index].republished += (uint64_t)republished;
    pthread_mutex_unlock(&m->lock);
    return 0;
}
