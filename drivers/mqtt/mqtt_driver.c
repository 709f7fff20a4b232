#include "drivers/mqtt/mqtt_driver.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "datapath/group.h"
#include "datapath/group_commit.h"
#include "datapath/outbox.h"
#include "drivers/mqtt/mqtt_client.h"
#include "drivers/mqtt/mqtt_packet.h"
#include "drivers/mqtt/mqtt_payload.h"
#include "drivers/mqtt/mqtt_recent.h"
#include "drivers/mqtt/mqtt_settings.h"
#include "drivers/mqtt/mqtt_topics.h"
#include "engine/log.h"

/* As the ZeroMQ driver: outcomes held before a mid-read flush, users
 * visited per expiry tick. */
#define OUTBOX_FLUSH_ENTRIES 65536
#define EXPIRE_SCAN_PER_TICK 10000
#define RETRY_FIRST_MS 200
/* An acknowledgement in the outbox: an entry with an empty topic (every
 * outcome has one) whose payload is the connection and packet id. */
#define ACK_BYTES (sizeof(uint64_t) + sizeof(uint16_t))

/* Refusals before the group body, by cause (tracesand_mqtt_refusals). */
enum { R_OVERSIZED, R_MALFORMED, R_NO_USER, R_BAD_TOPIC, N_REFUSALS };
static const char *const refusal_names[N_REFUSALS] = {
    "oversized", "malformed", "no_user_level", "bad_topic",
};

/* A message between its start and its end, which may be loop turns
 * apart (datapath/group.h): what its end does with it. */
typedef struct message_tail {
    uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES];
    int qos, oversized;
    uint16_t packet_id;
    uint64_t connection;
    size_t first;                    /* its first outbox entry */
} message_tail;

struct ts_driver {
    ts_driver_env env;
    const ts_settings *core;
    const ts_mqtt_settings *mqtt;
    ts_pipeline *pipeline;
    ts_mqtt_client *client;
    ts_group group;
    ts_outbox outbox;
    ts_sink sink;
    ts_group_commit commit;
    ts_store_backend store_backend;
    ts_state_backend backend;        /* store_backend's, plus the slots */
    ts_mqtt_recent *recent;
    struct event *expire_event;
    ts_buf batch;                    /* the message as a LocationBatch */
    ts_buf topic;                    /* an output topic being made */
    char down_reason[256];
    int healthy;
    uint64_t refusals[N_REFUSALS];
    uint64_t redeliveries;           /* answered from the recent slots */
    uint64_t acks_queued;
    message_tail tail;               /* of the message in hand */
    /* Messages handed over while one was open (the client holds input
     * while paused, but not an oversized message's head), copied, to be
     * handled after it in order. */
    ts_mqtt_message *deferred;
    size_t n_deferred, deferred_cap, deferred_next;
};

static const char *const types[] = { "mqtt", NULL };

/* What the broker may deliver again is what it has not had our PUBACK
 * for, and the client hands over at most mqtt.max_inflight messages
 * unacknowledged (drivers/mqtt/mqtt_client.h); twice, plus room. */
static size_t recent_slots(const ts_mqtt_settings *mqtt)
{
    return 2 * (size_t)mqtt->max_inflight + 100;
}

/* --------------------------------------------------------------- sink */

static int sink_put(void *arg, const void *topic, size_t topic_len,
                    const void *payload, size_t len)
{
    ts_driver *d = arg;
    ts_buf_reset(&d->topic);
    if (ts_mqtt_output_topic(d->mqtt, d->group.format, topic, topic_len,
                             payload, len, &d->topic) != 0) {
        d->outbox.encode_failures++;
        return -1;
    }
    return ts_outbox_put(&d->outbox, d->topic.data, d->topic.len, payload,
                         len);
}

static int sink_observe(void *arg, const ts_observation *observation)
{
    return ts_outbox_add_observation(&((ts_driver *)arg)->outbox,
                                     observation);
}

