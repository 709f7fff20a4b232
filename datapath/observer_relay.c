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
    ts_buf aligned;              /* the loop's: observations copied out */
    uint64_t dropped;            /* under lock */
};

/* A record is its kind (one byte), then fields, each a size_t length and
 * its bytes. A string's field holds its NUL (length 0: NULL). */
typedef struct field {
    const void *data;
    size_t len;
} field;

static field text(const char *s)
{
    return (field){ s, s != NULL ? strlen(s) + 1 : 0 };
}

static void queue(ts_observer_relay *r, unsigned char kind,
                  const field *fields, size_t n)
{
    size_t size = 1;
    for (size_t i = 0; i < n; i++)
        size += sizeof(size_t) + fields[i].len;
    pthread_mutex_lock(&r->lock);
    if (r->queue.len + size > r->max_bytes ||
        ts_buf_reserve(&r->queue, size) != 0) {
        r->dropped++;
        pthread_mutex_unlock(&r->lock);
        return;
    }
    unsigned char *p = r->queue.data + r->queue.len;
    *p++ = kind;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, &fields[i].len, sizeof(size_t));
        p += sizeof(size_t);
        if (fields[i].len > 0)
            memcpy(p, fields[i].data, fields[i].len);
        p += fields[i].len;
    }
    r->queue.len += size;
    pthread_mutex_unlock(&r->lock);
}

static void on_latency(void *arg, size_t index, double seconds)
{
    field f[] = { { &index, sizeof index }, { &seconds, sizeof seconds } };
    queue(arg, RECORD_LATENCY, f, 2);
}

static void on_rejected(void *arg, const char *user_id, ts_reason reason,
                        const char *detail)
{
    int why = (int)reason;
    field f[] = { { &why, sizeof why }, text(user_id), text(detail) };
    queue(arg, RECORD_REJECTED, f, 3);
}

static void on_published(void *arg, const void *topic, size_t topic_len,
                         const void *payload, size_t len)
{
    field f[] = { { topic, topic_len }, { payload, len } };
    queue(arg, RECORD_PUBLISHED, f, 2);
}

static int on_counts_reports(void *arg, size_t index)
{
    ts_observer_relay *r = arg;
    return r->target->counts_reports(r->target->arg, index);
}

static void on_committed(void *arg, const ts_observation *observations,
                         size_t n)
{
    field f[] = { { observations, n * sizeof *observations } };
    queue(arg, RECORD_COMMITTED, f, 1);
}

static void on_commit(void *arg, double seconds, size_t outcomes)
{
    field f[] = { { &seconds, sizeof seconds },
                  { &outcomes, sizeof outcomes } };
    queue(arg, RECORD_COMMIT, f, 2);
}

static void on_health(void *arg, const char *reason)
{
    field f[] = { text(reason) };
    queue(arg, RECORD_HEALTH, f, 1);
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
    ts_buf_free(&relay->aligned);
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

/* The next field of a record: its bytes (NULL when empty) and length. */
static const void *next_field(const unsigned char **p, size_t *len)
{
    memcpy(len, *p, sizeof *len);
    const unsigned char *data = *p + sizeof *len;
    *p = data + *len;
    return *len > 0 ? data : NULL;
}

/* A scalar field, copied out (the queue keeps no alignment). */
static void next_value(const unsigned char **p, void *out, size_t size)
{
    size_t len;
    const void *data = next_field(p, &len);
    memset(out, 0, size);
    memcpy(out, data, len < size ? len : size);
}

static void replay(ts_observer_relay *r, const unsigned char **p)
{
    const ts_observer *t = r->target;
    size_t len, len2;
    int kind = *(*p)++;
    if (kind == RECORD_LATENCY || kind == RECORD_COMMIT) {
        size_t index;
        double seconds;
        if (kind == RECORD_LATENCY) {
            next_value(p, &index, sizeof index);
            next_value(p, &seconds, sizeof seconds);
            t->latency(t->arg, index, seconds);
        } else {
            next_value(p, &seconds, sizeof seconds);
            next_value(p, &index, sizeof index);
            t->commit(t->arg, seconds, index);
        }
    } else if (kind == RECORD_REJECTED) {
        int why;
        next_value(p, &why, sizeof why);
        const char *user = next_field(p, &len);
        const char *detail = next_field(p, &len2);
        t->rejected(t->arg, user, (ts_reason)why, detail);
    } else if (kind == RECORD_PUBLISHED) {
        const void *topic = next_field(p, &len);
        const void *payload = next_field(p, &len2);
        t->published(t->arg, topic, len, payload, len2);
    } else if (kind == RECORD_COMMITTED) {
        const void *bytes = next_field(p, &len);
        ts_buf_reset(&r->aligned);
        if (ts_buf_append(&r->aligned, bytes, len) == 0)
            t->committed(t->arg, (const ts_observation *)(void *)
                                     r->aligned.data,
                         len / sizeof(ts_observation));
    } else if (kind == RECORD_HEALTH) {
        t->health(t->arg, next_field(p, &len));
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
    const unsigned char *p = relay->draining.data;
    const unsigned char *end = p + relay->draining.len;
    while (p != NULL && p < end)
        replay(relay, &p);
    ts_buf_reset(&relay->draining);
}
