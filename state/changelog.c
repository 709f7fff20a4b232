#include "state/changelog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

static const unsigned char MAGIC[4] = { 'T', 'S', 'C', 'L' };

/* ------------------------------------------------------------ writing */

static int put_u16(ts_buf *buf, size_t v)
{
    if (v > 0xffff)
        return -1;
    unsigned char b[2] = { (unsigned char)v, (unsigned char)(v >> 8) };
    return ts_buf_append(buf, b, 2);
}

static int put_u32(ts_buf *buf, size_t v)
{
    if (v > 0xffffffffu)
        return -1;
    unsigned char b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return ts_buf_append(buf, b, 4);
}

static int put_u64(ts_buf *buf, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return ts_buf_append(buf, b, 8);
}

void ts_changelog_builder_reset(ts_changelog_builder *builder)
{
    ts_buf_reset(&builder->users);
    ts_buf_reset(&builder->outcomes);
    builder->n_users = 0;
    builder->n_outcomes = 0;
}

void ts_changelog_builder_free(ts_changelog_builder *builder)
{
    ts_buf_free(&builder->users);
    ts_buf_free(&builder->outcomes);
    builder->n_users = 0;
    builder->n_outcomes = 0;
}

int ts_changelog_add_user(ts_changelog_builder *builder, const char *id,
                          size_t id_len, const void *record, size_t len)
{
    size_t before = builder->users.len;
    if (put_u16(&builder->users, id_len) != 0 ||
        ts_buf_append(&builder->users, id, id_len) != 0 ||
        put_u32(&builder->users, len) != 0 ||
        ts_buf_append(&builder->users, record, len) != 0) {
        builder->users.len = before;
        return -1;
    }
    builder->n_users++;
    return 0;
}

int ts_changelog_add_outcome(ts_changelog_builder *builder,
                             uint64_t input_seq, uint32_t index,
                             const char *subject, size_t subject_len,
                             const void *payload, size_t len)
{
    size_t before = builder->outcomes.len;
    if (put_u64(&builder->outcomes, input_seq) != 0 ||
        put_u32(&builder->outcomes, index) != 0 ||
        put_u16(&builder->outcomes, subject_len) != 0 ||
        ts_buf_append(&builder->outcomes, subject, subject_len) != 0 ||
        put_u32(&builder->outcomes, len) != 0 ||
        ts_buf_append(&builder->outcomes, payload, len) != 0) {
        builder->outcomes.len = before;
        return -1;
    }
    builder->n_outcomes++;
    return 0;
}

static size_t header_size(const ts_changelog_header *header)
{
    return sizeof MAGIC + 2 + 2 + header->owner_len + 8 + 8;
}

size_t ts_changelog_size(const ts_changelog_builder *builder,
                         const ts_changelog_header *header)
{
    return header_size(header) + 4 + builder->users.len + 4 +
           builder->outcomes.len;
}

