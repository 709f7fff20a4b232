#include "drivers/jetstream/js_population.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drivers/jetstream/js_pop_entry.h"
#include "drivers/jetstream/js_pop_holder.h"
#include "drivers/jetstream/js_state.h"
#include "engine/log.h"

/* How often every instance reads the bucket for a new version. */
#define POLL_MS 100
/* The module thread's pause when no profile had anything to do. */
#define IDLE_US 10000

struct ts_js_population {
    ts_js_pop_ctx ctx;
    ts_config *config;           /* a reference: whose mechanisms */
    ts_js_pop_entry *entries;    /* under ctx.lock for the loop's reads */
    size_t n;
    pthread_t thread;
    int thread_started;
    volatile int stop;
};

/* ------------------------------------------------------------ adopting */

/* The bucket's newest record: shown, and its channel built and offered
 * to the JetStream thread when it is a newer version of this grid. */
static void follow(ts_js_pop_entry *e)
{
    ts_population_record r;
    uint64_t revision = 0;
    if (ts_js_pop_read(e, e->ctx->kv, &r, &revision) != 1)
        return;
    if (revision != e->seen_rev) {
        e->seen_rev = revision;
        ts_js_pop_show(e, &r);
        if (e->ops->adaptive && ts_js_pop_same_grid(e, &r) &&
            r.version > ts_js_pop_newest(e)) {
            char err[256];
            const void *channel = ts_js_pop_channel(e, r.version, r.theta,
                                                    err, sizeof err);
            if (channel != NULL)
                ts_js_pop_offer(e, channel, r.version);
            else
                ts_log(TS_LOG_WARN, "profile %s: cannot build channel "
                       "version %u: %s", e->name, r.version, err);
        }
        ts_js_pop_holder_moved(e, revision);
    }
    ts_population_record_free(&r);
}

static void *population_thread(void *arg)
{
    ts_js_population *pop = arg;
    int64_t next_poll = 0;
    while (!pop->stop) {
        int64_t now = ts_js_mono_ms();
        if (now >= next_poll) {
            next_poll = now + POLL_MS;
            for (size_t i = 0; i < pop->n && !pop->stop; i++)
                follow(&pop->entries[i]);
        }
        int holding = 0;
        for (size_t i = 0; i < pop->n && !pop->stop; i++) {
            ts_js_pop_entry *e = &pop->entries[i];
            ts_js_pop_holder_step(e, ts_js_mono_ms());
            ts_js_pop_collect(e);
            holding |= e->holder.ready && e->holder.sub != NULL;
        }
        /* A holder waited for reports while reading. */
        if (!holding)
            usleep(IDLE_US);
    }
    return NULL;
}

/* ------------------------------------------------------------- binding */

/* privic always; geoind only with density = true (cells() is 0 without
 * a grid). */
static int keeps_density(const ts_profile *profile)
{
    const ts_population_ops *pop = profile->ops->population;
    return pop != NULL && pop->cells(profile->mech) > 0;
}

/* Installs `record`'s version on the entry's profile when it is newer
 * (the caller's thread releases nothing meanwhile). */
static void adopt_now(ts_js_pop_entry *e, const ts_population_record *r,
                      uint64_t revision)
{
    e->seen_rev = revision;
    ts_js_pop_show(e, r);
    if (!e->ops->adaptive || !ts_js_pop_same_grid(e, r) ||
        r->version <= e->installed_version)
        return;
    char err[256];
    const void *channel = ts_js_pop_channel(e, r->version, r->theta, err,
                                            sizeof err);
    if (channel == NULL) {
        ts_log(TS_LOG_ERROR, "profile %s: cannot build channel version %u: "
               "%s", e->name, r->version, err);
        return;
    }
    ts_js_pop_offer(e, channel, r->version);
    ts_js_pop_install_pending(e);
}

/* The entries for `config`'s profiles, each adopting its record: read
 * from the bucket (`previous` NULL: at start), or the one the entry of
 * the same name in `previous` showed (a reload: no I/O, and never an
 * older version than the one released so far). */
