#include "state/store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lmdb.h>

#include "engine/safe_open.h"

#define META_DB "meta"
#define USERS_DB "users"
#define SCHEMA_KEY "schema_version"

struct ts_store {
    MDB_env *env;
    MDB_dbi meta;
    MDB_dbi users;
    MDB_txn *txn;                /* open write transaction, or NULL */
    int readonly;
    unsigned schema_version;
    void *copy;                  /* ts_store_get's result */
    size_t copy_cap;
    int concurrent_reads;        /* ts_store_set_concurrent_reads */
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ records */

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint64_t double_bits(double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    return v;
}

static double bits_double(uint64_t v)
{
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

/* version u8, flags u8, window_start i64, window_ms i64, spent f64,
 * last_ts i64, last_lat f64, last_lon f64, (version 3) window_opened i64,
 * profile length u16 (including its NUL) + bytes, state length u32, then
 * (version 2 and later) stored length u32, then the stored bytes; integers
 * little-endian. Version 1 stores all state-length bytes; later ones the
 * bytes up to the last non-zero one, the rest being zero, and say how many
 * so a truncated record is detected. */
#define RECORD_FIXED_V2 (2 + 6 * 8 + 2 + 4)
#define RECORD_FIXED (RECORD_FIXED_V2 + 8)
#define FLAG_HAS_WINDOW 1u
#define FLAG_HAS_LAST 2u
/* Times are epoch milliseconds no later than the pipeline's largest
 * timestamp (year 9999), and windows no longer: anything else is corrupt,
 * and would overflow the pipeline's window arithmetic. */
#define MAX_TIME_MS INT64_C(253402300799999)

size_t ts_record_encode(const ts_user_record *record, unsigned char *buf,
                        size_t cap)
{
    size_t profile_len = record->profile != NULL ? strlen(record->profile) + 1
                                                 : 0;
    if (profile_len > UINT16_MAX || record->state_len > TS_STORE_MAX_STATE ||
        record->state_stored_len > record->state_len)
        return 0;
    size_t stored = record->state_stored_len;
    const unsigned char *state = record->state;
    while (stored > 0 && state[stored - 1] == 0)
        stored--;
    size_t total = RECORD_FIXED + 4 + profile_len + stored;
    if (total > cap)
        return total;
    unsigned char *p = buf;
    *p++ = (unsigned char)TS_STORE_RECORD_VERSION;
    *p++ = (unsigned char)((record->has_window ? FLAG_HAS_WINDOW : 0) |
                           (record->has_last ? FLAG_HAS_LAST : 0));
    put_u64(p, (uint64_t)record->window_start_ms);
    put_u64(p + 8, (uint64_t)record->window_ms);
    put_u64(p + 16, double_bits(record->spent));
    put_u64(p + 24, (uint64_t)record->last_ts_ms);
    put_u64(p + 32, double_bits(record->last_lat));
    put_u64(p + 40, double_bits(record->last_lon));
    put_u64(p + 48, (uint64_t)record->window_opened_ms);
    p += 56;
    *p++ = (unsigned char)(profile_len & 0xff);
    *p++ = (unsigned char)(profile_len >> 8);
    if (profile_len > 0)
        memcpy(p, record->profile, profile_len);
    p += profile_len;
    for (int i = 0; i < 4; i++)
        *p++ = (unsigned char)(record->state_len >> (8 * i));
    for (int i = 0; i < 4; i++)
        *p++ = (unsigned char)(stored >> (8 * i));
    if (stored > 0)
        memcpy(p, state, stored);
    return total;
}

int ts_record_decode(const void *bytes, size_t len, ts_user_record *record)
{
    const unsigned char *p = bytes;
    memset(record, 0, sizeof *record);
    if (len < 1 || p[0] < 1 || p[0] > 3)
        return -1;
    unsigned version = p[0];
    size_t fixed = version == 3 ? RECORD_FIXED : RECORD_FIXED_V2;
    if (len < fixed)
        return -1;
    record->has_window = (p[1] & FLAG_HAS_WINDOW) != 0;
    record->has_last = (p[1] & FLAG_HAS_LAST) != 0;
    p += 2;
    record->window_start_ms = (int64_t)get_u64(p);
    record->window_ms = (int64_t)get_u64(p + 8);
    record->spent = bits_double(get_u64(p + 16));
    record->last_ts_ms = (int64_t)get_u64(p + 24);
    record->last_lat = bits_double(get_u64(p + 32));
    record->last_lon = bits_double(get_u64(p + 40));
    p += 48;
    if (version == 3) {
        record->window_opened_ms = (int64_t)get_u64(p);
        p += 8;
    }
    size_t profile_len = (size_t)p[0] | ((size_t)p[1] << 8);
    p += 2;
    size_t rest = len - fixed;
    if (profile_len > rest)
        return -1;
    if (profile_len > 0) {
        if (p[profile_len - 1] != '\0' || memchr(p, '\0', profile_len - 1))
            return -1;
        record->profile = (const char *)p;
    }
    p += profile_len;
    rest -= profile_len;
    size_t state_len = 0;
    for (int i = 0; i < 4; i++)
        state_len |= (size_t)p[i] << (8 * i);
    p += 4;
    size_t stored = state_len;
    if (version >= 2) {
        if (rest < 4)
            return -1;
        stored = 0;
        for (int i = 0; i < 4; i++)
            stored |= (size_t)p[i] << (8 * i);
        p += 4;
        rest -= 4;
    }
    if (stored != rest || stored > state_len || state_len > TS_STORE_MAX_STATE)
        return -1;
    record->state = rest > 0 ? p : NULL;
    record->state_len = state_len;
    record->state_stored_len = rest;
    if (record->has_window &&
        (record->profile == NULL || record->window_ms <= 0 ||
         record->window_ms > MAX_TIME_MS || record->window_start_ms < 0 ||
         record->window_start_ms > MAX_TIME_MS || record->last_ts_ms < 0 ||
         record->last_ts_ms > MAX_TIME_MS || record->window_opened_ms < 0 ||
         record->window_opened_ms > MAX_TIME_MS || !(record->spent >= 0.0)))
        return -1;
    return 0;
}

/* -------------------------------------------------------------- store */

/* One write in `txn` made durable, the transaction ended either way:
 * 0 or an LMDB error code. */
static int put_and_commit(MDB_txn *txn, MDB_dbi dbi, MDB_val *key,
                          MDB_val *value)
{
    int rc = mdb_put(txn, dbi, key, value, 0);
    if (rc != 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    return mdb_txn_commit(txn);
}

static int check_schema(ts_store *store, const char *dir, char *err,
                        size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, store->readonly ? MDB_RDONLY : 0,
                           &txn);
    if (rc != 0) {
        set_err(err, errlen, "state store %s: %s", dir, mdb_strerror(rc));
        return -1;
    }
    unsigned flags = store->readonly ? 0 : MDB_CREATE;
    rc = mdb_dbi_open(txn, META_DB, flags, &store->meta);
    if (rc == 0)
        rc = mdb_dbi_open(txn, USERS_DB, flags, &store->users);
    if (rc != 0) {
        set_err(err, errlen, "state store %s: %s%s", dir, mdb_strerror(rc),
                rc == MDB_NOTFOUND ? " (not a tracesan state store)" : "");
        mdb_txn_abort(txn);
        return -1;
    }
    MDB_val key = { .mv_size = strlen(SCHEMA_KEY), .mv_data = SCHEMA_KEY };
    MDB_val value;
    rc = mdb_get(txn, store->meta, &key, &value);
    if (rc == MDB_NOTFOUND && !store->readonly) {
        unsigned char version[4];
        for (int i = 0; i < 4; i++)
            version[i] = (unsigned char)(TS_STORE_SCHEMA_VERSION >> (8 * i));
        value.mv_size = sizeof version;
        value.mv_data = version;
        rc = put_and_commit(txn, store->meta, &key, &value);
        if (rc != 0) {
            set_err(err, errlen, "state store %s: cannot initialise: %s", dir,
                    mdb_strerror(rc));
            return -1;
        }
        store->schema_version = TS_STORE_SCHEMA_VERSION;
        return 0;
    }
    if (rc != 0 || value.mv_size != 4) {
        set_err(err, errlen, "state store %s: no valid schema version (%s)",
                dir, rc != 0 ? mdb_strerror(rc) : "bad size");
        mdb_txn_abort(txn);
        return -1;
    }
    const unsigned char *v = value.mv_data;
    unsigned version = (unsigned)v[0] | (unsigned)v[1] << 8 |
                       (unsigned)v[2] << 16 | (unsigned)v[3] << 24;
    /* Committing (not aborting) keeps the database handles opened in this
     * transaction usable afterwards. */
    rc = mdb_txn_commit(txn);
    if (rc != 0) {
        set_err(err, errlen, "state store %s: %s", dir, mdb_strerror(rc));
        return -1;
    }
    if (version > TS_STORE_SCHEMA_VERSION) {
        set_err(err, errlen,
                "state store %s has schema version %u, newer than the %u this "
                "build understands; refusing to use it (upgrade tracesan, or "
                "point state.dir elsewhere)",
                dir, version, TS_STORE_SCHEMA_VERSION);
        return -1;
    }
    if (version < TS_STORE_SCHEMA_VERSION && !store->readonly) {
        rc = mdb_txn_begin(store->env, NULL, 0, &txn);
        if (rc == 0) {
            unsigned char mark[4];
            for (int i = 0; i < 4; i++)
                mark[i] = (unsigned char)(TS_STORE_SCHEMA_VERSION >> (8 * i));
            MDB_val upgraded = { .mv_size = sizeof mark, .mv_data = mark };
            rc = mdb_put(txn, store->meta, &key, &upgraded, 0);
            if (rc == 0)
                rc = mdb_txn_commit(txn);
            else
                mdb_txn_abort(txn);
        }
        if (rc != 0) {
            set_err(err, errlen, "state store %s: cannot upgrade schema "
                    "version %u to %u: %s", dir, version,
                    TS_STORE_SCHEMA_VERSION, mdb_strerror(rc));
            return -1;
        }
        version = TS_STORE_SCHEMA_VERSION;
    }
    store->schema_version = version;
    return 0;
}

/* LMDB opens its two files blocking, and a read-only open of a FIFO
 * waits for a writer: refuse anything but a directory of regular files
 * before it opens them (issue 25, item 5). */
static int check_store_files(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "state store %s: not a directory", dir);
        return -1;
    }
    static const char *const names[] = { "data.mdb", "lock.mdb" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096], why[128];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (ts_check_regular(path, 1, why, sizeof why) != 0) {
            set_err(err, errlen, "state store %s: %s", path, why);
            return -1;
        }
    }
    return 0;
}

