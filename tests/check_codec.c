/* Codec: what replay encodes, the daemon decodes; what the daemon encodes,
 * a consumer decodes with plain protobuf-c; absent fields never turn into
 * plausible values. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/codec.h"
#include "mechanisms/geoind.h"
#include "tests/support/check_run.h"

static ts_buf topic;
static ts_buf payload;

static void setup(void)
{
    memset(&topic, 0, sizeof topic);
    memset(&payload, 0, sizeof payload);
}

static void teardown(void)
{
    ts_buf_free(&topic);
    ts_buf_free(&payload);
}

static int topic_equals(const char *expected)
{
    return topic.len == strlen(expected) &&
           memcmp(topic.data, expected, topic.len) == 0;
}

TS_TEST(buf_grows_and_resets)
{
    char block[1000];
    memset(block, 'x', sizeof block);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(ts_buf_append(&payload, block, sizeof block), 0);
    ck_assert_uint_eq(payload.len, 100000);
    ck_assert_uint_ge(payload.cap, payload.len);
    ck_assert_int_eq(payload.data[99999], 'x');
    uint8_t *data = payload.data;
    ts_buf_reset(&payload);
    ck_assert_uint_eq(payload.len, 0);
    /* Reset keeps the storage: the daemon's outbox relies on it. */
    ck_assert_int_eq(ts_buf_append(&payload, "ab", 2), 0);
    ck_assert_ptr_eq(payload.data, data);
}
END_TEST

TS_TEST(batch_round_trip)
{
    const ts_input inputs[] = {
        { .user_id = "alice", .ts_ms = 1254682593000, .lat = 40.645919692,
          .lon = -73.7779355049 },
        { .user_id = "bob", .ts_ms = 1254682593250, .lat = -33.5,
          .lon = 151.25, .has_accuracy = 1, .accuracy_m = 12.5,
          .profile = "geoind" },
        { .user_id = "carol \"quoted\"", .ts_ms = 1, .lat = 90.0,
          .lon = -180.0 },
        /* Values the daemon must reject still travel as sent. */
        { .user_id = "dave", .ts_ms = -5, .lat = NAN, .lon = INFINITY },
    };
    const size_t n = sizeof inputs / sizeof inputs[0];
    ck_assert_int_eq(ts_codec_encode_batch(inputs, n, &payload), 0);

    Tracesan__V1__LocationBatch *batch =
        ts_codec_decode_batch(payload.data, payload.len);
    ck_assert_ptr_nonnull(batch);
    ck_assert_uint_eq(batch->n_updates, n);
    for (size_t i = 0; i < n; i++) {
        ts_input got;
        ts_codec_input_from_update(batch->updates[i], &got);
        ck_assert_str_eq(got.user_id, inputs[i].user_id);
        ck_assert_int_eq(got.ts_ms, inputs[i].ts_ms);
        if (isnan(inputs[i].lat))
            ck_assert(isnan(got.lat));
        else
            ck_assert(got.lat == inputs[i].lat); /* bit-exact doubles */
        ck_assert(got.lon == inputs[i].lon);
        ck_assert_int_eq(got.has_accuracy, inputs[i].has_accuracy);
        if (inputs[i].has_accuracy)
            ck_assert(got.accuracy_m == inputs[i].accuracy_m);
        if (inputs[i].profile == NULL)
            ck_assert_ptr_null(got.profile);
        else
            ck_assert_str_eq(got.profile, inputs[i].profile);
    }
    ts_codec_batch_free(batch);
}
END_TEST

/* Batches unpacked in an arena read the same as on the heap, across
 * messages large enough to grow it past its first block, and the arena
 * keeps one block between messages. */
