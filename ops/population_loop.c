#include "ops/population_loop.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/log.h"
#include "mechanisms/population.h"
#include "wire/codec.h"
#include "wire/density.h"

#define ERR_MAX 256
/* The store key of a profile's record (format 1 of
 * mechanisms/population.h). */
#define STORE_KEY_PREFIX "population/"

typedef struct population_entry {
    ts_population_set *set;
    size_t profile_index;
    char *name;
    ts_profile *profile;             /* NULL while detached */
    ts_profile *detached_from;
    ts_population_loop loop;
    ts_population_job job;           /* while loop.job_running */
    /* Filled by the worker for the job in flight. */
    uint32_t job_version;            /* the version its channel becomes */
    uint32_t job_cycles;
    uint64_t job_reports_total;
    int job_persisted;
    char job_err[ERR_MAX];
    /* The last completed cycle, for the density feed. */
    uint64_t last_reports;
    int64_t estimated_at_ms;
    double last_ibu_ms, last_build_ms;
    unsigned last_ibu_iterations, last_build_iterations;
    uint64_t failures;
    uint64_t densities_published;
    uint64_t densities_dropped;
} population_entry;

struct ts_population_set {
    ts_pipeline *pipeline;
    ts_store *store;
    struct event_base *base;
    const ts_format *format;
    ts_publisher publisher;
    population_entry *entries;
    size_t n;
    struct event *publish_timer;
    /* the worker */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t finished;
    population_entry *queued;        /* at most one job at a time */
    population_entry *done;
    int busy;
    int stop;
    int notify[2];
    struct event *notified;
};

static int64_t wall_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ records */

static void store_key(const population_entry *e, char *key, size_t len)
{
    snprintf(key, len, STORE_KEY_PREFIX "%s", e->name);
}

static int persist(population_entry *e, uint32_t version, uint32_t cycles,
                   uint64_t reports, const double *theta, size_t n,
                   char *err, size_t errlen)
{
    ts_population_record record = {
        .format = 1, .version = version, .cycles = cycles,
        .reports_total = reports, .n = n, .theta = (double *)theta,
    };
    size_t len = ts_population_record_size(&record);
    unsigned char *buf = malloc(len);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ts_population_record_encode(&record, buf);
    char key[300];
    store_key(e, key, sizeof key);
    int rc = ts_store_put_meta(e->set->store, key, buf, len, err, errlen);
    free(buf);
    return rc;
}

/* Resumes the entry's loop from its record, if there is one. */
static int restore(population_entry *e, char *err, size_t errlen)
{
    if (e->set->store == NULL)
        return 0;
    char key[300];
    store_key(e, key, sizeof key);
    void *bytes = NULL;
    size_t len = 0;
    int found = ts_store_get_meta(e->set->store, key, &bytes, &len);
    if (found < 0) {
        snprintf(err, errlen, "profile %s: cannot read its PRIVIC state",
                 e->name);
        return -1;
    }
    if (found == 0)
        return 0;
    ts_population_record record;
    int oom;
    int decoded = ts_population_record_decode(bytes, len, &record, &oom);
    free(bytes);
    if (decoded != 0 || record.format != 1) {
        if (decoded == 0)
            ts_population_record_free(&record);
        if (oom)
            snprintf(err, errlen, "out of memory");
        else
            snprintf(err, errlen, "profile %s: its PRIVIC state in the "
                     "store is corrupt", e->name);
        return -1;
    }
    /* A grid of another size starts afresh, one version on: versions
     * never go back. */
    int same_grid = record.n == e->loop.n;
    int rc = ts_population_restore(&e->loop, same_grid ? record.version
                                                       : record.version + 1,
                                   same_grid ? record.cycles : 0,
                                   same_grid ? record.reports_total : 0,
                                   same_grid ? record.theta : NULL,
                                   record.n, err, errlen);
    ts_population_record_free(&record);
    if (rc == 0)
        ts_log(TS_LOG_INFO, "profile %s: PRIVIC resumed at channel version "
               "%u after %u cycles%s", e->name, e->loop.source[1].version,
               e->loop.cycles, same_grid ? "" : " (new grid: estimate reset)");
    return rc;
}

