/* libFuzzer target: what the MQTT driver reads from the network and from
 * vehicles (drivers/mqtt/).
 *
 * The first byte picks the part, the rest is its input:
 *   0  a byte stream from a broker, cut into packets as the client does
 *      (fixed header, then PUBLISH, CONNACK, PUBACK or SUBACK read as
 *      MQTT 3.1.1 and 5; a packet longer than what arrived read head
 *      only, as an oversized message is);
 *   1  a topic filter and a topic, split at the first newline: matching,
 *      validity, the user level;
 *   2  a vehicle's payload mapped to a LocationBatch, as JSON (OwnTracks'
 *      and tracesan's member names, the time unit picked by the second
 *      byte) and as protobuf, with and without a user from the topic;
 *   3  an outcome's format topic and payload, split at the first
 *      newline, made into an output topic; and an ISO 8601 time.
 *
 * Beyond memory and UB errors it checks the parsers' contracts: what a
 * reader accepts lies inside the bytes it was given, a PUBLISH read back
 * after being written again is the same, a head-only read agrees with the
 * full one, a user level is one non-empty level, a mapped payload is a
 * LocationBatch whose users are the topic's (or, protobuf that is none,
 * the payload unchanged), a refusal says why, and an
 * output topic is a valid topic name without wildcards. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/mqtt/mqtt_packet.h"
#include "drivers/mqtt/mqtt_payload.h"
#include "drivers/mqtt/mqtt_settings.h"
#include "drivers/mqtt/mqtt_topics.h"
#include "wire/codec.h"
#include "wire/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
    fprintf(stderr, "fuzz_mqtt: %s\n", what);
    abort();
}

static int inside(const void *p, size_t n, const uint8_t *start, size_t len)
{
    const uint8_t *b = p;
    return n == 0 || (b >= start && b + n <= start + len);
}

/* ------------------------------------------------------------ packets */

static void check_publish(uint8_t first, const uint8_t *body, size_t len,
                          int version)
{
    ts_mqtt_publish p;
    const char *why = NULL;
    if (ts_mqtt_read_publish(first, body, len, version, 0, &p, &why) != 0) {
        if (why == NULL)
            die("a refused PUBLISH without a reason");
        return;
    }
    if (!inside(p.topic, p.topic_len, body, len) ||
        !inside(p.payload, p.payload_len, body, len) ||
        (p.payload_len > 0 && p.payload + p.payload_len != body + len))
        die("PUBLISH fields outside the packet");
    if (p.qos > 2 || (p.qos > 0 && p.packet_id == 0))
        die("PUBLISH accepted with a bad QoS or identifier");
    /* The client reads an oversized message head only: the same topic
     * and identifier. */
    size_t head = ts_mqtt_publish_head_len(first, body, len);
    ts_mqtt_publish h;
    if (head == 0 || head > len ||
        ts_mqtt_read_publish(first, body, head, version, 1, &h, &why) != 0 ||
        h.topic_len != p.topic_len || h.packet_id != p.packet_id ||
        memcmp(h.topic, p.topic, p.topic_len) != 0)
        die("a head-only read disagrees with the full one");
    if (p.qos > 1)
        return;  /* the client never writes QoS 2 */
    ts_buf out = { 0 };
    if (ts_mqtt_write_publish(&out, version, p.topic, p.topic_len, p.payload,
                              p.payload_len, p.qos, p.packet_id, p.dup) != 0)
        die("an accepted PUBLISH cannot be written again");
    uint8_t again_first;
    size_t remaining, header;
    ts_mqtt_publish q;
    if (ts_mqtt_read_header(out.data, out.len, &again_first, &remaining,
                            &header) != 1 ||
        header + remaining != out.len ||
        ts_mqtt_read_publish(again_first, out.data + header, remaining,
                             version, 0, &q, &why) != 0 ||
        q.topic_len != p.topic_len || q.payload_len != p.payload_len ||
        q.qos != p.qos || q.dup != p.dup || q.packet_id != p.packet_id ||
        memcmp(q.topic, p.topic, p.topic_len) != 0 ||
        (p.payload_len > 0 &&
         memcmp(q.payload, p.payload, p.payload_len) != 0))
        die("a PUBLISH written again reads differently");
    ts_buf_free(&out);
    ts_mqtt_topic_is_valid(p.topic, p.topic_len);
}

