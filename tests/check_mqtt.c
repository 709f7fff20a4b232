/* The MQTT driver's pure parts: packets written and read back, topic
 * filters, the user level, ISO 8601 times, trackers' JSON mapped to a
 * LocationBatch (OwnTracks' names), output topics that cannot make
 * another level or hold bytes that are not UTF-8, and a broker's host
 * name looked up while the event loop goes on. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "drivers/mqtt/mqtt_client.h"
#include "drivers/mqtt/mqtt_packet.h"
#include "drivers/mqtt/mqtt_payload.h"
#include "drivers/mqtt/mqtt_recent.h"
#include "drivers/mqtt/mqtt_topics.h"
#include "state/store.h"
#include "tests/support/check_run.h"

TS_TEST(test_publish_round_trip)
{
    for (int version = TS_MQTT_V311; version <= TS_MQTT_V5; version++) {
        ts_buf out = { 0 };
        ck_assert_int_eq(ts_mqtt_write_publish(&out, version, "a/b", 3,
                                               "xyz", 3, 1, 77, 1), 0);
        uint8_t first;
        size_t remaining, header;
        ck_assert_int_eq(ts_mqtt_read_header(out.data, out.len, &first,
                                             &remaining, &header), 1);
        ck_assert_uint_eq(header + remaining, out.len);
        ts_mqtt_publish p;
        const char *why = NULL;
        ck_assert_int_eq(ts_mqtt_read_publish(first, out.data + header,
                                              remaining, version, 0, &p,
                                              &why), 0);
        ck_assert_uint_eq(p.topic_len, 3);
        ck_assert(memcmp(p.topic, "a/b", 3) == 0);
        ck_assert_uint_eq(p.packet_id, 77);
        ck_assert_int_eq(p.qos, 1);
        ck_assert_int_eq(p.dup, 1);
        ck_assert_uint_eq(p.payload_len, 3);
        ck_assert(memcmp(p.payload, "xyz", 3) == 0);
        ts_buf_free(&out);
    }
}
END_TEST

TS_TEST(test_truncated_and_malformed_packets)
{
    uint8_t first;
    size_t remaining, header;
    const uint8_t partial[] = { 0x30, 0x80 };
    ck_assert_int_eq(ts_mqtt_read_header(partial, 2, &first, &remaining,
                                         &header), 0);
    const uint8_t too_long[] = { 0x30, 0x80, 0x80, 0x80, 0x80, 0x01 };
    ck_assert_int_eq(ts_mqtt_read_header(too_long, 6, &first, &remaining,
                                         &header), -1);
    ts_mqtt_publish p;
    const char *why = NULL;
    const uint8_t short_topic[] = { 0x00, 0x09, 'a' };
    ck_assert_int_eq(ts_mqtt_read_publish(0x32, short_topic, 3, TS_MQTT_V5,
                                          0, &p, &why), -1);
    ck_assert_ptr_nonnull(why);
}
END_TEST

TS_TEST(test_topic_filters)
{
    ck_assert(ts_mqtt_topic_matches("fleet/+/location", "fleet/t1/location",
                                    17));
    ck_assert(!ts_mqtt_topic_matches("fleet/+/location", "fleet/location",
                                     14));
    ck_assert(ts_mqtt_topic_matches("fleet/+/location", "fleet//location",
                                    15));
    ck_assert(ts_mqtt_topic_matches("fleet/#", "fleet", 5));
    ck_assert(ts_mqtt_topic_matches("#", "a/b/c", 5));
    ck_assert(!ts_mqtt_topic_matches("#", "$SYS/x", 6));
    ck_assert(!ts_mqtt_topic_is_valid("a\0b", 3));
    ck_assert(!ts_mqtt_topic_is_valid("a\xff", 2));
    const char *user;
    size_t len;
    ck_assert(ts_mqtt_topic_level("fleet/t1/location", 17, 2, &user, &len));
    ck_assert_uint_eq(len, 2);
    ck_assert(!ts_mqtt_topic_level("fleet//location", 15, 2, &user, &len));
    ck_assert(!ts_mqtt_topic_level("fleet", 5, 2, &user, &len));
}
END_TEST

TS_TEST(test_iso8601)
{
    int64_t ms;
    ck_assert_int_eq(ts_mqtt_parse_iso8601("2023-11-14T22:13:20Z", 20, &ms),
                     0);
    ck_assert_int_eq(ms, 1700000000000LL);
    ck_assert_int_eq(ts_mqtt_parse_iso8601("2023-11-14T23:13:20.250+01:00",
                                           29, &ms), 0);
    ck_assert_int_eq(ms, 1700000000250LL);
    /* A local time names no instant. */
    ck_assert_int_eq(ts_mqtt_parse_iso8601("2023-11-14T22:13:20", 19, &ms),
                     -1);
    ck_assert_int_eq(ts_mqtt_parse_iso8601("2023-13-14T22:13:20Z", 20, &ms),
                     -1);
}
END_TEST

