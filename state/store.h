/* The durable per-user store: one LMDB environment under state.dir.
 *
 * Two named databases: "meta" (schema version) and "users" (user id ->
 * encoded ts_user_record). The interface is deliberately small (open, a
 * write transaction of puts/deletes, commit, point reads, iteration) so that
 * another backend can implement the same calls.
 *
 * What a commit guarantees depends on the sync mode. In every mode a
 * committed transaction survives the daemon being killed (kill -9, crash):
 * LMDB has written it to the file through the OS before commit returns.
 * The modes differ only when the machine itself goes down:
 *   full   fsync of data and meta page on every commit (LMDB default): a
 *          commit survives power loss.
 *   batch  MDB_NOMETASYNC: data pages are synced on every commit, the meta
 *          page lazily (by the next commit's sync or the OS). An OS crash or
 *          power loss can undo the last committed transaction (one group of
 *          messages, already published); the store stays consistent.
 *   none   MDB_NOSYNC: nothing is synced by the daemon. An OS crash can lose
 *          any number of recent commits, and LMDB documents that it can
 *          corrupt the store. Debits of published points can be lost, so
 *          this mode weakens the budget guarantee; for tests and benchmarks.
 */
#ifndef TRACESAN_STATE_STORE_H
#define TRACESAN_STATE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"

/* Same order as the state.sync choices in engine/config.c. */
typedef enum ts_store_sync {
    TS_STORE_SYNC_FULL = 0,
    TS_STORE_SYNC_BATCH = 1,
    TS_STORE_SYNC_NONE = 2
} ts_store_sync;

/* Layout of the environment (databases, meta keys). */
/* N: records of version N may appear (opening an older store for writing
 * upgrades its mark, so an older build refuses it as a whole instead of
 * failing user by user). */
#define TS_STORE_SCHEMA_VERSION 3u
/* Encoding of one user record: 1 stores the whole state block, 2 stores
 * it without its trailing zero bytes, 3 adds the clock instant the window
 * opened at. All are read; versions 1 and 2 decode with that instant
 * unknown (0), which the pipeline replaces by its clock at the restore
 * (engine/pipeline.h, ts_user_record). */
#define TS_STORE_RECORD_VERSION 3u
/* Largest mechanism state a record may declare (a delta-location-set
 * belief at its maximum capacity is 16 MiB): a corrupt length is refused
 * on decode instead of being believed. */
#define TS_STORE_MAX_STATE (64u << 20)

typedef struct ts_store ts_store;

/* Opens (creating the directory's files when `readonly` is 0) and checks
 * the schema version: a store written by a newer schema is refused. NULL
 * with err filled on failure. */
ts_store *ts_store_open(const char *dir, ts_store_sync sync,
                        size_t map_size_mb, int readonly, char *err,
                        size_t errlen);
void ts_store_close(ts_store *store);

/* One write transaction at a time. Puts and deletes need one open. */
int ts_store_begin(ts_store *store, char *err, size_t errlen);
int ts_store_put(ts_store *store, const char *user_id, size_t id_len,
                 const void *bytes, size_t len, char *err, size_t errlen);
int ts_store_del(ts_store *store, const char *user_id, size_t id_len);
/* Durable per the sync mode once it returns 0. On failure the transaction
 * is aborted. */
int ts_store_commit(ts_store *store, char *err, size_t errlen);
void ts_store_abort(ts_store *store);

/* Read a user's value: through the open write transaction if there is
 * one, else the last committed one. 1 found: *bytes
 * points into a store-owned copy valid until the next get; 0 absent; -1
 * error. */
int ts_store_get(ts_store *store, const char *user_id, size_t id_len,
                 const void **bytes, size_t *len);

/* The daemon's own small records beside the users (a PRIVIC profile's
 * channel version and estimate), in the meta database under `name`. put
 * runs a write transaction of its own, so any thread may call it (LMDB
 * serialises writers; it waits for the store writer's commit), and it is
 * durable per the sync mode when it returns 0. get: 1 with *bytes
 * malloc'ed (the caller frees), 0 absent, -1 error. */
int ts_store_put_meta(ts_store *store, const char *name, const void *bytes,
                      size_t len, char *err, size_t errlen);
int ts_store_get_meta(ts_store *store, const char *name, void **bytes,
                      size_t *len);

/* Keys that start with a byte below 0x20 hold the daemon's own records,
 * kept beside the users so that they commit in the same transactions
 * (the MQTT driver's recent messages, "\x01mqtt.recent.<n>"). No user id
 * starts so (the pipeline admits printable UTF-8 only): iteration and the
 * user count below skip them, and nothing imports one as a user. */
int ts_store_is_own_key(const void *key, size_t len);

/* Visit every user in key order (the daemon's own records skipped); a
 * non-zero return from `visit` stops the walk and is returned. -1 on a
 * store error. */
typedef int (*ts_store_visit_fn)(void *ctx, const char *user_id,
                                 size_t id_len, const void *bytes,
                                 size_t len);
int ts_store_iterate(ts_store *store, ts_store_visit_fn visit, void *ctx);

typedef struct ts_store_info {
    unsigned schema_version;
    size_t users;                /* the daemon's own records not counted */
    size_t map_size_bytes;
    size_t used_bytes;           /* pages in use * page size */
    size_t page_size;
} ts_store_info;
int ts_store_get_info(ts_store *store, ts_store_info *info);

/* Versioned record encoding, independent of the backend. encode returns the
 * encoded size (writing at most `cap` bytes; call again with a larger
 * buffer when the result exceeds cap). decode returns 0, or -1 for a
 * truncated or unknown-version record; pointers in `record` point into
 * `bytes`. */
size_t ts_record_encode(const ts_user_record *record, unsigned char *buf,
                        size_t cap);
int ts_record_decode(const void *bytes, size_t len, ts_user_record *record);

/* Encoded user records waiting for a write transaction
 * (state/store_writer.h). */
typedef struct ts_record_batch_entry {
    size_t id_offset, id_len;
    size_t record_offset, record_len;
} ts_record_batch_entry;

typedef struct ts_record_batch {
    unsigned char *bytes;
    size_t len, cap;
    ts_record_batch_entry *entries;
    size_t n, entries_cap;
} ts_record_batch;

/* 0, or -1 when the record cannot be encoded or memory ran out (the batch
 * is then as it was). */
int ts_record_batch_add(ts_record_batch *batch, const char *user_id,
                        size_t id_len, const ts_user_record *record);
void ts_record_batch_clear(ts_record_batch *batch);
void ts_record_batch_free(ts_record_batch *batch);
/* Puts every record of the batch, in order, inside the open write
 * transaction. */
int ts_store_put_batch(ts_store *store, const ts_record_batch *batch,
                       char *err, size_t errlen);
/* From now on ts_store_get reads through a read transaction of its own even
 * while a write transaction is open, which another thread then owns. */
void ts_store_set_concurrent_reads(ts_store *store);

/* A ts_state_backend over an open store. `store_backend` must outlive the
 * pipeline's use of it; save needs a write transaction open, or appends
 * to `batch` when that is set. */
typedef struct ts_store_backend {
    ts_state_backend backend;
    ts_store *store;
    ts_record_batch *batch;      /* set: save encodes into it */
    unsigned char *buf;          /* encode scratch */
    size_t cap;
    char err[256];               /* last error */
} ts_store_backend;

void ts_store_backend_init(ts_store_backend *sb, ts_store *store);
void ts_store_backend_free(ts_store_backend *sb);

#endif
