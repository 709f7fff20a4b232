#include "engine/pipeline.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/users.h"
#include "geometry/geo.h"

/* Largest accepted timestamp: 9999-12-31T23:59:59.999Z. Bounding it keeps
 * window arithmetic (start + window length) far from int64 overflow. */
#define MAX_TIMESTAMP_MS INT64_C(253402300799999)

/* How many users one insertion into a full table may examine while looking
 * for an expirable user: bounds the cost a flood of new ids can cause. */
#define FULL_TABLE_EXPIRE_SCAN 64

/* Profile names are echoed in rejection details only when they are short
 * printable ASCII, so a detail never carries control bytes or invalid UTF-8
 * to logs or to consumers of the feed. */
#define MAX_ECHOED_NAME 64

struct ts_pipeline {
    ts_profile *profiles;
    size_t n_profiles;
    size_t default_profile;
    ts_pipeline_limits limits;
    ts_rng *rng;
    ts_user_table *users;
    size_t state_size;
    unsigned char *scratch_state;   /* release runs on a copy: see process */
    int64_t watermark_ms;
    int64_t expiry_floor_ms;     /* wall-clock bound on future event times */
    int64_t clock_ms;            /* processing time (ts_pipeline_set_clock) */
    int clocked;                 /* 0: never set, windows on event time only */
    ts_pipeline_stats stats;
    char **disabled;                /* names of profiles without a model */
    size_t n_disabled;
    const ts_state_backend *backend;
    ts_user **dirty;                /* users to save before publishing */
    size_t n_dirty;
    size_t dirty_capacity;
    ts_user **in_flight;            /* saved in the commit under way */
    size_t n_in_flight;
    size_t in_flight_capacity;
};

static const char *const reason_names[TS_REASON_COUNT] = {
    [TS_REASON_NONE] = "none",
    [TS_REASON_MALFORMED] = "malformed",
    [TS_REASON_OVERSIZED] = "oversized",
    [TS_REASON_BATCH_TOO_LARGE] = "batch_too_large",
    [TS_REASON_EMPTY_BATCH] = "empty_batch",
    [TS_REASON_MISSING_USER_ID] = "missing_user_id",
    [TS_REASON_INVALID_USER_ID] = "invalid_user_id",
    [TS_REASON_INVALID_COORDINATE] = "invalid_coordinate",
    [TS_REASON_INVALID_TIMESTAMP] = "invalid_timestamp",
    [TS_REASON_TIME_WENT_BACKWARDS] = "time_went_backwards",
    [TS_REASON_UNKNOWN_PROFILE] = "unknown_profile",
    [TS_REASON_PROFILE_CONFLICT] = "profile_conflict",
    [TS_REASON_BUDGET_EXHAUSTED] = "budget_exhausted",
    [TS_REASON_USER_TABLE_FULL] = "user_table_full",
    [TS_REASON_INVALID_ACCURACY] = "invalid_accuracy",
    [TS_REASON_INTERNAL_ERROR] = "internal_error",
    [TS_REASON_OUTSIDE_REGION] = "outside_region",
    [TS_REASON_TOO_OLD] = "too_old",
    [TS_REASON_DELTA_UNCERTIFIED] = "delta_uncertified",
    [TS_REASON_CADENCE_TOO_FAST] = "cadence_too_fast",
};

const char *ts_reason_name(ts_reason reason)
{
    if ((int)reason < 0 || reason >= TS_REASON_COUNT)
        return "unknown";
    return reason_names[reason];
}

void ts_profiles_free(ts_profile *profiles, size_t n_profiles)
{
    if (profiles == NULL)
        return;
    for (size_t i = 0; i < n_profiles; i++) {
        if (profiles[i].mech != NULL && profiles[i].ops != NULL &&
            profiles[i].ops->profile_free != NULL)
            profiles[i].ops->profile_free(profiles[i].mech);
        free(profiles[i].name);
    }
    free(profiles);
}

size_t ts_profile_state_size(const ts_profile *profile)
{
    return profile->ops->user_state_size != NULL
               ? profile->ops->user_state_size(profile->mech)
               : 0;
}