/* ------------------------------------------------------------ worker */

static void *worker_main(void *arg)
{
    ts_population_set *set = arg;
    pthread_mutex_lock(&set->lock);
    for (;;) {
        while (set->queued == NULL && !set->stop)
            pthread_cond_wait(&set->wake, &set->lock);
        if (set->queued == NULL)
            break;
        population_entry *e = set->queued;
        set->queued = NULL;
        pthread_mutex_unlock(&set->lock);

        ts_population_run(&e->job);
        e->job_persisted = 1;
        e->job_err[0] = '\0';
        /* Durable before it is installed: a version once published is
         * never handed out again after a restart. */
        if (e->job.ok && set->store != NULL)
            e->job_persisted =
                persist(e, e->job_version, e->job_cycles,
                        e->job_reports_total, e->job.theta, e->job.n,
                        e->job_err, sizeof e->job_err) == 0;

        pthread_mutex_lock(&set->lock);
        set->done = e;
        pthread_cond_broadcast(&set->finished);
        pthread_mutex_unlock(&set->lock);
        unsigned char byte = 1;
        while (write(set->notify[1], &byte, 1) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&set->lock);
    }
    pthread_mutex_unlock(&set->lock);
    return NULL;
}

static void apply_done(ts_population_set *set, population_entry *e)
{
    set->busy = 0;
    int failed = !e->job.ok || !e->job_persisted;
    if (failed) {
        const char *why = !e->job.ok ? e->job.err : e->job_err;
        ts_log(TS_LOG_ERROR, "profile %s: PRIVIC cycle %u failed, the channel "
               "stays at version %u: %s", e->name, e->job_cycles,
               e->loop.source[1].version, why);
        e->failures++;
        e->job.ok = 0;
    }
    uint64_t reports = e->job.reports;
    double ibu_ms = e->job.ibu_ms, build_ms = e->job.build_ms;
    unsigned ibu_it = e->job.ibu.iterations;
    unsigned build_it = e->job.build.iterations;
    int rc = ts_population_finish(&e->loop, &e->job);
    if (rc < 0)
        return;
    e->last_reports = reports;
    e->estimated_at_ms = wall_ms();
    e->last_ibu_ms = ibu_ms;
    e->last_build_ms = build_ms;
    e->last_ibu_iterations = ibu_it;
    e->last_build_iterations = build_it;
    ts_log(TS_LOG_INFO, "profile %s: PRIVIC cycle %u on %" PRIu64 " reports: "
           "IBU %u iterations %.0f ms, BA %u iterations %.0f ms, channel "
           "version %u", e->name, e->loop.cycles, reports, ibu_it, ibu_ms,
           build_it, build_ms, e->loop.source[1].version);
}

static void start_job(ts_population_set *set, population_entry *e);

/* start_next 0: the caller is about to detach the profiles (a reload),
 * so no new job may start on them. */
static void take_done(ts_population_set *set, int start_next)
{
    pthread_mutex_lock(&set->lock);
    population_entry *e = set->done;
    set->done = NULL;
    pthread_mutex_unlock(&set->lock);
    if (e == NULL)
        return;
    apply_done(set, e);
    if (!start_next)
        return;
    /* Reports that arrived while the worker was busy may already fill a
     * cycle (of this profile or another one); start it now rather than
     * on the next report, which may not come for a long time. */
    for (size_t i = 0; i < set->n && !set->busy; i++)
        if (set->entries[i].profile != NULL &&
            ts_population_due(&set->entries[i].loop))
            start_job(set, &set->entries[i]);
}

static void on_notified(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    unsigned char bytes[16];
    while (read(fd, bytes, sizeof bytes) > 0)
        ;
    take_done(arg, 1);
}

