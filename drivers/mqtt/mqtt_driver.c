#include "drivers/mqtt/mqtt_driver.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datapath/pipeline_driver.h"
#include "drivers/mqtt/mqtt_client.h"
#include "drivers/mqtt/mqtt_connection.h"
#include "drivers/mqtt/mqtt_output.h"
#include "drivers/mqtt/mqtt_packet.h"
#include "drivers/mqtt/mqtt_payload.h"
#include "drivers/mqtt/mqtt_recent.h"
#include "drivers/mqtt/mqtt_settings.h"
#include "drivers/mqtt/mqtt_topics.h"
#include "engine/log.h"

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

/* The outbox holds outcomes under their format topics, whichever output
 * takes them (the templates make MQTT topics as they are published), and
 * each QoS 1 message's PUBACK behind its outcomes. */
struct ts_driver {
    ts_pipeline_driver pd;
    const ts_mqtt_settings *mqtt;
    ts_mqtt_client *client;
    ts_mqtt_link link;
    ts_state_backend backend;        /* the store backend's, plus the slots */
    ts_mqtt_recent *recent;
    ts_buf batch;                    /* the message as a LocationBatch */
    ts_buf topic;                    /* an output topic being made */
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

/* ------------------------------------------------------------- outbox */

static void queue_ack(ts_driver *d, uint64_t connection, uint16_t packet_id)
{
    uint8_t ack[ACK_BYTES];
    memcpy(ack, &connection, sizeof connection);
    memcpy(ack + sizeof connection, &packet_id, sizeof packet_id);
    if (ts_outbox_put(&d->pd.outbox, "", 0, ack, sizeof ack) == 0)
        d->acks_queued++;
}

/* A message refused before the group body: one rejection, counted as the
 * group body counts its own. */
static void refuse(ts_driver *d, int cause, ts_reason reason,
                   const char *detail)
{
    d->refusals[cause]++;
    ts_pipeline_count_rejection(d->pd.pipeline, reason);
    const ts_observer *o = d->pd.env.observer;
    if (o != NULL && o->rejected != NULL)
        o->rejected(o->arg, NULL, reason, detail);
    ts_buf topic = { 0 }, payload = { 0 };
    if (ts_format_rejection(d->pd.group.format, reason, detail, &topic,
                            &payload) != 0 ||
        ts_outbox_put(&d->pd.outbox, topic.data, topic.len, payload.data,
                      payload.len) != 0)
        d->pd.group.encode_failures++;
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
                 m->payload_len, d->pd.core->max_message_bytes);
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
    return ts_group_start(&d->pd.group, d->pd.pipeline, &inbound,
                          &d->pd.sink);
}

/* The message's outcomes are all in the outbox: kept for a redelivery,
 * then its acknowledgement behind them. */
static void message_done(ts_driver *d)
{
    const message_tail *t = &d->tail;
    if (t->qos > 0) {
        if (!t->oversized)
            ts_mqtt_recent_add(d->recent, t->fingerprint, &d->pd.outbox,
                               t->first);
        queue_ack(d, t->connection, t->packet_id);
    }
    ts_pipeline_driver_message_done(&d->pd);
}

static void handle(ts_driver *d, const ts_mqtt_message *m)
{
    message_tail *t = &d->tail;
    t->qos = m->qos;
    t->oversized = m->oversized;
    t->packet_id = m->packet_id;
    t->connection = m->connection;
    t->first = d->pd.outbox.count;
    if (m->qos > 0 && !m->oversized) {
        ts_mqtt_fingerprint(m->topic, m->topic_len, m->payload,
                            m->payload_len, t->fingerprint);
        long slot = ts_mqtt_recent_find(d->recent, t->fingerprint);
        if (slot >= 0) {
            /* Processed before, its debits durable: the same outcomes
             * again, nothing released. */
            d->redeliveries++;
            d->pd.group.messages++;
            if (ts_mqtt_recent_replay(d->recent, slot, &d->pd.outbox) != 0)
                d->pd.group.encode_failures++;
            queue_ack(d, m->connection, m->packet_id);
            return;
        }
    }
    ts_group_commit_open_message(&d->pd.commit);
    if (process(d, m))
        message_done(d);
    else
        ts_group_commit_yield(&d->pd.commit);
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
    if (ts_group_in_message(&d->pd.group) || d->n_deferred > 0)
        defer(d, m);
    else
        handle(d, m);
}

/* A later loop turn after a yield: the open message goes on, then the
 * messages deferred behind it, in order, until one stays open. */
