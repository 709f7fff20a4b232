/* The LMDB store and the pipeline's state backend: record encoding, store
 * round trips and persistence across reopen, schema version refusal,
 * iteration, and the pipeline restoring a user's ledger (spend, mechanism
 * state, ordering) from the store after its in-memory entry is gone, which
 * is what keeps a restart or an expiry from refunding budget.
 *
 * The fake mechanism spends a fixed amount per point and counts its calls in
 * the user's state, so every expected number is exact. */
#include <check.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/pipeline.h"
#include "state/store.h"
#include "state/store_writer.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_mechanism.h"

#define WINDOW_MS 10000
#define TOTAL 1.0
#define SPEND 0.25           /* four points per window */

static char dir[64];
static ts_rng *rng;

static void setup(void)
{
    memset(&seen, 0, sizeof seen);
    snprintf(dir, sizeof dir, "/tmp/check_store.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    rng = ts_rng_new_seeded(7);
    ck_assert_ptr_nonnull(rng);
}

static void remove_in(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void teardown(void)
{
    remove_in("data.mdb");
    remove_in("lock.mdb");
    rmdir(dir);
    ts_rng_free(rng);
}

static ts_pipeline *make_pipeline_with(const char *const *names, size_t n,
                                       const char *big);

/* Profiles named by `names` (the first is the default). */
static ts_pipeline *make_pipeline(const char *const *names, size_t n)
{
    return make_pipeline_with(names, n, NULL);
}

/* The same, the profile named `big` (if any) with a 4 KiB state. */
static ts_pipeline *make_pipeline_with(const char *const *names, size_t n,
                                       const char *big)
{
    ts_profile *profiles = calloc(n, sizeof *profiles);
    ck_assert_ptr_nonnull(profiles);
    for (size_t i = 0; i < n; i++) {
        int is_big = big != NULL && strcmp(names[i], big) == 0;
        /* The big profile holds a 4 KiB state, like a delta-location-set
         * profile next to geoind. */
        fake_profile *mech = fake_profile_new((fake_profile){
            .total = TOTAL, .spend = SPEND, .dlat = 0.01, .dlon = 0.01,
            .state_bytes = is_big ? 4096 : 0 });
        ck_assert_ptr_nonnull(mech);
        profiles[i].name = strdup(names[i]);
        profiles[i].ops = &fake_ops;
        profiles[i].mech = mech;
        profiles[i].window_budget = TOTAL;
        profiles[i].window_ms = WINDOW_MS;
        profiles[i].on_exhausted = TS_ON_EXHAUSTED_DROP;
    }
    ts_pipeline_limits limits = {
        .max_users = 100, .idle_ttl_ms = 1000, .max_user_id_bytes = 64,
    };
    ts_pipeline *pipeline = ts_pipeline_new(profiles, n, 0, &limits, rng);
    ck_assert_ptr_nonnull(pipeline);
    return pipeline;
}

static ts_store *open_store(void)
{
    char err[512];
    ts_store *store =
        ts_store_open(dir, TS_STORE_SYNC_BATCH, 16, 0, err, sizeof err);
    ck_assert_msg(store != NULL, "open: %s", err);
    return store;
}

/* A pipeline of profiles `names` over `store` through the backend `sb`. */
static ts_pipeline *stored_pipeline(ts_store *store, ts_store_backend *sb,
                                    const char *const *names, size_t n)
{
    ts_store_backend_init(sb, store);
    ts_pipeline *pipeline = make_pipeline(names, n);
    ts_pipeline_set_state_backend(pipeline, &sb->backend);
    return pipeline;
}

static void process(ts_pipeline *pipeline, const char *user, int64_t ts_ms,
                    const char *profile, ts_outcome *out)
{
    ts_input input = {
        .user_id = user, .ts_ms = ts_ms, .lat = 48.85, .lon = 2.35,
        .profile = profile,
    };
    ts_pipeline_process(pipeline, &input, out);
}

/* What the daemon does at the end of each group of messages. */
static void group_commit(ts_pipeline *pipeline, ts_store *store)
{
    char err[512];
    ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
    ck_assert_int_eq(ts_pipeline_save_dirty(pipeline), 0);
    ts_pipeline_mark_in_flight(pipeline);
    ck_assert_msg(ts_store_commit(store, err, sizeof err) == 0, "%s", err);
    ts_pipeline_mark_durable(pipeline);
}

/* ------------------------------------------------------------ records */

/* Offset of the clock instant a version-3 record adds after the fixed
 * fields (version, flags, six 8-byte fields). */
#define OPENED_OFFSET (2 + 48)

/* Turn a version-3 record in buf (len bytes) into the version-2 encoding
 * of the same ledger, which has no window opening instant. Returns the
 * new length. */
static size_t as_version_2(unsigned char *buf, size_t len)
{
    memmove(buf + OPENED_OFFSET, buf + OPENED_OFFSET + 8,
            len - OPENED_OFFSET - 8);
    buf[0] = 2;
    return len - 8;
}

TS_TEST(test_record_round_trip)
{
    unsigned char state[5] = { 1, 2, 3, 4, 5 };
    ts_user_record in = {
        .has_window = 1, .profile = "geoind", .window_start_ms = 1234567,
        .window_ms = 86400000, .window_opened_ms = INT64_C(1700000000123),
        .spent = 0.1 + 0.2, .last_ts_ms = 1299999,
        .has_last = 1, .last_lat = -33.8688197, .last_lon = 151.2092955,
        .state = state, .state_len = sizeof state,
        .state_stored_len = sizeof state,
    };
    unsigned char buf[256];
    size_t len = ts_record_encode(&in, buf, sizeof buf);
    ck_assert_uint_gt(len, 0);
    ck_assert_uint_le(len, sizeof buf);
    /* Too small a buffer reports the size and writes nothing past it. */
    ck_assert_uint_eq(ts_record_encode(&in, buf, 3), len);

    ts_user_record out;
    ck_assert_int_eq(ts_record_decode(buf, len, &out), 0);
    ck_assert_int_eq(out.has_window, 1);
    ck_assert_str_eq(out.profile, "geoind");
    ck_assert(out.window_start_ms == in.window_start_ms);
    ck_assert(out.window_ms == in.window_ms);
    ck_assert(out.window_opened_ms == in.window_opened_ms);
    ck_assert(out.spent == in.spent);  /* bit-exact */
    ck_assert(out.last_ts_ms == in.last_ts_ms);
    ck_assert_int_eq(out.has_last, 1);
    ck_assert(out.last_lat == in.last_lat && out.last_lon == in.last_lon);
    ck_assert_uint_eq(out.state_len, sizeof state);
    ck_assert_mem_eq(out.state, state, sizeof state);

    /* Every truncation and an unknown record version are refused. */
    for (size_t cut = 0; cut < len; cut++)
        ck_assert_int_eq(ts_record_decode(buf, cut, &out), -1);
    buf[0] = TS_STORE_RECORD_VERSION + 1;
    ck_assert_int_eq(ts_record_decode(buf, len, &out), -1);
}
END_TEST

/* A belief block is mostly trailing zeros: they are not stored, come back
 * as zeros, and version-1 records (whole block) still read. */
TS_TEST(test_record_trailing_zeros_not_stored)
{
    unsigned char state[4096];
    memset(state, 0, sizeof state);
    state[0] = 7;
    state[99] = 9;
    ts_user_record in = {
        .has_window = 1, .profile = "pim", .window_start_ms = 1,
        .window_ms = 1000, .spent = 1.0, .state = state,
        .state_len = sizeof state, .state_stored_len = sizeof state,
    };
    unsigned char buf[8192];
    size_t full = ts_record_encode(&in, buf, sizeof buf);
    in.state_len = in.state_stored_len = 100;
    size_t prefix = ts_record_encode(&in, buf, sizeof buf);
    in.state_len = in.state_stored_len = sizeof state;
    ck_assert_uint_eq(full, prefix);
    ck_assert_uint_eq(ts_record_encode(&in, buf, sizeof buf), full);

    ts_user_record out;
    ck_assert_int_eq(ts_record_decode(buf, full, &out), 0);
    ck_assert_uint_eq(out.state_len, sizeof state);
    ck_assert_uint_eq(out.state_stored_len, 100);
    ck_assert_mem_eq(out.state, state, 100);

    /* Re-encoding a decoded record reads only the stored bytes. */
    unsigned char again[8192];
    ck_assert_uint_eq(ts_record_encode(&out, again, sizeof again), full);
    ck_assert_mem_eq(again, buf, full);

    /* Every truncation is refused. */
    for (size_t cut = 0; cut < full; cut++)
        ck_assert_int_eq(ts_record_decode(buf, cut, &out), -1);

    /* Version 1 (no stored-length field) holds the whole block: made here
     * from a version-2 record whose block has no trailing zero. */
    in.state_len = in.state_stored_len = 100;
    size_t whole = as_version_2(buf, ts_record_encode(&in, buf, sizeof buf));
    size_t field = 2 + 48 + 2 + strlen("pim") + 1 + 4;
    memmove(buf + field, buf + field + 4, whole - field - 4);
    whole -= 4;
    buf[0] = 1;
    ck_assert_int_eq(ts_record_decode(buf, whole, &out), 0);
    ck_assert_uint_eq(out.state_len, 100);
    ck_assert_uint_eq(out.state_stored_len, 100);
    ck_assert(out.window_opened_ms == 0);

    /* All zeros: nothing stored. */
    memset(state, 0, sizeof state);
    in.state_len = in.state_stored_len = sizeof state;
    size_t empty = ts_record_encode(&in, buf, sizeof buf);
    ck_assert_int_eq(ts_record_decode(buf, empty, &out), 0);
    ck_assert_uint_eq(out.state_stored_len, 0);
    ck_assert_uint_eq(out.state_len, sizeof state);
}
END_TEST

/* Version 3 adds the clock instant the window opened (issue 24, item 5).
 * Version-2 records still read, with that instant unknown (0); an
 * impossible one is refused. */
TS_TEST(test_record_window_opening_instant)
{
    ts_user_record in = {
        .has_window = 1, .profile = "a", .window_start_ms = 5000,
        .window_ms = 10000, .window_opened_ms = INT64_C(1700000000000),
        .spent = 0.5, .last_ts_ms = 5000,
    };
    unsigned char buf[256];
    size_t len = ts_record_encode(&in, buf, sizeof buf);
    ck_assert_int_eq(buf[0], 3);
    ts_user_record out;
    ck_assert_int_eq(ts_record_decode(buf, len, &out), 0);
    ck_assert(out.window_opened_ms == in.window_opened_ms);

    size_t old_len = as_version_2(buf, len);
    ck_assert_int_eq(ts_record_decode(buf, old_len, &out), 0);
    ck_assert(out.window_opened_ms == 0);
    ck_assert(out.window_start_ms == 5000 && out.spent == 0.5);
    ck_assert_str_eq(out.profile, "a");

    static const int64_t corrupt[] = { -1, INT64_C(253402300800000),
                                       INT64_MAX };
    for (size_t i = 0; i < sizeof corrupt / sizeof *corrupt; i++) {
        in.window_opened_ms = corrupt[i];
        len = ts_record_encode(&in, buf, sizeof buf);
        ck_assert_int_eq(ts_record_decode(buf, len, &out), -1);
    }
    in.window_opened_ms = 1;
    in.window_start_ms = -5;
    len = ts_record_encode(&in, buf, sizeof buf);
    ck_assert_int_eq(ts_record_decode(buf, len, &out), -1);
}
END_TEST

/* -------------------------------------------------------------- store */

typedef struct collected {
    char ids[8][16];
    size_t n;
} collected;

static int collect(void *ctx, const char *id, size_t id_len,
                   const void *bytes, size_t len)
{
    collected *c = ctx;
    (void)bytes;
    (void)len;
    ck_assert_uint_lt(c->n, 8);
    ck_assert_uint_lt(id_len, 16);
    memcpy(c->ids[c->n], id, id_len);
    c->ids[c->n][id_len] = '\0';
    c->n++;
    return 0;
}

TS_TEST(test_store_persists_and_iterates)
{
    char err[512];
    ts_store *store = open_store();
    ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_put(store, "bob", 3, "B1", 2, err, sizeof err),
                     0);
    ck_assert_int_eq(ts_store_put(store, "alice", 5, "A1", 2, err,
                                  sizeof err), 0);
    ck_assert_int_eq(ts_store_put(store, "carol", 5, "C1", 2, err,
                                  sizeof err), 0);
    ck_assert_int_eq(ts_store_commit(store, err, sizeof err), 0);
    /* An aborted transaction leaves nothing behind. */
    ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_put(store, "dave", 4, "D1", 2, err, sizeof err),
                     0);
    ck_assert_int_eq(ts_store_del(store, "carol", 5), 0);
    ts_store_abort(store);
    ts_store_close(store);

    store = open_store();
    const void *bytes;
    size_t len;
    ck_assert_int_eq(ts_store_get(store, "alice", 5, &bytes, &len), 1);
    ck_assert_uint_eq(len, 2);
    ck_assert_mem_eq(bytes, "A1", 2);
    ck_assert_int_eq(ts_store_get(store, "dave", 4, &bytes, &len), 0);
    ck_assert_int_eq(ts_store_get(store, "carol", 5, &bytes, &len), 1);

    collected c = { .n = 0 };
    ck_assert_int_eq(ts_store_iterate(store, collect, &c), 0);
    ck_assert_uint_eq(c.n, 3);
    ck_assert_str_eq(c.ids[0], "alice");  /* key order */
    ck_assert_str_eq(c.ids[1], "bob");
    ck_assert_str_eq(c.ids[2], "carol");

    ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_del(store, "bob", 3), 0);
    ck_assert_int_eq(ts_store_commit(store, err, sizeof err), 0);
    ts_store_info info;
    ck_assert_int_eq(ts_store_get_info(store, &info), 0);
    ck_assert_uint_eq(info.users, 2);
    ck_assert_uint_eq(info.schema_version, TS_STORE_SCHEMA_VERSION);
    ck_assert_uint_eq(info.map_size_bytes, 16u << 20);
    ts_store_close(store);

    /* Read-only opening sees the same data and cannot write. */
    store = ts_store_open(dir, TS_STORE_SYNC_FULL, 16, 1, err, sizeof err);
    ck_assert_msg(store != NULL, "%s", err);
    ck_assert_int_eq(ts_store_get(store, "bob", 3, &bytes, &len), 0);
    ck_assert_int_ne(ts_store_begin(store, err, sizeof err), 0);
    ts_store_close(store);
}
END_TEST

