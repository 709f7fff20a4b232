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
 * payload (u32 + bytes), then (version 2) producer count u32 and per
 * producer id (u16 + bytes), last message number u64 and the input
 * sequence it came at u64. No raw coordinate is in it: user records hold
 * published values only, outcomes are what is published anyway.
 *
 * The producers: an input message whose Nats-Msg-Id is
 * "<producer>.<partition>.<n>" is that producer's n-th message to the
 * partition. JetStream's duplicate window is not enough: after the loss
 * of TRACESAN_IN's leader, nats-server 2.9.10 stored a producer's resend
 * of a message it had stored (and a daemon had processed and
 * acknowledged) again under a new sequence. The changelog remembers, per
 * producer, the last n committed, and an owner processes no message at
 * or below it (docs/scale-out.md, "Producers").
 *
 * A group too large for one message (the server's max_payload) is split
 * (ts_changelog_finish_split): PART records, then the DELTA that closes
 * the chain, appended one after the other. A reader applies the parts
 * only together with their closing delta (ts_changelog_replica), so a
 * chain whose writer died half-way counts for nothing, as a group that
 * was never committed; its outcomes were not published either (the
 * writer publishes after the closing delta is stored). */
#ifndef TRACESAN_STATE_CHANGELOG_H
#define TRACESAN_STATE_CHANGELOG_H

#include <stddef.h>
#include <stdint.h>

#include "wire/codec.h"

#define TS_CHANGELOG_VERSION 2u
/* The producers a partition remembers; past this, the one whose last
 * message came at the lowest input sequence is forgotten first. */
#define TS_CHANGELOG_MAX_PRODUCERS 1024
/* The longest producer id kept (longer ones are not deduplicated). */
#define TS_CHANGELOG_PRODUCER_MAX 200

typedef enum ts_changelog_kind {
    /* A group: changed users and its outcomes. */
    TS_CHANGELOG_DELTA = 1,
    /* Every user of the partition; written with Nats-Rollup: sub, so it
     * replaces the records before it. Has no outcomes. */
    TS_CHANGELOG_SNAPSHOT = 2,
    /* Written by a new owner before it consumes: any append of an older
     * owner after it fails its expected-last-sequence check. */
    TS_CHANGELOG_FENCE = 3,
    /* A piece of a group too large for one record: users and outcomes
     * that count only once the DELTA after it (same owner and epoch)
     * closes the chain. */
    TS_CHANGELOG_PART = 4,
} ts_changelog_kind;

/* The kind's name ("delta", "snapshot", "fence", "part"; "?" else). */
const char *ts_changelog_kind_name(ts_changelog_kind kind);

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
    ts_buf producers;            /* encoded producer entries */
    uint32_t n_users;
    uint32_t n_outcomes;
    uint32_t n_producers;
    size_t last_producer;        /* offset of the newest producer entry */
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
/* The producer's message `number`, taken at input sequence `input_seq`:
 * replaces the newest entry when that one is the same producer's. 0, or
 * -1 when memory ran out or the id is longer than
 * TS_CHANGELOG_PRODUCER_MAX. */
int ts_changelog_add_producer(ts_changelog_builder *builder, const char *id,
                              size_t id_len, uint64_t number,
                              uint64_t input_seq);
/* The highest number the builder holds for the producer: 1 with it, or
 * 0. */
int ts_changelog_builder_producer(const ts_changelog_builder *builder,
                                  const char *id, size_t id_len,
                                  uint64_t *number);
/* Bytes the record would take. */
size_t ts_changelog_size(const ts_changelog_builder *builder,
                         const ts_changelog_header *header);
/* The whole record into `out` (reset first). 0, or -1. */
int ts_changelog_finish(const ts_changelog_builder *builder,
                        const ts_changelog_header *header, ts_buf *out);
/* The group as records of at most max_bytes each, into `out` (reset
 * first), each preceded by its length (u32, host order): one record of
 * header->kind when it fits, else PART records (users first, then
 * outcomes, in order) and a last one of header->kind with the rest and
 * every producer entry.
 * *n_records says how many. 0; -1 when one user or outcome alone does not
 * fit (the configuration's state sizes or output.batch_outcomes against
 * the server's max_payload: no input can cause it) or memory ran out. */
int ts_changelog_finish_split(const ts_changelog_builder *builder,
                              const ts_changelog_header *header,
                              size_t max_bytes, ts_buf *out,
                              size_t *n_records);
/* Walks records made by ts_changelog_finish_split: *at (start at 0)
 * moves past the one returned. 1 with the record, 0 at the end. */
int ts_changelog_next_split(const ts_buf *records, size_t *at,
                            const void **record, size_t *len);

typedef struct ts_changelog_visitor {
    void *ctx;
    /* Nonzero stops the walk (returned by ts_changelog_decode). */
    int (*user)(void *ctx, const char *id, size_t id_len, const void *record,
                size_t len);
    int (*outcome)(void *ctx, uint64_t input_seq, uint32_t index,
                   const char *subject, size_t subject_len,
                   const void *payload, size_t len);
    int (*producer)(void *ctx, const char *id, size_t id_len,
                    uint64_t number, uint64_t input_seq);
} ts_changelog_visitor;

/* Checks the whole record first, then fills `header` and visits users,
 * outcomes and producers (any callback may be NULL). Version 1 records
 * (no producers) are read too. -1 for a truncated or unknown
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
/* Removes the user (nothing when absent). */
void ts_record_map_remove(ts_record_map *map, const char *id, size_t id_len);
size_t ts_record_map_count(const ts_record_map *map);
/* Every user, in no particular order; nonzero from visit stops. */
int ts_record_map_each(const ts_record_map *map,
                       int (*visit)(void *ctx, const char *id, size_t id_len,
                                    const void *record, size_t len),
                       void *ctx);

/* One partition's changelog as a reader applies it, record by record in
 * subject order: the restore of a new owner, a warm standby copy, the
 * CLI's ledger. Parts wait for their closing delta; a fence or snapshot
 * discards an open chain (its writer lost the partition). `closed` keeps,
 * since the last snapshot, the subject sequence of every record of a
 * closed group with the last input it covers: what a new owner may have
 * to publish again. */
typedef struct ts_changelog_replica {
    ts_record_map *records;      /* the users as of changelog_seq */
    uint64_t changelog_seq;      /* the last record applied or held */
    uint64_t last_input_seq;     /* covered by a closed group */
    size_t records_since_snapshot;
    ts_buf chain;                /* an open chain's parts: u64 seq, u32
                                    length, bytes */
    uint64_t chain_epoch;        /* its writer's epoch */
    ts_buf closed;               /* pairs of u64: seq, last_input_seq */
    /* producer id -> u64 last number, u64 input sequence it came at */
    ts_record_map *producers;
} ts_changelog_replica;

/* 0, or -1 when memory ran out. */
int ts_changelog_replica_init(ts_changelog_replica *replica);
void ts_changelog_replica_free(ts_changelog_replica *replica);
/* Forgets everything: read from the start again. */
void ts_changelog_replica_reset(ts_changelog_replica *replica);
/* Applies the record stored at subject sequence seq; *header (may be
 * NULL) gets its header. 0; -1 when it cannot be decoded or memory ran
 * out (then reset it: part of the record may be applied). */
int ts_changelog_replica_apply(ts_changelog_replica *replica,
                               const void *bytes, size_t len, uint64_t seq,
                               ts_changelog_header *header);
/* A closed group's producer entries (its owner's, which never reads its
 * own records back), with the replica's bound on producers. 0, or -1
 * when memory ran out. */
int ts_changelog_replica_add_producers(ts_changelog_replica *replica,
                                       const ts_changelog_builder *builder);
/* Every producer the replica remembers, into the builder (a snapshot's).
 * 0, or -1 when memory ran out. */
int ts_changelog_replica_producers_into(const ts_changelog_replica *replica,
                                        ts_changelog_builder *builder);
/* 1 with the last message number committed for the producer, or 0. */
int ts_changelog_replica_producer(const ts_changelog_replica *replica,
                                  const char *id, size_t id_len,
                                  uint64_t *number);
/* The subject sequences of the closed groups' records whose last input
 * is above `floor`, in order, into `seqs` (u64 each, reset first). 0, or
 * -1 when memory ran out. */
int ts_changelog_replica_closed_above(const ts_changelog_replica *replica,
                                      uint64_t floor, ts_buf *seqs);

#endif
