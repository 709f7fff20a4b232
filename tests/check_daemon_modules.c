/* The modules main.c composes: the outbox's in-order publishing across a
 * blocked output, the commit retry's backoff, message intake (framing,
 * size, batch count, decoding, clock bounds), and the rejection log's
 * user-id sanitising and rate limit. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "tests/support/check_run.h"
#include "datapath/group_commit.h"
#include "datapath/intake.h"
#include "engine/log.h"
#include "datapath/outbox.h"

/* A transport whose publish answers from a script. */
typedef struct scripted_output {
    ts_publish_result script[16];
    size_t n_script;
    size_t calls;
    size_t sent_payload_bytes[16];
} scripted_output;

static ts_publish_result scripted_publish(void *arg, const void *topic,
                                          size_t topic_len,
                                          const void *payload,
                                          size_t payload_len)
{
    (void)topic;
    (void)topic_len;
    (void)payload;
    scripted_output *out = arg;
    ts_publish_result r = out->calls < out->n_script ? out->script[out->calls]
                                                     : TS_PUBLISH_SENT;
    if (out->calls < 16)
        out->sent_payload_bytes[out->calls] = payload_len;
    out->calls++;
    return r;
}

/* A rejection as the group body puts one into its sink. */
static int ts_outbox_add_rejection(ts_outbox *box, ts_reason reason,
                                   const char *detail)
{
    ts_buf topic = { 0 }, payload = { 0 };
    int rc = ts_codec_encode_rejection(reason, NULL, 0, NULL, detail, &topic,
                                       &payload);
    if (rc == 0)
        rc = ts_outbox_put(box, topic.data, topic.len, payload.data,
                           payload.len);
    ts_buf_free(&topic);
    ts_buf_free(&payload);
    return rc;
}

TS_TEST(test_outbox_resumes_in_order_after_blocked)
{
    scripted_output out = {
        .script = { TS_PUBLISH_SENT, TS_PUBLISH_BLOCKED, TS_PUBLISH_SENT,
                    TS_PUBLISH_FAILED, TS_PUBLISH_SENT },
        .n_script = 5,
    };
    ts_publisher ops = { &out, scripted_publish };
    ts_outbox box;
    memset(&box, 0, sizeof box);
    /* Details of different lengths tell the messages apart. */
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "a"), 0);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "bb"), 0);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "ccc"), 0);
    ck_assert_uint_eq(box.count, 3);
    size_t lengths[3];
    for (size_t i = 0; i < 3; i++)
        lengths[i] = box.entries[i].payload_len;
    ck_assert(lengths[0] < lengths[1] && lengths[1] < lengths[2]);

    ck_assert_int_eq(ts_outbox_publish(&box, &ops), 1);
    ck_assert_uint_eq(box.sent, 1);
    ck_assert_uint_eq(ts_outbox_unsent(&box), 2);
    ck_assert_uint_eq(box.published, 1);

    /* The blocked message is offered again first: order is kept. */
    ck_assert_int_eq(ts_outbox_publish(&box, &ops), 0);
    ck_assert_uint_eq(out.calls, 4);
    ck_assert_uint_eq(out.sent_payload_bytes[1], lengths[1]);
    ck_assert_uint_eq(out.sent_payload_bytes[2], lengths[1]);
    ck_assert_uint_eq(out.sent_payload_bytes[3], lengths[2]);
    ck_assert_uint_eq(box.published, 2);
    ck_assert_uint_eq(box.publish_failures, 1);
    ck_assert_uint_eq(box.count, 0);
    ts_outbox_free(&box);
}
END_TEST

/* What the population loop counts (datapath/outbox.h, on_reports_sent). */
typedef struct observed_log {
    int64_t ts[16];
    size_t n;
} observed_log;

static void log_observations(void *arg, const ts_observation *o, size_t n)
{
    observed_log *log = arg;
    for (size_t i = 0; i < n && log->n < 16; i++)
        log->ts[log->n++] = o[i].ts_ms;
}

