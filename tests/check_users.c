/* The user table: the open-addressing map against a reference under random
 * inserts and removals (backward-shift deletion is where such tables go
 * wrong), and per-profile state: a user holds the state of the profile it
 * is bound to, whatever else is configured. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "engine/users.h"
#include "mechanisms/geoind.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_mechanism.h"
#include "tests/support/fake_params.h"

#define N_IDS 3000
#define N_OPS 60000

static const unsigned char hash_key[TS_USERS_HASH_KEY_BYTES] = { 7 };

static void id_of(unsigned k, char *buf, size_t len)
{
    snprintf(buf, len, "user-%u", k);
}

static size_t lru_length(ts_user_table *table)
{
    size_t n = 0;
    for (ts_user *u = ts_users_oldest(table); u != NULL; u = u->lru_next)
        n++;
    return n;
}

TS_TEST(test_map_matches_reference)
{
    /* A small key space and a removal rate near the insertion rate keep
     * the table near its growth threshold, with long probe runs that
     * deletions must repair. */
    ts_user_table *table = ts_users_new(N_IDS, hash_key);
    ck_assert_ptr_nonnull(table);
    static ts_user *reference[N_IDS];
    memset(reference, 0, sizeof reference);
    ts_rng *rng = ts_rng_new_seeded(424242);
    size_t present = 0;
    char id[32];
    for (unsigned op = 0; op < N_OPS; op++) {
        unsigned k = (unsigned)(ts_rng_u64(rng) % N_IDS);
        id_of(k, id, sizeof id);
        ts_user *found = ts_users_find(table, id, strlen(id));
        ck_assert_ptr_eq(found, reference[k]);
        if (found == NULL) {
            reference[k] = ts_users_insert(table, id, strlen(id));
            ck_assert_ptr_nonnull(reference[k]);
            ck_assert_str_eq(reference[k]->id, id);
            present++;
        } else if (ts_rng_uniform_open(rng) < 0.45) {
            ts_users_remove(table, found);
            reference[k] = NULL;
            present--;
        } else {
            ts_users_touch(table, found);
        }
        ck_assert_uint_eq(ts_users_count(table), present);
    }
    for (unsigned k = 0; k < N_IDS; k++) {
        id_of(k, id, sizeof id);
        ck_assert_ptr_eq(ts_users_find(table, id, strlen(id)), reference[k]);
    }
    ck_assert_uint_eq(lru_length(table), present);
    /* The slots stay within a small multiple of the users they hold. */
    ck_assert_uint_le(ts_users_slot_bytes(table), 64 * 16 + 8 * 16 * N_IDS);
    ts_rng_free(rng);
    ts_users_free(table);
}
END_TEST

TS_TEST(test_capacity_and_prefixes)
{
    ts_user_table *table = ts_users_new(3, hash_key);
    /* Ids that are prefixes of each other, and one with an embedded NUL,
     * are different users. */
    ck_assert_ptr_nonnull(ts_users_insert(table, "ab", 2));
    ck_assert_ptr_nonnull(ts_users_insert(table, "abc", 3));
    ck_assert_ptr_nonnull(ts_users_insert(table, "ab\0c", 4));
    ck_assert_ptr_null(ts_users_insert(table, "x", 1));
    ck_assert_uint_eq(ts_users_find(table, "abc", 3)->id_len, 3);
    ck_assert_uint_eq(ts_users_find(table, "ab\0c", 4)->id_len, 4);
    ck_assert_ptr_null(ts_users_find(table, "a", 1));
    ts_users_free(table);
}
END_TEST

TS_TEST(test_state_bytes_follow_resizes)
{
    ts_user_table *table = ts_users_new(10, hash_key);
    ts_user *a = ts_users_insert(table, "a", 1);
    ts_user *b = ts_users_insert(table, "b", 1);
    ck_assert_ptr_null(a->state);
    ck_assert_int_eq(ts_users_resize_state(table, a, 4096), 0);
    ck_assert_int_eq(ts_users_resize_state(table, b, 64), 0);
    ck_assert_uint_eq(ts_users_state_bytes(table), 4160);
    unsigned char zeros[64] = { 0 };
    ck_assert_int_eq(memcmp(b->state, zeros, sizeof zeros), 0);
    ck_assert_int_eq(ts_users_resize_state(table, a, 0), 0);
    ck_assert_ptr_null(a->state);
    ck_assert_uint_eq(ts_users_state_bytes(table), 64);
    ts_users_remove(table, b);
    ck_assert_uint_eq(ts_users_state_bytes(table), 0);
    ts_users_free(table);
}
END_TEST

/* Issue 25, item 10: a block is held up to its last non-zero byte, so a
 * belief of a few cells costs those cells, not the belief's capacity; the
 * block reads back whole. */
