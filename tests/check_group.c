/* The group body (datapath/group.h) on its own, with a sink that keeps
 * what it is given: OutcomeBatch messages hold at most
 * output.batch_outcomes outcomes (and the ZeroMQ output's buffer is sized
 * by that, so it holds as many outcomes as per-point output), the
 * admission hook refuses before the pipeline, the clock bounds count as
 * refused updates, and the JSON format carries the same outcomes. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "datapath/group.h"
#include "drivers/zmq/zmq_settings.h"
#include "ops/catalog.h"
#include "tests/support/check_run.h"
#include "wire/json_codec.h"

#define MAX_MESSAGES 64

typedef struct kept {
    char topic[64];
    ts_buf payload;
} kept;

typedef struct keeper {
    kept messages[MAX_MESSAGES];
    size_t n;
} keeper;

static int keep(void *arg, const void *topic, size_t topic_len,
                const void *payload, size_t len)
{
    keeper *k = arg;
    ck_assert_uint_lt(k->n, MAX_MESSAGES);
    kept *m = &k->messages[k->n++];
    snprintf(m->topic, sizeof m->topic, "%.*s", (int)topic_len,
             (const char *)topic);
    m->payload.len = 0;
    ck_assert_int_eq(ts_buf_append(&m->payload, payload, len), 0);
    return 0;
}

static void keeper_free(keeper *k)
{
    for (size_t i = 0; i < MAX_MESSAGES; i++)
        ts_buf_free(&k->messages[i].payload);
}

typedef struct fixture {
    ts_config *config;
    ts_rng *rng;
    ts_pipeline *pipeline;
    ts_group group;
    keeper out;
    ts_sink sink;
} fixture;

static void setup_with(fixture *f, const char *const *overrides, size_t n)
{
    memset(f, 0, sizeof *f);
    char err[512];
    f->config = ts_config_load(NULL, overrides, n, err, sizeof err);
    ck_assert_msg(f->config != NULL, "%s", err);
    f->rng = ts_rng_new_seeded(11);
    f->pipeline = ts_config_make_shared_pipeline(f->config, f->rng, err,
                                                 sizeof err);
    ck_assert_msg(f->pipeline != NULL, "%s", err);
    const ts_format_settings *format =
        ts_config_section(f->config, &ts_format_setting_section);
    ck_assert_int_eq(ts_group_init(&f->group, ts_config_settings(f->config),
                                   format, NULL), 0);
    f->sink = (ts_sink){ &f->out, keep, NULL };
}

static void teardown_fixture(fixture *f)
{
    ts_group_free(&f->group);
    ts_pipeline_free(f->pipeline);
    ts_rng_free(f->rng);
    ts_config_free(f->config);
    keeper_free(&f->out);
}

static const int64_t NOW_ISH = 1700000000000;

/* One input message of n updates, users u0..u(n-1) (n 0: an empty
 * batch, refused whole). */
static ts_buf encode(size_t n, int64_t ts_ms)
{
    ts_input *inputs = calloc(n + 1, sizeof *inputs);
    char (*users)[16] = calloc(n + 1, sizeof *users);
    for (size_t i = 0; i < n; i++) {
        snprintf(users[i], sizeof users[i], "u%zu", i);
        inputs[i] = (ts_input){ .user_id = users[i], .ts_ms = ts_ms,
                                .lat = 48.85, .lon = 2.35 };
    }
    ts_buf payload = { 0 };
    ck_assert_int_eq(ts_codec_encode_batch(inputs, n, &payload), 0);
    free(inputs);
    free(users);
    return payload;
}

static size_t process(fixture *f, size_t n, int64_t ts_ms)
{
    ts_buf payload = encode(n, ts_ms);
    ts_inbound message = { payload.data, payload.len, 1 };
    size_t updates = ts_group_process(&f->group, f->pipeline, &message,
                                      &f->sink);
    ts_buf_free(&payload);
    return updates;
}

/* ts_group_start on a message of n updates. */
static int start(fixture *f, size_t n, int64_t ts_ms)
{
    ts_buf payload = encode(n, ts_ms);
    ts_inbound message = { payload.data, payload.len, 1 };
    int done = ts_group_start(&f->group, f->pipeline, &message, &f->sink);
    /* The group holds what it needs: the bytes go at once. */
    memset(payload.data, 0xff, payload.len);
    ts_buf_free(&payload);
    return done;
}

/* A turn that is already spent: an empty batch starts it (refused whole,
 * one rejection kept), then its 20 ms go by. */
static void spend_a_turn(fixture *f)
{
    ck_assert_int_eq(start(f, 0, NOW_ISH), 1);
    struct timespec wait = { 0, (TS_GROUP_TURN_MS + 5) * 1000000L };
    nanosleep(&wait, NULL);
    ck_assert(ts_group_turn_spent(&f->group));
}