/* Blocks until the job in flight is done, and applies it. */
static void wait_job(ts_population_set *set)
{
    if (!set->busy)
        return;
    pthread_mutex_lock(&set->lock);
    while (set->done == NULL)
        pthread_cond_wait(&set->finished, &set->lock);
    pthread_mutex_unlock(&set->lock);
    take_done(set, 0);
}

static void start_job(ts_population_set *set, population_entry *e)
{
    if (set->busy || e->profile == NULL)
        return;
    if (ts_population_close(&e->loop, &e->job) != 0)
        return;
    e->job_version = e->loop.source[1].version + (e->loop.ops->adaptive ? 1
                                                                         : 0);
    e->job_cycles = e->loop.cycles + 1;
    e->job_reports_total = e->loop.reports_total;
    set->busy = 1;
    pthread_mutex_lock(&set->lock);
    set->queued = e;
    pthread_cond_signal(&set->wake);
    pthread_mutex_unlock(&set->lock);
}

/* ------------------------------------------------------ observations */

int ts_population_profile_has_loop(const ts_population_set *set,
                                   size_t profile_index)
{
    if (set == NULL)
        return -1;
    for (size_t i = 0; i < set->n; i++)
        if (set->entries[i].profile_index == profile_index)
            return (int)i;
    return -1;
}

void ts_population_on_sent(ts_population_set *set,
                           const ts_observation *observations, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const ts_observation *o = &observations[i];
        int k = ts_population_profile_has_loop(set, o->profile_index);
        if (k < 0)
            continue;
        population_entry *e = &set->entries[k];
        if (e->profile == NULL)
            continue;
        if (ts_population_observe(&e->loop, o->lat, o->lon,
                                  o->channel_version, o->ts_ms))
            start_job(set, e);
    }
}

/* ------------------------------------------------------ density feed */

static ts_density_view view_of(const population_entry *e)
{
    return (ts_density_view){
        .profile = e->name,
        .mechanism = e->profile->ops->name,
        .ops = e->loop.ops,
        .mech = e->profile->mech,
        .n = e->loop.n,
        .theta = e->loop.theta,
        .channel_version = e->loop.source[1].version,
        .cycle = e->loop.cycles,
        .reports = e->last_reports,
        .reports_total = e->loop.reports_total,
        .estimated_at_ms = e->estimated_at_ms,
        .waiting_reports = e->loop.cycle_reports,
    };
}

static void on_publish_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_population_set *set = arg;
    ts_buf topic = { 0 }, payload = { 0 };
    for (size_t i = 0; i < set->n; i++) {
        population_entry *e = &set->entries[i];
        if (e->profile == NULL || e->loop.theta == NULL)
            continue;
        Tracesan__V1__DensityEstimate m;
        double bounds[4];
        ts_density_view view = view_of(e);
        ts_density_fill(&view, &m, bounds);
        ts_buf_reset(&topic);
        ts_buf_reset(&payload);
        if (ts_format_density(set->format, &m, &topic, &payload) != 0) {
            e->densities_dropped++;
            continue;
        }
        /* A full output drops the estimate rather than holding it: the
         * next tick brings a fresher one. */
        if (set->publisher.publish(set->publisher.arg, topic.data, topic.len,
                                   payload.data, payload.len) ==
            TS_PUBLISH_SENT)
            e->densities_published++;
        else
            e->densities_dropped++;
    }
    ts_buf_free(&topic);
    ts_buf_free(&payload);
}

char *ts_population_geojson(ts_population_set *set, const char *profile,
                            int *status, size_t *len)
{
    population_entry *e = NULL;
    for (size_t i = 0; set != NULL && i < set->n; i++)
        if (strcmp(set->entries[i].name, profile) == 0)
            e = &set->entries[i];
    if (e == NULL || e->profile == NULL)
        return ts_density_geojson(NULL, status, len);
    ts_density_view view = view_of(e);
    return ts_density_geojson(&view, status, len);
}