/* Writes the store's schema mark behind its back, in LMDB directly. */
static void write_schema_version(unsigned char v)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    ck_assert_int_eq(mdb_env_create(&env), 0);
    ck_assert_int_eq(mdb_env_set_maxdbs(env, 2), 0);
    ck_assert_int_eq(mdb_env_open(env, dir, 0, 0600), 0);
    ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    ck_assert_int_eq(mdb_dbi_open(txn, "meta", 0, &meta), 0);
    unsigned char version[4] = { v, 0, 0, 0 };
    MDB_val key = { .mv_size = strlen("schema_version"),
                    .mv_data = "schema_version" };
    MDB_val value = { .mv_size = 4, .mv_data = version };
    ck_assert_int_eq(mdb_put(txn, meta, &key, &value, 0), 0);
    ck_assert_int_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

TS_TEST(test_store_upgrades_older_schema)
{
    ts_store_close(open_store());
    write_schema_version(1);

    /* Read-only leaves the mark alone; read-write upgrades it. */
    char err[512] = "";
    ts_store_info info;
    ts_store *ro = ts_store_open(dir, TS_STORE_SYNC_FULL, 16, 1, err,
                                 sizeof err);
    ck_assert_msg(ro != NULL, "%s", err);
    ck_assert_int_eq(ts_store_get_info(ro, &info), 0);
    ck_assert_uint_eq(info.schema_version, 1);
    ts_store_close(ro);
    ts_store *rw = open_store();
    ck_assert_int_eq(ts_store_get_info(rw, &info), 0);
    ck_assert_uint_eq(info.schema_version, TS_STORE_SCHEMA_VERSION);
    ts_store_close(rw);
}
END_TEST

