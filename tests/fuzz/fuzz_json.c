/* libFuzzer target: untrusted JSON lines (tracesan replay --format jsonl).
 *
 * The bytes are read as each of the nested wire messages. Beyond memory
 * and UB errors it checks the codec's contract: whatever is accepted can
 * be written back (it holds no NaN and no invalid UTF-8), the text written
 * is accepted again and written the same, and the two messages pack to
 * the same protobuf bytes; a refusal always comes with a message. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/codec.h"
#include "wire/json_codec.h"

#define TS_FUZZ_TARGET "fuzz_json"
#include "tests/fuzz/fuzz_support.h"

static void pack(const ProtobufCMessage *message, ts_buf *out)
{
    size_t packed_size = protobuf_c_message_get_packed_size(message);
    ts_buf_reset(out);
    if (ts_buf_reserve(out, packed_size) != 0)
        ts_fuzz_die("out of memory");
    out->len = protobuf_c_message_pack(message, out->data);
}

static void round_trip(const ProtobufCMessageDescriptor *descriptor,
                       const uint8_t *data, size_t size)
{
    ProtobufCMessage *first = NULL;
    char err[256];
    if (ts_json_to_message(descriptor, (const char *)data, size, NULL, &first,
                           err, sizeof err) != 0) {
        if (first != NULL || err[0] == '\0')
            ts_fuzz_die("a refusal without a message, or with a result");
        return;
    }
    ts_buf text = { 0 }, again = { 0 }, packed = { 0 }, repacked = { 0 };
    if (ts_json_from_message(first, &text) != 0)
        ts_fuzz_die("an accepted message cannot be written back");
    ProtobufCMessage *second = NULL;
    if (ts_json_to_message(descriptor, (const char *)text.data, text.len,
                           NULL, &second, err, sizeof err) != 0)
        ts_fuzz_die("the codec refuses its own output");
    if (ts_json_from_message(second, &again) != 0 || again.len != text.len ||
        memcmp(again.data, text.data, text.len) != 0)
        ts_fuzz_die("writing is not stable across a round trip");
    pack(first, &packed);
    pack(second, &repacked);
    if (packed.len != repacked.len ||
        (packed.len > 0 &&
         memcmp(packed.data, repacked.data, packed.len) != 0))
        ts_fuzz_die("the round trip changed the message");
    protobuf_c_message_free_unpacked(first, NULL);
    protobuf_c_message_free_unpacked(second, NULL);
    ts_buf_free(&text);
    ts_buf_free(&again);
    ts_buf_free(&packed);
    ts_buf_free(&repacked);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    round_trip(&tracesan__v1__location_batch__descriptor, data, size);
    round_trip(&tracesan__v1__outcome_batch__descriptor, data, size);
    round_trip(&tracesan__v1__density_estimate__descriptor, data, size);
    return 0;
}
