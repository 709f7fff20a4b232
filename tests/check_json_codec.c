/* JSON codec: every message of the wire format survives JSON and back bit
 * for bit, the text is what the wire-format page promises, and hostile
 * text is refused with a message that names the problem but never repeats
 * a value. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/codec.h"
#include "wire/json_codec.h"
#include "tests/support/check_run.h"

#define ERR_MAX 256

static const ProtobufCMessageDescriptor *const WIRE_MESSAGES[] = {
    &tracesan__v1__location_update__descriptor,
    &tracesan__v1__location_batch__descriptor,
    &tracesan__v1__sanitized_location__descriptor,
    &tracesan__v1__rejection__descriptor,
    &tracesan__v1__outcome_batch__descriptor,
    &tracesan__v1__density_estimate__descriptor,
};

/* ---------------------------------------------------------------- helpers */

static const char *const AWKWARD_STRINGS[] = {
    "plain",
    "quote \" backslash \\ slash /",
    "control \x01\x1f\x7f\n\t\r",
    "utf-8 \xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
    "",
};
#define N_AWKWARD_STRINGS (sizeof AWKWARD_STRINGS / sizeof AWKWARD_STRINGS[0])

/* Doubles whose shortest decimal forms are long, tiny, huge or signed. */
static const double AWKWARD_DOUBLES[] = {
    0.1, -1.0 / 3.0, 5e-324, DBL_MAX, -0.0, 40.645919692, 1e21,
    -73.77793550490001, 2.2250738585072014e-308,
};
#define N_AWKWARD_DOUBLES (sizeof AWKWARD_DOUBLES / sizeof AWKWARD_DOUBLES[0])

static ProtobufCMessage *fill_message(const ProtobufCMessageDescriptor *d,
                                      unsigned seed);

/* A value for every type, chosen from seed, at its extremes where it has
 * any. Memory from malloc, freed by protobuf_c_message_free_unpacked. */
static void fill_value(const ProtobufCFieldDescriptor *field, void *dest,
                       unsigned seed)
{
    switch (field->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        *(int32_t *)dest = seed % 2 ? INT32_MIN : INT32_MAX - (int32_t)seed;
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        *(uint32_t *)dest = UINT32_MAX - seed;
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        *(int64_t *)dest = seed % 2 ? INT64_MIN + seed : INT64_MAX - seed;
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        *(uint64_t *)dest = UINT64_MAX - seed;
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        *(float *)dest = 0.1f * (float)(seed + 1);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        *(double *)dest = AWKWARD_DOUBLES[seed % N_AWKWARD_DOUBLES];
        break;
    case PROTOBUF_C_TYPE_BOOL:
        *(protobuf_c_boolean *)dest = (seed % 2) == 0;
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *e = field->descriptor;
        *(int *)dest = e->values[1 + seed % (e->n_values - 1)].value;
        break;
    }
    case PROTOBUF_C_TYPE_STRING:
        *(char **)dest = strdup(AWKWARD_STRINGS[seed % N_AWKWARD_STRINGS]);
        ck_assert_ptr_nonnull(*(char **)dest);
        break;
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *bytes = dest;
        bytes->len = seed % 5 + 1;
        bytes->data = malloc(bytes->len);
        for (size_t i = 0; i < bytes->len; i++)
            bytes->data[i] = (uint8_t)(0xff - i * 37 - seed);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        *(ProtobufCMessage **)dest = fill_message(field->descriptor, seed + 1);
        break;
    }
}

static size_t value_size(ProtobufCType type)
{
    switch (type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default:
        return 4;
    }
}

/* Every field of `d` set, repeated ones three times. */
static ProtobufCMessage *fill_message(const ProtobufCMessageDescriptor *d,
                                      unsigned seed)
{
    ProtobufCMessage *message = calloc(1, d->sizeof_message);
    ck_assert_ptr_nonnull(message);
    protobuf_c_message_init(d, message);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *field = &d->fields[i];
        char *base = (char *)message;
        unsigned value_seed = seed * 7 + i;
        if (field->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = 3;
            char *values = calloc(n, value_size(field->type));
            for (size_t k = 0; k < n; k++)
                fill_value(field, values + k * value_size(field->type),
                           value_seed + (unsigned)k);
            *(char **)(base + field->offset) = values;
            *(size_t *)(base + field->quantifier_offset) = n;
            continue;
        }
        fill_value(field, base + field->offset, value_seed);
        if (field->label == PROTOBUF_C_LABEL_OPTIONAL &&
            field->type != PROTOBUF_C_TYPE_STRING &&
            field->type != PROTOBUF_C_TYPE_MESSAGE)
            *(protobuf_c_boolean *)(base + field->quantifier_offset) = 1;
    }
    return message;
}

