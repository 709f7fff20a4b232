#include "datapath/outbox.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int push_entry(ts_outbox *box, size_t topic_mark, size_t payload_mark)
{
    if (box->count == box->capacity) {
        size_t capacity = box->capacity != 0 ? box->capacity * 2 : 1024;
        ts_outbox_entry *entries =
            realloc(box->entries, capacity * sizeof *entries);
        if (entries == NULL)
            return -1;
        box->entries = entries;
        box->capacity = capacity;
    }
    box->entries[box->count++] = (ts_outbox_entry){
        .topic_offset = topic_mark,
        .topic_len = box->topics.len - topic_mark,
        .payload_offset = payload_mark,
        .payload_len = box->payloads.len - payload_mark,
    };
    return 0;
}

int ts_outbox_put(ts_outbox *box, const void *topic, size_t topic_len,
                  const void *payload, size_t len)
{
    size_t topic_mark = box->topics.len;
    size_t payload_mark = box->payloads.len;
    if (ts_buf_append(&box->topics, topic, topic_len) == 0 &&
        ts_buf_append(&box->payloads, payload, len) == 0 &&
        push_entry(box, topic_mark, payload_mark) == 0)
        return 0;
    /* Cut back, so a half-written message never goes out. */
    box->topics.len = topic_mark;
    box->payloads.len = payload_mark;
    box->encode_failures++;
    return -1;
}

static int sink_put(void *arg, const void *topic, size_t topic_len,
                    const void *payload, size_t len)
{
    return ts_outbox_put(arg, topic, topic_len, payload, len);
}

static int sink_observe(void *arg, const ts_observation *observation)
{
    return ts_outbox_add_observation(arg, observation);
}

ts_sink ts_outbox_sink(ts_outbox *box)
{
    return (ts_sink){ box, sink_put, sink_observe };
}

/* The observations of the messages up to `entry` leave the queue: to
 * on_reports_sent when `entry` was sent, nowhere when it was not (the
 * earlier ones were settled when their own messages went). */
static void settle_observations(ts_outbox *box, size_t entry, int sent)
{
    size_t first = box->observed;
    while (box->observed < box->n_observations &&
           box->observations[box->observed].entry <= entry)
        box->observed++;
    if (sent && box->observed > first && box->on_reports_sent != NULL)
        box->on_reports_sent(box->on_reports_sent_arg,
                             &box->observations[first],
                             box->observed - first);
}

int ts_outbox_publish(ts_outbox *box, const ts_publisher *publisher)
{
    for (; box->sent < box->count; box->sent++) {
        const ts_outbox_entry *entry = &box->entries[box->sent];
        const void *topic = box->topics.data + entry->topic_offset;
        const void *payload = box->payloads.data + entry->payload_offset;
        ts_publish_result result = publisher->publish(
            publisher->arg, topic, entry->topic_len, payload,
            entry->payload_len);
        if (result == TS_PUBLISH_BLOCKED)
            return 1;
        if (result == TS_PUBLISH_SENT) {
            box->published++;
            if (box->on_sent != NULL)
                box->on_sent(box->on_sent_arg, topic, entry->topic_len,
                             payload, entry->payload_len);
        } else
            box->publish_failures++;
        settle_observations(box, box->sent, result == TS_PUBLISH_SENT);
    }
    ts_outbox_clear(box);
    return 0;
}

int ts_outbox_add_observation(ts_outbox *box,
                              const ts_observation *observation)
{
    if (box->count == 0)
        return -1;
    if (box->n_observations == box->observations_cap) {
        size_t cap = box->observations_cap ? 2 * box->observations_cap : 256;
        ts_observation *grown =
            realloc(box->observations, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        box->observations = grown;
        box->observations_cap = cap;
    }
    box->observations[box->n_observations] = *observation;
    box->observations[box->n_observations++].entry = box->count - 1;
    return 0;
}

void ts_outbox_clear(ts_outbox *box)
{
    box->n_observations = 0;
    box->observed = 0;
    ts_buf_reset(&box->topics);
    ts_buf_reset(&box->payloads);
    box->count = 0;
    box->sent = 0;
}

void ts_outbox_truncate(ts_outbox *box, size_t count)
{
    if (count >= box->count || count < box->sent)
        return;
    box->topics.len = box->entries[count].topic_offset;
    box->payloads.len = box->entries[count].payload_offset;
    box->count = count;
    while (box->n_observations > box->observed &&
           box->observations[box->n_observations - 1].entry >= count)
        box->n_observations--;
}

void ts_outbox_swap_contents(ts_outbox *a, ts_outbox *b)
{
    unsigned char queue[offsetof(ts_outbox, encode_failures)];
    memcpy(queue, a, sizeof queue);
    memcpy(a, b, sizeof queue);
    memcpy(b, queue, sizeof queue);
}

void ts_outbox_free(ts_outbox *box)
{
    ts_buf_free(&box->topics);
    ts_buf_free(&box->payloads);
    free(box->entries);
    box->entries = NULL;
    free(box->observations);
    box->observations = NULL;
    box->n_observations = box->observations_cap = 0;
    box->count = box->capacity = box->sent = 0;
}