TS_TEST(arena_decoding_matches_heap)
{
    ts_codec_arena arena;
    ts_codec_arena_init(&arena);
    static ts_input inputs[3000];
    char ids[3000][16];
    for (size_t round = 1; round <= 3; round++) {
        size_t n = round * 1000;
        for (size_t i = 0; i < n; i++) {
            snprintf(ids[i], sizeof ids[i], "user-%zu", i * round);
            inputs[i] = (ts_input){ .user_id = ids[i], .ts_ms = (int64_t)i + 1,
                                    .lat = 1e-3 * (double)i, .lon = -2.5,
                                    .profile = i % 2 ? "geoind" : NULL };
        }
        payload.len = 0;
        ck_assert_int_eq(ts_codec_encode_batch(inputs, n, &payload), 0);
        Tracesan__V1__LocationBatch *in_arena =
            ts_codec_decode_batch_in(&arena, payload.data, payload.len);
        Tracesan__V1__LocationBatch *on_heap =
            ts_codec_decode_batch(payload.data, payload.len);
        ck_assert_ptr_nonnull(in_arena);
        ck_assert_ptr_nonnull(on_heap);
        ck_assert_uint_eq(in_arena->n_updates, n);
        for (size_t i = 0; i < n; i++) {
            ts_input a, h;
            ts_codec_input_from_update(in_arena->updates[i], &a);
            ts_codec_input_from_update(on_heap->updates[i], &h);
            ck_assert_str_eq(a.user_id, h.user_id);
            ck_assert_int_eq(a.ts_ms, h.ts_ms);
            ck_assert(a.lat == h.lat && a.lon == h.lon);
            ck_assert_int_eq(a.profile == NULL, h.profile == NULL);
        }
        ts_codec_batch_free(on_heap);
        ts_codec_batch_release(&arena, in_arena);
        ck_assert_uint_eq(ts_codec_arena_blocks(&arena), 1);
        ck_assert_uint_eq(arena.used, 0);
    }
    ts_codec_arena_free(&arena);
}
END_TEST

TS_TEST(batch_encoding_matches_protobuf_c)
{
    /* The batch encoder writes repeated-field framing by hand; it must be
     * byte-identical to protobuf-c packing the same LocationBatch. */
    const ts_input inputs[] = {
        { .user_id = "u1", .ts_ms = 1000, .lat = 1.5, .lon = 2.5 },
        { .user_id = "u2", .ts_ms = 2000, .lat = -1.5, .lon = -2.5,
          .has_accuracy = 1, .accuracy_m = 3.0, .profile = "p" },
    };
    ck_assert_int_eq(ts_codec_encode_batch(inputs, 2, &payload), 0);

    Tracesan__V1__LocationUpdate updates[2];
    Tracesan__V1__LocationUpdate *pointers[2];
    for (int i = 0; i < 2; i++) {
        Tracesan__V1__LocationUpdate init = TRACESAN__V1__LOCATION_UPDATE__INIT;
        updates[i] = init;
        updates[i].user_id = (char *)inputs[i].user_id;
        updates[i].has_timestamp_ms = 1;
        updates[i].timestamp_ms = inputs[i].ts_ms;
        updates[i].has_lat = 1;
        updates[i].lat = inputs[i].lat;
        updates[i].has_lon = 1;
        updates[i].lon = inputs[i].lon;
        updates[i].has_horizontal_accuracy_m = inputs[i].has_accuracy;
        updates[i].horizontal_accuracy_m = inputs[i].accuracy_m;
        updates[i].profile = (char *)inputs[i].profile;
        pointers[i] = &updates[i];
    }
    Tracesan__V1__LocationBatch batch = TRACESAN__V1__LOCATION_BATCH__INIT;
    batch.n_updates = 2;
    batch.updates = pointers;
    size_t size = tracesan__v1__location_batch__get_packed_size(&batch);
    uint8_t *expected = malloc(size);
    ck_assert_ptr_nonnull(expected);
    tracesan__v1__location_batch__pack(&batch, expected);
    ck_assert_uint_eq(payload.len, size);
    ck_assert_int_eq(memcmp(payload.data, expected, size), 0);
    free(expected);
}
END_TEST

TS_TEST(large_batch_round_trip)
{
    /* Updates longer than 127 bytes need a multi-byte length prefix. */
    enum { N = 2000 };
    static ts_input inputs[N];
    char long_user[300];
    memset(long_user, 'u', sizeof long_user - 1);
    long_user[sizeof long_user - 1] = '\0';
    for (int i = 0; i < N; i++) {
        inputs[i] = (ts_input){ .user_id = (i % 7 == 0) ? long_user : "short",
                                .ts_ms = 1000 + i, .lat = i * 0.01,
                                .lon = -i * 0.01 };
    }
    ck_assert_int_eq(ts_codec_encode_batch(inputs, N, &payload), 0);
    Tracesan__V1__LocationBatch *batch =
        ts_codec_decode_batch(payload.data, payload.len);
    ck_assert_ptr_nonnull(batch);
    ck_assert_uint_eq(batch->n_updates, N);
    for (int i = 0; i < N; i++) {
        ck_assert_str_eq(batch->updates[i]->user_id, inputs[i].user_id);
        ck_assert_int_eq(batch->updates[i]->timestamp_ms, 1000 + i);
    }
    ts_codec_batch_free(batch);
}
END_TEST