static void pack(const ProtobufCMessage *message, ts_buf *out)
{
    size_t size = protobuf_c_message_get_packed_size(message);
    ck_assert_int_eq(ts_buf_reserve(out, size), 0);
    out->len = protobuf_c_message_pack(message, out->data);
    ck_assert_uint_eq(out->len, size);
}

static char *to_json(const ProtobufCMessage *message)
{
    ts_buf json = { 0 };
    ck_assert_int_eq(ts_json_from_message(message, &json), 0);
    ck_assert_int_eq(ts_buf_append(&json, "", 1), 0);
    return (char *)json.data;
}

static ProtobufCMessage *from_json(const ProtobufCMessageDescriptor *d,
                                   const char *json)
{
    ProtobufCMessage *message = NULL;
    char err[ERR_MAX];
    int rc = ts_json_to_message(d, json, strlen(json), NULL, &message, err,
                                sizeof err);
    ck_assert_msg(rc == 0, "refused %s: %s", json, err);
    ck_assert_ptr_nonnull(message);
    return message;
}

/* The error for `json` read as a LocationUpdate (or d); fails the test
 * when it is accepted. */
static const char *refusal(const ProtobufCMessageDescriptor *d,
                           const char *json, size_t len)
{
    static char err[ERR_MAX];
    ProtobufCMessage *message = (ProtobufCMessage *)&message;
    int rc = ts_json_to_message(d, json, len, NULL, &message, err, sizeof err);
    ck_assert_msg(rc == -1, "accepted %.*s", (int)len, json);
    ck_assert_ptr_null(message);
    ck_assert_msg(err[0] != '\0', "no message for %.*s", (int)len, json);
    return err;
}

#define UPDATE (&tracesan__v1__location_update__descriptor)
#define SANITIZED (&tracesan__v1__sanitized_location__descriptor)

/* ------------------------------------------------------------- round trip */

TS_TEST(every_wire_message_round_trips_with_every_field)
{
    for (size_t m = 0; m < sizeof WIRE_MESSAGES / sizeof WIRE_MESSAGES[0];
         m++) {
        ProtobufCMessage *original = fill_message(WIRE_MESSAGES[m], 1);
        char *json = to_json(original);
        /* Every field, nested ones too, appears under its .proto name. */
        for (unsigned i = 0; i < WIRE_MESSAGES[m]->n_fields; i++) {
            char key[128];
            snprintf(key, sizeof key, "\"%s\":",
                     WIRE_MESSAGES[m]->fields[i].name);
            ck_assert_msg(strstr(json, key) != NULL, "%s lacks %s", json,
                          key);
        }
        ProtobufCMessage *decoded = from_json(WIRE_MESSAGES[m], json);
        ts_buf a = { 0 }, b = { 0 };
        pack(original, &a);
        pack(decoded, &b);
        ck_assert_msg(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
                      "%s differs after the round trip",
                      WIRE_MESSAGES[m]->name);
        char *again = to_json(decoded);
        ck_assert_str_eq(again, json);
        free(again);
        free(json);
        ts_buf_free(&a);
        ts_buf_free(&b);
        protobuf_c_message_free_unpacked(original, NULL);
        protobuf_c_message_free_unpacked(decoded, NULL);
    }
}
END_TEST

TS_TEST(only_set_fields_are_written_in_tag_order)
{
    Tracesan__V1__SanitizedLocation location =
        TRACESAN__V1__SANITIZED_LOCATION__INIT;
    location.user_id = "alice";
    location.has_timestamp_ms = 1;
    location.timestamp_ms = 1700000000123;
    location.has_lat = 1;
    location.lat = 40.5;
    location.has_lon = 1;
    location.lon = -73.25;
    location.profile = "geoind";
    location.has_eps_point = 1;
    location.eps_point = 0.1;
    location.has_repeated = 1;
    location.repeated = 0;
    location.has_channel_version = 1;
    location.channel_version = 7;
    char *json = to_json(&location.base);
    ck_assert_str_eq(json, "{\"user_id\":\"alice\",\"timestamp_ms\":"
                           "1700000000123,\"lat\":40.5,\"lon\":-73.25,"
                           "\"profile\":\"geoind\",\"eps_point\":"
                           "0.1,\"repeated\":false,"
                           "\"channel_version\":7}");
    free(json);

    Tracesan__V1__LocationBatch empty = TRACESAN__V1__LOCATION_BATCH__INIT;
    json = to_json(&empty.base);
    ck_assert_str_eq(json, "{}");
    free(json);
}
END_TEST