TS_TEST(test_store_refuses_newer_schema)
{
    ts_store_close(open_store());
    /* A future schema version. */
    write_schema_version(TS_STORE_SCHEMA_VERSION + 1);

    char err[512] = "";
    ck_assert_ptr_null(
        ts_store_open(dir, TS_STORE_SYNC_FULL, 16, 0, err, sizeof err));
    char newer[32];
    snprintf(newer, sizeof newer, "schema version %u",
             TS_STORE_SCHEMA_VERSION + 1);
    ck_assert_msg(strstr(err, newer) != NULL && strstr(err, "newer") != NULL,
                  "unclear message: %s", err);
    ck_assert_ptr_null(
        ts_store_open(dir, TS_STORE_SYNC_FULL, 16, 1, err, sizeof err));
}
END_TEST

TS_TEST(test_store_unusable_directory)
{
    char err[512] = "";
    ck_assert_ptr_null(ts_store_open("/dev/null/state", TS_STORE_SYNC_FULL,
                                     16, 0, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "/dev/null/state"));
    /* Inspecting never creates a store. */
    char missing[128];
    snprintf(missing, sizeof missing, "%s/absent", dir);
    ck_assert_ptr_null(
        ts_store_open(missing, TS_STORE_SYNC_FULL, 16, 1, err, sizeof err));
    ck_assert_int_ne(access(missing, F_OK), 0);
}
END_TEST

