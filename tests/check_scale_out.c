/* The JetStream mode's pure parts: the changelog record format, the
 * partition function and the lease rules (state/changelog.h,
 * drivers/jetstream/partition_lease.h). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state/changelog.h"
#include "drivers/jetstream/partition_lease.h"
#include "tests/support/check_run.h"

typedef struct seen {
    int users, outcomes;
    char last_user[32];
    uint64_t last_seq;
    uint32_t last_index;
} seen;

static int see_user(void *ctx, const char *id, size_t id_len,
                    const void *record, size_t len)
{
    seen *s = ctx;
    s->users++;
    snprintf(s->last_user, sizeof s->last_user, "%.*s", (int)id_len, id);
    ck_assert_uint_eq(len, 3);
    ck_assert(memcmp(record, "abc", 3) == 0);
    return 0;
}

static int see_outcome(void *ctx, uint64_t seq, uint32_t index,
                       const char *subject, size_t subject_len,
                       const void *payload, size_t len)
{
    seen *s = ctx;
    s->outcomes++;
    s->last_seq = seq;
    s->last_index = index;
    ck_assert(subject_len == 17 && memcmp(subject, "tracesan.rejected", 17) == 0);
    ck_assert(len == 2 && memcmp(payload, "xy", 2) == 0);
    return 0;
}

TS_TEST(test_record_round_trip)
{
    ts_changelog_builder b = { 0 };
    ck_assert_int_eq(ts_changelog_add_user(&b, "alice", 5, "abc", 3), 0);
    ck_assert_int_eq(ts_changelog_add_user(&b, "bob", 3, "abc", 3), 0);
    ck_assert_int_eq(ts_changelog_add_outcome(&b, 42, 7, "tracesan.rejected",
                                              17, "xy", 2), 0);
    ts_changelog_header h = { TS_CHANGELOG_DELTA, "node-1", 6, 9, 42 };
    ts_buf out = { 0 };
    ck_assert_int_eq(ts_changelog_finish(&b, &h, &out), 0);
    ck_assert_uint_eq(out.len, ts_changelog_size(&b, &h));
    ts_changelog_header got;
    seen s = { 0 };
    ts_changelog_visitor v = { &s, see_user, see_outcome, NULL };
    ck_assert_int_eq(ts_changelog_decode(out.data, out.len, &got, &v), 0);
    ck_assert_int_eq(got.kind, TS_CHANGELOG_DELTA);
    ck_assert(got.owner_len == 6 && memcmp(got.owner, "node-1", 6) == 0);
    ck_assert_uint_eq(got.epoch, 9);
    ck_assert_uint_eq(got.last_input_seq, 42);
    ck_assert_int_eq(s.users, 2);
    ck_assert_str_eq(s.last_user, "bob");
    ck_assert_int_eq(s.outcomes, 1);
    ck_assert_uint_eq(s.last_seq, 42);
    ck_assert_uint_eq(s.last_index, 7);
    /* Every truncation is refused before anything is visited. */
    for (size_t cut = 0; cut < out.len; cut++) {
        seen none = { 0 };
        ts_changelog_visitor v2 = { &none, see_user, see_outcome, NULL };
        ck_assert_int_eq(ts_changelog_decode(out.data, cut, &got, &v2), -1);
        ck_assert_int_eq(none.users + none.outcomes, 0);
    }
    out.data[4] = 99;  /* unknown version */
    ck_assert_int_eq(ts_changelog_decode(out.data, out.len, &got, NULL), -1);
    ts_buf_free(&out);
    ts_changelog_builder_free(&b);
}
END_TEST

TS_TEST(test_partition_and_names)
{
    /* FNV-1a 32 of "a" is 0xe40c292c: fixed, producers depend on it. */
    ck_assert_uint_eq(ts_partition_of("a", 1, 0xffffffffu),
                      0xe40c292cu % 0xffffffffu);
    ck_assert_uint_eq(ts_partition_of("a", 1, 16), 0xe40c292cu % 16);
    unsigned counts[16] = { 0 };
    char id[16];
    for (int i = 0; i < 1600; i++) {
        int n = snprintf(id, sizeof id, "u%d", i);
        counts[ts_partition_of(id, (size_t)n, 16)]++;
    }
    for (int p = 0; p < 16; p++)
        ck_assert_msg(counts[p] > 50 && counts[p] < 150, "p%d: %u", p,
                      counts[p]);
    char buf[64];
    ts_changelog_msg_id(buf, sizeof buf, 3, 1234, 5);
    ck_assert_str_eq(buf, "3.1234.5");
    ts_changelog_output_subject("sanitized.geoind", 16, buf, sizeof buf);
    ck_assert_str_eq(buf, "tracesan.out.geoind");
    ts_changelog_output_subject("rejected", 8, buf, sizeof buf);
    ck_assert_str_eq(buf, "tracesan.rejected");
}
END_TEST

