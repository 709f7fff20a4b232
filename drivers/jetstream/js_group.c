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
/* What a delivered message takes beyond its data in a fetch's byte count
 * (its subject, reply subject and headers): a fetch may take max_payload
 * plus this, so any message the server accepted can be delivered. */
#define FETCH_SLACK_BYTES 4096
/* Room left in a snapshot for the publish's headers. */
#define RECORD_SLACK_BYTES 1024
/* How often the partitions' backlog is read for /metrics. */
#define LAG_EVERY_MS 1000
/* A partition whose fetch came back empty is asked again after 1, 2, 4
 * ... up to this many ms: an idle instance does not poll the server in a
 * loop, and new input waits at most this long. */
#define IDLE_POLL_MAX_MS 20

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

/* One input message through the group body into the group's record, its
 * outcomes under the input's sequence. */
static void process_message(ts_jetstream *m, partition *p, js_flight *f,
                            natsMsg *msg, uint64_t seq)
{
    ts_inbound in = { natsMsg_GetData(msg),
                      (size_t)natsMsg_GetDataLength(msg), 1 };
    ts_js_sink record = { m, f, p->index, seq, 0 };
    ts_sink sink = { &record, ts_js_sink_put, NULL };
    m->group.admission = (ts_admission){ p, admit_to_partition };
    size_t updates = ts_group_process(&m->group, p->pipeline, &in, &sink);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].updates += updates;
    pthread_mutex_unlock(&m->lock);
}

/* ------------------------------------------------------- producers */

/* A producer's name for an input, from its Nats-Msg-Id
 * "<producer>.<partition>.<n>" (tools/js_producer.c writes it so). */
typedef struct producer_ref {
    const char *id;
    size_t id_len;
    uint64_t number;
} producer_ref;

/* The last '.' among the first n bytes of s, or NULL. */
static const char *last_dot(const char *s, size_t n)
{
    while (n-- > 0)
        if (s[n] == '.')
            return s + n;
    return NULL;
}

static int all_digits(const char *s, size_t n)
{
    if (n == 0 || n > 19)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* 1 when the input names its producer and this partition, else 0 (an
 * input without such an id is processed as it comes). */
static int producer_of(natsMsg *msg, uint32_t partition, producer_ref *ref)
{
    const char *id = NULL;
    if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) != NATS_OK || id == NULL)
        return 0;
    size_t len = strlen(id);
    const char *last = last_dot(id, len);
    if (last == NULL || last == id)
        return 0;
    const char *middle = last_dot(id, (size_t)(last - id));
    if (middle == NULL || middle == id)
        return 0;
    size_t number_len = len - (size_t)(last + 1 - id);
    size_t part_len = (size_t)(last - middle - 1);
    if (!all_digits(last + 1, number_len) || !all_digits(middle + 1, part_len) ||
        strtoull(middle + 1, NULL, 10) != partition ||
        (size_t)(middle - id) > TS_CHANGELOG_PRODUCER_MAX)
        return 0;
    ref->id = id;
    ref->id_len = (size_t)(middle - id);
    ref->number = strtoull(last + 1, NULL, 10);
    return 1;
}

/* 1 when the partition committed, or has in flight, the producer's
 * message at or after this one: a producer sends a partition's messages
 * one after the other, each only once the one before is stored, so this
 * is a copy stored again (a resend whose first copy was stored, its
 * answer lost with a leader, which the broker's duplicate window did not
 * catch). */
