#include "drivers/mqtt/mqtt_recent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define KEY_PREFIX "\x01mqtt.recent."
/* fingerprint, sequence, count */
#define SLOT_HEADER (TS_MQTT_FINGERPRINT_BYTES + 8 + 4)

typedef struct slot {
    ts_buf bytes;        /* SLOT_HEADER, then (u32 len, topic, u32 len,
                            payload) per outcome; empty: unused */
    int unsaved;
} slot;

struct ts_mqtt_recent {
    slot *slots;
    size_t n;
    size_t next;         /* the oldest */
    uint64_t sequence;
};

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

ts_mqtt_recent *ts_mqtt_recent_new(size_t n)
{
    ts_mqtt_recent *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->slots = calloc(n, sizeof *r->slots);
    if (r->slots == NULL) {
        free(r);
        return NULL;
    }
    r->n = n;
    return r;
}

void ts_mqtt_recent_free(ts_mqtt_recent *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        ts_buf_free(&r->slots[i].bytes);
    free(r->slots);
    free(r);
}

void ts_mqtt_fingerprint(const char *topic, size_t topic_len,
                         const void *payload, size_t len,
                         uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES])
{
    crypto_generichash_state state;
    uint8_t length[4];
    put_u32(length, (uint32_t)topic_len);
    crypto_generichash_init(&state, NULL, 0, TS_MQTT_FINGERPRINT_BYTES);
    crypto_generichash_update(&state, length, sizeof length);
    crypto_generichash_update(&state, (const uint8_t *)topic, topic_len);
    crypto_generichash_update(&state, payload, len);
    crypto_generichash_final(&state, fingerprint, TS_MQTT_FINGERPRINT_BYTES);
}

long ts_mqtt_recent_find(const ts_mqtt_recent *r,
                         const uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES])
{
    for (size_t i = 0; i < r->n; i++)
        if (r->slots[i].bytes.len >= SLOT_HEADER &&
            memcmp(r->slots[i].bytes.data, fingerprint,
                   TS_MQTT_FINGERPRINT_BYTES) == 0)
            return (long)i;
    return -1;
}

int ts_mqtt_recent_replay(const ts_mqtt_recent *r, long index, ts_outbox *box)
{
    const ts_buf *b = &r->slots[index].bytes;
    uint32_t count = get_u32(b->data + TS_MQTT_FINGERPRINT_BYTES + 8);
    const uint8_t *p = b->data + SLOT_HEADER, *end = b->data + b->len;
    for (uint32_t i = 0; i < count; i++) {
        if (end - p < 4)
            return -1;
        uint32_t topic_len = get_u32(p);
        const uint8_t *topic = p + 4;
        if ((size_t)(end - topic) < (size_t)topic_len + 4)
            return -1;
        uint32_t len = get_u32(topic + topic_len);
        const uint8_t *payload = topic + topic_len + 4;
        if ((size_t)(end - payload) < len)
            return -1;
        if (ts_outbox_put(box, topic, topic_len, payload, len) != 0)
            return -1;
        p = payload + len;
    }
    return 0;
}

int ts_mqtt_recent_add(ts_mqtt_recent *r,
                       const uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES],
                       const ts_outbox *box, size_t first)
{
    if (r->n == 0)
        return -1;
    slot *s = &r->slots[r->next];
    r->next = (r->next + 1) % r->n;
    s->unsaved = 1;
    ts_buf_reset(&s->bytes);
    size_t total = SLOT_HEADER;
    for (size_t i = first; i < box->count; i++)
        total += 8 + box->entries[i].topic_len + box->entries[i].payload_len;
    if (total > TS_MQTT_RECENT_MAX_BYTES || ts_buf_reserve(&s->bytes, total))
        return -1;  /* the slot stays empty, and is saved so */
    uint8_t header[SLOT_HEADER];
    memcpy(header, fingerprint, TS_MQTT_FINGERPRINT_BYTES);
    uint64_t seq = ++r->sequence;
    put_u32(header + TS_MQTT_FINGERPRINT_BYTES, (uint32_t)seq);
    put_u32(header + TS_MQTT_FINGERPRINT_BYTES + 4, (uint32_t)(seq >> 32));
    put_u32(header + TS_MQTT_FINGERPRINT_BYTES + 8,
            (uint32_t)(box->count - first));
    ts_buf_append(&s->bytes, header, sizeof header);
    for (size_t i = first; i < box->count; i++) {
        const ts_outbox_entry *e = &box->entries[i];
        uint8_t len[4];
        put_u32(len, (uint32_t)e->topic_len);
        ts_buf_append(&s->bytes, len, 4);
        ts_buf_append(&s->bytes, box->topics.data + e->topic_offset,
                      e->topic_len);
        put_u32(len, (uint32_t)e->payload_len);
        ts_buf_append(&s->bytes, len, 4);
        ts_buf_append(&s->bytes, box->payloads.data + e->payload_offset,
                      e->payload_len);
    }
    return 0;
}

static void slot_key(size_t index, char *key, size_t len)
{
    snprintf(key, len, KEY_PREFIX "%zu", index);
}

int ts_mqtt_recent_load(ts_mqtt_recent *r, ts_store *store, char *err,
                        size_t errlen)
{
    uint64_t newest = 0;
    for (size_t i = 0; i < r->n; i++) {
        char key[64];
        slot_key(i, key, sizeof key);
        const void *bytes;
        size_t len;
        int found = ts_store_get(store, key, strlen(key), &bytes, &len);
        if (found < 0) {
            snprintf(err, errlen, "cannot read the recent MQTT messages "
                     "from the store");
            return -1;
        }
        ts_user_record record;
        if (found == 0 || ts_record_decode(bytes, len, &record) != 0 ||
            record.state_len < SLOT_HEADER)
            continue;
        /* The store keeps a record without its trailing zero bytes. */
        slot *s = &r->slots[i];
        ts_buf_reset(&s->bytes);
        if (ts_buf_reserve(&s->bytes, record.state_len) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memset(s->bytes.data, 0, record.state_len);
        memcpy(s->bytes.data, record.state, record.state_stored_len);
        s->bytes.len = record.state_len;
        uint64_t seq = get_u64(s->bytes.data + TS_MQTT_FINGERPRINT_BYTES);
        if (seq > newest) {
            newest = seq;
            r->next = (i + 1) % r->n;
        }
    }
    r->sequence = newest;
    return 0;
}

int ts_mqtt_recent_save(ts_mqtt_recent *r, ts_record_batch *batch)
{
    for (size_t i = 0; i < r->n; i++) {
        slot *s = &r->slots[i];
        if (!s->unsaved)
            continue;
        char key[64];
        slot_key(i, key, sizeof key);
        ts_user_record record = {
            .state = s->bytes.data,
            .state_len = s->bytes.len,
            .state_stored_len = s->bytes.len,
        };
        if (ts_record_batch_add(batch, key, strlen(key), &record) != 0)
            return -1;
        s->unsaved = 0;
    }
    return 0;
}

size_t ts_mqtt_recent_count(const ts_mqtt_recent *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->slots[i].bytes.len >= SLOT_HEADER;
    return n;
}
