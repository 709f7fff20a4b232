/* The outcomes of the last input messages, kept durably so that a message
 * the broker delivers again gets the very outcomes it got the first time,
 * and is not released (nor debited) twice.
 *
 * MQTT gives a message no identity that survives a session (the DUP flag
 * only says "maybe seen"; packet identifiers are reused). What the broker
 * can deliver again is what it has not had our PUBACK for, and the driver
 * acknowledges in order while the broker keeps about mqtt.max_inflight
 * messages unacknowledged (Receive Maximum), so those are among the last
 * messages it processed: the slots hold twice that many, plus 100. Each
 * is known here by a BLAKE2b fingerprint of its topic and payload, with
 * the format topics and payloads of its outcomes.
 *
 * The slots go into the store in the same transaction as the debits of
 * their messages (as the daemon's own records, keys starting with byte
 * 0x01 that no user id can have, which user listings and counts skip:
 * ts_store_is_own_key), so a restart finds the outcomes of exactly the
 * messages whose debits are durable. */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_RECENT_H
#define TRACESAN_DRIVERS_MQTT_MQTT_RECENT_H

#include <stddef.h>
#include <stdint.h>

#include "datapath/outbox.h"
#include "state/store.h"

#define TS_MQTT_FINGERPRINT_BYTES 16
/* A message whose outcomes take more is not kept: delivered again, it is
 * processed again (its updates then refused as not newer than the
 * user's last). */
#define TS_MQTT_RECENT_MAX_BYTES ((size_t)1 << 20)

typedef struct ts_mqtt_recent ts_mqtt_recent;

ts_mqtt_recent *ts_mqtt_recent_new(size_t slots);
void ts_mqtt_recent_free(ts_mqtt_recent *recent);

void ts_mqtt_fingerprint(const char *topic, size_t topic_len,
                         const void *payload, size_t len,
                         uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES]);

/* The slot holding the message, or -1. */
long ts_mqtt_recent_find(const ts_mqtt_recent *recent,
                         const uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES]);
/* Appends the slot's outcomes to the outbox, in their order. 0, or -1
 * (memory). */
int ts_mqtt_recent_replay(const ts_mqtt_recent *recent, long slot,
                          ts_outbox *box);

/* Keeps the outbox entries [first, box->count) as the message's outcomes,
 * in the oldest slot. 0, or -1 (too large or memory: not kept). */
int ts_mqtt_recent_add(ts_mqtt_recent *recent,
                       const uint8_t fingerprint[TS_MQTT_FINGERPRINT_BYTES],
                       const ts_outbox *box, size_t first);

/* Reads the slots back from the store. 0, or -1 with err. */
int ts_mqtt_recent_load(ts_mqtt_recent *recent, ts_store *store, char *err,
                        size_t errlen);
/* Adds the slots changed since the last save to `batch`. 0, or -1. */
int ts_mqtt_recent_save(ts_mqtt_recent *recent, ts_record_batch *batch);
/* Slots holding a message. */
size_t ts_mqtt_recent_count(const ts_mqtt_recent *recent);

#endif
