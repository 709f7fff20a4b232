#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/log.h"

static void observe_instances(ts_jetstream *m, int64_t now)
{
    kvKeysList keys = { 0 };
    if (kvStore_Keys(&keys, m->kv, NULL) != NATS_OK)
        return;
    for (int i = 0; i < keys.Count; i++) {
        const char *key = keys.Keys[i];
        if (strncmp(key, "i.", 2) != 0)
            continue;
        kvEntry *entry = NULL;
        if (kvStore_Get(&entry, m->kv, key) != NATS_OK)
            continue;
        uint64_t rev = kvEntry_Revision(entry);
        kvEntry_Destroy(entry);
        instance_view *view = NULL;
        for (size_t j = 0; j < m->n_instances && view == NULL; j++)
            if (strcmp(m->instances[j].name, key + 2) == 0)
                view = &m->instances[j];
        if (view == NULL && m->n_instances < MAX_INSTANCES) {
            view = &m->instances[m->n_instances++];
            snprintf(view->name, sizeof view->name, "%s", key + 2);
        }
        if (view != NULL && view->revision != rev) {
            view->revision = rev;
            view->seen_ms = now;
        }
    }
    kvKeysList_Destroy(&keys);
}

static size_t live_instances(const ts_jetstream *m, int64_t now)
{
    size_t live = 1;  /* this one */
    int64_t ttl = m->nats->lease_ttl_ms;
    for (size_t j = 0; j < m->n_instances; j++)
        if (strcmp(m->instances[j].name, m->self) != 0 &&
            now - m->instances[j].seen_ms < ttl)
            live++;
    return live;
}

void *ts_js_lease_thread_main(void *arg)
{
    ts_jetstream *m = arg;
    int64_t ttl = m->nats->lease_ttl_ms;
    char key[TS_LEASE_OWNER_MAX + 8];
    while (!m->lease_stop) {
        int64_t start = ts_js_mono_ms();
        if (ts_js_connected(m)) {
            uint64_t rev = 0;
            snprintf(key, sizeof key, "i.%s", m->self);
            int ok = kvStore_PutString(&rev, m->lease_kv, key, "alive") ==
                     NATS_OK;
            for (uint32_t i = 0; i < m->n_partitions && !m->lease_stop; i++) {
                partition *p = &m->parts[i];
                pthread_mutex_lock(&m->lease_lock);
                int renew = p->held && !p->lost;
                uint64_t last = p->lease_rev;
                pthread_mutex_unlock(&m->lease_lock);
                if (!renew)
                    continue;
                ts_js_lease_key(key, sizeof key, i);
                int64_t sent = ts_js_mono_ms();
                natsStatus s = kvStore_UpdateString(&rev, m->lease_kv, key,
                                                    m->self, last);
                const char *why = s != NATS_OK ? nats_GetLastError(NULL)
                                               : NULL;
                int taken = why != NULL && strstr(why, "wrong last") != NULL;
                pthread_mutex_lock(&m->lease_lock);
                /* Unless the data path let it go meanwhile. */
                if (p->held && p->lease_rev == last) {
                    if (s == NATS_OK) {
                        p->lease_rev = rev;
                        p->deadline_ms = ts_lease_deadline(sent, ttl);
                    } else if (taken) {
                        p->lost = 1;
                    } else {
                        ok = 0;
                    }
                }
                pthread_mutex_unlock(&m->lease_lock);
            }
            if (ok) {
                pthread_mutex_lock(&m->lease_lock);
                m->last_lease_ok_ms = start;
                pthread_mutex_unlock(&m->lease_lock);
            }
        }
        /* After a failed round, try again soon: the deadline is 3/4 ttl
         * from the last success. */
        int64_t every = ts_lease_renew_interval(ttl);
        pthread_mutex_lock(&m->lease_lock);
        if (m->last_lease_ok_ms != start)
            every = every / 4 > 50 ? every / 4 : 50;
        pthread_mutex_unlock(&m->lease_lock);
        while (!m->lease_stop && ts_js_mono_ms() < start + every)
            usleep(10000);
    }
    return NULL;
}

void ts_js_lease_tick(ts_jetstream *m)
{
    int64_t ttl = m->nats->lease_ttl_ms;
    int64_t now = ts_js_mono_ms();
    m->next_lease_ms = now + ts_lease_renew_interval(ttl);
    for (uint32_t i = 0; i < m->n_partitions; i++)
        if (m->parts[i].state != PART_IDLE)
            ts_js_enforce_lease(m, &m->parts[i]);
    /* Disconnected, every KV call would wait for its timeout. */
    if (!ts_js_connected(m))
        return;
    char key[TS_LEASE_OWNER_MAX + 8];
    uint64_t rev = 0;
    observe_instances(m, now);
    size_t owned = 0;
    for (uint32_t i = 0; i < m->n_partitions && !m->stop; i++) {
        partition *p = &m->parts[i];
        ts_js_lease_key(key, sizeof key, i);
        if (p->state != PART_IDLE) {
            owned++;  /* renewed by the lease thread */
            continue;
        }
        kvEntry *entry = NULL;
        natsStatus s = kvStore_Get(&entry, m->kv, key);
        if (s == NATS_OK) {
            const char *owner = kvEntry_ValueString(entry);
            ts_lease_observe(&p->view, kvEntry_Revision(entry), owner,
                             owner != NULL ? strlen(owner) : 0, now);
            kvEntry_Destroy(entry);
        } else if (s == NATS_NOT_FOUND) {
            ts_lease_observe(&p->view, 0, "", 0, now);
        }
    }
    size_t fair = ts_lease_fair_share(m->n_partitions, live_instances(m, now));
    /* Hand back the surplus, highest partitions first, so a joining
     * instance gets its share without waiting for leases to age. */
    for (uint32_t i = m->n_partitions; i-- > 0 && owned > fair;) {
        if (m->parts[i].state != PART_IDLE) {
            ts_js_lose_partition(m, &m->parts[i], "rebalance", 1);
            owned--;
        }
    }
    for (uint32_t i = 0; i < m->n_partitions && owned < fair; i++) {
        partition *p = &m->parts[i];
        if (p->state != PART_IDLE ||
            !ts_lease_takeable(&p->view, m->self, now, ttl))
            continue;
        ts_js_lease_key(key, sizeof key, i);
        int64_t sent = ts_js_mono_ms();
        natsStatus s = p->view.revision == 0
                           ? kvStore_CreateString(&rev, m->kv, key, m->self)
                           : kvStore_UpdateString(&rev, m->kv, key, m->self,
                                                  p->view.revision);
        if (s != NATS_OK) {
            memset(&p->view, 0, sizeof p->view);
            continue;
        }
        pthread_mutex_lock(&m->lease_lock);
        p->lease_rev = rev;
        p->deadline_ms = ts_lease_deadline(sent, ttl);
        p->held = 1;
        p->lost = 0;
        pthread_mutex_unlock(&m->lease_lock);
        p->epoch = rev;
        p->state = PART_RESTORE;
        owned++;
        ts_js_log_lease("acquired", p, p->view.revision == 0 || ts_lease_is_free(&p->view)
                                      ? "free" : "expired");
    }
}

/* ---------------------------------------------------------- the data */
int64_t ts_js_lease_silent_ms(ts_jetstream *m)
{
    pthread_mutex_lock(&m->lease_lock);
    int64_t last = m->last_lease_ok_ms;
    pthread_mutex_unlock(&m->lease_lock);
    return ts_js_mono_ms() - last;
}