int ts_population_render_metrics(const ts_population_set *set, ts_buf *buf)
{
    if (set == NULL || set->n == 0)
        return 0;
    ts_density_stats *rows = calloc(set->n, sizeof *rows);
    if (rows == NULL)
        return -1;
    for (size_t i = 0; i < set->n; i++) {
        const population_entry *e = &set->entries[i];
        rows[i] = (ts_density_stats){
            .profile = e->name,
            .channel_version = e->loop.source[1].version,
            .cycles = e->loop.cycles,
            .reports_total = e->loop.reports_total,
            .failures = e->failures,
            .stale = e->loop.stale,
            .last_ibu_ms = e->last_ibu_ms,
            .last_build_ms = e->last_build_ms,
            .densities_published = e->densities_published,
            .densities_dropped = e->densities_dropped,
        };
    }
    int rc = ts_density_render_metrics(rows, set->n, buf);
    free(rows);
    return rc;
}

/* ------------------------------------------------------- lifecycle */

/* privic always; geoind only with density = true (cells() is 0 without
 * a grid). */
static int keeps_density(const ts_profile *profile)
{
    const ts_population_ops *pop = profile->ops->population;
    return pop != NULL && pop->cells(profile->mech) > 0;
}

static int bind_entry(population_entry *e, ts_profile *profile, char *err,
                      size_t errlen)
{
    e->profile = profile;
    if (ts_population_loop_init(&e->loop, profile->ops->population,
                                profile->mech) != 0) {
        snprintf(err, errlen, "profile %s: out of memory", e->name);
        return -1;
    }
    return 0;
}

int ts_population_set_new(ts_population_set **out, ts_pipeline *pipeline,
                          ts_store *store, struct event_base *base,
                          int64_t publish_ms, const ts_format *format,
                          const ts_publisher *publisher, char *err,
                          size_t errlen)
{
    *out = NULL;
    size_t count = ts_pipeline_profile_count(pipeline), n = 0;
    for (size_t i = 0; i < count; i++)
        if (keeps_density(ts_pipeline_profile_at(pipeline, i)))
            n++;
    if (n == 0)
        return 0;
    ts_population_set *set = calloc(1, sizeof *set);
    if (set == NULL)
        goto oom;
    set->pipeline = pipeline;
    set->store = store;
    set->base = base;
    set->format = format;
    set->publisher = *publisher;
    set->notify[0] = set->notify[1] = -1;
    set->entries = calloc(n, sizeof *set->entries);
    if (set->entries == NULL)
        goto oom;
    for (size_t i = 0; i < count; i++) {
        ts_profile *profile = (ts_profile *)ts_pipeline_profile_at(pipeline, i);
        if (!keeps_density(profile))
            continue;
        population_entry *e = &set->entries[set->n++];
        e->set = set;
        e->profile_index = i;
        e->name = strdup(profile->name);
        if (e->name == NULL)
            goto oom;
        if (bind_entry(e, profile, err, errlen) != 0 ||
            restore(e, err, errlen) != 0)
            goto fail;
    }
    pthread_mutex_init(&set->lock, NULL);
    pthread_cond_init(&set->wake, NULL);
    pthread_cond_init(&set->finished, NULL);
    if (pipe(set->notify) != 0 ||
        fcntl(set->notify[0], F_SETFL, O_NONBLOCK) != 0 ||
        fcntl(set->notify[0], F_SETFD, FD_CLOEXEC) != 0 ||
        fcntl(set->notify[1], F_SETFD, FD_CLOEXEC) != 0) {
        snprintf(err, errlen, "population loop: pipe: %s", strerror(errno));
        goto fail;
    }
    set->notified = event_new(base, set->notify[0], EV_READ | EV_PERSIST,
                              on_notified, set);
    if (set->notified == NULL || event_add(set->notified, NULL) != 0)
        goto oom;
    if (publish_ms > 0) {
        set->publish_timer = event_new(base, -1, EV_PERSIST, on_publish_tick,
                                       set);
        struct timeval period = { (time_t)(publish_ms / 1000),
                                  (suseconds_t)(publish_ms % 1000) * 1000 };
        if (set->publish_timer == NULL ||
            event_add(set->publish_timer, &period) != 0)
            goto oom;
    }
    if (pthread_create(&set->thread, NULL, worker_main, set) != 0) {
        snprintf(err, errlen, "population loop: cannot start its thread");
        goto fail;
    }
    set->thread_started = 1;
    *out = set;
    return 0;
oom:
    snprintf(err, errlen, "population loop: out of memory");
fail:
    ts_population_set_free(set);
    return -1;
}

