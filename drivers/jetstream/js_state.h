/* The JetStream driver's state, shared by its files (internal to
 * drivers/jetstream/). They call each other one way:
 *
 *   js_metrics <- js_ownership <- js_changelog <- js_restore <- js_commit
 *       <- js_group <- js_partition;   js_ownership <- js_lease
 *   jetstream_driver (the table, the threads) calls them all.
 *
 * js_commit and js_group report what happened (js_verdict); js_partition
 * decides (lose the partition, rebuild it).
 *
 * Threads: the JetStream thread runs every owned partition's groups
 * (fetch, group body, commit, publish, ack) and every change of a
 * partition's state; the lease thread makes every lease-bucket call;
 * restore workers rebuild partitions handed to them; libnats' threads
 * deliver acknowledgements (recorded under flight_lock, acted on by the
 * JetStream thread) and standby copies' records.
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
#include "drivers/jetstream/sub_graveyard.h"
#include "state/changelog.h"

#define ERR_MAX 512
/* The input consumers' AckWait: an input delivered and not acknowledged
 * within it is delivered again. */
#define TS_JS_ACK_WAIT_MS 60000
#define SUBJECT_MAX 96
#define MAX_INSTANCES 256
/* The most groups a partition has in flight (nats.groups_in_flight). */
#define MAX_FLIGHTS 16
#define MAX_RESTORE_WORKERS 64
/* Commit latencies kept for the percentiles logged at exit. */
#define LATENCY_SAMPLES 65536
#define N_COMMIT_BOUNDS 12

typedef enum part_state {
    PART_IDLE = 0,       /* not ours */
    PART_RESTORE,        /* leased, being rebuilt by a worker */
    PART_ACTIVE,         /* leased and consuming */
} part_state;

/* Counters the loop renders; written under the driver's lock. */
typedef struct part_stats {
    int owned;
    uint64_t lag;                /* inputs not acknowledged */
    uint64_t messages;
    uint64_t updates;
    uint64_t commits;
    double commit_seconds_sum;
    uint64_t takeovers;
    uint64_t fenced;
    uint64_t republished;
    uint64_t duplicates;         /* inputs a producer had sent before */
    uint64_t reused;             /* new inputs at a committed sequence */
    size_t users;                /* in its pipeline now */
    size_t in_flight;            /* groups between fetch and input ack */
} part_stats;

/* One group of a partition on its way through the commit path:
 *
 *   OPEN        inputs fetched and run through the group body; more may
 *               join while the group before is being appended
 *   APPENDING   its record(s) on their way to the changelog, one after
 *               the other, each expecting the one before
 *   PUBLISHING  its record stored by the quorum: its outcomes on their
 *               way to TRACESAN_OUT
 *
 * and retired (its inputs acknowledged) once its outcomes are stored and
 * every group before it retired. The fields under "callbacks" are
 * written by libnats' threads under the driver's flight_lock. */
typedef enum flight_stage {
    FLIGHT_FREE = 0,
    FLIGHT_OPEN,
    FLIGHT_APPENDING,
    FLIGHT_PUBLISHING,
} flight_stage;

typedef struct js_flight {
    flight_stage stage;
    ts_changelog_builder builder;    /* users, then outcomes */
    /* Each user the group saved, with the record the map held before
     * (u16 id length, id, u32 length or UINT32_MAX for none, record): a
     * group that is never committed is taken back out of the map. */
    ts_buf undo;
    ts_buf records;                  /* the split record, length-prefixed */
    ts_buf seqs;                     /* where each stored one went (u64) */
    size_t next_record;              /* offset of the next to append */
    size_t sending_record;           /* offset of the one on its way */
    int append_attempts;             /* sends of the one on its way */
    int64_t resend_at_ms;            /* 0: not waiting to send again */
    size_t records_left;
    uint64_t last_input_seq;         /* the group's last input */
    uint64_t first_input_seq;        /* processed (0: none) */
    natsMsg **inputs;                /* every input, in delivery order */
    size_t n_inputs, inputs_cap;
    size_t input_bytes;
    size_t n_outcomes;
    double started;                  /* first fetch, monotonic s */
    /* callbacks: */
    int append_result;               /* APPEND_* below */
    uint64_t append_expect;          /* the sequence the append expects */
    uint64_t append_seq;             /* where it was stored */
    size_t outcomes_pending;
    int publish_failed;
    int64_t published_ms;            /* when its outcomes were sent */
    /* Each outcome's key, ascending, and whether the stream acknowledged
     * it: a late answer to an earlier send counts once, whichever send it
     * answers. */
    struct js_outcome_key *outcome_keys;
    unsigned char *outcome_acked;
    size_t outcome_cap;
    int publish_rounds;              /* sends of the group's outcomes */
} js_flight;

