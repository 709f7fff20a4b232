/* The store's write transactions on a thread of their own, so that the
 * event loop processes the next group while one group's records are
 * written and synced (group commit pipelined one deep).
 *
 * The loop encodes a group's dirty records into a ts_record_batch (the
 * store backend's save appends to it while `batch` is set) and submits it;
 * the writer puts every record in one transaction and commits it; `done`
 * then runs on the loop, which publishes the group only if the commit
 * succeeded (privacy invariant 2). A failed batch stays intact for a
 * retry. While a batch is in flight the loop only reads the store, through
 * read transactions of its own (ts_store_set_concurrent_reads). */
#ifndef TRACESAN_STATE_STORE_WRITER_H
#define TRACESAN_STATE_STORE_WRITER_H

#include <stddef.h>

#include <event2/event.h>

#include "state/store.h"

typedef struct ts_store_writer ts_store_writer;

/* ok: 1 committed, 0 failed with `err`; seconds: the transaction's time. */
typedef void (*ts_store_writer_done_fn)(void *arg, int ok, const char *err,
                                        double seconds);

ts_store_writer *ts_store_writer_new(ts_store *store, struct event_base *base,
                                     ts_store_writer_done_fn done, void *arg,
                                     char *err, size_t errlen);
/* Waits for a batch in flight (without running `done`) and joins the
 * thread. */
void ts_store_writer_free(ts_store_writer *writer);

/* The batch the next submit writes; fill it through the store backend. */
ts_record_batch *ts_store_writer_batch(ts_store_writer *writer);
int ts_store_writer_busy(const ts_store_writer *writer);
/* Writes the batch (which must not be empty) on the thread; `done` runs on
 * the loop when it is committed or failed. Not while busy. */
void ts_store_writer_submit(ts_store_writer *writer);
/* Blocks until the batch in flight is done and runs `done` for it now
 * (shutdown). No-op when idle. */
void ts_store_writer_wait(ts_store_writer *writer);

#endif
