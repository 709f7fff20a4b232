#include "ops/reload.h"

#include "ops/population_loop.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include "engine/config.h"
#include "engine/log.h"
#include "engine/pipeline_reload.h"
#include "ops/catalog.h"

#define ERR_MAX 512

static void warn_restart_only(const char *key, void *arg)
{
    (void)arg;
    ts_log(TS_LOG_WARN, "reload: %s changed; it takes effect only after a "
           "restart", key);
}

static const char *on_exhausted_name(ts_on_exhausted policy)
{
    return policy == TS_ON_EXHAUSTED_REPEAT ? "repeat" : "drop";
}

/* Called before the swap; the names and order already match or the swap
 * will refuse them. */
/* What the reload log compares: a profile's ledger settings, copied
 * before the pipeline's profiles are replaced (and freed). */
typedef struct profile_summary {
    char name[128];
    double window_budget;
    int64_t window_ms;
    ts_on_exhausted on_exhausted;
} profile_summary;

static profile_summary *summarize_profiles(const ts_pipeline *pipeline,
                                           size_t *n)
{
    *n = ts_pipeline_profile_count(pipeline);
    profile_summary *summary = calloc(*n != 0 ? *n : 1, sizeof *summary);
    if (summary == NULL)
        return NULL;
    for (size_t i = 0; i < *n; i++) {
        const ts_profile *p = ts_pipeline_profile_at(pipeline, i);
        snprintf(summary[i].name, sizeof summary[i].name, "%s", p->name);
        summary[i].window_budget = p->window_budget;
        summary[i].window_ms = p->window_ms;
        summary[i].on_exhausted = p->on_exhausted;
    }
    return summary;
}

/* Called only once the new profiles are in place, and matched by name:
 * a refused reload logs nothing as changed (issue 10, item 16). */
static void log_profile_changes(const profile_summary *before, size_t n_before,
                                const ts_pipeline *pipeline)
{
    for (size_t i = 0; i < ts_pipeline_profile_count(pipeline); i++) {
        const ts_profile *new = ts_pipeline_profile_at(pipeline, i);
        const profile_summary *old = NULL;
        for (size_t j = 0; j < n_before && old == NULL; j++)
            if (strcmp(before[j].name, new->name) == 0)
                old = &before[j];
        if (old != NULL && old->window_budget != new->window_budget)
            ts_log(TS_LOG_INFO, "reload: profile '%s' window budget %.9g -> "
                   "%.9g", new->name, old->window_budget,
                   new->window_budget);
        if (old != NULL && old->window_ms != new->window_ms)
            ts_log(TS_LOG_INFO, "reload: profile '%s' budget_window_s %lld -> "
                   "%lld (from each user's next window)", new->name,
                   (long long)(old->window_ms / 1000),
                   (long long)(new->window_ms / 1000));
        if (old != NULL && old->on_exhausted != new->on_exhausted)
            ts_log(TS_LOG_INFO, "reload: profile '%s' on_exhausted %s -> %s",
                   new->name, on_exhausted_name(old->on_exhausted),
                   on_exhausted_name(new->on_exhausted));
        /* Mechanism parameters are opaque here, so every profile is
         * reported as reloaded with its resulting ledger settings. */
        ts_log(TS_LOG_INFO, "reload: profile '%s' parameters reloaded "
               "(mechanism %s, window budget %.9g, budget_window_s %lld, "
               "on_exhausted %s)", new->name, new->ops->name,
               new->window_budget, (long long)(new->window_ms / 1000),
               on_exhausted_name(new->on_exhausted));
    }
}

static int refuse(const ts_reload_target *t, const char *err)
{
    ts_log(TS_LOG_ERROR, "reload refused, keeping the running "
           "configuration: %s", err);
    if (t->metrics != NULL)
        ts_metrics_count_reload(t->metrics, 0);
    return -1;
}

/* ------------------------------------------------- the worker's part */

/* One reload being built. The worker owns it until `done`; then the loop
 * takes it, unless shutdown abandoned it first, in which case the worker
 * frees it. Everything the worker reads is its own copy. */
typedef struct reload_job {
    pthread_mutex_t lock;
    pthread_cond_t finished;
    int done;                    /* under lock */
    int abandoned;               /* under lock */
    int wake_fd;                 /* the loop's eventfd; not after abandon */
    char *config_path;           /* NULL: built-in defaults */
    char **overrides;
    size_t n_overrides;
    /* The product: a configuration and its profiles shared from it, or
     * fresh NULL and err. */
    ts_config *fresh;
    ts_profile *profiles;
    size_t n_profiles;
    size_t default_index;
    double seconds;              /* to build it */
    char err[ERR_MAX];
} reload_job;