static void check_control(int type, const uint8_t *body, size_t len,
                          int version)
{
    if (type == TS_MQTT_CONNACK) {
        ts_mqtt_connack ack;
        if (ts_mqtt_read_connack(body, len, version, &ack) == 0) {
            if (strnlen(ack.reason, sizeof ack.reason) == sizeof ack.reason)
                die("CONNACK reason not terminated");
            for (const char *r = ack.reason; *r != '\0'; r++)
                if (*r < 0x20 || *r >= 0x7f)
                    die("CONNACK reason not printable");
            ts_mqtt_connack_text(version, ack.code);
        }
    } else if (type == TS_MQTT_PUBACK) {
        uint16_t id;
        int reason;
        if (ts_mqtt_read_puback(body, len, version, &id, &reason) == 0 &&
            (reason < 0 || reason > 255))
            die("PUBACK reason out of range");
    } else if (type == TS_MQTT_SUBACK) {
        uint16_t id;
        int failure;
        if (ts_mqtt_read_suback(body, len, version, &id, &failure) == 0 &&
            failure != 0 && (failure < 0x80 || failure > 255))
            die("SUBACK failure is not a failure code");
    }
}

static void packets(const uint8_t *data, size_t size, int version)
{
    size_t at = 0;
    while (at < size) {
        uint8_t first;
        size_t remaining, header;
        int got = ts_mqtt_read_header(data + at, size - at, &first,
                                      &remaining, &header);
        if (got <= 0)
            return;
        if (header < 2 || header > 5 || remaining > TS_MQTT_MAX_REMAINING)
            die("a fixed header out of bounds");
        const uint8_t *body = data + at + header;
        size_t avail = size - at - header;
        int type = first >> 4;
        if (remaining > avail) {
            /* Not all here: the client may read the head of a PUBLISH. */
            if (type == TS_MQTT_PUBLISH) {
                size_t head = ts_mqtt_publish_head_len(first, body, avail);
                ts_mqtt_publish p;
                const char *why = NULL;
                if (head > avail)
                    die("a head longer than the bytes");
                if (head > 0 &&
                    ts_mqtt_read_publish(first, body, head, version, 1, &p,
                                         &why) == 0 &&
                    !inside(p.topic, p.topic_len, body, head))
                    die("a head-only topic outside the bytes");
            }
            return;
        }
        if (type == TS_MQTT_PUBLISH)
            check_publish(first, body, remaining, version);
        else
            check_control(type, body, remaining, version);
        at += header + remaining;
    }
}

/* ------------------------------------------------------------- topics */

static void topics(const uint8_t *data, size_t size)
{
    const uint8_t *newline = memchr(data, '\n', size);
    size_t filter_len = newline != NULL ? (size_t)(newline - data) : size;
    char *filter = malloc(filter_len + 1);
    if (filter == NULL)
        return;
    memcpy(filter, data, filter_len);
    filter[filter_len] = '\0';
    const char *topic = newline != NULL ? (const char *)newline + 1
                                        : (const char *)data;
    size_t topic_len = newline != NULL ? size - filter_len - 1 : size;
    ts_mqtt_topic_matches(filter, topic, topic_len);
    ts_mqtt_topic_is_valid(topic, topic_len);
    for (int level = 1; level <= 4; level++) {
        const char *user;
        size_t len;
        if (ts_mqtt_topic_level(topic, topic_len, level, &user, &len) &&
            (len == 0 || !inside(user, len, (const uint8_t *)topic,
                                 topic_len) ||
             memchr(user, '/', len) != NULL))
            die("a user level that is not one non-empty level");
    }
    free(filter);
}

/* ----------------------------------------------------------- payloads */

/* JSON: one update, its user the topic's when the topic names one.
 * Protobuf: the payload as it came when it is no LocationBatch (the
 * intake refuses it, saying why) or no user replaces its own, else the
 * batch with every user the topic's. */
