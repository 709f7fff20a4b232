#include "datapath/observer_relay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "wire/codec.h"

enum record_kind {
    RECORD_LATENCY = 1,
    RECORD_REJECTED,
    RECORD_PUBLISHED,
    RECORD_COMMITTED,
    RECORD_COMMIT,
    RECORD_HEALTH,
};

struct ts_observer_relay {
    const ts_observer *target;
    ts_observer front;
    size_t max_bytes;
    pthread_mutex_t lock;
    ts_buf queue;                /* under lock */
    ts_buf draining;             /* the loop's */
    uint64_t dropped;            /* under lock */
};

/* A record: kind (1 byte), then its fields; strings and byte runs as a
 * size_t length and the bytes. */
typedef struct record_writer {
    unsigned char *p;
} record_writer;

static void put(record_writer *w, const void *data, size_t len)
{
    if (len > 0)
        memcpy(w->p, data, len);
    w->p += len;
}

static void put_bytes(record_writer *w, const void *data, size_t len)
{
    put(w, &len, sizeof len);
    put(w, data, len);
}

static size_t bytes_size(size_t len)
{
    return sizeof(size_t) + len;
}

/* Reserves `size` bytes of the queue under the lock; NULL (counted) when
 * the queue is full. The caller fills them and unlocks. */
static unsigned char *reserve(ts_observer_relay *r, size_t size)
{
    pthread_mutex_lock(&r->lock);
    if (r->queue.len + size > r->max_bytes ||
        ts_buf_reserve(&r->queue, size) != 0) {
        r->dropped++;
        pthread_mutex_unlock(&r->lock);
        return NULL;
    }
    unsigned char *at = r->queue.data + r->queue.len;
    r->queue.len += size;
    return at;
}

static void on_latency(void *arg, size_t index, double seconds)
{
    ts_observer_relay *r = arg;
    record_writer w = { reserve(r, 1 + sizeof index + sizeof seconds) };
    if (w.p == NULL)
        return;
    *w.p++ = RECORD_LATENCY;
    put(&w, &index, sizeof index);
    put(&w, &seconds, sizeof seconds);
    pthread_mutex_unlock(&r->lock);
}

static void on_rejected(void *arg, const char *user_id, ts_reason reason,
                        const char *detail)
{
    ts_observer_relay *r = arg;
    int has_user = user_id != NULL;
    size_t user_len = has_user ? strlen(user_id) : 0;
    size_t detail_len = detail != NULL ? strlen(detail) : 0;
    int why = (int)reason;
    record_writer w = { reserve(r, 1 + sizeof why + sizeof has_user +
                                       bytes_size(user_len) +
                                       bytes_size(detail_len)) };
    if (w.p == NULL)
        return;
    *w.p++ = RECORD_REJECTED;
    put(&w, &why, sizeof why);
    put(&w, &has_user, sizeof has_user);
    put_bytes(&w, user_id, user_len);
    put_bytes(&w, detail, detail_len);
    pthread_mutex_unlock(&r->lock);
}

static void on_published(void *arg, const void *topic, size_t topic_len,
                         const void *payload, size_t len)
{
    ts_observer_relay *r = arg;
    record_writer w = { reserve(r, 1 + bytes_size(topic_len) +
                                       bytes_size(len)) };
    if (w.p == NULL)
        return;
    *w.p++ = RECORD_PUBLISHED;
    put_bytes(&w, topic, topic_len);
    put_bytes(&w, payload, len);
    pthread_mutex_unlock(&r->lock);
}

static int on_counts_reports(void *arg, size_t index)
{
    ts_observer_relay *r = arg;
    return r->target->counts_reports(r->target->arg, index);
}

static void on_committed(void *arg, const ts_observation *observations,
                         size_t n)
{
    ts_observer_relay *r = arg;
    record_writer w = { reserve(r, 1 + bytes_size(n * sizeof *observations)) };
    if (w.p == NULL)
        return;
    *w.p++ = RECORD_COMMITTED;
    put_bytes(&w, observations, n * sizeof *observations);
    pthread_mutex_unlock(&r->lock);
}

static void on_commit(void *arg, double seconds, size_t outcomes)
{
    ts_observer_relay *r = arg;
    record_writer w = { reserve(r, 1 + sizeof seconds + sizeof outcomes) };
    if (w.p == NULL)
        return;
    *w.p++ = RECORD_COMMIT;
    put(&w, &seconds, sizeof seconds);
    put(&w, &outcomes, sizeof outcomes);
    pthread_mutex_unlock(&r->lock);
}

static void on_health(void *arg, const char *reason)
{
    ts_observer_relay *r = arg;
    size_t len = reason != NULL ? strlen(reason) + 1 : 0;
    record_writer w = { reserve(r, 1 + bytes_size(len)) };
    if (w.p == NULL)
        return;
    *w.p++ = RECORD_HEALTH;
    put_bytes(&w, reason, len);
    pthread_mutex_unlock(&r->lock);
}