ts_store *ts_store_open(const char *dir, ts_store_sync sync,
                        size_t map_size_mb, int readonly, char *err,
                        size_t errlen)
{
    if (check_store_files(dir, err, errlen) != 0)
        return NULL;
    if (!readonly && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        set_err(err, errlen, "state store %s: cannot create: %s", dir,
                strerror(errno));
        return NULL;
    }
    ts_store *store = calloc(1, sizeof *store);
    if (store == NULL) {
        set_err(err, errlen, "state store %s: out of memory", dir);
        return NULL;
    }
    store->readonly = readonly;
    int rc = mdb_env_create(&store->env);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(store->env, 2);
    if (rc == 0)
        rc = mdb_env_set_mapsize(store->env, map_size_mb * (size_t)1048576);
    if (rc != 0) {
        set_err(err, errlen, "state store %s: %s", dir, mdb_strerror(rc));
        goto fail;
    }
    unsigned flags = MDB_NOTLS;
    if (readonly)
        flags |= MDB_RDONLY;
    else if (sync == TS_STORE_SYNC_BATCH)
        flags |= MDB_NOMETASYNC;
    else if (sync == TS_STORE_SYNC_NONE)
        flags |= MDB_NOSYNC;
    rc = mdb_env_open(store->env, dir, flags, 0600);
    if (rc != 0) {
        set_err(err, errlen, "state store %s: cannot open: %s", dir,
                mdb_strerror(rc));
        goto fail;
    }
    if (check_schema(store, dir, err, errlen) != 0)
        goto fail;
    return store;

fail:
    if (store->env != NULL)
        mdb_env_close(store->env);
    free(store);
    return NULL;
}

