/* The per-user table: a hash map from user id to the user's ledger, plus a
 * recency list so expiry can visit the least recently active users first.
 *
 * The map is open addressing with linear probing over an array of (hash,
 * user) slots: a lookup touches one or two cache lines of the slot array
 * and dereferences only the user whose full 64-bit hash matches, where a
 * chained table walks separately allocated nodes. The hash is keyed
 * SipHash (libsodium crypto_shorthash): user ids come from the network, and
 * an unkeyed hash lets a producer choose ids that all collide.
 *
 * Each user's mechanism state is sized for the profile the user is bound
 * to (ts_users_resize_state), not for the largest profile configured, so a
 * user of a stateless profile costs the same whatever else is configured.
 * And only its leading bytes up to the last non-zero one are held in
 * memory (ts_users_set_state), as the store keeps them: a belief of a few
 * cells in a block sized for belief_capacity cells costs the cells it
 * holds (issue 25, item 10).
 *
 * The table knows nothing about budgets or windows; the pipeline decides
 * which users may be forgotten and passes that rule in as a predicate.
 */
#ifndef TRACESAN_ENGINE_USERS_H
#define TRACESAN_ENGINE_USERS_H

#include <stddef.h>
#include <stdint.h>

#define TS_USERS_HASH_KEY_BYTES 16

typedef struct ts_user {
    const char *id;              /* NUL-terminated, stored after the struct */
    size_t id_len;
    int64_t last_ts_ms;          /* last accepted event time */
    int has_window;              /* 0 until the first accepted point */
    size_t profile_index;        /* profile bound for the current window */
    int64_t window_start_ms;     /* event time the window opened at */
    int64_t window_ms;           /* length of the bound profile's window */
    /* The pipeline's processing clock (the daemon's wall clock) when the
     * window opened, and at the user's last accepted update: a window
     * closes only W after it opened by this clock too, whatever the
     * timestamps (engine/pipeline.h). 0 when the pipeline has no clock. */
    int64_t window_opened_ms;
    int64_t last_accepted_clock_ms;
    double spent;                /* budget spent in the current window */
    int exhaustion_counted;      /* stats: exhaustion counted in this window */
    int has_last;                /* last sanitized (public) point */
    double last_lat;
    double last_lon;
    /* Mechanism state: state_size bytes, of which the first state_kept
     * are held at `state` and the rest are zero. */
    void *state;
    size_t state_size;
    size_t state_kept;
    int dirty;                   /* ledger changed since the last commit */
    int in_flight;               /* its record is in a commit not yet done */
    /* recency list, least recently touched first */
    struct ts_user *lru_prev;
    struct ts_user *lru_next;
} ts_user;

typedef struct ts_user_table ts_user_table;

/* At most `capacity` users. `hash_key` keys the hash
 * (TS_USERS_HASH_KEY_BYTES). */
ts_user_table *ts_users_new(size_t capacity, const unsigned char *hash_key);
void ts_users_free(ts_user_table *table);

size_t ts_users_count(const ts_user_table *table);
size_t ts_users_capacity(const ts_user_table *table);
/* Bytes the table itself holds for its slots (the users are counted by
 * the allocator). */
size_t ts_users_slot_bytes(const ts_user_table *table);

/* id need not be NUL-terminated. */
ts_user *ts_users_find(ts_user_table *table, const char *id, size_t id_len);

/* Adds a zeroed user without mechanism state as the most recently touched.
 * The caller checked the id is absent. NULL when the table is at capacity
 * or memory ran out. */
ts_user *ts_users_insert(ts_user_table *table, const char *id, size_t id_len);

void ts_users_remove(ts_user_table *table, ts_user *user);

/* Gives the user a zero-filled state block of `size` bytes (none for 0),
 * held whole, wiping the old one. -1 when memory ran out; the user is then
 * unchanged. */
int ts_users_resize_state(ts_user_table *table, ts_user *user, size_t size);

/* Makes the user's state the `size` bytes whose first `len` are `bytes`
 * and the rest zero (len <= size), holding them up to the last non-zero
 * byte. -1 when memory ran out; the user is then unchanged. */
int ts_users_set_state(ts_user_table *table, ts_user *user,
                       const void *bytes, size_t len, size_t size);

/* Writes the user's state_size bytes of state to `out`. */
void ts_users_get_state(const ts_user *user, void *out);

/* Mechanism state of all users together, in bytes: as their profiles size
 * it, and as held in memory (allocations, in 64-byte steps). */
size_t ts_users_state_bytes(const ts_user_table *table);
size_t ts_users_state_held_bytes(const ts_user_table *table);

/* Mark the user as the most recently active. */
void ts_users_touch(ts_user_table *table, ts_user *user);

/* Least recently touched user (NULL when empty); ->lru_next walks forward. */
ts_user *ts_users_oldest(ts_user_table *table);

/* Visit up to max_scan users, oldest first, removing those for which
 * `expirable` returns non-zero. The walk resumes where the previous call
 * stopped and wraps around, so users that are idle but not yet expirable at
 * the old end cannot hide expirable users behind them forever. Returns the
 * number removed. */
typedef int (*ts_user_expirable_fn)(const ts_user *user, void *ctx);
size_t ts_users_expire(ts_user_table *table, size_t max_scan,
                       ts_user_expirable_fn expirable, void *ctx);

#endif
