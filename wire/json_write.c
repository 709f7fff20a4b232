#include "wire/json_codec.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/json_schema.h"

static int put(ts_buf *out, const void *data, size_t len)
{
    return ts_buf_append(out, data, len);
}

static int put_string(ts_buf *out, const unsigned char *s, size_t len)
{
    if (put(out, "\"", 1) != 0)
        return -1;
    size_t i = 0;
    while (i < len) {
        size_t run = i;
        while (run < len && s[run] >= 0x20 && s[run] < 0x7f &&
               s[run] != '"' && s[run] != '\\')
            run++;
        if (run > i) {
            if (put(out, s + i, run - i) != 0)
                return -1;
            i = run;
            continue;
        }
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            const char escaped[2] = { '\\', (char)c };
            if (put(out, escaped, 2) != 0)
                return -1;
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            /* Control characters escaped, so a JSON line stays one line
             * and nothing reaches a terminal raw. */
            char escaped[8];
            snprintf(escaped, sizeof escaped, "\\u%04x", c);
            if (put(out, escaped, 6) != 0)
                return -1;
            i++;
        } else {
            size_t n = ts_json_utf8_length(s + i, len - i);
            if (n == 0 || put(out, s + i, n) != 0)
                return -1;
            i += n;
        }
    }
    return put(out, "\"", 1);
}

int ts_json_put_string(ts_buf *out, const char *text)
{
    return put_string(out, (const unsigned char *)text, strlen(text));
}

static int put_base64(ts_buf *out, const ProtobufCBinaryData *bytes)
{
    if (put(out, "\"", 1) != 0)
        return -1;
    for (size_t i = 0; i < bytes->len; i += 3) {
        uint32_t group = (uint32_t)bytes->data[i] << 16;
        size_t have = bytes->len - i < 3 ? bytes->len - i : 3;
        if (have > 1)
            group |= (uint32_t)bytes->data[i + 1] << 8;
        if (have > 2)
            group |= bytes->data[i + 2];
        char quad[4] = {
            TS_JSON_BASE64_ALPHABET[group >> 18 & 63],
            TS_JSON_BASE64_ALPHABET[group >> 12 & 63],
            have > 1 ? TS_JSON_BASE64_ALPHABET[group >> 6 & 63] : '=',
            have > 2 ? TS_JSON_BASE64_ALPHABET[group & 63] : '=',
        };
        if (put(out, quad, 4) != 0)
            return -1;
    }
    return put(out, "\"", 1);
}

static int put_message(ts_buf *out, const ProtobufCMessage *message,
                       unsigned depth);

/* The shortest of "%.15g", "%.16g" and "%.17g" that reads back as the
 * same double: exact like "%.17g" alone, without its noise digits
 * (40.7283974, not 40.728397399999999). */
static int format_double(double value, char *text, size_t size)
{
    int n = 0;
    for (int digits = 15; digits <= 17; digits++) {
        n = snprintf(text, size, "%.*g", digits, value);
        if (n < 0 || (size_t)n >= size || strtod(text, NULL) == value)
            break;
    }
    return n;
}

/* As format_double for floats: 6 to 9 significant digits. */
static int format_float(float value, char *text, size_t size)
{
    int n = 0;
    for (int digits = 6; digits <= 9; digits++) {
        n = snprintf(text, size, "%.*g", digits, (double)value);
        if (n < 0 || (size_t)n >= size || strtof(text, NULL) == value)
            break;
    }
    return n;
}

/* One value of `field` stored at `member` (an element, for a repeated
 * field). */