static int bind(ts_js_population *pop, const ts_config *config,
                const ts_js_pop_entry *previous, size_t n_previous,
                char *err, size_t errlen)
{
    ts_profile *profiles = NULL;
    size_t n_profiles = 0, default_index = 0, n = 0;
    if (ts_config_share_profiles(config, &profiles, &n_profiles,
                                 &default_index, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < n_profiles; i++)
        n += keeps_density(&profiles[i]);
    ts_js_pop_entry *entries = n > 0 ? calloc(n, sizeof *entries) : NULL;
    if (n > 0 && entries == NULL) {
        ts_profiles_free(profiles, n_profiles);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t made = 0;
    int failed = 0;
    for (size_t i = 0; i < n_profiles && !failed; i++) {
        const ts_profile *p = &profiles[i];
        if (!keeps_density(p))
            continue;
        ts_js_pop_entry *e = &entries[made++];
        ts_js_pop_entry_init(e, &pop->ctx, p->name, p->ops->name,
                             p->ops->population, p->mech);
        ts_population_record r;
        uint64_t revision = 0;
        int found = 0;
        for (size_t j = 0; j < n_previous; j++)
            if (strcmp(previous[j].name, e->name) == 0 &&
                previous[j].has_shown) {
                r = previous[j].shown;
                revision = previous[j].seen_rev;
                found = 2;  /* borrowed */
            }
        if (previous == NULL &&
            (found = ts_js_pop_read_latest(e, pop->ctx.m->conn.js, &r,
                                           &revision)) < 0) {
            snprintf(err, errlen, "profile %s: cannot read the population "
                     "bucket " TS_JS_POPULATION_BUCKET, e->name);
            failed = 1;
            break;
        }
        if (found > 0)
            adopt_now(e, &r, revision);
        if (found == 1)
            ts_population_record_free(&r);
        ts_log(TS_LOG_INFO, "profile %s: PRIVIC loop and density estimate "
               "cluster-wide (lease pop.%s, bucket " TS_JS_POPULATION_BUCKET
               "): channel version %u", e->name, e->name,
               e->installed_version);
    }
    ts_profiles_free(profiles, n_profiles);
    if (failed) {
        for (size_t i = 0; i < made; i++)
            ts_js_pop_entry_free(&entries[i]);
        free(entries);
        return -1;
    }
    pthread_mutex_lock(&pop->ctx.lock);
    pop->entries = entries;
    pop->n = made;
    pthread_mutex_unlock(&pop->ctx.lock);
    return 0;
}

static void unbind(ts_js_population *pop, ts_js_pop_entry **entries,
                   size_t *n)
{
    pthread_mutex_lock(&pop->ctx.lock);
    *entries = pop->entries;
    *n = pop->n;
    pop->entries = NULL;
    pop->n = 0;
    pthread_mutex_unlock(&pop->ctx.lock);
}

static void free_entries(ts_js_pop_entry *entries, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ts_js_pop_entry_free(&entries[i]);
    free(entries);
}

/* ------------------------------------------------------------ lifecycle */

int ts_js_population_open(ts_js_population **out, struct ts_driver *m,
                          const ts_config *config, char *err, size_t errlen)
{
    *out = NULL;
    ts_js_population *pop = calloc(1, sizeof *pop);
    if (pop == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&pop->ctx.lock, NULL);
    const ts_format_settings *format =
        ts_config_section(config, &ts_format_setting_section);
    pop->ctx.m = m;
    pop->ctx.graveyard = &m->graveyard;
    pop->ctx.format = ts_format_of(format);
    pop->ctx.batch = format->batch;
    pop->ctx.ttl_ms = m->nats->lease_ttl_ms;
    pop->ctx.publish_ms = m->settings->density_publish_ms;
    /* Answers awaited ttl/8 at most, as the partition leases' renewals:
     * a renewal must never wait past its deadline. */
    jsOptions opts;
    jsOptions_Init(&opts);
    opts.Wait = pop->ctx.ttl_ms / 8 > 250 ? pop->ctx.ttl_ms / 8 : 250;
    if (natsConnection_JetStream(&pop->ctx.js, m->conn.nc, &opts) !=
            NATS_OK ||
        js_KeyValue(&pop->ctx.kv, pop->ctx.js, TS_JS_POPULATION_BUCKET) !=
            NATS_OK ||
        js_KeyValue(&pop->ctx.lease_kv, pop->ctx.js, TS_JS_LEASE_BUCKET) !=
            NATS_OK) {
        snprintf(err, errlen, "cannot open the population bucket "
                 TS_JS_POPULATION_BUCKET);
        ts_js_population_close(pop);
        return -1;
    }
    if (bind(pop, config, NULL, 0, err, errlen) != 0) {
        ts_js_population_close(pop);
        return -1;
    }
    if (pop->n == 0) {
        ts_js_population_close(pop);
        return 0;
    }
    pop->config = ts_config_ref(config);
    *out = pop;
    return 0;
}

int ts_js_population_start(ts_js_population *pop, char *err, size_t errlen)
{
    if (pop == NULL || pop->thread_started)
        return 0;
    pop->stop = 0;
    if (pthread_create(&pop->thread, NULL, population_thread, pop) != 0) {
        snprintf(err, errlen, "cannot start the population thread");
        return -1;
    }
    pop->thread_started = 1;
    return 0;
}

/* Stops the thread; the holders hand their leases back. */
static void halt(ts_js_population *pop, const char *why)
{
    if (!pop->thread_started)
        return;
    pop->stop = 1;
    pthread_join(pop->thread, NULL);
    pop->thread_started = 0;
    for (size_t i = 0; i < pop->n; i++)
        ts_js_pop_holder_stop(&pop->entries[i], 1, why);
}

void ts_js_population_stop(ts_js_population *pop)
{
    if (pop != NULL)
        halt(pop, "shutdown");
}

void ts_js_population_close(ts_js_population *pop)
{
    if (pop == NULL)
        return;
    ts_js_population_stop(pop);
    ts_js_pop_entry *entries;
    size_t n;
    unbind(pop, &entries, &n);
    free_entries(entries, n);
    if (pop->ctx.kv != NULL)
        kvStore_Destroy(pop->ctx.kv);
    if (pop->ctx.lease_kv != NULL)
        kvStore_Destroy(pop->ctx.lease_kv);
    if (pop->ctx.js != NULL)
        jsCtx_Destroy(pop->ctx.js);
    if (pop->config != NULL)
        ts_config_free(pop->config);
    pthread_mutex_destroy(&pop->ctx.lock);
    free(pop);
}

/* --------------------------------------------- the JetStream thread's */

void ts_js_population_install(ts_js_population *pop)
{
    for (size_t i = 0; pop != NULL && i < pop->n; i++)
        ts_js_pop_install_pending(&pop->entries[i]);
}

int ts_js_population_catch_up(ts_js_population *pop)
{
    for (size_t i = 0; pop != NULL && i < pop->n; i++)
        if (pop->entries[i].ops->adaptive &&
            ts_js_pop_catch_up(&pop->entries[i], pop->ctx.m->conn.js) != 0)
            return -1;
    return 0;
}

void ts_js_population_follow_config(ts_js_population *pop,
                                    const ts_config *config)
{
    if (pop == NULL || config == pop->config)
        return;
    /* The holders hand their leases back: this instance, rebound, is as
     * likely as any to take them again, and resumes from the bucket. */
    halt(pop, "reload");
    ts_js_pop_entry *old;
    size_t n_old;
    unbind(pop, &old, &n_old);
    char err[256];
    if (bind(pop, config, old, n_old, err, sizeof err) != 0)
        ts_log(TS_LOG_ERROR, "reload: the population loops stop: %s", err);
    free_entries(old, n_old);
    ts_config_free(pop->config);
    pop->config = ts_config_ref(config);
    ts_log(TS_LOG_INFO, "reload: population loops rebound to the new "
           "profiles");
    if (ts_js_population_start(pop, err, sizeof err) != 0)
        ts_log(TS_LOG_ERROR, "reload: %s", err);
}

/* ---------------------------------------------------------- the loop's */

char *ts_js_population_geojson(ts_js_population *pop, const char *profile,
                               int *status, size_t *len)
{
    if (pop == NULL)
        return ts_density_geojson(NULL, status, len);
    pthread_mutex_lock(&pop->ctx.lock);
    const ts_js_pop_entry *e = NULL;
    for (size_t i = 0; i < pop->n && e == NULL; i++)
        if (strcmp(pop->entries[i].name, profile) == 0)
            e = &pop->entries[i];
    ts_density_view view;
    if (e != NULL)
        view = ts_js_pop_view(e);
    char *body = ts_density_geojson(e != NULL ? &view : NULL, status, len);
    pthread_mutex_unlock(&pop->ctx.lock);
    return body;
}

int ts_js_population_render_metrics(ts_js_population *pop, ts_buf *out)
{
    if (pop == NULL)
        return 0;
    pthread_mutex_lock(&pop->ctx.lock);
    ts_density_stats *rows = calloc(pop->n > 0 ? pop->n : 1, sizeof *rows);
    int rc = rows == NULL ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < pop->n; i++) {
        const ts_js_pop_entry *e = &pop->entries[i];
        rows[i] = (ts_density_stats){
            .profile = e->name,
            .channel_version = e->installed_version,
            .cycles = e->has_shown ? e->shown.cycles : 0,
            .reports_total = e->has_shown ? e->shown.reports_total : 0,
            .failures = e->failures,
            .stale = e->has_shown ? e->shown.stale : 0,
            .last_ibu_ms = e->last_ibu_ms,
            .last_build_ms = e->last_build_ms,
            .densities_published = e->densities_published,
            .densities_dropped = e->densities_dropped,
        };
    }
    if (rc == 0)
        rc = ts_density_render_metrics(rows, pop->n, out);
    static const char head[] =
        "# HELP tracesand_privic_lease_held Whether this instance holds the "
        "profile's population lease (runs its loop for the cluster)\n"
        "# TYPE tracesand_privic_lease_held gauge\n";
    if (rc == 0 && pop->n > 0)
        rc = ts_buf_append(out, head, sizeof head - 1);
    for (size_t i = 0; rc == 0 && i < pop->n; i++) {
        char line[TS_JS_POP_NAME_MAX + 64];
        int len = snprintf(line, sizeof line,
                           "tracesand_privic_lease_held{profile=\"%s\"} %d\n",
                           pop->entries[i].name, pop->entries[i].lease_held);
        rc = ts_buf_append(out, line, (size_t)len);
    }
    pthread_mutex_unlock(&pop->ctx.lock);
    free(rows);
    return rc;
}
