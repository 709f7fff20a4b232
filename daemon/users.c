#include "daemon/users.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* An allocation failure while growing the bucket array must not exit the
 * daemon: uthash then keeps the item in the current (longer) chains. */
#undef HASH_NONFATAL_OOM
#define HASH_NONFATAL_OOM 1

struct ts_user_table {
    ts_user *hash;               /* uthash head */
    ts_user *lru_head;           /* least recently touched */
    ts_user *lru_tail;
    ts_user *expire_cursor;      /* next user ts_users_expire looks at */
    size_t count;
    size_t capacity;
    size_t state_size;
    size_t state_offset;         /* from the start of a user's allocation */
    unsigned char hash_key[crypto_shorthash_KEYBYTES];
};

_Static_assert(TS_USERS_HASH_KEY_BYTES == crypto_shorthash_KEYBYTES,
               "hash key size must match SipHash");

static size_t round_up(size_t n, size_t align)
{
    return (n + align - 1) / align * align;
}

static unsigned keyed_hash(const ts_user_table *table, const char *id,
                           size_t id_len)
{
    unsigned char digest[crypto_shorthash_BYTES];
    crypto_shorthash(digest, (const unsigned char *)id, id_len,
                     table->hash_key);
    unsigned value;
    memcpy(&value, digest, sizeof value);
    return value;
}

ts_user_table *ts_users_new(size_t capacity, size_t state_size,
                            const unsigned char *hash_key)
{
    ts_user_table *table = calloc(1, sizeof *table);
    if (table == NULL)
        return NULL;
    table->capacity = capacity;
    table->state_size = state_size;
    table->state_offset = round_up(sizeof(ts_user), alignof(max_align_t));
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

void ts_users_free(ts_user_table *table)
{
    if (table == NULL)
        return;
    HASH_CLEAR(hh, table->hash);
    ts_user *user = table->lru_head;
    while (user != NULL) {
        ts_user *next = user->lru_next;
        sodium_memzero(user, table->state_offset + table->state_size);
        free(user);
        user = next;
    }
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

size_t ts_users_state_size(const ts_user_table *table)
{
    return table->state_size;
}

ts_user *ts_users_find(ts_user_table *table, const char *id, size_t id_len)
{
    ts_user *found = NULL;
    if (table->hash == NULL)
        return NULL;
    unsigned hashv = keyed_hash(table, id, id_len);
    HASH_FIND_BYHASHVALUE(hh, table->hash, id, id_len, hashv, found);
    return found;
}

ts_user *ts_users_insert(ts_user_table *table, const char *id, size_t id_len)
{
    if (table->count >= table->capacity)
        return NULL;
    size_t id_offset = table->state_offset + table->state_size;
    if (id_len > SIZE_MAX - id_offset - 1)
        return NULL;
    ts_user *user = calloc(1, id_offset + id_len + 1);
    if (user == NULL)
        return NULL;
    char *stored_id = (char *)user + id_offset;
    memcpy(stored_id, id, id_len);
    stored_id[id_len] = '\0';
    user->id = stored_id;
    user->id_len = id_len;
    user->state = table->state_size > 0 ? (char *)user + table->state_offset
                                        : NULL;

    unsigned hashv = keyed_hash(table, id, id_len);
    HASH_ADD_KEYPTR_BYHASHVALUE(hh, table->hash, user->id, id_len, hashv,
                                user);
    if (user->hh.tbl == NULL) {  /* uthash could not allocate its table */
        free(user);
        return NULL;
    }
    lru_append(table, user);
    table->count++;
    return user;
}

void ts_users_remove(ts_user_table *table, ts_user *user)
{
    if (table->expire_cursor == user)
        table->expire_cursor = user->lru_next;
    HASH_DELETE(hh, table->hash, user);
    lru_unlink(table, user);
    table->count--;
    /* The block holds a ledger and mechanism state: do not leave it in
     * freed memory. */
    sodium_memzero(user, table->state_offset + table->state_size);
    free(user);
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
