/* The per-user pipeline shared by tracesand and `tracesan sanitize`:
 * validation -> user lookup -> budget window -> mechanism -> outcome.
 *
 * Two clocks. Event time is the update's timestamp: it orders a user's
 * updates, and the watermark (the largest timestamp accepted so far) judges
 * idleness. Processing time is what the owner passes to
 * ts_pipeline_set_clock (the daemon: its wall clock, read once per input
 * message); the pipeline never reads a clock itself.
 *
 * A budget window of length W opens at an accepted update and closes (the
 * next one opens, or the user may be forgotten) only when both of its ends
 * have passed: event time reached its start + W, AND the clock reached its
 * opening + W and moved on since the window's last accepted update. The
 * event-time end keeps a file and a stream of it giving the same ledger;
 * the clock end makes the budget hold over real time whatever timestamps a
 * producer sends: windows open at least W apart and never two in one clock
 * instant, so any real-time interval of length T sees at most
 * 1 + ceil(T / W) windows' budget (docs/operations.md, "Budget over real
 * time"). A pipeline whose clock was never set (`tracesan sanitize`) runs
 * on event time alone.
 *
 * A user is bound to one profile per budget window: budgets of different
 * profiles are in different units and cannot be added, so switching profile
 * inside a window would multiply the user's privacy loss; it is refused with
 * REJECTION_REASON_PROFILE_CONFLICT.
 *
 * An idle user (watermark - last timestamp >= idle TTL) is forgotten only
 * once their budget window has closed: forgetting a ledger mid-window would
 * hand the user a fresh budget.
 */
#ifndef TRACESAN_ENGINE_PIPELINE_H
#define TRACESAN_ENGINE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "mechanisms/mechanism.h"

/* Same numbers as tracesan.v1.RejectionReason. */
typedef enum ts_reason {
    TS_REASON_NONE = 0,
    TS_REASON_MALFORMED = 1,
    TS_REASON_OVERSIZED = 2,
    TS_REASON_BATCH_TOO_LARGE = 3,
    TS_REASON_EMPTY_BATCH = 4,
    TS_REASON_MISSING_USER_ID = 5,
    TS_REASON_INVALID_USER_ID = 6,
    TS_REASON_INVALID_COORDINATE = 7,
    TS_REASON_INVALID_TIMESTAMP = 8,
    TS_REASON_TIME_WENT_BACKWARDS = 9,
    TS_REASON_UNKNOWN_PROFILE = 10,
    TS_REASON_PROFILE_CONFLICT = 11,
    TS_REASON_BUDGET_EXHAUSTED = 12,
    TS_REASON_USER_TABLE_FULL = 13,
    TS_REASON_INVALID_ACCURACY = 14,
    TS_REASON_INTERNAL_ERROR = 15,
    TS_REASON_OUTSIDE_REGION = 16,
    TS_REASON_TOO_OLD = 17,
    TS_REASON_DELTA_UNCERTIFIED = 18,
    TS_REASON_CADENCE_TOO_FAST = 19,
    TS_REASON_COUNT
} ts_reason;

/* Stable snake_case name ("budget_exhausted"), used in logs, CSV and metrics. */
const char *ts_reason_name(ts_reason reason);

typedef enum ts_on_exhausted {
    TS_ON_EXHAUSTED_DROP = 0,    /* publish a Rejection */
    TS_ON_EXHAUSTED_REPEAT = 1   /* republish the last sanitized point, free */
} ts_on_exhausted;

typedef struct ts_profile {
    char *name;
    const ts_mechanism_ops *ops;
    void *mech;                  /* from ops->profile_new */
    double window_budget;        /* ops->window_budget(mech) */
    int64_t window_ms;           /* budget_window_s * 1000 */
    ts_on_exhausted on_exhausted;
} ts_profile;

typedef struct ts_pipeline_limits {
    size_t max_users;            /* table capacity */
    int64_t idle_ttl_ms;
    size_t max_user_id_bytes;
} ts_pipeline_limits;

