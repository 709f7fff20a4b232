/* A partition's life on the JetStream thread: taken over (handed to a
 * rebuild, then consuming), served (its groups moved on, more input),
 * and let go (lost, fenced out, handed back, rebuilt after a failure
 * whose outcome is unknown). The steps below it (js_commit, js_group)
 * only report what happened (js_verdict); the decisions are here. */
#include "drivers/jetstream/js_state.h"

#include <stdio.h>
#include <string.h>

#include "drivers/jetstream/js_population.h"
#include "engine/log.h"

/* Pause between attempts to rebuild a partition whose rebuild gave up. */
#define RESTORE_RETRY_MS 500

void ts_js_drop_state(ts_jetstream *m, partition *p)
{
    /* What its pipeline counted stays in the totals. */
    ts_js_count_pipeline(m, p);
    memset(&p->counted, 0, sizeof p->counted);
    ts_js_drop_flights(m, p);
    ts_sub_graveyard_bury(&m->graveyard, p->sub);
    p->sub = NULL;
    if (p->pipeline != NULL)
        ts_pipeline_free(p->pipeline);
    p->pipeline = NULL;
    ts_config_free(p->config);
    p->config = NULL;
    p->snapshot_due = 0;
    p->rebuild_due = 0;
}

/* Stops processing `p` now. With release the lease is handed back by the
 * lease thread (the next owner need not wait for it to age). What was
 * committed stays in the replica: with nats.standby it is kept warm from
 * here on; otherwise it is let go. */
void ts_js_lose_partition(ts_jetstream *m, partition *p, const char *why,
                          int release)
{
    if (p->state == PART_IDLE)
        return;
    int was_restoring = p->state == PART_RESTORE;
    ts_js_drop_state(m, p);
    p->state = PART_IDLE;
    ts_js_log_lease("released", p, why);
    pthread_mutex_lock(&m->lease_lock);
    if (release && p->held)
        p->release_rev = p->lease_rev;
    p->held = 0;
    p->granted = 0;
    p->hand_back = 0;
    pthread_mutex_unlock(&m->lease_lock);
    /* A rebuild under way leaves the replica half read: start over. */
    if (was_restoring || !m->nats->standby || m->leaving ||
        p->replica_broken) {
        ts_changelog_replica_reset(&p->replica);
        p->replica_broken = 0;
    }
    if (m->nats->standby && !m->leaving)
        ts_js_standby_start(m, p);
    pthread_mutex_lock(&m->lock);
    m->stats[p->index].owned = 0;
    m->stats[p->index].lag = 0;
    m->stats[p->index].in_flight = 0;
    pthread_mutex_unlock(&m->lock);
}

/* Lost or out of time: stop now (the data path checks before every fetch
 * and every append as well). 1 when it was stopped. */
int ts_js_enforce_lease(ts_jetstream *m, partition *p)
{
    pthread_mutex_lock(&m->lease_lock);
    int lost = p->lost;
    int late = ts_js_mono_ms() >= p->deadline_ms;
    pthread_mutex_unlock(&m->lease_lock);
    if (lost)
        ts_js_lose_partition(m, p, "lease taken", 0);
    else if (late)
        ts_js_lose_partition(m, p, "lease not renewed in time", 0);
    return lost || late;
}

/* A failure whose outcome is unknown (an append or a publish unanswered):
 * every group in flight is dropped, the uncommitted ones taken back out
 * of the map, and the partition is rebuilt from what the changelog holds
 * after the last record this owner knows committed. The rebuild
 * republishes whatever is committed and unacknowledged. */
static void rebuild(ts_jetstream *m, partition *p, const char *why)
{
    if (why != NULL)
        ts_log(TS_LOG_WARN, "partition %u: %s; rebuilding it from its "
               "changelog", p->index, why);
    ts_js_drop_state(m, p);
    p->state = PART_RESTORE;
    ts_js_queue_restore(m, p);
}

/* What a step reported, done. 1 when the partition moved at all. */
static int act(ts_jetstream *m, partition *p, js_verdict verdict,
               const char *why)
{
    switch (verdict) {
    case JS_IDLE:
        return 0;
    case JS_MOVED:
        return 1;
    case JS_STOP:
        if (!ts_js_enforce_lease(m, p))
            rebuild(m, p, why);
        return 1;
    case JS_FENCED:
        pthread_mutex_lock(&m->lock);
        m->stats[p->index].fenced++;
        pthread_mutex_unlock(&m->lock);
        ts_js_lose_partition(m, p, "fenced out", 0);
        return 1;
    case JS_REBUILD:
        /* Unless the lease is gone anyway. */
        if (!ts_js_enforce_lease(m, p))
            rebuild(m, p, why);
        return 1;
    case JS_GIVE_UP:
        ts_js_lose_partition(m, p, why, 1);
        return 1;
    }
    return 1;
}

