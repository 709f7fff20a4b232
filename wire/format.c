#include "wire/format.h"

#include <string.h>

#include "wire/json_codec.h"

/* Protobuf keys of OutcomeBatch's fields: field number << 3 | 2
 * (length-delimited). */
#define BATCH_KEY_SANITIZED 0x0a
#define BATCH_KEY_REJECTED 0x12

/* -------------------------------------------------------------- protobuf */

static int protobuf_read(const ProtobufCMessageDescriptor *descriptor,
                         const void *data, size_t len,
                         ProtobufCAllocator *allocator,
                         ProtobufCMessage **out)
{
    *out = protobuf_c_message_unpack(descriptor, allocator, len, data);
    return *out != NULL ? 0 : -1;
}

/* An element is framed as protobuf frames a repeated embedded message:
 * the field's key, the length as a varint, the bytes, packed in place.
 * The batch is then the concatenation, in arrival order, and never has to
 * be unpacked and packed again. Both fields share one list (their
 * relative order is free in protobuf, each field's own order is kept). */
static int protobuf_write_element(const ProtobufCMessage *message,
                                  ts_buf *list)
{
    size_t size = protobuf_c_message_get_packed_size(message);
    if (ts_buf_reserve(list, 11 + size) != 0)
        return -1;
    uint8_t *out = list->data + list->len;
    size_t n = 0;
    out[n++] = message->descriptor ==
                       &tracesan__v1__sanitized_location__descriptor
                   ? BATCH_KEY_SANITIZED : BATCH_KEY_REJECTED;
    for (uint64_t rest = size;; rest >>= 7) {
        out[n++] = (uint8_t)(rest < 0x80 ? rest : (rest & 0x7f) | 0x80);
        if (rest < 0x80)
            break;
    }
    if (protobuf_c_message_pack(message, out + n) != size)
        return -1;
    list->len += n + size;
    return 0;
}

const ts_format ts_format_protobuf = {
    .name = "protobuf",
    .write = ts_codec_pack,
    .read = protobuf_read,
    .write_element = protobuf_write_element,
};

/* ------------------------------------------------------------------ json */

static int json_read(const ProtobufCMessageDescriptor *descriptor,
                     const void *data, size_t len,
                     ProtobufCAllocator *allocator, ProtobufCMessage **out)
{
    return ts_json_to_message(descriptor, data, len, allocator, out, NULL,
                              0);
}

/* Each field's elements, comma-separated, in a list of their own: JSON
 * writes a repeated field as one array. */
static int json_write_element(const ProtobufCMessage *message, ts_buf *list)
{
    size_t mark = list->len;
    if ((mark > 0 && ts_buf_append(list, ",", 1) != 0) ||
        ts_json_from_message(message, list) != 0) {
        list->len = mark;
        return -1;
    }
    return 0;
}

static int json_put_array(ts_buf *out, const char *name, const ts_buf *list,
                          int *first)
{
    if (list->len == 0)
        return 0;
    int rc = ts_buf_append(out, *first ? "\"" : ",\"", *first ? 1 : 2) |
             ts_buf_append(out, name, strlen(name)) |
             ts_buf_append(out, "\":[", 3) |
             ts_buf_append(out, list->data, list->len) |
             ts_buf_append(out, "]", 1);
    *first = 0;
    return rc != 0 ? -1 : 0;
}

/* As the codec writes an OutcomeBatch: empty fields left out. */
static int json_batch_write(const ts_format_batch *batch, ts_buf *out)
{
    size_t mark = out->len;
    int first = 1;
    if (ts_buf_append(out, "{", 1) != 0 ||
        json_put_array(out, "sanitized", &batch->sanitized, &first) != 0 ||
        json_put_array(out, "rejected", &batch->rejected, &first) != 0 ||
        ts_buf_append(out, "}", 1) != 0) {
        out->len = mark;
        return -1;
    }
    return 0;
}

const ts_format ts_format_json = {
    .name = "json",
    .write = ts_json_from_message,
    .read = json_read,
    .write_element = json_write_element,
    .split_lists = 1,
    .batch_write = json_batch_write,
};

/* -------------------------------------------------------------- the table */

static const ts_format *const formats[] = { &ts_format_protobuf,
                                            &ts_format_json, NULL };

const ts_format *const *ts_format_all(void)
{
    return formats;
}

const ts_format *ts_format_find(const char *name)
{
    for (const ts_format *const *f = formats; *f != NULL; f++)
        if (strcmp((*f)->name, name) == 0)
            return *f;
    return NULL;
}