static void next_turn(void *arg)
{
    ts_driver *d = arg;
    ts_group_end_turn(&d->pd.group);
    if (ts_group_in_message(&d->pd.group)) {
        if (!ts_group_resume(&d->pd.group, d->pd.pipeline, &d->pd.sink)) {
            ts_group_commit_yield(&d->pd.commit);
            return;
        }
        message_done(d);
    }
    while (d->deferred_next < d->n_deferred &&
           !ts_group_in_message(&d->pd.group) && !d->pd.commit.yielded) {
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
    ts_pipeline_driver_end_read(&((ts_driver *)arg)->pd);
}

/* ---------------------------------------------------- output, acks */

/* Outcomes go to the broker on this connection or to the other driver's
 * output; each PUBACK, on this connection, only once the outcomes ahead
 * of it were taken. */
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
    if (d->pd.output != NULL)
        return ts_pipeline_driver_publish(&d->pd, topic, topic_len, payload,
                                          len);
    return ts_mqtt_publish_outcome(d->client, d->mqtt, d->pd.group.format,
                                   &d->topic, topic, topic_len, payload,
                                   len);
}

/* The feed sees outcomes, not acknowledgements. */
static void on_sent(void *arg, const void *topic, size_t topic_len,
                    const void *payload, size_t len)
{
    ts_driver *d = arg;
    const ts_observer *o = d->pd.env.observer;
    if (topic_len > 0 && o != NULL && o->published != NULL)
        o->published(o->arg, topic, topic_len, payload, len);
}

static void on_writable(void *arg)
{
    ts_group_commit_output_ready(&((ts_driver *)arg)->pd.commit);
}

static void pause_input(void *arg)
{
    ts_mqtt_client_pause_input(((ts_driver *)arg)->client);
}

static void resume_input(void *arg)
{
    ts_mqtt_client_resume_input(((ts_driver *)arg)->client);
}

static void on_up(void *arg, int session_present)
{
    ts_mqtt_link_up(&((ts_driver *)arg)->link, session_present);
}

static void on_down(void *arg, const char *why, int refused)
{
    ts_mqtt_link_down(&((ts_driver *)arg)->link, why, refused);
}

/* ------------------------------------------------------ state backend */

static int backend_load(void *ctx, const char *user_id, size_t id_len,
                        ts_user_record *record)
{
    ts_driver *d = ctx;
    const ts_state_backend *store = &d->pd.store_backend.backend;
    return store->load(store->ctx, user_id, id_len, record);
}

/* The slots of the messages in the group go into its commit, with the
 * first user's record. */
static int backend_save(void *ctx, const char *user_id, size_t id_len,
                        const ts_user_record *record)
{
    ts_driver *d = ctx;
    ts_store_backend *sb = &d->pd.store_backend;
    if (sb->batch != NULL && sb->batch->n == 0 &&
        ts_mqtt_recent_save(d->recent, sb->batch) != 0) {
        snprintf(sb->err, sizeof sb->err,
                 "cannot encode the recent MQTT messages");
        return -1;
    }
    return sb->backend.save(sb->backend.ctx, user_id, id_len, record);
}

/* What the broker may deliver again is what it has not had our PUBACK
 * for, and the client hands over at most mqtt.max_inflight messages
 * unacknowledged (drivers/mqtt/mqtt_client.h); twice, plus room. */
static size_t recent_slots(const ts_mqtt_settings *mqtt)
{
    return 2 * (size_t)mqtt->max_inflight + 100;
}

