/* The per-partition changelog of the JetStream mode (docs/scale-out.md):
 * one record per committed group, appended to subject tracesan.state.<p>
 * of the stream TRACESAN_STATE.
 *
 * A record is self-contained so that one JetStream acknowledgement makes a
 * whole group durable at once: the user records the group changed (the
 * ledger, as state/store.h encodes it), the partition's last processed
 * input sequence, and the group's encoded outcomes with the input sequence
 * and index each message id is made of. A new owner rebuilds the
 * partition from the records and republishes the outcomes of the records
 * the input consumer had not acknowledged, under the same message ids.
 *
 * Byte layout (little endian): "TSCL", version u8, kind u8, owner (u16
 * length + bytes), epoch u64, last input sequence u64, user count u32 and
 * per user id (u16 + bytes) and record (u32 + bytes), outcome count u32 and
 * per outcome input sequence u64, index u32, subject (u16 + bytes),
 * payload (u32 + bytes). No raw coordinate is in it: user records hold
 * published values only, outcomes are what is published anyway. */
#ifndef TRACESAN_STATE_CHANGELOG_H
#define TRACESAN_STATE_CHANGELOG_H

#include <stddef.h>
#include <stdint.h>

#include "wire/codec.h"

#define TS_CHANGELOG_VERSION 1u

typedef enum ts_changelog_kind {
    /* A group: changed users and its outcomes. */
    TS_CHANGELOG_DELTA = 1,
    /* Every user of the partition; written with Nats-Rollup: sub, so it
     * replaces the records before it. Has no outcomes. */
    TS_CHANGELOG_SNAPSHOT = 2,
    /* Written by a new owner before it consumes: any append of an older
     * owner after it fails its expected-last-sequence check. */
    TS_CHANGELOG_FENCE = 3,
} ts_changelog_kind;

typedef struct ts_changelog_header {
    ts_changelog_kind kind;
    const char *owner;           /* not NUL-terminated when decoded */
    size_t owner_len;
    uint64_t epoch;              /* lease revision at acquisition */
    uint64_t last_input_seq;
} ts_changelog_header;

/* A record being built: header, then users, then outcomes, in that
 * order. */
typedef struct ts_changelog_builder {
    ts_buf users;                /* encoded user entries */
    ts_buf outcomes;             /* encoded outcome entries */
    uint32_t n_users;
    uint32_t n_outcomes;
} ts_changelog_builder;

void ts_changelog_builder_reset(ts_changelog_builder *builder);
void ts_changelog_builder_free(ts_changelog_builder *builder);
/* 0, or -1 when memory ran out or a field is too long. */
int ts_changelog_add_user(ts_changelog_builder *builder, const char *id,
                          size_t id_len, const void *record, size_t len);
int ts_changelog_add_outcome(ts_changelog_builder *builder,
                             uint64_t input_seq, uint32_t index,
                             const char *subject, size_t subject_len,
                             const void *payload, size_t len);
/* Bytes the record would take. */
size_t ts_changelog_size(const ts_changelog_builder *builder,
                         const ts_changelog_header *header);
/* The whole record into `out` (reset first). 0, or -1. */
int ts_changelog_finish(const ts_changelog_builder *builder,
                        const ts_changelog_header *header, ts_buf *out);

typedef struct ts_changelog_visitor {
    void *ctx;
    /* Nonzero stops the walk (returned by ts_changelog_decode). */
    int (*user)(void *ctx, const char *id, size_t id_len, const void *record,
                size_t len);
    int (*outcome)(void *ctx, uint64_t input_seq, uint32_t index,
                   const char *subject, size_t subject_len,
                   const void *payload, size_t len);
} ts_changelog_visitor;

/* Checks the whole record first, then fills `header` and visits users and
 * outcomes (either callback may be NULL). -1 for a truncated or unknown
 * record (nothing visited), else what a callback returned, else 0. */
int ts_changelog_decode(const void *bytes, size_t len,
                        ts_changelog_header *header,
                        const ts_changelog_visitor *visitor);

/* The partition of a user: FNV-1a 32 of the id bytes, mod P. Producers
 * and the daemon must agree, so it is part of the wire contract. */
uint32_t ts_partition_of(const char *user_id, size_t len, uint32_t partitions);

/* "<p>.<input seq>.<index>": the Nats-Msg-Id of an outcome. */
int ts_changelog_msg_id(char *buf, size_t size, uint32_t partition,
                        uint64_t input_seq, uint32_t index);

/* Output subjects: "sanitized.<profile>" -> "tracesan.out.<profile>",
 * "rejected" -> "tracesan.rejected", "batch" (OutcomeBatch) ->
 * "tracesan.batch" (anything else: "tracesan.other"). Returns the length
 * written (truncated to size - 1). */
#define TS_CHANGELOG_TOPIC_BATCH "batch"
size_t ts_changelog_output_subject(const char *topic, size_t topic_len,
                                   char *buf, size_t size);
/* The other way: the topic an output subject carries. */
size_t ts_changelog_output_topic(const char *subject, size_t subject_len,
                                 char *buf, size_t size);

/* User id -> latest encoded record of one partition (what a new owner
 * rebuilds from the changelog and the pipeline loads users from). */
typedef struct ts_record_map ts_record_map;

ts_record_map *ts_record_map_new(void);
void ts_record_map_free(ts_record_map *map);
void ts_record_map_clear(ts_record_map *map);
/* Replaces the user's record. 0, or -1 when memory ran out. */
int ts_record_map_put(ts_record_map *map, const char *id, size_t id_len,
                      const void *record, size_t len);
/* 1 with the record and its length (valid until the next put of that
 * user), 0 absent. */
int ts_record_map_get(const ts_record_map *map, const char *id,
                      size_t id_len, const void **record, size_t *len);
size_t ts_record_map_count(const ts_record_map *map);
/* Every user, in no particular order; nonzero from visit stops. */
int ts_record_map_each(const ts_record_map *map,
                       int (*visit)(void *ctx, const char *id, size_t id_len,
                                    const void *record, size_t len),
                       void *ctx);

#endif
