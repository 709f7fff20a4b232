#include "state/changelog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

static const unsigned char MAGIC[4] = { 'T', 'S', 'C', 'L' };

/* ------------------------------------------------------------ writing */

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void set_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* v as `bytes` little-endian bytes; -1 when it does not fit. */
static int put_le(ts_buf *buf, uint64_t v, int bytes)
{
    if (bytes < 8 && v >> (8 * bytes) != 0)
        return -1;
    unsigned char b[8];
    set_le(b, v, bytes);
    return ts_buf_append(buf, b, (size_t)bytes);
}

static int put_u16(ts_buf *buf, size_t v) { return put_le(buf, v, 2); }
static int put_u32(ts_buf *buf, size_t v) { return put_le(buf, v, 4); }
static int put_u64(ts_buf *buf, uint64_t v) { return put_le(buf, v, 8); }

void ts_changelog_builder_reset(ts_changelog_builder *builder)
{
    ts_buf_reset(&builder->users);
    ts_buf_reset(&builder->outcomes);
    ts_buf_reset(&builder->producers);
    builder->n_users = 0;
    builder->n_outcomes = 0;
    builder->n_producers = 0;
    builder->last_producer = 0;
}

void ts_changelog_builder_free(ts_changelog_builder *builder)
{
    ts_buf_free(&builder->users);
    ts_buf_free(&builder->outcomes);
    ts_buf_free(&builder->producers);
    builder->n_users = 0;
    builder->n_outcomes = 0;
    builder->n_producers = 0;
    builder->last_producer = 0;
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

int ts_changelog_add_producer(ts_changelog_builder *builder, const char *id,
                              size_t id_len, uint64_t number,
                              uint64_t input_seq)
{
    if (id_len > TS_CHANGELOG_PRODUCER_MAX)
        return -1;
    if (builder->n_producers > 0) {
        unsigned char *last = builder->producers.data +
                              builder->last_producer;
        if ((size_t)le(last, 2) == id_len &&
            memcmp(last + 2, id, id_len) == 0) {
            if (number > le(last + 2 + id_len, 8))
                set_le(last + 2 + id_len, number, 8);
            set_le(last + 10 + id_len, input_seq, 8);
            return 0;
        }
    }
    size_t before = builder->producers.len;
    if (put_u16(&builder->producers, id_len) != 0 ||
        ts_buf_append(&builder->producers, id, id_len) != 0 ||
        put_u64(&builder->producers, number) != 0 ||
        put_u64(&builder->producers, input_seq) != 0) {
        builder->producers.len = before;
        return -1;
    }
    builder->last_producer = before;
    builder->n_producers++;
    return 0;
}

int ts_changelog_builder_producer(const ts_changelog_builder *builder,
                                  const char *id, size_t id_len,
                                  uint64_t *number)
{
    int found = 0;
    for (size_t at = 0; at < builder->producers.len;) {
        const unsigned char *e = builder->producers.data + at;
        size_t len = (size_t)le(e, 2);
        if (len == id_len && memcmp(e + 2, id, id_len) == 0) {
            uint64_t n = le(e + 2 + len, 8);
            if (!found || n > *number)
                *number = n;
            found = 1;
        }
        at += 2 + len + 16;
    }
    return found;
}

static size_t header_size(const ts_changelog_header *header)
{
    return sizeof MAGIC + 2 + 2 + header->owner_len + 8 + 8;
}

size_t ts_changelog_size(const ts_changelog_builder *builder,
                         const ts_changelog_header *header)
{
    return header_size(header) + 4 + builder->users.len + 4 +
           builder->outcomes.len + 4 + builder->producers.len;
}

/* One record: the header with `kind`, then the given runs of user and
 * outcome entries. */
static int put_record(ts_buf *out, const ts_changelog_header *header,
                      ts_changelog_kind kind, const unsigned char *users,
                      size_t users_len, size_t n_users,
                      const unsigned char *outcomes, size_t outcomes_len,
                      size_t n_outcomes, const ts_buf *producers,
                      size_t n_producers)
{
    unsigned char version_kind[2] = { TS_CHANGELOG_VERSION,
                                      (unsigned char)kind };
    size_t producers_len = producers != NULL ? producers->len : 0;
    if (ts_buf_reserve(out, header_size(header) + 12 + users_len +
                                outcomes_len + producers_len) != 0 ||
        ts_buf_append(out, MAGIC, sizeof MAGIC) != 0 ||
        ts_buf_append(out, version_kind, 2) != 0 ||
        put_u16(out, header->owner_len) != 0 ||
        ts_buf_append(out, header->owner, header->owner_len) != 0 ||
        put_u64(out, header->epoch) != 0 ||
        put_u64(out, header->last_input_seq) != 0 ||
        put_u32(out, n_users) != 0 ||
        ts_buf_append(out, users, users_len) != 0 ||
        put_u32(out, n_outcomes) != 0 ||
        ts_buf_append(out, outcomes, outcomes_len) != 0 ||
        put_u32(out, n_producers) != 0 ||
        (producers_len > 0 &&
         ts_buf_append(out, producers->data, producers_len) != 0))
        return -1;
    return 0;
}

int ts_changelog_finish(const ts_changelog_builder *builder,
                        const ts_changelog_header *header, ts_buf *out)
{
    ts_buf_reset(out);
    return put_record(out, header, header->kind, builder->users.data,
                      builder->users.len, builder->n_users,
                      builder->outcomes.data, builder->outcomes.len,
                      builder->n_outcomes, &builder->producers,
                      builder->n_producers);
}

/* ------------------------------------------------------------ splitting */

/* Bytes of the user or outcome entry at p (the builder wrote it, so its
 * lengths are whole). */
static size_t user_entry_size(const unsigned char *p)
{
    size_t id_len = (size_t)le(p, 2);
    return 2 + id_len + 4 + (size_t)le(p + 2 + id_len, 4);
}

static size_t outcome_entry_size(const unsigned char *p)
{
    size_t subject_len = (size_t)le(p + 12, 2);
    return 14 + subject_len + 4 + (size_t)le(p + 14 + subject_len, 4);
}

/* A record of the split, preceded by its length. */
typedef struct split_state {
    const ts_changelog_header *header;
    const ts_changelog_builder *builder;
    ts_buf *out;
    size_t n_records;
    const unsigned char *users, *outcomes;   /* the run being filled */
    size_t users_len, n_users, outcomes_len, n_outcomes;
} split_state;

/* The closing record (not a PART) carries every producer entry. */
static int emit_split(split_state *st, ts_changelog_kind kind)
{
    size_t at = st->out->len;
    uint32_t len = 0;
    int closing = kind != TS_CHANGELOG_PART;
    if (ts_buf_append(st->out, &len, sizeof len) != 0 ||
        put_record(st->out, st->header, kind, st->users, st->users_len,
                   st->n_users, st->outcomes, st->outcomes_len,
                   st->n_outcomes, closing ? &st->builder->producers : NULL,
                   closing ? st->builder->n_producers : 0) != 0)
        return -1;
    len = (uint32_t)(st->out->len - at - sizeof len);
    memcpy(st->out->data + at, &len, sizeof len);
    st->n_records++;
    st->users += st->users_len;
    st->outcomes += st->outcomes_len;
    st->users_len = st->n_users = st->outcomes_len = st->n_outcomes = 0;
    return 0;
}

int ts_changelog_finish_split(const ts_changelog_builder *builder,
                              const ts_changelog_header *header,
                              size_t max_bytes, ts_buf *out,
                              size_t *n_records)
{
    ts_buf_reset(out);
    *n_records = 0;
    split_state st = { header, builder, out, 0, builder->users.data,
                       builder->outcomes.data, 0, 0, 0, 0 };
    size_t fixed = header_size(header) + 12;
    if (ts_changelog_size(builder, header) > max_bytes) {
        if (fixed >= max_bytes)
            return -1;
        size_t room = max_bytes - fixed;
        /* Users, then outcomes, each run as long as the room allows. */
        for (size_t at = 0; at < builder->users.len;) {
            size_t e = user_entry_size(builder->users.data + at);
            if (e > room)
                return -1;
            if (st.users_len + e > room && emit_split(&st, TS_CHANGELOG_PART))
                return -1;
            st.users_len += e;
            st.n_users++;
            at += e;
        }
        for (size_t at = 0; at < builder->outcomes.len;) {
            size_t e = outcome_entry_size(builder->outcomes.data + at);
            if (e > room)
                return -1;
            if (st.users_len + st.outcomes_len + e > room &&
                emit_split(&st, TS_CHANGELOG_PART) != 0)
                return -1;
            st.outcomes_len += e;
            st.n_outcomes++;
            at += e;
        }
        /* The producers close the chain, with what is left. */
        if (builder->producers.len > room)
            return -1;
        if (st.users_len + st.outcomes_len + builder->producers.len > room &&
            emit_split(&st, TS_CHANGELOG_PART) != 0)
            return -1;
    } else {
        st.users_len = builder->users.len;
        st.n_users = builder->n_users;
        st.outcomes_len = builder->outcomes.len;
        st.n_outcomes = builder->n_outcomes;
    }
    if (emit_split(&st, header->kind) != 0)
        return -1;
    *n_records = st.n_records;
    return 0;
}

int ts_changelog_next_split(const ts_buf *records, size_t *at,
                            const void **record, size_t *len)
{
    uint32_t n;
    if (*at + sizeof n > records->len)
        return 0;
    memcpy(&n, records->data + *at, sizeof n);
    *record = records->data + *at + sizeof n;
    *len = n;
    *at += sizeof n + n;
    return 1;
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
static int walk(reader *r, unsigned version,
                const ts_changelog_visitor *visitor, int visit)
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
    uint32_t n_producers = version >= 2 ? (uint32_t)get_n(r, 4) : 0;
    for (uint32_t i = 0; i < n_producers && !r->bad; i++) {
        size_t id_len = (size_t)get_n(r, 2);
        const char *id = get_bytes(r, id_len);
        uint64_t number = get_n(r, 8);
        uint64_t input_seq = get_n(r, 8);
        if (!r->bad && visit && visitor != NULL &&
            visitor->producer != NULL) {
            int rc = visitor->producer(visitor->ctx, id, id_len, number,
                                       input_seq);
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
        version < 1 || version > TS_CHANGELOG_VERSION ||
        kind < TS_CHANGELOG_DELTA ||
        kind > TS_CHANGELOG_PART)
        return -1;
    header->kind = (ts_changelog_kind)kind;
    header->owner_len = (size_t)get_n(&r, 2);
    header->owner = get_bytes(&r, header->owner_len);
    header->epoch = get_n(&r, 8);
    header->last_input_seq = get_n(&r, 8);
    if (r.bad)
        return -1;
    reader body = r;
    if (walk(&body, version, NULL, 0) != 0)
        return -1;
    return walk(&r, version, visitor, 1);
}

/* ---------------------------------------------------------- naming */

const char *ts_changelog_kind_name(ts_changelog_kind kind)
{
    switch (kind) {
    case TS_CHANGELOG_DELTA: return "delta";
    case TS_CHANGELOG_SNAPSHOT: return "snapshot";
    case TS_CHANGELOG_FENCE: return "fence";
    case TS_CHANGELOG_PART: return "part";
    }
    return "?";
}

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

void ts_record_map_remove(ts_record_map *map, const char *id, size_t id_len)
{
    map_entry *entry = NULL;
    HASH_FIND(hh, map->head, id, id_len, entry);
    if (entry == NULL)
        return;
    HASH_DEL(map->head, entry);
    free(entry->record);
    free(entry);
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

/* ------------------------------------------------------------ replica */

int ts_changelog_replica_init(ts_changelog_replica *replica)
{
    memset(replica, 0, sizeof *replica);
    replica->records = ts_record_map_new();
    replica->producers = ts_record_map_new();
    return replica->records != NULL && replica->producers != NULL ? 0 : -1;
}

void ts_changelog_replica_free(ts_changelog_replica *replica)
{
    ts_record_map_free(replica->records);
    ts_record_map_free(replica->producers);
    ts_buf_free(&replica->chain);
    ts_buf_free(&replica->closed);
    memset(replica, 0, sizeof *replica);
}

void ts_changelog_replica_reset(ts_changelog_replica *replica)
{
    ts_record_map_clear(replica->records);
    ts_record_map_clear(replica->producers);
    ts_buf_reset(&replica->chain);
    ts_buf_reset(&replica->closed);
    replica->changelog_seq = 0;
    replica->last_input_seq = 0;
    replica->records_since_snapshot = 0;
}

static int replica_user(void *arg, const char *id, size_t id_len,
                        const void *record, size_t len)
{
    ts_changelog_replica *replica = arg;
    return ts_record_map_put(replica->records, id, id_len, record, len) == 0
               ? 0 : 1;
}

/* A producer's newer number replaces its older one (an entry carries the
 * highest number of its group). */
static int replica_producer(void *arg, const char *id, size_t id_len,
                            uint64_t number, uint64_t input_seq)
{
    ts_changelog_replica *replica = arg;
    const void *have;
    size_t have_len;
    if (ts_record_map_get(replica->producers, id, id_len, &have,
                          &have_len) == 1 && have_len == 16 &&
        le(have, 8) > number)
        return 0;
    unsigned char value[16];
    set_le(value, number, 8);
    set_le(value + 8, input_seq, 8);
    return ts_record_map_put(replica->producers, id, id_len, value,
                             sizeof value) == 0 ? 0 : 1;
}

typedef struct oldest_producer {
    uint64_t input_seq;
    char id[TS_CHANGELOG_PRODUCER_MAX];
    size_t id_len;
    int found;
} oldest_producer;

static int find_oldest(void *arg, const char *id, size_t id_len,
                       const void *value, size_t len)
{
    oldest_producer *o = arg;
    uint64_t at = len == 16 ? le((const unsigned char *)value + 8, 8) : 0;
    if (id_len <= sizeof o->id && (!o->found || at < o->input_seq)) {
        o->input_seq = at;
        memcpy(o->id, id, id_len);
        o->id_len = id_len;
        o->found = 1;
    }
    return 0;
}

/* Past the bound the producer heard from longest ago goes: every copy of
 * the partition applies the same records, so every copy forgets the
 * same one. */
static void bound_producers(ts_changelog_replica *replica)
{
    while (ts_record_map_count(replica->producers) >
           TS_CHANGELOG_MAX_PRODUCERS) {
        oldest_producer o = { 0 };
        ts_record_map_each(replica->producers, find_oldest, &o);
        if (!o.found)
            return;
        ts_record_map_remove(replica->producers, o.id, o.id_len);
    }
}

static int apply_users(ts_changelog_replica *replica, const void *bytes,
                       size_t len, uint64_t seq, uint64_t last_input_seq)
{
    ts_changelog_header header;
    ts_changelog_visitor visitor = { replica, replica_user, NULL,
                                     replica_producer };
    uint64_t pair[2] = { seq, last_input_seq };
    if (ts_changelog_decode(bytes, len, &header, &visitor) != 0 ||
        ts_buf_append(&replica->closed, pair, sizeof pair) != 0)
        return -1;
    bound_producers(replica);
    return 0;
}

/* The open chain's parts, then the delta that closes it. */
static int close_chain(ts_changelog_replica *replica, const void *bytes,
                       size_t len, uint64_t seq, uint64_t last_input_seq)
{
    for (size_t at = 0; at + 12 <= replica->chain.len;) {
        uint64_t part_seq;
        uint32_t part_len;
        memcpy(&part_seq, replica->chain.data + at, 8);
        memcpy(&part_len, replica->chain.data + at + 8, 4);
        if (apply_users(replica, replica->chain.data + at + 12, part_len,
                        part_seq, last_input_seq) != 0)
            return -1;
        at += 12 + part_len;
    }
    ts_buf_reset(&replica->chain);
    return apply_users(replica, bytes, len, seq, last_input_seq);
}

int ts_changelog_replica_apply(ts_changelog_replica *replica,
                               const void *bytes, size_t len, uint64_t seq,
                               ts_changelog_header *header)
{
    ts_changelog_header h;
    if (ts_changelog_decode(bytes, len, &h, NULL) != 0)
        return -1;
    /* A chain is one writer's, between two of its own records: anything
     * else in between means it was abandoned. */
    if (h.kind != TS_CHANGELOG_DELTA && h.kind != TS_CHANGELOG_PART)
        ts_buf_reset(&replica->chain);
    if (replica->chain.len > 0 && h.epoch != replica->chain_epoch)
        ts_buf_reset(&replica->chain);
    int rc = 0;
    switch (h.kind) {
    case TS_CHANGELOG_PART: {
        uint32_t n = (uint32_t)len;
        replica->chain_epoch = h.epoch;
        if (ts_buf_append(&replica->chain, &seq, sizeof seq) != 0 ||
            ts_buf_append(&replica->chain, &n, sizeof n) != 0 ||
            ts_buf_append(&replica->chain, bytes, len) != 0)
            rc = -1;
        break;
    }
    case TS_CHANGELOG_DELTA:
        rc = close_chain(replica, bytes, len, seq, h.last_input_seq);
        break;
    case TS_CHANGELOG_SNAPSHOT:
        ts_record_map_clear(replica->records);
        ts_record_map_clear(replica->producers);
        ts_buf_reset(&replica->closed);
        replica->records_since_snapshot = 0;
        rc = apply_users(replica, bytes, len, seq, h.last_input_seq);
        /* Nothing before a snapshot is ever published again. */
        ts_buf_reset(&replica->closed);
        break;
    case TS_CHANGELOG_FENCE:
        break;
    }
    if (rc != 0)
        return -1;
    if (h.kind != TS_CHANGELOG_PART && h.last_input_seq > replica->last_input_seq)
        replica->last_input_seq = h.last_input_seq;
    replica->changelog_seq = seq;
    replica->records_since_snapshot++;
    if (header != NULL)
        *header = h;
    return 0;
}

int ts_changelog_replica_add_producers(ts_changelog_replica *replica,
                                       const ts_changelog_builder *builder)
{
    for (size_t at = 0; at < builder->producers.len;) {
        const unsigned char *e = builder->producers.data + at;
        size_t id_len = (size_t)le(e, 2);
        if (replica_producer(replica, (const char *)e + 2, id_len,
                             le(e + 2 + id_len, 8),
                             le(e + 10 + id_len, 8)) != 0)
            return -1;
        at += 2 + id_len + 16;
    }
    bound_producers(replica);
    return 0;
}

static int producer_into(void *arg, const char *id, size_t id_len,
                         const void *value, size_t len)
{
    if (len != 16)
        return 0;
    return ts_changelog_add_producer(arg, id, id_len, le(value, 8),
                                     le((const unsigned char *)value + 8, 8))
               != 0;
}

int ts_changelog_replica_producers_into(const ts_changelog_replica *replica,
                                        ts_changelog_builder *builder)
{
    return ts_record_map_each(replica->producers, producer_into, builder) == 0
               ? 0 : -1;
}

int ts_changelog_replica_producer(const ts_changelog_replica *replica,
                                  const char *id, size_t id_len,
                                  uint64_t *number)
{
    const void *value;
    size_t len;
    if (ts_record_map_get(replica->producers, id, id_len, &value, &len) != 1 ||
        len != 16)
        return 0;
    *number = le(value, 8);
    return 1;
}

int ts_changelog_replica_closed_above(const ts_changelog_replica *replica,
                                      uint64_t floor, ts_buf *seqs)
{
    ts_buf_reset(seqs);
    for (size_t at = 0; at + 16 <= replica->closed.len; at += 16) {
        uint64_t pair[2];
        memcpy(pair, replica->closed.data + at, sizeof pair);
        if (pair[1] > floor &&
            ts_buf_append(seqs, &pair[0], sizeof pair[0]) != 0)
            return -1;
    }
    return 0;
}
