#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/log.h"

/* ----------------------------------------------------------- helpers */

int64_t ts_js_mono_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

double ts_js_mono_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* How long one publish may wait for JetStream: a renewal interval, so a
 * stalled stream (a leader being elected) never holds a group for long;
 * what failed is retried through a rebuild. */
int64_t ts_js_wait_ms(const ts_jetstream *m)
{
    int64_t every = ts_lease_renew_interval(m->nats->lease_ttl_ms);
    return every > 500 ? every : 500;
}

void ts_js_lease_key(char *buf, size_t size, uint32_t p)
{
    snprintf(buf, size, "p.%u", p);
}

void ts_js_consumer_name(char *buf, size_t size, uint32_t p)
{
    snprintf(buf, size, TS_JS_CONSUMER_PREFIX "%u", p);
}

void ts_js_set_health(ts_jetstream *m, const char *reason)
{
    pthread_mutex_lock(&m->lock);
    snprintf(m->health, sizeof m->health, "%s", reason);
    pthread_mutex_unlock(&m->lock);
}

void ts_js_wake(ts_jetstream *m)
{
    pthread_mutex_lock(&m->flight_lock);
    m->wakeups++;
    pthread_cond_signal(&m->flight_cond);
    pthread_mutex_unlock(&m->flight_lock);
}

/* ------------------------------------------------------------ leases */

/* at_ms is wall-clock time, comparable between instances of one host
 * (the tests check that no two instances' intervals overlap). A partition
 * noticed lost after its deadline (a frozen process) is logged at the
 * deadline: nothing was committed after it (the fence refuses it). */
void ts_js_log_lease(const char *what, const partition *p, const char *why)
{
    int64_t at = ts_wall_clock_ms();
    pthread_mutex_lock(&p->mode->lease_lock);
    int64_t deadline = p->deadline_ms;
    uint64_t epoch = p->epoch;
    pthread_mutex_unlock(&p->mode->lease_lock);
    int64_t late = ts_js_mono_ms() - deadline;
    if (strcmp(what, "released") == 0 && deadline > 0 && late > 0)
        at -= late;
    ts_log(TS_LOG_INFO, "lease %s partition=%u epoch=%" PRIu64
           " at_ms=%" PRId64 "%s%s", what, p->index, epoch, at,
           why != NULL ? " reason=" : "", why != NULL ? why : "");
}

int ts_js_connected(const ts_jetstream *m)
{
    return natsConnection_Status(m->conn.nc) == NATS_CONN_STATUS_CONNECTED;
}

/* 0 when the lease thread lost the lease or its deadline passed. */
int ts_js_lease_ok(ts_jetstream *m, partition *p)
{
    pthread_mutex_lock(&m->lease_lock);
    int ok = p->held && !p->lost && ts_js_mono_ms() < p->deadline_ms;
    pthread_mutex_unlock(&m->lease_lock);
    return ok;
}

