#include "daemon/outbox.h"

#include <stdlib.h>

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

int ts_outbox_add_outcome(ts_outbox *box, const ts_outcome *outcome)
{
    size_t topic_mark = box->topics.len;
    size_t payload_mark = box->payloads.len;
    int encoded = ts_codec_encode_outcome(outcome, &box->topics,
                                          &box->payloads);
    return finish_add(box, encoded, topic_mark, payload_mark);
}

int ts_outbox_add_rejection(ts_outbox *box, ts_reason reason,
                            const char *detail)
{
    size_t topic_mark = box->topics.len;
    size_t payload_mark = box->payloads.len;
    int encoded = ts_codec_encode_rejection(reason, NULL, 0, NULL, detail,
                                            &box->topics, &box->payloads);
    return finish_add(box, encoded, topic_mark, payload_mark);
}

int ts_outbox_publish(ts_outbox *box, const ts_transport_ops *ops,
                      ts_transport *transport)
{
    for (; box->sent < box->count; box->sent++) {
        const ts_outbox_entry *entry = &box->entries[box->sent];
        ts_publish_result result = ops->publish(
            transport, box->topics.data + entry->topic_offset,
            entry->topic_len, box->payloads.data + entry->payload_offset,
            entry->payload_len);
        if (result == TS_PUBLISH_BLOCKED)
            return 1;
        if (result == TS_PUBLISH_SENT)
            box->published++;
        else
            box->publish_failures++;
    }
    ts_outbox_clear(box);
    return 0;
}

void ts_outbox_clear(ts_outbox *box)
{
    ts_buf_reset(&box->topics);
    ts_buf_reset(&box->payloads);
    box->count = 0;
    box->sent = 0;
}

void ts_outbox_free(ts_outbox *box)
{
    ts_buf_free(&box->topics);
    ts_buf_free(&box->payloads);
    free(box->entries);
    box->entries = NULL;
    box->count = box->capacity = box->sent = 0;
}
