/* Dense numbering of names (user ids) for the offline tools: the first
 * distinct name gets 0, the next 1, and so on, so per-name data can live in
 * plain arrays and rows can be sorted by a small integer.
 */
#ifndef TRACESAN_TOOLS_NAME_INDEX_H
#define TRACESAN_TOOLS_NAME_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct ts_name_index ts_name_index;

/* NULL when out of memory. */
ts_name_index *ts_name_index_new(void);
void ts_name_index_free(ts_name_index *index);

/* The number of `name`, numbering it when it is new. 0 with *number set,
 * or -1 when out of memory or when UINT32_MAX names are already numbered. */
int ts_name_index_intern(ts_name_index *index, const char *name,
                         uint32_t *number);

/* 1 with *number set when `name` is numbered, else 0. */
int ts_name_index_find(const ts_name_index *index, const char *name,
                       uint32_t *number);

size_t ts_name_index_count(const ts_name_index *index);

/* The name numbered `number` (< count), valid until the index is freed. */
const char *ts_name_index_name(const ts_name_index *index, uint32_t number);

#endif
