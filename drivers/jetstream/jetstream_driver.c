#include "drivers/jetstream/jetstream_driver.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "drivers/jetstream/js_population.h"
#include "drivers/jetstream/js_state.h"
#include "engine/log.h"

/* The loop hands the JetStream thread's observations on and reads its
 * health this often. */
#define TICK_MS 50
/* Observations queued for the loop at most (the feed's bytes included). */
#define RELAY_MAX_BYTES ((size_t)8 << 20)
/* How long the thread waits for an acknowledgement when nothing moved. */
#define IDLE_WAIT_MS 2
/* How often standby copies that stopped are started again. */
#define STANDBY_CHECK_MS 5000
/* How long an unsubscribed subscription waits for its destroy
 * (sub_graveyard.h): far beyond the reader thread's few instructions. */
#define GRAVE_AGE_MS 2000
/* A starting instance waits this long for a forming cluster's JetStream
 * to accept the streams. */
#define SETUP_PATIENCE_MS 60000

static const char *const types[] = { "jetstream", NULL };

/* ------------------------------------------------- the JetStream thread */

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


/* Finishes what is in flight (a ttl at most: the deadline stops it
 * anyway), hands every partition back, then lets the lease thread send
 * the releases and stop. */
static void hand_back(ts_jetstream *m)
{
    m->leaving = 1;
    ts_js_drain(m, m->nats->lease_ttl_ms / 2);
    ts_js_restore_close(m);
    for (uint32_t i = 0; i < m->n_partitions; i++)
        ts_js_lose_partition(m, &m->parts[i], "shutdown", 1);
    for (uint32_t i = 0; i < m->n_partitions; i++)
        ts_js_standby_stop(&m->parts[i]);
    m->lease_stop = 1;
    pthread_join(m->lease_thread, NULL);
    m->lease_thread_started = 0;
}

static void *jetstream_thread(void *arg)
{
    ts_jetstream *m = arg;
    int64_t next_expiry_ms = 0;
    int64_t next_standby_ms = ts_js_mono_ms() + STANDBY_CHECK_MS;
    pthread_mutex_lock(&m->lease_lock);
    m->last_lease_ok_ms = ts_js_mono_ms();
    pthread_mutex_unlock(&m->lease_lock);
    if (m->nats->standby)
        for (uint32_t i = 0; i < m->n_partitions; i++)
            ts_js_standby_start(m, &m->parts[i]);
    if (pthread_create(&m->lease_thread, NULL, ts_js_lease_thread_main, m) !=
        0) {
        ts_log(TS_LOG_ERROR, "cannot start the lease thread");
        ts_js_set_health(m, "lease thread not running");
        return NULL;
    }
    m->lease_thread_started = 1;
    while (!m->stop) {
        pthread_mutex_lock(&m->flight_lock);
        uint64_t seen = m->wakeups;
        pthread_mutex_unlock(&m->flight_lock);
        ts_js_apply_pending_reload(m);
        /* Between two groups: a reload's profiles get the cluster's
         * version before they release, and an adopted version goes in. */
        ts_js_population_follow_config(m->population,
                                       m->adopted != NULL ? m->adopted
                                                          : m->env.config);
        ts_js_population_install(m->population);
        int64_t now = ts_js_mono_ms();
        if (now >= next_expiry_ms) {
            ts_js_expire_users(m);
            ts_sub_graveyard_sweep(&m->graveyard, GRAVE_AGE_MS);
            next_expiry_ms = now + (m->settings->expire_interval_ms > 0
                                        ? m->settings->expire_interval_ms
                                        : 1000);
        }
        int busy = 0;
        for (uint32_t i = 0; i < m->n_partitions && !m->stop; i++) {
            partition *p = &m->parts[i];
            ts_js_take_over(m, p);
            if (p->state == PART_ACTIVE && ts_js_connected(m))
                busy |= ts_js_serve(m, p);
            ts_js_count_pipeline(m, p);
        }
        note_health(m);
        if (ts_js_connected(m))
            ts_js_refresh_lag(m);
        if (ts_js_mono_ms() >= next_standby_ms) {
            ts_js_standby_keep(m);
            next_standby_ms = ts_js_mono_ms() + STANDBY_CHECK_MS;
        }
        if (!busy)
            ts_js_wait_news(m, seen, IDLE_WAIT_MS);
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
    ts_js_population_close(m->population);
    ts_js_restore_close(m);
    if (m->parts != NULL) {
        for (uint32_t i = 0; i < m->n_partitions; i++) {
            partition *p = &m->parts[i];
            ts_js_standby_stop(p);
            ts_js_drop_state(m, p);
            ts_changelog_replica_free(&p->replica);
            for (size_t k = 0; k < MAX_FLIGHTS; k++) {
                js_flight *f = &p->flights[k];
                ts_changelog_builder_free(&f->builder);
                ts_buf_free(&f->undo);
                ts_buf_free(&f->records);
                ts_buf_free(&f->seqs);
                free(f->inputs);
                free(f->outcome_keys);
                free(f->outcome_acked);
            }
            pthread_mutex_destroy(&p->standby_lock);
        }
    }
    if (m->lease_kv != NULL)
        kvStore_Destroy(m->lease_kv);
    if (m->lease_js != NULL)
        jsCtx_Destroy(m->lease_js);
    ts_js_commit_close(m);
    ts_js_close(&m->commit_conn);
    ts_js_close(&m->lease_conn);
    ts_js_close(&m->conn);
    /* The reader threads are joined: nothing can route to them now. */
    ts_sub_graveyard_free(&m->graveyard);
    if (m->tick_event != NULL)
        event_free(m->tick_event);
    ts_observer_relay_free(m->relay);
    free(m->parts);
    free(m->stats);
    free(m->latencies);
    free(m->renewals);
    free(m->encode_buf);
    if (m->pending != NULL)
        ts_config_free(m->pending);
    if (m->adopted != NULL)
        ts_config_free(m->adopted);
    ts_group_free(&m->group);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->flight_lock);
    pthread_cond_destroy(&m->flight_cond);
    pthread_mutex_destroy(&m->restore_lock);
    pthread_cond_destroy(&m->restore_cond);
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
        pthread_mutex_init(&m->parts[i].standby_lock, NULL);
        if (ts_changelog_replica_init(&m->parts[i].replica) != 0)
            return -1;
    }
    return 0;
}

