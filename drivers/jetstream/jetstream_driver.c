#include "drivers/jetstream/jetstream_driver.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "drivers/jetstream/js_state.h"
#include "engine/log.h"

/* The loop hands the JetStream thread's observations on and reads its
 * health this often. */
#define TICK_MS 50
/* Observations queued for the loop at most (the feed's bytes included). */
#define RELAY_MAX_BYTES ((size_t)8 << 20)
/* How long the thread sleeps when no owned partition had input. */
#define IDLE_SLEEP_US 2000
/* Pause between attempts to rebuild a partition. */
#define RESTORE_RETRY_MS 500
/* A starting instance waits this long for a forming cluster's JetStream
 * to accept the streams. */
#define SETUP_PATIENCE_MS 60000

static const char *const types[] = { "jetstream", NULL };

/* ------------------------------------------------- the JetStream thread */

static void on_publish_error(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    (void)js;
    (void)pae;
    ts_jetstream *m = closure;
    pthread_mutex_lock(&m->publish_lock);
    m->publish_errors++;
    pthread_mutex_unlock(&m->publish_lock);
}

/* A partition due for its rebuild; 1 when one was tried. */
static int rebuild(ts_jetstream *m, partition *p)
{
    if (ts_js_mono_ms() < p->retry_at_ms)
        return 0;
    int restored = ts_js_restore_partition(m, p);
    if (restored == -2) {
        ts_js_lose_partition(m, p, "fenced out", 0);
    } else if (restored != 0) {
        p->retry_at_ms = ts_js_mono_ms() + RESTORE_RETRY_MS;
        ts_js_enforce_lease(m, p);
    }
    return 1;
}

static void note_health(ts_jetstream *m)
{
    int is_connected = ts_js_connected(m);
    char health[256] = "";
    if (!is_connected)
        snprintf(health, sizeof health, "not connected to NATS");
    else if (ts_js_lease_silent_ms(m) > m->nats->lease_ttl_ms)
        snprintf(health, sizeof health, "lease bucket unreachable for "
                 "more than nats.lease_ttl_s");
    ts_js_set_health(m, health);
    pthread_mutex_lock(&m->lock);
    m->connected = is_connected;
    pthread_mutex_unlock(&m->lock);
}

/* Hands every partition back so others take over at once. Renewals stop
 * first, so that handing back finds our revisions. */
static void hand_back(ts_jetstream *m)
{
    m->lease_stop = 1;
    pthread_join(m->lease_thread, NULL);
    m->lease_thread_started = 0;
    for (uint32_t i = 0; i < m->n_partitions; i++)
        ts_js_lose_partition(m, &m->parts[i], "shutdown", 1);
    char key[TS_LEASE_OWNER_MAX + 8];
    snprintf(key, sizeof key, "i.%s", m->self);
    if (ts_js_connected(m))
        kvStore_Delete(m->kv, key);
}

static void *jetstream_thread(void *arg)
{
    ts_jetstream *m = arg;
    int64_t next_expiry_ms = 0;
    m->last_lease_ok_ms = ts_js_mono_ms();
    if (pthread_create(&m->lease_thread, NULL, ts_js_lease_thread_main, m) !=
        0) {
        ts_log(TS_LOG_ERROR, "cannot start the lease thread");
        ts_js_set_health(m, "lease thread not running");
        return NULL;
    }
    m->lease_thread_started = 1;
    while (!m->stop) {
        ts_js_apply_pending_reload(m);
        int64_t now = ts_js_mono_ms();
        if (now >= m->next_lease_ms)
            ts_js_lease_tick(m);
        if (now >= next_expiry_ms) {
            ts_js_expire_users(m);
            next_expiry_ms = now + (m->settings->expire_interval_ms > 0
                                        ? m->settings->expire_interval_ms
                                        : 1000);
        }
        int busy = 0;
        /* One rebuild per pass: a rebuild waits on the cluster (seconds
         * right after a node is lost), and the partitions already active
         * get a group in between instead of waiting for all of them. */
        int rebuilt = 0;
        for (uint32_t i = 0; i < m->n_partitions && !m->stop; i++) {
            partition *p = &m->parts[i];
            if (ts_js_mono_ms() >= m->next_lease_ms)
                ts_js_lease_tick(m);
            if (!ts_js_connected(m))
                break;
            if (p->state == PART_RESTORE && !rebuilt) {
                rebuilt = rebuild(m, p);
                busy |= rebuilt;
            } else if (p->state == PART_ACTIVE) {
                busy |= ts_js_run_group(m, p);
                ts_js_count_pipeline(m, p);
            }
        }
        note_health(m);
        if (ts_js_connected(m))
            ts_js_refresh_lag(m);
        if (!busy)
            usleep(IDLE_SLEEP_US);
    }
    hand_back(m);
    return NULL;
}