static Tracesan__V1__LocationUpdate *one_update(ts_buf *batch_bytes,
                                                Tracesan__V1__LocationBatch
                                                    **batch)
{
    *batch = ts_codec_decode_batch(batch_bytes->data, batch_bytes->len);
    ck_assert_ptr_nonnull(*batch);
    ck_assert_uint_eq((*batch)->n_updates, 1);
    return (*batch)->updates[0];
}

/* OwnTracks' location object (owntracks.org/booklet/tech/json): lat,
 * lon, tst in seconds, acc in metres, and members tracesand ignores. */
TS_TEST(test_owntracks_mapping)
{
    ts_mqtt_json_names names = {
        .user = { "user_id" }, .n_user = 1,
        .lat = { "latitude", "lat" }, .n_lat = 2,
        .lon = { "lon", "lng" }, .n_lon = 2,
        .time = { "tst" }, .n_time = 1,
        .accuracy = { "acc" }, .n_accuracy = 1,
        .profile = { "profile" }, .n_profile = 1,
        .time_unit = TS_MQTT_TIME_S,
    };
    const char *json = "{\"_type\":\"location\",\"tid\":\"al\",\"lat\":40.75,"
                       "\"lon\":-73.99,\"tst\":1700000000,\"acc\":12,"
                       "\"batt\":80,\"inregions\":[\"home\",{\"x\":[1]}]}";
    ts_buf out = { 0 };
    ts_reason reason;
    char detail[160];
    ck_assert_int_eq(ts_mqtt_payload_to_batch(TS_MQTT_PAYLOAD_JSON, &names,
                                              json, strlen(json), "alice", 5,
                                              &out, &reason, detail,
                                              sizeof detail), 0);
    Tracesan__V1__LocationBatch *batch;
    Tracesan__V1__LocationUpdate *u = one_update(&out, &batch);
    ck_assert_str_eq(u->user_id, "alice");
    ck_assert_int_eq(u->timestamp_ms, 1700000000000LL);
    ck_assert(u->has_lat && u->lat == 40.75);
    ck_assert(u->has_lon && u->lon == -73.99);
    ck_assert(u->has_horizontal_accuracy_m &&
              u->horizontal_accuracy_m == 12);
    ts_codec_batch_free(batch);
    /* Errors name the member, never its value. */
    const char *bad = "{\"lat\":\"40.123456\",\"lon\":-73.99,\"tst\":1}";
    ck_assert_int_eq(ts_mqtt_payload_to_batch(TS_MQTT_PAYLOAD_JSON, &names,
                                              bad, strlen(bad), NULL, 0,
                                              &out, &reason, detail,
                                              sizeof detail), -1);
    ck_assert_int_eq(reason, TS_REASON_MALFORMED);
    ck_assert_ptr_null(strstr(detail, "40.123456"));
    const char *two = "{\"lat\":1}{\"lat\":2}";
    ck_assert_int_eq(ts_mqtt_payload_to_batch(TS_MQTT_PAYLOAD_JSON, &names,
                                              two, strlen(two), NULL, 0,
                                              &out, &reason, detail,
                                              sizeof detail), -1);
    ts_buf_free(&out);
}
END_TEST

