#include "tools/js_producer.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "drivers/jetstream/jetstream_setup.h"

/* Messages a partition may hold ready before the reader waits for it. */
#define QUEUE_LIMIT 4
/* A refused publish is made again after this long. */
#define RETRY_MS 100
/* A publish unanswered this long is made again (libnats reports its own
 * MaxWait timeout first, when it does). */
#define ACK_WAIT_MS 5000
#define WATCHDOG_MS (ACK_WAIT_MS + 1000)
/* How often the reader looks for retries that are due. */
#define SERVICE_EVERY_MS 10

typedef struct queued {
    struct queued *next;
    uint64_t number;             /* k of the message id */
    size_t len;
    size_t count;                /* updates */
    unsigned char data[];
} queued;

typedef struct partition {
    ts_replay_batch batch;       /* the reader's only */
    uint64_t next_number;        /* the reader's only */
    /* Under the lock: */
    queued *head, *tail;         /* head: the oldest unacknowledged */
    size_t queued;
    int in_flight;               /* head published, answer pending */
    int64_t sent_ms;
    int64_t retry_at_ms;         /* head refused: publish again then */
    int64_t failing_since_ms;    /* head's first refusal; 0: none */
} partition;

struct ts_js_producer {
    jsCtx *js;
    uint32_t count;
    partition *parts;
    char run[64];
    int64_t last_service_ms;
    /* Under the lock: */
    int open;
    int busy;                    /* callbacks and publishes under way */
    ts_js_producer_stats stats;
    char last_error[200];
};

/* The acknowledgement callbacks reach the producer through this static
 * object, so a late callback never touches freed memory: it finds the
 * producer closed and returns. One producer per process (a CLI). */
static ts_js_producer the_producer;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Under the lock: the head was refused or went unanswered. */
static void note_failure(ts_js_producer *pr, partition *q, int64_t now,
                         const char *why)
{
    q->in_flight = 0;
    q->retry_at_ms = now + RETRY_MS;
    if (q->failing_since_ms == 0)
        q->failing_since_ms = now;
    snprintf(pr->last_error, sizeof pr->last_error, "%s", why);
}

static void message_id(const ts_js_producer *pr, uint32_t p, uint64_t k,
                       char *id, size_t len)
{
    snprintf(id, len, "%s.%" PRIu32 ".%" PRIu64, pr->run, p, k);
}

/* Publishes partition p's head when it is due and nothing of p is
 * unanswered. */