/* ------------------------------------------------------- the loop side */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_jetstream *m = arg;
    ts_observer_relay_drain(m->relay);
    const ts_observer *o = m->env.observer;
    if (o == NULL || o->health == NULL)
        return;
    char reason[256];
    pthread_mutex_lock(&m->lock);
    snprintf(reason, sizeof reason, "%s", m->health);
    pthread_mutex_unlock(&m->lock);
    /* Every tick, so a reason that changed replaces the old one. */
    o->health(o->arg, NULL);
    if (reason[0] != '\0')
        o->health(o->arg, reason);
}

/* ------------------------------------------------------------- table */

static void js_close(ts_jetstream *m)
{
    if (m == NULL)
        return;
    if (m->parts != NULL) {
        for (uint32_t i = 0; i < m->n_partitions; i++) {
            ts_js_drop_state(m, &m->parts[i]);
            ts_changelog_replica_free(&m->parts[i].replica);
        }
    }
    if (m->kv != NULL)
        kvStore_Destroy(m->kv);
    if (m->lease_kv != NULL)
        kvStore_Destroy(m->lease_kv);
    if (m->lease_js != NULL)
        jsCtx_Destroy(m->lease_js);
    ts_js_close(&m->conn);
    if (m->tick_event != NULL)
        event_free(m->tick_event);
    ts_observer_relay_free(m->relay);
    free(m->parts);
    free(m->stats);
    free(m->latencies);
    free(m->encode_buf);
    if (m->pending != NULL)
        ts_config_free(m->pending);
    if (m->adopted != NULL)
        ts_config_free(m->adopted);
    ts_group_free(&m->group);
    ts_changelog_builder_free(&m->builder);
    ts_buf_free(&m->record);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->publish_lock);
    pthread_mutex_destroy(&m->lease_lock);
    free(m);
}

/* The instance's name in leases: nats.instance_id, or host name and pid,
 * without the characters a NATS subject or key cannot hold. */
static void name_instance(ts_jetstream *m)
{
    if (m->nats->instance_id != NULL && m->nats->instance_id[0] != '\0') {
        snprintf(m->self, sizeof m->self, "%s", m->nats->instance_id);
    } else {
        char host[48] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(m->self, sizeof m->self, "%s-%ld", host, (long)getpid());
    }
    for (char *c = m->self; *c != '\0'; c++)
        if (*c == '.' || *c == '*' || *c == '>' || *c == ' ')
            *c = '_';
}

static int allocate(ts_jetstream *m, const ts_driver_env *env)
{
    const ts_format_settings *format =
        ts_config_section(env->config, &ts_format_setting_section);
    m->parts = calloc(m->n_partitions, sizeof *m->parts);
    m->stats = calloc(m->n_partitions, sizeof *m->stats);
    m->latencies = calloc(LATENCY_SAMPLES, sizeof *m->latencies);
    if (m->parts == NULL || m->stats == NULL || m->latencies == NULL)
        return -1;
    static const ts_observer nobody;
    m->relay = ts_observer_relay_new(env->observer != NULL ? env->observer
                                                           : &nobody,
                                     RELAY_MAX_BYTES);
    if (m->relay == NULL ||
        ts_group_init(&m->group, m->settings, format,
                      ts_observer_relay_front(m->relay)) != 0)
        return -1;
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        m->parts[i].index = i;
        m->parts[i].mode = m;
        if (ts_changelog_replica_init(&m->parts[i].replica) != 0)
            return -1;
    }
    return 0;
}

/* Connects, makes the streams (a cluster still electing its JetStream
 * leader refuses API calls for a few seconds) and opens the lease
 * bucket. 0, or -1 with err. */