/* An empty protobuf payload on a topic that names the user is an empty
 * batch: it maps to nothing (the intake refuses it), without packing into
 * a buffer that has no memory yet (found by fuzz_mqtt: UB before). */
TS_TEST(test_empty_protobuf_payload_with_topic_user)
{
    ts_mqtt_json_names names = { .n_user = 0 };
    ts_buf out = { 0 };
    ts_reason reason = TS_REASON_NONE;
    char detail[160] = "";
    ck_assert_int_eq(ts_mqtt_payload_to_batch(TS_MQTT_PAYLOAD_PROTOBUF,
                                              &names, "", 0, "truck-17", 8,
                                              &out, &reason, detail,
                                              sizeof detail), 0);
    ck_assert_uint_eq(out.len, 0);
    ts_buf_free(&out);
}
END_TEST

/* A LocationBatch the intake takes stays one when the topic's user
 * replaces its users, whatever unknown fields it carries (found by
 * fuzz_mqtt: protobuf-c wrote a two-byte key of field 0 back as one byte,
 * which it then refused, so the message became malformed). */
TS_TEST(test_protobuf_payload_keeps_decoding_with_topic_user)
{
    Tracesan__V1__LocationUpdate u = TRACESAN__V1__LOCATION_UPDATE__INIT;
    u.user_id = "v1";
    u.has_timestamp_ms = 1;
    u.timestamp_ms = 1700000000000LL;
    u.has_lat = u.has_lon = 1;
    u.lat = 40.71;
    u.lon = -74.0;
    Tracesan__V1__LocationUpdate *list[] = { &u };
    Tracesan__V1__LocationBatch batch = TRACESAN__V1__LOCATION_BATCH__INIT;
    batch.n_updates = 1;
    batch.updates = list;
    ts_buf payload = { 0 }, out = { 0 };
    ck_assert_int_eq(ts_codec_pack(&batch.base, &payload), 0);
    const uint8_t odd_field[] = { 0x80, 0x00, 0x47 };
    ck_assert_int_eq(ts_buf_append(&payload, odd_field, sizeof odd_field), 0);
    Tracesan__V1__LocationBatch *in =
        ts_codec_decode_batch(payload.data, payload.len);
    ck_assert_ptr_nonnull(in);   /* the intake would take it */
    ts_codec_batch_free(in);

    ts_mqtt_json_names names = { .n_user = 0 };
    ts_reason reason = TS_REASON_NONE;
    char detail[160] = "";
    ck_assert_int_eq(ts_mqtt_payload_to_batch(TS_MQTT_PAYLOAD_PROTOBUF,
                                              &names, payload.data,
                                              payload.len, "truck-17", 8,
                                              &out, &reason, detail,
                                              sizeof detail), 0);
    Tracesan__V1__LocationBatch *mapped;
    Tracesan__V1__LocationUpdate *m = one_update(&out, &mapped);
    ck_assert_str_eq(m->user_id, "truck-17");
    ck_assert(m->has_lat && m->lat == 40.71 && m->has_lon && m->lon == -74.0);
    ck_assert_int_eq(m->timestamp_ms, 1700000000000LL);
    ts_codec_batch_free(mapped);
    ts_buf_free(&payload);
    ts_buf_free(&out);
}
END_TEST

TS_TEST(test_output_topics_escape)
{
    ts_mqtt_settings s;
    ts_setting_section_defaults(&ts_mqtt_setting_section, &s);
    const ts_format *format = ts_format_find("protobuf");
    Tracesan__V1__Rejection r = TRACESAN__V1__REJECTION__INIT;
    r.user_id = "a/b+#\xff";
    ts_buf payload = { 0 }, topic = { 0 };
    ck_assert_int_eq(ts_codec_pack(&r.base, &payload), 0);
    ck_assert_int_eq(ts_mqtt_output_topic(&s, format, "rejected", 8,
                                          payload.data, payload.len, &topic),
                     0);
    ck_assert_uint_eq(topic.len, strlen("tracesan/rejected/a%2Fb%2B%23%FF"));
    ck_assert(memcmp(topic.data, "tracesan/rejected/a%2Fb%2B%23%FF",
                     topic.len) == 0);
    ck_assert_int_eq(ts_mqtt_topic_kind(&s, (const char *)topic.data,
                                        topic.len), TS_MQTT_KIND_REJECTED);
    ck_assert_int_eq(ts_mqtt_topic_kind(&s, "tracesan/sanitized/p/u", 22),
                     TS_MQTT_KIND_SANITIZED);
    ts_buf_free(&payload);
    ts_buf_free(&topic);
}
END_TEST

