#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/config.h"
#include "engine/log.h"
#include "engine/pipeline_reload.h"

/* Users visited per partition per expiry sweep (as the ZeroMQ driver). */
#define EXPIRE_SCAN_PER_TICK 10000

/* A user's ledger lives in one partition only; one sent to another would
 * be debited from a second, independent budget. */
static ts_reason admit_to_partition(void *arg, const char *user_id,
                                    size_t user_len, char *detail,
                                    size_t detail_len)
{
    partition *p = arg;
    uint32_t owner = ts_partition_of(user_id, user_len,
                                     p->mode->n_partitions);
    if (owner == p->index)
        return TS_REASON_NONE;
    snprintf(detail, detail_len, "user belongs to partition %u, not %u",
             owner, p->index);
    return TS_REASON_INVALID_USER_ID;
}

/* One input message through the group body into the group's changelog
 * record, its outcomes under the input's sequence. */
static void process_message(ts_jetstream *m, partition *p, natsMsg *msg,
                            uint64_t seq)
{
    ts_inbound in = { natsMsg_GetData(msg),
                      (size_t)natsMsg_GetDataLength(msg), 1 };
    ts_js_sink record = { m, p->index, seq, 0 };
    ts_sink sink = { &record, ts_js_sink_put, NULL };
    m->group.admission = (ts_admission){ p, admit_to_partition };
    size_t updates = ts_group_process(&m->group, p->pipeline, &in, &sink);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].updates += updates;
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
    int appended = ts_js_append_record(m, p, &m->record, 1);
    if (appended == 1)
        p->records_since_snapshot = 0;
    else if (appended == 0)
        ts_js_lose_partition(m, p, "fenced out", 0);
    else
        p->state = PART_RESTORE;  /* stored or not: read it back */
}

/* An empty fetch looks the same whether there is no input or the
 * consumer is gone (deleted by an operator, a stream recreated): after a
 * quiet ttl, ask; a missing consumer is recreated by a rebuild. */
static void check_consumer(ts_jetstream *m, partition *p)
{
    int64_t now = ts_js_mono_ms();
    if (now - p->input_seen_ms < m->nats->lease_ttl_ms)
        return;
    p->input_seen_ms = now;
    char durable[64];
    ts_js_consumer_name(durable, sizeof durable, p->index);
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = ts_js_wait_ms(m);  /* a stalled cluster must not hold the thread */
    natsStatus s = js_GetConsumerInfo(&ci, m->conn.js, TS_JS_STREAM_IN,
                                      durable, &jo, &code);
    if (s == NATS_OK) {
        jsConsumerInfo_Destroy(ci);
    } else if (code == JSConsumerNotFoundErr) {
        ts_log(TS_LOG_WARN, "partition %u: its consumer is gone; "
               "rebuilding", p->index);
        ts_js_drop_state(m, p);
        p->state = PART_RESTORE;
    }
}

/* One group of one partition: fetch, process, commit, publish, ack. 1
 * when it had input. */
int ts_js_run_group(ts_jetstream *m, partition *p)
{
    if (ts_js_enforce_lease(m, p))
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
    p->input_seen_ms = ts_js_mono_ms();
    double started = ts_js_mono_s();
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
            ts_js_drop_state(m, p);
            p->state = PART_RESTORE;
        }
        return 1;
    }
    if (ts_pipeline_save_dirty(p->pipeline) != 0) {
        ts_js_lose_partition(m, p, "cannot encode user records", 1);
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
        ts_js_lose_partition(m, p, "record too large", 1);
        natsMsgList_Destroy(&list);
        return 1;
    }
    int appended = -1;
    if (ts_js_lease_ok(m, p) &&
        ts_changelog_finish(&m->builder, &header, &m->record) == 0)
        appended = ts_js_append_record(m, p, &m->record, 0);
    if (appended != 1) {
        /* Nothing of the group is published. Fenced: someone else owns
         * the partition. Unknown: the record may be stored, so the state
         * is read back from the changelog before going on. */
        if (appended == 0) {
            pthread_mutex_lock(&m->lock);
            m->stats[p->index].fenced++;
            pthread_mutex_unlock(&m->lock);
            ts_js_lose_partition(m, p, "fenced out", 0);
        } else if (ts_js_enforce_lease(m, p)) {
            /* stopped */
        } else {
            ts_js_drop_state(m, p);
            p->state = PART_RESTORE;
        }
        natsMsgList_Destroy(&list);
        return 1;
    }
    ts_pipeline_mark_durable(p->pipeline);
    p->last_input_seq = last_seq;
    p->records_since_snapshot++;
    double seconds = ts_js_mono_s() - started;
    ts_js_observe_commit(m, p, seconds);
    const ts_observer *o = m->group.observer;
    if (o != NULL && o->commit != NULL)
        o->commit(o->arg, seconds, m->builder.n_outcomes);
    if (ts_js_publish_outcomes(m, p->index, m->record.data, m->record.len) != 0) {
        /* Committed but not (all) published: the rebuild republishes. */
        ts_js_drop_state(m, p);
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
        ts_js_drop_state(m, p);
        p->state = PART_RESTORE;
    }
    return 1;
}

/* ---------------------------------------------------------- the thread */

/* Idle users leave memory as with the ZeroMQ driver; their
 * records stay in the partition's map, which a returning user is loaded
 * from. Between groups only: every user is durable then. */
void ts_js_expire_users(ts_jetstream *m)
{
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        partition *p = &m->parts[i];
        if (p->state != PART_ACTIVE)
            continue;
        ts_pipeline_set_clock(p->pipeline, ts_wall_clock_ms());
        if (m->settings->max_backdate_ms > 0)
            ts_pipeline_set_expiry_floor(p->pipeline,
                                         ts_wall_clock_ms() -
                                             m->settings->max_backdate_ms);
        ts_pipeline_expire(p->pipeline, EXPIRE_SCAN_PER_TICK);
    }
}

/* Between two groups: every partition's pipeline takes the profiles of
 * the configuration a SIGHUP validated (the same names, order, mechanisms
 * and state sizes, or the reload was refused), so users keep their
 * windows and spend, as on the ZeroMQ path. */
void ts_js_apply_pending_reload(ts_jetstream *m)
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
        if (ts_config_share_profiles(fresh, &profiles, &n_profiles,
                                     &default_index, err, sizeof err) != 0 ||
            ts_pipeline_replace_profiles(p->pipeline, profiles, n_profiles,
                                         default_index, err,
                                         sizeof err) != 0) {
            /* The template accepted the same profiles; a failure here is
             * out of memory. The partition is rebuilt from its changelog,
             * with pipelines made from the new configuration. */
            ts_log(TS_LOG_ERROR, "reload: partition %u: %s; rebuilding it",
                   p->index, err);
            ts_js_drop_state(m, p);
            p->state = PART_RESTORE;
            p->retry_at_ms = 0;
            failed++;
            continue;
        }
        ts_config_free(p->config);
        p->config = ts_config_ref(fresh);
        applied++;
    }
    if (m->adopted != NULL)
        ts_config_free(m->adopted);
    m->adopted = fresh;
    ts_log(TS_LOG_INFO, "reload: profiles applied to %zu active partitions"
           "%s", applied, failed > 0 ? " (some rebuilt)" : "");
}