TS_TEST(missing_fields_map_to_refusable_values)
{
    Tracesan__V1__LocationUpdate empty = TRACESAN__V1__LOCATION_UPDATE__INIT;
    Tracesan__V1__LocationUpdate *pointers[] = { &empty };
    Tracesan__V1__LocationBatch batch = TRACESAN__V1__LOCATION_BATCH__INIT;
    batch.n_updates = 1;
    batch.updates = pointers;
    uint8_t bytes[16];
    size_t size = tracesan__v1__location_batch__pack(&batch, bytes);

    Tracesan__V1__LocationBatch *decoded = ts_codec_decode_batch(bytes, size);
    ck_assert_ptr_nonnull(decoded);
    ck_assert_uint_eq(decoded->n_updates, 1);
    ts_input input;
    memset(&input, 0x55, sizeof input);
    ts_codec_input_from_update(decoded->updates[0], &input);
    ck_assert_ptr_null(input.user_id);
    ck_assert_int_eq(input.ts_ms, 0);
    ck_assert(isnan(input.lat));
    ck_assert(isnan(input.lon));
    ck_assert_int_eq(input.has_accuracy, 0);
    ck_assert_ptr_null(input.profile);
    ts_codec_batch_free(decoded);
}
END_TEST

/* Bytes that are not a batch, for the unpack and the wire scan alike. */
static const uint8_t garbage[][8] = {
    { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff },
    /* field 1 length-delimited, claims 100 bytes, has 2 */
    { 0x0a, 0x64, 0x01, 0x02 },
    /* truncated varint */
    { 0x0a, 0x80 },
    /* an update whose lat (fixed64) is cut short */
    { 0x0a, 0x03, 0x19, 0x00, 0x00 },
    /* field 1 as a varint: not an update */
    { 0x08, 0x01 },
};
static const size_t garbage_lengths[] = { 8, 4, 2, 5, 2 };

TS_TEST(garbage_is_not_a_batch)
{
    for (size_t i = 0; i < sizeof garbage_lengths / sizeof *garbage_lengths;
         i++)
        ck_assert_ptr_null(
            ts_codec_decode_batch(garbage[i], garbage_lengths[i]));
    /* The empty message is a valid, empty batch: the daemon answers it with
     * empty_batch, not malformed. */
    Tracesan__V1__LocationBatch *empty = ts_codec_decode_batch("", 0);
    ck_assert_ptr_nonnull(empty);
    ck_assert_uint_eq(empty->n_updates, 0);
    ts_codec_batch_free(empty);
}
END_TEST

/* The wire scan agrees with the unpack on what a batch holds, refuses
 * what the unpack refuses, and reads what the unpack hides: the byte
 * lengths of user_id and profile (issue 10, item 9: "alice\0evil"). */
/* Found by fuzz_decode: protobuf-c 1.4 unpacks a field numbered 0 when its
 * key takes two bytes (0x80 0x00), skipping it as unknown. A scan that
 * refused it would refuse a batch unpack accepts. */
TS_TEST(scan_accepts_what_unpack_accepts)
{
    static const uint8_t fixed[] = {
        0xad, 0x01, 0x0a, 0x00, 0x00, 0x00, /* field 21, fixed32 */
        0x80, 0x00, 0xd5, 0x53,             /* field 0, varint */
        0x0a, 0x05,                         /* one update: */
        0x80, 0x00, 0x01,                   /*   field 0 again */
        0x0a, 0x00,                         /*   user_id "" */
    };
    size_t n = 99;
    ts_wire_update wire[2];
    Tracesan__V1__LocationBatch *batch =
        ts_codec_decode_batch(fixed, sizeof fixed);
    ck_assert_ptr_nonnull(batch);
    ck_assert_int_eq(ts_codec_scan_batch(fixed, sizeof fixed, &n, wire, 2), 0);
    ck_assert_uint_eq(n, batch->n_updates);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(wire[0].user_id_len, 0);
    ts_codec_batch_free(batch);
}
END_TEST