static int sent_before(const partition *p, const producer_ref *ref)
{
    uint64_t have = 0;
    if (ts_changelog_replica_producer(&p->replica, ref->id, ref->id_len,
                                      &have) && have >= ref->number)
        return 1;
    for (size_t i = 0; i < p->count; i++) {
        const js_flight *f = &p->flights[(p->head + i) % MAX_FLIGHTS];
        if (ts_changelog_builder_producer(&f->builder, ref->id, ref->id_len,
                                          &have) && have >= ref->number)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------- snapshots */

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

/* With every group retired (the last acknowledgement confirmed), one
 * record with every user replaces the partition's older records. */
js_verdict ts_js_snapshot(ts_jetstream *m, partition *p, const char **why)
{
    js_verdict verdict = JS_MOVED;
    p->snapshot_due = 0;
    ts_changelog_builder builder = { 0 };
    ts_buf record = { 0 };
    snapshot_ctx ctx = { &builder, 0 };
    ts_record_map_each(p->replica.records, snapshot_user, &ctx);
    if (ts_changelog_replica_producers_into(&p->replica, &builder) != 0)
        ctx.failed = 1;
    ts_changelog_header header = {
        .kind = TS_CHANGELOG_SNAPSHOT, .owner = m->self,
        .owner_len = strlen(m->self), .epoch = p->epoch,
        .last_input_seq = p->replica.last_input_seq,
    };
    /* A snapshot cannot be split: its rollup removes everything before
     * it, and a crash between its parts would lose users. */
    if (!ctx.failed && ts_changelog_size(&builder, &header) >
                           m->max_payload - RECORD_SLACK_BYTES) {
        ts_log(TS_LOG_WARN, "partition %u: a snapshot of %zu users exceeds "
               "the server's max_payload; restores read every record "
               "until one fits (raise max_payload or nats.partitions)",
               p->index, ts_record_map_count(p->replica.records));
        p->replica.records_since_snapshot = 0;
    } else if (!ctx.failed &&
               ts_changelog_finish(&builder, &header, &record) == 0) {
        int appended = ts_js_append_sync(m, m->append_js, p, record.data,
                                         record.len, 1);
        p->chain_seq = p->replica.changelog_seq;
        if (appended == 1) {
            p->replica.records_since_snapshot = 0;
            ts_buf_reset(&p->replica.closed);
        } else if (appended == 0) {
            verdict = JS_FENCED;
        } else {
            /* Stored or not: read on from the last record known. */
            *why = "a snapshot's append failed";
            verdict = JS_REBUILD;
        }
    }
    ts_buf_free(&record);
    ts_changelog_builder_free(&builder);
    return verdict;
}

/* ----------------------------------------------------------- input */

/* An empty fetch looks the same whether there is no input or the
 * consumer is gone (deleted by an operator, a stream recreated), or no
 * longer delivers what the partition's subject holds: after a quiet ttl,
 * ask; a missing consumer is recreated by a rebuild, and so is one that
 * delivered nothing for longer than its AckWait while inputs waited
 * (anything it handed out and lost would have come again by then). */
static void check_consumer(ts_jetstream *m, partition *p)
{
    int64_t now = ts_js_mono_ms();
    if (now - p->input_seen_ms < m->nats->lease_ttl_ms || p->count > 0)
        return;
    p->input_seen_ms = now;
    pthread_mutex_lock(&m->lock);
    uint64_t waiting = m->stats[p->index].lag;
    pthread_mutex_unlock(&m->lock);
    if (waiting > 0 && m->input_work_queue &&
        now - p->delivered_ms > TS_JS_ACK_WAIT_MS + m->nats->lease_ttl_ms) {
        ts_log(TS_LOG_WARN, "partition %u: no delivery for %" PRId64 " s "
               "with %" PRIu64 " stored inputs waiting; recreating its "
               "consumer", p->index, (now - p->delivered_ms) / 1000,
               waiting);
        p->delivered_ms = now;
        p->rebuild_due = 1;
        return;
    }
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
        p->rebuild_due = 1;
    }
}

static int add_input(js_flight *f, natsMsg *msg)
{
    if (f->n_inputs == f->inputs_cap) {
        size_t cap = f->inputs_cap > 0 ? f->inputs_cap * 2 : 64;
        natsMsg **bigger = realloc(f->inputs, cap * sizeof *bigger);
        if (bigger == NULL)
            return -1;
        f->inputs = bigger;
        f->inputs_cap = cap;
    }
    f->inputs[f->n_inputs++] = msg;
    f->input_bytes += (size_t)natsMsg_GetDataLength(msg);
    return 0;
}

/* Fetches into the partition's open group (opened when there is room)
 * and runs what came through the group body. 1 when it had input. */
int ts_js_fill(ts_jetstream *m, partition *p)
{
    int64_t now = ts_js_mono_ms();
    if (p->snapshot_due || p->rebuild_due || now < p->next_fetch_ms)
        return 0;
    pthread_mutex_lock(&m->lease_lock);
    int handing_back = p->hand_back;
    pthread_mutex_unlock(&m->lease_lock);
    if (handing_back || m->stop || !ts_js_lease_ok(m, p))
        return 0;
    /* Room: the open group, or a new one. An open group holds at most a
     * fetch's worth; it goes when the group before it is appended. */
    js_flight *open = p->count > 0 &&
                              p->flights[(p->head + p->count - 1) %
                                         MAX_FLIGHTS].stage == FLIGHT_OPEN
                          ? &p->flights[(p->head + p->count - 1) %
                                        MAX_FLIGHTS]
                          : NULL;
    size_t held = open != NULL ? open->n_inputs : 0;
    if ((open == NULL && p->count >= m->nats->groups_in_flight) ||
        held >= m->nats->fetch_batch ||
        (open != NULL && open->input_bytes >= m->max_payload))
        return 0;
    natsMsgList list = { 0 };
    jsFetchRequest req;
    jsFetchRequest_Init(&req);
    req.Batch = (int)(m->nats->fetch_batch - held);
    req.NoWait = true;
    /* Any message the server stored fits (a smaller bound left one too
     * large for it undelivered for ever, issue 25): the record is split
     * when the group's outcomes need it. */
    req.MaxBytes = (int64_t)(m->max_payload + FETCH_SLACK_BYTES);
    natsStatus s = natsSubscription_FetchRequest(&list, p->sub, &req);
    if (s != NATS_OK || list.Count == 0) {
        natsMsgList_Destroy(&list);
        p->idle_backoff_ms = p->idle_backoff_ms > 0
                                 ? p->idle_backoff_ms * 2 : 1;
        if (p->idle_backoff_ms > IDLE_POLL_MAX_MS)
            p->idle_backoff_ms = IDLE_POLL_MAX_MS;
        p->next_fetch_ms = now + p->idle_backoff_ms;
        check_consumer(m, p);
        return 0;
    }
    p->idle_backoff_ms = 0;
    p->next_fetch_ms = 0;
    p->input_seen_ms = now;
    p->delivered_ms = now;
    /* The open group, or a new one opened with its first input: a fetch
     * that takes none (a gap at once) must leave no empty group behind,
     * which nothing would ever seal, while the rebuild the gap asks for
     * waits for no group in flight (CI lost a whole partition so). */
    js_flight *f = NULL;
    uint64_t committed = p->replica.last_input_seq;
    /* A delivery lost on its way (a server went away with our pull
     * request's answer) shows as a gap in the consumer's sequence, and a
     * delivery again of an input in flight (not acknowledged within the
     * consumer's AckWait) as an input sequence seen before. Either way
     * the group stops there and the partition is rebuilt once what is in
     * flight retired, which recreates the consumer at the first input
     * not acknowledged. */
    int gap = m->gap_every > 0 && ++m->fetches_seen % m->gap_every == 0;
    int taken = 0, duplicates = 0, reused = 0;
    for (int i = 0; i < list.Count && !gap; i++) {
        jsMsgMetaData *meta = NULL;
        if (natsMsg_GetMetaData(&meta, list.Msgs[i]) != NATS_OK) {
            gap = 1;
            break;
        }
        uint64_t seq = meta->Sequence.Stream;
        uint64_t delivery = meta->Sequence.Consumer;
        jsMsgMetaData_Destroy(meta);
        int lost = delivery != p->last_delivery + 1 ||
                   (seq <= p->fetched_seq && seq > committed);
        if (!lost && f == NULL)
            f = ts_js_open_flight(m, p);
        if (lost || f == NULL || add_input(f, list.Msgs[i]) != 0) {
            gap = 1;
            break;
        }
        natsMsg *msg = list.Msgs[i];
        list.Msgs[i] = NULL;  /* the group holds it until its ack */
        taken++;
        p->last_delivery = delivery;
        if (seq > p->fetched_seq)
            p->fetched_seq = seq;
        producer_ref producer;
        int named = producer_of(msg, p->index, &producer);
        if (seq <= committed) {
            /* Committed before: its outcomes were republished. Unless its
             * producer's number was never committed: then the stream gave
             * a new message a sequence it had given another (its leader
             * lost acknowledged messages), and the outputs' ids, made of
             * the sequence, are taken. Not processed: said, counted. */
            if (named && !sent_before(p, &producer)) {
                reused++;
                ts_log(TS_LOG_ERROR, "partition %u: input %" PRIu64 " is at "
                       "or below the last committed input (%" PRIu64 ") but "
                       "is a producer's message %" PRIu64 " never committed: "
                       "TRACESAN_IN reused a sequence; not processed",
                       p->index, seq, committed, producer.number);
            }
            continue;
        }
        if (named && sent_before(p, &producer)) {
            /* Its first copy's outcomes exist (or will, with its group):
             * acknowledged in turn, never processed twice. */
            duplicates++;
            continue;
        }
        /* Out of memory here only forgoes catching a later copy: a copy
         * processed twice is debited twice, never published unspent. */
        if (named)
            (void)ts_changelog_add_producer(&f->builder, producer.id,
                                            producer.id_len, producer.number,
                                            seq);
        process_message(m, p, f, msg, seq);
        if (f->first_input_seq == 0)
            f->first_input_seq = seq;
        f->last_input_seq = seq;
    }
    if (duplicates > 0)
        ts_log(TS_LOG_WARN, "partition %u: %d input messages a producer had "
               "sent before (stored again after a failover); acknowledged "
               "without processing", p->index, duplicates);
    if (gap) {
        ts_log(TS_LOG_WARN, "partition %u: a gap in the consumer's "
               "deliveries; rebuilding once the groups in flight are "
               "done", p->index);
        p->rebuild_due = 1;
    }
    if (f != NULL && f->last_input_seq == 0)
        f->last_input_seq = committed;
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].messages += (uint64_t)taken;
    m->stats[p->index].duplicates += (uint64_t)duplicates;
    m->stats[p->index].reused += (uint64_t)reused;
    pthread_mutex_unlock(&m->lock);
    natsMsgList_Destroy(&list);
    return 1;
}