static void queue_ack(ts_driver *d, uint64_t connection, uint16_t packet_id)
{
    uint8_t ack[ACK_BYTES];
    memcpy(ack, &connection, sizeof connection);
    memcpy(ack + sizeof connection, &packet_id, sizeof packet_id);
    if (ts_outbox_put(&d->outbox, "", 0, ack, sizeof ack) == 0)
        d->acks_queued++;
}

/* A message refused before the group body: one rejection, counted as the
 * group body counts its own. */
static void refuse(ts_driver *d, int cause, ts_reason reason,
                   const char *detail)
{
    d->refusals[cause]++;
    ts_pipeline_count_rejection(d->pipeline, reason);
    const ts_observer *o = d->env.observer;
    if (o != NULL && o->rejected != NULL)
        o->rejected(o->arg, NULL, reason, detail);
    ts_buf topic = { 0 }, payload = { 0 };
    if (ts_format_rejection(d->group.format, reason, detail, &topic,
                            &payload) != 0 ||
        sink_put(d, topic.data, topic.len, payload.data, payload.len) != 0)
        d->group.encode_failures++;
    ts_buf_free(&topic);
    ts_buf_free(&payload);
}

/* --------------------------------------------------------------- input */

static size_t filter_of(const ts_driver *d, const ts_mqtt_message *m)
{
    for (size_t i = 0; i < d->mqtt->n_topics; i++)
        if (ts_mqtt_topic_matches(d->mqtt->topics[i], m->topic,
                                  m->topic_len))
            return i;
    return 0;
}

/* Whether level `level` of the filter is "+": only a topic whose user
 * level the filter leaves open names a user (fleet/+/location does,
 * fleet/batch does not). */
static int names_user(const char *filter, int level)
{
    const char *p = filter;
    for (int l = 1; l < level && p != NULL; l++) {
        p = strchr(p, '/');
        if (p != NULL)
            p++;
    }
    return p != NULL && p[0] == '+' && (p[1] == '/' || p[1] == '\0');
}

/* 1 when the message is done, 0 when it stays open for a later turn. */
static int process(ts_driver *d, const ts_mqtt_message *m)
{
    char detail[160];
    size_t filter = filter_of(d, m);
    if (m->oversized) {
        snprintf(detail, sizeof detail, "message of %zu bytes exceeds %zu",
                 m->payload_len, d->core->max_message_bytes);
        refuse(d, R_OVERSIZED, TS_REASON_OVERSIZED, detail);
        return 1;
    }
    if (!ts_mqtt_topic_is_valid(m->topic, m->topic_len)) {
        refuse(d, R_BAD_TOPIC, TS_REASON_INVALID_USER_ID,
               "topic is not UTF-8 or holds NUL");
        return 1;
    }
    const char *user = NULL;
    size_t user_len = 0;
    if (d->mqtt->user_from_topic > 0 &&
        names_user(d->mqtt->topics[filter], d->mqtt->user_from_topic) &&
        !ts_mqtt_topic_level(m->topic, m->topic_len,
                             d->mqtt->user_from_topic, &user, &user_len)) {
        snprintf(detail, sizeof detail, "topic has no level %d "
                 "(mqtt.user_from_topic)", d->mqtt->user_from_topic);
        refuse(d, R_NO_USER, TS_REASON_MISSING_USER_ID, detail);
        return 1;
    }
    ts_reason reason = TS_REASON_MALFORMED;
    if (ts_mqtt_payload_to_batch(d->mqtt->formats[filter],
                                 &d->mqtt->json, m->payload, m->payload_len,
                                 user, user_len, &d->batch, &reason, detail,
                                 sizeof detail) != 0) {
        refuse(d, R_MALFORMED, reason, detail);
        return 1;
    }
    ts_inbound inbound = { d->batch.data, d->batch.len, 1 };
    return ts_group_start(&d->group, d->pipeline, &inbound, &d->sink);
}

/* The message's outcomes are all in the outbox: kept for a redelivery,
 * then its acknowledgement behind them. */