ts_observer_relay *ts_observer_relay_new(const ts_observer *target,
                                         size_t max_bytes)
{
    ts_observer_relay *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->target = target;
    r->max_bytes = max_bytes;
    pthread_mutex_init(&r->lock, NULL);
    /* Only what the target watches is queued at all. */
    r->front = (ts_observer){
        .arg = r,
        .latency = target->latency != NULL ? on_latency : NULL,
        .rejected = target->rejected != NULL ? on_rejected : NULL,
        .published = target->published != NULL ? on_published : NULL,
        .counts_reports =
            target->counts_reports != NULL ? on_counts_reports : NULL,
        .committed = target->committed != NULL ? on_committed : NULL,
        .commit = target->commit != NULL ? on_commit : NULL,
        .health = target->health != NULL ? on_health : NULL,
    };
    return r;
}

void ts_observer_relay_free(ts_observer_relay *relay)
{
    if (relay == NULL)
        return;
    pthread_mutex_destroy(&relay->lock);
    ts_buf_free(&relay->queue);
    ts_buf_free(&relay->draining);
    free(relay);
}

const ts_observer *ts_observer_relay_front(ts_observer_relay *relay)
{
    return &relay->front;
}

uint64_t ts_observer_relay_dropped(ts_observer_relay *relay)
{
    pthread_mutex_lock(&relay->lock);
    uint64_t dropped = relay->dropped;
    pthread_mutex_unlock(&relay->lock);
    return dropped;
}

typedef struct record_reader {
    const unsigned char *p;
} record_reader;

static void get(record_reader *r, void *out, size_t len)
{
    memcpy(out, r->p, len);
    r->p += len;
}

static const unsigned char *get_bytes(record_reader *r, size_t *len)
{
    get(r, len, sizeof *len);
    const unsigned char *at = r->p;
    r->p += *len;
    return at;
}

/* Replays one record; the reader ends after it. */
static void replay(const ts_observer *t, record_reader *r, ts_buf *text)
{
    size_t len, len2;
    switch (*r->p++) {
    case RECORD_LATENCY: {
        size_t index;
        double seconds;
        get(r, &index, sizeof index);
        get(r, &seconds, sizeof seconds);
        t->latency(t->arg, index, seconds);
        return;
    }
    case RECORD_REJECTED: {
        int why, has_user;
        get(r, &why, sizeof why);
        get(r, &has_user, sizeof has_user);
        const unsigned char *user = get_bytes(r, &len);
        const unsigned char *detail = get_bytes(r, &len2);
        /* NUL-terminated copies, one after the other. */
        ts_buf_reset(text);
        if (ts_buf_reserve(text, len + len2 + 2) != 0)
            return;
        memcpy(text->data, user, len);
        text->data[len] = '\0';
        memcpy(text->data + len + 1, detail, len2);
        text->data[len + 1 + len2] = '\0';
        t->rejected(t->arg, has_user ? (const char *)text->data : NULL,
                    (ts_reason)why, (const char *)text->data + len + 1);
        return;
    }
    case RECORD_PUBLISHED: {
        const unsigned char *topic = get_bytes(r, &len);
        const unsigned char *payload = get_bytes(r, &len2);
        t->published(t->arg, topic, len, payload, len2);
        return;
    }
    case RECORD_COMMITTED: {
        const unsigned char *bytes = get_bytes(r, &len);
        size_t n = len / sizeof(ts_observation);
        ts_buf_reset(text);
        if (ts_buf_append(text, bytes, len) != 0)
            return;
        t->committed(t->arg, (const ts_observation *)(void *)text->data, n);
        return;
    }
    case RECORD_COMMIT: {
        double seconds;
        size_t outcomes;
        get(r, &seconds, sizeof seconds);
        get(r, &outcomes, sizeof outcomes);
        t->commit(t->arg, seconds, outcomes);
        return;
    }
    case RECORD_HEALTH: {
        const unsigned char *reason = get_bytes(r, &len);
        t->health(t->arg, len > 0 ? (const char *)reason : NULL);
        return;
    }
    }
}

void ts_observer_relay_drain(ts_observer_relay *relay)
{
    pthread_mutex_lock(&relay->lock);
    ts_buf swap = relay->queue;
    relay->queue = relay->draining;
    relay->draining = swap;
    ts_buf_reset(&relay->queue);
    pthread_mutex_unlock(&relay->lock);
    ts_buf text = { 0 };
    record_reader reader = { relay->draining.data };
    const unsigned char *end = relay->draining.data + relay->draining.len;
    while (reader.p != NULL && reader.p < end)
        replay(relay->target, &reader, &text);
    ts_buf_free(&text);
    ts_buf_reset(&relay->draining);
}