TS_TEST(test_store_full_map_fails_commit)
{
    char err[512];
    ts_store *store =
        ts_store_open(dir, TS_STORE_SYNC_NONE, 1, 0, err, sizeof err);
    ck_assert_ptr_nonnull(store);
    static char blob[4096];
    int failed = 0;
    for (int i = 0; i < 1000 && !failed; i++) {
        char id[16];
        int n = snprintf(id, sizeof id, "u%d", i);
        ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
        if (ts_store_put(store, id, (size_t)n, blob, sizeof blob, err,
                         sizeof err) != 0) {
            ts_store_abort(store);
            failed = 1;
        } else if (ts_store_commit(store, err, sizeof err) != 0) {
            failed = 1;
        }
    }
    /* 1000 x 4 KiB cannot fit in a 1 MiB map: the failure is reported. */
    ck_assert_int_eq(failed, 1);
    ck_assert_ptr_nonnull(strstr(err, "MDB_MAP_FULL"));
    ts_store_close(store);
}
END_TEST

/* ------------------------------------------------------- store writer */

typedef struct writer_result {
    int calls;
    int ok;
    char err[256];
} writer_result;

static void record_done(void *arg, int ok, const char *err, double seconds)
{
    writer_result *r = arg;
    r->calls++;
    r->ok = ok;
    snprintf(r->err, sizeof r->err, "%s", err);
    ck_assert(seconds >= 0.0);
}

