/* protobuf-c glue: LocationBatch in, SanitizedLocation / Rejection out.
 * Nothing here ever formats a coordinate into text. */
#ifndef TRACESAN_WIRE_CODEC_H
#define TRACESAN_WIRE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"
#include "tracesan/v1/tracesan.pb-c.h"

#define TS_TOPIC_REJECTED "rejected"
#define TS_TOPIC_SANITIZED_PREFIX "sanitized."
#define TS_TOPIC_DENSITY_PREFIX "density."

/* Growable byte buffer. */
typedef struct ts_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} ts_buf;

int ts_buf_reserve(ts_buf *buf, size_t extra);
int ts_buf_append(ts_buf *buf, const void *data, size_t len);
void ts_buf_reset(ts_buf *buf);
void ts_buf_free(ts_buf *buf);

/* What the wire says of one update that protobuf-c's unpacked form hides:
 * the byte lengths of its last user_id and profile fields (SIZE_MAX when
 * absent). protobuf-c hands strings over NUL-terminated, so "alice\0evil"
 * would read as "alice"; comparing with these lengths catches it. */
typedef struct ts_wire_update {
    size_t user_id_len;
    size_t profile_len;
} ts_wire_update;

/* Walks a LocationBatch's wire bytes without unpacking them (no
 * allocation, one pass): sets *n_updates to the number of `updates`
 * fields, and, when that is at most max_wire, fills wire[0..n) for them in
 * order. -1 when the bytes are not well-formed at the top level or inside
 * an update. Cheap enough to run before the unpack, so a batch over the
 * update limit is refused without decoding it. */
int ts_codec_scan_batch(const void *data, size_t len, size_t *n_updates,
                        ts_wire_update *wire, size_t max_wire);

/* Copies the wire lengths into `input`, which then carries them to the
 * pipeline's id checks. */
void ts_codec_input_wire(const ts_wire_update *wire, ts_input *input);

/* Memory for unpacking input messages. protobuf-c allocates once per
 * update and per string; from an arena each is a pointer bump, and all of
 * a message's memory goes at once when the next message is decoded. The
 * largest block is kept, so the steady state allocates nothing. */
typedef struct ts_codec_arena_block ts_codec_arena_block;
typedef struct ts_codec_arena {
    ts_codec_arena_block *blocks;    /* newest (and largest) first */
    size_t used;                     /* bytes used in the newest block */
    ProtobufCAllocator allocator;
} ts_codec_arena;

void ts_codec_arena_init(ts_codec_arena *arena);
/* Blocks the arena holds (1 between messages once it has been used). */
size_t ts_codec_arena_blocks(const ts_codec_arena *arena);
void ts_codec_arena_free(ts_codec_arena *arena);
/* Frees everything allocated from the arena at once (keeping its largest
 * block); for any message unpacked through `arena->allocator`. */
void ts_codec_arena_reset(ts_codec_arena *arena);

/* As ts_codec_decode_batch, into `arena` (NULL: the heap). Release with
 * ts_codec_batch_release on the same arena; the arena's previous batch
 * must have been released. */
Tracesan__V1__LocationBatch *ts_codec_decode_batch_in(ts_codec_arena *arena,
                                                      const void *data,
                                                      size_t len);
void ts_codec_batch_release(ts_codec_arena *arena,
                            Tracesan__V1__LocationBatch *batch);

/* NULL when the bytes are not a LocationBatch. Free with
 * ts_codec_batch_free. */
Tracesan__V1__LocationBatch *ts_codec_decode_batch(const void *data,
                                                   size_t len);
void ts_codec_batch_free(Tracesan__V1__LocationBatch *batch);

/* View of one decoded update as pipeline input (borrows its strings). */
void ts_codec_input_from_update(const Tracesan__V1__LocationUpdate *update,
                                ts_input *out);

/* Append the topic and the packed payload for one outcome. The topic is
 * "sanitized.<profile>" or "rejected". Returns -1 on allocation failure. */
int ts_codec_encode_outcome(const ts_outcome *outcome, ts_buf *topic,
                            ts_buf *payload);

/* The report's public extras (mechanisms/mechanism.h) into and out of a
 * SanitizedLocation, by the field of each extra's name. -1 when the schema
 * lacks a field of that name and type: a new extra without its proto
 * field fails every encode rather than be dropped silently. */
int ts_codec_put_extras(const ts_report *report,
                        Tracesan__V1__SanitizedLocation *location);
int ts_codec_get_extras(const Tracesan__V1__SanitizedLocation *location,
                        ts_report *report);

/* A rejection that is not tied to a parsed update (malformed message...). */
int ts_codec_encode_rejection(ts_reason reason, const char *user_id,
                              int64_t ts_ms, const char *profile,
                              const char *detail, ts_buf *topic,
                              ts_buf *payload);

/* The encoders above are these with the protobuf writer: each builds the
 * message and hands it to `write` (protobuf's pack, or another format's
 * writer, wire/format.h), which appends it to the payload. */
typedef int (*ts_codec_writer)(const ProtobufCMessage *message, ts_buf *out);
int ts_codec_pack(const ProtobufCMessage *message, ts_buf *out);
int ts_codec_write_outcome(const ts_outcome *outcome, ts_codec_writer write,
                           ts_buf *topic, ts_buf *payload);
int ts_codec_write_rejection(ts_reason reason, const char *user_id,
                             int64_t ts_ms, const char *profile,
                             const char *detail, ts_codec_writer write,
                             ts_buf *topic, ts_buf *payload);
int ts_codec_write_density(const Tracesan__V1__DensityEstimate *estimate,
                           ts_codec_writer write, ts_buf *topic,
                           ts_buf *payload);

/* A tracesan.v1.DensityEstimate on topic "density.<profile>" (the caller
 * fills everything but the topic). 0, or -1 on allocation failure (both
 * buffers then as they were). */
int ts_codec_encode_density(const Tracesan__V1__DensityEstimate *estimate,
                            ts_buf *topic, ts_buf *payload);

/* Producer side (tracesan replay, tests, bench): pack a batch. */
int ts_codec_encode_batch(const ts_input *inputs, size_t n, ts_buf *payload);

#endif