void ts_store_close(ts_store *store)
{
    if (store == NULL)
        return;
    if (store->txn != NULL)
        mdb_txn_abort(store->txn);
    mdb_env_close(store->env);
    free(store->copy);
    free(store);
}

int ts_store_begin(ts_store *store, char *err, size_t errlen)
{
    if (store->txn != NULL) {
        set_err(err, errlen, "state store: transaction already open");
        return -1;
    }
    int rc = mdb_txn_begin(store->env, NULL, 0, &store->txn);
    if (rc != 0) {
        store->txn = NULL;
        set_err(err, errlen, "state store: cannot begin: %s",
                mdb_strerror(rc));
        return -1;
    }
    return 0;
}

int ts_store_put(ts_store *store, const char *user_id, size_t id_len,
                 const void *bytes, size_t len, char *err, size_t errlen)
{
    if (store->txn == NULL) {
        set_err(err, errlen, "state store: put outside a transaction");
        return -1;
    }
    MDB_val key = { .mv_size = id_len, .mv_data = (void *)user_id };
    MDB_val value = { .mv_size = len, .mv_data = (void *)bytes };
    int rc = mdb_put(store->txn, store->users, &key, &value, 0);
    if (rc != 0) {
        set_err(err, errlen, "state store: cannot write a user: %s",
                mdb_strerror(rc));
        return -1;
    }
    return 0;
}

