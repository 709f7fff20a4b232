#include "drivers/jetstream/js_pop_entry.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/jetstream/jetstream_setup.h"
#include "engine/log.h"

void ts_js_pop_entry_init(ts_js_pop_entry *e, ts_js_pop_ctx *ctx,
                          const char *name, const char *mechanism,
                          const ts_population_ops *ops, void *mech)
{
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->mechanism = mechanism;
    e->ops = ops;
    e->mech = mech;
    e->n = ops->cells(mech);
    /* Profile names are letters, digits, '-' and '_' (engine/config.c):
     * valid KV keys and subject tokens as they are. */
    snprintf(e->est_key, sizeof e->est_key, "%s", name);
    snprintf(e->lease_key, sizeof e->lease_key, "pop.%s", name);
    /* Batch output puts every profile's reports in OutcomeBatch messages
     * of one subject. */
    if (ctx->batch)
        snprintf(e->reports_subject, sizeof e->reports_subject,
                 "tracesan.batch");
    else
        snprintf(e->reports_subject, sizeof e->reports_subject,
                 "tracesan.out.%s", name);
    ops->channel_current(mech, &e->installed_version);
}

void ts_js_pop_entry_free(ts_js_pop_entry *e)
{
    if (e->ops == NULL)
        return;
    pthread_mutex_lock(&e->ctx->lock);
    /* Truthfully labelled if anything still released through it. */
    if (e->installed != NULL)
        e->ops->channel_install(e->mech, NULL, 1);
    for (size_t i = 0; i < TS_JS_POP_HELD_MAX; i++)
        if (e->held[i].channel != NULL)
            e->ops->channel_free(e->held[i].channel);
    ts_population_record_free(&e->shown);
    pthread_mutex_unlock(&e->ctx->lock);
    memset(e, 0, sizeof *e);
}

/* ----------------------------------------------------------- channels */

static void *held_channel(ts_js_pop_entry *e, uint32_t version)
{
    for (size_t i = 0; i < TS_JS_POP_HELD_MAX; i++)
        if (e->held[i].channel != NULL && e->held[i].version == version)
            return e->held[i].channel;
    return NULL;
}

int ts_js_pop_hold(ts_js_pop_entry *e, void *channel, uint32_t version)
{
    int held = -1;
    pthread_mutex_lock(&e->ctx->lock);
    for (size_t i = 0; i < TS_JS_POP_HELD_MAX && held < 0; i++)
        if (e->held[i].channel == NULL) {
            e->held[i] = (ts_js_pop_held){ channel, version };
            held = 0;
        }
    pthread_mutex_unlock(&e->ctx->lock);
    return held;
}

const void *ts_js_pop_channel(ts_js_pop_entry *e, uint32_t version,
                              const double *theta, char *err, size_t errlen)
{
    pthread_mutex_lock(&e->ctx->lock);
    void *channel = held_channel(e, version);
    pthread_mutex_unlock(&e->ctx->lock);
    if (channel != NULL)
        return channel;
    /* Versions form one line (the bucket's compare-and-set), so a version
     * names one estimate, and the channel is the same function of it on
     * every instance. */
    channel = e->ops->channel_build(e->mech, theta, NULL, err, errlen);
    if (channel == NULL)
        return NULL;
    if (ts_js_pop_hold(e, channel, version) != 0) {
        e->ops->channel_free(channel);
        snprintf(err, errlen, "too many channels held");
        return NULL;
    }
    return channel;
}

void ts_js_pop_collect(ts_js_pop_entry *e)
{
    const ts_js_pop_holder *h = &e->holder;
    pthread_mutex_lock(&e->ctx->lock);
    for (size_t i = 0; i < TS_JS_POP_HELD_MAX; i++) {
        const void *c = e->held[i].channel;
        if (c == NULL || c == e->installed || c == e->pending ||
            (h->ready && (c == h->loop.source[0].channel ||
                          c == h->loop.source[1].channel)))
            continue;
        e->ops->channel_free(e->held[i].channel);
        e->held[i].channel = NULL;
    }
    pthread_mutex_unlock(&e->ctx->lock);
}

/* ------------------------------------------------------- installation */