static void job_free(reload_job *job)
{
    if (job == NULL)
        return;
    ts_profiles_free(job->profiles, job->n_profiles);
    ts_config_free(job->fresh);
    for (size_t i = 0; i < job->n_overrides; i++)
        free(job->overrides[i]);
    free(job->overrides);
    free(job->config_path);
    pthread_cond_destroy(&job->finished);
    pthread_mutex_destroy(&job->lock);
    free(job);
}

static reload_job *job_new(const ts_reload_target *t, int wake_fd)
{
    reload_job *job = calloc(1, sizeof *job);
    if (job == NULL)
        return NULL;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->finished, NULL);
    job->wake_fd = wake_fd;
    job->overrides = calloc(t->n_overrides + 1, sizeof *job->overrides);
    int complete = job->overrides != NULL;
    if (complete && t->config_path != NULL)
        complete = (job->config_path = strdup(t->config_path)) != NULL;
    for (size_t i = 0; complete && i < t->n_overrides; i++) {
        job->overrides[i] = strdup(t->overrides[i] != NULL ? t->overrides[i]
                                                           : "");
        complete = job->overrides[i] != NULL;
        job->n_overrides = i + 1;
    }
    if (!complete) {
        job_free(job);
        return NULL;
    }
    return job;
}

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) +
           (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* Reads and checks the file and every file it names, and builds every
 * profile's mechanism: the whole cost of a reload, none of it on the
 * loop. */
static void *build_configuration(void *arg)
{
    reload_job *job = arg;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    job->fresh = ts_config_load(job->config_path,
                                (const char *const *)job->overrides,
                                job->n_overrides, job->err, sizeof job->err);
    if (job->fresh != NULL &&
        ts_config_share_profiles(job->fresh, &job->profiles,
                                 &job->n_profiles, &job->default_index,
                                 job->err, sizeof job->err) != 0) {
        ts_config_free(job->fresh);
        job->fresh = NULL;
    }
    job->seconds = seconds_since(&start);
    pthread_mutex_lock(&job->lock);
    job->done = 1;
    int abandoned = job->abandoned;
    if (!abandoned) {
        uint64_t one = 1;
        /* Never full: the loop reads the counter at each wake-up. */
        if (write(job->wake_fd, &one, sizeof one) < 0)
            ts_log(TS_LOG_ERROR, "reload: cannot wake the loop: %s",
                   strerror(errno));
        pthread_cond_signal(&job->finished);
    }
    pthread_mutex_unlock(&job->lock);
    if (abandoned)
        job_free(job);
    return NULL;
}

/* -------------------------------------------------- the loop's part */

/* The swap: everything here is a few pointers per profile, the PRIVIC
 * loops' rebinding and the driver's adopt_config. Takes the job's
 * product. 0 when applied; -1 when refused (logged and counted). */
static int apply(const ts_reload_target *t, reload_job *job)
{
    char err[ERR_MAX];
    if (job->fresh == NULL)
        return refuse(t, job->err);
    ts_config *fresh = job->fresh;
    ts_profile *profiles = job->profiles;
    job->fresh = NULL;
    job->profiles = NULL;
    /* NULL only when out of memory: the reload then goes on unlogged. */
    size_t n_before = 0;
    profile_summary *before = summarize_profiles(t->pipeline, &n_before);
    ts_population_set_detach(t->population);
    int replaced = ts_pipeline_replace_profiles(t->pipeline, profiles,
                                                job->n_profiles,
                                                job->default_index, err,
                                                sizeof err);
    char population_err[ERR_MAX];
    if (ts_population_set_attach(t->population, population_err,
                                 sizeof population_err) != 0)
        ts_log(TS_LOG_ERROR, "reload: %s", population_err);
    if (replaced != 0) {
        free(before);
        ts_config_free(fresh);
        return refuse(t, err);
    }
    if (before != NULL)
        log_profile_changes(before, n_before, t->pipeline);
    free(before);
    /* The pipeline shares fresh's mechanisms now: the daemon keeps it for
     * as long, and lets go of the one it replaced. */
    ts_config_free(*t->profiles_config);
    *t->profiles_config = fresh;
    ts_config_restart_changes(t->running, fresh, warn_restart_only, NULL);
    int level = ts_config_settings(fresh)->log_level;
    if (t->driver_ops->adopt_config(t->driver, fresh, err, sizeof err) !=
        0) {
        ts_log(TS_LOG_ERROR, "reload: %s", err);
        if (t->metrics != NULL)
            ts_metrics_count_reload(t->metrics, 0);
        return -1;
    }
    if (level != (int)ts_log_get_level()) {
        ts_log(TS_LOG_INFO, "reload: log level changed");
        ts_log_init(t->program_name, (ts_log_level)level,
                    ts_config_settings(t->running)->log_syslog);
    }
    if (t->metrics != NULL)
        ts_metrics_count_reload(t->metrics, 1);
    ts_log_always("reload complete");
    return 0;
}

struct ts_reloader {
    ts_reload_target target;
    int wake_fd;                 /* eventfd: a job is done */
    struct event *wake;
    reload_job *job;             /* the one being built; NULL: none */
    pthread_t thread;
    int again;                   /* a SIGHUP came while it was built */
};

static void notify_reloading(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    /* MONOTONIC_USEC lets Type=notify-reload managers match the reload. */
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64,
               (uint64_t)now.tv_sec * 1000000u +
                   (uint64_t)now.tv_nsec / 1000u);
}