typedef struct ts_input {
    const char *user_id;         /* NUL-terminated; NULL or "" = missing */
    int64_t ts_ms;
    double lat;
    double lon;
    int has_accuracy;
    double accuracy_m;
    const char *profile;         /* NULL = default profile */
    /* From the wire (ts_codec_input_wire): the byte lengths of user_id and
     * profile, so an embedded NUL that the NUL-terminated strings hide is
     * refused. 0 = not known (CSV input has no embedded NULs). */
    int has_wire_lengths;
    size_t user_id_wire_len;
    size_t profile_wire_len;
} ts_input;

typedef struct ts_outcome {
    int sanitized;               /* 1: `report` is publishable; 0: rejected */
    const char *user_id;         /* borrowed from the input; "" if missing */
    int64_t ts_ms;
    const ts_profile *profile;   /* NULL when it could not be resolved */
    /* sanitized only */
    ts_report report;
    double eps_spent_window;
    double eps_remaining;
    int64_t window_start_ms;
    int repeated;
    /* rejected only; detail never contains coordinates */
    ts_reason reason;
    char detail[160];
} ts_outcome;

typedef struct ts_pipeline_stats {
    uint64_t updates;            /* updates seen by ts_pipeline_process */
    uint64_t sanitized;          /* includes repeats */
    uint64_t repeated;
    uint64_t rejected[TS_REASON_COUNT];
    uint64_t users_created;
    uint64_t users_expired;
    uint64_t budget_exhaustions; /* times a user hit exhaustion */
} ts_pipeline_stats;

typedef struct ts_pipeline ts_pipeline;

/* Takes ownership of `profiles` (an array from malloc, each profile's name
 * and mech freed by ts_pipeline_free). Borrows `rng`. */
/* Frees n profiles' mechanisms and names, and the array. */
void ts_profiles_free(ts_profile *profiles, size_t n_profiles);
/* Bytes of per-user state the profile's mechanism uses (0: stateless). */
size_t ts_profile_state_size(const ts_profile *profile);

ts_pipeline *ts_pipeline_new(ts_profile *profiles, size_t n_profiles,
                             size_t default_profile,
                             const ts_pipeline_limits *limits, ts_rng *rng);
void ts_pipeline_free(ts_pipeline *pipeline);

/* Never fails: every input yields exactly one outcome. Any internal error
 * yields a rejection (fail closed). */
void ts_pipeline_process(ts_pipeline *pipeline, const ts_input *input,
                         ts_outcome *out);

/* Count a rejection that happened before an update could be parsed
 * (malformed, oversized, ...), so all reasons live in one set of counters. */
void ts_pipeline_count_rejection(ts_pipeline *pipeline, ts_reason reason);

/* The processing time, in ms since the epoch (the daemon: its wall clock
 * when it reads an input message, and at each expiry sweep). It only ever
 * moves forward: a clock stepped back holds windows open longer, never
 * shorter. Until it is first set the pipeline runs on event time alone. */
void ts_pipeline_set_clock(ts_pipeline *pipeline, int64_t now_ms);

/* A time before which no update will be accepted any more (the daemon:
 * its wall clock minus input.max_backdate_s). Expiry then treats windows
 * that ended before it as closed even if no accepted update has moved the
 * event-time watermark that far. Only ever moves forward. */
void ts_pipeline_set_expiry_floor(ts_pipeline *pipeline, int64_t floor_ms);

/* Forget up to max_scan idle users whose budget window has closed.
 * Returns how many were forgotten. */
size_t ts_pipeline_expire(ts_pipeline *pipeline, size_t max_scan);

/* Remember that profile `name` is configured but disabled (its model is
 * the empty string), so updates addressed to it are rejected as
 * unknown_profile with a detail that says why rather than "unknown". The
 * name must not be one of the pipeline's profiles. 0, or -1 on error. */
int ts_pipeline_add_disabled_profile(ts_pipeline *pipeline, const char *name);
/* 1 when `name` was added with ts_pipeline_add_disabled_profile. */
int ts_pipeline_profile_disabled(const ts_pipeline *pipeline,
                                 const char *name);