int ts_changelog_finish(const ts_changelog_builder *builder,
                        const ts_changelog_header *header, ts_buf *out)
{
    ts_buf_reset(out);
    unsigned char kind[2] = { TS_CHANGELOG_VERSION, (unsigned char)header->kind };
    if (ts_buf_reserve(out, ts_changelog_size(builder, header)) != 0 ||
        ts_buf_append(out, MAGIC, sizeof MAGIC) != 0 ||
        ts_buf_append(out, kind, 2) != 0 ||
        put_u16(out, header->owner_len) != 0 ||
        ts_buf_append(out, header->owner, header->owner_len) != 0 ||
        put_u64(out, header->epoch) != 0 ||
        put_u64(out, header->last_input_seq) != 0 ||
        put_u32(out, builder->n_users) != 0 ||
        ts_buf_append(out, builder->users.data, builder->users.len) != 0 ||
        put_u32(out, builder->n_outcomes) != 0 ||
        ts_buf_append(out, builder->outcomes.data, builder->outcomes.len) != 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------ reading */

typedef struct reader {
    const unsigned char *p;
    size_t left;
    int bad;
} reader;

static uint64_t get_n(reader *r, int bytes)
{
    if (r->bad || r->left < (size_t)bytes) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    r->left -= (size_t)bytes;
    return v;
}

static const void *get_bytes(reader *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    const void *at = r->p;
    r->p += n;
    r->left -= n;
    return at;
}

/* One pass over the body; with visit 0 it only checks. */
static int walk(reader *r, const ts_changelog_visitor *visitor, int visit)
{
    uint32_t n_users = (uint32_t)get_n(r, 4);
    for (uint32_t i = 0; i < n_users && !r->bad; i++) {
        size_t id_len = (size_t)get_n(r, 2);
        const char *id = get_bytes(r, id_len);
        size_t len = (size_t)get_n(r, 4);
        const void *record = get_bytes(r, len);
        if (!r->bad && visit && visitor != NULL && visitor->user != NULL) {
            int rc = visitor->user(visitor->ctx, id, id_len, record, len);
            if (rc != 0)
                return rc;
        }
    }
    uint32_t n_outcomes = (uint32_t)get_n(r, 4);
    for (uint32_t i = 0; i < n_outcomes && !r->bad; i++) {
        uint64_t seq = get_n(r, 8);
        uint32_t index = (uint32_t)get_n(r, 4);
        size_t subject_len = (size_t)get_n(r, 2);
        const char *subject = get_bytes(r, subject_len);
        size_t len = (size_t)get_n(r, 4);
        const void *payload = get_bytes(r, len);
        if (!r->bad && visit && visitor != NULL && visitor->outcome != NULL) {
            int rc = visitor->outcome(visitor->ctx, seq, index, subject,
                                      subject_len, payload, len);
            if (rc != 0)
                return rc;
        }
    }
    if (r->bad || r->left != 0)
        return -1;
    return 0;
}

int ts_changelog_decode(const void *bytes, size_t len,
                        ts_changelog_header *header,
                        const ts_changelog_visitor *visitor)
{
    reader r = { bytes, len, 0 };
    const void *magic = get_bytes(&r, sizeof MAGIC);
    unsigned version = (unsigned)get_n(&r, 1);
    unsigned kind = (unsigned)get_n(&r, 1);
    if (r.bad || memcmp(magic, MAGIC, sizeof MAGIC) != 0 ||
        version != TS_CHANGELOG_VERSION || kind < TS_CHANGELOG_DELTA ||
        kind > TS_CHANGELOG_FENCE)
        return -1;
    header->kind = (ts_changelog_kind)kind;
    header->owner_len = (size_t)get_n(&r, 2);
    header->owner = get_bytes(&r, header->owner_len);
    header->epoch = get_n(&r, 8);
    header->last_input_seq = get_n(&r, 8);
    if (r.bad)
        return -1;
    reader body = r;
    if (walk(&body, NULL, 0) != 0)
        return -1;
    return walk(&r, visitor, 1);
}

/* ---------------------------------------------------------- naming */

uint32_t ts_partition_of(const char *user_id, size_t len, uint32_t partitions)
{
    uint32_t hash = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        hash ^= (unsigned char)user_id[i];
        hash *= 16777619u;
    }
    return partitions > 0 ? hash % partitions : 0;
}

int ts_changelog_msg_id(char *buf, size_t size, uint32_t partition,
                        uint64_t input_seq, uint32_t index)
{
    return snprintf(buf, size, "%u.%llu.%u", partition,
                    (unsigned long long)input_seq, index);
}

size_t ts_changelog_output_subject(const char *topic, size_t topic_len,
                                   char *buf, size_t size)
{
    size_t prefix = strlen(TS_TOPIC_SANITIZED_PREFIX);
    int n;
    if (topic_len > prefix &&
        memcmp(topic, TS_TOPIC_SANITIZED_PREFIX, prefix) == 0)
        n = snprintf(buf, size, "tracesan.out.%.*s",
                     (int)(topic_len - prefix), topic + prefix);
    else if (topic_len == strlen(TS_TOPIC_REJECTED) &&
             memcmp(topic, TS_TOPIC_REJECTED, topic_len) == 0)
        n = snprintf(buf, size, "tracesan.rejected");
    else if (topic_len == strlen(TS_CHANGELOG_TOPIC_BATCH) &&
             memcmp(topic, TS_CHANGELOG_TOPIC_BATCH, topic_len) == 0)
        n = snprintf(buf, size, "tracesan.batch");
    else
        n = snprintf(buf, size, "tracesan.other");
    if (n < 0 || size == 0)
        return 0;
    return (size_t)n < size ? (size_t)n : size - 1;
}

size_t ts_changelog_output_topic(const char *subject, size_t subject_len,
                                 char *buf, size_t size)
{
    static const char out[] = "tracesan.out.";
    static const char rest[] = "tracesan.";
    int n;
    if (subject_len > sizeof out - 1 &&
        memcmp(subject, out, sizeof out - 1) == 0)
        n = snprintf(buf, size, "%s%.*s", TS_TOPIC_SANITIZED_PREFIX,
                     (int)(subject_len - (sizeof out - 1)),
                     subject + sizeof out - 1);
    else if (subject_len > sizeof rest - 1 &&
             memcmp(subject, rest, sizeof rest - 1) == 0)
        n = snprintf(buf, size, "%.*s",
                     (int)(subject_len - (sizeof rest - 1)),
                     subject + sizeof rest - 1);
    else
        n = snprintf(buf, size, "%.*s", (int)subject_len, subject);
    if (n < 0 || size == 0)
        return 0;
    return (size_t)n < size ? (size_t)n : size - 1;
}

/* ------------------------------------------------------- record map */

typedef struct map_entry {
    UT_hash_handle hh;
    void *record;
    size_t len;
    size_t id_len;
    char id[];
} map_entry;

struct ts_record_map {
    map_entry *head;
};

ts_record_map *ts_record_map_new(void)
{
    return calloc(1, sizeof(ts_record_map));
}

void ts_record_map_clear(ts_record_map *map)
{
    map_entry *entry, *tmp;
    HASH_ITER(hh, map->head, entry, tmp) {
        HASH_DEL(map->head, entry);
        free(entry->record);
        free(entry);
    }
}

void ts_record_map_free(ts_record_map *map)
{
    if (map == NULL)
        return;
    ts_record_map_clear(map);
    free(map);
}

int ts_record_map_put(ts_record_map *map, const char *id, size_t id_len,
                      const void *record, size_t len)
{
    void *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return -1;
    memcpy(copy, record, len);
    map_entry *entry = NULL;
    HASH_FIND(hh, map->head, id, id_len, entry);
    if (entry == NULL) {
        entry = calloc(1, sizeof *entry + id_len + 1);
        if (entry == NULL) {
            free(copy);
            return -1;
        }
        memcpy(entry->id, id, id_len);
        entry->id_len = id_len;
        HASH_ADD(hh, map->head, id[0], id_len, entry);
    } else {
        free(entry->record);
    }
    entry->record = copy;
    entry->len = len;
    return 0;
}

int ts_record_map_get(const ts_record_map *map, const char *id,
                      size_t id_len, const void **record, size_t *len)
{
    map_entry *entry = NULL;
    HASH_FIND(hh, map->head, id, id_len, entry);
    if (entry == NULL)
        return 0;
    *record = entry->record;
    *len = entry->len;
    return 1;
}

size_t ts_record_map_count(const ts_record_map *map)
{
    return HASH_COUNT(map->head);
}

int ts_record_map_each(const ts_record_map *map,
                       int (*visit)(void *ctx, const char *id, size_t id_len,
                                    const void *record, size_t len),
                       void *ctx)
{
    map_entry *entry, *tmp;
    HASH_ITER(hh, map->head, entry, tmp) {
        int rc = visit(ctx, entry->id, entry->id_len, entry->record,
                       entry->len);
        if (rc != 0)
            return rc;
    }
    return 0;
}