static int put_value(ts_buf *out, const ProtobufCFieldDescriptor *field,
                     const void *member, unsigned depth)
{
    char number[64];
    int n;
    if (ts_json_is_integer(field->type)) {
        /* Every integer type as the widest of its signedness. */
        int wide = ts_json_is_64bit_integer(field->type);
        if (ts_json_is_unsigned_integer(field->type))
            n = snprintf(number, sizeof number, "%" PRIu64,
                         wide ? *(const uint64_t *)member
                              : (uint64_t)*(const uint32_t *)member);
        else
            n = snprintf(number, sizeof number, "%" PRId64,
                         wide ? *(const int64_t *)member
                              : (int64_t)*(const int32_t *)member);
        if (n < 0 || (size_t)n >= sizeof number)
            return -1;
        return put(out, number, (size_t)n);
    }
    switch (field->type) {
    case PROTOBUF_C_TYPE_FLOAT: {
        float value = *(const float *)member;
        if (!isfinite(value))
            return -1;
        n = format_float(value, number, sizeof number);
        break;
    }
    case PROTOBUF_C_TYPE_DOUBLE: {
        double value = *(const double *)member;
        if (!isfinite(value))
            return -1;
        n = format_double(value, number, sizeof number);
        break;
    }
    case PROTOBUF_C_TYPE_BOOL:
        return *(const protobuf_c_boolean *)member
                   ? put(out, "true", 4)
                   : put(out, "false", 5);
    case PROTOBUF_C_TYPE_ENUM: {
        int value = *(const int *)member;
        const ProtobufCEnumValue *named =
            protobuf_c_enum_descriptor_get_value(field->descriptor, value);
        if (named != NULL)
            return put_string(out, (const unsigned char *)named->name,
                              strlen(named->name));
        n = snprintf(number, sizeof number, "%d", value);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)member;
        if (s == NULL)
            s = "";
        return put_string(out, (const unsigned char *)s, strlen(s));
    }
    case PROTOBUF_C_TYPE_BYTES:
        return put_base64(out, member);
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)member;
        if (sub == NULL)
            return -1;
        return put_message(out, sub, depth + 1);
    }
    default:
        return -1;
    }
    if (n < 0 || (size_t)n >= sizeof number)
        return -1;
    return put(out, number, (size_t)n);
}

static int is_zero(const void *member, size_t size)
{
    const unsigned char *bytes = member;
    for (size_t i = 0; i < size; i++)
        if (bytes[i] != 0)
            return 0;
    return 1;
}

/* Whether `field` is set in `message`; *count is its number of values. */
static int field_is_set(const ProtobufCMessage *message,
                        const ProtobufCFieldDescriptor *field, size_t *count)
{
    const char *base = (const char *)message;
    const void *member = base + field->offset;
    *count = 1;
    if (field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)(base + field->quantifier_offset) ==
               field->id;
    switch (field->label) {
    case PROTOBUF_C_LABEL_REQUIRED:
        return 1;
    case PROTOBUF_C_LABEL_REPEATED:
        *count = *(const size_t *)(base + field->quantifier_offset);
        return *count > 0;
    case PROTOBUF_C_LABEL_OPTIONAL:
        if (field->type == PROTOBUF_C_TYPE_STRING ||
            field->type == PROTOBUF_C_TYPE_MESSAGE) {
            const void *p = *(const void *const *)member;
            return p != NULL && p != field->default_value;
        }
        return *(const protobuf_c_boolean *)(base + field->quantifier_offset);
    case PROTOBUF_C_LABEL_NONE:
        /* proto3 without presence: set means different from zero. */
        if (field->type == PROTOBUF_C_TYPE_STRING) {
            const char *s = *(const char *const *)member;
            return s != NULL && s[0] != '\0';
        }
        if (field->type == PROTOBUF_C_TYPE_MESSAGE)
            return *(const void *const *)member != NULL;
        if (field->type == PROTOBUF_C_TYPE_BYTES)
            return ((const ProtobufCBinaryData *)member)->len > 0;
        return !is_zero(member, ts_json_element_size(field->type));
    }
    return 0;
}

static int put_message(ts_buf *out, const ProtobufCMessage *message,
                       unsigned depth)
{
    if (depth >= TS_JSON_MAX_DEPTH)
        return -1;
    const ProtobufCMessageDescriptor *descriptor = message->descriptor;
    if (put(out, "{", 1) != 0)
        return -1;
    int first = 1;
    for (unsigned i = 0; i < descriptor->n_fields; i++) {
        const ProtobufCFieldDescriptor *field = &descriptor->fields[i];
        size_t count;
        if (!field_is_set(message, field, &count))
            continue;
        if ((!first && put(out, ",", 1) != 0) ||
            put_string(out, (const unsigned char *)field->name,
                       strlen(field->name)) != 0 ||
            put(out, ":", 1) != 0)
            return -1;
        first = 0;
        const char *member = (const char *)message + field->offset;
        if (field->label != PROTOBUF_C_LABEL_REPEATED) {
            if (put_value(out, field, member, depth) != 0)
                return -1;
            continue;
        }
        const char *values = *(const char *const *)member;
        size_t size = ts_json_element_size(field->type);
        if (values == NULL || put(out, "[", 1) != 0)
            return -1;
        for (size_t k = 0; k < count; k++)
            if ((k > 0 && put(out, ",", 1) != 0) ||
                put_value(out, field, values + k * size, depth + 1) != 0)
                return -1;
        if (put(out, "]", 1) != 0)
            return -1;
    }
    return put(out, "}", 1);
}

int ts_json_from_message(const ProtobufCMessage *message, ts_buf *out)
{
    size_t mark = out->len;
    if (put_message(out, message, 0) != 0) {
        out->len = mark;
        return -1;
    }
    return 0;
}