TS_TEST(test_record_map)
{
    ts_record_map *map = ts_record_map_new();
    ck_assert_int_eq(ts_record_map_put(map, "u1", 2, "aa", 2), 0);
    ck_assert_int_eq(ts_record_map_put(map, "u1", 2, "bbb", 3), 0);
    ck_assert_int_eq(ts_record_map_put(map, "u2", 2, "c", 1), 0);
    const void *r;
    size_t len;
    ck_assert_int_eq(ts_record_map_get(map, "u1", 2, &r, &len), 1);
    ck_assert(len == 3 && memcmp(r, "bbb", 3) == 0);
    ck_assert_int_eq(ts_record_map_get(map, "u3", 2, &r, &len), 0);
    ck_assert_uint_eq(ts_record_map_count(map), 2);
    ts_record_map_clear(map);
    ck_assert_uint_eq(ts_record_map_count(map), 0);
    ts_record_map_free(map);
}
END_TEST

/* A group too large for one record is split into parts and a closing
 * delta, none over the limit; a reader applies the parts only with the
 * delta, and a chain cut short by a fence counts for nothing. */
TS_TEST(test_split_records_and_replica)
{
    ts_changelog_builder b = { 0 };
    char id[16], payload[100];
    memset(payload, 'p', sizeof payload);
    for (int i = 0; i < 50; i++) {
        int n = snprintf(id, sizeof id, "user%d", i);
        ck_assert_int_eq(ts_changelog_add_user(&b, id, (size_t)n, "abc", 3), 0);
    }
    for (uint32_t i = 0; i < 200; i++)
        ck_assert_int_eq(ts_changelog_add_outcome(&b, 7, i, "tracesan.rejected",
                                                  17, payload, sizeof payload), 0);
    ts_changelog_header h = { TS_CHANGELOG_DELTA, "me", 2, 5, 7 };
    const size_t limit = 4096;
    ts_buf split = { 0 };
    size_t n_records = 0;
    ck_assert_int_eq(ts_changelog_finish_split(&b, &h, limit, &split,
                                               &n_records), 0);
    ck_assert_uint_gt(n_records, 5);
    ts_changelog_replica r;
    ck_assert_int_eq(ts_changelog_replica_init(&r), 0);
    const void *rec;
    size_t len, at = 0, count = 0, users = 0;
    uint64_t seq = 100;
    while (ts_changelog_next_split(&split, &at, &rec, &len)) {
        ts_changelog_header got;
        seen s = { 0 };
        ts_changelog_visitor v = { &s, see_user, NULL, NULL };
        ck_assert_uint_le(len, limit);
        ck_assert_int_eq(ts_changelog_decode(rec, len, &got, &v), 0);
        count++;
        ck_assert_int_eq(got.kind, count < n_records ? TS_CHANGELOG_PART
                                                     : TS_CHANGELOG_DELTA);
        users += (size_t)s.users;
        ts_changelog_replica_apply(&r, rec, len, seq++, NULL);
        /* Nothing of the chain counts before its delta. */
        ck_assert_uint_eq(ts_record_map_count(r.records),
                          count < n_records ? 0 : 50);
    }
    ck_assert_uint_eq(count, n_records);
    ck_assert_uint_eq(users, 50);
    ck_assert_uint_eq(r.last_input_seq, 7);
    ts_buf seqs = { 0 };
    ck_assert_int_eq(ts_changelog_replica_closed_above(&r, 6, &seqs), 0);
    ck_assert_uint_eq(seqs.len / 8, n_records);
    ck_assert_int_eq(ts_changelog_replica_closed_above(&r, 7, &seqs), 0);
    ck_assert_uint_eq(seqs.len, 0);

    /* A chain abandoned half-way (its writer lost the partition; the new
     * owner's fence follows) leaves the replica as it was. */
    ts_changelog_builder_reset(&b);
    ck_assert_int_eq(ts_changelog_add_user(&b, "late", 4, "abc", 3), 0);
    for (uint32_t i = 0; i < 100; i++)
        ck_assert_int_eq(ts_changelog_add_outcome(&b, 9, i, "tracesan.rejected",
                                                  17, payload, sizeof payload), 0);
    h.last_input_seq = 9;
    ck_assert_int_eq(ts_changelog_finish_split(&b, &h, limit, &split,
                                               &n_records), 0);
    ck_assert_uint_gt(n_records, 1);
    at = 0;
    ck_assert(ts_changelog_next_split(&split, &at, &rec, &len));
    ck_assert_int_eq(ts_changelog_replica_apply(&r, rec, len, seq++, NULL), 0);
    ts_changelog_builder_reset(&b);
    ts_changelog_header fence = { TS_CHANGELOG_FENCE, "new", 3, 6, 7 };
    ts_buf out = { 0 };
    ck_assert_int_eq(ts_changelog_finish(&b, &fence, &out), 0);
    ck_assert_int_eq(ts_changelog_replica_apply(&r, out.data, out.len, seq++,
                                                NULL), 0);
    /* The rest of the old chain, arriving late, is refused by the fence
     * in JetStream; a reader seeing a delta of the old epoch after the
     * fence would not join it to the discarded parts either. */
    ck_assert_uint_eq(ts_record_map_count(r.records), 50);
    ck_assert_int_eq(ts_record_map_get(r.records, "late", 4, &rec, &len), 0);
    ck_assert_uint_eq(r.last_input_seq, 7);
    ck_assert_uint_eq(r.chain.len, 0);

    /* One entry larger than the limit cannot be split. */
    ts_changelog_builder_reset(&b);
    char big[5000];
    memset(big, 'b', sizeof big);
    ck_assert_int_eq(ts_changelog_add_outcome(&b, 1, 0, "tracesan.rejected",
                                              17, big, sizeof big), 0);
    ck_assert_int_eq(ts_changelog_finish_split(&b, &h, limit, &split,
                                               &n_records), -1);
    /* A group that fits is one record of its own kind. */
    ts_changelog_builder_reset(&b);
    ck_assert_int_eq(ts_changelog_add_user(&b, "a", 1, "abc", 3), 0);
    ck_assert_int_eq(ts_changelog_finish_split(&b, &h, limit, &split,
                                               &n_records), 0);
    ck_assert_uint_eq(n_records, 1);
    ck_assert_str_eq(ts_changelog_kind_name(TS_CHANGELOG_PART), "part");
    ts_buf_free(&out);
    ts_buf_free(&seqs);
    ts_buf_free(&split);
    ts_changelog_replica_free(&r);
    ts_changelog_builder_free(&b);
}
END_TEST