/* A name server on a loopback UDP port that the test's own loop serves:
 * it notes each query's name and answers NXDOMAIN. */
typedef struct fake_dns {
    int fd;
    struct event_base *base;
    int queries;
    char name[256];
} fake_dns;

static void fake_dns_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    fake_dns *dns = arg;
    uint8_t packet[512];
    struct sockaddr_in from;
    socklen_t from_len = sizeof from;
    ssize_t n = recvfrom(fd, packet, sizeof packet, 0,
                         (struct sockaddr *)&from, &from_len);
    if (n < 12)
        return;
    dns->queries++;
    /* The question's name, from its labels. */
    size_t at = 12, out = 0;
    while (at < (size_t)n && packet[at] != 0 && out + 64 < sizeof dns->name) {
        size_t label = packet[at++];
        if (out > 0)
            dns->name[out++] = '.';
        for (size_t i = 0; i < label && at < (size_t)n; i++)
            dns->name[out++] = (char)packet[at++];
    }
    dns->name[out] = '\0';
    packet[2] |= 0x80;                 /* a response */
    packet[3] = 0x80 | 3;              /* recursion available, NXDOMAIN */
    sendto(fd, packet, (size_t)n, 0, (struct sockaddr *)&from, from_len);
    event_base_loopbreak(dns->base);
}

typedef struct down_seen {
    int calls;
    char why[256];
} down_seen;

static void note_down(void *arg, const char *why, int refused)
{
    (void)refused;
    down_seen *seen = arg;
    seen->calls++;
    snprintf(seen->why, sizeof seen->why, "%s", why);
}

/* Connecting to a broker by name must not block the loop in a lookup:
 * starting returns with the name unresolved, the loop meanwhile serves
 * other events (here, the name server itself), and the answer comes back
 * as a failure that names the host. A blocking lookup would have failed
 * the connection inside ts_mqtt_client_start. */
TS_TEST(test_host_name_resolves_off_the_loop)
{
    fake_dns dns = { .base = event_base_new() };
    ck_assert_ptr_nonnull(dns.base);
    dns.fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in addr = { .sin_family = AF_INET };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ck_assert_int_eq(bind(dns.fd, (struct sockaddr *)&addr, len), 0);
    ck_assert_int_eq(getsockname(dns.fd, (struct sockaddr *)&addr, &len), 0);
    struct event *served = event_new(dns.base, dns.fd, EV_READ | EV_PERSIST,
                                     fake_dns_read, &dns);
    event_add(served, NULL);
    struct evdns_base *resolver = evdns_base_new(dns.base, 0);
    char server[64];
    snprintf(server, sizeof server, "127.0.0.1:%d", ntohs(addr.sin_port));
    ck_assert_int_eq(evdns_base_nameserver_ip_add(resolver, server), 0);

    const char *url = "mqtt://broker.tracesan.invalid:1883";
    down_seen seen = { 0 };
    ts_mqtt_client_config config = {
        .urls = &url, .n_urls = 1, .client_id = "dns-test",
        .version = TS_MQTT_V5, .keepalive_s = 30, .clean_start = 1,
        .max_inflight_in = 10, .max_payload = 1024, .qos = 1,
        .max_inflight_out = 10, .retry_first_ms = 60000,
        .retry_max_ms = 60000, .dns = resolver,
    };
    ts_mqtt_client_events events = { .arg = &seen, .down = note_down };
    char err[256];
    ts_mqtt_client *client = ts_mqtt_client_new(&config, &events, dns.base,
                                                err, sizeof err);
    ck_assert_msg(client != NULL, "%s", err);
    ts_mqtt_client_start(client);
    ck_assert_int_eq(seen.calls, 0);

    struct timeval limit = { 5, 0 };
    event_base_loopexit(dns.base, &limit);
    event_base_dispatch(dns.base);
    ck_assert_int_ge(dns.queries, 1);
    /* evdns mixes the case of its queries (DNS 0x20). */
    ck_assert_msg(strcasecmp(dns.name, "broker.tracesan.invalid") == 0, "%s",
                  dns.name);
    ck_assert_int_eq(seen.calls, 0);
    /* The NXDOMAIN (both families' queries) ends the attempt. */
    for (int i = 0; i < 10 && seen.calls == 0; i++) {
        event_base_loopexit(dns.base, &limit);
        event_base_loop(dns.base, EVLOOP_ONCE);
    }
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_msg(strstr(seen.why, "cannot resolve broker.tracesan.invalid") !=
                      NULL, "%s", seen.why);

    ts_mqtt_client_free(client);
    evdns_base_free(resolver, 1);
    event_free(served);
    close(dns.fd);
    event_base_free(dns.base);
}
END_TEST