static void message_done(ts_driver *d)
{
    const message_tail *t = &d->tail;
    if (t->qos > 0) {
        if (!t->oversized)
            ts_mqtt_recent_add(d->recent, t->fingerprint, &d->outbox,
                               t->first);
        queue_ack(d, t->connection, t->packet_id);
    }
    ts_group_commit_close_message(&d->commit);
    if (d->outbox.count >= OUTBOX_FLUSH_ENTRIES)
        ts_group_commit_flush(&d->commit);
    if (ts_group_turn_spent(&d->group))
        ts_group_commit_yield(&d->commit);
}

static void handle(ts_driver *d, const ts_mqtt_message *m)
{
    message_tail *t = &d->tail;
    t->qos = m->qos;
    t->oversized = m->oversized;
    t->packet_id = m->packet_id;
    t->connection = m->connection;
    t->first = d->outbox.count;
    if (m->qos > 0 && !m->oversized) {
        ts_mqtt_fingerprint(m->topic, m->topic_len, m->payload,
                            m->payload_len, t->fingerprint);
        long slot = ts_mqtt_recent_find(d->recent, t->fingerprint);
        if (slot >= 0) {
            /* Processed before, its debits durable: the same outcomes
             * again, nothing released. */
            d->redeliveries++;
            d->group.messages++;
            if (ts_mqtt_recent_replay(d->recent, slot, &d->outbox) != 0)
                d->group.encode_failures++;
            queue_ack(d, m->connection, m->packet_id);
            return;
        }
    }
    ts_group_commit_open_message(&d->commit);
    if (process(d, m))
        message_done(d);
    else
        ts_group_commit_yield(&d->commit);
}

static void free_deferred(ts_driver *d)
{
    for (size_t i = d->deferred_next; i < d->n_deferred; i++) {
        free((void *)d->deferred[i].topic);
        free((void *)d->deferred[i].payload);
    }
    d->n_deferred = d->deferred_next = 0;
}

/* A copy to handle after the open message; lost (counted as malformed)
 * only when memory runs out. */
static void defer(ts_driver *d, const ts_mqtt_message *m)
{
    if (d->n_deferred == d->deferred_cap) {
        size_t cap = d->deferred_cap != 0 ? 2 * d->deferred_cap : 16;
        ts_mqtt_message *grown = realloc(d->deferred, cap * sizeof *grown);
        if (grown == NULL) {
            refuse(d, R_MALFORMED, TS_REASON_MALFORMED, "out of memory");
            return;
        }
        d->deferred = grown;
        d->deferred_cap = cap;
    }
    ts_mqtt_message copy = *m;
    copy.topic = malloc(m->topic_len > 0 ? m->topic_len : 1);
    copy.payload = m->payload != NULL
                       ? malloc(m->payload_len > 0 ? m->payload_len : 1)
                       : NULL;
    if (copy.topic == NULL || (m->payload != NULL && copy.payload == NULL)) {
        free((void *)copy.topic);
        free((void *)copy.payload);
        refuse(d, R_MALFORMED, TS_REASON_MALFORMED, "out of memory");
        return;
    }
    memcpy((void *)copy.topic, m->topic, m->topic_len);
    if (m->payload != NULL)
        memcpy((void *)copy.payload, m->payload, m->payload_len);
    d->deferred[d->n_deferred++] = copy;
}

static void on_message(void *arg, const ts_mqtt_message *m)
{
    ts_driver *d = arg;
    if (ts_group_in_message(&d->group) || d->n_deferred > 0)
        defer(d, m);
    else
        handle(d, m);
}

/* A later loop turn after a yield: the open message goes on, then the
 * messages deferred behind it, in order, until one stays open. */
static void next_turn(void *arg)
{
    ts_driver *d = arg;
    ts_group_end_turn(&d->group);
    if (ts_group_in_message(&d->group)) {
        if (!ts_group_resume(&d->group, d->pipeline, &d->sink)) {
            ts_group_commit_yield(&d->commit);
            return;
        }
        message_done(d);
    }
    while (d->deferred_next < d->n_deferred &&
           !ts_group_in_message(&d->group) && !d->commit.yielded) {
        ts_mqtt_message *m = &d->deferred[d->deferred_next++];
        handle(d, m);
        free((void *)m->topic);
        free((void *)m->payload);
    }
    if (d->deferred_next == d->n_deferred)
        d->n_deferred = d->deferred_next = 0;
}

