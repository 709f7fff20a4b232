/* The per-user pipeline shared by tracesand and `tracesan sanitize`:
 * validation -> user lookup -> budget window -> mechanism -> outcome.
 *
 * Time is event time throughout (the update's timestamp), so a file run
 * through the CLI and the same stream through the daemon give the same
 * ledger. The pipeline's clock for expiry is the watermark: the largest
 * timestamp accepted so far.
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
#ifndef TRACESAN_DAEMON_PIPELINE_H
#define TRACESAN_DAEMON_PIPELINE_H

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

/* Forget up to max_scan idle users whose budget window has closed.
 * Returns how many were forgotten. */
size_t ts_pipeline_expire(ts_pipeline *pipeline, size_t max_scan);

size_t ts_pipeline_user_count(const ts_pipeline *pipeline);
const ts_pipeline_stats *ts_pipeline_get_stats(const ts_pipeline *pipeline);
const ts_profile *ts_pipeline_find_profile(const ts_pipeline *pipeline,
                                           const char *name);
const ts_profile *ts_pipeline_default_profile(const ts_pipeline *pipeline);
size_t ts_pipeline_profile_count(const ts_pipeline *pipeline);
const ts_profile *ts_pipeline_profile_at(const ts_pipeline *pipeline,
                                         size_t index);

#endif