/* The writer commits a batch on its thread and reports on the loop, once;
 * a batch the map cannot hold fails, is reported, and stays intact for
 * the retry. */
TS_TEST(test_writer_commits_and_reports_failure)
{
    char err[512];
    struct event_base *base = event_base_new();
    ts_store *store =
        ts_store_open(dir, TS_STORE_SYNC_BATCH, 1, 0, err, sizeof err);
    ck_assert_msg(store != NULL, "%s", err);
    writer_result result = { 0 };
    ts_store_writer *writer = ts_store_writer_new(store, base, record_done,
                                                  &result, err, sizeof err);
    ck_assert_msg(writer != NULL, "%s", err);

    ts_record_batch *batch = ts_store_writer_batch(writer);
    ts_user_record record = { .has_window = 1, .profile = "a",
                              .window_start_ms = 1000, .window_ms = 5000,
                              .spent = 0.75, .last_ts_ms = 1003 };
    ck_assert_int_eq(ts_record_batch_add(batch, "alice", 5, &record), 0);
    ts_store_writer_submit(writer);
    ck_assert(ts_store_writer_busy(writer));
    /* `done` runs on the loop: from the pipe's event... */
    while (result.calls == 0)
        event_base_loop(base, EVLOOP_ONCE);
    ck_assert_int_eq(result.ok, 1);
    ck_assert(!ts_store_writer_busy(writer));
    const void *bytes;
    size_t len;
    ck_assert_int_eq(ts_store_get(store, "alice", 5, &bytes, &len), 1);
    ts_user_record back;
    ck_assert_int_eq(ts_record_decode(bytes, len, &back), 0);
    ck_assert(back.spent == 0.75);

    /* ... or at once from a wait, and never twice. */
    ts_record_batch_clear(batch);
    static unsigned char state[4096];
    memset(state, 0xab, sizeof state);
    ts_user_record big = record;
    big.state = state;
    big.state_len = big.state_stored_len = sizeof state;
    for (int i = 0; i < 400; i++) {
        char id[16];
        int n = snprintf(id, sizeof id, "u%d", i);
        ck_assert_int_eq(ts_record_batch_add(batch, id, (size_t)n, &big), 0);
    }
    size_t queued = batch->n;
    ts_store_writer_submit(writer);
    ts_store_writer_wait(writer);
    ck_assert_int_eq(result.calls, 2);
    ck_assert_int_eq(result.ok, 0);
    ck_assert_ptr_nonnull(strstr(result.err, "MDB_MAP_FULL"));
    ck_assert_uint_eq(batch->n, queued);
    event_base_loop(base, EVLOOP_NONBLOCK);
    ck_assert_int_eq(result.calls, 2);
    /* The store still holds what the first batch committed. */
    ck_assert_int_eq(ts_store_get(store, "alice", 5, &bytes, &len), 1);
    ck_assert_int_eq(ts_store_get(store, "u0", 2, &bytes, &len), 0);

    ts_store_writer_free(writer);
    ts_store_close(store);
    event_base_free(base);
}
END_TEST

/* -------------------------------------------------- pipeline + backend */