/* A kept message's JSON as a message of `descriptor`. */
static ProtobufCMessage *from_json(const kept *k,
                                   const ProtobufCMessageDescriptor *d)
{
    ProtobufCMessage *m = NULL;
    char err[256];
    ck_assert_msg(ts_json_to_message(d, (const char *)k->payload.data,
                                     k->payload.len, NULL, &m, err,
                                     sizeof err) == 0, "%s", err);
    return m;
}

/* Issue 26: the output's buffer holds as many outcomes batched as per
 * point. Before, a batch held up to input.max_batch_updates (10 000)
 * outcomes, so the socket took output.hwm / 10 000 = 10 messages: 1 000
 * outcomes of 100-update batches, and a subscriber a millisecond behind
 * was cut off. */
TS_TEST(test_batches_hold_at_most_batch_outcomes)
{
    const char *overrides[] = { "output.format=\"batch\"",
                                "input.max_backdate_s=0" };
    fixture f;
    setup_with(&f, overrides, 2);
    const ts_format_settings *format =
        ts_config_section(f.config, &ts_format_setting_section);
    const ts_zmq_settings *zmq = ts_zmq_settings_of(f.config);
    ck_assert_uint_eq(format->batch_outcomes, 100);
    ck_assert_int_eq(ts_output_queue_messages(zmq, format), 1000);
    ck_assert_uint_eq((size_t)ts_output_queue_messages(zmq, format) *
                          format->batch_outcomes,
                      (size_t)zmq->output_hwm);

    ck_assert_uint_eq(process(&f, 250, NOW_ISH), 250);
    ck_assert_uint_eq(f.out.n, 3);
    size_t sizes[3] = { 100, 100, 50 };
    for (size_t i = 0; i < 3; i++) {
        ck_assert_str_eq(f.out.messages[i].topic, "batch");
        Tracesan__V1__OutcomeBatch *batch = tracesan__v1__outcome_batch__unpack(
            NULL, f.out.messages[i].payload.len,
            f.out.messages[i].payload.data);
        ck_assert_ptr_nonnull(batch);
        ck_assert_uint_eq(batch->n_sanitized + batch->n_rejected, sizes[i]);
        tracesan__v1__outcome_batch__free_unpacked(batch, NULL);
    }
    /* A small input message is one batch, as before. */
    f.out.n = 0;
    process(&f, 50, NOW_ISH + 1000);
    ck_assert_uint_eq(f.out.n, 1);
    teardown_fixture(&f);
}
END_TEST

static ts_reason refuse_odd(void *arg, const char *user, size_t len,
                            char *detail, size_t detail_len)
{
    (void)arg;
    if ((user[len - 1] - '0') % 2 == 0)
        return TS_REASON_NONE;
    snprintf(detail, detail_len, "not this partition's");
    return TS_REASON_INVALID_USER_ID;
}

TS_TEST(test_admission_and_clock_refuse_before_the_pipeline)
{
    const char *overrides[] = { "input.max_backdate_s=0" };
    fixture f;
    setup_with(&f, overrides, 1);
    f.group.admission = (ts_admission){ NULL, refuse_odd };
    process(&f, 10, NOW_ISH);
    ck_assert_uint_eq(f.out.n, 10);
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(f.pipeline);
    ck_assert_uint_eq(stats->updates, 5);
    ck_assert_uint_eq(stats->rejected[TS_REASON_INVALID_USER_ID], 5);
    ck_assert_uint_eq(f.group.refused_before_pipeline, 5);
    /* An hour ahead of the wall clock: refused on input.max_future_s. */
    f.out.n = 0;
    f.group.admission.admit = NULL;
    process(&f, 2, ts_wall_clock_ms() + 3600 * 1000);
    ck_assert_uint_eq(f.out.n, 2);
    ck_assert_str_eq(f.out.messages[0].topic, "rejected");
    ck_assert_uint_eq(ts_pipeline_get_stats(f.pipeline)
                          ->rejected[TS_REASON_INVALID_TIMESTAMP], 2);
    ck_assert_uint_eq(f.group.refused_before_pipeline, 7);
    teardown_fixture(&f);
}
END_TEST

TS_TEST(test_json_output_carries_the_same_outcomes)
{
    const char *overrides[] = { "output.encoding=\"json\"",
                                "input.max_backdate_s=0" };
    fixture f;
    setup_with(&f, overrides, 2);
    process(&f, 3, NOW_ISH);
    ck_assert_uint_eq(f.out.n, 3);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_str_eq(f.out.messages[i].topic, "sanitized.geoind");
        ProtobufCMessage *m =
            from_json(&f.out.messages[i],
                      &tracesan__v1__sanitized_location__descriptor);
        const Tracesan__V1__SanitizedLocation *loc = (void *)m;
        char user[16];
        snprintf(user, sizeof user, "u%zu", i);
        ck_assert_str_eq(loc->user_id, user);
        ck_assert_str_eq(loc->profile, "geoind");
        ck_assert(loc->eps_point > 0);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    teardown_fixture(&f);
}
END_TEST