int ts_store_del(ts_store *store, const char *user_id, size_t id_len)
{
    if (store->txn == NULL)
        return -1;
    MDB_val key = { .mv_size = id_len, .mv_data = (void *)user_id };
    int rc = mdb_del(store->txn, store->users, &key, NULL);
    return rc == 0 || rc == MDB_NOTFOUND ? 0 : -1;
}

int ts_store_commit(ts_store *store, char *err, size_t errlen)
{
    if (store->txn == NULL) {
        set_err(err, errlen, "state store: commit without a transaction");
        return -1;
    }
    int rc = mdb_txn_commit(store->txn);  /* frees the txn even on error */
    store->txn = NULL;
    if (rc != 0) {
        set_err(err, errlen, "state store: commit failed: %s",
                mdb_strerror(rc));
        return -1;
    }
    return 0;
}

void ts_store_abort(ts_store *store)
{
    if (store->txn != NULL)
        mdb_txn_abort(store->txn);
    store->txn = NULL;
}

int ts_store_get(ts_store *store, const char *user_id, size_t id_len,
                 const void **bytes, size_t *len)
{
    /* Inside a write transaction, read through it (its own writes
     * included), unless another thread owns it. */
    MDB_txn *txn = store->concurrent_reads ? NULL : store->txn;
    int own_txn = txn == NULL;
    if (own_txn && mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn) != 0)
        return -1;
    MDB_val key = { .mv_size = id_len, .mv_data = (void *)user_id };
    MDB_val value;
    int rc = mdb_get(txn, store->users, &key, &value);
    int result = -1;
    if (rc == MDB_NOTFOUND) {
        result = 0;
    } else if (rc == 0) {
        if (value.mv_size > store->copy_cap) {
            void *copy = realloc(store->copy, value.mv_size);
            if (copy == NULL)
                goto out;
            store->copy = copy;
            store->copy_cap = value.mv_size;
        }
        if (value.mv_size > 0)
            memcpy(store->copy, value.mv_data, value.mv_size);
        *bytes = store->copy;
        *len = value.mv_size;
        result = 1;
    }
out:
    if (own_txn)
        mdb_txn_abort(txn);
    return result;
}