/* A partition the lease thread acquired is handed to a rebuild; one whose
 * rebuild is done starts consuming. */
void ts_js_take_over(ts_jetstream *m, partition *p)
{
    pthread_mutex_lock(&m->lease_lock);
    int granted = p->granted;
    p->granted = 0;
    pthread_mutex_unlock(&m->lease_lock);
    if (granted && p->state == PART_IDLE) {
        p->state = PART_RESTORE;
        ts_js_queue_restore(m, p);
        return;
    }
    if (p->state != PART_RESTORE)
        return;
    /* A rebuild that gave up while the lease held: again. */
    if (p->retry_at_ms != 0 && ts_js_mono_ms() >= p->retry_at_ms) {
        p->retry_at_ms = 0;
        ts_js_queue_restore(m, p);
        return;
    }
    int result;
    if (!ts_js_restore_result(m, p, &result))
        return;
    /* Before its first group the partition releases through a version at
     * least as new as any its previous owner used (that owner adopted it
     * from the bucket before it committed, and so before our fence). */
    if (result == 0 && ts_js_population_catch_up(m->population) != 0) {
        ts_log(TS_LOG_WARN, "partition %u: the population bucket could not "
               "be read; restoring it again", p->index);
        result = -1;
    }
    if (result == -2) {
        ts_js_lose_partition(m, p, "fenced out", 0);
    } else if (result != 0 || ts_js_make_pipeline(m, p) != 0) {
        if (!ts_js_enforce_lease(m, p))
            p->retry_at_ms = ts_js_mono_ms() + RESTORE_RETRY_MS;
    } else {
        p->state = PART_ACTIVE;
        p->last_delivery = 0;  /* the rebuild made a new consumer */
        p->chain_seq = p->replica.changelog_seq;
        p->fetched_seq = p->replica.last_input_seq;
        p->rebuild_due = 0;
        p->snapshot_due = 0;
        p->input_seen_ms = ts_js_mono_ms();
        p->delivered_ms = p->input_seen_ms;
        pthread_mutex_lock(&m->lock);
        m->stats[p->index].owned = 1;
        pthread_mutex_unlock(&m->lock);
    }
}

/* Moves p's groups on and acts on what that reported. */
static int advance(ts_jetstream *m, partition *p)
{
    const char *why = NULL;
    js_verdict verdict = ts_js_advance(m, p, &why);
    return act(m, p, verdict, why);
}

/* One pass over an active partition: acknowledgements turned into the
 * next steps, more input, and what waits for the groups to drain (a
 * snapshot, a rebuild, handing the lease back). 1 when it moved. */
int ts_js_serve(ts_jetstream *m, partition *p)
{
    if (ts_js_enforce_lease(m, p))
        return 1;
    int busy = advance(m, p);
    if (p->state == PART_ACTIVE) {
        busy |= ts_js_fill(m, p);
        if (p->state == PART_ACTIVE)
            busy |= advance(m, p);
    }
    if (p->state != PART_ACTIVE || p->count > 0)
        return busy;
    pthread_mutex_lock(&m->lease_lock);
    int hand_back = p->hand_back;
    pthread_mutex_unlock(&m->lease_lock);
    if (hand_back) {
        ts_js_lose_partition(m, p, "rebalance", 1);
        return 1;
    }
    if (p->rebuild_due) {
        rebuild(m, p, NULL);
        return 1;
    }
    if (p->snapshot_due) {
        const char *why = NULL;
        js_verdict verdict = ts_js_snapshot(m, p, &why);
        act(m, p, verdict, why);
        return 1;
    }
    return busy;
}

/* Until every owned partition's groups retired (the loop ends), or
 * patience runs out. */
void ts_js_drain(ts_jetstream *m, int64_t patience_ms)
{
    int64_t give_up = ts_js_mono_ms() + patience_ms;
    for (;;) {
        int left = 0;
        pthread_mutex_lock(&m->flight_lock);
        uint64_t seen = m->wakeups;
        pthread_mutex_unlock(&m->flight_lock);
        for (uint32_t i = 0; i < m->n_partitions; i++) {
            partition *p = &m->parts[i];
            if (p->state != PART_ACTIVE || ts_js_enforce_lease(m, p))
                continue;
            advance(m, p);
            left |= p->state == PART_ACTIVE && p->count > 0;
        }
        if (!left || ts_js_mono_ms() >= give_up || !ts_js_connected(m))
            return;
        ts_js_wait_news(m, seen, 5);
    }
}