static int profile_usable(const ts_profile *profile)
{
    return profile->name != NULL && profile->ops != NULL &&
           profile->ops->release != NULL && profile->window_ms > 0 &&
           profile->window_ms <= MAX_TIMESTAMP_MS &&
           isfinite(profile->window_budget) && profile->window_budget > 0.0;
}

ts_pipeline *ts_pipeline_new(ts_profile *profiles, size_t n_profiles,
                             size_t default_profile,
                             const ts_pipeline_limits *limits, ts_rng *rng)
{
    ts_pipeline *pipeline = NULL;
    if (profiles == NULL || n_profiles == 0 || default_profile >= n_profiles ||
        limits == NULL || rng == NULL)
        goto fail;
    size_t state_size = 0;
    for (size_t i = 0; i < n_profiles; i++) {
        if (!profile_usable(&profiles[i]))
            goto fail;
        size_t size = ts_profile_state_size(&profiles[i]);
        if (size > state_size)
            state_size = size;
    }

    pipeline = calloc(1, sizeof *pipeline);
    if (pipeline == NULL)
        goto fail;
    pipeline->profiles = profiles;
    pipeline->n_profiles = n_profiles;
    pipeline->default_profile = default_profile;
    pipeline->limits = *limits;
    pipeline->rng = rng;
    pipeline->state_size = state_size;
    if (state_size > 0) {
        pipeline->scratch_state = malloc(state_size);
        if (pipeline->scratch_state == NULL)
            goto fail;
    }
    unsigned char hash_key[TS_USERS_HASH_KEY_BYTES];
    ts_rng_bytes(rng, hash_key, sizeof hash_key);
    pipeline->users = ts_users_new(limits->max_users, hash_key);
    if (pipeline->users == NULL)
        goto fail;
    return pipeline;

fail:
    /* Ownership of `profiles` passed to us even on failure. */
    if (pipeline != NULL) {
        free(pipeline->scratch_state);
        free(pipeline);
    }
    ts_profiles_free(profiles, n_profiles);
    return NULL;
}

void ts_pipeline_free(ts_pipeline *pipeline)
{
    if (pipeline == NULL)
        return;
    ts_users_free(pipeline->users);
    ts_profiles_free(pipeline->profiles, pipeline->n_profiles);
    for (size_t i = 0; i < pipeline->n_disabled; i++)
        free(pipeline->disabled[i]);
    free(pipeline->disabled);
    free(pipeline->scratch_state);
    free(pipeline->dirty);
    free(pipeline->in_flight);
    free(pipeline);
}

/* ---------------------------------------------------------- validation */

/* 1 when `s` (len bytes) is well-formed UTF-8 without control characters.
 * Ids travel in protobuf `string` fields, which other languages refuse to
 * decode when they are not UTF-8, and end up in log lines. */
static int valid_user_id(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f)
                return 0;
            i++;
            continue;
        }
        size_t extra;
        unsigned cp;
        if (c >= 0xc2 && c <= 0xdf) {
            extra = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            extra = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            extra = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (len - i <= extra)
            return 0;
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        if (cp >= 0x80 && cp < 0xa0)  /* C1 controls */
            return 0;
        i += extra + 1;
    }
    return 1;
}

static int echoable_name(const char *name)
{
    size_t len = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p < 0x21 || *p > 0x7e || ++len > MAX_ECHOED_NAME)
            return 0;
    }
    return 1;
}

static void reject(ts_pipeline *pipeline, ts_outcome *out, ts_reason reason,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void reject(ts_pipeline *pipeline, ts_outcome *out, ts_reason reason,
                   const char *fmt, ...)
{
    out->sanitized = 0;
    out->repeated = 0;
    memset(&out->report, 0, sizeof out->report);
    out->eps_spent_window = 0.0;
    out->eps_remaining = 0.0;
    out->window_start_ms = 0;
    out->reason = reason;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->detail, sizeof out->detail, fmt, ap);
    va_end(ap);
    pipeline->stats.rejected[reason]++;
}

static const ts_profile *resolve_profile(const ts_pipeline *pipeline,
                                         const char *name, size_t *index)
{
    if (name == NULL || name[0] == '\0') {
        *index = pipeline->default_profile;
        return &pipeline->profiles[*index];
    }
    for (size_t i = 0; i < pipeline->n_profiles; i++) {
        if (strcmp(pipeline->profiles[i].name, name) == 0) {
            *index = i;
            return &pipeline->profiles[i];
        }
    }
    return NULL;
}

