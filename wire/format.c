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
 * the key, the length as a varint, the bytes. The batch is then the
 * concatenation, in arrival order, and never has to be unpacked and packed
 * again. Both fields share one buffer (their relative order is free in
 * protobuf, each field's own order is kept). */
static int protobuf_batch_add(ts_format_batch *batch, int sanitized,
                              const void *element, size_t len)
{
    unsigned char frame[11];
    size_t n = 0;
    frame[n++] = sanitized ? BATCH_KEY_SANITIZED : BATCH_KEY_REJECTED;
    for (uint64_t rest = len;; rest >>= 7) {
        frame[n++] = (unsigned char)(rest < 0x80 ? rest
                                                 : (rest & 0x7f) | 0x80);
        if (rest < 0x80)
            break;
    }
    size_t mark = batch->sanitized.len;
    if (ts_buf_append(&batch->sanitized, frame, n) != 0 ||
        ts_buf_append(&batch->sanitized, element, len) != 0) {
        batch->sanitized.len = mark;
        return -1;
    }
    if (sanitized)
        batch->n_sanitized++;
    else
        batch->n_rejected++;
    return 0;
}

static int protobuf_batch_write(const ts_format_batch *batch, ts_buf *out)
{
    return ts_buf_append(out, batch->sanitized.data, batch->sanitized.len);
}

const ts_format ts_format_protobuf = {
    .name = "protobuf",
    .write = ts_codec_pack,
    .read = protobuf_read,
    .batch_add = protobuf_batch_add,
    .batch_write = protobuf_batch_write,
};

/* ------------------------------------------------------------------ json */

static int json_read(const ProtobufCMessageDescriptor *descriptor,
                     const void *data, size_t len,
                     ProtobufCAllocator *allocator, ProtobufCMessage **out)
{
    return ts_json_to_message(descriptor, data, len, allocator, out, NULL,
                              0);
}

/* Each field's elements, comma-separated, in their own buffer: JSON
 * writes a repeated field as one array. */
static int json_batch_add(ts_format_batch *batch, int sanitized,
                          const void *element, size_t len)
{
    ts_buf *list = sanitized ? &batch->sanitized : &batch->rejected;
    size_t *n = sanitized ? &batch->n_sanitized : &batch->n_rejected;
    size_t mark = list->len;
    if ((*n > 0 && ts_buf_append(list, ",", 1) != 0) ||
        ts_buf_append(list, element, len) != 0) {
        list->len = mark;
        return -1;
    }
    (*n)++;
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
    .batch_add = json_batch_add,
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
    .rows = format_rows,
    .n_rows = sizeof format_rows / sizeof format_rows[0],
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