void ts_population_set_free(ts_population_set *set)
{
    if (set == NULL)
        return;
    if (set->thread_started) {
        pthread_mutex_lock(&set->lock);
        while (set->queued != NULL ||
               (set->busy && set->done == NULL))
            pthread_cond_wait(&set->finished, &set->lock);
        set->stop = 1;
        pthread_cond_signal(&set->wake);
        pthread_mutex_unlock(&set->lock);
        pthread_join(set->thread, NULL);
        if (set->done != NULL)
            ts_population_job_free(&set->done->job);
        pthread_mutex_destroy(&set->lock);
        pthread_cond_destroy(&set->wake);
        pthread_cond_destroy(&set->finished);
    }
    if (set->publish_timer != NULL)
        event_free(set->publish_timer);
    if (set->notified != NULL)
        event_free(set->notified);
    for (int i = 0; i < 2; i++)
        if (set->notify[i] >= 0)
            close(set->notify[i]);
    for (size_t i = 0; i < set->n; i++) {
        population_entry *e = &set->entries[i];
        if (e->profile != NULL)
            ts_population_loop_free(&e->loop);
        free(e->name);
    }
    free(set->entries);
    free(set);
}

void ts_population_set_detach(ts_population_set *set)
{
    if (set == NULL)
        return;
    wait_job(set);
    for (size_t i = 0; i < set->n; i++) {
        set->entries[i].detached_from = set->entries[i].profile;
        set->entries[i].profile = NULL;
    }
}

int ts_population_set_attach(ts_population_set *set, char *err,
                             size_t errlen)
{
    if (set == NULL)
        return 0;
    int status = 0;
    for (size_t i = 0; i < set->n; i++) {
        population_entry *e = &set->entries[i];
        ts_profile *profile = (ts_profile *)ts_pipeline_profile_at(
            set->pipeline, e->profile_index);
        if (profile == e->detached_from) {  /* the reload was refused */
            e->profile = profile;
            continue;
        }
        /* The old profile is gone: keep the estimate, rebuild the loop on
         * the new one, one version on. */
        ts_population_loop old = e->loop;
        double *theta = old.theta;
        old.theta = NULL;
        uint32_t version = old.source[1].version + 1;
        /* The old channels belong to the freed profile's mechanism only
         * through their owner flags; free them without installing. */
        for (int s = 0; s < 2; s++) {
            if (old.source[s].owned && old.source[s].channel != NULL)
                old.ops->channel_free((void *)old.source[s].channel);
            free(old.source[s].counts);
        }
        memset(&e->loop, 0, sizeof e->loop);
        if (!keeps_density(profile)) {
            /* density turned off by the reload: the entry stays idle (a
             * profile that turns it on needs a restart) */
            ts_log(TS_LOG_INFO, "profile %s: no density estimate any more",
                   e->name);
            free(theta);
            continue;
        }
        if (bind_entry(e, profile, err, errlen) != 0 ||
            ts_population_restore(&e->loop, version, old.cycles,
                                  old.reports_total, theta, old.n, err,
                                  errlen) != 0) {
            status = -1;
            ts_log(TS_LOG_ERROR, "profile %s: %s", e->name, err);
        }
        free(theta);
    }
    return status;
}
