/* What the JSON codec's writer and reader (wire/json_write.c,
 * wire/json_read.c) share about protobuf-c's schema and about text: the
 * size of a repeated field's element, the kinds of integers, well-formed
 * UTF-8 and the base64 alphabet. */
#ifndef TRACESAN_WIRE_JSON_SCHEMA_H
#define TRACESAN_WIRE_JSON_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* Standard base64 (RFC 4648), for bytes fields. */
extern const char TS_JSON_BASE64_ALPHABET[];

/* Length of the well-formed UTF-8 sequence at s (len > 0 bytes left), 0
 * when there is none: overlong forms, surrogates and code points past
 * U+10FFFF are not well-formed. */
size_t ts_json_utf8_length(const unsigned char *s, size_t len);
/* Bytes one element of a repeated field of this type takes. */
size_t ts_json_element_size(ProtobufCType type);
int ts_json_is_64bit_integer(ProtobufCType type);
int ts_json_is_unsigned_integer(ProtobufCType type);
int ts_json_is_integer(ProtobufCType type);

#endif