TS_TEST(test_state_held_up_to_its_last_non_zero_byte)
{
    ts_user_table *table = ts_users_new(10, hash_key);
    ts_user *a = ts_users_insert(table, "a", 1);
    unsigned char block[4096] = { 0 }, back[4096];
    memset(block, 0x5a, 100);
    block[130] = 1;
    ck_assert_int_eq(ts_users_set_state(table, a, block, sizeof block,
                                        sizeof block), 0);
    ck_assert_uint_eq(a->state_size, 4096);
    ck_assert_uint_eq(a->state_kept, 131);
    ck_assert_uint_eq(ts_users_state_bytes(table), 4096);
    ck_assert_uint_eq(ts_users_state_held_bytes(table), 192);
    memset(back, 0xff, sizeof back);
    ts_users_get_state(a, back);
    ck_assert_int_eq(memcmp(back, block, sizeof block), 0);

    /* Fewer cells: held less; a stored prefix shorter than the block. */
    block[130] = 0;
    ck_assert_int_eq(ts_users_set_state(table, a, block, 64, sizeof block),
                     0);
    ck_assert_uint_eq(a->state_kept, 64);
    ck_assert_uint_eq(ts_users_state_held_bytes(table), 64);
    ts_users_get_state(a, back);
    ck_assert_int_eq(back[63], 0x5a);
    ck_assert_int_eq(back[64], 0);
    ck_assert_int_eq(back[4095], 0);

    /* All zero holds nothing; resizing and removing give it all back. */
    memset(block, 0, sizeof block);
    ck_assert_int_eq(ts_users_set_state(table, a, block, sizeof block,
                                        sizeof block), 0);
    ck_assert_ptr_null(a->state);
    ck_assert_uint_eq(ts_users_state_held_bytes(table), 0);
    block[0] = 1;
    ck_assert_int_eq(ts_users_set_state(table, a, block, sizeof block,
                                        sizeof block), 0);
    ck_assert_int_eq(ts_users_resize_state(table, a, 32), 0);
    ck_assert_uint_eq(ts_users_state_held_bytes(table), 64);
    ck_assert_uint_eq(ts_users_state_bytes(table), 32);
    ck_assert_int_eq(ts_users_set_state(table, a, block, 32, 32), 0);
    ts_users_remove(table, a);
    ck_assert_uint_eq(ts_users_state_held_bytes(table), 0);
    ck_assert_uint_eq(ts_users_state_bytes(table), 0);
    ts_users_free(table);
}
END_TEST

/* A pipeline with the real geoind profile (stateless) and, when
 * `with_big`, a second profile whose users carry a 4 KiB state, like a
 * delta-location-set profile with a model configured. */
static ts_pipeline *make_pipeline(int with_big, ts_rng *rng)
{
    size_t n = with_big ? 2 : 1;
    ts_profile *profiles = calloc(n, sizeof *profiles);
    ck_assert_ptr_nonnull(profiles);
    param_table table = { .n = 0 };
    ts_params params = table_params(&table);
    char err[256] = "";
    void *geoind = NULL;
    ck_assert_msg(ts_geoind_ops.profile_new(&params, &geoind, err,
                                            sizeof err) == 0, "%s", err);
    profiles[0] = (ts_profile){
        .name = strdup("geoind"), .ops = &ts_geoind_ops, .mech = geoind,
        .window_budget = ts_geoind_ops.window_budget(geoind),
        .window_ms = 86400000, .on_exhausted = TS_ON_EXHAUSTED_DROP,
    };
    if (with_big)
        profiles[1] = (ts_profile){
            .name = strdup("big"), .ops = &fake_ops,
            .mech = fake_profile_new((fake_profile){
                .total = 1.0, .spend = 0.25, .dlat = 0.01,
                .state_bytes = 4096 }),
            .window_budget = 1.0, .window_ms = 86400000,
            .on_exhausted = TS_ON_EXHAUSTED_DROP,
        };
    ts_pipeline_limits limits = {
        .max_users = 10000, .idle_ttl_ms = 1000, .max_user_id_bytes = 64,
    };
    ts_pipeline *pipeline = ts_pipeline_new(profiles, n, 0, &limits, rng);
    ck_assert_ptr_nonnull(pipeline);
    return pipeline;
}

static void feed_users(ts_pipeline *pipeline, unsigned n, const char *profile)
{
    char id[32];
    for (unsigned k = 0; k < n; k++) {
        snprintf(id, sizeof id, "%s-%u", profile, k);
        ts_input input = { .user_id = id, .ts_ms = 1000 + k, .lat = 48.85,
                           .lon = 2.35, .profile = profile };
        ts_outcome out;
        ts_pipeline_process(pipeline, &input, &out);
        ck_assert_msg(out.sanitized, "%s", out.detail);
    }
}

TS_TEST(test_geoind_state_independent_of_other_profiles)
{
    ts_rng *rng = ts_rng_new_seeded(5);
    ts_pipeline *alone = make_pipeline(0, rng);
    ts_pipeline *beside_big = make_pipeline(1, rng);
    feed_users(alone, 1000, "geoind");
    feed_users(beside_big, 1000, "geoind");
    ck_assert_uint_eq(ts_pipeline_user_count(beside_big), 1000);
    ck_assert_uint_eq(ts_pipeline_state_bytes(alone),
                      ts_pipeline_state_bytes(beside_big));
    ck_assert_uint_eq(ts_pipeline_state_bytes(beside_big),
                      1000 * ts_geoind_ops.user_state_size(
                                 ts_pipeline_find_profile(beside_big,
                                                          "geoind")->mech));
    /* Users of the big profile pay for its state, and only they do. */
    feed_users(beside_big, 10, "big");
    ck_assert_uint_eq(ts_pipeline_state_bytes(beside_big),
                      ts_pipeline_state_bytes(alone) + 10 * 4096);
    /* Of their 4 KiB, the fake mechanism writes a counter: that is what
     * memory holds (one 64-byte step each). */
    ck_assert_uint_eq(ts_pipeline_state_held_bytes(beside_big),
                      ts_pipeline_state_held_bytes(alone) + 10 * 64);
    ts_pipeline_free(alone);
    ts_pipeline_free(beside_big);
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    return ts_check_main("users", 120, NULL, NULL);
}