int ts_store_put_meta(ts_store *store, const char *name, const void *bytes,
                      size_t len, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(store->env, NULL, 0, &txn);
    if (rc == 0) {
        MDB_val key = { .mv_size = strlen(name), .mv_data = (void *)name };
        MDB_val value = { .mv_size = len, .mv_data = (void *)bytes };
        rc = put_and_commit(txn, store->meta, &key, &value);
    }
    if (rc != 0) {
        set_err(err, errlen, "state store: cannot write %s: %s", name,
                mdb_strerror(rc));
        return -1;
    }
    return 0;
}

int ts_store_get_meta(ts_store *store, const char *name, void **bytes,
                      size_t *len)
{
    MDB_txn *txn;
    if (mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn) != 0)
        return -1;
    MDB_val key = { .mv_size = strlen(name), .mv_data = (void *)name };
    MDB_val value;
    int rc = mdb_get(txn, store->meta, &key, &value);
    int result = rc == MDB_NOTFOUND ? 0 : -1;
    if (rc == 0) {
        *bytes = malloc(value.mv_size > 0 ? value.mv_size : 1);
        if (*bytes != NULL) {
            memcpy(*bytes, value.mv_data, value.mv_size);
            *len = value.mv_size;
            result = 1;
        }
    }
    mdb_txn_abort(txn);
    return result;
}

int ts_store_is_own_key(const void *key, size_t len)
{
    return len > 0 && *(const unsigned char *)key < 0x20;
}

int ts_store_iterate(ts_store *store, ts_store_visit_fn visit, void *ctx)
{
    MDB_txn *txn;
    MDB_cursor *cursor;
    if (mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn) != 0)
        return -1;
    if (mdb_cursor_open(txn, store->users, &cursor) != 0) {
        mdb_txn_abort(txn);
        return -1;
    }
    MDB_val key, value;
    int result = 0;
    int rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST);
    while (rc == 0) {
        if (!ts_store_is_own_key(key.mv_data, key.mv_size)) {
            result = visit(ctx, key.mv_data, key.mv_size, value.mv_data,
                           value.mv_size);
            if (result != 0)
                break;
        }
        rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT);
    }
    if (result == 0 && rc != MDB_NOTFOUND)
        result = -1;
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    return result;
}

int ts_store_get_info(ts_store *store, ts_store_info *info)
{
    memset(info, 0, sizeof *info);
    MDB_envinfo env_info;
    MDB_stat env_stat, users_stat;
    MDB_txn *txn;
    if (mdb_env_info(store->env, &env_info) != 0 ||
        mdb_env_stat(store->env, &env_stat) != 0 ||
        mdb_txn_begin(store->env, NULL, MDB_RDONLY, &txn) != 0)
        return -1;
    int rc = mdb_stat(txn, store->users, &users_stat);
    /* The daemon's own records sort first (their keys start below any
     * user id's first byte): count them off. */
    size_t own = 0;
    MDB_cursor *cursor;
    if (rc == 0 && (rc = mdb_cursor_open(txn, store->users, &cursor)) == 0) {
        MDB_val key, value;
        int at = mdb_cursor_get(cursor, &key, &value, MDB_FIRST);
        while (at == 0 && ts_store_is_own_key(key.mv_data, key.mv_size)) {
            own++;
            at = mdb_cursor_get(cursor, &key, &value, MDB_NEXT);
        }
        if (at != 0 && at != MDB_NOTFOUND)
            rc = at;
        mdb_cursor_close(cursor);
    }
    mdb_txn_abort(txn);
    if (rc != 0)
        return -1;
    info->schema_version = store->schema_version;
    info->users = users_stat.ms_entries - own;
    info->map_size_bytes = env_info.me_mapsize;
    info->page_size = env_stat.ms_psize;
    info->used_bytes = (env_info.me_last_pgno + 1) * (size_t)env_stat.ms_psize;
    return 0;
}

/* ------------------------------------------------------- record batch */

void ts_store_set_concurrent_reads(ts_store *store)
{
    store->concurrent_reads = 1;
}

static int batch_reserve(ts_record_batch *batch, size_t extra)
{
    if (batch->len + extra <= batch->cap)
        return 0;
    size_t cap = batch->cap > 0 ? batch->cap : 4096;
    while (cap < batch->len + extra) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    unsigned char *bytes = realloc(batch->bytes, cap);
    if (bytes == NULL)
        return -1;
    batch->bytes = bytes;
    batch->cap = cap;
    return 0;
}