typedef struct js_outcome_key {
    uint64_t input_seq;
    uint32_t index;
} js_outcome_key;

enum { APPEND_PENDING = 0, APPEND_STORED, APPEND_FENCED, APPEND_FAILED };

typedef struct partition {
    uint32_t index;
    part_state state;
    /* Shared with the lease thread, under lease_lock: */
    int held;                    /* the lease thread renews it */
    int lost;                    /* a renewal found someone else's */
    int granted;                 /* acquired; the JetStream thread starts
                                    its rebuild */
    int hand_back;               /* above the fair share: finish what is
                                    in flight, then release */
    uint64_t release_rev;        /* to set free at this revision (0 none) */
    uint64_t lease_rev;          /* our revision while we hold it */
    uint64_t epoch;              /* revision at acquisition */
    int64_t deadline_ms;         /* stop processing at this monotonic ms */
    ts_lease_view view;          /* the lease as last seen (lease thread) */
    /* The JetStream thread's: */
    ts_pipeline *pipeline;
    ts_config *config;           /* a reference: its profiles' source */
    ts_pipeline_stats counted;   /* its pipeline's stats already summed */
    ts_state_backend backend;
    natsSubscription *sub;
    int64_t input_seen_ms;       /* last fetch that returned input (or
                                    consumer check) */
    int64_t delivered_ms;        /* last fetch that returned input, or
                                    the consumer's creation */
    int64_t next_fetch_ms;       /* an idle partition is polled less */
    int64_t idle_backoff_ms;
    uint64_t last_delivery;      /* the consumer's sequence last seen */
    int snapshot_due;
    js_flight flights[MAX_FLIGHTS];  /* a ring, oldest first */
    size_t head, count;
    js_flight *appending;        /* the one whose record is on its way */
    uint64_t chain_seq;          /* the changelog sequence the next append
                                    expects: the last record stored */
    uint64_t fetched_seq;        /* the last input fetched */
    int rebuild_due;             /* a delivery gap: rebuild once drained */
    /* Its users (the map holds the newest record of each, undone for
     * groups that fail), the last changelog sequence (the next append
     * expects it) and the last committed input. Owned by the JetStream
     * thread while ACTIVE, by a worker while RESTORE, by the standby
     * subscription (under standby_lock) while IDLE. */
    ts_changelog_replica replica;
    int replica_broken;          /* an undo ran out of memory: the
                                    replica is not the changelog's prefix
                                    any more (read it all again) */
    pthread_mutex_t standby_lock;
    natsSubscription *standby;   /* tails the changelog while IDLE */
    int standby_live;            /* its callback may apply */
    /* A worker's rebuild: queued, then its result (under restore_lock). */
    int restore_queued;
    int restore_running;
    int restore_done;
    int restore_result;          /* 0, -1 retry, -2 fenced out */
    int64_t retry_at_ms;
    struct ts_driver *mode;
} partition;

/* A lease renewal of the current round (the lease thread's, answers
 * written by libnats' callback under lease_lock). */
typedef struct js_renewal {
    int state;
    uint64_t expect;             /* the revision the update compares */
    uint64_t revision;           /* the new one */
    int64_t sent_ms;
} js_renewal;