/* Batches in JSON: {"sanitized":[...],"rejected":[...]}, the lists of the
 * same OutcomeBatch. */
TS_TEST(test_json_batches_decode_as_outcome_batches)
{
    const char *overrides[] = { "output.encoding=\"json\"",
                                "output.format=\"batch\"",
                                "input.max_backdate_s=0",
                                "profiles.geoind.points_per_window=1" };
    fixture f;
    setup_with(&f, overrides, 4);
    process(&f, 3, NOW_ISH);
    process(&f, 3, NOW_ISH + 1000);   /* each user's second: exhausted */
    ck_assert_uint_eq(f.out.n, 2);
    size_t want_rejected[2] = { 0, 3 };
    for (size_t i = 0; i < 2; i++) {
        ck_assert_str_eq(f.out.messages[i].topic, "batch");
        ProtobufCMessage *m = from_json(
            &f.out.messages[i], &tracesan__v1__outcome_batch__descriptor);
        const Tracesan__V1__OutcomeBatch *b = (void *)m;
        ck_assert_uint_eq(b->n_rejected, want_rejected[i]);
        ck_assert_uint_eq(b->n_sanitized, 3 - want_rejected[i]);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    teardown_fixture(&f);
}
END_TEST

/* Issue 25, item 11: a message longer than a turn goes on across turns,
 * one update per call once the turn is spent, and comes out exactly as
 * in one pass: same outcomes (same seeded noise), same order. */
TS_TEST(test_long_message_across_turns_matches_one_pass)
{
    const char *overrides[] = { "input.max_backdate_s=0" };
    fixture once, sliced;
    setup_with(&once, overrides, 1);
    setup_with(&sliced, overrides, 1);
    ck_assert_uint_eq(process(&once, 6, NOW_ISH), 6);

    spend_a_turn(&sliced);
    ck_assert_uint_eq(sliced.out.n, 1);              /* the rejection */
    ck_assert_int_eq(start(&sliced, 6, NOW_ISH), 0);
    ck_assert(ts_group_in_message(&sliced.group));
    ck_assert_uint_eq(sliced.out.n, 2);              /* one update only */
    for (size_t done = 2; done < 6; done++) {
        ck_assert_int_eq(ts_group_resume(&sliced.group, sliced.pipeline,
                                          &sliced.sink), 0);
        ck_assert_uint_eq(sliced.out.n, 1 + done);
    }
    ck_assert_int_eq(ts_group_resume(&sliced.group, sliced.pipeline,
                                     &sliced.sink), 1);
    ck_assert(!ts_group_in_message(&sliced.group));
    ck_assert_uint_eq(sliced.group.updates, 6);

    ck_assert_uint_eq(sliced.out.n, once.out.n + 1);
    for (size_t i = 0; i < once.out.n; i++) {
        const kept *a = &once.out.messages[i], *b = &sliced.out.messages[i + 1];
        ck_assert_str_eq(a->topic, b->topic);
        ck_assert_uint_eq(a->payload.len, b->payload.len);
        ck_assert_msg(memcmp(a->payload.data, b->payload.data,
                             a->payload.len) == 0,
                      "outcome %zu differs across turns", i);
    }
    /* A new turn runs a short message in one go again. */
    ts_group_end_turn(&sliced.group);
    ck_assert(!ts_group_turn_spent(&sliced.group));
    ck_assert_int_eq(start(&sliced, 3, NOW_ISH + 1000), 1);
    teardown_fixture(&once);
    teardown_fixture(&sliced);
}
END_TEST

/* Shutdown inside a message: the rest is dropped unprocessed, and the
 * group takes the next message as usual. */
TS_TEST(test_abandoned_message_leaves_the_group_usable)
{
    const char *overrides[] = { "input.max_backdate_s=0" };
    fixture f;
    setup_with(&f, overrides, 1);
    ck_assert_uint_eq(ts_group_abandon(&f.group), 0);
    spend_a_turn(&f);
    ck_assert_int_eq(start(&f, 6, NOW_ISH), 0);
    ck_assert_uint_eq(ts_group_abandon(&f.group), 5);
    ck_assert(!ts_group_in_message(&f.group));
    ck_assert_uint_eq(f.group.updates, 6);
    ck_assert_uint_eq(ts_pipeline_get_stats(f.pipeline)->updates, 1);
    ck_assert_uint_eq(process(&f, 4, NOW_ISH + 1000), 4);
    ck_assert_uint_eq(ts_pipeline_get_stats(f.pipeline)->updates, 5);
    teardown_fixture(&f);
}
END_TEST

int main(void)
{
    return ts_check_main("group", 0, NULL, NULL);
}