int ts_record_batch_add(ts_record_batch *batch, const char *user_id,
                        size_t id_len, const ts_user_record *record)
{
    size_t need = ts_record_encode(record, NULL, 0);
    if (need == 0 || id_len > SIZE_MAX - need ||
        batch_reserve(batch, id_len + need) != 0)
        return -1;
    if (batch->n == batch->entries_cap) {
        size_t cap = batch->entries_cap > 0 ? batch->entries_cap * 2 : 256;
        ts_record_batch_entry *entries =
            realloc(batch->entries, cap * sizeof *entries);
        if (entries == NULL)
            return -1;
        batch->entries = entries;
        batch->entries_cap = cap;
    }
    ts_record_batch_entry *e = &batch->entries[batch->n];
    e->id_offset = batch->len;
    e->id_len = id_len;
    memcpy(batch->bytes + batch->len, user_id, id_len);
    e->record_offset = batch->len + id_len;
    e->record_len = ts_record_encode(record, batch->bytes + e->record_offset,
                                     need);
    batch->len += id_len + need;
    batch->n++;
    return 0;
}

void ts_record_batch_clear(ts_record_batch *batch)
{
    /* The records are ledgers: do not leave them in memory for reuse. */
    if (batch->bytes != NULL)
        memset(batch->bytes, 0, batch->len);
    batch->len = 0;
    batch->n = 0;
}

void ts_record_batch_free(ts_record_batch *batch)
{
    ts_record_batch_clear(batch);
    free(batch->bytes);
    free(batch->entries);
    memset(batch, 0, sizeof *batch);
}

int ts_store_put_batch(ts_store *store, const ts_record_batch *batch,
                       char *err, size_t errlen)
{
    for (size_t i = 0; i < batch->n; i++) {
        const ts_record_batch_entry *e = &batch->entries[i];
        if (ts_store_put(store, (const char *)batch->bytes + e->id_offset,
                         e->id_len, batch->bytes + e->record_offset,
                         e->record_len, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ backend */

static int backend_load(void *ctx, const char *user_id, size_t id_len,
                        ts_user_record *record)
{
    ts_store_backend *sb = ctx;
    const void *bytes;
    size_t len;
    int found = ts_store_get(sb->store, user_id, id_len, &bytes, &len);
    if (found <= 0)
        return found;
    if (ts_record_decode(bytes, len, record) != 0) {
        snprintf(sb->err, sizeof sb->err, "undecodable user record");
        return -1;
    }
    return 1;
}

static int backend_save(void *ctx, const char *user_id, size_t id_len,
                        const ts_user_record *record)
{
    ts_store_backend *sb = ctx;
    if (sb->batch != NULL) {
        if (ts_record_batch_add(sb->batch, user_id, id_len, record) == 0)
            return 0;
        snprintf(sb->err, sizeof sb->err,
                 "cannot encode a user record (out of memory)");
        return -1;
    }
    size_t need = ts_record_encode(record, sb->buf, sb->cap);
    if (need == 0) {
        snprintf(sb->err, sizeof sb->err, "user record too large to encode");
        return -1;
    }
    if (need > sb->cap) {
        unsigned char *buf = realloc(sb->buf, need);
        if (buf == NULL) {
            snprintf(sb->err, sizeof sb->err, "out of memory");
            return -1;
        }
        sb->buf = buf;
        sb->cap = need;
        ts_record_encode(record, sb->buf, sb->cap);
    }
    return ts_store_put(sb->store, user_id, id_len, sb->buf, need, sb->err,
                        sizeof sb->err);
}

void ts_store_backend_init(ts_store_backend *sb, ts_store *store)
{
    memset(sb, 0, sizeof *sb);
    sb->store = store;
    sb->backend.ctx = sb;
    sb->backend.load = backend_load;
    sb->backend.save = backend_save;
}

void ts_store_backend_free(ts_store_backend *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->cap = 0;
}