size_t ts_pipeline_user_count(const ts_pipeline *pipeline);
/* Mechanism state of all users, in bytes: each user has the state of the
 * profile it is bound to, whatever else is configured. As the profiles
 * size it, and as held in memory (up to each block's last non-zero byte,
 * in 64-byte steps). */
size_t ts_pipeline_state_bytes(const ts_pipeline *pipeline);
size_t ts_pipeline_state_held_bytes(const ts_pipeline *pipeline);
const ts_pipeline_stats *ts_pipeline_get_stats(const ts_pipeline *pipeline);
const ts_profile *ts_pipeline_find_profile(const ts_pipeline *pipeline,
                                           const char *name);
const ts_profile *ts_pipeline_default_profile(const ts_pipeline *pipeline);
size_t ts_pipeline_profile_count(const ts_pipeline *pipeline);
const ts_profile *ts_pipeline_profile_at(const ts_pipeline *pipeline,
                                         size_t index);

/* ------------------------------------------------------- durable state
 *
 * The pipeline's user table is a cache in front of an optional state
 * backend (the LMDB store in the daemon; anything in tests). On a miss the
 * pipeline asks the backend for the user's record before treating the user
 * as new, so a restart or an expiry never hands out a fresh budget. Users
 * whose ledger changed are marked dirty; the owner of the pipeline writes
 * them (ts_pipeline_save_dirty) in one transaction at the end of each group
 * of messages, commits, and only then publishes the group's outcomes.
 * A dirty user is never expired before it has been saved. */

/* Everything persisted about a user. No raw coordinate: the last point is
 * the last *sanitized* (published) one, and mechanism state may only hold
 * published-derived values (see ts_mechanism_ops.release). */
typedef struct ts_user_record {
    int has_window;
    const char *profile;         /* bound profile's name (survives reloads) */
    int64_t window_start_ms;
    int64_t window_ms;
    /* Processing clock when the window opened; 0 = not known (a record of
     * an older version, or written by a pipeline without a clock). A
     * clocked pipeline restoring an unknown one takes its own clock at the
     * restore instead (the latest the window can have opened) and saves
     * the user again. */
    int64_t window_opened_ms;
    double spent;
    int64_t last_ts_ms;
    int has_last;
    double last_lat;
    double last_lon;
    /* Mechanism state of the bound profile: state_len bytes (that
     * profile's user_state_size), of which the first state_stored_len are
     * at `state` and the rest are zero (a decoded record can be encoded
     * again as it is). The store keeps only up to the last non-zero byte:
     * a delta-location-set belief fills a few hundred bytes of a block
     * sized for its capacity. */
    const void *state;
    size_t state_len;
    size_t state_stored_len;     /* <= state_len */
} ts_user_record;

typedef struct ts_state_backend {
    void *ctx;
    /* 1 and fills `record` when the user exists (pointers in it stay valid
     * until the next call), 0 when absent, -1 on error. */
    int (*load)(void *ctx, const char *user_id, size_t id_len,
                ts_user_record *record);
    /* 0 on success, -1 on error. */
    int (*save)(void *ctx, const char *user_id, size_t id_len,
                const ts_user_record *record);
} ts_state_backend;

/* Borrowed; NULL detaches (in-memory only, nothing is marked dirty). */
void ts_pipeline_set_state_backend(ts_pipeline *pipeline,
                                   const ts_state_backend *backend);

size_t ts_pipeline_dirty_count(const ts_pipeline *pipeline);

/* Pass every dirty user to backend->save. Returns 0 when all saves
 * succeeded, -1 at the first failure; the users stay dirty either way. */
int ts_pipeline_save_dirty(ts_pipeline *pipeline);
/* After a successful save: the dirty users become in flight (clean, but
 * not expirable, so that nobody reads an older record back from the store)
 * until ts_pipeline_mark_durable, once their commit is done. One batch is
 * in flight at a time (state/store_writer.h). */
void ts_pipeline_mark_in_flight(ts_pipeline *pipeline);
void ts_pipeline_mark_durable(ts_pipeline *pipeline);

#endif
