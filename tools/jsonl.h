/* JSON lines in and out of the tracesan tools (the Kafka-style bridges).
 *
 * Reading: one JSON object per line, read as a protobuf message by
 * wire/json_codec.h. A regular file may be gzip-compressed (read
 * transparently); stdin and pipes are read as the bytes arrive, so a live
 * producer (kcat -C ... | tracesan replay --format jsonl -) is forwarded
 * without waiting for a buffer to fill, and the caller can tell when the
 * input has gone idle.
 *
 * Writing: one line per message, the message wrapped in an object whose
 * only key says what it is: {"sanitized":{...}}, {"rejected":{...}},
 * {"density":{...}} (docs/wire-format.md, "JSON lines").
 *
 * Like the CSV reader's, errors name lines, never contents.
 */
#ifndef TRACESAN_TOOLS_JSONL_H
#define TRACESAN_TOOLS_JSONL_H

#include <stddef.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

#include "wire/codec.h"

typedef struct ts_jsonl_reader ts_jsonl_reader;

enum {
    TS_JSONL_MESSAGE = 1,    /* a message was read */
    TS_JSONL_EOF = 0,
    TS_JSONL_BAD_LINE = -1,  /* this line is unusable (err says why); go on */
    TS_JSONL_IO_ERROR = -2,  /* stop (err is a complete message) */
    TS_JSONL_IDLE = -3       /* no complete line within wait_ms */
};

/* Opens PATH ("-" = stdin) to read messages of `descriptor`. NULL with err
 * filled when it cannot be opened. */
ts_jsonl_reader *ts_jsonl_open(const char *path,
                               const ProtobufCMessageDescriptor *descriptor,
                               char *err, size_t errlen);
void ts_jsonl_close(ts_jsonl_reader *reader);

struct ts_csv_reader;
/* The tools' input of location updates: with jsonl, *json reads PATH as
 * JSON lines of LocationUpdate, else *csv reads it as CSV (the other one
 * is NULL). 0, or -1 with err filled. */
int ts_jsonl_open_updates(const char *path, int jsonl,
                          struct ts_csv_reader **csv, ts_jsonl_reader **json,
                          char *err, size_t errlen);

/* Reads the next non-blank line as a message. *message lives in the
 * reader's arena until the next call (do not free it). wait_ms < 0 waits
 * as long as it takes; otherwise TS_JSONL_IDLE comes back when no full
 * line arrived within wait_ms (only for stdin and pipes: a file never
 * keeps the reader waiting). *line is the line number of what was read or
 * refused. */
int ts_jsonl_read(ts_jsonl_reader *reader, int wait_ms,
                  ProtobufCMessage **message, size_t *line, char *err,
                  size_t errlen);

/* Writes {"<kind>":<message>} and a newline. 0; 1 when the message has
 * no JSON form (a non-finite number or a string that is not UTF-8), with
 * nothing written; -1 on a write error. scratch is reused between calls. */
int ts_jsonl_write(FILE *out, const char *kind,
                   const ProtobufCMessage *message, ts_buf *scratch);

#endif
