#include "engine/users.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* A slot is empty when user is NULL. The full hash is kept next to the
 * pointer so that a probe compares ids only on a 64-bit hash match. */
typedef struct slot {
    uint64_t hash;
    ts_user *user;
} slot;

struct ts_user_table {
    slot *slots;
    size_t mask;                 /* slot count - 1; the count is a power of 2 */
    ts_user *lru_head;           /* least recently touched */
    ts_user *lru_tail;
    ts_user *expire_cursor;      /* next user ts_users_expire looks at */
    size_t count;
    size_t capacity;
    size_t state_bytes;
    size_t state_held;
    unsigned char hash_key[crypto_shorthash_KEYBYTES];
};

_Static_assert(TS_USERS_HASH_KEY_BYTES == crypto_shorthash_KEYBYTES,
               "hash key size must match SipHash");

/* Grown before the load passes 3/4, where linear probing's expected probe
 * count for a miss climbs past 8. */
#define MIN_SLOTS 64

static uint64_t keyed_hash(const ts_user_table *table, const char *id,
                           size_t id_len)
{
    unsigned char digest[crypto_shorthash_BYTES];
    crypto_shorthash(digest, (const unsigned char *)id, id_len,
                     table->hash_key);
    uint64_t value;
    memcpy(&value, digest, sizeof value);
    return value;
}

ts_user_table *ts_users_new(size_t capacity, const unsigned char *hash_key)
{
    ts_user_table *table = calloc(1, sizeof *table);
    if (table == NULL)
        return NULL;
    table->slots = calloc(MIN_SLOTS, sizeof *table->slots);
    if (table->slots == NULL) {
        free(table);
        return NULL;
    }
    table->mask = MIN_SLOTS - 1;
    table->capacity = capacity;
    memcpy(table->hash_key, hash_key, sizeof table->hash_key);
    return table;
}

static void lru_unlink(ts_user_table *table, ts_user *user)
{
    if (user->lru_prev != NULL)
        user->lru_prev->lru_next = user->lru_next;
    else
        table->lru_head = user->lru_next;
    if (user->lru_next != NULL)
        user->lru_next->lru_prev = user->lru_prev;
    else
        table->lru_tail = user->lru_prev;
    user->lru_prev = user->lru_next = NULL;
}

static void lru_append(ts_user_table *table, ts_user *user)
{
    user->lru_prev = table->lru_tail;
    user->lru_next = NULL;
    if (table->lru_tail != NULL)
        table->lru_tail->lru_next = user;
    else
        table->lru_head = user;
    table->lru_tail = user;
}

/* The allocation holding `kept` bytes of state: 64-byte steps, so a
 * belief that gains or loses a cell seldom moves. */
static size_t state_room(size_t kept)
{
    return (kept + 63) & ~(size_t)63;
}

static void free_state(ts_user *user)
{
    if (user->state != NULL) {
        sodium_memzero(user->state, state_room(user->state_kept));
        free(user->state);
    }
    user->state = NULL;
    user->state_kept = 0;
}

/* The block holds a ledger and mechanism state: neither is left in freed
 * memory. */
static void free_user(ts_user *user)
{
    free_state(user);
    sodium_memzero(user, sizeof *user + user->id_len + 1);
    free(user);
}

void ts_users_free(ts_user_table *table)
{
    if (table == NULL)
        return;
    ts_user *user = table->lru_head;
    while (user != NULL) {
        ts_user *next = user->lru_next;
        free_user(user);
        user = next;
    }
    free(table->slots);
    sodium_memzero(table->hash_key, sizeof table->hash_key);
    free(table);
}

size_t ts_users_count(const ts_user_table *table)
{
    return table->count;
}

size_t ts_users_capacity(const ts_user_table *table)
{
    return table->capacity;
}

size_t ts_users_slot_bytes(const ts_user_table *table)
{
    return (table->mask + 1) * sizeof *table->slots;
}

/* The slot holding id, or the empty slot where it would go. */
static size_t probe(const ts_user_table *table, uint64_t hash, const char *id,
                    size_t id_len)
{
    size_t i = (size_t)hash & table->mask;
    for (;;) {
        const slot *s = &table->slots[i];
        if (s->user == NULL)
            return i;
        if (s->hash == hash && s->user->id_len == id_len &&
            memcmp(s->user->id, id, id_len) == 0)
            return i;
        i = (i + 1) & table->mask;
    }
}

ts_user *ts_users_find(ts_user_table *table, const char *id, size_t id_len)
{
    uint64_t hash = keyed_hash(table, id, id_len);
    return table->slots[probe(table, hash, id, id_len)].user;
}

static int grow(ts_user_table *table)
{
    size_t old_count = table->mask + 1;
    if (old_count > SIZE_MAX / 2 / sizeof *table->slots)
        return -1;
    slot *slots = calloc(old_count * 2, sizeof *slots);
    if (slots == NULL)
        return -1;
    slot *old = table->slots;
    table->slots = slots;
    table->mask = old_count * 2 - 1;
    for (size_t i = 0; i < old_count; i++) {
        if (old[i].user == NULL)
            continue;
        size_t j = (size_t)old[i].hash & table->mask;
        while (slots[j].user != NULL)
            j = (j + 1) & table->mask;
        slots[j] = old[i];
    }
    free(old);
    return 0;
}