int ts_pipeline_add_disabled_profile(ts_pipeline *pipeline, const char *name)
{
    if (name == NULL || ts_pipeline_find_profile(pipeline, name) != NULL)
        return -1;
    char **grown = realloc(pipeline->disabled,
                           (pipeline->n_disabled + 1) * sizeof *grown);
    if (grown == NULL)
        return -1;
    pipeline->disabled = grown;
    pipeline->disabled[pipeline->n_disabled] = strdup(name);
    if (pipeline->disabled[pipeline->n_disabled] == NULL)
        return -1;
    pipeline->n_disabled++;
    return 0;
}

int ts_pipeline_profile_disabled(const ts_pipeline *pipeline,
                                 const char *name)
{
    for (size_t i = 0; i < pipeline->n_disabled; i++)
        if (strcmp(pipeline->disabled[i], name) == 0)
            return 1;
    return 0;
}

static int is_disabled_profile(const ts_pipeline *pipeline, const char *name)
{
    if (name == NULL)
        return 0;
    for (size_t i = 0; i < pipeline->n_disabled; i++)
        if (strcmp(pipeline->disabled[i], name) == 0)
            return 1;
    return 0;
}

/* ------------------------------------------------------------- windows */

/* A window of length window_ms opened at processing time opened_ms, last
 * accepting an update at last_accepted_ms, has ended by the clock: W has
 * passed since it opened, and the clock has moved on since its last
 * accepted update, so that no instant holds updates of two windows. Both
 * clock values lie in [0, clock_ms] or come from a store: the differences
 * cannot overflow. */
static int clock_end_passed(const ts_pipeline *pipeline, int64_t opened_ms,
                            int64_t window_ms, int64_t last_accepted_ms)
{
    if (!pipeline->clocked)
        return 1;
    return pipeline->clock_ms - opened_ms >= window_ms &&
           pipeline->clock_ms > last_accepted_ms;
}

/* The user's window is over for an update at event time event_ms: both
 * ends have passed. */
static int window_over(const ts_pipeline *pipeline, const ts_user *user,
                       int64_t event_ms)
{
    return event_ms - user->window_start_ms >= user->window_ms &&
           clock_end_passed(pipeline, user->window_opened_ms,
                            user->window_ms, user->last_accepted_clock_ms);
}

/* "until event time X ms" or, with a clock, "until event time X ms and
 * clock Y ms": when the window (or one opening now) will be over. */
static const char *window_end_text(const ts_pipeline *pipeline,
                                   int64_t event_end_ms, int64_t clock_end_ms,
                                   char *buf, size_t len)
{
    if (pipeline->clocked)
        snprintf(buf, len, "event time %lld ms and clock %lld ms",
                 (long long)event_end_ms, (long long)clock_end_ms);
    else
        snprintf(buf, len, "%lld ms", (long long)event_end_ms);
    return buf;
}

void ts_pipeline_set_clock(ts_pipeline *pipeline, int64_t now_ms)
{
    if (now_ms <= 0)
        return;
    pipeline->clocked = 1;
    if (now_ms > pipeline->clock_ms)
        pipeline->clock_ms = now_ms;
}

/* ------------------------------------------------------------- expiry */

static int user_expirable(const ts_user *user, void *ctx)
{
    const ts_pipeline *pipeline = ctx;
    /* Expiry judges windows by the latest time an update could still be
     * dated: the event-time watermark, or the caller's wall-clock floor
     * when that is later (a table of dead users admits nobody new, so no
     * accepted update would ever move the watermark). */
    int64_t watermark = pipeline->watermark_ms > pipeline->expiry_floor_ms
                            ? pipeline->watermark_ms
                            : pipeline->expiry_floor_ms;
    if (user->dirty || user->in_flight)
        return 0;  /* its ledger is not in the store yet */
    if (!user->has_window)
        return 1;  /* never accepted anything: holds no ledger */
    if (watermark - user->last_ts_ms < pipeline->limits.idle_ttl_ms)
        return 0;
    /* A forgotten user's next window opens at a later clock instant, so
     * the window must be over by the clock as well: a producer moving the
     * watermark cannot end it early. */
    return window_over(pipeline, user, watermark);
}

