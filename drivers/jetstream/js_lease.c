/* The lease thread: every call to the lease bucket is made here, so that
 * no data-path call (a rebuild waiting on a cluster that lost a node, a
 * stalled publish) ever delays a renewal.
 *
 * Each round renews every held lease at once (asynchronous compare-and-
 * set publishes, answered within ttl/8), so a round costs one wait
 * whatever the number of partitions: a stream leader election that
 * makes every renewal time out delays the next round by ttl/8, not by
 * ttl/8 per partition (16 of them took 12 s before, and a healthy
 * instance dropped all its leases). A failed round is tried again every
 * RETRY_MS until the deadline the lease argument allows
 * (partition_lease.h): 7/8 ttl after the last successful renewal was
 * sent.
 *
 * The other leases and the instances' heartbeats are seen through a
 * watcher on the bucket, each update when it arrives. */
#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/log.h"

/* After a failed round. */
#define RETRY_MS 100
/* The thread looks at the watcher and the partitions this often. */
#define TICK_MS 20
/* Pause after a take that failed (the bucket electing its leader). */
#define TAKE_RETRY_MS 500

/* Under lease_lock: what the current round asked, and the answers. */
enum { RENEW_NONE = 0, RENEW_PENDING, RENEW_OK, RENEW_TAKEN, RENEW_FAILED };

/* "$KV.<bucket>.<key>": a lease update is a publish there that expects
 * the key's last revision. */
static void key_subject(char *buf, size_t size, const char *key)
{
    snprintf(buf, size, "$KV." TS_JS_LEASE_BUCKET ".%s", key);
}

static void on_lease_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa,
                         jsPubAckErr *pae, void *closure)
{
    (void)js;
    ts_jetstream *m = closure;
    const char *subject = natsMsg_GetSubject(msg);
    const char *prefix = "$KV." TS_JS_LEASE_BUCKET ".p.";
    size_t n = strlen(prefix);
    if (subject != NULL && strncmp(subject, prefix, n) == 0) {
        char *end = NULL;
        unsigned long i = strtoul(subject + n, &end, 10);
        const char *expect_text = NULL;
        uint64_t expect = 0;
        if (natsMsgHeader_Get(msg, "Nats-Expected-Last-Subject-Sequence",
                              &expect_text) == NATS_OK &&
            expect_text != NULL)
            expect = strtoull(expect_text, NULL, 10);
        if (end != subject + n && *end == '\0' && i < m->n_partitions) {
            pthread_mutex_lock(&m->lease_lock);
            js_renewal *r = &m->renewals[i];
            if (r->state == RENEW_PENDING && r->expect == expect) {
                if (pa != NULL && m->drop_renewal_every > 0 &&
                    ++m->renewals_answered % m->drop_renewal_every == 0) {
                    /* Test hook: as an answer lost on its way (stored). */
                    r->state = RENEW_FAILED;
                } else if (pa != NULL) {
                    r->state = RENEW_OK;
                    r->revision = pa->Sequence;
                } else {
                    r->state = pae != NULL && pae->ErrCode ==
                                                  JSStreamWrongLastSequenceErr
                                   ? RENEW_TAKEN : RENEW_FAILED;
                }
            }
            pthread_mutex_unlock(&m->lease_lock);
        }
    }
    natsMsg_Destroy(msg);
}

