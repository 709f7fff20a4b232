/* The JetStream driver's state, shared by its files (internal to
 * drivers/jetstream/). They call each other one way:
 *
 *   js_metrics  <- js_ownership <- js_changelog <- js_restore, js_group
 *                               <- js_lease
 *   jetstream_driver (the table, the threads) calls them all.
 *
 * Each owned partition has its own pipeline and user map, so dropping a
 * partition drops exactly its users and a new owner rebuilds them from
 * the changelog (state/changelog.h). Every partition's pipeline shares the
 * profiles of the template pipeline the caller built (the mechanisms,
 * their models and channels, are built once). */
#ifndef TRACESAN_DRIVERS_JETSTREAM_JS_STATE_H
#define TRACESAN_DRIVERS_JETSTREAM_JS_STATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "datapath/driver.h"
#include "datapath/group.h"
#include "datapath/observer_relay.h"
#include "drivers/jetstream/jetstream_setup.h"
#include "drivers/jetstream/nats_settings.h"
#include "drivers/jetstream/partition_lease.h"
#include "state/changelog.h"

#define ERR_MAX 512
#define SUBJECT_MAX 96
#define MAX_INSTANCES 256
/* Commit latencies kept for the percentiles logged at exit. */
#define LATENCY_SAMPLES 65536
#define N_COMMIT_BOUNDS 12

typedef enum part_state {
    PART_IDLE = 0,       /* not ours */
    PART_RESTORE,        /* leased, state not rebuilt yet */
    PART_ACTIVE,         /* leased and consuming */
} part_state;

/* Counters the loop renders; written under the driver's lock. */
typedef struct part_stats {
    int owned;
    uint64_t lag;                /* messages pending in the consumer */
    uint64_t messages;
    uint64_t updates;
    uint64_t commits;
    double commit_seconds_sum;
    uint64_t takeovers;
    uint64_t fenced;
    uint64_t republished;
    size_t users;                /* in its pipeline now */
} part_stats;

typedef struct partition {
    uint32_t index;
    part_state state;
    ts_lease_view view;          /* the lease as last read */
    /* Shared with the lease thread, under lease_lock: */
    int held;                    /* the lease thread renews it */
    int lost;                    /* a renewal found someone else's */
    uint64_t lease_rev;          /* our revision while we hold it */
    uint64_t epoch;              /* revision at acquisition */
    int64_t deadline_ms;         /* stop processing at this monotonic ms */
    ts_pipeline *pipeline;
    /* What its pipeline's profiles are shared from: a reference. */
    ts_config *config;
    ts_pipeline_stats counted;   /* its pipeline's stats already summed */
    /* Its users, the last changelog sequence (the fence: the next append
     * expects it), the last committed input. */
    ts_changelog_replica replica;
    ts_state_backend backend;
    natsSubscription *sub;
    int64_t retry_at_ms;         /* a failed restore waits until then */
    int64_t input_seen_ms;       /* last fetch that returned input */
    uint64_t last_delivery;      /* the consumer's sequence last seen */
    struct ts_driver *mode;
} partition;

typedef struct instance_view {
    char name[TS_LEASE_OWNER_MAX];
    uint64_t revision;
    int64_t seen_ms;
} instance_view;

struct ts_driver {
    ts_driver_env env;
    ts_pipeline *template;       /* env->pipeline: whose profiles are used */
    ts_config *adopted;          /* a reference: the last reload applied */
    ts_config *pending;          /* a reference, under lock: to apply */
    const ts_settings *settings;
    const ts_nats_settings *nats;
    char self[TS_LEASE_OWNER_MAX];
    ts_js_conn conn;
    kvStore *kv;
    size_t max_payload;
    int input_work_queue;        /* TRACESAN_IN drops what is acknowledged */
    int64_t next_lag_ms;         /* when the backlog is read again */
    uint32_t n_partitions;
    partition *parts;
    instance_view instances[MAX_INSTANCES];
    size_t n_instances;
    int64_t next_lease_ms;
    int64_t last_lease_ok_ms;    /* under lease_lock */
    /* Renewals and the instance heartbeat run on a thread of their own, so
     * a data-path call stalled by a cluster electing a leader (a rebuild
     * can take seconds then) never lets a lease lapse by itself. */
    pthread_mutex_t lease_lock;
    jsCtx *lease_js;             /* answers awaited ttl/8 at most */
    kvStore *lease_kv;
    pthread_t lease_thread;
    int lease_thread_started;
    volatile int lease_stop;
    /* the group being built: the body's state and its sink's record */
    ts_group group;
    ts_changelog_builder builder;
    ts_buf record;
    unsigned char *encode_buf;
    size_t encode_cap;
    /* The loop's observer, through a relay: the JetStream thread is not
     * the loop's. */
    ts_observer_relay *relay;
    /* async publish failures reported by libnats' callback thread */
    pthread_mutex_t publish_lock;
    uint64_t publish_errors;
    /* shared with the loop */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    volatile int stop;
    part_stats *stats;
    ts_driver_stats totals;      /* under lock */
    uint64_t commit_buckets[N_COMMIT_BOUNDS + 1];
    uint64_t commit_count;
    double commit_sum;
    double *latencies;
    size_t n_latencies;
    int connected;
    char health[256];            /* "" = healthy */
    struct event *tick_event;
};