static void publish(ts_js_producer *pr, uint32_t p)
{
    partition *q = &pr->parts[p];
    int64_t now = now_ms();
    natsMsg *msg = NULL;
    pthread_mutex_lock(&lock);
    if (!pr->open || q->head == NULL || q->in_flight ||
        q->retry_at_ms > now) {
        pthread_mutex_unlock(&lock);
        return;
    }
    char subject[64], id[96];
    snprintf(subject, sizeof subject, TS_JS_SUBJECT_IN ".%" PRIu32, p);
    message_id(pr, p, q->head->number, id, sizeof id);
    /* Copied under the lock: an answer to an earlier copy may free the
     * head as soon as the lock is released. */
    natsStatus s = natsMsg_Create(&msg, subject, NULL,
                                  (const char *)q->head->data,
                                  (int)q->head->len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(msg, "Nats-Msg-Id", id);
    if (s != NATS_OK) {
        note_failure(pr, q, now, natsStatus_GetText(s));
        pthread_mutex_unlock(&lock);
        natsMsg_Destroy(msg);
        return;
    }
    if (q->failing_since_ms != 0)
        pr->stats.resent++;
    q->in_flight = 1;
    q->sent_ms = now;
    pr->busy++;
    pthread_mutex_unlock(&lock);

    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = ACK_WAIT_MS;
    s = js_PublishMsgAsync(pr->js, &msg, &po);
    natsMsg_Destroy(msg);

    pthread_mutex_lock(&lock);
    if (s != NATS_OK && q->in_flight)
        note_failure(pr, q, now_ms(), natsStatus_GetText(s));
    pr->busy--;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

/* "<run>.<p>.<k>" of this run: 0 with p and k. */
static int parse_id(const ts_js_producer *pr, const char *id, uint32_t *p,
                    uint64_t *k)
{
    size_t run_len = strlen(pr->run);
    if (id == NULL || strncmp(id, pr->run, run_len) != 0 ||
        id[run_len] != '.')
        return -1;
    unsigned long long part, number;
    char tail;
    if (sscanf(id + run_len + 1, "%llu.%llu%c", &part, &number, &tail) != 2 ||
        part >= pr->count)
        return -1;
    *p = (uint32_t)part;
    *k = number;
    return 0;
}

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae,
                   void *closure)
{
    (void)js;
    ts_js_producer *pr = closure;
    const char *id = NULL;
    uint32_t p = 0;
    uint64_t k = 0;
    int next = 0;
    pthread_mutex_lock(&lock);
    if (pr->open && natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK &&
        parse_id(pr, id, &p, &k) == 0) {
        partition *q = &pr->parts[p];
        /* Only the head can be answered: nothing after it was sent. An
         * answer to an older copy of the head counts like the newest's. */
        if (q->head != NULL && q->head->number == k) {
            if (pa != NULL) {
                queued *done = q->head;
                q->head = done->next;
                if (q->head == NULL)
                    q->tail = NULL;
                q->queued--;
                pr->stats.messages++;
                pr->stats.updates += done->count;
                free(done);
                q->in_flight = 0;
                q->retry_at_ms = 0;
                q->failing_since_ms = 0;
                next = q->head != NULL;
            } else if (q->in_flight) {
                char why[160];
                snprintf(why, sizeof why, "%s%s%s",
                         natsStatus_GetText(pae->Err),
                         pae->ErrText != NULL ? ": " : "",
                         pae->ErrText != NULL ? pae->ErrText : "");
                note_failure(pr, q, now_ms(), why);
            }
            pthread_cond_broadcast(&changed);
        }
    }
    if (next)
        pr->busy++;
    pthread_mutex_unlock(&lock);
    natsMsg_Destroy(msg);
    if (next) {
        /* The partition moves on at the pace of its acknowledgements,
         * whatever the reader is doing. */
        publish(pr, p);
        pthread_mutex_lock(&lock);
        pr->busy--;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
    }
}

/* Publishes what is due again; -1 with err when a partition has failed
 * for TS_JS_PRODUCER_GIVE_UP_MS. */
static int service(ts_js_producer *pr, char *err, size_t errlen)
{
    int64_t now = now_ms();
    pr->last_service_ms = now;
    for (uint32_t p = 0; p < pr->count; p++) {
        partition *q = &pr->parts[p];
        pthread_mutex_lock(&lock);
        if (q->in_flight && now - q->sent_ms > WATCHDOG_MS)
            note_failure(pr, q, now, "no acknowledgement");
        int due = q->head != NULL && !q->in_flight && q->retry_at_ms <= now;
        int failed = q->failing_since_ms != 0 &&
                     now - q->failing_since_ms > TS_JS_PRODUCER_GIVE_UP_MS;
        if (failed)
            snprintf(err, errlen, "partition %" PRIu32 ": no message "
                     "stored for %d s (last: %s)", p,
                     TS_JS_PRODUCER_GIVE_UP_MS / 1000, pr->last_error);
        pthread_mutex_unlock(&lock);
        if (failed)
            return -1;
        if (due)
            publish(pr, p);
    }
    return 0;
}

/* Waits for an acknowledgement (or a retry to become due), at most
 * `ms`. */
static void wait_for_change(int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&lock);
    pthread_cond_timedwait(&changed, &lock, &until);
    pthread_mutex_unlock(&lock);
}

/* Moves the batch's ready message to the end of partition p's queue,
 * after waiting for room. */
static int enqueue(ts_js_producer *pr, uint32_t p, char *err, size_t errlen)
{
    partition *q = &pr->parts[p];
    for (;;) {
        pthread_mutex_lock(&lock);
        size_t held = q->queued;
        pthread_mutex_unlock(&lock);
        if (held < QUEUE_LIMIT)
            break;
        if (service(pr, err, errlen) != 0)
            return -1;
        wait_for_change(RETRY_MS);
    }
    ts_replay_batch *b = &q->batch;
    queued *m = malloc(sizeof *m + b->ready_len);
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->next = NULL;
    m->number = q->next_number++;
    m->len = b->ready_len;
    m->count = b->ready_count;
    memcpy(m->data, b->payload.data, b->ready_len);
    ts_replay_batch_sent(b);
    pthread_mutex_lock(&lock);
    if (q->tail != NULL)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->queued++;
    pthread_mutex_unlock(&lock);
    publish(pr, p);
    return 0;
}