TS_TEST(test_pipeline_restores_ledger_after_restart)
{
    static const char *const names[] = { "a", "b" };
    ts_store *store = open_store();
    ts_store_backend sb;
    ts_pipeline *pipeline = stored_pipeline(store, &sb, names, 2);

    ts_outcome out;
    for (int i = 0; i < 3; i++) {
        process(pipeline, "u", 1000 + i, NULL, &out);
        ck_assert_int_eq(out.sanitized, 1);
    }
    ck_assert_uint_eq(ts_pipeline_dirty_count(pipeline), 1);
    group_commit(pipeline, store);
    ck_assert_uint_eq(ts_pipeline_dirty_count(pipeline), 0);
    /* An uncommitted fourth debit would be lost with the process, but then
     * its point was never published either. */
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);
    ts_store_close(store);

    store = open_store();
    ts_store_backend_init(&sb, store);
    pipeline = make_pipeline(names, 2);
    ts_pipeline_set_state_backend(pipeline, &sb.backend);
    /* Ordering survives the restart. */
    process(pipeline, "u", 1001, NULL, &out);
    ck_assert_int_eq(out.sanitized, 0);
    ck_assert_int_eq(out.reason, TS_REASON_TIME_WENT_BACKWARDS);
    /* So does the binding to profile "a". */
    process(pipeline, "u", 1003, "b", &out);
    ck_assert_int_eq(out.reason, TS_REASON_PROFILE_CONFLICT);
    /* The mechanism sees the restored spend and state. */
    process(pipeline, "u", 1003, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    ck_assert(seen.budget.spent == 3 * SPEND);
    ck_assert_uint_eq(seen.state_counter, 3);
    ck_assert(out.eps_spent_window == 4 * SPEND);
    ck_assert_int_eq(out.window_start_ms, 1000);
    process(pipeline, "u", 1004, NULL, &out);
    ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
    /* A new window opens at the stored window's end, not later. */
    process(pipeline, "u", 1000 + WINDOW_MS, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    ck_assert(seen.budget.spent == 0.0);
    ck_assert(out.eps_spent_window == SPEND);
    ck_assert_uint_eq(ts_pipeline_get_stats(pipeline)->users_created, 0);

    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);
    ts_store_close(store);
}
END_TEST

#define CLOCK0 INT64_C(1700000000000)

/* The window's opening instant by the clock is part of the ledger: a
 * restarted daemon holds the window until it is W old by the clock, even
 * for updates dated past its end (issue 24, item 5). */
TS_TEST(test_pipeline_window_clock_survives_restart)
{
    static const char *const names[] = { "a" };
    ts_store *store = open_store();
    ts_store_backend sb;
    ts_pipeline *pipeline = stored_pipeline(store, &sb, names, 1);
    ts_pipeline_set_clock(pipeline, CLOCK0);
    ts_outcome out;
    process(pipeline, "u", 1000, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    group_commit(pipeline, store);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);

    pipeline = stored_pipeline(store, &sb, names, 1);
    ts_pipeline_set_clock(pipeline, CLOCK0 + WINDOW_MS / 2);
    process(pipeline, "u", 1000 + 5 * WINDOW_MS, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    ck_assert_int_eq(out.window_start_ms, 1000);
    ck_assert(out.eps_spent_window == 2 * SPEND);
    /* Restoring a current record does not dirty the user. */
    group_commit(pipeline, store);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);

    pipeline = stored_pipeline(store, &sb, names, 1);
    ts_pipeline_set_clock(pipeline, CLOCK0 + WINDOW_MS);
    process(pipeline, "u", 1000 + 5 * WINDOW_MS, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    ck_assert_int_eq(out.window_start_ms, 1000 + 5 * WINDOW_MS);
    ck_assert(out.eps_spent_window == SPEND);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);
    ts_store_close(store);
}
END_TEST

/* A record written before the window's clock instant was kept (version 2)
 * restores with the clock at the restore as its opening, the latest it can
 * have been, and is saved again with it, even when the update is refused. */