TS_TEST(scan_counts_and_measures_updates)
{
    size_t n = 99;
    ts_wire_update wire[4];
    for (size_t i = 0; i < sizeof garbage_lengths / sizeof *garbage_lengths;
         i++) {
        ck_assert_int_eq(ts_codec_scan_batch(garbage[i], garbage_lengths[i],
                                             &n, wire, 4), -1);
        ck_assert_ptr_null(
            ts_codec_decode_batch(garbage[i], garbage_lengths[i]));
    }
    ck_assert_int_eq(ts_codec_scan_batch("", 0, &n, wire, 4), 0);
    ck_assert_uint_eq(n, 0);

    /* user_id "alice\0evil" (10 bytes), profile "geoind\0junk" (11). */
    static const uint8_t nul_ids[] = {
        0x0a, 0x19,
        0x0a, 0x0a, 'a', 'l', 'i', 'c', 'e', 0, 'e', 'v', 'i', 'l',
        0x32, 0x0b, 'g', 'e', 'o', 'i', 'n', 'd', 0, 'j', 'u', 'n', 'k',
        0x0a, 0x00,       /* a second, empty update */
    };
    ck_assert_int_eq(ts_codec_scan_batch(nul_ids, sizeof nul_ids, &n, wire, 4), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(wire[0].user_id_len, 10);
    ck_assert_uint_eq(wire[0].profile_len, 11);
    ck_assert_uint_eq(wire[1].user_id_len, SIZE_MAX);
    ck_assert_uint_eq(wire[1].profile_len, SIZE_MAX);
    Tracesan__V1__LocationBatch *batch =
        ts_codec_decode_batch(nul_ids, sizeof nul_ids);
    ck_assert_ptr_nonnull(batch);
    ck_assert_str_eq(batch->updates[0]->user_id, "alice");  /* what it hides */
    ts_input input;
    ts_codec_input_from_update(batch->updates[0], &input);
    ts_codec_input_wire(&wire[0], &input);
    ck_assert(input.has_wire_lengths);
    ck_assert_uint_ne(input.user_id_wire_len, strlen(input.user_id));
    ts_codec_batch_free(batch);

    /* Round trip of a packed batch. */
    ts_input in[3] = {
        { .user_id = "u1", .ts_ms = 1, .lat = 1, .lon = 2 },
        { .user_id = "user-two", .ts_ms = 2, .lat = 1, .lon = 2,
          .profile = "geoind" },
        { .user_id = "", .ts_ms = 3, .lat = 1, .lon = 2 },
    };
    ts_buf packed = {0};
    ck_assert_int_eq(ts_codec_encode_batch(in, 3, &packed), 0);
    ck_assert_int_eq(ts_codec_scan_batch(packed.data, packed.len, &n, wire, 4), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(wire[0].user_id_len, 2);
    ck_assert_uint_eq(wire[0].profile_len, SIZE_MAX);
    ck_assert_uint_eq(wire[1].user_id_len, 8);
    ck_assert_uint_eq(wire[1].profile_len, 6);
    /* Counting goes on past the room for lengths. */
    ck_assert_int_eq(ts_codec_scan_batch(packed.data, packed.len, &n, wire, 1), 0);
    ck_assert_uint_eq(n, 3);
    ts_buf_free(&packed);
}
END_TEST

/* Issue 10, item 8: 1 MiB of empty updates ("0a 00" x 524 288) is counted
 * in one pass with no allocation, so the daemon refuses it as
 * batch_too_large before protobuf-c unpacks half a million messages. */
TS_TEST(scan_counts_a_flood_of_empty_updates)
{
    size_t len = 1u << 20;
    uint8_t *flood = malloc(len);
    ck_assert_ptr_nonnull(flood);
    for (size_t i = 0; i < len; i += 2) {
        flood[i] = 0x0a;
        flood[i + 1] = 0x00;
    }
    size_t n = 0;
    ck_assert_int_eq(ts_codec_scan_batch(flood, len, &n, NULL, 0), 0);
    ck_assert_uint_eq(n, len / 2);
    free(flood);
}
END_TEST

static ts_profile make_profile(void)
{
    ts_profile profile = {
        .name = "geoind",
        .ops = &ts_geoind_ops,
        .window_budget = 0.023,
        .window_ms = 86400000,
    };
    return profile;
}

static ts_outcome make_outcome(const ts_profile *profile, int sanitized,
                               const char *user_id, int64_t ts_ms)
{
    return (ts_outcome){ .sanitized = sanitized, .user_id = user_id,
                         .ts_ms = ts_ms, .profile = profile };
}

TS_TEST(sanitized_outcome_encodes_every_field)
{
    ts_profile profile = make_profile();
    ts_outcome outcome = make_outcome(&profile, 1, "alice", 1254682593250);
    outcome.report = (ts_report){ .lat = 40.1234567, .lon = -73.7654321,
                                  .eps_point = 0.0007675 };
    outcome.eps_spent_window = 0.0015350;
    outcome.eps_remaining = 0.0214650;
    outcome.window_start_ms = 1254682500000;

    ck_assert_int_eq(ts_codec_encode_outcome(&outcome, &topic, &payload), 0);
    ck_assert(topic_equals("sanitized.geoind"));
    Tracesan__V1__SanitizedLocation *got =
        tracesan__v1__sanitized_location__unpack(NULL, payload.len,
                                                 payload.data);
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got->user_id, "alice");
    ck_assert(got->has_timestamp_ms);
    ck_assert_int_eq(got->timestamp_ms, 1254682593250);
    ck_assert(got->has_lat && got->lat == 40.1234567);
    ck_assert(got->has_lon && got->lon == -73.7654321);
    ck_assert_str_eq(got->profile, "geoind");
    ck_assert_str_eq(got->mechanism, ts_geoind_ops.name);
    ck_assert(got->has_eps_point && got->eps_point == 0.0007675);
    ck_assert(got->has_eps_spent_window && got->eps_spent_window == 0.0015350);
    ck_assert(got->has_eps_remaining && got->eps_remaining == 0.0214650);
    ck_assert(got->has_window_start_ms);
    ck_assert_int_eq(got->window_start_ms, 1254682500000);
    /* geoind defines no predicted bit: it must be absent, not "false". */
    ck_assert(!got->has_predicted);
    ck_assert(!got->repeated);
    tracesan__v1__sanitized_location__free_unpacked(got, NULL);
}
END_TEST

TS_TEST(predicted_and_repeated_flags)
{
    ts_profile profile = make_profile();
    profile.name = "predictive";
    ts_outcome outcome = make_outcome(&profile, 1, "bob", 5000);
    outcome.report.has_predicted = 1;
    outcome.report.predicted = 1;
    outcome.repeated = 1;
    ck_assert_int_eq(ts_codec_encode_outcome(&outcome, &topic, &payload), 0);
    ck_assert(topic_equals("sanitized.predictive"));
    Tracesan__V1__SanitizedLocation *got =
        tracesan__v1__sanitized_location__unpack(NULL, payload.len,
                                                 payload.data);
    ck_assert_ptr_nonnull(got);
    ck_assert(got->has_predicted && got->predicted);
    ck_assert(got->has_repeated && got->repeated);
    tracesan__v1__sanitized_location__free_unpacked(got, NULL);
}
END_TEST

/* Every public extra reaches the wire under its own name and comes back
 * from it: each row has a SanitizedLocation field of its name and type. */
TS_TEST(every_public_extra_round_trips)
{
    ts_profile profile = make_profile();
    for (size_t i = 0; i < ts_report_n_extras; i++) {
        const ts_report_extra_def *extra = &ts_report_extras[i];
        double value = extra->type == TS_EXTRA_BOOL     ? 1
                       : extra->type == TS_EXTRA_UINT32 ? 4000000000.0 + i
                                                        : 1234.5678901234567 + i;
        ts_outcome outcome = make_outcome(&profile, 1, "carol", 0);
        ts_report_extra_set(&outcome.report, extra, value);
        topic.len = payload.len = 0;
        ck_assert_msg(ts_codec_encode_outcome(&outcome, &topic, &payload) == 0,
                      "extra %s has no proto field of its type", extra->name);
        Tracesan__V1__SanitizedLocation *got =
            tracesan__v1__sanitized_location__unpack(NULL, payload.len,
                                                     payload.data);
        ck_assert_ptr_nonnull(got);
        ts_report back;
        memset(&back, 0, sizeof back);
        ck_assert_int_eq(ts_codec_get_extras(got, &back), 0);
        for (size_t j = 0; j < ts_report_n_extras; j++) {
            double seen = 0;
            int has = ts_report_extra_get(&back, &ts_report_extras[j], &seen);
            ck_assert_int_eq(has, j == i);
            if (j == i)
                ck_assert(seen == value);
        }
        tracesan__v1__sanitized_location__free_unpacked(got, NULL);
    }
}
END_TEST

TS_TEST(encoding_appends)
{
    /* The outbox appends outcome after outcome into the same buffers. */
    ts_profile profile = make_profile();
    ts_outcome outcome = make_outcome(&profile, 1, "alice", 1000);
    ck_assert_int_eq(ts_codec_encode_outcome(&outcome, &topic, &payload), 0);
    size_t first_topic = topic.len;
    size_t first_payload = payload.len;
    ck_assert_int_eq(ts_codec_encode_rejection(TS_REASON_MALFORMED, NULL, 0,
                                               NULL, "bad", &topic, &payload),
                     0);
    ck_assert_uint_eq(topic.len - first_topic, strlen("rejected"));
    ck_assert_int_eq(memcmp(topic.data + first_topic, "rejected", 8), 0);
    Tracesan__V1__Rejection *got = tracesan__v1__rejection__unpack(
        NULL, payload.len - first_payload, payload.data + first_payload);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->reason, TS_REASON_MALFORMED);
    tracesan__v1__rejection__free_unpacked(got, NULL);
}
END_TEST

