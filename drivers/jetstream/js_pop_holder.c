#include "drivers/jetstream/js_pop_holder.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datapath/group.h"
#include "drivers/jetstream/js_state.h"
#include "engine/log.h"

/* The first read of a turn waits this long for a report; the rest take
 * what is there. */
#define READ_WAIT_MS 20
/* Messages counted in one turn at most, so the lease is renewed and the
 * other profiles get their turn while a backlog is read. */
#define READS_PER_TURN 2048

static const char *self_name(const ts_js_pop_entry *e)
{
    return e->ctx->m->self;
}

static void show_holding(ts_js_pop_entry *e, int holding)
{
    pthread_mutex_lock(&e->ctx->lock);
    e->lease_held = holding;
    pthread_mutex_unlock(&e->ctx->lock);
}

static void log_lease(const ts_js_pop_entry *e, const char *what,
                      const char *why)
{
    ts_log(TS_LOG_INFO, "population lease %s profile=%s epoch=%" PRIu64
           " at_ms=%" PRId64 " reason=%s", what, e->name, e->holder.epoch,
           ts_wall_clock_ms(), why);
}

/* ------------------------------------------------------------- the job */

static void *job_main(void *arg)
{
    ts_js_pop_holder *h = arg;
    ts_population_run(&h->job);
    __atomic_store_n(&h->job_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Waits for the job in flight and drops its result: the reports it
 * counted are counted again by whoever resumes from the bucket. */
static void join_job(ts_js_pop_holder *h)
{
    if (h->job_threaded)
        pthread_join(h->job_thread, NULL);
    h->job_threaded = 0;
    h->job_running = 0;
}

static void drop_job(ts_js_pop_holder *h)
{
    if (!h->job_running)
        return;
    join_job(h);
    h->loop.job_running = 0;
    ts_population_job_free(&h->job);
}

/* Drops the loop, its job and its reading; the next turn resumes from
 * the bucket (the lease stays). */
static void restart(ts_js_pop_entry *e)
{
    ts_js_pop_holder *h = &e->holder;
    drop_job(h);
    ts_sub_graveyard_bury(e->ctx->graveyard, h->sub);
    h->sub = NULL;
    ts_population_loop_free(&h->loop);
    h->ready = 0;
}

static void start_job(ts_js_pop_entry *e)
{
    ts_js_pop_holder *h = &e->holder;
    if (ts_population_close(&h->loop, &h->job) != 0)
        return;
    /* What the record of this cycle says it accounts for: the reports of
     * every message up to this one, and none after. */
    h->job_out_seq = h->last_seq;
    h->job_reports_total = h->loop.reports_total;
    h->job_stale = h->loop.stale;
    h->job_outside = h->loop.outside;
    h->job_done = 0;
    h->job_running = 1;
    h->job_threaded = pthread_create(&h->job_thread, NULL, job_main, h) == 0;
    if (!h->job_threaded)
        job_main(h);  /* no thread: run it here */
}

/* ------------------------------------------------------------- leases */

void ts_js_pop_holder_stop(ts_js_pop_entry *e, int release, const char *why)
{
    ts_js_pop_holder *h = &e->holder;
    restart(e);
    if (h->holding) {
        uint64_t rev = 0;
        if (release &&
            natsConnection_Status(e->ctx->m->conn.nc) ==
                NATS_CONN_STATUS_CONNECTED &&
            kvStore_UpdateString(&rev, e->ctx->lease_kv, e->lease_key,
                                 TS_LEASE_FREE, h->lease_rev) == NATS_OK)
            log_lease(e, "released", why);
        else
            log_lease(e, "lost", why);
    }
    h->holding = 0;
    memset(&h->view, 0, sizeof h->view);
    show_holding(e, 0);
    ts_js_pop_collect(e);
}

static void try_take(ts_js_pop_entry *e, int64_t now)
{
    ts_js_pop_holder *h = &e->holder;
    kvEntry *entry = NULL;
    natsStatus s = kvStore_Get(&entry, e->ctx->lease_kv, e->lease_key);
    if (s == NATS_OK) {
        const char *owner = kvEntry_ValueString(entry);
        ts_lease_observe(&h->view, kvEntry_Revision(entry), owner,
                         owner != NULL ? strlen(owner) : 0, now);
        kvEntry_Destroy(entry);
    } else if (s == NATS_NOT_FOUND) {
        ts_lease_observe(&h->view, 0, "", 0, now);
    } else {
        return;
    }
    if (!ts_lease_takeable(&h->view, self_name(e), now, e->ctx->ttl_ms))
        return;
    const char *why = ts_lease_is_free(&h->view) ? "free" : "expired";
    int64_t sent = ts_js_mono_ms();
    uint64_t rev = 0;
    s = h->view.revision == 0
            ? kvStore_CreateString(&rev, e->ctx->lease_kv, e->lease_key,
                                   self_name(e))
            : kvStore_UpdateString(&rev, e->ctx->lease_kv, e->lease_key,
                                   self_name(e), h->view.revision);
    if (s != NATS_OK) {
        memset(&h->view, 0, sizeof h->view);
        return;
    }
    h->holding = 1;
    h->ready = 0;
    h->lease_rev = h->epoch = rev;
    h->deadline_ms = ts_lease_deadline(sent, e->ctx->ttl_ms);
    h->next_renew_ms = sent + ts_lease_renew_interval(e->ctx->ttl_ms);
    h->next_density_ms = 0;
    show_holding(e, 1);
    log_lease(e, "acquired", why);
}

/* A refused renewal can meet this holder's own earlier renewal, stored
 * with its answer lost (ts_js_lease_reads_own): then the lease is still
 * held, at the newer revision, with the deadline of the last answered
 * renewal. 1 when so (the revision adopted), else 0 (unreadable counts as
 * lost: the safe side). */
static int own_renewal_stored(ts_js_pop_entry *e)
{
    ts_js_pop_holder *h = &e->holder;
    uint64_t revision = 0;
    if (ts_js_lease_reads_own(e->ctx->lease_kv, e->lease_key, self_name(e),
                              h->lease_rev, &revision) != 1)
        return 0;
    h->lease_rev = revision;
    return 1;
}

static void renew(ts_js_pop_entry *e, int64_t now)
{
    ts_js_pop_holder *h = &e->holder;
    int64_t every = ts_lease_renew_interval(e->ctx->ttl_ms);
    int64_t sent = ts_js_mono_ms();
    uint64_t rev = 0;
    natsStatus s = kvStore_UpdateString(&rev, e->ctx->lease_kv, e->lease_key,
                                        self_name(e), h->lease_rev);
    if (s == NATS_OK) {
        h->lease_rev = rev;
        h->deadline_ms = ts_lease_deadline(sent, e->ctx->ttl_ms);
        h->next_renew_ms = sent + every;
        return;
    }
    const char *why = nats_GetLastError(NULL);
    if (why != NULL && strstr(why, "wrong last") != NULL &&
        !own_renewal_stored(e)) {
        ts_js_pop_holder_stop(e, 0, "taken");
        return;
    }
    /* Try again soon: the deadline is 3/4 ttl after the last success. */
    h->next_renew_ms = now + (every / 4 > 50 ? every / 4 : 50);
}

/* ------------------------------------------------------------ resuming */

static int subscribe_from(ts_js_pop_entry *e, uint64_t start)
{
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = TS_JS_STREAM_OUT;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = start;
    jsErrCode code = 0;
    natsStatus s = js_SubscribeSync(&e->holder.sub, e->ctx->js,
                                    e->reports_subject, NULL, &so, &code);
    if (s == NATS_OK)
        return 0;
    char err[256];
    ts_js_describe(err, sizeof err, "cannot read TRACESAN_OUT", s, code);
    ts_log(TS_LOG_WARN, "profile %s: %s", e->name, err);
    e->holder.sub = NULL;
    return -1;
}

/* The loop as the record left it: counting under the channels of its
 * version and the one before, from the stream sequence after its last. */
static void resume_from(ts_js_pop_entry *e, const ts_population_record *r,
                        uint64_t revision)
{
    ts_js_pop_holder *h = &e->holder;
    char err[256];
    const void *current, *previous = NULL;
    if (e->ops->adaptive) {
        current = ts_js_pop_channel(e, r->version, r->theta, err, sizeof err);
        if (current != NULL && r->previous_kind != TS_PRIOR_NONE &&
            r->version > 1)
            previous = ts_js_pop_channel(
                e, r->version - 1,
                r->previous_kind == TS_PRIOR_ESTIMATE ? r->previous : NULL,
                err, sizeof err);
        if (current == NULL ||
            (r->previous_kind != TS_PRIOR_NONE && r->version > 1 &&
             previous == NULL)) {
            ts_log(TS_LOG_WARN, "profile %s: cannot resume the PRIVIC loop: "
                   "%s", e->name, err);
            return;
        }
    } else {
        current = e->ops->channel_current(e->mech, NULL);
    }
    if (ts_population_resume(&h->loop, e->ops, e->mech, r, current,
                             previous) != 0) {
        ts_log(TS_LOG_WARN, "profile %s: cannot resume the PRIVIC loop: out "
               "of memory", e->name);
        return;
    }
    if (subscribe_from(e, r->out_seq + 1) != 0) {
        ts_population_loop_free(&h->loop);
        return;
    }
    h->kv_rev = revision;
    h->last_seq = r->out_seq;
    h->ready = 1;
    if (e->ops->adaptive)
        ts_js_pop_offer(e, current, r->version);
    ts_log(TS_LOG_INFO, "profile %s: PRIVIC loop resumed at channel version "
           "%u after %u cycles, counting TRACESAN_OUT from sequence %" PRIu64,
           e->name, r->version, r->cycles, r->out_seq + 1);
}

/* A first record: version 1 (or, when the bucket was emptied under
 * running instances, one past what this one releases through, so no
 * version goes back), no estimate, counting from the stream's end. */
static int create_first(ts_js_pop_entry *e, ts_population_record *r)
{
    jsStreamInfo *info = NULL;
    jsErrCode code = 0;
    if (js_GetStreamInfo(&info, e->ctx->js, TS_JS_STREAM_OUT, NULL, &code) !=
        NATS_OK)
        return -1;
    uint64_t last = info->State.LastSeq;
    jsStreamInfo_Destroy(info);
    uint32_t version = ts_js_pop_newest(e);
    *r = (ts_population_record){
        .format = 2, .n = e->n, .out_seq = last,
        .version = version > 1 && e->ops->adaptive ? version + 1 : version,
    };
    return 0;
}

static void resume_from_bucket(ts_js_pop_entry *e)
{
    ts_population_record r;
    uint64_t revision = 0;
    int found = ts_js_pop_read_latest(e, e->ctx->js, &r, &revision);
    if (found < 0)
        return;
    int write = found == 0;
    if (found == 0) {
        if (create_first(e, &r) != 0)
            return;
    } else if (r.n != e->n) {
        /* This instance's grid is not the record's: start afresh, one
         * version on, from where the record's counting ended. */
        ts_log(TS_LOG_WARN, "profile %s: the cluster's estimate is of "
               "another grid (%zu cells, here %zu): starting afresh", e->name,
               r.n, e->n);
        ts_population_record_free(&r);
        r = (ts_population_record){
            .format = 2, .n = e->n, .out_seq = r.out_seq,
            .version = r.version + (e->ops->adaptive ? 1 : 0),
        };
        write = 1;
    }
    if (write) {
        size_t len = ts_population_record_size(&r);
        unsigned char *bytes = malloc(len);
        natsStatus s = NATS_NO_MEMORY;
        if (bytes != NULL) {
            ts_population_record_encode(&r, bytes);
            s = found == 0
                    ? kvStore_Create(&revision, e->ctx->kv, e->est_key, bytes,
                                     (int)len)
                    : kvStore_Update(&revision, e->ctx->kv, e->est_key,
                                     bytes, (int)len, revision);
        }
        free(bytes);
        if (s != NATS_OK) {
            /* Someone else wrote first: read it on the next turn. */
            ts_population_record_free(&r);
            return;
        }
        ts_js_pop_show(e, &r);
        e->seen_rev = revision;
    }
    resume_from(e, &r, revision);
    ts_population_record_free(&r);
}

void ts_js_pop_holder_moved(ts_js_pop_entry *e, uint64_t revision)
{
    ts_js_pop_holder *h = &e->holder;
    if (!h->holding || !h->ready || revision == h->kv_rev)
        return;
    ts_log(TS_LOG_WARN, "profile %s: the population bucket moved on to "
           "revision %" PRIu64 " without this holder; resuming from it",
           e->name, revision);
    restart(e);
}

/* ----------------------------------------------------------- counting */

static void count_report(ts_js_pop_entry *e,
                         const Tracesan__V1__SanitizedLocation *loc)
{
    if (loc->repeated)
        return;  /* the previous report again, not a draw */
    ts_population_observe(&e->holder.loop, loc->lat, loc->lon,
                          loc->has_channel_version ? loc->channel_version
                                                   : 1,
                          loc->timestamp_ms);
}

static void count_message(ts_js_pop_entry *e, natsMsg *msg)
{
    const ts_format *format = e->ctx->format;
    const void *data = natsMsg_GetData(msg);
    size_t len = (size_t)natsMsg_GetDataLength(msg);
    ProtobufCMessage *m = NULL;
    if (!e->ctx->batch) {
        if (format->read(&tracesan__v1__sanitized_location__descriptor, data,
                         len, NULL, &m) == 0)
            count_report(e, (Tracesan__V1__SanitizedLocation *)m);
    } else if (format->read(&tracesan__v1__outcome_batch__descriptor, data,
                            len, NULL, &m) == 0) {
        const Tracesan__V1__OutcomeBatch *batch =
            (const Tracesan__V1__OutcomeBatch *)m;
        for (size_t i = 0; i < batch->n_sanitized; i++)
            if (batch->sanitized[i]->profile != NULL &&
                strcmp(batch->sanitized[i]->profile, e->name) == 0)
                count_report(e, batch->sanitized[i]);
    }
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
    else
        ts_log(TS_LOG_DEBUG, "profile %s: an unreadable message on %s",
               e->name, natsMsg_GetSubject(msg));
}

/* Counts what the stream holds since the last turn, closing a cycle at
 * the first message boundary where one is due. */
static void read_reports(ts_js_pop_entry *e)
{
    ts_js_pop_holder *h = &e->holder;
    for (int i = 0; i < READS_PER_TURN && h->sub != NULL; i++) {
        natsMsg *msg = NULL;
        uint64_t seq, pending;
        natsStatus s = ts_js_next_stream_msg(h->sub,
                                             i == 0 ? READ_WAIT_MS : 0, &msg,
                                             &seq, &pending);
        if (s == NATS_TIMEOUT)
            break;
        if (s != NATS_OK) {
            ts_log(TS_LOG_WARN, "profile %s: reading TRACESAN_OUT: %s; "
                   "resuming from the bucket", e->name,
                   natsStatus_GetText(s));
            restart(e);
            break;
        }
        if (seq > h->last_seq) {
            count_message(e, msg);
            h->last_seq = seq;
        }
        natsMsg_Destroy(msg);
        if (ts_population_due(&h->loop))
            start_job(e);
    }
}

/* ------------------------------------------------------------ writing */

static void write_done(ts_js_pop_entry *e, const ts_population_record *r,
                       uint64_t revision)
{
    ts_js_pop_holder *h = &e->holder;
    ts_population_job *job = &h->job;
    unsigned ibu_it = job->ibu.iterations, build_it = job->build.iterations;
    double ibu_ms = job->ibu_ms, build_ms = job->build_ms;
    uint64_t reports = job->reports;
    void *channel = job->channel;
    job->channel = NULL;
    ts_js_pop_show(e, r);
    e->seen_rev = h->kv_rev = revision;
    ts_population_finish(&h->loop, job);
    if (channel != NULL &&
        (ts_js_pop_hold(e, channel, r->version) != 0 ||
         ts_population_shift(&h->loop, channel, r->version) != 0)) {
        /* Written but not counted under here: resume from the record. */
        e->ops->channel_free(channel);
        restart(e);
        return;
    }
    if (channel != NULL)
        ts_js_pop_offer(e, channel, r->version);
    ts_log(TS_LOG_INFO, "profile %s: PRIVIC cycle %u on %" PRIu64 " reports: "
           "IBU %u iterations %.0f ms, BA %u iterations %.0f ms, channel "
           "version %u (bucket revision %" PRIu64 ", outputs to sequence "
           "%" PRIu64 ")", e->name, r->cycles, reports, ibu_it, ibu_ms,
           build_it, build_ms, r->version, revision, r->out_seq);
}

/* After a write whose answer was lost: whether the bucket holds it. */
static int written_after_all(ts_js_pop_entry *e, const unsigned char *bytes,
                             size_t len, uint64_t *revision)
{
    kvEntry *entry = NULL;
    if (kvStore_Get(&entry, e->ctx->kv, e->est_key) != NATS_OK)
        return 0;
    int same = (size_t)kvEntry_ValueLen(entry) == len &&
               memcmp(kvEntry_Value(entry), bytes, len) == 0;
    *revision = kvEntry_Revision(entry);
    kvEntry_Destroy(entry);
    return same;
}

/* The cycle's result, written on the revision the loop went on from: it
 * is the next version only if nobody wrote since. */
static void write_result(ts_js_pop_entry *e)
{
    ts_js_pop_holder *h = &e->holder;
    ts_population_job *job = &h->job;
    pthread_mutex_lock(&e->ctx->lock);
    e->last_ibu_ms = job->ibu_ms;
    e->last_build_ms = job->build_ms;
    if (!job->ok)
        e->failures++;
    pthread_mutex_unlock(&e->ctx->lock);
    if (!job->ok) {
        ts_log(TS_LOG_ERROR, "profile %s: PRIVIC cycle %u failed, the "
               "channel stays at version %u: %s", e->name,
               h->loop.cycles + 1, h->loop.source[1].version, job->err);
        ts_population_finish(&h->loop, job);
        return;
    }
    const ts_population_loop *loop = &h->loop;
    int adaptive = e->ops->adaptive;
    ts_population_record r = {
        .format = 2,
        .version = loop->source[1].version + (adaptive ? 1 : 0),
        .cycles = loop->cycles + 1,
        .reports_total = h->job_reports_total,
        .n = e->n,
        .theta = job->theta,
        /* The prior of the version before the new one: the current's. */
        .previous_kind = !adaptive ? TS_PRIOR_NONE
                         : loop->theta != NULL ? TS_PRIOR_ESTIMATE
                                               : TS_PRIOR_UNIFORM,
        .previous = adaptive ? loop->theta : NULL,
        .stale = h->job_stale,
        .outside = h->job_outside,
        .estimated_reports = loop->estimated_reports + job->reports,
        .last_reports = job->reports,
        .estimated_at_ms = ts_wall_clock_ms(),
        .out_seq = h->job_out_seq,
    };
    size_t len = ts_population_record_size(&r);
    unsigned char *bytes = malloc(len);
    uint64_t revision = 0;
    natsStatus s = NATS_NO_MEMORY;
    int written = 0;
    /* Past the deadline another instance may hold the lease: the write
     * would still be safe (compare-and-set), but it is not ours to do. */
    if (bytes != NULL && ts_js_mono_ms() < h->deadline_ms) {
        ts_population_record_encode(&r, bytes);
        s = kvStore_Update(&revision, e->ctx->kv, e->est_key, bytes,
                           (int)len, h->kv_rev);
        const char *why = s != NATS_OK ? nats_GetLastError(NULL) : NULL;
        written = s == NATS_OK ||
                  ((why == NULL || strstr(why, "wrong last") == NULL) &&
                   written_after_all(e, bytes, len, &revision));
    }
    free(bytes);
    if (written) {
        write_done(e, &r, revision);
        return;
    }
    /* Not ours any more, or unknown: go on from what the bucket holds;
     * the cycle's reports are counted again from its position. */
    ts_log(TS_LOG_WARN, "profile %s: the cycle's result was not written "
           "(%s); resuming from the bucket", e->name,
           s == NATS_OK ? "deadline passed" : natsStatus_GetText(s));
    ts_population_job_free(job);
    h->loop.job_running = 0;
    restart(e);
}

/* --------------------------------------------------------- the density */

static void publish_density(ts_js_pop_entry *e, int64_t now)
{
    ts_js_pop_holder *h = &e->holder;
    const ts_js_pop_ctx *ctx = e->ctx;
    if (ctx->publish_ms <= 0 || now < h->next_density_ms)
        return;
    h->next_density_ms = now + ctx->publish_ms;
    ts_buf topic = { 0 }, payload = { 0 };
    int encoded = -1;
    pthread_mutex_lock(&e->ctx->lock);
    if (e->has_shown && e->shown.theta != NULL && e->shown.n == e->n) {
        ts_density_view view = ts_js_pop_view(e);
        Tracesan__V1__DensityEstimate m;
        double bounds[4];
        ts_density_fill(&view, &m, bounds);
        encoded = ts_format_density(ctx->format, &m, &topic, &payload);
    } else {
        encoded = 1;  /* nothing estimated yet */
    }
    pthread_mutex_unlock(&e->ctx->lock);
    int sent = 0;
    if (encoded == 0) {
        char subject[SUBJECT_MAX];
        snprintf(subject, sizeof subject, "tracesan.%.*s", (int)topic.len,
                 (const char *)topic.data);
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = ts_lease_renew_interval(ctx->ttl_ms);
        jsPubAck *ack = NULL;
        jsErrCode code = 0;
        sent = js_Publish(&ack, ctx->js, subject, payload.data,
                          (int)payload.len, &po, &code) == NATS_OK;
        if (ack != NULL)
            jsPubAck_Destroy(ack);
    }
    ts_buf_free(&topic);
    ts_buf_free(&payload);
    if (encoded == 1)
        return;
    pthread_mutex_lock(&e->ctx->lock);
    if (sent)
        e->densities_published++;
    else
        e->densities_dropped++;
    pthread_mutex_unlock(&e->ctx->lock);
}

/* ------------------------------------------------------------ the turn */

void ts_js_pop_holder_step(ts_js_pop_entry *e, int64_t now)
{
    ts_js_pop_holder *h = &e->holder;
    if (!h->holding) {
        if (now < h->next_look_ms)
            return;
        h->next_look_ms = now + ts_lease_renew_interval(e->ctx->ttl_ms) / 2;
        try_take(e, now);
        if (!h->holding)
            return;
    }
    if (now >= h->next_renew_ms)
        renew(e, now);
    if (!h->holding)
        return;
    if (ts_js_mono_ms() >= h->deadline_ms) {
        ts_js_pop_holder_stop(e, 0, "not renewed in time");
        return;
    }
    if (!h->ready)
        resume_from_bucket(e);
    if (!h->ready)
        return;
    if (h->job_running && __atomic_load_n(&h->job_done, __ATOMIC_ACQUIRE)) {
        join_job(h);
        write_result(e);
    }
    if (h->ready)
        read_reports(e);
    /* Reports counted while the last job ran may fill a cycle already,
     * and nothing else would start it until one more arrives. */
    if (h->ready && ts_population_due(&h->loop))
        start_job(e);
    if (h->ready)
        publish_density(e, now);
}