static void on_batch_end(void *arg)
{
    ts_driver *d = arg;
    ts_group_end_turn(&d->group);
    ts_group_commit_flush(&d->commit);
}

/* ---------------------------------------------------- output, acks */

static ts_publish_result publish(void *arg, const void *topic,
                                 size_t topic_len, const void *payload,
                                 size_t len)
{
    ts_driver *d = arg;
    if (topic_len == 0 && len == ACK_BYTES) {
        uint64_t connection;
        uint16_t id;
        memcpy(&connection, payload, sizeof connection);
        memcpy(&id, (const uint8_t *)payload + sizeof connection, sizeof id);
        ts_mqtt_client_ack(d->client, connection, id);
        return TS_PUBLISH_SENT;
    }
    return ts_mqtt_client_publish(d->client, topic, topic_len, payload, len,
                                  d->mqtt->output_qos);
}

/* The feed sees outcomes, not acknowledgements. */
static void on_sent(void *arg, const void *topic, size_t topic_len,
                    const void *payload, size_t len)
{
    ts_driver *d = arg;
    const ts_observer *o = d->env.observer;
    if (topic_len > 0 && o != NULL && o->published != NULL)
        o->published(o->arg, topic, topic_len, payload, len);
}

static void on_writable(void *arg)
{
    ts_group_commit_output_ready(&((ts_driver *)arg)->commit);
}

static void pause_input(void *arg)
{
    ts_mqtt_client_pause_input(((ts_driver *)arg)->client);
}

static void resume_input(void *arg)
{
    ts_mqtt_client_resume_input(((ts_driver *)arg)->client);
}

/* ------------------------------------------------------- connection */

static void set_health(ts_driver *d, const char *reason)
{
    const ts_observer *o = d->env.observer;
    if (o != NULL && o->health != NULL)
        o->health(o->arg, reason);
}

static void on_up(void *arg, int session_present)
{
    ts_driver *d = arg;
    ts_log(TS_LOG_INFO, "mqtt: connected to %s (%s session)",
           ts_mqtt_client_url(d->client),
           session_present ? "resumed" : "new");
    d->down_reason[0] = '\0';
    d->healthy = 1;
    set_health(d, NULL);
}

static void on_down(void *arg, const char *why, int refused)
{
    ts_driver *d = arg;
    /* Every attempt fails the same way while the broker is away: say it
     * once per cause. */
    if (strcmp(why, d->down_reason) != 0)
        ts_log(refused ? TS_LOG_ERROR : TS_LOG_WARN, "mqtt: %s; %s", why,
               "reconnecting with backoff");
    snprintf(d->down_reason, sizeof d->down_reason, "%s", why);
    char health[320];
    snprintf(health, sizeof health, "not connected to the MQTT broker: %s",
             why);
    d->healthy = 0;
    set_health(d, health);
}

/* ------------------------------------------------------ state backend */

static int backend_load(void *ctx, const char *user_id, size_t id_len,
                        ts_user_record *record)
{
    ts_driver *d = ctx;
    return d->store_backend.backend.load(d->store_backend.backend.ctx,
                                         user_id, id_len, record);
}

/* The slots of the messages in the group go into its commit, with the
 * first user's record. */
static int backend_save(void *ctx, const char *user_id, size_t id_len,
                        const ts_user_record *record)
{
    ts_driver *d = ctx;
    ts_record_batch *batch = d->store_backend.batch;
    if (batch != NULL && batch->n == 0 &&
        ts_mqtt_recent_save(d->recent, batch) != 0) {
        snprintf(d->store_backend.err, sizeof d->store_backend.err,
                 "cannot encode the recent MQTT messages");
        return -1;
    }
    return d->store_backend.backend.save(d->store_backend.backend.ctx,
                                         user_id, id_len, record);
}