ts_user *ts_users_insert(ts_user_table *table, const char *id, size_t id_len)
{
    if (table->count >= table->capacity)
        return NULL;
    if (id_len > SIZE_MAX - sizeof(ts_user) - 1)
        return NULL;
    /* An allocation failure while growing is survivable until the table is
     * full: probing stays correct at any load below 1. */
    if ((table->count + 1) * 4 > (table->mask + 1) * 3 && grow(table) != 0 &&
        table->count + 1 >= table->mask)
        return NULL;
    ts_user *user = calloc(1, sizeof *user + id_len + 1);
    if (user == NULL)
        return NULL;
    char *stored_id = (char *)(user + 1);
    memcpy(stored_id, id, id_len);
    stored_id[id_len] = '\0';
    user->id = stored_id;
    user->id_len = id_len;

    uint64_t hash = keyed_hash(table, id, id_len);
    size_t i = probe(table, hash, id, id_len);
    table->slots[i] = (slot){ .hash = hash, .user = user };
    lru_append(table, user);
    table->count++;
    return user;
}

/* Backward-shift deletion: later members of the probe run move up into the
 * hole, so lookups never need tombstones. */
static void remove_slot(ts_user_table *table, size_t hole)
{
    size_t i = hole;
    for (;;) {
        i = (i + 1) & table->mask;
        slot *s = &table->slots[i];
        if (s->user == NULL)
            break;
        size_t home = (size_t)s->hash & table->mask;
        /* The entry may fill the hole when its home is not cyclically in
         * (hole, i]. */
        int home_after_hole = hole <= i ? (home > hole && home <= i)
                                        : (home > hole || home <= i);
        if (!home_after_hole) {
            table->slots[hole] = *s;
            hole = i;
        }
    }
    table->slots[hole] = (slot){ 0, NULL };
}

void ts_users_remove(ts_user_table *table, ts_user *user)
{
    if (table->expire_cursor == user)
        table->expire_cursor = user->lru_next;
    uint64_t hash = keyed_hash(table, user->id, user->id_len);
    remove_slot(table, probe(table, hash, user->id, user->id_len));
    lru_unlink(table, user);
    table->count--;
    table->state_bytes -= user->state_size;
    table->state_held -= state_room(user->state_kept);
    free_user(user);
}

int ts_users_resize_state(ts_user_table *table, ts_user *user, size_t size)
{
    size_t room = state_room(size);
    void *state = NULL;
    if (room > 0 && (state = calloc(1, room)) == NULL)
        return -1;
    table->state_held = table->state_held - state_room(user->state_kept) +
                        room;
    free_state(user);
    table->state_bytes = table->state_bytes - user->state_size + size;
    user->state = state;
    user->state_kept = size;
    user->state_size = size;
    return 0;
}

int ts_users_set_state(ts_user_table *table, ts_user *user,
                       const void *bytes, size_t len, size_t size)
{
    const unsigned char *b = bytes;
    size_t kept = len < size ? len : size;
    /* A belief block is mostly trailing zeros: skip them a word at a
     * time. */
    uint64_t word;
    while (kept >= sizeof word &&
           (memcpy(&word, b + kept - sizeof word, sizeof word), word == 0))
        kept -= sizeof word;
    while (kept > 0 && b[kept - 1] == 0)
        kept--;
    size_t room = state_room(kept), old_room = state_room(user->state_kept);
    unsigned char *state = user->state;
    if (room != old_room) {
        state = NULL;
        if (room > 0 && (state = malloc(room)) == NULL)
            return -1;
        free_state(user);
    }
    if (kept > 0)
        memcpy(state, b, kept);
    if (room > kept)
        memset(state + kept, 0, room - kept);
    table->state_held = table->state_held - old_room + room;
    table->state_bytes = table->state_bytes - user->state_size + size;
    user->state = state;
    user->state_kept = kept;
    user->state_size = size;
    return 0;
}

void ts_users_get_state(const ts_user *user, void *out)
{
    if (user->state_kept > 0)
        memcpy(out, user->state, user->state_kept);
    memset((unsigned char *)out + user->state_kept, 0,
           user->state_size - user->state_kept);
}

size_t ts_users_state_bytes(const ts_user_table *table)
{
    return table->state_bytes;
}

size_t ts_users_state_held_bytes(const ts_user_table *table)
{
    return table->state_held;
}

void ts_users_touch(ts_user_table *table, ts_user *user)
{
    if (table->lru_tail == user)
        return;
    if (table->expire_cursor == user)
        table->expire_cursor = user->lru_next;
    lru_unlink(table, user);
    lru_append(table, user);
}

ts_user *ts_users_oldest(ts_user_table *table)
{
    return table->lru_head;
}

size_t ts_users_expire(ts_user_table *table, size_t max_scan,
                       ts_user_expirable_fn expirable, void *ctx)
{
    /* One call never visits a user twice. */
    size_t to_scan = max_scan < table->count ? max_scan : table->count;
    size_t removed = 0;
    for (size_t scanned = 0; scanned < to_scan; scanned++) {
        if (table->expire_cursor == NULL)
            table->expire_cursor = table->lru_head;
        ts_user *user = table->expire_cursor;
        table->expire_cursor = user->lru_next;
        if (expirable(user, ctx)) {
            ts_users_remove(table, user);
            removed++;
        }
    }
    return removed;
}