uint32_t ts_js_pop_newest(ts_js_pop_entry *e)
{
    pthread_mutex_lock(&e->ctx->lock);
    uint32_t newest = e->installed_version;
    if (e->pending != NULL && e->pending_version > newest)
        newest = e->pending_version;
    pthread_mutex_unlock(&e->ctx->lock);
    return newest;
}

void ts_js_pop_offer(ts_js_pop_entry *e, const void *channel,
                     uint32_t version)
{
    pthread_mutex_lock(&e->ctx->lock);
    if (version > e->installed_version &&
        (e->pending == NULL || version > e->pending_version)) {
        e->pending = (void *)channel;
        e->pending_version = version;
    }
    pthread_mutex_unlock(&e->ctx->lock);
}

/* Under the lock. */
static void install_locked(ts_js_pop_entry *e, const void *channel,
                           uint32_t version)
{
    e->ops->channel_install(e->mech, channel, version);
    e->installed = channel;
    e->installed_version = version;
    if (e->pending != NULL && e->pending_version <= version)
        e->pending = NULL;
}

int ts_js_pop_install_pending(ts_js_pop_entry *e)
{
    pthread_mutex_lock(&e->ctx->lock);
    uint32_t version = e->pending_version;
    int installed = e->pending != NULL && version > e->installed_version;
    if (installed)
        install_locked(e, e->pending, version);
    e->pending = NULL;
    pthread_mutex_unlock(&e->ctx->lock);
    if (installed)
        ts_log(TS_LOG_INFO, "profile %s: channel version %u installed",
               e->name, version);
    return installed;
}

/* The JetStream thread builds outside the lock and installs under it:
 * the module thread may collect unreferenced channels in between, so the
 * channel is looked up, or held, and installed in one step. 0, or -1
 * when no slot is free. */
static int install_built(ts_js_pop_entry *e, void *built, uint32_t version)
{
    pthread_mutex_lock(&e->ctx->lock);
    void *channel = held_channel(e, version);
    for (size_t i = 0; i < TS_JS_POP_HELD_MAX && channel == NULL; i++)
        if (e->held[i].channel == NULL) {
            e->held[i] = (ts_js_pop_held){ built, version };
            channel = built;
        }
    if (channel != NULL)
        install_locked(e, channel, version);
    pthread_mutex_unlock(&e->ctx->lock);
    if (channel != built)
        e->ops->channel_free(built);
    return channel != NULL ? 0 : -1;
}

int ts_js_pop_catch_up(ts_js_pop_entry *e, jsCtx *js)
{
    ts_population_record record;
    uint64_t revision;
    int found = ts_js_pop_read_latest(e, js, &record, &revision);
    if (found <= 0)
        return found;
    int rc = 0;
    /* Another grid is not adopted (the module thread says so). */
    if (record.n == e->n && record.version > ts_js_pop_newest(e)) {
        char err[256] = "too many channels held";
        void *built = e->ops->channel_build(e->mech, record.theta, NULL, err,
                                            sizeof err);
        if (built == NULL || install_built(e, built, record.version) != 0) {
            ts_log(TS_LOG_WARN, "profile %s: cannot install channel "
                   "version %u: %s", e->name, record.version, err);
            rc = -1;
        } else {
            ts_js_pop_show(e, &record);
            ts_log(TS_LOG_INFO, "profile %s: channel version %u installed "
                   "(caught up before a restored partition's first group)",
                   e->name, record.version);
        }
    }
    if (rc == 0)
        ts_js_pop_install_pending(e);
    ts_population_record_free(&record);
    return rc;
}

/* ----------------------------------------------------------- records */

/* A value of the bucket as a record: 1, or -1 (logged). */
static int decode_value(ts_js_pop_entry *e, const void *bytes, size_t len,
                        uint64_t revision, ts_population_record *record)
{
    int oom = 0;
    int bad = ts_population_record_decode(bytes, len, record, &oom) != 0;
    if (!bad && record->format != 2) {
        ts_population_record_free(record);
        bad = 1;
    }
    if (bad)
        ts_log(TS_LOG_ERROR, "profile %s: the population bucket's value at "
               "revision %" PRIu64 " is %s", e->name, revision,
               oom ? "too large for memory" : "not a population record");
    return bad ? -1 : 1;
}