void ts_pipeline_set_expiry_floor(ts_pipeline *pipeline, int64_t floor_ms)
{
    if (floor_ms > pipeline->expiry_floor_ms)
        pipeline->expiry_floor_ms = floor_ms;
}

size_t ts_pipeline_expire(ts_pipeline *pipeline, size_t max_scan)
{
    size_t removed = ts_users_expire(pipeline->users, max_scan, user_expirable,
                                     pipeline);
    pipeline->stats.users_expired += removed;
    return removed;
}

/* ------------------------------------------------------------ process */

static void fill_sanitized(ts_outcome *out, const ts_user *user,
                           const ts_profile *window_profile)
{
    out->sanitized = 1;
    out->reason = TS_REASON_NONE;
    out->detail[0] = '\0';
    out->eps_spent_window = user->spent;
    double remaining = window_profile->window_budget - user->spent;
    out->eps_remaining = remaining > 0.0 ? remaining : 0.0;
    out->window_start_ms = user->window_start_ms;
}

/* Fail closed on a mechanism that misbehaves: a report must be valid WGS84
 * and spend a finite non-negative amount within the budget. A report equal
 * to the true point is NOT refused: it is a legitimate sample of every
 * noise law with a density at zero displacement, and refusing it would
 * make the rejection a function of the secret (it would tell a reader of
 * the feed exactly where the user was not published from). */
static const char *report_problem(const ts_report *report,
                                  const ts_budget_view *budget)
{
    if (!ts_geo_valid(report->lat, report->lon))
        return "returned an invalid coordinate";
    if (!isfinite(report->eps_point) || report->eps_point < 0.0)
        return "returned an invalid spend";
    if (!ts_budget_allows(budget, report->eps_point))
        return "overspent the window budget";
    return NULL;
}

/* Room for one more dirty user, taken before the ledger changes: once a
 * point is released its debit must reach the store. */
static int reserve_dirty(ts_pipeline *pipeline, const ts_user *user)
{
    if (pipeline->backend == NULL || user->dirty ||
        pipeline->n_dirty < pipeline->dirty_capacity)
        return 0;
    size_t capacity = pipeline->dirty_capacity ? pipeline->dirty_capacity * 2
                                               : 256;
    ts_user **dirty = realloc(pipeline->dirty, capacity * sizeof *dirty);
    if (dirty == NULL)
        return -1;
    pipeline->dirty = dirty;
    pipeline->dirty_capacity = capacity;
    return 0;
}

static void mark_dirty(ts_pipeline *pipeline, ts_user *user)
{
    if (pipeline->backend == NULL || user->dirty)
        return;
    user->dirty = 1;
    pipeline->dirty[pipeline->n_dirty++] = user;  /* reserved */
}

/* Fill a freshly inserted user from the backend. Returns 1 when restored,
 * 0 when the backend has no record, -1 after rejecting the update. */