typedef struct ts_driver ts_jetstream;

/* js_metrics.c: counters under the lock, and their text. */
void ts_js_observe_commit(ts_jetstream *m, partition *p, double seconds);
/* Adds what p's pipeline counted since the last call to the totals. */
void ts_js_count_pipeline(ts_jetstream *m, partition *p);
int ts_js_render_metrics(ts_jetstream *m, ts_buf *out);
void ts_js_log_latencies(ts_jetstream *m);

/* js_ownership.c: clocks, names, and holding or letting go of a
 * partition. */
int64_t ts_js_mono_ms(void);
double ts_js_mono_s(void);
/* How long one publish may wait for JetStream. */
int64_t ts_js_wait_ms(const ts_jetstream *m);
void ts_js_lease_key(char *buf, size_t size, uint32_t p);
void ts_js_consumer_name(char *buf, size_t size, uint32_t p);
int ts_js_connected(const ts_jetstream *m);
void ts_js_set_health(ts_jetstream *m, const char *reason);
void ts_js_log_lease(const char *what, const partition *p, const char *why);
void ts_js_drop_state(ts_jetstream *m, partition *p);
/* Stops processing `p` now; with release the lease is handed back. */
void ts_js_lose_partition(ts_jetstream *m, partition *p, const char *why,
                          int release);
int ts_js_lease_ok(ts_jetstream *m, partition *p);
/* Lost or out of time: stops. 1 when it was stopped. */
int ts_js_enforce_lease(ts_jetstream *m, partition *p);

/* js_changelog.c: the partition's changelog and outputs. */
int ts_js_backend_load(void *ctx, const char *user_id, size_t id_len,
                       ts_user_record *record);
int ts_js_backend_save(void *ctx, const char *user_id, size_t id_len,
                       const ts_user_record *record);
/* Publishes a committed record's outcomes and waits for every
 * acknowledgement; then the observer sees them. 0, or -1. */
int ts_js_publish_outcomes(ts_jetstream *m, uint32_t partition,
                           const void *record, size_t len);
/* 1 appended, 0 fenced out, -1 unknown. */
int ts_js_append_record(ts_jetstream *m, partition *p, const ts_buf *record,
                        int rollup);
/* The record being built as the group body's sink. */
typedef struct ts_js_sink {
    ts_jetstream *m;
    uint32_t partition;
    uint64_t input_seq;
    uint32_t index;
} ts_js_sink;
int ts_js_sink_put(void *arg, const void *topic, size_t topic_len,
                   const void *payload, size_t len);

/* js_restore.c: rebuilds a partition from its changelog. 0; -1 (retry);
 * -2 fenced out (give it up). */
int ts_js_restore_partition(ts_jetstream *m, partition *p);

/* js_group.c: one group of one partition (fetch, group body, commit,
 * publish, ack); 1 when it had input. */
int ts_js_run_group(ts_jetstream *m, partition *p);
/* Reads the held partitions' backlog for /metrics, once a second. */
void ts_js_refresh_lag(ts_jetstream *m);
void ts_js_expire_users(ts_jetstream *m);
void ts_js_apply_pending_reload(ts_jetstream *m);

/* js_lease.c: the lease thread and the acquiring side. */
void *ts_js_lease_thread_main(void *arg);
void ts_js_lease_tick(ts_jetstream *m);
int64_t ts_js_lease_silent_ms(ts_jetstream *m);

#endif
