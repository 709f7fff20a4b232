#include "engine/outbox.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_TOPIC "batch"
/* Protobuf keys of OutcomeBatch's fields: field number << 3 | 2
 * (length-delimited). */
#define BATCH_KEY_SANITIZED 0x0a
#define BATCH_KEY_REJECTED 0x12

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

/* encoded: the encoder's status. On any failure the buffers are cut back
 * to where they were, so a half-written message never goes out. */
static int finish_add(ts_outbox *box, int encoded, size_t topic_mark,
                      size_t payload_mark)
{
    if (encoded == 0 && push_entry(box, topic_mark, payload_mark) == 0)
        return 0;
    box->topics.len = topic_mark;
    box->payloads.len = payload_mark;
    box->encode_failures++;
    return -1;
}

/* Appends the message in the scratch buffers to the open batch entry as
 * one element of field `key`: the key, the length as a varint, the bytes.
 * That is exactly how protobuf encodes a repeated embedded message, so
 * the batch never has to be unpacked and packed again. */
static int append_to_batch(ts_outbox *box, unsigned char key)
{
    if (!box->batch_open) {
        size_t topic_mark = box->topics.len;
        size_t payload_mark = box->payloads.len;
        if (ts_buf_append(&box->topics, BATCH_TOPIC,
                          sizeof BATCH_TOPIC - 1) != 0 ||
            push_entry(box, topic_mark, payload_mark) != 0) {
            box->topics.len = topic_mark;
            return -1;
        }
        box->batch_open = 1;
    }
    unsigned char frame[11];
    size_t n = 0;
    frame[n++] = key;
    for (uint64_t len = box->scratch_payload.len;; len >>= 7) {
        frame[n++] = (unsigned char)(len < 0x80 ? len : (len & 0x7f) | 0x80);
        if (len < 0x80)
            break;
    }
    size_t payload_mark = box->payloads.len;
    if (ts_buf_append(&box->payloads, frame, n) != 0 ||
        ts_buf_append(&box->payloads, box->scratch_payload.data,
                      box->scratch_payload.len) != 0) {
        box->payloads.len = payload_mark;
        return -1;
    }
    box->entries[box->count - 1].payload_len += box->payloads.len -
                                                payload_mark;
    return 0;
}

static int add_encoded(ts_outbox *box, int encoded, int sanitized)
{
    if (encoded == 0 &&
        append_to_batch(box, sanitized ? BATCH_KEY_SANITIZED
                                       : BATCH_KEY_REJECTED) == 0)
        return 0;
    box->encode_failures++;
    return -1;
}

int ts_outbox_add_outcome(ts_outbox *box, const ts_outcome *outcome)
{
    if (box->batched) {
        box->scratch_topic.len = box->scratch_payload.len = 0;
        return add_encoded(box,
                           ts_codec_encode_outcome(outcome,
                                                   &box->scratch_topic,
                                                   &box->scratch_payload),
                           outcome->sanitized);
    }
    size_t topic_mark = box->topics.len;
    size_t payload_mark = box->payloads.len;
    int encoded = ts_codec_encode_outcome(outcome, &box->topics,
                                          &box->payloads);
    return finish_add(box, encoded, topic_mark, payload_mark);
}

int ts_outbox_add_rejection(ts_outbox *box, ts_reason reason,
                            const char *detail)
{
    if (box->batched) {
        box->scratch_topic.len = box->scratch_payload.len = 0;
        return add_encoded(box,
                           ts_codec_encode_rejection(reason, NULL, 0, NULL,
                                                     detail,
                                                     &box->scratch_topic,
                                                     &box->scratch_payload),
                           0);
    }
    size_t topic_mark = box->topics.len;
    size_t payload_mark = box->payloads.len;
    int encoded = ts_codec_encode_rejection(reason, NULL, 0, NULL, detail,
                                            &box->topics, &box->payloads);
    return finish_add(box, encoded, topic_mark, payload_mark);
}

/* The observations of `entry` (and of any entry before it) leave the
 * queue: to on_observed when the entry was sent, nowhere when not. */
static void settle_observations(ts_outbox *box, size_t entry, int sent)
{
    for (; box->observed < box->n_observations &&
           box->observations[box->observed].entry <= entry;
         box->observed++)
        if (sent && box->on_observed != NULL)
            box->on_observed(box->on_observed_arg,
                             &box->observations[box->observed]);
}

int ts_outbox_publish(ts_outbox *box, const ts_transport_ops *ops,
                      ts_transport *transport)
{
    /* A published (or half-published) entry takes no more outcomes. */
    box->batch_open = 0;
    for (; box->sent < box->count; box->sent++) {
        const ts_outbox_entry *entry = &box->entries[box->sent];
        ts_publish_result result = ops->publish(
            transport, box->topics.data + entry->topic_offset,
            entry->topic_len, box->payloads.data + entry->payload_offset,
            entry->payload_len);
        if (result == TS_PUBLISH_BLOCKED)
            return 1;
        if (result == TS_PUBLISH_SENT) {
            box->published++;
            if (box->on_sent != NULL)
                box->on_sent(box->on_sent_arg,
                             box->topics.data + entry->topic_offset,
                             entry->topic_len,
                             box->payloads.data + entry->payload_offset,
                             entry->payload_len);
        } else
            box->publish_failures++;
        settle_observations(box, box->sent, result == TS_PUBLISH_SENT);
    }
    ts_outbox_clear(box);
    return 0;
}

int ts_outbox_add_observation(ts_outbox *box,
                              const ts_outbox_observation *observation)
{
    if (box->count == 0)
        return -1;
    if (box->n_observations == box->observations_cap) {
        size_t cap = box->observations_cap ? 2 * box->observations_cap : 256;
        ts_outbox_observation *grown =
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
    box->batch_open = 0;
}

void ts_outbox_swap_contents(ts_outbox *a, ts_outbox *b)
{
    unsigned char queue[offsetof(ts_outbox, batched)];
    memcpy(queue, a, sizeof queue);
    memcpy(a, b, sizeof queue);
    memcpy(b, queue, sizeof queue);
}

void ts_outbox_free(ts_outbox *box)
{
    ts_buf_free(&box->topics);
    ts_buf_free(&box->payloads);
    ts_buf_free(&box->scratch_topic);
    ts_buf_free(&box->scratch_payload);
    free(box->entries);
    box->entries = NULL;
    free(box->observations);
    box->observations = NULL;
    box->n_observations = box->observations_cap = 0;
    box->count = box->capacity = box->sent = 0;
}