TS_TEST(test_pipeline_migrates_record_without_opening)
{
    static const char *const names[] = { "a" };
    ts_store *store = open_store();
    unsigned calls = 4;          /* the fake mechanism's state */
    ts_user_record old = { .has_window = 1, .profile = "a",
                           .window_start_ms = 1000, .window_ms = WINDOW_MS,
                           .spent = TOTAL, .last_ts_ms = 1000,
                           .state = &calls, .state_len = sizeof calls,
                           .state_stored_len = sizeof calls };
    unsigned char buf[256];
    size_t len = as_version_2(buf, ts_record_encode(&old, buf, sizeof buf));
    char err[512];
    ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_put(store, "u", 1, buf, len, err, sizeof err),
                     0);
    ck_assert_int_eq(ts_store_commit(store, err, sizeof err), 0);

    ts_store_backend sb;
    ts_pipeline *pipeline = stored_pipeline(store, &sb, names, 1);
    int64_t restored_at = CLOCK0 + 12345;
    ts_pipeline_set_clock(pipeline, restored_at);
    ts_outcome out;
    /* Past the window's end in event time, but it opened (at the latest)
     * now: still the spent window. */
    process(pipeline, "u", 1000 + 3 * WINDOW_MS, NULL, &out);
    ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
    ck_assert_uint_eq(ts_pipeline_dirty_count(pipeline), 1);
    group_commit(pipeline, store);
    const void *bytes;
    size_t stored_len;
    ck_assert_int_eq(ts_store_get(store, "u", 1, &bytes, &stored_len), 1);
    ts_user_record back;
    ck_assert_int_eq(ts_record_decode(bytes, stored_len, &back), 0);
    ck_assert_int_eq(((const unsigned char *)bytes)[0],
                     TS_STORE_RECORD_VERSION);
    ck_assert(back.window_opened_ms == restored_at);
    ck_assert(back.spent == TOTAL && back.window_start_ms == 1000);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);

    /* The next restore keeps that instant: W after it the window ends. */
    pipeline = stored_pipeline(store, &sb, names, 1);
    ts_pipeline_set_clock(pipeline, restored_at + WINDOW_MS - 1);
    process(pipeline, "u", 1000 + 3 * WINDOW_MS, NULL, &out);
    ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
    ck_assert_uint_eq(ts_pipeline_dirty_count(pipeline), 0);
    ts_pipeline_set_clock(pipeline, restored_at + WINDOW_MS);
    process(pipeline, "u", 1000 + 3 * WINDOW_MS, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    ck_assert_int_eq(out.window_start_ms, 1000 + 3 * WINDOW_MS);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);
    ts_store_close(store);
}
END_TEST

/* A record holds its own profile's state, not the pipeline's block (sized
 * for the largest profile): adding or removing a profile with a larger
 * state, the documented way to enable pim, keeps every open window. */
TS_TEST(test_pipeline_state_survives_a_larger_profile)
{
    static const char *const small[] = { "a" };
    static const char *const both[] = { "a", "big" };
    ts_store *store = open_store();
    ts_store_backend sb;
    ts_store_backend_init(&sb, store);
    ts_outcome out;

    ts_pipeline *pipeline = make_pipeline(small, 1);
    ts_pipeline_set_state_backend(pipeline, &sb.backend);
    for (int i = 0; i < 2; i++)
        process(pipeline, "u", 1000 + i, NULL, &out);
    group_commit(pipeline, store);
    ts_pipeline_free(pipeline);

    pipeline = make_pipeline_with(both, 2, "big");
    ts_pipeline_set_state_backend(pipeline, &sb.backend);
    process(pipeline, "u", 1002, NULL, &out);
    ck_assert_msg(out.sanitized, "%s", out.detail);
    ck_assert_uint_eq(seen.state_counter, 2);
    ck_assert(seen.budget.spent == 2 * SPEND);
    process(pipeline, "v", 1002, "big", &out);
    ck_assert_msg(out.sanitized, "%s", out.detail);
    group_commit(pipeline, store);
    ts_pipeline_free(pipeline);

    /* Back to the small set: u goes on; v's profile is gone (as before). */
    pipeline = make_pipeline(small, 1);
    ts_pipeline_set_state_backend(pipeline, &sb.backend);
    process(pipeline, "u", 1003, NULL, &out);
    ck_assert_msg(out.sanitized, "%s", out.detail);
    ck_assert_uint_eq(seen.state_counter, 3);
    process(pipeline, "v", 1003, NULL, &out);
    ck_assert_int_eq(out.reason, TS_REASON_PROFILE_CONFLICT);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);
    ts_store_close(store);
}
END_TEST

/* A record that declares an absurd state length is refused on decode. */
TS_TEST(test_record_state_length_bounded)
{
    unsigned char state[3] = { 1, 2, 3 };
    ts_user_record in = {
        .has_window = 1, .profile = "a", .window_start_ms = 1,
        .window_ms = 1000, .spent = 0.5, .state = state,
        .state_len = sizeof state, .state_stored_len = sizeof state,
    };
    unsigned char buf[256];
    size_t len = ts_record_encode(&in, buf, sizeof buf);
    ts_user_record out;
    ck_assert_int_eq(ts_record_decode(buf, len, &out), 0);
    /* state_len sits after the fixed fields and the profile name. */
    size_t at = 2 + 48 + 2 + strlen("a") + 1;
    uint32_t huge = TS_STORE_MAX_STATE + 1u;
    for (int i = 0; i < 4; i++)
        buf[at + (size_t)i] = (unsigned char)(huge >> (8 * i));
    ck_assert_int_eq(ts_record_decode(buf, len, &out), -1);
    in.state_len = TS_STORE_MAX_STATE + 1u;
    ck_assert_uint_eq(ts_record_encode(&in, buf, sizeof buf), 0);
}
END_TEST

