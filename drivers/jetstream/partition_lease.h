/* Partition leases of the JetStream mode, the decisions only: the KV
 * calls are in drivers/jetstream/js_lease.c. Kept free of I/O so the rules that
 * keep two instances off one partition are unit-tested on their own.
 *
 * A lease is the KV key "p.<partition>" whose value names its owner ("-"
 * when released). Its owner renews it every ttl/8 with an update that
 * compares the revision it last wrote (CAS), and processes the partition
 * only until ttl * 7/8 after it *sent* its last successful renewal, by its
 * own monotonic clock. Another instance takes a lease only when the key
 * is absent, released, or its revision has not changed for a whole ttl
 * since this instance first saw that revision, by its own monotonic
 * clock; taking it is again an update compared against that revision, so
 * of two instances racing, one wins.
 *
 * Why no two instances process a partition at once: the owner's last
 * renewal was written after it was sent (t_send <= t_write); the taker
 * saw that revision no earlier than it was written (t_seen >= t_write), so
 * it takes over at t_seen + ttl or later while the owner stopped at
 * t_send + 7/8 ttl. Only the *rates* of the two monotonic clocks enter,
 * never their offsets or the wall clock. With rates within a factor
 * (1 +- rho) of true time, the owner's 7/8 ttl lasts at most
 * (7/8 ttl) / (1 - rho) and the taker's ttl at least ttl / (1 + rho), so
 * the rule holds while (7/8)(1 + rho) <= 1 - rho, that is rho <= 1/15
 * (6.7 %): NTP-less commodity clocks (~1e-4) meet it 600 times over.
 *
 * The margin, ttl/8, is what the argument needs; the rest of the ttl is
 * the owner's to ride out a lease bucket that does not answer (its stream
 * electing a leader after a node was lost). Renewals go every ttl/8 and,
 * after a failure, again every 100 ms, each answered or given up within
 * ttl/8 (250 ms at least). The worst case is a silence that begins just
 * as a renewal is on its way: the last success was sent one round
 * earlier, ttl/8 before the silence began, so the owner keeps the
 * partition until 7/8 - 1/8 = 3/4 ttl after it began, and a renewal
 * answered before then keeps it. nats-server 2.9 elects a new stream leader 4 to 9 s (raft's
 * election timeout) after the old one's last heartbeat, about 10 s after
 * a kill -9 at worst, so a cluster that must ride out a node loss needs
 * ttl >= 15 s; with less, an instance whose lease bucket lost its leader
 * may stop at its deadline and take its partitions back one ttl later.
 *
 * The changelog fence (state/changelog.h) backs this up: even an owner
 * that was paused (SIGSTOP, a VM freeze) past its deadline cannot commit
 * after the new owner's fence record, so its outputs are never
 * published. */
#ifndef TRACESAN_DRIVERS_JETSTREAM_PARTITION_LEASE_H
#define TRACESAN_DRIVERS_JETSTREAM_PARTITION_LEASE_H

#include <stddef.h>
#include <stdint.h>

#define TS_LEASE_OWNER_MAX 64
#define TS_LEASE_FREE "-"

typedef struct ts_lease_view {
    uint64_t revision;           /* 0: the key is absent */
    char owner[TS_LEASE_OWNER_MAX];  /* "" or "-": released */
    int64_t seen_ms;             /* when this revision was first seen */
} ts_lease_view;

/* Records what a read returned (revision 0 = absent) at now_ms. */
void ts_lease_observe(ts_lease_view *view, uint64_t revision,
                      const char *owner, size_t owner_len, int64_t now_ms);
int ts_lease_is_free(const ts_lease_view *view);
/* Held by someone whose revision has not moved for ttl on our clock. */
int ts_lease_is_expired(const ts_lease_view *view, int64_t now_ms,
                        int64_t ttl_ms);
/* Whether `self` may try to take it now. */
int ts_lease_takeable(const ts_lease_view *view, const char *self,
                      int64_t now_ms, int64_t ttl_ms);
/* The owner's deadline after a renewal sent at sent_ms. */
int64_t ts_lease_deadline(int64_t sent_ms, int64_t ttl_ms);
int64_t ts_lease_renew_interval(int64_t ttl_ms);
/* Partitions each of `live` instances should hold: ceil(P / live). */
size_t ts_lease_fair_share(size_t partitions, size_t live);

#endif