typedef struct seen_producers {
    int n;
    char last[32];
    uint64_t number, input_seq;
} seen_producers;

static int see_producer(void *ctx, const char *id, size_t id_len,
                        uint64_t number, uint64_t input_seq)
{
    seen_producers *s = ctx;
    s->n++;
    snprintf(s->last, sizeof s->last, "%.*s", (int)id_len, id);
    s->number = number;
    s->input_seq = input_seq;
    return 0;
}

/* The producers' last message numbers (a work queue's duplicate window
 * does not survive a leader change, docs/scale-out.md "Producers"): one
 * entry per run of one producer's messages, the highest number kept;
 * written on the record that closes a chain only, so a reader applies
 * them with the group or not at all; a snapshot carries them all; the
 * bound forgets the producer heard from longest ago; version 1 records,
 * which have none, are still read. */
TS_TEST(test_record_producers)
{
    ts_changelog_builder b = { 0 };
    ck_assert_int_eq(ts_changelog_add_producer(&b, "run-a", 5, 3, 100), 0);
    ck_assert_int_eq(ts_changelog_add_producer(&b, "run-a", 5, 4, 101), 0);
    ck_assert_uint_eq(b.n_producers, 1);          /* coalesced */
    ck_assert_int_eq(ts_changelog_add_producer(&b, "run-b", 5, 9, 102), 0);
    ck_assert_int_eq(ts_changelog_add_producer(&b, "run-a", 5, 5, 103), 0);
    ck_assert_uint_eq(b.n_producers, 3);
    uint64_t n = 0;
    ck_assert_int_eq(ts_changelog_builder_producer(&b, "run-a", 5, &n), 1);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(ts_changelog_builder_producer(&b, "run-c", 5, &n), 0);
    char long_id[TS_CHANGELOG_PRODUCER_MAX + 1];
    memset(long_id, 'x', sizeof long_id);
    ck_assert_int_eq(ts_changelog_add_producer(&b, long_id, sizeof long_id,
                                               1, 1), -1);

    ts_changelog_header h = { TS_CHANGELOG_DELTA, "me", 2, 5, 103 };
    ts_buf out = { 0 };
    ck_assert_int_eq(ts_changelog_finish(&b, &h, &out), 0);
    ck_assert_uint_eq(out.len, ts_changelog_size(&b, &h));
    seen_producers sp = { 0 };
    ts_changelog_visitor v = { &sp, NULL, NULL, see_producer };
    ts_changelog_header got;
    ck_assert_int_eq(ts_changelog_decode(out.data, out.len, &got, &v), 0);
    ck_assert_int_eq(sp.n, 3);
    ck_assert_str_eq(sp.last, "run-a");
    ck_assert_uint_eq(sp.number, 5);
    ck_assert_uint_eq(sp.input_seq, 103);
    for (size_t cut = 0; cut < out.len; cut++)
        ck_assert_int_eq(ts_changelog_decode(out.data, cut, &got, NULL), -1);

    ts_changelog_replica r;
    ck_assert_int_eq(ts_changelog_replica_init(&r), 0);
    ck_assert_int_eq(ts_changelog_replica_apply(&r, out.data, out.len, 1,
                                                NULL), 0);
    ck_assert_int_eq(ts_changelog_replica_producer(&r, "run-a", 5, &n), 1);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(ts_changelog_replica_producer(&r, "run-b", 5, &n), 1);
    ck_assert_uint_eq(n, 9);
    /* An older number never lowers what is remembered. */
    ts_changelog_builder_reset(&b);
    ck_assert_int_eq(ts_changelog_add_producer(&b, "run-b", 5, 2, 104), 0);
    ck_assert_int_eq(ts_changelog_replica_add_producers(&r, &b), 0);
    ck_assert_int_eq(ts_changelog_replica_producer(&r, "run-b", 5, &n), 1);
    ck_assert_uint_eq(n, 9);

    /* Split: only the closing record carries them. */
    ts_changelog_builder_reset(&b);
    char payload[100];
    memset(payload, 'p', sizeof payload);
    for (uint32_t i = 0; i < 100; i++)
        ck_assert_int_eq(ts_changelog_add_outcome(&b, 200, i,
                                                  "tracesan.rejected", 17,
                                                  payload, sizeof payload), 0);
    ck_assert_int_eq(ts_changelog_add_producer(&b, "run-c", 5, 1, 200), 0);
    ts_buf split = { 0 };
    size_t n_records = 0;
    h.last_input_seq = 200;
    ck_assert_int_eq(ts_changelog_finish_split(&b, &h, 2048, &split,
                                               &n_records), 0);
    ck_assert_uint_gt(n_records, 2);
    const void *rec;
    size_t len, at = 0, count = 0;
    uint64_t seq = 10;
    while (ts_changelog_next_split(&split, &at, &rec, &len)) {
        seen_producers one = { 0 };
        ts_changelog_visitor vp = { &one, NULL, NULL, see_producer };
        ck_assert_uint_le(len, 2048);
        ck_assert_int_eq(ts_changelog_decode(rec, len, &got, &vp), 0);
        count++;
        ck_assert_int_eq(one.n, count < n_records ? 0 : 1);
        ck_assert_int_eq(ts_changelog_replica_apply(&r, rec, len, seq++,
                                                    NULL), 0);
        ck_assert_int_eq(ts_changelog_replica_producer(&r, "run-c", 5, &n),
                         count < n_records ? 0 : 1);
    }

    /* A snapshot carries every producer and replaces what was there. */
    ts_changelog_builder_reset(&b);
    ck_assert_int_eq(ts_changelog_replica_producers_into(&r, &b), 0);
    ck_assert_uint_eq(b.n_producers, 3);
    h.kind = TS_CHANGELOG_SNAPSHOT;
    ck_assert_int_eq(ts_changelog_finish(&b, &h, &out), 0);
    ts_changelog_replica copy;
    ck_assert_int_eq(ts_changelog_replica_init(&copy), 0);
    ck_assert_int_eq(ts_changelog_add_producer(&b, "stale", 5, 1, 1), 0);
    ck_assert_int_eq(ts_changelog_replica_add_producers(&copy, &b), 0);
    ck_assert_int_eq(ts_changelog_replica_apply(&copy, out.data, out.len, 50,
                                                NULL), 0);
    ck_assert_uint_eq(ts_record_map_count(copy.producers), 3);
    ck_assert_int_eq(ts_changelog_replica_producer(&copy, "stale", 5, &n), 0);
    ck_assert_int_eq(ts_changelog_replica_producer(&copy, "run-b", 5, &n), 1);
    ck_assert_uint_eq(n, 9);

    /* The bound: the producer heard from longest ago goes first. */
    ts_changelog_replica_reset(&copy);
    char id[32];
    for (int i = 0; i <= TS_CHANGELOG_MAX_PRODUCERS; i++) {
        ts_changelog_builder_reset(&b);
        int k = snprintf(id, sizeof id, "p%d", i);
        /* p0 came last of all, p1 first */
        uint64_t when = i == 0 ? 1000000 : (uint64_t)i;
        ck_assert_int_eq(ts_changelog_add_producer(&b, id, (size_t)k, 1,
                                                   when), 0);
        ck_assert_int_eq(ts_changelog_replica_add_producers(&copy, &b), 0);
    }
    ck_assert_uint_eq(ts_record_map_count(copy.producers),
                      TS_CHANGELOG_MAX_PRODUCERS);
    ck_assert_int_eq(ts_changelog_replica_producer(&copy, "p1", 2, &n), 0);
    ck_assert_int_eq(ts_changelog_replica_producer(&copy, "p0", 2, &n), 1);
    ck_assert_int_eq(ts_changelog_replica_producer(&copy, "p2", 2, &n), 1);

    /* Version 1: the same record without the producer count. */
    ts_changelog_builder_reset(&b);
    ck_assert_int_eq(ts_changelog_add_user(&b, "alice", 5, "abc", 3), 0);
    h.kind = TS_CHANGELOG_DELTA;
    ck_assert_int_eq(ts_changelog_finish(&b, &h, &out), 0);
    out.len -= 4;
    out.data[4] = 1;
    seen su = { 0 };
    ts_changelog_visitor vu = { &su, see_user, NULL, see_producer };
    ck_assert_int_eq(ts_changelog_decode(out.data, out.len, &got, &vu), 0);
    ck_assert_int_eq(su.users, 1);
    out.data[4] = 2;  /* the same bytes as version 2 lack the count */
    ck_assert_int_eq(ts_changelog_decode(out.data, out.len, &got, NULL), -1);

    ts_buf_free(&out);
    ts_buf_free(&split);
    ts_changelog_replica_free(&r);
    ts_changelog_replica_free(&copy);
    ts_changelog_builder_free(&b);
}
END_TEST