static int open_recent(ts_driver *d, char *err, size_t errlen)
{
    d->recent = ts_mqtt_recent_new(recent_slots(d->mqtt));
    if (d->recent == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ts_store *store = d->pd.env.store;
    if (store == NULL) {
        if (d->mqtt->qos > 0)
            ts_log(TS_LOG_WARN, "mqtt: state.dir is unset: debits live in "
                   "memory, and a restarted daemon releases redelivered "
                   "messages again");
        return 0;
    }
    d->backend = (ts_state_backend){ d, backend_load, backend_save };
    ts_pipeline_set_state_backend(d->pd.pipeline, &d->backend);
    if (ts_mqtt_recent_load(d->recent, store, err, errlen) != 0)
        return -1;
    if (ts_mqtt_recent_count(d->recent) > 0)
        ts_log(TS_LOG_INFO, "mqtt: the outcomes of the last %zu messages "
               "are kept for their redelivery",
               ts_mqtt_recent_count(d->recent));
    return 0;
}

/* -------------------------------------------------------------- table */

static void mqtt_close(ts_driver *d)
{
    if (d == NULL)
        return;
    ts_pipeline_driver_stop(&d->pd);
    ts_mqtt_client_free(d->client);
    ts_pipeline_driver_free(&d->pd);
    ts_mqtt_recent_free(d->recent);
    ts_buf_free(&d->batch);
    ts_buf_free(&d->topic);
    free_deferred(d);
    free(d->deferred);
    free(d);
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
    d->mqtt = ts_mqtt_settings_of(env->config);
    if (ts_pipeline_driver_init(&d->pd, env, err, errlen) != 0 ||
        open_recent(d, err, errlen) != 0) {
        mqtt_close(d);
        return -1;
    }
    d->pd.outbox.on_sent = on_sent;
    d->pd.outbox.on_sent_arg = d;
    ts_mqtt_client_config config;
    ts_mqtt_connection_config(d->mqtt, d->pd.core, 1, &config);
    ts_mqtt_client_events events = {
        .arg = d,
        .message = on_message,
        .batch_end = on_batch_end,
        .up = on_up,
        .down = on_down,
        .writable = on_writable,
    };
    d->client = ts_mqtt_client_new(&config, &events, env->base, err, errlen);
    if (d->client == NULL) {
        mqtt_close(d);
        return -1;
    }
    d->link = (ts_mqtt_link){ .observer = env->observer,
                              .client = d->client };
    ts_driver_input input = { d, pause_input, resume_input, next_turn };
    if (ts_pipeline_driver_start(&d->pd, (ts_publisher){ d, publish }, input,
                                 err, errlen) != 0) {
        mqtt_close(d);
        return -1;
    }
    ts_mqtt_link_starting(&d->link);
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
    ts_pipeline_driver_describe(&d->pd, d->mqtt->urls[0], d->mqtt->urls[0],
                                buf, len);
}

static int mqtt_finish(ts_driver *d)
{
    /* An open message is not acknowledged: the broker delivers it again
     * (QoS 1), and nothing of it is published. Deferred messages are not
     * acknowledged either. */
    free_deferred(d);
    return ts_pipeline_driver_finish(&d->pd);
}

static void mqtt_stats(const ts_driver *d, ts_driver_stats *out)
{
    ts_pipeline_driver_stats(&d->pd, out);
    /* Acknowledgements travel the outbox but are not outcomes. */
    ts_mqtt_client_stats client;
    ts_mqtt_client_get_stats(d->client, &client);
    uint64_t acks = client.acks_sent + client.acks_lost;
    out->published = out->published > acks ? out->published - acks : 0;
    out->transport.publish_dropped_error += client.publish_refused;
}

static int mqtt_render_metrics(ts_driver *d, ts_buf *out)
{
    if (ts_mqtt_connection_render_metrics(d->client, out) != 0 ||
        ts_pipeline_driver_render_metrics(&d->pd, out) != 0)
        return -1;
    char line[512];
    int n = snprintf(line, sizeof line,
                     "# HELP tracesand_mqtt_redeliveries_total messages "
                     "delivered again and answered with their kept "
                     "outcomes\n"
                     "# TYPE tracesand_mqtt_redeliveries_total counter\n"
                     "tracesand_mqtt_redeliveries_total %" PRIu64 "\n"
                     "# HELP tracesand_mqtt_refusals_total input messages "
                     "refused before decoding, by cause\n"
                     "# TYPE tracesand_mqtt_refusals_total counter\n",
                     d->redeliveries);
    if (ts_buf_append(out, line, (size_t)n) != 0)
        return -1;
    for (int i = 0; i < N_REFUSALS; i++) {
        n = snprintf(line, sizeof line,
                     "tracesand_mqtt_refusals_total{cause=\"%s\"} %" PRIu64
                     "\n", refusal_names[i], d->refusals[i]);
        if (ts_buf_append(out, line, (size_t)n) != 0)
            return -1;
    }
    return 0;
}

/* Every mqtt.* row applies at restart; the other driver's output may
 * reload (CURVE's subscriber allow-list). */
static int mqtt_adopt_config(ts_driver *d, ts_config *fresh, char *err,
                             size_t errlen)
{
    return ts_pipeline_driver_adopt_config(&d->pd, fresh, err, errlen);
}

/* The density feed: out of band, no acknowledgement behind it. */
static ts_publish_result mqtt_publish(ts_driver *d, const void *topic,
                                      size_t topic_len, const void *payload,
                                      size_t len)
{
    if (d->pd.output != NULL)
        return ts_pipeline_driver_publish_aside(&d->pd, topic, topic_len,
                                                payload, len);
    return ts_mqtt_publish_outcome(d->client, d->mqtt, d->pd.group.format,
                                   &d->topic, topic, topic_len, payload,
                                   len);
}

const ts_driver_ops ts_mqtt_driver = {
    .name = "mqtt",
    .input_types = types,
    .output_types = types,
    /* Its output serves other drivers' input, and its input publishes
     * through theirs (output.type = "pub" or "push"). */
    .output = &ts_mqtt_output,
    .takes_outputs = 1,
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