static int restore_user(ts_pipeline *pipeline, ts_user *user,
                        const ts_input *input, ts_outcome *out)
{
    ts_user_record record;
    memset(&record, 0, sizeof record);
    int found = pipeline->backend->load(pipeline->backend->ctx, user->id,
                                        user->id_len, &record);
    if (found < 0) {
        reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
               "cannot read the user's state from the store");
        return -1;
    }
    if (found == 0 || !record.has_window)
        return 0;
    /* A record that does not know when its window opened by the clock
     * (an older version) opened it at the latest now: taking now can only
     * hold the window longer. The user is saved again with it, so that the
     * next restore does not push the window further. */
    int64_t opened = record.window_opened_ms;
    int migrated = pipeline->clocked && opened <= 0;
    if (migrated) {
        opened = pipeline->clock_ms;
        if (reserve_dirty(pipeline, user) != 0) {
            reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
                   "out of memory tracking state to persist");
            return -1;
        }
    }
    /* The restored user's last accepted instant is not stored: it lies
     * before now, since expiry (the only way out of memory in this
     * process) needs the clock past it, and another process ran earlier. */
    int window_open =
        !(input->ts_ms - record.window_start_ms >= record.window_ms &&
          clock_end_passed(pipeline, opened, record.window_ms, 0));
    size_t index = pipeline->n_profiles;
    if (record.profile != NULL)
        for (size_t i = 0; i < pipeline->n_profiles; i++)
            if (strcmp(pipeline->profiles[i].name, record.profile) == 0)
                index = i;
    if (window_open && index == pipeline->n_profiles) {
        /* The profile was removed from the configuration: the user's spend
         * is in its unit and cannot be carried over to another profile. */
        char until[64];
        reject(pipeline, out, TS_REASON_PROFILE_CONFLICT,
               "user is bound to a profile that is no longer configured "
               "until its budget window ends at %s",
               window_end_text(pipeline,
                               record.window_start_ms + record.window_ms,
                               opened + record.window_ms, until,
                               sizeof until));
        return -1;
    }
    size_t bound_size = index < pipeline->n_profiles
                            ? ts_profile_state_size(&pipeline->profiles[index])
                            : 0;
    if (window_open && record.state_len != bound_size) {
        reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
               "stored mechanism state does not match the profile");
        return -1;
    }
    user->has_window = 1;
    user->profile_index = index < pipeline->n_profiles ? index : 0;
    user->window_start_ms = record.window_start_ms;
    user->window_ms = record.window_ms;
    user->window_opened_ms = opened;
    user->spent = record.spent;
    user->last_ts_ms = record.last_ts_ms;
    user->has_last = record.has_last;
    user->last_lat = record.last_lat;
    user->last_lon = record.last_lon;
    if (bound_size > 0 && record.state_len == bound_size &&
        ts_users_set_state(pipeline->users, user, record.state,
                           record.state_stored_len, bound_size) != 0) {
        reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
               "out of memory for the user's mechanism state");
        return -1;
    }
    if (migrated)
        mark_dirty(pipeline, user);
    return 1;
}

static void touch_accepted(ts_pipeline *pipeline, ts_user *user, int64_t ts_ms)
{
    mark_dirty(pipeline, user);
    user->last_ts_ms = ts_ms;
    user->last_accepted_clock_ms = pipeline->clock_ms;
    ts_users_touch(pipeline->users, user);
    if (ts_ms > pipeline->watermark_ms)
        pipeline->watermark_ms = ts_ms;
}