typedef struct listed {
    size_t n;
    char first[64];
} listed;

static int list_one(void *ctx, const char *id, size_t id_len,
                    const void *bytes, size_t len)
{
    (void)bytes;
    (void)len;
    listed *l = ctx;
    if (l->n++ == 0)
        snprintf(l->first, sizeof l->first, "%.*s", (int)id_len, id);
    return 0;
}

/* The kept outcomes share the users' store and transactions, but are no
 * user: a listing (tracesan state list/export) and the user count skip
 * them, and they still read back for a redelivery. */
TS_TEST(test_kept_outcomes_are_not_users)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/check_mqtt.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char err[256];
    ts_store *store = ts_store_open(dir, TS_STORE_SYNC_NONE, 16, 0, err,
                                    sizeof err);
    ck_assert_msg(store != NULL, "%s", err);

    ts_outbox box = { 0 };
    ck_assert_int_eq(ts_outbox_put(&box, "sanitized.geoind", 16, "point", 5),
                     0);
    uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES];
    ts_mqtt_fingerprint("fleet/a/location", 16, "{}", 2, fingerprint);
    ts_mqtt_recent *recent = ts_mqtt_recent_new(3);
    ck_assert_int_eq(ts_mqtt_recent_add(recent, fingerprint, &box, 0), 0);
    ts_record_batch batch = { 0 };
    ck_assert_int_eq(ts_mqtt_recent_save(recent, &batch), 0);
    ts_user_record alice = { .spent = 0.25, .last_ts_ms = 1 };
    ck_assert_int_eq(ts_record_batch_add(&batch, "alice", 5, &alice), 0);
    ck_assert_int_eq(ts_store_begin(store, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_put_batch(store, &batch, err, sizeof err), 0);
    ck_assert_int_eq(ts_store_commit(store, err, sizeof err), 0);

    listed users = { 0 };
    ck_assert_int_eq(ts_store_iterate(store, list_one, &users), 0);
    ck_assert_uint_eq(users.n, 1);
    ck_assert_str_eq(users.first, "alice");
    ts_store_info info;
    ck_assert_int_eq(ts_store_get_info(store, &info), 0);
    ck_assert_uint_eq(info.users, 1);
    ck_assert(ts_store_is_own_key("\x01mqtt.recent.0", 15));
    ck_assert(!ts_store_is_own_key("alice", 5));

    ts_mqtt_recent *again = ts_mqtt_recent_new(3);
    ck_assert_int_eq(ts_mqtt_recent_load(again, store, err, sizeof err), 0);
    ck_assert_uint_eq(ts_mqtt_recent_count(again), 1);
    ck_assert_int_ge(ts_mqtt_recent_find(again, fingerprint), 0);

    ts_mqtt_recent_free(again);
    ts_mqtt_recent_free(recent);
    ts_record_batch_free(&batch);
    ts_outbox_free(&box);
    ts_store_close(store);
    char path[128];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    return ts_check_main("mqtt", 0, NULL, NULL);
}
