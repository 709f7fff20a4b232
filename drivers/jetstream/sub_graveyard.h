/* Subscriptions let go of while their connection lives on.
 *
 * libnats 3.4.1 (Debian's) looks a subscription up for an incoming message
 * under the connection's lock, lets go of that lock, and only then takes
 * the subscription's own lock, without holding a reference in between.
 * natsSubscription_Destroy on another thread in that gap frees the
 * subscription under the reader thread's feet (seen once in about twenty
 * ASan runs: a SEGV in natsConn_processMsg at shutdown, while standby
 * copies' records were still arriving). Newer libnats retains the
 * subscription there.
 *
 * So a subscription is unsubscribed at once (no message is routed to it
 * from then on) and destroyed only later: on a sweep once it has been
 * unsubscribed for a while (the reader's gap is a few instructions), or
 * after every connection was closed (the reader threads joined). */
#ifndef TRACESAN_DRIVERS_JETSTREAM_SUB_GRAVEYARD_H
#define TRACESAN_DRIVERS_JETSTREAM_SUB_GRAVEYARD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

typedef struct ts_sub_grave {
    natsSubscription *sub;
    int64_t buried_ms;
} ts_sub_grave;

typedef struct ts_sub_graveyard {
    pthread_mutex_t lock;
    ts_sub_grave *graves;
    size_t n, cap;
} ts_sub_graveyard;

void ts_sub_graveyard_init(ts_sub_graveyard *g);
/* Unsubscribes `sub` now and keeps it for a later destroy. With g NULL,
 * or no memory for the entry, it is destroyed at once (the old race, for
 * callers whose connection ends with them). */
void ts_sub_graveyard_bury(ts_sub_graveyard *g, natsSubscription *sub);
/* Destroys what was buried at least `age_ms` ago (monotonic clock). */
void ts_sub_graveyard_sweep(ts_sub_graveyard *g, int64_t age_ms);
/* Destroys everything: only once the connections are closed. */
void ts_sub_graveyard_free(ts_sub_graveyard *g);

#endif