void ts_pipeline_process(ts_pipeline *pipeline, const ts_input *input,
                         ts_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->user_id = "";
    out->ts_ms = input->ts_ms;
    pipeline->stats.updates++;

    const char *id = input->user_id;
    if (id == NULL || id[0] == '\0') {
        reject(pipeline, out, TS_REASON_MISSING_USER_ID, "user id is missing");
        return;
    }
    size_t max_id = pipeline->limits.max_user_id_bytes;
    size_t id_len = strnlen(id, max_id + 1);
    /* An invalid id is not echoed back (out->user_id stays ""): it may be
     * huge, or carry bytes that break log lines and consumers. */
    if (id_len > max_id) {
        reject(pipeline, out, TS_REASON_INVALID_USER_ID,
               "user id longer than %zu bytes", max_id);
        return;
    }
    if (input->has_wire_lengths && input->user_id_wire_len != id_len) {
        reject(pipeline, out, TS_REASON_INVALID_USER_ID,
               "user id contains a NUL byte");
        return;
    }
    if (!valid_user_id((const unsigned char *)id, id_len)) {
        reject(pipeline, out, TS_REASON_INVALID_USER_ID,
               "user id contains control characters or invalid UTF-8");
        return;
    }
    out->user_id = id;

    if (input->ts_ms <= 0 || input->ts_ms > MAX_TIMESTAMP_MS) {
        reject(pipeline, out, TS_REASON_INVALID_TIMESTAMP,
               input->ts_ms <= 0 ? "timestamp must be positive"
                                 : "timestamp beyond year 9999");
        return;
    }
    if (!ts_geo_valid(input->lat, input->lon)) {
        reject(pipeline, out, TS_REASON_INVALID_COORDINATE,
               "latitude/longitude not finite or out of range");
        return;
    }
    if (input->has_accuracy &&
        !(isfinite(input->accuracy_m) && input->accuracy_m >= 0.0)) {
        reject(pipeline, out, TS_REASON_INVALID_ACCURACY,
               "accuracy must be a finite non-negative number of metres");
        return;
    }

    if (input->profile != NULL && input->has_wire_lengths &&
        input->profile_wire_len != strlen(input->profile)) {
        reject(pipeline, out, TS_REASON_UNKNOWN_PROFILE,
               "profile name contains a NUL byte");
        return;
    }
    size_t profile_index;
    const ts_profile *profile =
        resolve_profile(pipeline, input->profile, &profile_index);
    if (profile == NULL) {
        if (is_disabled_profile(pipeline, input->profile))
            reject(pipeline, out, TS_REASON_UNKNOWN_PROFILE,
                   "profile '%s' is disabled: it has no model configured",
                   input->profile);
        else if (echoable_name(input->profile))
            reject(pipeline, out, TS_REASON_UNKNOWN_PROFILE,
                   "unknown profile '%s'", input->profile);
        else
            reject(pipeline, out, TS_REASON_UNKNOWN_PROFILE,
                   "unknown profile");
        return;
    }
    out->profile = profile;

    ts_user *user = ts_users_find(pipeline->users, id, id_len);
    int created = 0;
    if (user == NULL) {
        if (ts_users_count(pipeline->users) >= pipeline->limits.max_users)
            ts_pipeline_expire(pipeline, FULL_TABLE_EXPIRE_SCAN);
        if (ts_users_count(pipeline->users) >= pipeline->limits.max_users) {
            reject(pipeline, out, TS_REASON_USER_TABLE_FULL,
                   "user table full (%zu users)", pipeline->limits.max_users);
            return;
        }
        user = ts_users_insert(pipeline->users, id, id_len);
        if (user == NULL) {
            reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
                   "out of memory adding a user");
            return;
        }
        created = 1;
        if (pipeline->backend != NULL) {
            int restored = restore_user(pipeline, user, input, out);
            if (restored < 0) {
                ts_users_remove(pipeline->users, user);
                return;
            }
            created = !restored;
        }
    }
    if (!created && user->has_window && input->ts_ms < user->last_ts_ms) {
        reject(pipeline, out, TS_REASON_TIME_WENT_BACKWARDS,
               "timestamp %lld ms is before the user's last %lld ms",
               (long long)input->ts_ms, (long long)user->last_ts_ms);
        return;
    }

    /* An update past the window's event-time end whose clock end has not
     * passed stays in the window: it spends what is left of its budget. */
    int new_window = !user->has_window ||
                     window_over(pipeline, user, input->ts_ms);
    char until[64];
    if (!new_window && user->profile_index != profile_index) {
        reject(pipeline, out, TS_REASON_PROFILE_CONFLICT,
               "user is bound to profile '%s' until its budget window ends "
               "at %s",
               pipeline->profiles[user->profile_index].name,
               window_end_text(pipeline,
                               user->window_start_ms + user->window_ms,
                               user->window_opened_ms + user->window_ms,
                               until, sizeof until));
        return;
    }

    if (reserve_dirty(pipeline, user) != 0) {
        reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
               "out of memory tracking state to persist");
        if (created)
            ts_users_remove(pipeline->users, user);
        return;
    }

    /* The mechanism works on a copy of the user's state and the ledger is
     * only written after a successful release, so a rejected update leaves
     * the user exactly as it was. The user's block is sized for the profile
     * bound in the current window; a new window may bind another. */
    size_t state_size = ts_profile_state_size(profile);
    if (!new_window && user->state_size != state_size) {
        reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
               "mechanism state does not match the bound profile");
        return;
    }
    if (state_size > 0) {
        /* A mechanism may carry (public) state into the user's next window
         * of the same profile; any other new window starts from zero. */
        int carried = new_window && user->has_window &&
                      profile->ops->window_opens != NULL &&
                      user->profile_index == profile_index &&
                      user->state_size == state_size;
        if (!new_window || carried)
            ts_users_get_state(user, pipeline->scratch_state);
        else
            memset(pipeline->scratch_state, 0, state_size);
        if (carried)
            profile->ops->window_opens(profile->mech, pipeline->scratch_state);
    }
    ts_budget_view budget = {
        .total = profile->window_budget,
        .spent = new_window ? 0.0 : user->spent,
    };
    ts_point truth = {
        .lat = input->lat,
        .lon = input->lon,
        .ts_ms = input->ts_ms,
        .accuracy_m = input->has_accuracy ? input->accuracy_m : NAN,
        .user = id,
        .user_len = id_len,
    };
    ts_report report;
    memset(&report, 0, sizeof report);
    ts_release_status status =
        profile->ops->release(profile->mech, pipeline->scratch_state, &truth,
                              &budget, pipeline->rng, &report);

    if (status == TS_RELEASE_OK) {
        const char *problem = report_problem(&report, &budget);
        if (problem != NULL) {
            memset(&report, 0, sizeof report);
            reject(pipeline, out, TS_REASON_INTERNAL_ERROR, "mechanism %s %s",
                   profile->ops->name, problem);
            goto rejected;
        }
        if (ts_users_set_state(pipeline->users, user,
                               pipeline->scratch_state, state_size,
                               state_size) != 0) {
            memset(&report, 0, sizeof report);
            reject(pipeline, out, TS_REASON_INTERNAL_ERROR,
                   "out of memory for the user's mechanism state");
            goto rejected;
        }
        if (new_window) {
            user->has_window = 1;
            user->profile_index = profile_index;
            user->window_start_ms = input->ts_ms;
            user->window_ms = profile->window_ms;
            user->window_opened_ms = pipeline->clock_ms;
            user->spent = 0.0;
            user->exhaustion_counted = 0;
        }
        user->spent += report.eps_point;
        user->has_last = 1;
        user->last_lat = report.lat;
        user->last_lon = report.lon;
        touch_accepted(pipeline, user, input->ts_ms);
        if (created)
            pipeline->stats.users_created++;
        out->report = report;
        fill_sanitized(out, user, profile);
        pipeline->stats.sanitized++;
        return;
    }

    memset(&report, 0, sizeof report);
    if (status == TS_RELEASE_EXHAUSTED) {
        /* Counted once per user and window; a user whose producer keeps
         * sending after exhaustion does not inflate the counter. */
        if (!user->exhaustion_counted || new_window) {
            pipeline->stats.budget_exhaustions++;
            if (!new_window)
                user->exhaustion_counted = 1;
        }
        /* A fresh window that cannot pay for one point is a configuration
         * problem, not something to paper over with a repeat. */
        if (profile->on_exhausted == TS_ON_EXHAUSTED_REPEAT && user->has_last &&
            !new_window) {
            /* Republishing public output is post-processing: free. */
            out->report.lat = user->last_lat;
            out->report.lon = user->last_lon;
            out->report.eps_point = 0.0;
            out->repeated = 1;
            touch_accepted(pipeline, user, input->ts_ms);
            fill_sanitized(out, user, profile);
            pipeline->stats.sanitized++;
            pipeline->stats.repeated++;
            return;
        }
        reject(pipeline, out, TS_REASON_BUDGET_EXHAUSTED,
               "budget of profile '%s' exhausted until %s", profile->name,
               new_window
                   ? window_end_text(pipeline, input->ts_ms + profile->window_ms,
                                     pipeline->clock_ms + profile->window_ms,
                                     until, sizeof until)
                   : window_end_text(pipeline,
                                     user->window_start_ms + user->window_ms,
                                     user->window_opened_ms + user->window_ms,
                                     until, sizeof until));
    } else if (status == TS_RELEASE_OUTSIDE_REGION) {
        /* No coordinate in the detail: only that the point left a public
         * box, which the producer knows already. */
        reject(pipeline, out, TS_REASON_OUTSIDE_REGION,
               "point outside the region covered by the mobility model of "
               "profile '%s'",
               profile->name);
    } else if (status == TS_RELEASE_UNCERTIFIED) {
        reject(pipeline, out, TS_REASON_DELTA_UNCERTIFIED,
               "profile '%s' cannot certify a delta-location set: pruning "
               "the belief lost more than delta of the prior (raise "
               "belief_capacity)",
               profile->name);
    } else if (status == TS_RELEASE_TOO_FAST) {
        reject(pipeline, out, TS_REASON_CADENCE_TOO_FAST,
               "profile '%s': the point follows the user's previous one by "
               "less than min_interval_s",
               profile->name);
    } else {
        reject(pipeline, out, TS_REASON_INTERNAL_ERROR, "mechanism %s failed",
               profile->ops->name);
    }

