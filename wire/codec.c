#include "wire/codec.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The pipeline's reason codes go on the wire as-is, so the two enums must
 * never drift apart. */
#define TS_SAME_REASON(ours, wire)                                         \
    static_assert((int)TS_REASON_##ours ==                                 \
                      (int)TRACESAN__V1__REJECTION_REASON__REJECTION_REASON_##wire, \
                  "ts_reason " #ours " differs from the proto enum")
TS_SAME_REASON(NONE, UNSPECIFIED);
TS_SAME_REASON(MALFORMED, MALFORMED);
TS_SAME_REASON(OVERSIZED, OVERSIZED);
TS_SAME_REASON(BATCH_TOO_LARGE, BATCH_TOO_LARGE);
TS_SAME_REASON(EMPTY_BATCH, EMPTY_BATCH);
TS_SAME_REASON(MISSING_USER_ID, MISSING_USER_ID);
TS_SAME_REASON(INVALID_USER_ID, INVALID_USER_ID);
TS_SAME_REASON(INVALID_COORDINATE, INVALID_COORDINATE);
TS_SAME_REASON(INVALID_TIMESTAMP, INVALID_TIMESTAMP);
TS_SAME_REASON(TIME_WENT_BACKWARDS, TIME_WENT_BACKWARDS);
TS_SAME_REASON(UNKNOWN_PROFILE, UNKNOWN_PROFILE);
TS_SAME_REASON(PROFILE_CONFLICT, PROFILE_CONFLICT);
TS_SAME_REASON(BUDGET_EXHAUSTED, BUDGET_EXHAUSTED);
TS_SAME_REASON(USER_TABLE_FULL, USER_TABLE_FULL);
TS_SAME_REASON(INVALID_ACCURACY, INVALID_ACCURACY);
TS_SAME_REASON(INTERNAL_ERROR, INTERNAL_ERROR);
TS_SAME_REASON(OUTSIDE_REGION, OUTSIDE_REGION);
TS_SAME_REASON(TOO_OLD, TOO_OLD);
TS_SAME_REASON(DELTA_UNCERTIFIED, DELTA_UNCERTIFIED);
TS_SAME_REASON(CADENCE_TOO_FAST, CADENCE_TOO_FAST);
static_assert(TS_REASON_COUNT == TS_REASON_CADENCE_TOO_FAST + 1,
              "a new ts_reason needs a TS_SAME_REASON line above");

/* LocationBatch.updates is field 1, wire type 2 (length-delimited). */
#define BATCH_UPDATES_TAG 0x0a
#define VARINT_MAX_BYTES 10

int ts_buf_reserve(ts_buf *buf, size_t extra)
{
    if (extra <= buf->cap - buf->len)
        return 0;
    if (extra > SIZE_MAX / 2 - buf->len)
        return -1;
    size_t need = buf->len + extra;
    size_t cap = buf->cap != 0 ? buf->cap : 256;
    while (cap < need)
        cap *= 2;
    uint8_t *data = realloc(buf->data, cap);
    if (data == NULL)
        return -1;
    buf->data = data;
    buf->cap = cap;
    return 0;
}

int ts_buf_append(ts_buf *buf, const void *data, size_t len)
{
    if (ts_buf_reserve(buf, len) != 0)
        return -1;
    if (len != 0)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    return 0;
}

void ts_buf_reset(ts_buf *buf)
{
    buf->len = 0;
}

void ts_buf_free(ts_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
}

/* Protobuf wire types. */
enum { WIRE_VARINT = 0, WIRE_64BIT = 1, WIRE_LEN = 2, WIRE_32BIT = 5 };
/* LocationUpdate's string fields. */
#define UPDATE_USER_ID_FIELD 1
#define UPDATE_PROFILE_FIELD 6

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t value = 0;
    for (int shift = 0; shift < 7 * VARINT_MAX_BYTES; shift += 7) {
        if (*p == end)
            return -1;
        uint8_t byte = *(*p)++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* One field: its number, wire type and, for WIRE_LEN, its payload; the
 * cursor moves past it. -1 on truncation or an unsupported wire type
 * (groups are not part of this schema). */
typedef struct wire_field {
    uint64_t number;
    unsigned type;
    const uint8_t *payload; /* WIRE_LEN only */
    size_t payload_len;
} wire_field;

static int next_field(const uint8_t **p, const uint8_t *end,
                      wire_field *field)
{
    uint64_t key;
    if (read_varint(p, end, &key) < 0)
        return -1;
    field->number = key >> 3;
    field->type = (unsigned)(key & 7);
    /* Field number 0 is not valid protobuf, but protobuf-c 1.4 accepts it
     * when the key takes more than one byte and skips it as unknown. The
     * scan must accept at least what unpack accepts, or a batch it unpacks
     * would be refused here with the wrong count; so number 0 is skipped
     * like any unknown field. */
    uint64_t skip = 0;
    switch (field->type) {
    case WIRE_VARINT:
        return read_varint(p, end, &skip);
    case WIRE_64BIT:
        skip = 8;
        break;
    case WIRE_32BIT:
        skip = 4;
        break;
    case WIRE_LEN:
        if (read_varint(p, end, &skip) < 0)
            return -1;
        field->payload = *p;
        field->payload_len = (size_t)skip;
        break;
    default:
        return -1;
    }
    if (skip > (uint64_t)(end - *p))
        return -1;
    *p += skip;
    return 0;
}

static int scan_update(const uint8_t *p, const uint8_t *end,
                       ts_wire_update *wire)
{
    wire->user_id_len = SIZE_MAX;
    wire->profile_len = SIZE_MAX;
    wire_field field;
    while (p < end) {
        if (next_field(&p, end, &field) < 0)
            return -1;
        if (field.type != WIRE_LEN)
            continue;
        if (field.number == UPDATE_USER_ID_FIELD)
            wire->user_id_len = field.payload_len;
        else if (field.number == UPDATE_PROFILE_FIELD)
            wire->profile_len = field.payload_len;
    }
    return 0;
}

int ts_codec_scan_batch(const void *data, size_t len, size_t *n_updates,
                        ts_wire_update *wire, size_t max_wire)
{
    if (data == NULL && len != 0)
        return -1;
    const uint8_t *p = data, *end = p + len;
    size_t count = 0;
    wire_field field;
    while (p < end) {
        if (next_field(&p, end, &field) < 0)
            return -1;
        if (field.number != 1)
            continue; /* unknown fields are skipped, as unpack does */
        if (field.type != WIRE_LEN)
            return -1;
        if (wire != NULL && count < max_wire &&
            scan_update(field.payload, field.payload + field.payload_len,
                        &wire[count]) < 0)
            return -1;
        count++;
    }
    *n_updates = count;
    return 0;
}

void ts_codec_input_wire(const ts_wire_update *wire, ts_input *input)
{
    input->has_wire_lengths = 1;
    input->user_id_wire_len = wire->user_id_len;
    input->profile_wire_len = wire->profile_len;
}

Tracesan__V1__LocationBatch *ts_codec_decode_batch(const void *data,
                                                   size_t len)
{
    if (data == NULL && len != 0)
        return NULL;
    return tracesan__v1__location_batch__unpack(NULL, len,
                                                (const uint8_t *)data);
}

struct ts_codec_arena_block {
    ts_codec_arena_block *next;
    size_t size;                     /* usable bytes after the header */
    max_align_t data[];
};

#define ARENA_FIRST_BLOCK (64 * 1024)
#define ARENA_ALIGN (sizeof(max_align_t))

static void *arena_alloc(void *data, size_t size)
{
    ts_codec_arena *arena = data;
    size = (size + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    ts_codec_arena_block *block = arena->blocks;
    if (block == NULL || block->size - arena->used < size) {
        size_t want = block != NULL ? block->size * 2 : ARENA_FIRST_BLOCK;
        if (want < size)
            want = size;
        if (want > SIZE_MAX - sizeof *block)
            return NULL;
        ts_codec_arena_block *grown = malloc(sizeof *grown + want);
        if (grown == NULL)
            return NULL;
        grown->next = block;
        grown->size = want;
        arena->blocks = block = grown;
        arena->used = 0;
    }
    void *p = (char *)block->data + arena->used;
    arena->used += size;
    return p;
}

/* Freed all at once by ts_codec_batch_release. */
static void arena_free(void *data, void *pointer)
{
    (void)data;
    (void)pointer;
}

void ts_codec_arena_init(ts_codec_arena *arena)
{
    arena->blocks = NULL;
    arena->used = 0;
    arena->allocator = (ProtobufCAllocator){ .alloc = arena_alloc,
                                             .free = arena_free,
                                             .allocator_data = arena };
}

/* Keeps only the newest block, the largest: a message that needed more
 * grew the arena once, and the next such message fits. */
void ts_codec_arena_reset(ts_codec_arena *arena)
{
    if (arena->blocks == NULL)
        return;
    ts_codec_arena_block *old = arena->blocks->next;
    arena->blocks->next = NULL;
    while (old != NULL) {
        ts_codec_arena_block *next = old->next;
        free(old);
        old = next;
    }
    arena->used = 0;
}

size_t ts_codec_arena_blocks(const ts_codec_arena *arena)
{
    size_t n = 0;
    for (const ts_codec_arena_block *b = arena->blocks; b != NULL; b = b->next)
        n++;
    return n;
}

void ts_codec_arena_free(ts_codec_arena *arena)
{
    ts_codec_arena_reset(arena);
    free(arena->blocks);
    arena->blocks = NULL;
}

Tracesan__V1__LocationBatch *ts_codec_decode_batch_in(ts_codec_arena *arena,
                                                      const void *data,
                                                      size_t len)
{
    if (data == NULL && len != 0)
        return NULL;
    return tracesan__v1__location_batch__unpack(
        arena != NULL ? &arena->allocator : NULL, len, (const uint8_t *)data);
}

void ts_codec_batch_release(ts_codec_arena *arena,
                            Tracesan__V1__LocationBatch *batch)
{
    if (arena == NULL)
        ts_codec_batch_free(batch);
    else
        ts_codec_arena_reset(arena);
}

void ts_codec_batch_free(Tracesan__V1__LocationBatch *batch)
{
    if (batch != NULL)
        tracesan__v1__location_batch__free_unpacked(batch, NULL);
}

void ts_codec_input_from_update(const Tracesan__V1__LocationUpdate *update,
                                ts_input *out)
{
    out->user_id = update->user_id;
    /* Absent values become values the pipeline refuses (timestamp 0 is
     * invalid, NaN is not a coordinate) rather than plausible defaults: a
     * missing latitude must never be sanitized as the equator. */
    out->ts_ms = update->has_timestamp_ms ? update->timestamp_ms : 0;
    out->lat = update->has_lat ? update->lat : NAN;
    out->lon = update->has_lon ? update->lon : NAN;
    out->has_accuracy = update->has_horizontal_accuracy_m ? 1 : 0;
    out->accuracy_m = update->has_horizontal_accuracy_m
                          ? update->horizontal_accuracy_m
                          : NAN;
    out->profile = update->profile;
    out->has_wire_lengths = 0;
}

int ts_codec_pack(const ProtobufCMessage *message, ts_buf *payload)
{
    size_t size = protobuf_c_message_get_packed_size(message);
    if (size == 0)
        return 0;  /* nothing to write, into a buffer that may have none */
    if (ts_buf_reserve(payload, size) != 0)
        return -1;
    size_t written = protobuf_c_message_pack(message,
                                             payload->data + payload->len);
    if (written != size)
        return -1;
    payload->len += written;
    return 0;
}

static char *optional_string(const char *text)
{
    /* protobuf-c never writes through these pointers when packing. */
    return (text != NULL && text[0] != '\0') ? (char *)text : NULL;
}

int ts_codec_write_rejection(ts_reason reason, const char *user_id,
                             int64_t ts_ms, const char *profile,
                             const char *detail, ts_codec_writer write,
                             ts_buf *topic, ts_buf *payload)
{
    Tracesan__V1__Rejection rejection = TRACESAN__V1__REJECTION__INIT;
    rejection.user_id = optional_string(user_id);
    if (ts_ms != 0) {
        rejection.has_timestamp_ms = 1;
        rejection.timestamp_ms = ts_ms;
    }
    rejection.has_reason = 1;
    rejection.reason = (Tracesan__V1__RejectionReason)reason;
    rejection.detail = optional_string(detail);
    rejection.profile = optional_string(profile);

    size_t topic_mark = topic->len;
    size_t payload_mark = payload->len;
    if (ts_buf_append(topic, TS_TOPIC_REJECTED,
                      sizeof TS_TOPIC_REJECTED - 1) != 0 ||
        write(&rejection.base, payload) != 0) {
        topic->len = topic_mark;
        payload->len = payload_mark;
        return -1;
    }
    return 0;
}

/* The SanitizedLocation field that carries a public extra: an optional
 * field of the extra's name and type, so the codec needs no code per
 * extra. NULL when the schema has no such field. */
static const ProtobufCFieldDescriptor *
extra_field(const ts_report_extra_def *extra)
{
    const ProtobufCFieldDescriptor *field =
        protobuf_c_message_descriptor_get_field_by_name(
            &tracesan__v1__sanitized_location__descriptor, extra->name);
    ProtobufCType want = extra->type == TS_EXTRA_BOOL ? PROTOBUF_C_TYPE_BOOL
                         : extra->type == TS_EXTRA_UINT32
                             ? PROTOBUF_C_TYPE_UINT32
                             : PROTOBUF_C_TYPE_DOUBLE;
    if (field == NULL || field->type != want ||
        field->label != PROTOBUF_C_LABEL_OPTIONAL)
        return NULL;
    return field;
}

int ts_codec_put_extras(const ts_report *report,
                        Tracesan__V1__SanitizedLocation *location)
{
    char *base = (char *)location;
    for (size_t i = 0; i < ts_report_n_extras; i++) {
        double value;
        if (!ts_report_extra_get(report, &ts_report_extras[i], &value))
            continue;
        const ProtobufCFieldDescriptor *field =
            extra_field(&ts_report_extras[i]);
        if (field == NULL)
            return -1;
        protobuf_c_boolean has = 1;
        memcpy(base + field->quantifier_offset, &has, sizeof has);
        if (field->type == PROTOBUF_C_TYPE_BOOL) {
            protobuf_c_boolean flag = value != 0;
            memcpy(base + field->offset, &flag, sizeof flag);
        } else if (field->type == PROTOBUF_C_TYPE_UINT32) {
            uint32_t number = (uint32_t)value;
            memcpy(base + field->offset, &number, sizeof number);
        } else {
            if (!isfinite(value))
                return -1;
            memcpy(base + field->offset, &value, sizeof value);
        }
    }
    return 0;
}

int ts_codec_get_extras(const Tracesan__V1__SanitizedLocation *location,
                        ts_report *report)
{
    const char *base = (const char *)location;
    for (size_t i = 0; i < ts_report_n_extras; i++) {
        const ProtobufCFieldDescriptor *field =
            extra_field(&ts_report_extras[i]);
        if (field == NULL)
            return -1;
        protobuf_c_boolean has;
        memcpy(&has, base + field->quantifier_offset, sizeof has);
        if (!has)
            continue;
        double value;
        if (field->type == PROTOBUF_C_TYPE_BOOL) {
            protobuf_c_boolean flag;
            memcpy(&flag, base + field->offset, sizeof flag);
            value = flag != 0;
        } else if (field->type == PROTOBUF_C_TYPE_UINT32) {
            uint32_t number;
            memcpy(&number, base + field->offset, sizeof number);
            value = number;
        } else {
            memcpy(&value, base + field->offset, sizeof value);
            if (!isfinite(value))
                return -1;
        }
        ts_report_extra_set(report, &ts_report_extras[i], value);
    }
    return 0;
}

static int write_sanitized(const ts_outcome *outcome, ts_codec_writer write,
                           ts_buf *topic, ts_buf *payload)
{
    const ts_profile *profile = outcome->profile;
    Tracesan__V1__SanitizedLocation location =
        TRACESAN__V1__SANITIZED_LOCATION__INIT;
    location.user_id = optional_string(outcome->user_id);
    location.has_timestamp_ms = 1;
    location.timestamp_ms = outcome->ts_ms;
    location.has_lat = 1;
    location.lat = outcome->report.lat;
    location.has_lon = 1;
    location.lon = outcome->report.lon;
    location.profile = profile->name;
    location.mechanism = (char *)profile->ops->name;
    location.has_eps_point = 1;
    location.eps_point = outcome->report.eps_point;
    location.has_eps_spent_window = 1;
    location.eps_spent_window = outcome->eps_spent_window;
    location.has_eps_remaining = 1;
    location.eps_remaining = outcome->eps_remaining;
    location.has_window_start_ms = 1;
    location.window_start_ms = outcome->window_start_ms;
    location.has_repeated = 1;
    location.repeated = outcome->repeated ? 1 : 0;
    if (ts_codec_put_extras(&outcome->report, &location) != 0)
        return -1;

    size_t topic_mark = topic->len;
    size_t payload_mark = payload->len;
    size_t name_len = strlen(profile->name);
    if (ts_buf_append(topic, TS_TOPIC_SANITIZED_PREFIX,
                      sizeof TS_TOPIC_SANITIZED_PREFIX - 1) != 0 ||
        ts_buf_append(topic, profile->name, name_len) != 0 ||
        write(&location.base, payload) != 0) {
        topic->len = topic_mark;
        payload->len = payload_mark;
        return -1;
    }
    return 0;
}

int ts_codec_write_outcome(const ts_outcome *outcome, ts_codec_writer write,
                           ts_buf *topic, ts_buf *payload)
{
    if (outcome->sanitized) {
        /* A sanitized outcome always carries its profile; without one there
         * is nothing trustworthy to publish, so refuse rather than guess. */
        if (outcome->profile == NULL || outcome->profile->name == NULL ||
            outcome->profile->ops == NULL)
            return -1;
        return write_sanitized(outcome, write, topic, payload);
    }
    const char *profile =
        outcome->profile != NULL ? outcome->profile->name : NULL;
    return ts_codec_write_rejection(outcome->reason, outcome->user_id,
                                    outcome->ts_ms, profile, outcome->detail,
                                    write, topic, payload);
}

int ts_codec_encode_outcome(const ts_outcome *outcome, ts_buf *topic,
                            ts_buf *payload)
{
    return ts_codec_write_outcome(outcome, ts_codec_pack, topic, payload);
}

int ts_codec_encode_rejection(ts_reason reason, const char *user_id,
                              int64_t ts_ms, const char *profile,
                              const char *detail, ts_buf *topic,
                              ts_buf *payload)
{
    return ts_codec_write_rejection(reason, user_id, ts_ms, profile, detail,
                                    ts_codec_pack, topic, payload);
}

int ts_codec_encode_density(const Tracesan__V1__DensityEstimate *estimate,
                            ts_buf *topic, ts_buf *payload)
{
    return ts_codec_write_density(estimate, ts_codec_pack, topic, payload);
}

int ts_codec_write_density(const Tracesan__V1__DensityEstimate *estimate,
                           ts_codec_writer write, ts_buf *topic,
                           ts_buf *payload)
{
    size_t topic_mark = topic->len;
    size_t payload_mark = payload->len;
    if (estimate->profile == NULL ||
        ts_buf_append(topic, TS_TOPIC_DENSITY_PREFIX,
                      sizeof TS_TOPIC_DENSITY_PREFIX - 1) != 0 ||
        ts_buf_append(topic, estimate->profile, strlen(estimate->profile)) !=
            0 ||
        write(&estimate->base, payload) != 0) {
        topic->len = topic_mark;
        payload->len = payload_mark;
        return -1;
    }
    return 0;
}

static size_t put_varint(uint8_t *out, uint64_t value)
{
    size_t n = 0;
    while (value >= 0x80) {
        out[n++] = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    out[n++] = (uint8_t)value;
    return n;
}

int ts_codec_encode_batch(const ts_input *inputs, size_t n, ts_buf *payload)
{
    /* Emitted field by field (tag, length, packed update) so that a batch of
     * any size needs no array of message structs: the bytes are exactly what
     * packing a LocationBatch would produce. */
    size_t mark = payload->len;
    for (size_t i = 0; i < n; i++) {
        const ts_input *input = &inputs[i];
        Tracesan__V1__LocationUpdate update =
            TRACESAN__V1__LOCATION_UPDATE__INIT;
        update.user_id = optional_string(input->user_id);
        update.has_timestamp_ms = 1;
        update.timestamp_ms = input->ts_ms;
        update.has_lat = 1;
        update.lat = input->lat;
        update.has_lon = 1;
        update.lon = input->lon;
        if (input->has_accuracy) {
            update.has_horizontal_accuracy_m = 1;
            update.horizontal_accuracy_m = input->accuracy_m;
        }
        update.profile = optional_string(input->profile);

        size_t size = protobuf_c_message_get_packed_size(&update.base);
        if (ts_buf_reserve(payload, 1 + VARINT_MAX_BYTES + size) != 0)
            goto fail;
        uint8_t *out = payload->data + payload->len;
        size_t head = 0;
        out[head++] = BATCH_UPDATES_TAG;
        head += put_varint(out + head, size);
        if (protobuf_c_message_pack(&update.base, out + head) != size)
            goto fail;
        payload->len += head + size;
    }
    return 0;
fail:
    payload->len = mark;
    return -1;
}
