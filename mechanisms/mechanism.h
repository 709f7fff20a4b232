/* The mechanism interface: one ops table per mechanism, found by name.
 *
 * A mechanism is pure math on structs. It never sees a socket, a file or a
 * config library: the caller hands it parameters through ts_params, its
 * per-user state as an opaque zero-initialised block, the true point, the
 * user's budget view and a generator, and gets back a report and its spend.
 * Adding a mechanism is one source file plus one line in the registry
 * (mechanisms/mechanism.c); nothing in the daemon changes.
 */
#ifndef TRACESAN_MECHANISMS_MECHANISM_H
#define TRACESAN_MECHANISMS_MECHANISM_H

#include <stddef.h>
#include <stdint.h>

#include "mechanisms/rng.h"

/* Parameter source, implemented by the caller (libconfig in the daemon, a
 * plain table in tests). Each getter returns 1 when found, 0 when absent and
 * -1 when present with the wrong type. Integers are accepted where doubles
 * are asked for. */
typedef struct ts_params {
    void *ctx;
    int (*get_double)(void *ctx, const char *key, double *out);
    int (*get_int)(void *ctx, const char *key, long long *out);
    int (*get_string)(void *ctx, const char *key, const char **out);
    /* Optional (NULL when the caller has no model files): the model named
     * by the string parameter `key` (a path), opened by the caller and
     * valid at least until profile_new returns; a `const ts_model *`
     * (inference/model_file.h). NULL with a message in err when the key is
     * absent or the model cannot be opened. */
    const void *(*get_model)(void *ctx, const char *key, char *err,
                             size_t errlen);
    /* Optional (NULL when the source has no booleans): 1 found, 0 absent,
     * -1 present but not a boolean; *out is 0 or 1. */
    int (*get_bool)(void *ctx, const char *key, int *out);
} ts_params;

/* The true location. Never copied into a report, a log or an error. */
typedef struct ts_point {
    double lat;          /* WGS84 degrees, validated by the caller */
    double lon;
    int64_t ts_ms;       /* event time, non-decreasing per user */
    double accuracy_m;   /* NaN when the device did not say */
    /* The user's pseudonym as it arrived (public, not terminated; NULL/0
     * when the caller has none). Lets a mechanism pick per-user public
     * parameters such as a personal mobility model; never mixed into
     * anything as if it were secret. */
    const char *user;
    size_t user_len;
} ts_point;

/* The user's ledger for the current window, owned by the caller. */
typedef struct ts_budget_view {
    double total;        /* budget per window, in the mechanism's unit */
    double spent;        /* spent so far in this window */
} ts_budget_view;

/* What may be published about one point. */
typedef struct ts_report {
    double lat;          /* sanitized, valid WGS84 */
    double lon;
    double eps_point;    /* budget this report spends (0 allowed) */
    int has_predicted;   /* the mechanism defines the public easy/hard bit */
    int predicted;
    int has_delta_set_size; /* delta-location-set mechanisms: |Delta X| */
    unsigned delta_set_size;
} ts_report;

typedef enum ts_release_status {
    TS_RELEASE_OK = 0,
    TS_RELEASE_EXHAUSTED = 1,   /* not enough budget left; nothing released */
    /* The true point lies outside the region the profile's model covers
     * and the profile is configured to refuse such points
     * (delta-location-set mechanisms, outside_region = "reject"): refused
     * before any state changes, rejected as outside_region. */
    TS_RELEASE_OUTSIDE_REGION = 2,
    /* Delta-location-set mechanisms: the belief's certified mass (what
     * pruning left of the exact prior, inference/belief.h) is below
     * 1 - delta, so no delta-location set can be guaranteed. A function of
     * public data only; nothing released, no state changed. */
    TS_RELEASE_UNCERTIFIED = 3,
    TS_RELEASE_ERROR = -1       /* internal failure; caller drops the point */
} ts_release_status;

/* Spending more than `total` by floating-point rounding alone is tolerated up
 * to this relative slack; anything more is refused. */
#define TS_BUDGET_RELATIVE_SLACK 1e-9

typedef struct ts_mechanism_ops {
    const char *name;

    /* Parse and validate parameters into an immutable profile context. On
     * failure returns -1 and writes a message naming the offending key. */
    int (*profile_new)(const ts_params *params, void **profile, char *err,
                       size_t errlen);
    void (*profile_free)(void *profile);

    /* Total budget per window for this profile, in the mechanism's unit. */
    double (*window_budget)(const void *profile);

    /* Size of the per-user state block; the caller zero-fills it on a new
     * user or a new window. May be 0. */
    size_t (*user_state_size)(const void *profile);

    /* Release one point. Must not write anything derived from `truth` into
     * `user_state` except what is also published (the state is persisted). */
    ts_release_status (*release)(const void *profile, void *user_state,
                                 const ts_point *truth,
                                 const ts_budget_view *budget, ts_rng *rng,
                                 ts_report *out);
} ts_mechanism_ops;

/* NULL when no mechanism has that name. */
const ts_mechanism_ops *ts_mechanism_find(const char *name);

/* NULL-terminated list of all registered mechanisms. */
const ts_mechanism_ops *const *ts_mechanism_all(void);

/* 1 when spending `amount` keeps the window within budget. */
int ts_budget_allows(const ts_budget_view *budget, double amount);

#endif
