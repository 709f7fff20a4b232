/* What adding a transport costs: a driver fed from memory, in the first
 * half of this file, runs the whole daemon path -- the group body, the
 * pipeline, its commit, the sink, publishing and acknowledging -- through
 * the same driver table and the same operations side (ops/daemon.h) as
 * the ZeroMQ and JetStream drivers. The second half checks what every
 * driver owes: one outcome per update, a rejection per undecodable
 * message, and the delivery rule: a group is committed before any of it
 * is published (the ledger a published point spent is in the store when
 * it goes out), and its input acknowledged only after. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "datapath/driver.h"
#include "datapath/group.h"
#include "datapath/outbox.h"
#include "ops/catalog.h"
#include "ops/daemon.h"
#include "ops/operations.h"
#include "state/changelog.h"
#include "state/store.h"
#include "tests/support/check_run.h"

/* ====================================================== the toy driver */

#define GROUP_MESSAGES 2         /* input messages per group */
#define TOY_MAX_INPUT 16
#define LOG_MAX 256

/* The transport: messages in memory, and what was published. */
typedef struct toy_wire {
    ts_inbound input[TOY_MAX_INPUT];
    size_t n_input;
    size_t acked;                /* input before this is acknowledged */
    ts_buf published;            /* each: topic NUL payload-length payload */
    size_t n_published;
    char log[LOG_MAX];           /* 'c' commit, 'p' publish, 'a' ack */
    size_t n_log;
    size_t published_before_commit; /* sanitized points whose ledger was
                                       not in the store when published */
} toy_wire;

static toy_wire wire;

struct ts_driver {
    ts_driver_env env;
    ts_group group;
    ts_outbox outbox;
    ts_sink sink;
    ts_record_map *store;        /* the durable state: user -> record */
    ts_state_backend backend;
    unsigned char record[4096];
    struct event *tick;
};

static void note(char what)
{
    if (wire.n_log < LOG_MAX - 1)
        wire.log[wire.n_log++] = what;
}

static int toy_load(void *ctx, const char *user, size_t len,
                    ts_user_record *record)
{
    ts_driver *d = ctx;
    const void *bytes;
    size_t n;
    if (ts_record_map_get(d->store, user, len, &bytes, &n) == 0)
        return 0;
    return ts_record_decode(bytes, n, record) == 0 ? 1 : -1;
}

static int toy_save(void *ctx, const char *user, size_t len,
                    const ts_user_record *record)
{
    ts_driver *d = ctx;
    size_t n = ts_record_encode(record, d->record, sizeof d->record);
    return n > 0 && n <= sizeof d->record &&
                   ts_record_map_put(d->store, user, len, d->record, n) == 0
               ? 0 : -1;
}

/* The delivery rule's witness: a sanitized point goes out only once its
 * user's ledger in the store has spent at least what it says. */
static ts_publish_result toy_publish(void *arg, const void *topic,
                                     size_t topic_len, const void *payload,
                                     size_t len)
{
    ts_driver *d = arg;
    Tracesan__V1__SanitizedLocation *loc =
        topic_len > 10 && memcmp(topic, "sanitized.", 10) == 0
            ? tracesan__v1__sanitized_location__unpack(NULL, len, payload)
            : NULL;
    if (loc != NULL) {
        ts_user_record record;
        if (toy_load(d, loc->user_id, strlen(loc->user_id), &record) != 1 ||
            record.spent < loc->eps_spent_window - 1e-12)
            wire.published_before_commit++;
        tracesan__v1__sanitized_location__free_unpacked(loc, NULL);
    }
    ts_buf_append(&wire.published, topic, topic_len);
    ts_buf_append(&wire.published, "", 1);
    ts_buf_append(&wire.published, &len, sizeof len);
    ts_buf_append(&wire.published, payload, len);
    wire.n_published++;
    note('p');
    return TS_PUBLISH_SENT;
}

/* One group: its messages through the group body, then commit, publish,
 * acknowledge. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_driver *d = arg;
    size_t end = wire.acked + GROUP_MESSAGES;
    if (end > wire.n_input)
        end = wire.n_input;
    for (size_t i = wire.acked; i < end; i++)
        ts_group_process(&d->group, d->env.pipeline, &wire.input[i],
                         &d->sink);
    if (ts_pipeline_save_dirty(d->env.pipeline) != 0)
        return;                  /* held: nothing published, not acked */
    ts_pipeline_mark_in_flight(d->env.pipeline);
    ts_pipeline_mark_durable(d->env.pipeline);
    note('c');
    ts_publisher publisher = { d, toy_publish };
    ts_outbox_publish(&d->outbox, &publisher);
    wire.acked = end;
    note('a');
    if (wire.acked < wire.n_input)
        event_active(d->tick, EV_TIMEOUT, 0);
    else
        event_base_loopbreak(d->env.base);
}

