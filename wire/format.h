/* Output formats: how an outcome, a rejection, a density estimate and a
 * batch of outcomes become the bytes a driver publishes, and how those
 * bytes become a message again (the feed, the CLI).
 *
 * One table per format, found by name like a mechanism: "protobuf" (the
 * tracesan.v1 schema's binary encoding) and "json" (wire/json_codec.h:
 * the same messages as JSON objects, the wire names). Every driver's
 * output and the feed go through this table; which format, and whether
 * outcomes go out one per message or as OutcomeBatch messages, are the
 * output.encoding and output.format settings, the same for every driver.
 *
 * Topics do not depend on the format: "sanitized.<profile>", "rejected",
 * "density.<profile>" and "batch". */
#ifndef TRACESAN_WIRE_FORMAT_H
#define TRACESAN_WIRE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/settings.h"
#include "wire/codec.h"

#define TS_TOPIC_BATCH "batch"

/* Outcomes on their way into one OutcomeBatch, each encoded straight
 * into it: the sanitized and the rejected elements (a format that keeps
 * one list keeps them all in `sanitized`). */
typedef struct ts_format_batch {
    ts_buf sanitized;
    ts_buf rejected;
    size_t n_sanitized;
    size_t n_rejected;
    ts_buf topic;                /* scratch: an element's topic */
} ts_format_batch;

typedef struct ts_format {
    const char *name;
    /* Appends `message` to out. 0, or -1 (out as it was). */
    int (*write)(const ProtobufCMessage *message, ts_buf *out);
    /* A message of `descriptor` from bytes this format wrote; free it with
     * protobuf_c_message_free_unpacked(*out, allocator). 0, or -1. */
    int (*read)(const ProtobufCMessageDescriptor *descriptor,
                const void *data, size_t len, ProtobufCAllocator *allocator,
                ProtobufCMessage **out);
    /* Appends a SanitizedLocation or Rejection to its list of a batch,
     * as an element of OutcomeBatch. 0, or -1 (the list as it was). */
    int (*write_element)(const ProtobufCMessage *message, ts_buf *list);
    /* 1: sanitized and rejected elements in lists of their own. */
    int split_lists;
    /* Appends the OutcomeBatch the lists make to out; NULL when the
     * `sanitized` list is the message as it is. 0, or -1. */
    int (*batch_write)(const ts_format_batch *batch, ts_buf *out);
} ts_format;

extern const ts_format ts_format_protobuf;
extern const ts_format ts_format_json;

/* NULL-terminated, in the order of the output.encoding choices. */
const ts_format *const *ts_format_all(void);
const ts_format *ts_format_find(const char *name);

/* An outcome as its topic and payload, appended. 0, or -1 (both buffers
 * as they were; the outcome is lost, the fail-closed direction). */
int ts_format_outcome(const ts_format *format, const ts_outcome *outcome,
                      ts_buf *topic, ts_buf *payload);
/* A rejection not tied to a parsed update (malformed message, ...). */
int ts_format_rejection(const ts_format *format, ts_reason reason,
                        const char *detail, ts_buf *topic, ts_buf *payload);
/* A DensityEstimate on topic "density.<profile>". */
int ts_format_density(const ts_format *format,
                      const Tracesan__V1__DensityEstimate *estimate,
                      ts_buf *topic, ts_buf *payload);

/* An outcome into the open batch; a rejection not tied to an update. 0,
 * or -1 (the batch as it was). */
int ts_format_batch_outcome(const ts_format *format, ts_format_batch *batch,
                            const ts_outcome *outcome);
int ts_format_batch_rejection(const ts_format *format, ts_format_batch *batch,
                              ts_reason reason, const char *detail);
/* The batch as one message's payload: the batch's own bytes when the
 * format needs nothing around them, else written into `scratch`. 0, or
 * -1. */
int ts_format_batch_payload(const ts_format *format,
                            const ts_format_batch *batch, ts_buf *scratch,
                            const void **data, size_t *len);

void ts_format_batch_reset(ts_format_batch *batch);
void ts_format_batch_free(ts_format_batch *batch);
static inline size_t ts_format_batch_count(const ts_format_batch *batch)
{
    return batch->n_sanitized + batch->n_rejected;
}

/* ------------------------------------------------------------ settings */

/* output.format, output.encoding and output.batch_outcomes: what every
 * driver's output is made of. */
typedef struct ts_format_settings {
    int batch;                   /* output.format: 0 point, 1 batch */
    int encoding;                /* output.encoding: index in ts_format_all */
    size_t batch_outcomes;       /* most outcomes in one OutcomeBatch */
} ts_format_settings;

extern const ts_setting_section ts_format_setting_section;

/* The format output.encoding names. */
const ts_format *ts_format_of(const ts_format_settings *settings);

/* Outcomes one output message holds at most: 1 per point, else
 * output.batch_outcomes. What an output's buffer is sized by. */
size_t ts_format_outcomes_per_message(const ts_format_settings *settings);

#endif