typedef struct instance_view {
    char name[TS_LEASE_OWNER_MAX];
    uint64_t revision;
    int64_t seen_ms;
} instance_view;

/* A restore worker: its own JetStream context, so that waiting for its
 * republished outcomes waits for nothing else. */
typedef struct js_worker {
    struct ts_driver *mode;
    pthread_t thread;
    int started;
    jsCtx *js;
    pthread_mutex_t lock;
    uint64_t publish_errors;     /* counted by libnats' callback */
} js_worker;

struct ts_driver {
    ts_driver_env env;
    ts_pipeline *template;       /* env->pipeline: whose profiles are used */
    ts_config *adopted;          /* a reference: the last reload applied */
    ts_config *pending;          /* a reference, under lock: to apply */
    const ts_settings *settings;
    const ts_nats_settings *nats;
    char self[TS_LEASE_OWNER_MAX];
    /* Three connections, so that nothing waits in line behind the bulk
     * of outcome publishes on the server's side: the data path's
     * (fetches, outcomes, acknowledgements, rebuilds), the commit path's
     * appends, and the lease thread's renewals. */
    ts_js_conn conn;
    ts_js_conn commit_conn;
    ts_js_conn lease_conn;
    size_t max_payload;
    int input_work_queue;        /* TRACESAN_IN drops what is acknowledged */
    int64_t next_lag_ms;         /* when the backlog is read again */
    uint32_t n_partitions;
    partition *parts;
    /* The commit path: appends and outcome publishes, each on a context
     * whose acknowledgement callback records results under flight_lock
     * and wakes the JetStream thread. */
    jsCtx *append_js;
    jsCtx *publish_js;
    pthread_mutex_t flight_lock;
    pthread_cond_t flight_cond;
    uint64_t wakeups;            /* under flight_lock */
    /* Leases: the lease thread alone calls the bucket. */
    pthread_mutex_t lease_lock;
    kvStore *lease_kv;
    jsCtx *lease_js;             /* answers awaited ttl/8 at most */
    pthread_t lease_thread;
    int lease_thread_started;
    volatile int lease_stop;
    volatile int leaving;        /* shutting down: acquire nothing more,
                                    keep no standby copies */
    int64_t last_lease_ok_ms;    /* under lease_lock */
    instance_view instances[MAX_INSTANCES];  /* the lease thread's */
    js_renewal *renewals;        /* per partition */
    size_t n_instances;
    /* Rebuilds. */
    pthread_mutex_t restore_lock;
    pthread_cond_t restore_cond;
    js_worker workers[MAX_RESTORE_WORKERS];
    size_t n_workers;
    volatile int restore_stop;
    /* the group body, run by the JetStream thread */
    ts_group group;
    unsigned char *encode_buf;
    size_t encode_cap;
    js_flight *filling;          /* the open group being built */
    /* The loop's observer, through a relay: the JetStream thread is not
     * the loop's. */
    ts_observer_relay *relay;
    /* Test hook (TRACESAND_TEST_EXIT_BEFORE_PUBLISH=N): the process exits
     * between the Nth record stored with other groups in flight and its
     * publish, as a kill -9 there would. 0: off. */
    uint64_t exit_before_publish;
    uint64_t commits_seen;
    /* Test hook (TRACESAND_TEST_GAP_EVERY=N): every Nth fetch that brings
     * input takes its first message as a delivery lost on its way, as a
     * server that went away with a pull request's answer does. 0: off. */
    uint64_t gap_every;
    uint64_t fetches_seen;
    /* Test hook (TRACESAND_TEST_DROP_APPEND_ANSWER_EVERY=N): every Nth
     * changelog append the server stored is taken as unanswered, so the
     * record is sent again and the refusal settled (js_commit.c). 0: off.
     * Counted under flight_lock. */
    /* The lease thread's: after a take failed, none before this. */
    int64_t take_retry_ms;
    /* Test hook (TRACESAND_TEST_FAIL_TAKES=N): the first N takes of a
     * lease fail as if the bucket had no leader. 0: off. */
    uint64_t fail_takes;
    uint64_t drop_append_every;
    uint64_t appends_answered;
    /* Test hook (TRACESAND_TEST_DROP_OUTCOME_ANSWER_EVERY=N): every Nth
     * outcome the stream stored is taken as unanswered, so the group's
     * unacknowledged outcomes are sent again. 0: off. Under flight_lock. */
    uint64_t drop_outcome_every;
    uint64_t outcomes_answered;
    /* Test hook (TRACESAND_TEST_DROP_RENEWAL_ANSWER_EVERY=N): every Nth
     * lease renewal the bucket stored is taken as unanswered, so the
     * next one is refused and settled (js_lease.c). 0: off. Under
     * lease_lock. */
    uint64_t drop_renewal_every;
    uint64_t renewals_answered;
    /* Subscriptions on the live connections, destroyed later. */
    ts_sub_graveyard graveyard;
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
    /* PRIVIC loops and density estimates, cluster-wide (js_population.h);
     * NULL when no profile keeps an estimate. */
    struct ts_js_population *population;
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
/* 0 when the lease thread lost the lease or its deadline passed. */
int ts_js_lease_ok(ts_jetstream *m, partition *p);
/* Wakes the JetStream thread (an acknowledgement, a rebuild done). */
void ts_js_wake(ts_jetstream *m);

/* What a step of a partition's groups asks of js_partition. */
typedef enum js_verdict {
    JS_IDLE = 0,         /* nothing moved */
    JS_MOVED,            /* something moved */
    JS_STOP,             /* the lease is lost or late: stop */
    JS_FENCED,           /* another owner appended: give it up */
    JS_REBUILD,          /* an outcome unknown: rebuild from the changelog */
    JS_GIVE_UP,          /* a record that cannot be made: hand it back */
} js_verdict;

/* js_changelog.c: the partition's changelog and outputs. */
int ts_js_backend_load(void *ctx, const char *user_id, size_t id_len,
                       ts_user_record *record);
int ts_js_backend_save(void *ctx, const char *user_id, size_t id_len,
                       const ts_user_record *record);
/* Takes a group's users back out of the map (it was never committed). */
void ts_js_undo(partition *p, js_flight *f);
/* Sends one outcome to TRACESAN_OUT asynchronously under its message id
 * "<partition>.<input seq>.<index>" (the answer goes to js's handler). */
natsStatus ts_js_publish_outcome(jsCtx *js, uint32_t partition,
                                 uint64_t input_seq, uint32_t index,
                                 const char *subject, size_t subject_len,
                                 const void *payload, size_t len);
/* Publishes a committed record's outcomes on `js` and waits for every
 * acknowledgement (errors counted in *errors under *lock by the context's
 * callback); then the observer sees them. 0, or -1. */
int ts_js_publish_outcomes_sync(ts_jetstream *m, jsCtx *js,
                                pthread_mutex_t *lock, uint64_t *errors,
                                uint32_t partition, const void *record,
                                size_t len);
/* Tells the observer about outcomes TRACESAN_OUT stored. */
void ts_js_announce_published(ts_jetstream *m, const void *record,
                              size_t len, size_t published);
/* Appends one record to the partition's changelog on `js` and waits,
 * fenced on the sequence the replica last saw. 1 appended, 0 fenced out
 * (someone else wrote), -1 unknown (it may or may not be stored). */
int ts_js_append_sync(ts_jetstream *m, jsCtx *js, partition *p,
                      const void *record, size_t len, int rollup);
/* The record being built as the group body's sink. */
typedef struct ts_js_sink {
    ts_jetstream *m;
    js_flight *flight;
    uint32_t partition;
    uint64_t input_seq;
    uint32_t index;
} ts_js_sink;
int ts_js_sink_put(void *arg, const void *topic, size_t topic_len,
                   const void *payload, size_t len);

/* js_commit.c: the commit path of a partition's groups, in flight. */
int ts_js_commit_open(ts_jetstream *m, char *err, size_t errlen);
void ts_js_commit_close(ts_jetstream *m);
/* Moves p's groups on: records stored -> outcomes published; outcomes
 * stored -> inputs acknowledged; the open group appended when nothing
 * else is. *why says what went wrong when it is not JS_IDLE/JS_MOVED. */
js_verdict ts_js_advance(ts_jetstream *m, partition *p, const char **why);
/* The group being filled, opened when there is room; NULL when the
 * partition has as many groups in flight as allowed. */
js_flight *ts_js_open_flight(ts_jetstream *m, partition *p);
/* Drops every group (inputs unacknowledged; uncommitted ones undone). */
void ts_js_drop_flights(ts_jetstream *m, partition *p);
/* Waits until libnats' callbacks or a restore worker moved something on
 * (m->wakeups is no longer `seen`), wait_ms at most. */
void ts_js_wait_news(ts_jetstream *m, uint64_t seen, long wait_ms);

/* js_restore.c: rebuilding partitions, on workers, and warm standby
 * copies. */
int ts_js_restore_open(ts_jetstream *m, char *err, size_t errlen);
void ts_js_restore_close(ts_jetstream *m);
/* Hands p (PART_RESTORE) to a worker. */
void ts_js_queue_restore(ts_jetstream *m, partition *p);
/* A worker's result for p, once: 1 and *result, else 0. */
int ts_js_restore_result(ts_jetstream *m, partition *p, int *result);
/* Starts or stops tailing p's changelog (nats.standby). */
void ts_js_standby_start(ts_jetstream *m, partition *p);
void ts_js_standby_stop(partition *p);
/* Every few seconds: copies that stopped (or never started) again. */
void ts_js_standby_keep(ts_jetstream *m);

/* js_group.c: filling a partition's open group (fetch, group body),
 * snapshots, expiry, reloads, the backlog. 1 when it had input. */
int ts_js_fill(ts_jetstream *m, partition *p);
js_verdict ts_js_snapshot(ts_jetstream *m, partition *p, const char **why);
void ts_js_expire_users(ts_jetstream *m);
void ts_js_apply_pending_reload(ts_jetstream *m);
/* Makes p's pipeline after a rebuild: 0, or -1 (logged). */
int ts_js_make_pipeline(ts_jetstream *m, partition *p);
/* Reads the held partitions' backlog for /metrics, once a second. */
void ts_js_refresh_lag(ts_jetstream *m);

/* js_partition.c: a partition's life on the JetStream thread. */
/* Frees the pipeline, the subscription and every group in flight (their
 * inputs unacknowledged, the uncommitted ones taken back out of the
 * map). The replica stays as the changelog has it. */
void ts_js_drop_state(ts_jetstream *m, partition *p);
/* Stops processing `p` now; with release the lease is handed back. The
 * replica is kept warm when nats.standby is on. */
void ts_js_lose_partition(ts_jetstream *m, partition *p, const char *why,
                          int release);
/* Lost or out of time: stops. 1 when it was stopped. */
int ts_js_enforce_lease(ts_jetstream *m, partition *p);
/* Acquired -> rebuilt -> consuming. */
void ts_js_take_over(ts_jetstream *m, partition *p);
/* One pass over an active partition; 1 when it moved. */
int ts_js_serve(ts_jetstream *m, partition *p);
/* Waits (bounded) until every owned partition's groups retired. */
void ts_js_drain(ts_jetstream *m, int64_t patience_ms);

/* js_lease.c: the lease thread (renewals, the acquiring side, releases,
 * instance heartbeats). */
int ts_js_lease_open(ts_jetstream *m, char *err, size_t errlen);
void *ts_js_lease_thread_main(void *arg);
int64_t ts_js_lease_silent_ms(ts_jetstream *m);

#endif