static void toy_close(ts_driver *d)
{
    if (d->tick != NULL)
        event_free(d->tick);
    ts_pipeline_set_state_backend(d->env.pipeline, NULL);
    ts_record_map_free(d->store);
    ts_outbox_free(&d->outbox);
    ts_group_free(&d->group);
    free(d);
}

static int toy_open(ts_driver **out, const ts_driver_env *env, char *err,
                    size_t errlen)
{
    ts_driver *d = calloc(1, sizeof *d);
    ck_assert_ptr_nonnull(d);
    d->env = *env;
    const ts_format_settings *format =
        ts_config_section(env->config, &ts_format_setting_section);
    d->store = ts_record_map_new();
    d->tick = event_new(env->base, -1, 0, on_tick, d);
    if (d->store == NULL || d->tick == NULL ||
        ts_group_init(&d->group, ts_config_settings(env->config), format,
                      env->observer) != 0) {
        snprintf(err, errlen, "out of memory");
        toy_close(d);
        return -1;
    }
    d->sink = ts_outbox_sink(&d->outbox);
    d->backend = (ts_state_backend){ d, toy_load, toy_save };
    ts_pipeline_set_state_backend(env->pipeline, &d->backend);
    *out = d;
    return 0;
}

static int toy_start(ts_driver *d, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    event_active(d->tick, EV_TIMEOUT, 0);
    return 0;
}

static void toy_describe(const ts_driver *d, char *buf, size_t len)
{
    (void)d;
    snprintf(buf, len, "input=memory output=memory");
}

static int toy_finish(ts_driver *d)
{
    (void)d;
    return wire.acked == wire.n_input ? 0 : 1;
}

static void toy_stats(const ts_driver *d, ts_driver_stats *out)
{
    memset(out, 0, sizeof *out);
    ts_driver_stats_add_pipeline(out, d->env.pipeline);
    out->updates_before_pipeline = d->group.refused_before_pipeline;
    out->messages_in = d->group.messages;
    out->published = d->outbox.published;
}

static int toy_adopt_config(ts_driver *d, ts_config *fresh, char *err,
                            size_t errlen)
{
    (void)d;
    (void)fresh;
    (void)err;
    (void)errlen;
    return 0;
}

static const char *const toy_types[] = { "memory", NULL };

static const ts_driver_ops toy_driver = {
    .name = "memory",
    .input_types = toy_types,
    .output_types = toy_types,
    .open = toy_open,
    .start = toy_start,
    .describe = toy_describe,
    .finish = toy_finish,
    .close = toy_close,
    .stats = toy_stats,
    .adopt_config = toy_adopt_config,
};

/* ===================================================== what it must do */

#define USERS 4
#define PER_USER 5
#define POINTS_PER_WINDOW 3

static ts_buf encoded[TOY_MAX_INPUT];

/* USERS x PER_USER updates in messages of USERS (one point of each user),
 * and one message that is not a LocationBatch. */
static void fill_input(void)
{
    memset(&wire, 0, sizeof wire);
    for (size_t k = 0; k < PER_USER; k++) {
        ts_input inputs[USERS];
        static const char *const users[USERS] = { "ann", "bob", "cy", "di" };
        for (size_t u = 0; u < USERS; u++)
            inputs[u] = (ts_input){ .user_id = users[u],
                                    .ts_ms = 1700000000000 + 60000 * (int64_t)k,
                                    .lat = 48.85 + 0.01 * (double)u,
                                    .lon = 2.35 };
        ts_buf_reset(&encoded[k]);
        ck_assert_int_eq(ts_codec_encode_batch(inputs, USERS, &encoded[k]),
                         0);
        wire.input[wire.n_input++] = (ts_inbound){ encoded[k].data,
                                                   encoded[k].len, 1 };
    }
    static const unsigned char garbage[] = { 0xff, 0xff, 0xff, 0xff, 0x0f };
    wire.input[wire.n_input++] = (ts_inbound){ garbage, sizeof garbage, 1 };
}

/* Whether the log is (commit publish* ack)+: each group committed before
 * any of it is published, its input acknowledged after. */