TS_TEST(test_pipeline_expiry_does_not_refund)
{
    static const char *const names[] = { "a" };
    ts_store *store = open_store();
    ts_store_backend sb;
    ts_pipeline *pipeline = stored_pipeline(store, &sb, names, 1);

    ts_outcome out;
    for (int i = 0; i < 4; i++)
        process(pipeline, "spender", 1000 + i, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    /* Another user's points move the watermark past spender's window end. */
    process(pipeline, "other", 1000 + WINDOW_MS + 5000, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    /* Dirty users are never forgotten before they are saved, nor while
     * their record is in a commit under way (the pipelined path): reading
     * it back before that commit is done would refund them. */
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 100), 0);
    ts_record_batch batch = { 0 };
    sb.batch = &batch;
    ck_assert_int_eq(ts_pipeline_save_dirty(pipeline), 0);
    sb.batch = NULL;
    ck_assert_uint_eq(batch.n, 2);
    ts_pipeline_mark_in_flight(pipeline);
    ck_assert_uint_eq(ts_pipeline_dirty_count(pipeline), 0);
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 100), 0);
    char err[256];
    ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_put_batch(store, &batch, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_commit(store, err, sizeof err), 0);
    ts_pipeline_mark_durable(pipeline);
    ts_record_batch_free(&batch);
    ck_assert_uint_eq(ts_pipeline_expire(pipeline, 100), 1);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 1);
    ts_pipeline_free(pipeline);

    /* The in-memory table is only a cache: with the window still open (a
     * fresh pipeline, watermark at 0), the user comes back exhausted. */
    pipeline = make_pipeline(names, 1);
    ts_pipeline_set_state_backend(pipeline, &sb.backend);
    process(pipeline, "spender", 1004 + 1, NULL, &out);
    ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
    ck_assert(seen.budget.spent == 4 * SPEND);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);
    ts_store_close(store);
}
END_TEST

TS_TEST(test_pipeline_removed_profile_keeps_user_bound)
{
    static const char *const before[] = { "a", "gone" };
    static const char *const after[] = { "a" };
    ts_store *store = open_store();
    ts_store_backend sb;
    ts_pipeline *pipeline = stored_pipeline(store, &sb, before, 2);
    ts_outcome out;
    process(pipeline, "u", 1000, "gone", &out);
    ck_assert_int_eq(out.sanitized, 1);
    group_commit(pipeline, store);
    ts_pipeline_free(pipeline);

    pipeline = make_pipeline(after, 1);
    ts_pipeline_set_state_backend(pipeline, &sb.backend);
    /* The spend is in the removed profile's unit: no point until the
     * window ends, then a fresh window under the remaining profile. */
    process(pipeline, "u", 2000, NULL, &out);
    ck_assert_int_eq(out.reason, TS_REASON_PROFILE_CONFLICT);
    process(pipeline, "u", 1000 + WINDOW_MS, NULL, &out);
    ck_assert_int_eq(out.sanitized, 1);
    ck_assert(out.eps_spent_window == SPEND);
    ts_pipeline_free(pipeline);
    ts_store_backend_free(&sb);
    ts_store_close(store);
}
END_TEST

/* A backend that fails every read: the update must be refused, not treated
 * as a new user with a fresh budget. */
static int failing_load(void *ctx, const char *id, size_t id_len,
                        ts_user_record *record)
{
    (void)ctx;
    (void)id;
    (void)id_len;
    (void)record;
    return -1;
}

static int unused_save(void *ctx, const char *id, size_t id_len,
                       const ts_user_record *record)
{
    (void)ctx;
    (void)id;
    (void)id_len;
    (void)record;
    return -1;
}

TS_TEST(test_pipeline_load_failure_fails_closed)
{
    static const char *const names[] = { "a" };
    ts_state_backend backend = { NULL, failing_load, unused_save };
    ts_pipeline *pipeline = make_pipeline(names, 1);
    ts_pipeline_set_state_backend(pipeline, &backend);
    ts_outcome out;
    process(pipeline, "u", 1000, NULL, &out);
    ck_assert_int_eq(out.sanitized, 0);
    ck_assert_int_eq(out.reason, TS_REASON_INTERNAL_ERROR);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 0);
    ck_assert_int_eq(ts_pipeline_save_dirty(pipeline), 0);
    ts_pipeline_free(pipeline);
}
END_TEST

int main(void)
{
    return ts_check_main("store", 30, setup, teardown);
}