static int connect_cluster(ts_jetstream *m, char *err, size_t errlen)
{
    if (ts_js_connect(&m->conn, m->nats, m->self, on_publish_error, m, err,
                      errlen) != 0)
        return -1;
    for (int64_t give_up = ts_js_mono_ms() + SETUP_PATIENCE_MS;;) {
        if (ts_js_ensure_streams(&m->conn, m->nats, &m->input_work_queue,
                                 err, errlen) == 0)
            break;
        if (ts_js_mono_ms() >= give_up)
            return -1;
        ts_log(TS_LOG_INFO, "%s; retrying", err);
        sleep(1);
    }
    /* Renewals give up quickly and try again: the deadline leaves room
     * for several attempts while a leader is being elected. */
    jsOptions lease_opts;
    jsOptions_Init(&lease_opts);
    lease_opts.Wait = m->nats->lease_ttl_ms / 8 > 250
                          ? m->nats->lease_ttl_ms / 8 : 250;
    if (js_KeyValue(&m->kv, m->conn.js, TS_JS_LEASE_BUCKET) != NATS_OK ||
        natsConnection_JetStream(&m->lease_js, m->conn.nc, &lease_opts) !=
            NATS_OK ||
        js_KeyValue(&m->lease_kv, m->lease_js, TS_JS_LEASE_BUCKET) !=
            NATS_OK) {
        snprintf(err, errlen, "cannot open the lease bucket");
        return -1;
    }
    m->max_payload = (size_t)natsConnection_GetMaxPayload(m->conn.nc);
    m->connected = 1;
    if (!m->input_work_queue)
        ts_log(TS_LOG_WARN, TS_JS_STREAM_IN " was made with limits retention "
               "by an older version: acknowledged inputs stay stored until "
               "its limits remove them. Recreate it (empty) to make it a "
               "work queue (docs/scale-out.md)");
    return 0;
}

static int js_open(ts_driver **out, const ts_driver_env *env, char *err,
                   size_t errlen)
{
    *out = NULL;
    ts_jetstream *m = calloc(1, sizeof *m);
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->publish_lock, NULL);
    pthread_mutex_init(&m->lease_lock, NULL);
    m->env = *env;
    m->template = env->pipeline;
    m->settings = ts_config_settings(env->config);
    m->nats = ts_nats_settings_of(env->config);
    m->n_partitions = (uint32_t)m->nats->partitions;
    if (m->settings->state_dir != NULL)
        ts_log(TS_LOG_INFO, "state.dir is not used with input.type = "
               "\"jetstream\": ledgers live in the TRACESAN_STATE stream");
    name_instance(m);
    struct timeval tick = { 0, TICK_MS * 1000 };
    if (allocate(m, env) != 0) {
        snprintf(err, errlen, "out of memory");
    } else if (connect_cluster(m, err, errlen) == 0) {
        m->tick_event = event_new(env->base, -1, EV_PERSIST, on_tick, m);
        if (m->tick_event != NULL && event_add(m->tick_event, &tick) == 0) {
            *out = m;
            return 0;
        }
        snprintf(err, errlen, "cannot set up the health timer");
    }
    js_close(m);
    return -1;
}

static int js_start(ts_driver *m, char *err, size_t errlen)
{
    if (pthread_create(&m->thread, NULL, jetstream_thread, m) != 0) {
        snprintf(err, errlen, "cannot start the JetStream thread");
        return -1;
    }
    m->thread_started = 1;
    return 0;
}

static void js_describe(const ts_driver *m, char *buf, size_t len)
{
    snprintf(buf, len, "input=jetstream output=jetstream instance=%s "
             "partitions=%u", m->self, m->n_partitions);
}

static int js_finish(ts_driver *m)
{
    if (m->thread_started) {
        m->stop = 1;
        pthread_join(m->thread, NULL);
        m->thread_started = 0;
    }
    ts_observer_relay_drain(m->relay);
    ts_js_log_latencies(m);
    return 0;
}

static void js_stats(const ts_driver *m, ts_driver_stats *out)
{
    ts_jetstream *mode = (ts_jetstream *)m;
    pthread_mutex_lock(&mode->lock);
    *out = m->totals;
    out->users = 0;
    for (uint32_t i = 0; i < m->n_partitions; i++)
        out->users += m->stats[i].users;
    pthread_mutex_unlock(&mode->lock);
}

/* SIGHUP (the caller swapped the template's profiles already): the
 * JetStream thread swaps every partition's profiles for ones built from
 * `fresh` between two groups, and builds later partitions' pipelines from
 * it. */
static int js_adopt_config(ts_driver *m, ts_config *fresh, char *err,
                           size_t errlen)
{
    (void)err;
    (void)errlen;
    pthread_mutex_lock(&m->lock);
    ts_config *superseded = m->pending;
    m->pending = ts_config_ref(fresh);
    pthread_mutex_unlock(&m->lock);
    if (superseded != NULL)
        ts_config_free(superseded);
    return 0;
}

const ts_driver_ops ts_jetstream_driver = {
    .name = "jetstream",
    .input_types = types,
    .output_types = types,
    .settings = &ts_nats_setting_section,
    .open = js_open,
    .start = js_start,
    .describe = js_describe,
    .finish = js_finish,
    .close = js_close,
    .stats = js_stats,
    .render_metrics = ts_js_render_metrics,
    .adopt_config = js_adopt_config,
};