ts_js_producer *ts_js_producer_new(natsConnection *nc, uint32_t partitions,
                                   size_t max_updates, size_t max_bytes,
                                   const char *run, char *err, size_t errlen)
{
    ts_js_producer *pr = &the_producer;
    pthread_mutex_lock(&lock);
    int taken = pr->open || pr->parts != NULL;
    pthread_mutex_unlock(&lock);
    if (taken || partitions == 0) {
        snprintf(err, errlen, "one producer at a time");
        return NULL;
    }
    memset(pr, 0, sizeof *pr);
    pr->count = partitions;
    snprintf(pr->run, sizeof pr->run, "%s", run);
    pr->parts = calloc(partitions, sizeof *pr->parts);
    if (pr->parts == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (uint32_t p = 0; p < partitions; p++) {
        pr->parts[p].batch.max_updates = max_updates;
        pr->parts[p].batch.max_bytes = max_bytes;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = TS_JS_WAIT_MS;
    /* One per partition, and copies of a head sent again. */
    jo.PublishAsync.MaxPending = 4 * (int64_t)partitions + 64;
    jo.PublishAsync.AckHandler = on_ack;
    jo.PublishAsync.AckHandlerClosure = pr;
    natsStatus s = natsConnection_JetStream(&pr->js, nc, &jo);
    if (s != NATS_OK) {
        snprintf(err, errlen, "jetstream context: %s", natsStatus_GetText(s));
        free(pr->parts);
        pr->parts = NULL;
        return NULL;
    }
    pthread_mutex_lock(&lock);
    pr->open = 1;
    pthread_mutex_unlock(&lock);
    return pr;
}

ts_replay_batch *ts_js_producer_batch(ts_js_producer *pr, uint32_t p)
{
    return &pr->parts[p].batch;
}

int ts_js_producer_added(ts_js_producer *pr, uint32_t p, size_t before,
                         size_t *update_bytes, char *err, size_t errlen)
{
    int rc = ts_replay_batch_added(&pr->parts[p].batch, before, update_bytes);
    if (rc == TS_BATCH_SEND && enqueue(pr, p, err, errlen) != 0)
        return -1;
    if (now_ms() - pr->last_service_ms >= SERVICE_EVERY_MS &&
        service(pr, err, errlen) != 0)
        return -1;
    return rc;
}

int ts_js_producer_finish(ts_js_producer *pr, char *err, size_t errlen)
{
    for (uint32_t p = 0; p < pr->count; p++)
        if (ts_replay_batch_close(&pr->parts[p].batch) == TS_BATCH_SEND &&
            enqueue(pr, p, err, errlen) != 0)
            return -1;
    for (;;) {
        size_t waiting = 0;
        pthread_mutex_lock(&lock);
        for (uint32_t p = 0; p < pr->count; p++)
            waiting += pr->parts[p].queued;
        pthread_mutex_unlock(&lock);
        if (waiting == 0)
            return 0;
        if (service(pr, err, errlen) != 0)
            return -1;
        wait_for_change(RETRY_MS);
    }
}

ts_js_producer_stats ts_js_producer_get_stats(ts_js_producer *pr)
{
    pthread_mutex_lock(&lock);
    ts_js_producer_stats stats = pr->stats;
    pthread_mutex_unlock(&lock);
    return stats;
}

void ts_js_producer_free(ts_js_producer *pr)
{
    if (pr == NULL)
        return;
    pthread_mutex_lock(&lock);
    pr->open = 0;
    while (pr->busy > 0)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    /* Copies still unanswered are taken back, so no callback comes for
     * them; one that comes anyway finds the producer closed. */
    natsMsgList pending = { 0 };
    if (js_PublishAsyncGetPendingList(&pending, pr->js) == NATS_OK)
        natsMsgList_Destroy(&pending);
    jsCtx_Destroy(pr->js);
    for (uint32_t p = 0; p < pr->count; p++) {
        partition *q = &pr->parts[p];
        while (q->head != NULL) {
            queued *m = q->head;
            q->head = m->next;
            free(m);
        }
        ts_replay_batch_free(&q->batch);
    }
    free(pr->parts);
    pthread_mutex_lock(&lock);
    pr->parts = NULL;
    pr->js = NULL;
    pthread_mutex_unlock(&lock);
}
