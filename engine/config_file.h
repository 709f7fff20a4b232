/* Reading the configuration file, and the files it @includes, into
 * libconfig within limits that keep the parse short and unable to block
 * (issue 25, items 5 and 13):
 *
 * - every file must be a regular file, opened without blocking
 *   (engine/safe_open.h): a FIFO at an @include once stalled the loop;
 * - the file and everything it includes (each time it is included) hold
 *   at most TS_CONFIG_MAX_BYTES: libconfig 1.5 parses a long string in
 *   quadratic time (4 MiB took 8.9 s);
 * - a group holds at most TS_CONFIG_MAX_GROUP_SETTINGS settings: libconfig
 *   checks each new one against all before it, so one group of 26 000
 *   settings (256 KiB) took 16 s; groups nest TS_CONFIG_MAX_NESTING deep
 *   at most.
 *
 * libconfig 1.5 has no include hook, so the files are scanned first with
 * its own lexical rules (comments, strings, `@include "..."` at the start
 * of a line, spliced in place) and each include is checked, read and
 * measured; libconfig then opens the includes again itself. The main file
 * is read once, into memory.
 */
#ifndef TRACESAN_ENGINE_CONFIG_FILE_H
#define TRACESAN_ENGINE_CONFIG_FILE_H

#include <stddef.h>

#include <libconfig.h>

#define TS_CONFIG_MAX_BYTES (256 * 1024)
#define TS_CONFIG_MAX_GROUP_SETTINGS 1024
#define TS_CONFIG_MAX_NESTING 64

/* Parses PATH into cfg, its includes relative to PATH's directory. 0, or
 * -1 with err ("PATH: reason" or "FILE:LINE: reason"). */
int ts_config_file_read(config_t *cfg, const char *path, char *err,
                        size_t errlen);

#endif