static void check_batch(int json, const uint8_t *payload, size_t len,
                        const ts_buf *out, const char *user,
                        size_t user_len)
{
    Tracesan__V1__LocationBatch *batch =
        ts_codec_decode_batch(out->data, out->len);
    if (!json && (batch == NULL || user == NULL)) {
        if (out->len != len || (len > 0 && memcmp(out->data, payload, len)))
            die("a protobuf payload changed on its way to the intake");
        ts_codec_batch_free(batch);
        return;
    }
    if (batch == NULL || (json && batch->n_updates != 1))
        die("a mapped payload is not a LocationBatch of its updates");
    for (size_t i = 0; user != NULL && i < batch->n_updates; i++) {
        const char *id = batch->updates[i]->user_id;
        if (id == NULL || strlen(id) != user_len ||
            memcmp(id, user, user_len) != 0)
            die("an update keeps a user other than the topic's");
    }
    ts_codec_batch_free(batch);
}

static void payloads(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    ts_mqtt_json_names names = {
        .user = { "user_id", "tid" }, .n_user = 2,
        .lat = { "lat", "latitude" }, .n_lat = 2,
        .lon = { "lon", "lng", "longitude" }, .n_lon = 3,
        .time = { "timestamp_ms", "tst", "time" }, .n_time = 3,
        .accuracy = { "horizontal_accuracy_m", "acc" }, .n_accuracy = 2,
        .profile = { "profile" }, .n_profile = 1,
        .time_unit = data[0] % 4,
    };
    data++;
    size--;
    static const char user[] = "truck-17";
    ts_buf out = { 0 };
    for (int format = 0; format < 2; format++) {
        for (int with_user = 0; with_user < 2; with_user++) {
            ts_reason reason = TS_REASON_NONE;
            char detail[160] = "";
            if (ts_mqtt_payload_to_batch(
                    format == 0 ? TS_MQTT_PAYLOAD_JSON
                                : TS_MQTT_PAYLOAD_PROTOBUF,
                    &names, data, size, with_user ? user : NULL,
                    with_user ? sizeof user - 1 : 0, &out, &reason, detail,
                    sizeof detail) == 0)
                check_batch(format == 0, data, size, &out,
                            with_user ? user : NULL, sizeof user - 1);
            else if (detail[0] == '\0' || reason == TS_REASON_NONE)
                die("a refused payload without a reason");
        }
    }
    ts_buf_free(&out);
}

/* ------------------------------------------------------ output topics */

static void outputs(const uint8_t *data, size_t size)
{
    static ts_mqtt_settings settings;
    static int ready;
    if (!ready) {
        ts_setting_section_defaults(&ts_mqtt_setting_section, &settings);
        ready = 1;
    }
    const uint8_t *newline = memchr(data, '\n', size);
    size_t topic_len = newline != NULL ? (size_t)(newline - data) : size;
    const uint8_t *payload = newline != NULL ? newline + 1 : data;
    size_t len = newline != NULL ? size - topic_len - 1 : size;
    ts_buf out = { 0 };
    for (int f = 0; f < 2; f++) {
        const ts_format *format = ts_format_find(f == 0 ? "protobuf"
                                                        : "json");
        ts_buf_reset(&out);
        if (ts_mqtt_output_topic(&settings, format, data, topic_len, payload,
                                 len, &out) != 0)
            continue;
        if (!ts_mqtt_topic_is_valid((const char *)out.data, out.len) ||
            memchr(out.data, '+', out.len) != NULL ||
            memchr(out.data, '#', out.len) != NULL)
            die("an output topic that is not a plain topic name");
    }
    ts_buf_free(&out);
    int64_t ms;
    ts_mqtt_parse_iso8601((const char *)data, size, &ms);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    switch (data[0] % 4) {
    case 0:
        packets(rest, n, TS_MQTT_V311);
        packets(rest, n, TS_MQTT_V5);
        break;
    case 1: topics(rest, n); break;
    case 2: payloads(rest, n); break;
    default: outputs(rest, n); break;
    }
    return 0;
}