int ts_format_outcome(const ts_format *format, const ts_outcome *outcome,
                      ts_buf *topic, ts_buf *payload)
{
    return ts_codec_write_outcome(outcome, format->write, topic, payload);
}

int ts_format_rejection(const ts_format *format, ts_reason reason,
                        const char *detail, ts_buf *topic, ts_buf *payload)
{
    return ts_codec_write_rejection(reason, NULL, 0, NULL, detail,
                                    format->write, topic, payload);
}

int ts_format_density(const ts_format *format,
                      const Tracesan__V1__DensityEstimate *estimate,
                      ts_buf *topic, ts_buf *payload)
{
    return ts_codec_write_density(estimate, format->write, topic, payload);
}

/* Counts an element `written` into `list`, or cuts the list back. */
static int counted(ts_format_batch *batch, int sanitized, ts_buf *list,
                   int written, size_t mark)
{
    if (written != 0) {
        list->len = mark;
        return -1;
    }
    if (sanitized)
        batch->n_sanitized++;
    else
        batch->n_rejected++;
    return 0;
}

static ts_buf *list_of(const ts_format *format, ts_format_batch *batch,
                       int sanitized)
{
    return format->split_lists && !sanitized ? &batch->rejected
                                             : &batch->sanitized;
}

int ts_format_batch_outcome(const ts_format *format, ts_format_batch *batch,
                            const ts_outcome *outcome)
{
    ts_buf *list = list_of(format, batch, outcome->sanitized);
    size_t mark = list->len;
    ts_buf_reset(&batch->topic);
    return counted(batch, outcome->sanitized, list,
                     ts_codec_write_outcome(outcome, format->write_element,
                                            &batch->topic, list),
                     mark);
}

int ts_format_batch_rejection(const ts_format *format, ts_format_batch *batch,
                              ts_reason reason, const char *detail)
{
    ts_buf *list = list_of(format, batch, 0);
    size_t mark = list->len;
    ts_buf_reset(&batch->topic);
    return counted(batch, 0, list,
                     ts_codec_write_rejection(reason, NULL, 0, NULL, detail,
                                              format->write_element,
                                              &batch->topic, list),
                     mark);
}

int ts_format_batch_payload(const ts_format *format,
                            const ts_format_batch *batch, ts_buf *scratch,
                            const void **data, size_t *len)
{
    if (format->batch_write == NULL) {
        *data = batch->sanitized.data;
        *len = batch->sanitized.len;
        return 0;
    }
    ts_buf_reset(scratch);
    if (format->batch_write(batch, scratch) != 0)
        return -1;
    *data = scratch->data;
    *len = scratch->len;
    return 0;
}

void ts_format_batch_reset(ts_format_batch *batch)
{
    ts_buf_reset(&batch->sanitized);
    ts_buf_reset(&batch->rejected);
    batch->n_sanitized = batch->n_rejected = 0;
}

void ts_format_batch_free(ts_format_batch *batch)
{
    ts_buf_free(&batch->sanitized);
    ts_buf_free(&batch->rejected);
    ts_buf_free(&batch->topic);
    batch->n_sanitized = batch->n_rejected = 0;
}

/* ------------------------------------------------------------ settings */

static const char *const output_formats[] = { "point", "batch", NULL };
/* The names of `formats`, in its order. */
static const char *const encodings[] = { "protobuf", "json", NULL };

#define CHOICE_ROW(...) TS_CHOICE_ROW(ts_format_settings, __VA_ARGS__)
#define INT_ROW(...) TS_INT_ROW(ts_format_settings, __VA_ARGS__)

static const ts_setting_def format_rows[] = {
    CHOICE_ROW("output.format", batch, output_formats, "point",
               TS_APPLY_RESTART, "one message per outcome, or OutcomeBatch "
               "messages of one input message's outcomes"),
    CHOICE_ROW("output.encoding", encoding, encodings, "protobuf",
               TS_APPLY_RESTART, "how messages are written: the schema's "
               "protobuf encoding, or JSON with the wire names"),
    INT_ROW("output.batch_outcomes", batch_outcomes, 1, 10000000, 1, "100",
            TS_APPLY_RESTART, "most outcomes in one OutcomeBatch"),
};

const ts_setting_section ts_format_setting_section = {
    .name = "format",
    TS_SECTION_ROWS(format_rows),
    .size = sizeof(ts_format_settings),
};

const ts_format *ts_format_of(const ts_format_settings *settings)
{
    return formats[settings->encoding];
}

size_t ts_format_outcomes_per_message(const ts_format_settings *settings)
{
    return settings->batch ? settings->batch_outcomes : 1;
}