/* A report is counted when the message carrying it was sent, and only
 * then: not when its send failed (docs/privic.md, "The loop"), and not
 * before a blocked output took it. Four messages, the second carrying two
 * reports; the sends go SENT, FAILED, BLOCKED, then SENT twice. */
TS_TEST(test_outbox_observes_only_what_was_sent)
{
    scripted_output out = {
        .script = { TS_PUBLISH_SENT, TS_PUBLISH_FAILED, TS_PUBLISH_BLOCKED,
                    TS_PUBLISH_SENT, TS_PUBLISH_SENT },
        .n_script = 5,
    };
    ts_publisher ops = { &out, scripted_publish };
    observed_log log = { .n = 0 };
    ts_outbox box;
    memset(&box, 0, sizeof box);
    box.on_reports_sent = log_observations;
    box.on_reports_sent_arg = &log;
    ts_observation o = { .profile_index = 0, .channel_version = 1 };
    /* No message yet: nothing to attach an observation to. */
    ck_assert_int_eq(ts_outbox_add_observation(&box, &o), -1);
    const int64_t reports[4][2] = { { 1, 0 }, { 2, 3 }, { 4, 0 }, { 5, 0 } };
    for (size_t m = 0; m < 4; m++) {
        ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED,
                                                 "x"), 0);
        for (size_t k = 0; k < 2 && reports[m][k] != 0; k++) {
            o.ts_ms = reports[m][k];
            ck_assert_int_eq(ts_outbox_add_observation(&box, &o), 0);
        }
    }
    ck_assert_int_eq(ts_outbox_publish(&box, &ops), 1);
    /* Message 1 sent, message 2 failed (its two reports are not counted),
     * message 3 blocked: not counted yet. */
    ck_assert_uint_eq(log.n, 1);
    ck_assert_int_eq(log.ts[0], 1);
    ck_assert_int_eq(ts_outbox_publish(&box, &ops), 0);
    ck_assert_uint_eq(log.n, 3);
    ck_assert_int_eq(log.ts[1], 4);
    ck_assert_int_eq(log.ts[2], 5);
    ck_assert_uint_eq(box.publish_failures, 1);
    ck_assert_uint_eq(box.n_observations, 0);
    ts_outbox_free(&box);
}
END_TEST

/* The group commit's side of long messages (issue 25, item 11), memory
 * only: nothing inside open_message / close_message is published, input
 * holds compose, and a message dropped at shutdown leaves the whole ones
 * before it. */
typedef struct input_log {
    int pauses, resumes, paused;
    int turns, yield_again;
    ts_group_commit *gc;
} input_log;

static void log_pause(void *arg)
{
    input_log *log = arg;
    ck_assert(!log->paused);
    log->pauses++;
    log->paused = 1;
}

static void log_resume(void *arg)
{
    input_log *log = arg;
    ck_assert(log->paused);
    log->resumes++;
    log->paused = 0;
}

static void log_turn(void *arg)
{
    input_log *log = arg;
    log->turns++;
    if (log->yield_again-- > 0)
        ts_group_commit_yield(log->gc);
}