TS_TEST(test_lease_rules)
{
    const int64_t ttl = 4000;
    ts_lease_view v = { 0 };
    ts_lease_observe(&v, 0, "", 0, 1000);
    ck_assert(ts_lease_takeable(&v, "me", 1000, ttl));  /* absent */
    ts_lease_observe(&v, 5, "other", 5, 1000);
    ck_assert(!ts_lease_takeable(&v, "me", 1000, ttl));
    ck_assert(!ts_lease_takeable(&v, "me", 4999, ttl));
    ck_assert(ts_lease_takeable(&v, "me", 5000, ttl));  /* aged a ttl */
    /* A renewal (new revision) restarts the observer's count. */
    ts_lease_observe(&v, 6, "other", 5, 4500);
    ck_assert(!ts_lease_takeable(&v, "me", 8499, ttl));
    ck_assert(ts_lease_takeable(&v, "me", 8500, ttl));
    ts_lease_observe(&v, 7, TS_LEASE_FREE, 1, 8600);
    ck_assert(ts_lease_takeable(&v, "me", 8600, ttl));  /* released */
    /* The owner stops an eighth of ttl before any observer may take
     * over, counted from the renewal's send time (before it was written,
     * so before any observer saw it): with clock rates within 1/15 of
     * true time, the owner's interval stays shorter than the taker's. */
    int64_t sent = 10000;
    int64_t seen_at = 10000;  /* the earliest an observer can see it */
    ck_assert(ts_lease_deadline(sent, ttl) <= seen_at + ttl - ttl / 8);
    double rho = 1.0 / 15;
    double owner_real = (double)(ts_lease_deadline(sent, ttl) - sent) / (1 - rho);
    double taker_real = (double)ttl / (1 + rho);
    ck_assert(owner_real <= taker_real + 1e-9);
    ck_assert_int_eq(ts_lease_renew_interval(ttl), 500);
    ck_assert_uint_eq(ts_lease_fair_share(16, 2), 8);
    ck_assert_uint_eq(ts_lease_fair_share(16, 3), 6);
    ck_assert_uint_eq(ts_lease_fair_share(16, 0), 16);
}
END_TEST

int main(void)
{
    return ts_check_main("scale_out", 0, NULL, NULL);
}
