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

/* Longest number token: 17 significant digits suffice for a double, but a
 * correct writer may print many more (e.g. an exact decimal expansion). */
#define NUMBER_MAX 128
/* Longest field path kept for error messages ("updates[12].user_id"). */
#define PATH_MAX_BYTES 160
/* Longest unknown field name an error repeats. */
#define ECHOED_NAME_MAX 48

typedef struct parser {
    const unsigned char *start;
    const unsigned char *p;
    const unsigned char *end;
    ProtobufCAllocator *allocator;   /* NULL: malloc, as protobuf-c's */
    ts_buf scratch;                  /* the last string read, decoded */
    unsigned depth;
    char path[PATH_MAX_BYTES];       /* field being read, for errors */
    size_t path_len;
    char *err;
    size_t errlen;
    int failed;
} parser;

static int fail(parser *ps, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Records the first error: "<field path>: <what> (byte N)". */
static int fail(parser *ps, const char *format, ...)
{
    if (ps->failed || ps->err == NULL || ps->errlen == 0) {
        ps->failed = 1;
        return -1;
    }
    ps->failed = 1;
    char what[160];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    size_t offset = (size_t)(ps->p - ps->start);
    if (ps->path_len > 0)
        snprintf(ps->err, ps->errlen, "%s: %s (byte %zu)", ps->path, what,
                 offset);
    else
        snprintf(ps->err, ps->errlen, "%s (byte %zu)", what, offset);
    return -1;
}

static void *allocate(parser *ps, size_t size)
{
    if (size == 0)
        size = 1;
    if (ps->allocator == NULL)
        return malloc(size);
    return ps->allocator->alloc(ps->allocator->allocator_data, size);
}

static void release(parser *ps, void *pointer)
{
    if (pointer == NULL)
        return;
    if (ps->allocator == NULL)
        free(pointer);
    else
        ps->allocator->free(ps->allocator->allocator_data, pointer);
}

/* Appends a path segment, truncating with "..." past the buffer; returns
 * the length to restore. */
static size_t path_push(parser *ps, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static size_t path_push(parser *ps, const char *format, ...)
{
    size_t mark = ps->path_len;
    size_t room = sizeof ps->path - ps->path_len;
    va_list args;
    va_start(args, format);
    int n = vsnprintf(ps->path + ps->path_len, room, format, args);
    va_end(args);
    if (n < 0 || (size_t)n >= room) {
        memcpy(ps->path + sizeof ps->path - 4, "...", 4);
        ps->path_len = sizeof ps->path - 1;
    } else {
        ps->path_len += (size_t)n;
    }
    return mark;
}

static void path_pop(parser *ps, size_t mark)
{
    ps->path_len = mark;
    ps->path[mark] = '\0';
}

static void skip_space(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                               *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int at_end(parser *ps)
{
    if (ps->p < ps->end)
        return 0;
    fail(ps, "unexpected end of input");
    return 1;
}

/* 1 when the input continues with `word` (not followed by more letters). */
static int next_is_word(const parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return 0;
    if (ps->p + n < ps->end) {
        unsigned char c = ps->p[n];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '_')
            return 0;
    }
    return 1;
}

static const char *json_type_name(unsigned char c)
{
    switch (c) {
    case '{':
        return "an object";
    case '[':
        return "an array";
    case '"':
        return "a string";
    case 't':
    case 'f':
        return "a boolean";
    case 'n':
        return "null";
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return "a number";
        return "something that is not JSON";
    }
}

/* Wrong-type error at the current value; NaN and infinities, which some
 * writers emit, get their own message. */
static int fail_type(parser *ps, const char *expected)
{
    if (next_is_word(ps, "NaN") || next_is_word(ps, "Infinity") ||
        next_is_word(ps, "-Infinity") || next_is_word(ps, "nan") ||
        next_is_word(ps, "inf") || next_is_word(ps, "-inf"))
        return fail(ps, "NaN and infinities are not JSON numbers");
    if (next_is_word(ps, "null"))
        return fail(ps, "null is not accepted; leave the field out");
    return fail(ps, "expected %s, found %s", expected,
                json_type_name(*ps->p));
}

static int scratch_put(parser *ps, const void *data, size_t len)
{
    if (ts_buf_append(&ps->scratch, data, len) != 0)
        return fail(ps, "out of memory");
    return 0;
}

static int put_code_point(parser *ps, uint32_t cp)
{
    unsigned char bytes[4];
    size_t n;
    if (cp < 0x80) {
        bytes[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        bytes[0] = (unsigned char)(0xc0 | cp >> 6);
        bytes[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        bytes[0] = (unsigned char)(0xe0 | cp >> 12);
        bytes[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        bytes[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        bytes[0] = (unsigned char)(0xf0 | cp >> 18);
        bytes[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        bytes[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        bytes[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return scratch_put(ps, bytes, n);
}

static int read_hex4(parser *ps, uint32_t *value)
{
    if (ps->end - ps->p < 4)
        return fail(ps, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = ps->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return fail(ps, "bad \\u escape");
    }
    ps->p += 4;
    *value = v;
    return 0;
}

/* Reads the string at ps->p (its opening quote) into ps->scratch, decoded
 * and NUL-terminated (the NUL not counted in scratch.len); *has_nul says
 * whether it contained \u0000. */
static int read_string(parser *ps, int *has_nul)
{
    ts_buf_reset(&ps->scratch);
    *has_nul = 0;
    ps->p++;
    for (;;) {
        if (ps->p == ps->end)
            return fail(ps, "unterminated string");
        unsigned char c = *ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20)
            return fail(ps, "control character in a string (it must be "
                            "escaped)");
        if (c != '\\') {
            size_t n = ts_json_utf8_length(ps->p, (size_t)(ps->end - ps->p));
            if (n == 0)
                return fail(ps, "string is not valid UTF-8");
            if (scratch_put(ps, ps->p, n) != 0)
                return -1;
            ps->p += n;
            continue;
        }
        ps->p++;
        if (ps->p == ps->end)
            return fail(ps, "unterminated string");
        unsigned char escape = *ps->p++;
        char plain;
        switch (escape) {
        case '"':
        case '\\':
        case '/':
            plain = (char)escape;
            break;
        case 'b':
            plain = '\b';
            break;
        case 'f':
            plain = '\f';
            break;
        case 'n':
            plain = '\n';
            break;
        case 'r':
            plain = '\r';
            break;
        case 't':
            plain = '\t';
            break;
        case 'u': {
            uint32_t cp;
            if (read_hex4(ps, &cp) != 0)
                return -1;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return fail(ps, "unpaired surrogate in a \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t low;
                if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
                    return fail(ps, "unpaired surrogate in a \\u escape");
                ps->p += 2;
                if (read_hex4(ps, &low) != 0)
                    return -1;
                if (low < 0xdc00 || low > 0xdfff)
                    return fail(ps, "unpaired surrogate in a \\u escape");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            }
            if (cp == 0)
                *has_nul = 1;
            if (put_code_point(ps, cp) != 0)
                return -1;
            continue;
        }
        default:
            ps->p--;
            return fail(ps, "invalid escape in a string");
        }
        if (scratch_put(ps, &plain, 1) != 0)
            return -1;
    }
    if (scratch_put(ps, "", 1) != 0)
        return -1;
    ps->scratch.len--;
    return 0;
}

/* What a name stands for in a descriptor: an enum's value, a message's
 * field; NULL when nothing. */
typedef const void *(*name_lookup)(const void *descriptor, const char *name);

static const void *enum_value_named(const void *descriptor, const char *name)
{
    return protobuf_c_enum_descriptor_get_value_by_name(descriptor, name);
}

static const void *field_named(const void *descriptor, const char *name)
{
    return protobuf_c_message_descriptor_get_field_by_name(descriptor, name);
}

/* A quoted name, left in the scratch buffer, and what it names: 0 with
 * *found (NULL for no such name, or a string holding a NUL, which no name
 * does), or -1. */
static int read_name(parser *ps, name_lookup lookup, const void *descriptor,
                     const void **found)
{
    int has_nul;
    if (read_string(ps, &has_nul) != 0)
        return -1;
    *found = has_nul ? NULL
                     : lookup(descriptor, (const char *)ps->scratch.data);
    return 0;
}

/* Length of the JSON number at s (RFC 8259 grammar), 0 when there is none;
 * *integral: no fraction and no exponent. */
static size_t number_length(const unsigned char *s, const unsigned char *end,
                            int *integral)
{
    const unsigned char *q = s;
    *integral = 1;
    if (q < end && *q == '-')
        q++;
    if (q == end || *q < '0' || *q > '9')
        return 0;
    if (*q == '0')
        q++;
    else
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    if (q < end && *q == '.') {
        *integral = 0;
        q++;
        if (q == end || *q < '0' || *q > '9')
            return 0;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        *integral = 0;
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        if (q == end || *q < '0' || *q > '9')
            return 0;
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    }
    return (size_t)(q - s);
}

/* Copies the number at ps->p into token (NUL-terminated) and moves past
 * it. Numbers followed directly by letters ("1x", "1.5e") are refused
 * here rather than as "trailing data" later. */
static int read_number(parser *ps, const char *expected, char *token,
                       int *integral)
{
    size_t n = number_length(ps->p, ps->end, integral);
    if (n == 0 && (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) &&
        !next_is_word(ps, "-Infinity") && !next_is_word(ps, "-inf"))
        return fail(ps, "malformed number");
    if (n == 0)
        return fail_type(ps, expected);
    const unsigned char *after = ps->p + n;
    if (after < ps->end && ((*after >= 'a' && *after <= 'z') ||
                            (*after >= 'A' && *after <= 'Z') ||
                            *after == '.' || (*after >= '0' && *after <= '9')))
        return fail(ps, "malformed number");
    if (n >= NUMBER_MAX)
        return fail(ps, "number has more than %d characters", NUMBER_MAX - 1);
    memcpy(token, ps->p, n);
    token[n] = '\0';
    ps->p = after;
    return 0;
}

/* An integer of `type` from the decimal token (already known to follow
 * the integer grammar) into dest. */
static int store_integer(parser *ps, ProtobufCType type, const char *token,
                         void *dest)
{
    char *stop;
    errno = 0;
    if (ts_json_is_unsigned_integer(type)) {
        if (token[0] == '-')
            return fail(ps, "negative number for an unsigned field");
        unsigned long long value = strtoull(token, &stop, 10);
        if (errno == ERANGE || *stop != '\0')
            return fail(ps, "number out of range for the field");
        if (ts_json_is_64bit_integer(type)) {
            *(uint64_t *)dest = (uint64_t)value;
        } else {
            if (value > UINT32_MAX)
                return fail(ps, "number out of range for the field");
            *(uint32_t *)dest = (uint32_t)value;
        }
        return 0;
    }
    long long value = strtoll(token, &stop, 10);
    if (errno == ERANGE || *stop != '\0')
        return fail(ps, "number out of range for the field");
    if (ts_json_is_64bit_integer(type)) {
        *(int64_t *)dest = (int64_t)value;
    } else {
        if (value < INT32_MIN || value > INT32_MAX)
            return fail(ps, "number out of range for the field");
        *(int32_t *)dest = (int32_t)value;
    }
    return 0;
}

static int read_integer(parser *ps, ProtobufCType type, void *dest)
{
    char token[NUMBER_MAX];
    int integral;
    if (ps->p < ps->end && *ps->p == '"' && ts_json_is_64bit_integer(type)) {
        /* The canonical proto3 JSON form of a 64-bit integer. */
        const unsigned char *quote = ps->p;
        int has_nul;
        if (read_string(ps, &has_nul) != 0)
            return -1;
        const unsigned char *s = ps->scratch.data;
        size_t len = ps->scratch.len;
        if (len == 0 || number_length(s, s + len, &integral) != len ||
            !integral) {
            ps->p = quote;
            return fail(ps, "string is not a decimal integer");
        }
        if (len >= NUMBER_MAX) {
            ps->p = quote;
            return fail(ps, "number has more than %d characters",
                        NUMBER_MAX - 1);
        }
        memcpy(token, s, len);
        token[len] = '\0';
        return store_integer(ps, type, token, dest);
    }
    const unsigned char *start = ps->p;
    if (read_number(ps, "an integer", token, &integral) != 0)
        return -1;
    if (!integral) {
        ps->p = start;
        return fail(ps, "expected an integer, found a fraction or exponent");
    }
    ps->p = start;
    if (store_integer(ps, type, token, dest) != 0)
        return -1;
    ps->p += strlen(token);
    return 0;
}

static int read_floating(parser *ps, ProtobufCType type, void *dest)
{
    char token[NUMBER_MAX];
    int integral;
    const unsigned char *start = ps->p;
    if (read_number(ps, "a number", token, &integral) != 0)
        return -1;
    double value = strtod(token, NULL);
    if (!isfinite(value) ||
        (type == PROTOBUF_C_TYPE_FLOAT && fabs(value) > FLT_MAX)) {
        ps->p = start;
        return fail(ps, "number out of range for the field");
    }
    if (type == PROTOBUF_C_TYPE_FLOAT)
        *(float *)dest = (float)value;
    else
        *(double *)dest = value;
    return 0;
}

static int read_bool(parser *ps, void *dest)
{
    if (next_is_word(ps, "true")) {
        ps->p += 4;
        *(protobuf_c_boolean *)dest = 1;
        return 0;
    }
    if (next_is_word(ps, "false")) {
        ps->p += 5;
        *(protobuf_c_boolean *)dest = 0;
        return 0;
    }
    return fail_type(ps, "true or false");
}

static int read_enum(parser *ps, const ProtobufCFieldDescriptor *field,
                     void *dest)
{
    const ProtobufCEnumDescriptor *descriptor = field->descriptor;
    if (*ps->p == '"') {
        const unsigned char *quote = ps->p;
        const void *found;
        if (read_name(ps, enum_value_named, descriptor, &found) != 0)
            return -1;
        const ProtobufCEnumValue *value = found;
        if (value == NULL) {
            ps->p = quote;
            return fail(ps, "not a name of enum %s", descriptor->name);
        }
        *(int *)dest = value->value;
        return 0;
    }
    /* Numbers too, so a value this schema does not name (written by
     * number) reads back. */
    if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) {
        int32_t number;
        if (read_integer(ps, PROTOBUF_C_TYPE_INT32, &number) != 0)
            return -1;
        *(int *)dest = number;
        return 0;
    }
    return fail_type(ps, "an enum name");
}

static int base64_value(unsigned char c)
{
    const char *at = c != 0 ? strchr(TS_JSON_BASE64_ALPHABET, c) : NULL;
    return at != NULL ? (int)(at - TS_JSON_BASE64_ALPHABET) : -1;
}

static int read_bytes(parser *ps, void *dest)
{
    const unsigned char *quote = ps->p;
    int has_nul;
    if (*ps->p != '"')
        return fail_type(ps, "a base64 string");
    if (read_string(ps, &has_nul) != 0)
        return -1;
    const unsigned char *s = ps->scratch.data;
    size_t len = ps->scratch.len;
    if (len % 4 != 0) {
        ps->p = quote;
        return fail(ps, "invalid base64");
    }
    uint8_t *data = allocate(ps, len / 4 * 3);
    if (data == NULL)
        return fail(ps, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == len && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad > 0 || (v[k] = base64_value(s[i + k])) < 0) {
                release(ps, data);
                ps->p = quote;
                return fail(ps, "invalid base64");
            }
        }
        uint32_t group = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                         (uint32_t)v[2] << 6 | (uint32_t)v[3];
        data[n++] = (uint8_t)(group >> 16);
        if (pad < 2)
            data[n++] = (uint8_t)(group >> 8);
        if (pad < 1)
            data[n++] = (uint8_t)group;
    }
    ProtobufCBinaryData *bytes = dest;
    bytes->data = data;
    bytes->len = n;
    return 0;
}

static int read_message(parser *ps,
                        const ProtobufCMessageDescriptor *descriptor,
                        ProtobufCMessage **out);

/* One value of `field` into dest (an element, for a repeated field).
 * On failure nothing is allocated and dest is untouched or garbage. */
static int read_value(parser *ps, const ProtobufCFieldDescriptor *field,
                      void *dest)
{
    if (at_end(ps))
        return -1;
    if (ts_json_is_integer(field->type))
        return read_integer(ps, field->type, dest);
    switch (field->type) {
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
        return read_floating(ps, field->type, dest);
    case PROTOBUF_C_TYPE_BOOL:
        return read_bool(ps, dest);
    case PROTOBUF_C_TYPE_ENUM:
        return read_enum(ps, field, dest);
    case PROTOBUF_C_TYPE_STRING: {
        if (*ps->p != '"')
            return fail_type(ps, "a string");
        const unsigned char *quote = ps->p;
        int has_nul;
        if (read_string(ps, &has_nul) != 0)
            return -1;
        if (has_nul) {
            ps->p = quote;
            return fail(ps, "string contains \\u0000");
        }
        char *copy = allocate(ps, ps->scratch.len + 1);
        if (copy == NULL)
            return fail(ps, "out of memory");
        memcpy(copy, ps->scratch.data, ps->scratch.len + 1);
        *(char **)dest = copy;
        return 0;
    }
    case PROTOBUF_C_TYPE_BYTES:
        return read_bytes(ps, dest);
    case PROTOBUF_C_TYPE_MESSAGE:
        return read_message(ps, field->descriptor, dest);
    default:
        return fail(ps, "field type not supported");
    }
}

static int read_repeated(parser *ps, ProtobufCMessage *message,
                         const ProtobufCFieldDescriptor *field)
{
    char *base = (char *)message;
    size_t *count = (size_t *)(base + field->quantifier_offset);
    char **values = (char **)(base + field->offset);
    size_t size = ts_json_element_size(field->type);
    size_t capacity = 0;
    if (*ps->p != '[')
        return fail_type(ps, "an array");
    if (++ps->depth > TS_JSON_MAX_DEPTH)
        return fail(ps, "nested deeper than %d levels", TS_JSON_MAX_DEPTH);
    ps->p++;
    skip_space(ps);
    if (at_end(ps))
        return -1;
    if (*ps->p == ']') {
        ps->p++;
        ps->depth--;
        return 0;
    }
    for (;;) {
        if (*count == capacity) {
            /* The message always owns a consistent array (count valid
             * elements), so an error anywhere frees it whole. */
            size_t grown = capacity != 0 ? capacity * 2 : 8;
            if (grown > SIZE_MAX / size)
                return fail(ps, "out of memory");
            char *larger = allocate(ps, grown * size);
            if (larger == NULL)
                return fail(ps, "out of memory");
            if (*count != 0)
                memcpy(larger, *values, *count * size);
            release(ps, *values);
            *values = larger;
            capacity = grown;
        }
        size_t mark = path_push(ps, "[%zu]", *count);
        skip_space(ps);
        if (read_value(ps, field, *values + *count * size) != 0)
            return -1;
        (*count)++;
        path_pop(ps, mark);
        skip_space(ps);
        if (at_end(ps))
            return -1;
        if (*ps->p == ']') {
            ps->p++;
            break;
        }
        if (*ps->p != ',')
            return fail(ps, "expected ',' or ']' after an array element");
        ps->p++;
    }
    ps->depth--;
    return 0;
}

static int read_field(parser *ps, ProtobufCMessage *message,
                      const ProtobufCFieldDescriptor *field)
{
    if (field->label == PROTOBUF_C_LABEL_REPEATED)
        return read_repeated(ps, message, field);
    char *base = (char *)message;
    if (read_value(ps, field, base + field->offset) != 0)
        return -1;
    if (field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)(base + field->quantifier_offset) = field->id;
    else if (field->label == PROTOBUF_C_LABEL_OPTIONAL &&
             field->type != PROTOBUF_C_TYPE_STRING &&
             field->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)(base + field->quantifier_offset) = 1;
    return 0;
}

/* Whether a field name may be repeated in an error: only identifiers
 * (what a misspelt field name looks like). Anything else could be data
 * put in the wrong place, a coordinate for instance, and is not shown. */
static int echoable_name(const ts_buf *name)
{
    if (name->len == 0 || name->len > ECHOED_NAME_MAX)
        return 0;
    for (size_t i = 0; i < name->len; i++) {
        unsigned char c = name->data[i];
        int letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     c == '_';
        if (!letter && !(i > 0 && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

static int read_members(parser *ps,
                        const ProtobufCMessageDescriptor *descriptor,
                        ProtobufCMessage *message, unsigned char *seen)
{
    ps->p++;
    skip_space(ps);
    if (at_end(ps))
        return -1;
    if (*ps->p == '}') {
        ps->p++;
        return 0;
    }
    for (;;) {
        skip_space(ps);
        if (at_end(ps))
            return -1;
        if (*ps->p != '"')
            return fail(ps, "expected a field name");
        const unsigned char *key = ps->p;
        const void *found;
        if (read_name(ps, field_named, descriptor, &found) != 0)
            return -1;
        const ProtobufCFieldDescriptor *field = found;
        if (field == NULL) {
            ps->p = key;
            if (!echoable_name(&ps->scratch))
                return fail(ps, "unknown field (its name, not an "
                                "identifier, is not shown) in %s",
                            descriptor->name);
            return fail(ps, "unknown field '%s' in %s",
                        (const char *)ps->scratch.data, descriptor->name);
        }
        size_t index = (size_t)(field - descriptor->fields);
        size_t mark = path_push(ps, "%s%s", ps->path_len > 0 ? "." : "",
                                field->name);
        if (seen[index]) {
            ps->p = key;
            return fail(ps, "field given twice");
        }
        seen[index] = 1;
        if ((field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)((const char *)message +
                                field->quantifier_offset) != 0) {
            ps->p = key;
            return fail(ps, "another field of its oneof is already set");
        }
        skip_space(ps);
        if (at_end(ps))
            return -1;
        if (*ps->p != ':')
            return fail(ps, "expected ':' after the field name");
        ps->p++;
        skip_space(ps);
        if (at_end(ps) || read_field(ps, message, field) != 0)
            return -1;
        path_pop(ps, mark);
        skip_space(ps);
        if (at_end(ps))
            return -1;
        if (*ps->p == '}') {
            ps->p++;
            return 0;
        }
        if (*ps->p != ',')
            return fail(ps, "expected ',' or '}' after a field");
        ps->p++;
    }
}

static int read_message(parser *ps,
                        const ProtobufCMessageDescriptor *descriptor,
                        ProtobufCMessage **out)
{
    if (at_end(ps))
        return -1;
    if (*ps->p != '{')
        return fail_type(ps, "an object");
    if (++ps->depth > TS_JSON_MAX_DEPTH)
        return fail(ps, "nested deeper than %d levels", TS_JSON_MAX_DEPTH);
    ProtobufCMessage *message = allocate(ps, descriptor->sizeof_message);
    unsigned char *seen = calloc(descriptor->n_fields + 1, 1);
    if (message == NULL || seen == NULL) {
        release(ps, message);
        free(seen);
        return fail(ps, "out of memory");
    }
    protobuf_c_message_init(descriptor, message);
    int rc = read_members(ps, descriptor, message, seen);
    for (unsigned i = 0; rc == 0 && i < descriptor->n_fields; i++)
        if (descriptor->fields[i].label == PROTOBUF_C_LABEL_REQUIRED &&
            !seen[i])
            rc = fail(ps, "required field '%s' is missing",
                      descriptor->fields[i].name);
    free(seen);
    if (rc != 0) {
        protobuf_c_message_free_unpacked(message, ps->allocator);
        return -1;
    }
    ps->depth--;
    *out = message;
    return 0;
}

int ts_json_to_message(const ProtobufCMessageDescriptor *descriptor,
                       const char *json, size_t len,
                       ProtobufCAllocator *allocator, ProtobufCMessage **out,
                       char *err, size_t errlen)
{
    parser ps = {
        .start = (const unsigned char *)json,
        .p = (const unsigned char *)json,
        .end = (const unsigned char *)json + len,
        .allocator = allocator,
        .err = err,
        .errlen = errlen,
    };
    *out = NULL;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (json == NULL) {
        ps.start = ps.p = ps.end = (const unsigned char *)"";
        return fail(&ps, "no input");
    }
    if (len > TS_JSON_MAX_BYTES)
        return fail(&ps, "JSON text longer than %zu bytes",
                    TS_JSON_MAX_BYTES);
    ProtobufCMessage *message = NULL;
    skip_space(&ps);
    int rc = read_message(&ps, descriptor, &message);
    if (rc == 0) {
        skip_space(&ps);
        if (ps.p != ps.end) {
            rc = fail(&ps, "unexpected data after the object");
            protobuf_c_message_free_unpacked(message, allocator);
            message = NULL;
        }
    }
    ts_buf_free(&ps.scratch);
    if (rc != 0)
        return -1;
    *out = message;
    return 0;
}