int ts_js_pop_read(ts_js_pop_entry *e, kvStore *kv,
                   ts_population_record *record, uint64_t *revision)
{
    kvEntry *entry = NULL;
    natsStatus s = kvStore_Get(&entry, kv, e->est_key);
    if (s == NATS_NOT_FOUND)
        return 0;
    if (s != NATS_OK) {
        ts_log(TS_LOG_DEBUG, "profile %s: reading the population bucket: "
               "%s", e->name, natsStatus_GetText(s));
        return -1;
    }
    *revision = kvEntry_Revision(entry);
    int rc = decode_value(e, kvEntry_Value(entry),
                          (size_t)kvEntry_ValueLen(entry), *revision, record);
    kvEntry_Destroy(entry);
    return rc;
}

int ts_js_pop_read_latest(ts_js_pop_entry *e, jsCtx *js,
                          ts_population_record *record, uint64_t *revision)
{
    char subject[TS_JS_POP_KEY_MAX + 32];
    snprintf(subject, sizeof subject, "$KV.%s.%s", TS_JS_POPULATION_BUCKET,
             e->est_key);
    natsMsg *msg = NULL;
    jsErrCode code = 0;
    natsStatus s = js_GetLastMsg(&msg, js, "KV_" TS_JS_POPULATION_BUCKET,
                                 subject, NULL, &code);
    if (s == NATS_NOT_FOUND)
        return 0;
    if (s != NATS_OK) {
        ts_log(TS_LOG_DEBUG, "profile %s: reading the population bucket: "
               "%s", e->name, natsStatus_GetText(s));
        return -1;
    }
    *revision = natsMsg_GetSequence(msg);
    /* The bucket's values are never deleted; a delete marker (an operator
     * deleting the key) has no data and reads as absent. */
    int rc = natsMsg_GetDataLength(msg) == 0
                 ? 0
                 : decode_value(e, natsMsg_GetData(msg),
                                (size_t)natsMsg_GetDataLength(msg),
                                *revision, record);
    natsMsg_Destroy(msg);
    return rc;
}

void ts_js_pop_show(ts_js_pop_entry *e, const ts_population_record *record)
{
    double *theta = NULL;
    if (record->theta != NULL) {
        theta = malloc(record->n * sizeof *theta);
        if (theta == NULL)
            return;  /* /density keeps the previous estimate */
        memcpy(theta, record->theta, record->n * sizeof *theta);
    }
    pthread_mutex_lock(&e->ctx->lock);
    /* Two threads read the bucket (the module's, and the JetStream
     * thread catching up): the older of two reads never replaces the
     * newer, so what is shown is never older than what is installed. */
    if (e->has_shown &&
        (record->version < e->shown.version ||
         (record->version == e->shown.version &&
          record->cycles < e->shown.cycles))) {
        pthread_mutex_unlock(&e->ctx->lock);
        free(theta);
        return;
    }
    ts_population_record_free(&e->shown);
    e->shown = *record;
    e->shown.theta = theta;
    e->shown.previous = NULL;
    e->shown.previous_kind = TS_PRIOR_NONE;
    e->has_shown = 1;
    pthread_mutex_unlock(&e->ctx->lock);
}

int ts_js_pop_same_grid(ts_js_pop_entry *e,
                        const ts_population_record *record)
{
    if (record->n == e->n)
        return 1;
    if (!e->warned_grid)
        ts_log(TS_LOG_ERROR, "profile %s: the cluster's estimate has %zu "
               "cells and this profile's grid %zu: the instances' "
               "configurations differ; its versions are not adopted here",
               e->name, record->n, e->n);
    e->warned_grid = 1;
    return 0;
}

ts_density_view ts_js_pop_view(const ts_js_pop_entry *e)
{
    const ts_population_record *r = &e->shown;
    int shown = e->has_shown && r->n == e->n;
    return (ts_density_view){
        .profile = e->name,
        .mechanism = e->mechanism,
        .ops = e->ops,
        .mech = e->mech,
        .n = e->n,
        .theta = shown ? r->theta : NULL,
        .channel_version = shown ? r->version : e->installed_version,
        .cycle = shown ? r->cycles : 0,
        .reports = shown ? r->last_reports : 0,
        .reports_total = shown ? r->reports_total : 0,
        .estimated_at_ms = shown ? r->estimated_at_ms : 0,
    };
}
