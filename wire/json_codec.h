/* JSON for any protobuf-c message, driven by its descriptor: a new field
 * of the schema is carried with no code here.
 *
 * Writing: one compact object (no newline), the fields in tag order under
 * their .proto names, only those that are set (optional with has_, strings
 * and messages non-NULL, repeated with n > 0, proto3 scalars non-zero).
 * Enums are written by name (by number when the value has no name), bools
 * as true/false, 64-bit integers as bare JSON numbers: consumers that keep
 * numbers as doubles (JavaScript, jq) read them exactly up to 2^53, and
 * every int64 of the wire format is a millisecond timestamp, far below
 * that. Doubles are written with the fewest of 15, 16 or 17 significant
 * digits ("%.Ng") that read back bit for bit (17 always do), so 40.7283974
 * stays 40.7283974; floats likewise with 6 to 9.
 * bytes fields are standard base64 with padding.
 *
 * Reading is strict: one object and nothing after it but white space; a
 * name the message does not have, a field given twice, null, a value of
 * the wrong type or out of the field's range is an error. Integers must be
 * written as integers (no fraction or exponent); 64-bit integer fields
 * also take a decimal string ("1700000000000"), which is what proto3's
 * canonical JSON mapping (e.g. Python's json_format) writes. Enums take
 * their name or a number. Strings must be valid UTF-8 and may not contain
 * NUL (protobuf-c hands strings over NUL-terminated).
 *
 * Errors name the field and the byte offset, never the offending value:
 * the values of a LocationUpdate are raw coordinates, which must not reach
 * logs. An unknown field's name is repeated only when it is a short
 * identifier, so a coordinate used as a key is not shown either.
 *
 * Both directions assume the C numeric locale (nothing in tracesan calls
 * setlocale). */
#ifndef TRACESAN_WIRE_JSON_CODEC_H
#define TRACESAN_WIRE_JSON_CODEC_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

#include "wire/codec.h"

/* Objects and arrays nested deeper than this are refused. The wire format
 * nests three deep (OutcomeBatch.sanitized[i]); the bound only matters to
 * a recursive schema, whose depth the input would otherwise choose. */
#define TS_JSON_MAX_DEPTH 32
/* Longest accepted JSON text: far above any message of the wire format
 * (a DensityEstimate of the largest grid, 2048 cells, is about 50 KB),
 * low enough that one line cannot take the reader's memory. */
#define TS_JSON_MAX_BYTES ((size_t)16 << 20)

/* Appends `message` as one JSON object to `out`. 0, or -1 (out as it was)
 * when a double or float is NaN or infinite (JSON has no such numbers), a
 * string is not valid UTF-8 (it could not be written faithfully), a
 * repeated message field holds NULL, or memory runs out. Control
 * characters and DEL in strings are written as \u00XX. */
int ts_json_from_message(const ProtobufCMessage *message, ts_buf *out);

/* Appends the NUL-terminated `text` as a JSON string, escaped as the
 * codec escapes strings. 0, or -1 when it is not valid UTF-8 or memory
 * runs out (out may then hold part of it). */
int ts_json_put_string(ts_buf *out, const char *text);

/* Parses `json` (len bytes, NUL not needed) as a message of `descriptor`,
 * allocated from `allocator` (NULL: malloc); free it with
 * protobuf_c_message_free_unpacked(*out, allocator). 0 and *out set, or -1
 * with *out NULL, nothing left allocated, and a one-line explanation in
 * err (errlen bytes; may be NULL). */
int ts_json_to_message(const ProtobufCMessageDescriptor *descriptor,
                       const char *json, size_t len,
                       ProtobufCAllocator *allocator, ProtobufCMessage **out,
                       char *err, size_t errlen);

#endif
