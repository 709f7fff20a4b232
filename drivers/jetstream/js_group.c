#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdlib.h>

#include "engine/config.h"
#include "engine/log.h"
#include "engine/pipeline_reload.h"

/* Users visited per partition per expiry sweep (as the ZeroMQ driver). */
#define EXPIRE_SCAN_PER_TICK 10000
/* What a delivered message takes beyond its data in a fetch's byte count
 * (its subject, reply subject and headers): a fetch asks for max_payload
 * plus this, so any message the server accepted can be delivered. */
#define FETCH_SLACK_BYTES 4096
/* Room left in a changelog record for the headers of the publish. */
#define RECORD_SLACK_BYTES 1024
/* How often the partitions' backlog is read for /metrics. */
#define LAG_EVERY_MS 1000

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

/* Acknowledges the group's last input. When a snapshot is due (and
 * allowed), the acknowledgement of everything before it is confirmed
 * first; then one record with every user replaces the partition's older
 * records. */
static void ack_last_and_snapshot(ts_jetstream *m, partition *p,
                                  natsMsg *last, int allowed)
{
    if (!allowed ||
        p->replica.records_since_snapshot < m->nats->snapshot_every) {
        natsMsg_Ack(last, NULL);
        return;
    }
    jsErrCode code = 0;
    if (natsMsg_AckSync(last, NULL, &code) != NATS_OK)
        return;  /* tried again after the next group */
    ts_changelog_builder_reset(&m->builder);
    snapshot_ctx ctx = { &m->builder, 0 };
    ts_record_map_each(p->replica.records, snapshot_user, &ctx);
    ts_changelog_header header = {
        .kind = TS_CHANGELOG_SNAPSHOT, .owner = m->self,
        .owner_len = strlen(m->self), .epoch = p->epoch,
        .last_input_seq = p->replica.last_input_seq,
    };
    /* A snapshot cannot be split: its rollup removes everything before
     * it, and a crash between its parts would lose users. */
    if (!ctx.failed &&
        ts_changelog_size(&m->builder, &header) >
            m->max_payload - RECORD_SLACK_BYTES) {
        ts_log(TS_LOG_WARN, "partition %u: a snapshot of %zu users exceeds "
               "the server's max_payload; restores read every record "
               "until one fits (raise max_payload or nats.partitions)",
               p->index, ts_record_map_count(p->replica.records));
        p->replica.records_since_snapshot = 0;
        return;
    }
    if (ctx.failed ||
        ts_changelog_finish(&m->builder, &header, &m->record) != 0)
        return;
    int appended = ts_js_append_record(m, p, &m->record, 1);
    if (appended == 1)
        p->replica.records_since_snapshot = 0;
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

/* Every input of the group up to `last` (explicit acknowledgements: a
 * work queue drops what is acknowledged), after its outcomes are
 * published. */
static void ack_inputs(natsMsgList *list, int last)
{
    for (int i = 0; i <= last && i < list->Count; i++)
        natsMsg_Ack(list->Msgs[i], NULL);
}

/* The group's record, split when it would not fit one message, appended
 * record after record. 1 all appended, 0 fenced out, -1 unknown. */
static int commit_records(ts_jetstream *m, partition *p,
                          const ts_changelog_header *header)
{
    size_t n_records = 0;
    if (ts_changelog_finish_split(&m->builder, header,
                                  m->max_payload - RECORD_SLACK_BYTES,
                                  &m->record, &n_records) != 0) {
        ts_log(TS_LOG_ERROR, "partition %u: a user record or an outcome "
               "alone exceeds the server's max_payload (%zu bytes): lower "
               "output.batch_outcomes or raise max_payload", p->index,
               m->max_payload);
        return -1;
    }
    const void *record;
    size_t len, at = 0;
    while (ts_changelog_next_split(&m->record, &at, &record, &len)) {
        if (!ts_js_lease_ok(m, p))
            return -1;
        ts_buf one = { (unsigned char *)record, len, len };
        int appended = ts_js_append_record(m, p, &one, 0);
        if (appended != 1)
            return appended;
        p->replica.records_since_snapshot++;
    }
    return 1;
}

void ts_js_refresh_lag(ts_jetstream *m)
{
    int64_t now = ts_js_mono_ms();
    if (now < m->next_lag_ms)
        return;
    m->next_lag_ms = now + LAG_EVERY_MS;
    uint64_t *backlog = calloc(m->n_partitions, sizeof *backlog);
    char err[ERR_MAX];
    if (backlog == NULL ||
        ts_js_partition_backlog(m->conn.js, m->n_partitions,
                                m->input_work_queue, backlog, err,
                                sizeof err) != 0) {
        free(backlog);
        return;
    }
    pthread_mutex_lock(&m->lock);
    for (uint32_t i = 0; i < m->n_partitions; i++)
        m->stats[i].lag = m->parts[i].state != PART_IDLE ? backlog[i] : 0;
    pthread_mutex_unlock(&m->lock);
    free(backlog);
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
    /* Any message the server stored fits (a smaller bound left one too
     * large for it undelivered for ever, issue 25): the record is split
     * when the group's outcomes need it. */
    req.MaxBytes = (int64_t)(m->max_payload + FETCH_SLACK_BYTES);
    natsStatus s = natsSubscription_FetchRequest(&list, p->sub, &req);
    if (s != NATS_OK || list.Count == 0) {
        natsMsgList_Destroy(&list);
        check_consumer(m, p);
        return 0;
    }
    p->input_seen_ms = ts_js_mono_ms();
    double started = ts_js_mono_s();
    ts_changelog_builder_reset(&m->builder);
    uint64_t committed = p->replica.last_input_seq;
    uint64_t last_seq = committed;
    int last = -1;
    /* A delivery lost on its way (a server went away with our pull
     * request's answer) shows as a gap in the consumer's sequence. The
     * group stops before the gap and the partition is rebuilt, which
     * recreates the consumer at the first input not committed. */
    int gap = 0;
    for (int i = 0; i < list.Count && !gap; i++) {
        jsMsgMetaData *meta = NULL;
        if (natsMsg_GetMetaData(&meta, list.Msgs[i]) != NATS_OK) {
            gap = 1;
            break;
        }
        uint64_t seq = meta->Sequence.Stream;
        uint64_t delivery = meta->Sequence.Consumer;
        jsMsgMetaData_Destroy(meta);
        if (delivery != p->last_delivery + 1 ||
            (seq <= last_seq && seq > committed)) {
            gap = 1;
            break;
        }
        p->last_delivery = delivery;
        last = i;
        if (seq <= committed)
            continue;  /* committed before: its outcomes were republished */
        process_message(m, p, list.Msgs[i], seq);
        last_seq = seq;
    }
    if (gap)
        ts_log(TS_LOG_WARN, "partition %u: a gap in the consumer's "
               "deliveries; rebuilding after this group", p->index);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].messages += (uint64_t)list.Count;
    pthread_mutex_unlock(&m->lock);
    if (last_seq == committed) {
        /* Only inputs committed before: nothing to write. */
        ack_inputs(&list, last);
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
    int appended = -1;
    if (ts_js_lease_ok(m, p))
        appended = commit_records(m, p, &header);
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
    p->replica.last_input_seq = last_seq;
    double seconds = ts_js_mono_s() - started;
    ts_js_observe_commit(m, p, seconds);
    const ts_observer *o = m->group.observer;
    if (o != NULL && o->commit != NULL)
        o->commit(o->arg, seconds, m->builder.n_outcomes);
    /* Outcomes in every record of the group (parts included). */
    const void *record;
    size_t len, at = 0;
    int published = 0;
    while (published == 0 &&
           ts_changelog_next_split(&m->record, &at, &record, &len))
        published = ts_js_publish_outcomes(m, p->index, record, len);
    if (published != 0) {
        /* Committed but not (all) published: the rebuild republishes. */
        ts_js_drop_state(m, p);
        p->state = PART_RESTORE;
        natsMsgList_Destroy(&list);
        return 1;
    }
    if (last >= 0) {
        ack_inputs(&list, last - 1);
        ack_last_and_snapshot(m, p, list.Msgs[last], !gap);
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
