#include "state/store_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ERR_MAX 512

struct ts_store_writer {
    ts_store *store;
    ts_store_writer_done_fn done;
    void *arg;
    ts_record_batch batch;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;         /* a job, or stop */
    pthread_cond_t finished;     /* the job is done */
    int job;                     /* submitted, not yet taken by the thread */
    int busy;                    /* submitted, `done` not yet run */
    int result_ready;            /* the thread finished; result below */
    int stop;
    int ok;
    double seconds;
    char err[ERR_MAX];
    int notify[2];               /* thread -> loop: a byte per finished job */
    struct event *notified;
};

static double seconds_between(const struct timespec *a,
                              const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) +
           (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void write_batch(ts_store_writer *w)
{
    struct timespec started, ended;
    clock_gettime(CLOCK_MONOTONIC, &started);
    char err[ERR_MAX] = "";
    int ok = ts_store_begin(w->store, err, sizeof err) == 0;
    if (ok && ts_store_put_batch(w->store, &w->batch, err, sizeof err) != 0) {
        ts_store_abort(w->store);
        ok = 0;
    }
    if (ok && ts_store_commit(w->store, err, sizeof err) != 0)
        ok = 0;
    clock_gettime(CLOCK_MONOTONIC, &ended);
    pthread_mutex_lock(&w->lock);
    w->ok = ok;
    w->seconds = seconds_between(&started, &ended);
    snprintf(w->err, sizeof w->err, "%s", err);
    w->result_ready = 1;
    pthread_cond_broadcast(&w->finished);
    pthread_mutex_unlock(&w->lock);
    /* The pipe holds at most one byte per job and one job is in flight: it
     * cannot fill. */
    unsigned char byte = 1;
    while (write(w->notify[1], &byte, 1) < 0 && errno == EINTR)
        ;
}

static void *writer_main(void *arg)
{
    ts_store_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->job && !w->stop)
            pthread_cond_wait(&w->wake, &w->lock);
        if (w->job) {
            w->job = 0;
            pthread_mutex_unlock(&w->lock);
            write_batch(w);
            pthread_mutex_lock(&w->lock);
            continue;
        }
        break;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Runs `done` once for a finished job, on the loop. */
static void report(ts_store_writer *w)
{
    pthread_mutex_lock(&w->lock);
    int ready = w->result_ready;
    int ok = w->ok;
    double seconds = w->seconds;
    char err[ERR_MAX];
    snprintf(err, sizeof err, "%s", w->err);
    w->result_ready = 0;
    pthread_mutex_unlock(&w->lock);
    if (!ready || !w->busy)
        return;
    w->busy = 0;
    w->done(w->arg, ok, err, seconds);
}

static void on_notified(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    unsigned char bytes[16];
    while (read(fd, bytes, sizeof bytes) > 0)
        ;
    report(arg);
}

ts_store_writer *ts_store_writer_new(ts_store *store, struct event_base *base,
                                     ts_store_writer_done_fn done, void *arg,
                                     char *err, size_t errlen)
{
    ts_store_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->store = store;
    w->done = done;
    w->arg = arg;
    w->notify[0] = w->notify[1] = -1;
    if (pipe2(w->notify, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot create the store writer's pipe: %s",
                 strerror(errno));
        free(w);
        return NULL;
    }
    w->notified = event_new(base, w->notify[0], EV_READ | EV_PERSIST,
                            on_notified, w);
    if (w->notified == NULL || event_add(w->notified, NULL) != 0) {
        snprintf(err, errlen, "cannot watch the store writer's pipe");
        goto fail;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->finished, NULL);
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the store writer: %s",
                 strerror(rc));
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->wake);
        pthread_cond_destroy(&w->finished);
        goto fail;
    }
    /* The loop's reads never use the writer's transaction. */
    ts_store_set_concurrent_reads(store);
    return w;
fail:
    if (w->notified != NULL)
        event_free(w->notified);
    close(w->notify[0]);
    close(w->notify[1]);
    free(w);
    return NULL;
}

void ts_store_writer_free(ts_store_writer *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    while (w->job || (w->busy && !w->result_ready))
        pthread_cond_wait(&w->finished, &w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->finished);
    event_free(w->notified);
    close(w->notify[0]);
    close(w->notify[1]);
    ts_record_batch_free(&w->batch);
    free(w);
}

ts_record_batch *ts_store_writer_batch(ts_store_writer *w)
{
    return &w->batch;
}

int ts_store_writer_busy(const ts_store_writer *w)
{
    return w->busy;
}

void ts_store_writer_submit(ts_store_writer *w)
{
    pthread_mutex_lock(&w->lock);
    w->busy = 1;
    w->job = 1;
    w->result_ready = 0;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

void ts_store_writer_wait(ts_store_writer *w)
{
    if (!w->busy)
        return;
    pthread_mutex_lock(&w->lock);
    while (!w->result_ready)
        pthread_cond_wait(&w->finished, &w->lock);
    pthread_mutex_unlock(&w->lock);
    report(w);
}