/* After a rebuild: the partition's pipeline, its users loaded from the
 * map on demand. 0, or -1 (logged). */
int ts_js_make_pipeline(ts_jetstream *m, partition *p)
{
    char err[ERR_MAX];
    /* Every partition shares the mechanisms the configuration's load
     * built, so a model or channel is in memory once. */
    const ts_config *config = m->adopted != NULL ? m->adopted : m->env.config;
    p->pipeline = ts_config_make_shared_pipeline(config, m->env.rng, err,
                                                 sizeof err);
    if (p->pipeline == NULL) {
        ts_log(TS_LOG_ERROR, "partition %u: %s", p->index, err);
        return -1;
    }
    p->config = ts_config_ref(config);
    p->backend = (ts_state_backend){ p, ts_js_backend_load, ts_js_backend_save };
    ts_pipeline_set_state_backend(p->pipeline, &p->backend);
    return 0;
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
        /* A cluster electing a leader: not again for a while. */
        m->next_lag_ms = now + 5 * LAG_EVERY_MS;
        free(backlog);
        return;
    }
    pthread_mutex_lock(&m->lock);
    for (uint32_t i = 0; i < m->n_partitions; i++)
        m->stats[i].lag = m->parts[i].state != PART_IDLE ? backlog[i] : 0;
    pthread_mutex_unlock(&m->lock);
    free(backlog);
}

/* ---------------------------------------------------------- the thread */

/* Idle users leave memory as with the ZeroMQ driver; their records stay
 * in the partition's map, which a returning user is loaded from (the
 * newest record, or, for a group that fails, the one before it: the map
 * is undone with the group). */
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
            p->rebuild_due = 1;
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