TS_TEST(doubles_are_short_and_exact)
{
    Tracesan__V1__DensityEstimate estimate =
        TRACESAN__V1__DENSITY_ESTIMATE__INIT;
    double few[] = { 40.7283974, 0.1 + 0.2, -0.0, 1e-7, 123456789.0 };
    estimate.n_probability = sizeof few / sizeof few[0];
    estimate.probability = few;
    char *json = to_json(&estimate.base);
    ck_assert_str_eq(json, "{\"probability\":[40.7283974,"
                           "0.30000000000000004,-0,1e-07,"
                           "123456789]}");
    free(json);

    /* Random bit patterns: every finite double reads back bit for bit. */
    enum { N = 20000 };
    static double values[N];
    uint64_t state = 0x9e3779b97f4a7c15u;
    size_t n = 0;
    while (n < N) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        double v;
        memcpy(&v, &state, sizeof v);
        if (isfinite(v))
            values[n++] = v;
    }
    estimate.n_probability = N;
    estimate.probability = values;
    json = to_json(&estimate.base);
    Tracesan__V1__DensityEstimate *back =
        (Tracesan__V1__DensityEstimate *)from_json(
            &tracesan__v1__density_estimate__descriptor, json);
    ck_assert_uint_eq(back->n_probability, N);
    ck_assert_int_eq(memcmp(back->probability, values, sizeof values), 0);
    protobuf_c_message_free_unpacked(&back->base, NULL);
    free(json);
}
END_TEST

TS_TEST(appends_without_newline_and_keeps_buffer_on_failure)
{
    ts_buf out = { 0 };
    ck_assert_int_eq(ts_buf_append(&out, "x", 1), 0);
    Tracesan__V1__LocationUpdate update = TRACESAN__V1__LOCATION_UPDATE__INIT;
    update.user_id = "bob";
    ck_assert_int_eq(ts_json_from_message(&update.base, &out), 0);
    ck_assert_uint_eq(out.len, strlen("x{\"user_id\":\"bob\"}"));
    ck_assert_int_eq(memcmp(out.data, "x{\"user_id\":\"bob\"}", out.len), 0);

    /* JSON has no NaN or infinity; nothing half-written stays behind. */
    size_t before = out.len;
    update.has_lat = 1;
    update.lat = NAN;
    ck_assert_int_eq(ts_json_from_message(&update.base, &out), -1);
    ck_assert_uint_eq(out.len, before);
    update.lat = -INFINITY;
    ck_assert_int_eq(ts_json_from_message(&update.base, &out), -1);
    ck_assert_uint_eq(out.len, before);

    /* Invalid UTF-8 cannot be written faithfully: refused, not mangled. */
    update.has_lat = 0;
    const char *bad[] = { "\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        update.user_id = (char *)bad[i];
        ck_assert_int_eq(ts_json_from_message(&update.base, &out), -1);
        ck_assert_uint_eq(out.len, before);
    }
    ts_buf_free(&out);
}
END_TEST

TS_TEST(strings_are_escaped_and_unescaped)
{
    Tracesan__V1__Rejection rejection = TRACESAN__V1__REJECTION__INIT;
    rejection.user_id = "q\"b\\s/\x01\n\x7f\xc3\xa9\xf0\x9f\x98\x80";
    char *json = to_json(&rejection.base);
    ck_assert_str_eq(json, "{\"user_id\":\"q\\\"b\\\\s/\\u0001\\u000a"
                           "\\u007f\xc3\xa9\xf0\x9f\x98\x80\"}");
    Tracesan__V1__Rejection *back = (Tracesan__V1__Rejection *)from_json(
        &tracesan__v1__rejection__descriptor, json);
    ck_assert_str_eq(back->user_id, rejection.user_id);
    protobuf_c_message_free_unpacked(&back->base, NULL);
    free(json);

    /* Every escape a writer may use, surrogate pairs included. */
    back = (Tracesan__V1__Rejection *)from_json(
        &tracesan__v1__rejection__descriptor,
        "{\"detail\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u00E9\\ud83d\\ude00"
        "\\u2713\"}");
    ck_assert_str_eq(back->detail, "\"\\/\b\f\n\r\t\xc3\xa9\xc3\xa9"
                                   "\xf0\x9f\x98\x80\xe2\x9c\x93");
    protobuf_c_message_free_unpacked(&back->base, NULL);
}
END_TEST