static int delivery_in_order(const char *log, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (log[i++] != 'c')
            return 0;
        while (i < n && log[i] == 'p')
            i++;
        if (i == n || log[i++] != 'a')
            return 0;
    }
    return n > 0;
}

/* Runs the daemon with the toy driver, as daemon/main.c runs any. */
static void run_daemon(ts_driver_stats *stats)
{
    const char *overrides[] = {
        "http.listen=\"\"", "state.dir=\"\"", "input.max_backdate_s=0",
        "profiles.geoind.points_per_window=3", "log.level=\"error\"",
    };
    char err[512];
    ts_config *config = ts_config_load(NULL, overrides,
                                       sizeof overrides / sizeof *overrides,
                                       err, sizeof err);
    ck_assert_msg(config != NULL, "%s", err);
    ts_daemon daemon;
    ts_driver *instance = NULL;
    ck_assert_msg(ts_daemon_init(&daemon, config, &toy_driver, NULL, NULL, 0,
                                 err, sizeof err) == 0, "%s", err);
    ts_driver_env env = ts_daemon_env(&daemon);
    ck_assert_int_eq(toy_driver.open(&instance, &env, err, sizeof err), 0);
    ck_assert_int_eq(ts_daemon_start(&daemon, instance), 0);
    ck_assert_int_eq(toy_driver.start(instance, err, sizeof err), 0);
    ck_assert_int_eq(ts_daemon_run(&daemon), 0);
    ck_assert_int_eq(toy_driver.finish(instance), 0);
    toy_driver.stats(instance, stats);
    ts_daemon_stop(&daemon);
    toy_driver.close(instance);
    ts_daemon_free(&daemon);
    ts_config_free(config);
}

TS_TEST(test_toy_driver_runs_the_daemon_path)
{
    fill_input();
    ts_driver_stats stats;
    run_daemon(&stats);

    /* One outcome per update, one rejection for the garbage. */
    ck_assert_uint_eq(wire.n_published, USERS * PER_USER + 1);
    size_t sanitized = 0, exhausted = 0, malformed = 0;
    for (size_t at = 0, i = 0; i < wire.n_published; i++) {
        const char *topic = (const char *)wire.published.data + at;
        at += strlen(topic) + 1;
        size_t len;
        memcpy(&len, wire.published.data + at, sizeof len);
        at += sizeof len;
        if (strncmp(topic, "sanitized.geoind", 16) == 0) {
            sanitized++;
        } else {
            ck_assert_str_eq(topic, "rejected");
            Tracesan__V1__Rejection *r = tracesan__v1__rejection__unpack(
                NULL, len, wire.published.data + at);
            ck_assert_ptr_nonnull(r);
            exhausted += r->reason ==
                         TRACESAN__V1__REJECTION_REASON__REJECTION_REASON_BUDGET_EXHAUSTED;
            malformed += r->reason ==
                         TRACESAN__V1__REJECTION_REASON__REJECTION_REASON_MALFORMED;
            tracesan__v1__rejection__free_unpacked(r, NULL);
        }
        at += len;
    }
    ck_assert_uint_eq(sanitized, USERS * POINTS_PER_WINDOW);
    ck_assert_uint_eq(exhausted, USERS * (PER_USER - POINTS_PER_WINDOW));
    ck_assert_uint_eq(malformed, 1);

    /* Delivery: every group is committed, then published, then acked,
     * and no point went out before the ledger it spent was stored. */
    ck_assert_uint_eq(wire.published_before_commit, 0);
    ck_assert_msg(delivery_in_order(wire.log, wire.n_log),
                  "groups not committed, published, acked in turn: %.*s",
                  (int)wire.n_log, wire.log);
    ck_assert_uint_eq(wire.acked, wire.n_input);

    /* What /metrics and the summary read, through the table. */
    ck_assert_uint_eq(stats.pipeline.updates, USERS * PER_USER);
    ck_assert_uint_eq(stats.pipeline.sanitized, USERS * POINTS_PER_WINDOW);
    ck_assert_uint_eq(stats.messages_in, PER_USER + 1);
    ck_assert_uint_eq(stats.published, USERS * PER_USER + 1);
    ck_assert_uint_eq(stats.users, USERS);
    for (size_t k = 0; k < TOY_MAX_INPUT; k++)
        ts_buf_free(&encoded[k]);
    ts_buf_free(&wire.published);
}
END_TEST

int main(void)
{
    return ts_check_main("toy_driver", 0, NULL, NULL);
}