int ts_js_lease_open(ts_jetstream *m, char *err, size_t errlen)
{
    m->renewals = calloc(m->n_partitions, sizeof *m->renewals);
    jsOptions jo;
    jsOptions_Init(&jo);
    /* Every answer is awaited ttl/8 at most: the deadline leaves room for
     * several rounds while a leader is being elected. */
    jo.Wait = m->nats->lease_ttl_ms / 8 > 250 ? m->nats->lease_ttl_ms / 8
                                              : 250;
    jo.PublishAsync.AckHandler = on_lease_ack;
    jo.PublishAsync.AckHandlerClosure = m;
    const char *hook = getenv("TRACESAND_TEST_FAIL_TAKES");
    if (hook != NULL)
        m->fail_takes = strtoull(hook, NULL, 10);
    if (m->renewals == NULL ||
        natsConnection_JetStream(&m->lease_js, m->lease_conn.nc, &jo) !=
            NATS_OK ||
        js_KeyValue(&m->lease_kv, m->lease_js, TS_JS_LEASE_BUCKET) !=
            NATS_OK) {
        snprintf(err, errlen, "cannot open the lease bucket");
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------- seeing */

static instance_view *instance_named(ts_jetstream *m, const char *name)
{
    for (size_t j = 0; j < m->n_instances; j++)
        if (strcmp(m->instances[j].name, name) == 0)
            return &m->instances[j];
    if (m->n_instances == MAX_INSTANCES)
        return NULL;
    instance_view *view = &m->instances[m->n_instances++];
    snprintf(view->name, sizeof view->name, "%s", name);
    return view;
}

/* One update of the bucket, as it arrives: a lease's revision and owner
 * (first seen now), or an instance's heartbeat. */
static void see(ts_jetstream *m, kvEntry *entry, int64_t now)
{
    const char *key = kvEntry_Key(entry);
    uint64_t rev = kvEntry_Revision(entry);
    int gone = kvEntry_Operation(entry) != kvOp_Put;
    if (strncmp(key, "i.", 2) == 0) {
        instance_view *view = instance_named(m, key + 2);
        if (view != NULL && view->revision != rev) {
            view->revision = rev;
            view->seen_ms = gone ? 0 : now;
        }
        return;
    }
    char *end = NULL;
    unsigned long i = strncmp(key, "p.", 2) == 0
                          ? strtoul(key + 2, &end, 10) : m->n_partitions;
    if (i >= m->n_partitions || end == key + 2 || *end != '\0')
        return;
    const char *owner = gone ? "" : kvEntry_ValueString(entry);
    ts_lease_observe(&m->parts[i].view, rev, owner,
                     owner != NULL ? strlen(owner) : 0, now);
}

static void see_absent(ts_jetstream *m, int64_t now)
{
    for (uint32_t i = 0; i < m->n_partitions; i++)
        if (m->parts[i].view.seen_ms == 0)
            ts_lease_observe(&m->parts[i].view, 0, "", 0, now);
}

static size_t live_instances(const ts_jetstream *m, int64_t now)
{
    size_t live = 1;  /* this one */
    int64_t ttl = m->nats->lease_ttl_ms;
    for (size_t j = 0; j < m->n_instances; j++)
        if (strcmp(m->instances[j].name, m->self) != 0 &&
            m->instances[j].seen_ms > 0 && now - m->instances[j].seen_ms < ttl)
            live++;
    return live;
}

/* ---------------------------------------------------------- renewing */

static void publish_update(ts_jetstream *m, const char *key,
                           const char *value, uint64_t expect, int compare)
{
    char subject[TS_LEASE_OWNER_MAX + 64];
    key_subject(subject, sizeof subject, key);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = m->nats->lease_ttl_ms / 8 > 250 ? m->nats->lease_ttl_ms / 8
                                                 : 250;
    if (compare)
        po.ExpectLastSubjectSeq = expect;
    js_PublishAsync(m->lease_js, subject, value, (int)strlen(value), &po);
}

/* A renewal refused because the lease's revision is not the one it
 * expects: after a round whose answer was lost (a server gone, the
 * bucket electing its leader), that can be this instance's own renewal,
 * stored (ts_js_lease_reads_own). Then the lease is still ours at the
 * newer revision; the deadline stays the one of the last renewal
 * answered (the stored one was sent no earlier), and the next round
 * extends it. RENEW_OK with *revision, RENEW_TAKEN, or RENEW_FAILED when
 * the bucket could not be read. */
static int settle_refused_renewal(ts_jetstream *m, uint32_t i,
                                  uint64_t expect, uint64_t *revision)
{
    char key[TS_LEASE_OWNER_MAX + 8];
    ts_js_lease_key(key, sizeof key, i);
    int own = ts_js_lease_reads_own(m->lease_kv, key, m->self, expect,
                                    revision);
    if (own == 1)
        ts_log(TS_LOG_INFO, "partition %u: a lease renewal answered late "
               "was stored (revision %" PRIu64 ")", i, *revision);
    return own == 1 ? RENEW_OK : own == 0 ? RENEW_TAKEN : RENEW_FAILED;
}

/* One round: the heartbeat, every held lease and every release asked
 * for, sent at once, then their answers. 1 when every renewal got one. */
static int renew_round(ts_jetstream *m)
{
    int64_t ttl = m->nats->lease_ttl_ms;
    char key[TS_LEASE_OWNER_MAX + 8];
    snprintf(key, sizeof key, "i.%s", m->self);
    publish_update(m, key, "alive", 0, 0);
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        partition *p = &m->parts[i];
        ts_js_lease_key(key, sizeof key, i);
        pthread_mutex_lock(&m->lease_lock);
        int renew = p->held && !p->lost;
        uint64_t rev = p->lease_rev;
        uint64_t release = p->release_rev;
        p->release_rev = 0;
        js_renewal *r = &m->renewals[i];
        r->state = renew ? RENEW_PENDING : RENEW_NONE;
        r->expect = rev;
        r->sent_ms = ts_js_mono_ms();
        pthread_mutex_unlock(&m->lease_lock);
        /* Handing back is a courtesy (the lease ages out anyway). */
        if (release != 0)
            publish_update(m, key, TS_LEASE_FREE, release, 1);
        if (renew)
            publish_update(m, key, m->self, rev, 1);
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = ttl / 8 > 250 ? ttl / 8 : 250;
    natsStatus s = js_PublishAsyncComplete(m->lease_js, &po);
    if (s != NATS_OK) {
        /* Answers lost with a server would time out every later round. */
        natsMsgList pending = { 0 };
        if (js_PublishAsyncGetPendingList(&pending, m->lease_js) == NATS_OK)
            natsMsgList_Destroy(&pending);
    }
    int ok = 1;
    /* Refusals are settled first, outside the lock (a read of the
     * bucket); only the lease thread writes r->state between rounds. */
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        js_renewal *r = &m->renewals[i];
        pthread_mutex_lock(&m->lease_lock);
        int refused = r->state == RENEW_TAKEN;
        uint64_t expect = r->expect;
        pthread_mutex_unlock(&m->lease_lock);
        if (!refused)
            continue;
        uint64_t revision = 0;
        int settled = settle_refused_renewal(m, i, expect, &revision);
        pthread_mutex_lock(&m->lease_lock);
        if (settled == RENEW_OK) {
            /* Ours after all: the newer revision, the old deadline, and
             * the next round soon, to extend it. */
            if (m->parts[i].held && m->parts[i].lease_rev == expect)
                m->parts[i].lease_rev = revision;
            r->state = RENEW_NONE;
            ok = 0;
        } else {
            r->state = settled;
        }
        pthread_mutex_unlock(&m->lease_lock);
    }
    pthread_mutex_lock(&m->lease_lock);
    for (uint32_t i = 0; i < m->n_partitions; i++) {
        partition *p = &m->parts[i];
        js_renewal *r = &m->renewals[i];
        /* Unless the data path let it go meanwhile. */
        if (r->state == RENEW_NONE || !p->held || p->lease_rev != r->expect) {
            r->state = RENEW_NONE;
            continue;
        }
        if (r->state == RENEW_OK) {
            p->lease_rev = r->revision;
            p->deadline_ms = ts_lease_deadline(r->sent_ms, ttl);
        } else if (r->state == RENEW_TAKEN) {
            p->lost = 1;
        } else {
            ok = 0;  /* no answer: tried again soon, until the deadline */
        }
        r->state = RENEW_NONE;
    }
    pthread_mutex_unlock(&m->lease_lock);
    return ok;
}

/* -------------------------------------------------------- acquiring */

/* Hands back what is above the fair share (highest partitions first, so
 * a joining instance gets its share without waiting for leases to age),
 * and takes what is free or aged up to it. */
static void balance(ts_jetstream *m, int64_t now)
{
    int64_t ttl = m->nats->lease_ttl_ms;
    size_t fair = ts_lease_fair_share(m->n_partitions, live_instances(m, now));
    size_t owned = 0;
    pthread_mutex_lock(&m->lease_lock);
    for (uint32_t i = 0; i < m->n_partitions; i++)
        owned += m->parts[i].held && !m->parts[i].hand_back;
    for (uint32_t i = m->n_partitions; i-- > 0 && owned > fair;) {
        partition *p = &m->parts[i];
        if (p->held && !p->hand_back && !p->granted) {
            p->hand_back = 1;
            owned--;
        }
    }
    pthread_mutex_unlock(&m->lease_lock);
    for (uint32_t i = 0; i < m->n_partitions && owned < fair; i++) {
        partition *p = &m->parts[i];
        pthread_mutex_lock(&m->lease_lock);
        int busy = p->held || p->release_rev != 0;
        pthread_mutex_unlock(&m->lease_lock);
        if (now < m->take_retry_ms)
            break;
        if (busy || p->view.seen_ms == 0 ||
            !ts_lease_takeable(&p->view, m->self, now, ttl))
            continue;
        char key[32];
        ts_js_lease_key(key, sizeof key, i);
        int64_t sent = ts_js_mono_ms();
        uint64_t rev = 0;
        natsStatus s;
        if (m->fail_takes > 0) {
            m->fail_takes--;  /* test hook: as a bucket without a leader */
            s = NATS_TIMEOUT;
        } else {
            s = p->view.revision == 0
                    ? kvStore_CreateString(&rev, m->lease_kv, key, m->self)
                    : kvStore_UpdateString(&rev, m->lease_kv, key, m->self,
                                           p->view.revision);
        }
        if (s != NATS_OK) {
            /* Tried again later from the same view: a write that did
             * happen shows in the watcher as a newer revision (the next
             * compare then fails or waits a ttl), and one that did not
             * (a bucket electing its leader) changes nothing the watcher
             * would deliver, so forgetting the view here left the lease
             * untaken for good. One failed take a pause: each waits up to
             * ttl/8, and renewals of the leases held come between. */
            m->take_retry_ms = ts_js_mono_ms() + TAKE_RETRY_MS;
            break;
        }
        const char *why = p->view.revision == 0 || ts_lease_is_free(&p->view)
                              ? "free" : "expired";
        pthread_mutex_lock(&m->lease_lock);
        p->lease_rev = rev;
        p->epoch = rev;
        p->deadline_ms = ts_lease_deadline(sent, ttl);
        p->held = 1;
        p->lost = 0;
        p->granted = 1;
        pthread_mutex_unlock(&m->lease_lock);
        ts_js_log_lease("acquired", p, why);
        ts_js_wake(m);
        owned++;
    }
}

/* ----------------------------------------------------------- thread */

/* Hands back what the data path released last, and leaves the bucket. */
static void leave(ts_jetstream *m)
{
    renew_round(m);
    char key[TS_LEASE_OWNER_MAX + 8];
    snprintf(key, sizeof key, "i.%s", m->self);
    if (natsConnection_Status(m->lease_conn.nc) == NATS_CONN_STATUS_CONNECTED)
        kvStore_Delete(m->lease_kv, key);
}

void *ts_js_lease_thread_main(void *arg)
{
    ts_jetstream *m = arg;
    int64_t ttl = m->nats->lease_ttl_ms;
    int64_t next_round = 0;
    kvWatcher *watcher = NULL;
    while (!m->lease_stop) {
        int64_t now = ts_js_mono_ms();
        if (natsConnection_Status(m->lease_conn.nc) ==
            NATS_CONN_STATUS_CONNECTED) {
            if (watcher == NULL &&
                kvStore_WatchAll(&watcher, m->lease_kv, NULL) != NATS_OK)
                watcher = NULL;
            kvEntry *entry = NULL;
            for (int n = 0; watcher != NULL && n < 4096 &&
                            kvWatcher_Next(&entry, watcher, 1) == NATS_OK;
                 n++) {
                /* NULL marks the end of the values the watch began with:
                 * a lease not among them is absent, seen so now. */
                if (entry != NULL)
                    see(m, entry, ts_js_mono_ms());
                else
                    see_absent(m, ts_js_mono_ms());
                kvEntry_Destroy(entry);
                entry = NULL;
            }
            if (now >= next_round) {
                int ok = renew_round(m);
                pthread_mutex_lock(&m->lease_lock);
                if (ok)
                    m->last_lease_ok_ms = now;
                pthread_mutex_unlock(&m->lease_lock);
                next_round = now + (ok ? ts_lease_renew_interval(ttl)
                                       : RETRY_MS);
            }
            if (!m->leaving)
                balance(m, ts_js_mono_ms());
        }
        usleep(TICK_MS * 1000);
    }
    if (watcher != NULL)
        kvWatcher_Destroy(watcher);
    leave(m);
    return NULL;
}

int64_t ts_js_lease_silent_ms(ts_jetstream *m)
{
    pthread_mutex_lock(&m->lease_lock);
    int64_t last = m->last_lease_ok_ms;
    pthread_mutex_unlock(&m->lease_lock);
    return ts_js_mono_ms() - last;
}