TS_TEST(enums_by_name_and_unknown_values_by_number)
{
    Tracesan__V1__Rejection rejection = TRACESAN__V1__REJECTION__INIT;
    rejection.has_reason = 1;
    rejection.reason = TRACESAN__V1__REJECTION_REASON__REJECTION_REASON_BUDGET_EXHAUSTED;
    char *json = to_json(&rejection.base);
    ck_assert_str_eq(json,
                     "{\"reason\":\"REJECTION_REASON_BUDGET_EXHAUSTED\"}");
    free(json);

    rejection.reason = (Tracesan__V1__RejectionReason)999;
    json = to_json(&rejection.base);
    ck_assert_str_eq(json, "{\"reason\":999}");
    Tracesan__V1__Rejection *back = (Tracesan__V1__Rejection *)from_json(
        &tracesan__v1__rejection__descriptor, json);
    ck_assert(back->has_reason);
    ck_assert_int_eq(back->reason, 999);
    protobuf_c_message_free_unpacked(&back->base, NULL);
    free(json);
}
END_TEST

TS_TEST(reads_what_other_writers_write)
{
    /* White space anywhere, any field order, 64-bit integers as strings
     * (proto3's canonical JSON, e.g. Python's json_format), integers for
     * doubles, exponents. */
    Tracesan__V1__LocationUpdate *update =
        (Tracesan__V1__LocationUpdate *)from_json(
            UPDATE, " \r\n\t{ \"lon\" : -7.4e1 ,\n\"timestamp_ms\": "
                    "\"1700000000000\", \"lat\":41, \"user_id\":\"u\","
                    "\"profile\":\"geoind\",\"horizontal_accuracy_m\":0}\n ");
    ck_assert_str_eq(update->user_id, "u");
    ck_assert(update->has_timestamp_ms);
    ck_assert_int_eq(update->timestamp_ms, 1700000000000);
    ck_assert(update->has_lat && update->lat == 41.0);
    ck_assert(update->has_lon && update->lon == -74.0);
    ck_assert(update->has_horizontal_accuracy_m &&
              update->horizontal_accuracy_m == 0.0);
    ck_assert_str_eq(update->profile, "geoind");
    protobuf_c_message_free_unpacked(&update->base, NULL);

    Tracesan__V1__SanitizedLocation *location =
        (Tracesan__V1__SanitizedLocation *)from_json(
            SANITIZED, "{\"timestamp_ms\":-9223372036854775808,"
                       "\"window_start_ms\":\"9223372036854775807\","
                       "\"delta_set_size\":4294967295,\"predicted\":true,"
                       "\"repeated\":false}");
    ck_assert_int_eq(location->timestamp_ms, INT64_MIN);
    ck_assert_int_eq(location->window_start_ms, INT64_MAX);
    ck_assert_uint_eq(location->delta_set_size, UINT32_MAX);
    ck_assert(location->has_predicted && location->predicted);
    ck_assert(location->has_repeated && !location->repeated);
    ck_assert(!location->has_lat);
    protobuf_c_message_free_unpacked(&location->base, NULL);

    Tracesan__V1__DensityEstimate *density =
        (Tracesan__V1__DensityEstimate *)from_json(
            &tracesan__v1__density_estimate__descriptor,
            "{\"reports\":18446744073709551615,\"probability\":[],"
            "\"rows\":0}");
    ck_assert_uint_eq(density->reports, UINT64_MAX);
    ck_assert_uint_eq(density->n_probability, 0);
    ck_assert(density->has_rows);
    protobuf_c_message_free_unpacked(&density->base, NULL);

    Tracesan__V1__Rejection *rejection =
        (Tracesan__V1__Rejection *)from_json(
            &tracesan__v1__rejection__descriptor, "{\"reason\":12}");
    ck_assert_int_eq(rejection->reason,
                     TRACESAN__V1__REJECTION_REASON__REJECTION_REASON_BUDGET_EXHAUSTED);
    protobuf_c_message_free_unpacked(&rejection->base, NULL);
}
END_TEST

/* ----------------------------------------------------------- hostile text */

typedef struct hostile_case {
    const ProtobufCMessageDescriptor *descriptor;
    const char *json;
    const char *error;       /* expected in the message */
} hostile_case;