/* Connects, makes the streams (a cluster still electing its JetStream
 * leader refuses API calls for a few seconds), opens the lease bucket and
 * the commit path's contexts, and starts the restore workers. 0, or -1
 * with err. */
static int connect_cluster(ts_jetstream *m, char *err, size_t errlen)
{
    char name[TS_LEASE_OWNER_MAX + 16];
    if (ts_js_connect(&m->conn, m->nats, m->self, NULL, NULL, err,
                      errlen) != 0)
        return -1;
    snprintf(name, sizeof name, "%s-commit", m->self);
    if (ts_js_connect(&m->commit_conn, m->nats, name, NULL, NULL, err,
                      errlen) != 0)
        return -1;
    snprintf(name, sizeof name, "%s-lease", m->self);
    if (ts_js_connect(&m->lease_conn, m->nats, name, NULL, NULL, err,
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
    if (ts_js_lease_open(m, err, errlen) != 0 ||
        ts_js_commit_open(m, err, errlen) != 0 ||
        ts_js_restore_open(m, err, errlen) != 0)
        return -1;
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
    pthread_mutex_init(&m->flight_lock, NULL);
    pthread_cond_init(&m->flight_cond, NULL);
    pthread_mutex_init(&m->restore_lock, NULL);
    pthread_cond_init(&m->restore_cond, NULL);
    pthread_mutex_init(&m->lease_lock, NULL);
    ts_sub_graveyard_init(&m->graveyard);
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
    } else if (connect_cluster(m, err, errlen) == 0 &&
               ts_js_population_open(&m->population, m, env->config, err,
                                     errlen) == 0) {
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
    if (ts_js_population_start(m->population, err, errlen) != 0)
        return -1;
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
    ts_js_population_stop(m->population);
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

static int js_render_metrics(ts_driver *m, ts_buf *out)
{
    if (ts_js_render_metrics(m, out) != 0)
        return -1;
    return ts_js_population_render_metrics(m->population, out);
}

static char *js_density_geojson(ts_driver *m, const char *profile,
                                int *status, size_t *len)
{
    return ts_js_population_geojson(m->population, profile, status, len);
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
    .render_metrics = js_render_metrics,
    .adopt_config = js_adopt_config,
    .density_geojson = js_density_geojson,
};