TS_TEST(test_commit_never_cuts_a_message)
{
    struct event_base *base = event_base_new();
    scripted_output out = { .n_script = 0 };
    ts_outbox box;
    memset(&box, 0, sizeof box);
    input_log log = { .yield_again = 1 };
    ts_group_commit gc = {
        .outbox = &box,
        .publisher = { &out, scripted_publish },
        .pause_input = log_pause,
        .resume_input = log_resume,
        .input_arg = &log,
        .next_turn = log_turn,
        .base = base,
    };
    log.gc = &gc;
    ck_assert_int_eq(ts_group_commit_start(&gc), 0);

    /* A whole message, then one left open across two yielded turns. */
    ts_group_commit_open_message(&gc);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "a"), 0);
    ts_group_commit_close_message(&gc);
    ts_group_commit_open_message(&gc);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "b"), 0);
    ts_group_commit_yield(&gc);
    ts_group_commit_yield(&gc);               /* once is enough */
    ck_assert_int_eq(log.pauses, 1);
    ts_group_commit_flush(&gc);
    ck_assert_int_eq(ts_group_commit_output_ready(&gc), 1);
    ck_assert_uint_eq(out.calls, 0);          /* nothing while it is open */
    event_base_loop(base, EVLOOP_ONCE);
    ck_assert_int_eq(log.turns, 1);           /* it yielded again */
    ck_assert_int_eq(log.resumes, 0);
    ck_assert_uint_eq(out.calls, 0);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "c"), 0);
    ts_group_commit_close_message(&gc);
    event_base_loop(base, EVLOOP_ONCE);
    ck_assert_int_eq(log.turns, 2);
    ck_assert_uint_eq(out.calls, 3);          /* whole now: published */
    ck_assert_int_eq(log.resumes, 1);
    ck_assert_int_eq(log.paused, 0);

    /* Shutdown inside a message: its outcomes go, the whole one stays. */
    ts_group_commit_open_message(&gc);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "d"), 0);
    ts_group_commit_close_message(&gc);
    ts_group_commit_open_message(&gc);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "ee"), 0);
    ck_assert_int_eq(ts_outbox_add_rejection(&box, TS_REASON_MALFORMED, "ff"), 0);
    ts_group_commit_drop_message(&gc, 7);
    ck_assert_uint_eq(box.count, 1);
    ck_assert_uint_eq(gc.dropped_uncommitted, 2);
    ck_assert_int_eq(ts_group_commit_finish(&gc), 0);
    ck_assert_uint_eq(out.calls, 4);
    ck_assert_uint_eq(out.sent_payload_bytes[3], out.sent_payload_bytes[0]);
    ts_group_commit_stop(&gc);
    ts_outbox_free(&box);
    event_base_free(base);
}
END_TEST

TS_TEST(test_commit_backoff_doubles_to_the_cap)
{
    long expected[] = { 1000, 2000, 4000, 8000, 16000, 30000, 30000 };
    long ms = 0;
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        ms = ts_group_commit_next_delay(ms);
        ck_assert_int_eq(ms, expected[i]);
    }
}
END_TEST

static ts_settings intake_settings(void)
{
    ts_settings s;
    ts_settings_defaults(&s);
    s.max_batch_updates = 2;
    s.max_message_bytes = 4096;
    return s;
}

static ts_reason intake_reason_in(const ts_settings *s, ts_codec_arena *arena,
                                  const void *payload, size_t len,
                                  size_t frames)
{
    ts_wire_update wire[4];
    ts_inbound message = { .payload = payload, .len = len, .frames = frames };
    Tracesan__V1__LocationBatch *batch = NULL;
    ts_reason reason = TS_REASON_NONE;
    char detail[160];
    int rc = ts_intake_open(s, &message, wire, arena, &batch, &reason, detail,
                            sizeof detail);
    if (rc == 0) {
        ck_assert_ptr_nonnull(batch);
        ts_codec_batch_release(arena, batch);
        return TS_REASON_NONE;
    }
    ck_assert_ptr_null(batch);
    ck_assert_msg(detail[0] != '\0', "a refusal says why");
    return reason;
}

/* The same answer whether the message is unpacked on the heap or in the
 * daemon's arena. */
static ts_reason intake_reason(const ts_settings *s, const void *payload,
                               size_t len, size_t frames)
{
    ts_codec_arena arena;
    ts_codec_arena_init(&arena);
    ts_reason heap = intake_reason_in(s, NULL, payload, len, frames);
    ts_reason arena_reason = intake_reason_in(s, &arena, payload, len, frames);
    ts_codec_arena_free(&arena);
    ck_assert_int_eq(heap, arena_reason);
    return heap;
}

static size_t encode_updates(size_t n, ts_buf *buf)
{
    ts_input inputs[3];
    for (size_t i = 0; i < n; i++)
        inputs[i] = (ts_input){ .user_id = "u", .ts_ms = 1000 + (int64_t)i,
                                .lat = 40.0, .lon = 116.0 };
    ck_assert_int_eq(ts_codec_encode_batch(inputs, n, buf), 0);
    return buf->len;
}