static void on_expire_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_driver *d = arg;
    if (d->core->max_backdate_ms > 0)
        ts_pipeline_set_expiry_floor(d->pipeline, ts_wall_clock_ms() -
                                                      d->core->max_backdate_ms);
    ts_pipeline_expire(d->pipeline, EXPIRE_SCAN_PER_TICK);
}

/* -------------------------------------------------------------- table */

static void mqtt_close(ts_driver *d)
{
    if (d == NULL)
        return;
    if (d->expire_event != NULL)
        event_free(d->expire_event);
    ts_group_commit_stop(&d->commit);
    ts_mqtt_client_free(d->client);
    ts_outbox_free(&d->outbox);
    ts_group_free(&d->group);
    if (d->pipeline != NULL)
        ts_pipeline_set_state_backend(d->pipeline, NULL);
    ts_store_backend_free(&d->store_backend);
    ts_mqtt_recent_free(d->recent);
    ts_buf_free(&d->batch);
    ts_buf_free(&d->topic);
    free_deferred(d);
    free(d->deferred);
    free(d);
}

static int open_client(ts_driver *d, char *err, size_t errlen)
{
    const ts_mqtt_settings *s = d->mqtt;
    ts_mqtt_client_config config = {
        .urls = s->urls,
        .n_urls = s->n_urls,
        .client_id = s->client_id,
        .username = s->username,
        .password = s->password,
        .password_len = s->password_len,
        .ca_file = s->tls_ca_file,
        .cert_file = s->tls_cert_file,
        .key_file = s->tls_key_file,
        .version = ts_mqtt_protocol_level(s),
        .keepalive_s = (int)(s->keepalive_ms / 1000),
        .clean_start = s->clean_session,
        .session_expiry_s = (uint32_t)(s->session_expiry_ms / 1000),
        .max_inflight_in = (uint16_t)s->max_inflight,
        .max_payload = d->core->max_message_bytes,
        .filters = s->topics,
        .n_filters = s->n_topics,
        .qos = s->qos,
        .max_inflight_out = (size_t)s->output_max_inflight,
        .retry_first_ms = RETRY_FIRST_MS,
        .retry_max_ms = (int)s->retry_max_ms,
    };
    ts_mqtt_client_events events = {
        .arg = d,
        .message = on_message,
        .batch_end = on_batch_end,
        .up = on_up,
        .down = on_down,
        .writable = on_writable,
    };
    d->client = ts_mqtt_client_new(&config, &events, d->env.base, err,
                                   errlen);
    return d->client != NULL ? 0 : -1;
}