rejected:
    if (state_size > 0)
        memset(pipeline->scratch_state, 0, state_size);
    if (created)
        ts_users_remove(pipeline->users, user);
}

void ts_pipeline_count_rejection(ts_pipeline *pipeline, ts_reason reason)
{
    if ((int)reason <= 0 || reason >= TS_REASON_COUNT)
        reason = TS_REASON_INTERNAL_ERROR;
    pipeline->stats.rejected[reason]++;
}

size_t ts_pipeline_user_count(const ts_pipeline *pipeline)
{
    return ts_users_count(pipeline->users);
}

size_t ts_pipeline_state_bytes(const ts_pipeline *pipeline)
{
    return ts_users_state_bytes(pipeline->users);
}

size_t ts_pipeline_state_held_bytes(const ts_pipeline *pipeline)
{
    return ts_users_state_held_bytes(pipeline->users);
}

const ts_pipeline_stats *ts_pipeline_get_stats(const ts_pipeline *pipeline)
{
    return &pipeline->stats;
}

const ts_profile *ts_pipeline_find_profile(const ts_pipeline *pipeline,
                                           const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < pipeline->n_profiles; i++)
        if (strcmp(pipeline->profiles[i].name, name) == 0)
            return &pipeline->profiles[i];
    return NULL;
}

