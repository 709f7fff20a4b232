#include "wire/json_schema.h"

const char TS_JSON_BASE64_ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Length of the well-formed UTF-8 sequence at s (len > 0 bytes left), 0
 * when there is none: overlong forms, surrogates and code points past
 * U+10FFFF are not well-formed. */
size_t ts_json_utf8_length(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
        min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3;
        cp = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (uint32_t)(s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

size_t ts_json_element_size(ProtobufCType type)
{
    switch (type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return sizeof(int32_t);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return sizeof(int64_t);
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

int ts_json_is_64bit_integer(ProtobufCType type)
{
    return type == PROTOBUF_C_TYPE_INT64 || type == PROTOBUF_C_TYPE_SINT64 ||
           type == PROTOBUF_C_TYPE_SFIXED64 ||
           type == PROTOBUF_C_TYPE_UINT64 || type == PROTOBUF_C_TYPE_FIXED64;
}

int ts_json_is_unsigned_integer(ProtobufCType type)
{
    return type == PROTOBUF_C_TYPE_UINT32 || type == PROTOBUF_C_TYPE_FIXED32 ||
           type == PROTOBUF_C_TYPE_UINT64 || type == PROTOBUF_C_TYPE_FIXED64;
}

int ts_json_is_integer(ProtobufCType type)
{
    return type <= PROTOBUF_C_TYPE_FIXED64;
}