TS_TEST(rejected_outcome_encodes_reason_and_detail)
{
    ts_profile profile = make_profile();
    ts_outcome outcome = make_outcome(&profile, 0, "carol", 1254682593000);
    outcome.reason = TS_REASON_BUDGET_EXHAUSTED;
    snprintf(outcome.detail, sizeof outcome.detail, "window budget spent");

    ck_assert_int_eq(ts_codec_encode_outcome(&outcome, &topic, &payload), 0);
    ck_assert(topic_equals(TS_TOPIC_REJECTED));
    Tracesan__V1__Rejection *got =
        tracesan__v1__rejection__unpack(NULL, payload.len, payload.data);
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got->user_id, "carol");
    ck_assert(got->has_timestamp_ms);
    ck_assert_int_eq(got->timestamp_ms, 1254682593000);
    ck_assert(got->has_reason);
    ck_assert_int_eq(got->reason,
                     TRACESAN__V1__REJECTION_REASON__REJECTION_REASON_BUDGET_EXHAUSTED);
    ck_assert_str_eq(got->detail, "window budget spent");
    ck_assert_str_eq(got->profile, "geoind");
    tracesan__v1__rejection__free_unpacked(got, NULL);
}
END_TEST

TS_TEST(rejection_without_update_omits_unknowns)
{
    ck_assert_int_eq(ts_codec_encode_rejection(TS_REASON_OVERSIZED, NULL, 0,
                                               NULL, "too big", &topic,
                                               &payload),
                     0);
    ck_assert(topic_equals("rejected"));
    Tracesan__V1__Rejection *got =
        tracesan__v1__rejection__unpack(NULL, payload.len, payload.data);
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_null(got->user_id);
    ck_assert(!got->has_timestamp_ms);
    ck_assert_ptr_null(got->profile);
    ck_assert_int_eq(got->reason,
                     TRACESAN__V1__REJECTION_REASON__REJECTION_REASON_OVERSIZED);
    ck_assert_str_eq(got->detail, "too big");
    tracesan__v1__rejection__free_unpacked(got, NULL);
}
END_TEST