const ts_profile *ts_pipeline_default_profile(const ts_pipeline *pipeline)
{
    return &pipeline->profiles[pipeline->default_profile];
}

size_t ts_pipeline_profile_count(const ts_pipeline *pipeline)
{
    return pipeline->n_profiles;
}

const ts_profile *ts_pipeline_profile_at(const ts_pipeline *pipeline,
                                         size_t index)
{
    if (index >= pipeline->n_profiles)
        return NULL;
    return &pipeline->profiles[index];
}

/* ------------------------------------------------------- durable state */

void ts_pipeline_set_state_backend(ts_pipeline *pipeline,
                                   const ts_state_backend *backend)
{
    pipeline->backend = backend;
}

size_t ts_pipeline_dirty_count(const ts_pipeline *pipeline)
{
    return pipeline->n_dirty;
}

int ts_pipeline_save_dirty(ts_pipeline *pipeline)
{
    if (pipeline->backend == NULL)
        return 0;
    for (size_t i = 0; i < pipeline->n_dirty; i++) {
        const ts_user *user = pipeline->dirty[i];
        ts_user_record record = {
            .has_window = user->has_window,
            .profile = user->has_window
                           ? pipeline->profiles[user->profile_index].name
                           : NULL,
            .window_start_ms = user->window_start_ms,
            .window_ms = user->window_ms,
            .window_opened_ms = user->window_opened_ms,
            .spent = user->spent,
            .last_ts_ms = user->last_ts_ms,
            .has_last = user->has_last,
            .last_lat = user->last_lat,
            .last_lon = user->last_lon,
            .state = user->state,
        };
        if (user->has_window) {
            record.state_len = ts_profile_state_size(
                &pipeline->profiles[user->profile_index]);
            record.state_stored_len = user->state_kept < record.state_len
                                          ? user->state_kept
                                          : record.state_len;
        }
        if (pipeline->backend->save(pipeline->backend->ctx, user->id,
                                    user->id_len, &record) != 0)
            return -1;
    }
    return 0;
}

void ts_pipeline_mark_in_flight(ts_pipeline *pipeline)
{
    for (size_t i = 0; i < pipeline->n_dirty; i++) {
        pipeline->dirty[i]->dirty = 0;
        pipeline->dirty[i]->in_flight = 1;
    }
    /* The lists trade places: the dirty list's reserved room is what
     * reserve_dirty promised, and the empty in-flight list takes over. */
    ts_user **users = pipeline->in_flight;
    size_t capacity = pipeline->in_flight_capacity;
    pipeline->in_flight = pipeline->dirty;
    pipeline->in_flight_capacity = pipeline->dirty_capacity;
    pipeline->n_in_flight = pipeline->n_dirty;
    pipeline->dirty = users;
    pipeline->dirty_capacity = capacity;
    pipeline->n_dirty = 0;
}

void ts_pipeline_mark_durable(ts_pipeline *pipeline)
{
    for (size_t i = 0; i < pipeline->n_in_flight; i++)
        pipeline->in_flight[i]->in_flight = 0;
    pipeline->n_in_flight = 0;
}