static int mqtt_open(ts_driver **out, const ts_driver_env *env, char *err,
                     size_t errlen)
{
    *out = NULL;
    ts_driver *d = calloc(1, sizeof *d);
    if (d == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    d->env = *env;
    d->core = ts_config_settings(env->config);
    d->mqtt = ts_mqtt_settings_of(env->config);
    d->pipeline = env->pipeline;
    const ts_format_settings *format =
        ts_config_section(env->config, &ts_format_setting_section);
    d->recent = ts_mqtt_recent_new(recent_slots(d->mqtt));
    if (d->recent == NULL ||
        ts_group_init(&d->group, d->core, format, env->observer) != 0) {
        snprintf(err, errlen, "out of memory");
        mqtt_close(d);
        return -1;
    }
    d->sink = (ts_sink){ d, sink_put, sink_observe };
    d->outbox.on_sent = on_sent;
    d->outbox.on_sent_arg = d;
    if (env->store != NULL) {
        ts_store_backend_init(&d->store_backend, env->store);
        d->backend = (ts_state_backend){ d, backend_load, backend_save };
        ts_pipeline_set_state_backend(d->pipeline, &d->backend);
        if (ts_mqtt_recent_load(d->recent, env->store, err, errlen) != 0) {
            mqtt_close(d);
            return -1;
        }
        if (ts_mqtt_recent_count(d->recent) > 0)
            ts_log(TS_LOG_INFO, "mqtt: the outcomes of the last %zu "
                   "messages are kept for their redelivery",
                   ts_mqtt_recent_count(d->recent));
    } else if (d->mqtt->qos > 0) {
        ts_log(TS_LOG_WARN, "mqtt: state.dir is unset: debits live in "
               "memory, and a restarted daemon releases redelivered "
               "messages again");
    }
    if (open_client(d, err, errlen) != 0) {
        mqtt_close(d);
        return -1;
    }
    d->commit = (ts_group_commit){
        .store = env->store,
        .store_backend = &d->store_backend,
        .pipeline = d->pipeline,
        .outbox = &d->outbox,
        .publisher = { d, publish },
        .pause_input = pause_input,
        .resume_input = resume_input,
        .input_arg = d,
        .next_turn = next_turn,
        .observer = env->observer,
        .base = env->base,
    };
    int64_t interval_ms = d->core->expire_interval_ms > 0
                              ? d->core->expire_interval_ms : 1000;
    struct timeval interval = {
        .tv_sec = (time_t)(interval_ms / 1000),
        .tv_usec = (suseconds_t)(interval_ms % 1000) * 1000,
    };
    d->expire_event = event_new(env->base, -1, EV_PERSIST, on_expire_tick, d);
    if (d->expire_event == NULL || ts_group_commit_start(&d->commit) != 0 ||
        event_add(d->expire_event, &interval) != 0) {
        snprintf(err, errlen, "cannot set up the commit and expiry timers");
        mqtt_close(d);
        return -1;
    }
    set_health(d, "not connected to the MQTT broker yet");
    *out = d;
    return 0;
}

static int mqtt_start(ts_driver *d, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    ts_mqtt_client_start(d->client);
    return 0;
}

static void mqtt_describe(const ts_driver *d, char *buf, size_t len)
{
    snprintf(buf, len, "input=%s output=%s", d->mqtt->urls[0],
             d->mqtt->urls[0]);
}

static int mqtt_finish(ts_driver *d)
{
    /* An open message is not acknowledged: the broker delivers it again
     * (QoS 1), and nothing of it is published. Deferred messages are not
     * acknowledged either. */
    if (ts_group_in_message(&d->group))
        ts_group_commit_drop_message(&d->commit,
                                     ts_group_abandon(&d->group));
    free_deferred(d);
    return ts_group_commit_finish(&d->commit);
}

static void mqtt_stats(const ts_driver *d, ts_driver_stats *out)
{
    memset(out, 0, sizeof *out);
    ts_driver_stats_add_pipeline(out, d->pipeline);
    out->updates_before_pipeline = d->group.refused_before_pipeline;
    out->messages_in = d->group.messages;
    /* Acknowledgements travel the outbox but are not outcomes. */
    ts_mqtt_client_stats client;
    ts_mqtt_client_get_stats(d->client, &client);
    uint64_t acks = client.acks_sent + client.acks_lost;
    out->published = d->outbox.published > acks ? d->outbox.published - acks
                                                 : 0;
    out->publish_failures = d->outbox.publish_failures;
    out->encode_failures = d->group.encode_failures +
                           d->outbox.encode_failures +
                           d->commit.committing.encode_failures;
    out->dropped_output_hwm = d->commit.dropped_unsent;
    out->dropped_uncommitted = d->commit.dropped_uncommitted;
    out->input_pauses_store = d->commit.pauses;
    out->store_commit_failures = d->commit.failures;
    out->transport.publish_dropped_error = client.publish_refused;
}

static int mqtt_render_metrics(ts_driver *d, ts_buf *out)
{
    ts_mqtt_client_stats c;
    ts_mqtt_client_get_stats(d->client, &c);
    char line[512];
    int rc = 0;
#define PUT(...)                                                            \
    do {                                                                    \
        int n_ = snprintf(line, sizeof line, __VA_ARGS__);                  \
        if (rc == 0 && ts_buf_append(out, line, (size_t)n_) != 0)           \
            rc = -1;                                                        \
    } while (0)
#define SERIES(name, type, help, value)                                     \
    PUT("# HELP tracesand_mqtt_" name " " help "\n"                         \
        "# TYPE tracesand_mqtt_" name " " type "\n"                         \
        "tracesand_mqtt_" name " %" PRIu64 "\n", (uint64_t)(value))
    SERIES("connected", "gauge", "1 while connected and subscribed",
           c.connected);
    SERIES("connections_total", "counter", "connections accepted (CONNACK)",
           c.connections);
    SERIES("reconnects_total", "counter",
           "connections lost or refused, each followed by a retry",
           c.disconnects);
    SERIES("messages_total", "counter", "PUBLISH packets received",
           c.messages);
    SERIES("redeliveries_total", "counter",
           "messages delivered again and answered with their kept outcomes",
           d->redeliveries);
    SERIES("dup_flag_total", "counter",
           "messages received with the DUP flag", c.duplicates);
    SERIES("acks_total", "counter", "PUBACKs sent after commit and publish",
           c.acks_sent);
    SERIES("acks_lost_total", "counter",
           "PUBACKs not sent: their connection was gone (the broker "
           "delivers those messages again)", c.acks_lost);
    SERIES("published_total", "counter",
           "output messages acknowledged by the broker (QoS 1) or written "
           "(QoS 0)", c.published);
    SERIES("publish_refused_total", "counter",
           "output messages the broker refused (PUBACK >= 0x80)",
           c.publish_refused);
    SERIES("resent_total", "counter",
           "output messages sent again after a reconnection", c.resent);
    SERIES("output_unacknowledged", "gauge",
           "output messages waiting for their PUBACK",
           ts_mqtt_client_unacknowledged(d->client));
    SERIES("over_receive_maximum_total", "counter",
           "messages the broker sent with mqtt.max_inflight already "
           "unacknowledged, held unprocessed", c.over_receive_maximum);
    SERIES("dropped_qos0_total", "counter",
           "QoS 0 input dropped while input was paused and 32 MiB waited",
           c.dropped_qos0);
    PUT("# HELP tracesand_mqtt_refusals_total input messages refused "
        "before decoding, by cause\n"
        "# TYPE tracesand_mqtt_refusals_total counter\n");
    for (int i = 0; i < N_REFUSALS; i++)
        PUT("tracesand_mqtt_refusals_total{cause=\"%s\"} %" PRIu64 "\n",
            refusal_names[i], d->refusals[i]);
#undef SERIES
#undef PUT
    return rc;
}

static int mqtt_adopt_config(ts_driver *d, ts_config *fresh, char *err,
                             size_t errlen)
{
    (void)d;
    (void)fresh;
    (void)err;
    (void)errlen;
    return 0;  /* every mqtt.* row applies at restart */
}

/* The density feed: out of band, no acknowledgement behind it. */
static ts_publish_result mqtt_publish(ts_driver *d, const void *topic,
                                      size_t topic_len, const void *payload,
                                      size_t len)
{
    ts_buf_reset(&d->topic);
    if (ts_mqtt_output_topic(d->mqtt, d->group.format, topic, topic_len,
                             payload, len, &d->topic) != 0)
        return TS_PUBLISH_FAILED;
    return ts_mqtt_client_publish(d->client, (const char *)d->topic.data,
                                  d->topic.len, payload, len,
                                  d->mqtt->output_qos);
}

const ts_driver_ops ts_mqtt_driver = {
    .name = "mqtt",
    .input_types = types,
    .output_types = types,
    .settings = &ts_mqtt_setting_section,
    .uses_store = 1,
    .runs_population = 1,
    .open = mqtt_open,
    .start = mqtt_start,
    .describe = mqtt_describe,
    .finish = mqtt_finish,
    .close = mqtt_close,
    .stats = mqtt_stats,
    .render_metrics = mqtt_render_metrics,
    .adopt_config = mqtt_adopt_config,
    .publish = mqtt_publish,
};