TS_TEST(reason_numbers_match_the_proto_enum)
{
    /* Every pipeline reason must exist in the wire enum under the same
     * number and the same name (snake_case of REJECTION_REASON_<NAME>). */
    const ProtobufCEnumDescriptor *wire =
        &tracesan__v1__rejection_reason__descriptor;
    ck_assert_uint_eq(wire->n_values, TS_REASON_COUNT);
    for (int r = 0; r < TS_REASON_COUNT; r++) {
        const ProtobufCEnumValue *value =
            protobuf_c_enum_descriptor_get_value(wire, r);
        ck_assert_ptr_nonnull(value);
        ck_assert_int_eq(value->value, r);
        if (r == TS_REASON_NONE)
            continue;
        char expected[64];
        const char *name = ts_reason_name((ts_reason)r);
        ck_assert_ptr_nonnull(name);
        size_t i = 0;
        for (; name[i] != '\0' && i + 1 < sizeof expected; i++)
            expected[i] = (char)(name[i] >= 'a' && name[i] <= 'z'
                                     ? name[i] - 'a' + 'A'
                                     : name[i]);
        expected[i] = '\0';
        char wire_name[96];
        snprintf(wire_name, sizeof wire_name, "REJECTION_REASON_%s", expected);
        ck_assert_str_eq(value->name, wire_name);
    }
}
END_TEST

int main(void)
{
    return ts_check_main("codec", 0, setup, teardown);
}