TS_TEST(test_intake_refuses_each_framing_fault)
{
    ts_settings s = intake_settings();
    ts_buf two = { 0 }, three = { 0 };
    encode_updates(2, &two);
    encode_updates(3, &three);
    ck_assert_int_eq(intake_reason(&s, two.data, two.len, 2), TS_REASON_NONE);
    ck_assert_int_eq(intake_reason(&s, two.data, two.len, 1), TS_REASON_NONE);
    ck_assert_int_eq(intake_reason(&s, two.data, two.len, 3),
                     TS_REASON_MALFORMED);
    ck_assert_int_eq(intake_reason(&s, three.data, three.len, 1),
                     TS_REASON_BATCH_TOO_LARGE);
    ck_assert_int_eq(intake_reason(&s, "", 0, 1), TS_REASON_EMPTY_BATCH);
    static const unsigned char garbage[] = { 0xff, 0xff, 0xff, 0xff, 0x0f };
    ck_assert_int_eq(intake_reason(&s, garbage, sizeof garbage, 1),
                     TS_REASON_MALFORMED);
    s.max_message_bytes = two.len - 1;
    ck_assert_int_eq(intake_reason(&s, two.data, two.len, 1),
                     TS_REASON_OVERSIZED);
    ts_buf_free(&two);
    ts_buf_free(&three);
}
END_TEST

TS_TEST(test_intake_clock_bounds)
{
    ts_settings s = intake_settings();   /* 600 s ahead, 86400 s behind */
    int64_t now = INT64_C(1700000000000);
    ts_time_bounds b = ts_intake_time_bounds(&s, now);
    ts_reason reason;
    char detail[160];
    ck_assert_int_eq(ts_intake_check_time(&s, &b, now, &reason, detail,
                                          sizeof detail), 0);
    ck_assert_int_eq(ts_intake_check_time(&s, &b, now + 600000, &reason,
                                          detail, sizeof detail), 0);
    ck_assert_int_eq(ts_intake_check_time(&s, &b, now + 600001, &reason,
                                          detail, sizeof detail), -1);
    ck_assert_int_eq(reason, TS_REASON_INVALID_TIMESTAMP);
    ck_assert_int_eq(ts_intake_check_time(&s, &b, now - 86400001, &reason,
                                          detail, sizeof detail), -1);
    ck_assert_int_eq(reason, TS_REASON_TOO_OLD);
    ck_assert_ptr_nonnull(strstr(detail, "86400 s"));
    s.max_backdate_ms = 0;  /* off */
    b = ts_intake_time_bounds(&s, now);
    ck_assert_int_eq(ts_intake_check_time(&s, &b, 1, &reason, detail,
                                          sizeof detail), 0);
}
END_TEST

TS_TEST(test_loggable_user)
{
    char out[TS_LOG_USER_MAX + 1];
    ck_assert_str_eq(ts_log_loggable_user(NULL, out, sizeof out), "-");
    ck_assert_str_eq(ts_log_loggable_user("", out, sizeof out), "-");
    ck_assert_str_eq(ts_log_loggable_user("a\nb c\x7f", out, sizeof out),
                     "a?b?c?");
    char longer[200];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    const char *cut = ts_log_loggable_user(longer, out, sizeof out);
    ck_assert_uint_eq(strlen(cut), TS_LOG_USER_MAX);
    ck_assert_str_eq(cut + TS_LOG_USER_MAX - 3, "...");
}
END_TEST

TS_TEST(test_limiter_passes_per_second)
{
    ts_log_limiter limiter = { .per_second = 3 };
    unsigned long long reported = 0;
    int passed = 0;
    for (int i = 0; i < 10; i++) {
        unsigned long long suppressed = 0;
        if (ts_log_limit(&limiter, &suppressed)) {
            passed++;
            reported += suppressed;
        }
    }
    /* Ten calls within a second (or across one boundary at most); every
     * call is either logged or counted as suppressed. */
    ck_assert_int_ge(passed, 3);
    ck_assert_int_le(passed, 6);
    ck_assert_uint_eq(reported + limiter.suppressed +
                          (unsigned long long)passed, 10);
}
END_TEST

int main(void)
{
    return ts_check_main("daemon_modules", 0, NULL, NULL);
}