static void start_job(ts_reloader *r, const char *why)
{
    const ts_reload_target *t = &r->target;
    notify_reloading();
    ts_log(TS_LOG_INFO, "%s, reloading %s", why,
           t->config_path != NULL ? t->config_path : "(built-in defaults)");
    r->job = job_new(t, r->wake_fd);
    if (r->job == NULL) {
        refuse(t, "out of memory");
        sd_notify(0, "READY=1");
        return;
    }
    int rc = pthread_create(&r->thread, NULL, build_configuration, r->job);
    if (rc != 0) {
        job_free(r->job);
        r->job = NULL;
        char err[ERR_MAX];
        snprintf(err, sizeof err, "cannot start the reload thread: %s",
                 strerror(rc));
        refuse(t, err);
        sd_notify(0, "READY=1");
    }
}

/* The worker is done: apply its product on the loop, then start the
 * reload a SIGHUP asked for meanwhile. */
static void on_built(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    ts_reloader *r = arg;
    uint64_t count;
    if (read(fd, &count, sizeof count) < 0 || r->job == NULL)
        return;
    pthread_join(r->thread, NULL);
    reload_job *job = r->job;
    r->job = NULL;
    ts_log(TS_LOG_INFO, "reload: configuration read and built off the "
           "event loop in %.3f s", job->seconds);
    apply(&r->target, job);
    job_free(job);
    sd_notify(0, "READY=1");
    if (r->again) {
        r->again = 0;
        start_job(r, "SIGHUP during the last reload");
    }
}

ts_reloader *ts_reloader_new(const ts_reload_target *target,
                             struct event_base *base, char *err,
                             size_t errlen)
{
    ts_reloader *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->target = *target;
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->wake_fd >= 0)
        r->wake = event_new(base, r->wake_fd, EV_READ | EV_PERSIST, on_built,
                            r);
    if (r->wake == NULL || event_add(r->wake, NULL) != 0) {
        snprintf(err, errlen, "cannot set up the reload's wake-up: %s",
                 r->wake_fd < 0 ? strerror(errno) : "event");
        ts_reloader_free(r);
        return NULL;
    }
    return r;
}

void ts_reloader_request(ts_reloader *r)
{
    if (r->job == NULL) {
        start_job(r, "received SIGHUP");
        return;
    }
    if (!r->again)
        ts_log(TS_LOG_INFO, "received SIGHUP while a reload is being built: "
               "reloading once more after it");
    r->again = 1;
}

int ts_reloader_busy(const ts_reloader *r)
{
    return r != NULL && r->job != NULL;
}

/* A job still being built: wait for it a little, then leave it to free
 * itself. */
static void settle_job(ts_reloader *r)
{
    reload_job *job = r->job;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += TS_RELOAD_SHUTDOWN_WAIT_MS / 1000;
    deadline.tv_nsec += (TS_RELOAD_SHUTDOWN_WAIT_MS % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&job->lock);
    while (!job->done &&
           pthread_cond_timedwait(&job->finished, &job->lock, &deadline) ==
               0)
        ;
    int done = job->done;
    if (!done)
        job->abandoned = 1;
    pthread_mutex_unlock(&job->lock);
    if (done) {
        pthread_join(r->thread, NULL);
        job_free(job);
        ts_log(TS_LOG_INFO, "shutdown: the reload in progress is not "
               "applied");
    } else {
        pthread_detach(r->thread);
        ts_log(TS_LOG_WARN, "shutdown: a reload still being built after "
               "%d ms is abandoned (not applied)",
               TS_RELOAD_SHUTDOWN_WAIT_MS);
    }
    r->job = NULL;
}

void ts_reloader_free(ts_reloader *r)
{
    if (r == NULL)
        return;
    if (r->job != NULL)
        settle_job(r);
    if (r->wake != NULL)
        event_free(r->wake);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    free(r);
}