TS_TEST(hostile_text_is_refused_with_a_clear_message)
{
    static const hostile_case cases[] = {
        { UPDATE, "", "unexpected end of input" },
        { UPDATE, "   ", "unexpected end of input" },
        { UPDATE, "{", "unexpected end of input" },
        { UPDATE, "{\"user_id\":\"a\"", "unexpected end of input" },
        { UPDATE, "{\"user_id\":\"a", "unterminated string" },
        { UPDATE, "{\"user_id\"", "unexpected end of input" },
        { UPDATE, "{\"lat\":", "unexpected end of input" },
        { UPDATE, "{\"lat\":40.7128,", "unexpected end of input" },
        { UPDATE, "{\"lat\":NaN}", "lat: NaN and infinities are not JSON" },
        { UPDATE, "{\"lat\":Infinity}", "NaN and infinities" },
        { UPDATE, "{\"lon\":-Infinity}", "lon: NaN and infinities" },
        { UPDATE, "{\"lat\":nan}", "NaN and infinities" },
        { UPDATE, "{\"lat\":1e999}", "lat: number out of range" },
        { UPDATE, "{\"lat\":-1e309}", "number out of range" },
        { UPDATE,
          "{\"lat\":1234567890123456789012345678901234567890123456789012345"
          "6789012345678901234567890123456789012345678901234567890123456789"
          "012345678901234567890}",
          "more than 127 characters" },
        { UPDATE, "{\"timestamp_ms\":9223372036854775808}",
          "timestamp_ms: number out of range" },
        { UPDATE, "{\"timestamp_ms\":-9223372036854775809}",
          "number out of range" },
        { UPDATE, "{\"timestamp_ms\":1e3}", "fraction or exponent" },
        { UPDATE, "{\"timestamp_ms\":1.5}", "fraction or exponent" },
        { UPDATE, "{\"timestamp_ms\":\"12a\"}", "not a decimal integer" },
        { UPDATE, "{\"timestamp_ms\":\"\"}", "not a decimal integer" },
        { UPDATE, "{\"timestamp_ms\":\" 1\"}", "not a decimal integer" },
        { UPDATE, "{\"timestamp_ms\":true}", "expected an integer, found a "
                                             "boolean" },
        { SANITIZED, "{\"delta_set_size\":4294967296}", "out of range" },
        { SANITIZED, "{\"delta_set_size\":-1}", "negative number" },
        { SANITIZED, "{\"delta_set_size\":\"7\"}",
          "expected an integer, found a string" },
        { SANITIZED, "{\"predicted\":1}", "expected true or false" },
        { SANITIZED, "{\"predicted\":True}", "expected true or false" },
        { SANITIZED, "{\"repeated\":truex}", "expected true or false" },
        { UPDATE, "{\"user_id\":\"a\",\"user_id\":\"b\"}",
          "user_id: field given twice" },
        { UPDATE, "{\"lat\":1,\"lon\":2,\"lat\":1}", "lat: field given twice" },
        { UPDATE, "{\"lat\":1} x", "unexpected data after the object" },
        { UPDATE, "{\"lat\":1}{}", "unexpected data after the object" },
        { UPDATE, "{\"lat\":1}\n{\"lat\":2}", "unexpected data after" },
        { UPDATE, "{\"bogus\":1}",
          "unknown field 'bogus' in tracesan.v1.LocationUpdate" },
        { UPDATE, "{\"Lat\":1}", "unknown field 'Lat'" },
        { UPDATE, "{\"user\\u0000id\":1}", "unknown field (its name" },
        { UPDATE, "{\"40.7128\":1}", "unknown field (its name, not an "
                                     "identifier, is not shown)" },
        { UPDATE, "{\"lat -74.0060\":1}", "is not shown" },
        { UPDATE, "{\"a_very_long_field_name_that_goes_on_and_on_and_on\":1}",
          "is not shown" },
        { UPDATE, "{\"lat\":\"40.7128\"}", "lat: expected a number, found a "
                                           "string" },
        { UPDATE, "{\"lat\":[40.7128]}", "expected a number, found an array" },
        { UPDATE, "{\"user_id\":5}", "user_id: expected a string" },
        { UPDATE, "{\"user_id\":null}", "null is not accepted" },
        { UPDATE, "{\"lat\":null}", "null is not accepted" },
        { UPDATE, "{\"user_id\":\"a\\u0000b\"}", "contains \\u0000" },
        { UPDATE, "{\"user_id\":\"\\ud800\"}", "unpaired surrogate" },
        { UPDATE, "{\"user_id\":\"\\udc00\\ud800\"}", "unpaired surrogate" },
        { UPDATE, "{\"user_id\":\"\\ud800\\u0041\"}", "unpaired surrogate" },
        { UPDATE, "{\"user_id\":\"\\u12\"}", "bad \\u escape" },
        { UPDATE, "{\"user_id\":\"\\x41\"}", "invalid escape" },
        { UPDATE, "{\"user_id\":\"\xff\"}", "not valid UTF-8" },
        { UPDATE, "{\"user_id\":\"\xc0\xaf\"}", "not valid UTF-8" },
        { UPDATE, "{\"user_id\":\"\xed\xa0\x80\"}", "not valid UTF-8" },
        { UPDATE, "{\"user_id\":\"a\nb\"}", "control character" },
        { UPDATE, "{\"user_id\":\"a\tb\"}", "control character" },
        { UPDATE, "{\"lat\":01}", "malformed number" },
        { UPDATE, "{\"lat\":1.}", "malformed number" },
        { UPDATE, "{\"lat\":1.5e}", "malformed number" },
        { UPDATE, "{\"lat\":-}", "malformed number" },
        { UPDATE, "{\"lat\":.5}", "expected a number" },
        { UPDATE, "{\"lat\":+1}", "expected a number" },
        { UPDATE, "{\"lat\":0x10}", "malformed number" },
        { UPDATE, "[]", "expected an object, found an array" },
        { UPDATE, "\"x\"", "expected an object, found a string" },
        { UPDATE, "\xef\xbb\xbf{}", "expected an object" },
        { UPDATE, "{'lat':1}", "expected a field name" },
        { UPDATE, "{lat:1}", "expected a field name" },
        { UPDATE, "{\"lat\":1,}", "expected a field name" },
        { UPDATE, "{,}", "expected a field name" },
        { UPDATE, "{\"lat\" 1}", "expected ':'" },
        { UPDATE, "{\"lat\":1 \"lon\":2}", "expected ',' or '}'" },
        { UPDATE, "{\"lat\":1 /* c */}", "expected ',' or '}'" },
        { &tracesan__v1__location_batch__descriptor, "{\"updates\":{}}",
          "updates: expected an array, found an object" },
        { &tracesan__v1__location_batch__descriptor,
          "{\"updates\":[{\"lat\":1},{\"lat\":\"x\"}]}",
          "updates[1].lat: expected a number, found a string" },
        { &tracesan__v1__location_batch__descriptor,
          "{\"updates\":[{},]}", "updates[1]: expected an object" },
        { &tracesan__v1__location_batch__descriptor,
          "{\"updates\":[{} {}]}", "expected ',' or ']'" },
        { &tracesan__v1__location_batch__descriptor,
          "{\"updates\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
          "updates[0]: expected an object, found an array" },
        { &tracesan__v1__density_estimate__descriptor,
          "{\"probability\":[0.5,0.5,]}", "probability[2]: " },
        { &tracesan__v1__density_estimate__descriptor,
          "{\"probability\":[0.5,NaN]}", "probability[1]: NaN" },
        { &tracesan__v1__rejection__descriptor,
          "{\"reason\":\"REJECTION_REASON_NOPE\"}",
          "reason: not a name of enum tracesan.v1.RejectionReason" },
        { &tracesan__v1__rejection__descriptor, "{\"reason\":3000000000}",
          "reason: number out of range" },
        { &tracesan__v1__rejection__descriptor, "{\"reason\":true}",
          "expected an enum name" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *err = refusal(cases[i].descriptor, cases[i].json,
                                  strlen(cases[i].json));
        ck_assert_msg(strstr(err, cases[i].error) != NULL,
                      "for %s: got \"%s\", expected \"%s\"", cases[i].json,
                      err, cases[i].error);
        ck_assert_msg(strstr(err, "(byte ") != NULL, "no offset in %s", err);
        /* No refusal repeats a coordinate it was given. */
        ck_assert_msg(strstr(err, "40.7") == NULL, "value echoed: %s", err);
    }
}
END_TEST

TS_TEST(input_with_nul_bytes_or_beyond_the_size_limit_is_refused)
{
    const char with_nul[] = "{\"user_id\":\"a\0b\"}";
    ck_assert_ptr_nonnull(
        strstr(refusal(UPDATE, with_nul, sizeof with_nul - 1),
               "control character"));
    const char trailing_nul[] = "{}\0";
    ck_assert_ptr_nonnull(
        strstr(refusal(UPDATE, trailing_nul, sizeof trailing_nul - 1),
               "unexpected data after"));

    /* Refused by its length, before anything is read. */
    size_t len = TS_JSON_MAX_BYTES + 1;
    char *huge = malloc(len);
    ck_assert_ptr_nonnull(huge);
    memset(huge, ' ', len);
    huge[0] = '{';
    huge[len - 1] = '}';
    ck_assert_ptr_nonnull(strstr(refusal(UPDATE, huge, len), "longer than"));
    /* Just under it, the same text is fine. */
    ProtobufCMessage *message = NULL;
    ck_assert_int_eq(ts_json_to_message(UPDATE, huge + 1, len - 1, NULL,
                                        &message, NULL, 0), -1);
    huge[1] = '{';
    ck_assert_int_eq(ts_json_to_message(UPDATE, huge + 1, len - 1, NULL,
                                        &message, NULL, 0), 0);
    protobuf_c_message_free_unpacked(message, NULL);
    free(huge);

    ck_assert_int_eq(ts_json_to_message(UPDATE, NULL, 0, NULL, &message,
                                        NULL, 0), -1);
    ck_assert_ptr_null(message);
}
END_TEST

TS_TEST(errors_fit_small_buffers)
{
    char err[8];
    ProtobufCMessage *message;
    ck_assert_int_eq(ts_json_to_message(UPDATE, "{\"bogus\":1}", 11, NULL,
                                        &message, err, sizeof err), -1);
    ck_assert_uint_eq(strlen(err), sizeof err - 1);
    ck_assert_int_eq(ts_json_to_message(UPDATE, "{\"bogus\":1}", 11, NULL,
                                        &message, err, 1), -1);
    ck_assert_str_eq(err, "");
}
END_TEST

/* ------------------------- a recursive schema, and a oneof, built by hand */

typedef struct node {
    ProtobufCMessage base;
    struct node *child;
    protobuf_c_boolean has_value;
    int32_t value;
    uint32_t choice_case;       /* oneof choice { string word = 3; */
    union {                     /*                bool flag = 4; } */
        char *word;
        protobuf_c_boolean flag;
    };
} node;

static const ProtobufCMessageDescriptor node_descriptor;

static void node_init(ProtobufCMessage *message)
{
    static const node blank = { .base = PROTOBUF_C_MESSAGE_INIT(
                                    &node_descriptor) };
    *(node *)message = blank;
}

static const ProtobufCFieldDescriptor node_fields[] = {
    { "child", 1, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_MESSAGE, 0,
      offsetof(node, child), &node_descriptor, NULL, 0, 0, NULL, NULL },
    { "value", 2, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_INT32,
      offsetof(node, has_value), offsetof(node, value), NULL, NULL, 0, 0,
      NULL, NULL },
    { "word", 3, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_STRING,
      offsetof(node, choice_case), offsetof(node, word), NULL, NULL,
      PROTOBUF_C_FIELD_FLAG_ONEOF, 0, NULL, NULL },
    { "flag", 4, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_BOOL,
      offsetof(node, choice_case), offsetof(node, flag), NULL, NULL,
      PROTOBUF_C_FIELD_FLAG_ONEOF, 0, NULL, NULL },
};
static const unsigned node_fields_by_name[] = { 0, 3, 1, 2 };
static const ProtobufCIntRange node_ranges[] = { { 1, 0 }, { 0, 4 } };
static const ProtobufCMessageDescriptor node_descriptor = {
    PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "test.Node", "Node", "Node", "test",
    sizeof(node), 4, node_fields, node_fields_by_name, 1, node_ranges,
    node_init, NULL, NULL, NULL
};

/* {"child":{"child":...{"value":1}...}} with `levels` objects. */
static char *nested_json(size_t levels)
{
    ts_buf json = { 0 };
    for (size_t i = 1; i < levels; i++)
        ck_assert_int_eq(ts_buf_append(&json, "{\"child\":", 9), 0);
    ck_assert_int_eq(ts_buf_append(&json, "{\"value\":1}", 11), 0);
    for (size_t i = 1; i < levels; i++)
        ck_assert_int_eq(ts_buf_append(&json, "}", 1), 0);
    ck_assert_int_eq(ts_buf_append(&json, "", 1), 0);
    return (char *)json.data;
}

TS_TEST(nesting_is_bounded_both_ways)
{
    char *json = nested_json(TS_JSON_MAX_DEPTH);
    ProtobufCMessage *deepest = from_json(&node_descriptor, json);
    char *again = to_json(deepest);
    ck_assert_str_eq(again, json);
    free(again);
    free(json);

    json = nested_json(TS_JSON_MAX_DEPTH + 1);
    const char *err = refusal(&node_descriptor, json, strlen(json));
    ck_assert_msg(strstr(err, "nested deeper than 32 levels") != NULL, "%s",
                  err);
    free(json);
    json = nested_json(100000);
    refusal(&node_descriptor, json, strlen(json));
    free(json);

    /* A message one level too deep is not written either. */
    node top;
    node_init(&top.base);
    top.child = (node *)deepest;
    ts_buf out = { 0 };
    ck_assert_int_eq(ts_json_from_message(&top.base, &out), -1);
    ck_assert_uint_eq(out.len, 0);
    ts_buf_free(&out);
    protobuf_c_message_free_unpacked(deepest, NULL);
}
END_TEST

TS_TEST(oneof_members_are_exclusive)
{
    node *n = (node *)from_json(&node_descriptor, "{\"word\":\"hi\"}");
    ck_assert_uint_eq(n->choice_case, 3);
    ck_assert_str_eq(n->word, "hi");
    char *json = to_json(&n->base);
    ck_assert_str_eq(json, "{\"word\":\"hi\"}");
    free(json);
    protobuf_c_message_free_unpacked(&n->base, NULL);

    n = (node *)from_json(&node_descriptor, "{\"flag\":false}");
    ck_assert_uint_eq(n->choice_case, 4);
    json = to_json(&n->base);
    ck_assert_str_eq(json, "{\"flag\":false}");
    free(json);
    protobuf_c_message_free_unpacked(&n->base, NULL);

    const char *err = refusal(&node_descriptor,
                              "{\"word\":\"hi\",\"flag\":true}", 25);
    ck_assert_msg(strstr(err, "flag: another field of its oneof") != NULL,
                  "%s", err);
}
END_TEST

/* ----------------------------------- allocation failures leak nothing */

typedef struct counting_allocator {
    ProtobufCAllocator base;
    long remaining;        /* allocations left before failing; -1: no limit */
    long live;
} counting_allocator;

static void *counted_alloc(void *data, size_t size)
{
    counting_allocator *a = data;
    if (a->remaining == 0)
        return NULL;
    if (a->remaining > 0)
        a->remaining--;
    void *p = malloc(size);
    if (p != NULL)
        a->live++;
    return p;
}

static void counted_free(void *data, void *pointer)
{
    counting_allocator *a = data;
    if (pointer != NULL)
        a->live--;
    free(pointer);
}

TS_TEST(every_allocation_failure_is_reported_and_cleaned_up)
{
    const char *json =
        "{\"sanitized\":[{\"user_id\":\"a\",\"profile\":\"p\",\"lat\":1},"
        "{\"user_id\":\"b\"},{},{},{},{},{},{},{\"mechanism\":\"m\"}],"
        "\"rejected\":[{\"detail\":\"d\",\"reason\":\"REJECTION_REASON_"
        "MALFORMED\"}]}";
    int succeeded = 0;
    for (long limit = 0; limit < 200 && !succeeded; limit++) {
        counting_allocator a = { { counted_alloc, counted_free, NULL }, limit,
                                 0 };
        a.base.allocator_data = &a;
        ProtobufCMessage *message = NULL;
        char err[ERR_MAX];
        int rc = ts_json_to_message(&tracesan__v1__outcome_batch__descriptor,
                                    json, strlen(json), &a.base, &message,
                                    err, sizeof err);
        if (rc == 0) {
            succeeded = 1;
            Tracesan__V1__OutcomeBatch *batch =
                (Tracesan__V1__OutcomeBatch *)message;
            ck_assert_uint_eq(batch->n_sanitized, 9);
            ck_assert_str_eq(batch->sanitized[8]->mechanism, "m");
            ck_assert_uint_eq(batch->n_rejected, 1);
            protobuf_c_message_free_unpacked(message, &a.base);
        } else {
            ck_assert_ptr_null(message);
            ck_assert_msg(strstr(err, "out of memory") != NULL, "%s", err);
        }
        ck_assert_int_eq(a.live, 0);
    }
    ck_assert(succeeded);
}
END_TEST

TS_TEST(reads_into_the_codec_arena)
{
    ts_codec_arena arena;
    ts_codec_arena_init(&arena);
    for (int round = 0; round < 3; round++) {
        ProtobufCMessage *message = NULL;
        const char *json = "{\"updates\":[{\"user_id\":\"a\",\"lat\":1},"
                           "{\"user_id\":\"b\"}]}";
        ck_assert_int_eq(ts_json_to_message(
                             &tracesan__v1__location_batch__descriptor, json,
                             strlen(json), &arena.allocator, &message, NULL,
                             0), 0);
        Tracesan__V1__LocationBatch *batch =
            (Tracesan__V1__LocationBatch *)message;
        ck_assert_uint_eq(batch->n_updates, 2);
        ck_assert_str_eq(batch->updates[1]->user_id, "b");
        ts_codec_batch_release(&arena, batch);
    }
    ts_codec_arena_free(&arena);
}
END_TEST

int main(void)
{
    return ts_check_main("json_codec", 60, NULL, NULL);
}
