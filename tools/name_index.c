#include "tools/name_index.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

typedef struct name_entry {
    char *name;
    uint32_t number;
    UT_hash_handle hh;
} name_entry;

struct ts_name_index {
    name_entry *by_name;
    name_entry **by_number;
    size_t count, capacity;
};

ts_name_index *ts_name_index_new(void)
{
    return calloc(1, sizeof(ts_name_index));
}

void ts_name_index_free(ts_name_index *index)
{
    if (index == NULL)
        return;
    name_entry *entry, *tmp;
    HASH_ITER(hh, index->by_name, entry, tmp) {
        HASH_DEL(index->by_name, entry);
        free(entry->name);
        free(entry);
    }
    free(index->by_number);
    free(index);
}

static name_entry *find_entry(const ts_name_index *index, const char *name)
{
    name_entry *entry = NULL;
    HASH_FIND_STR(index->by_name, name, entry);
    return entry;
}

int ts_name_index_intern(ts_name_index *index, const char *name,
                         uint32_t *number)
{
    name_entry *entry = find_entry(index, name);
    if (entry != NULL) {
        *number = entry->number;
        return 0;
    }
    if (index->count >= UINT32_MAX)
        return -1;
    if (index->count == index->capacity) {
        size_t capacity = index->capacity ? index->capacity * 2 : 64;
        name_entry **grown =
            realloc(index->by_number, capacity * sizeof *grown);
        if (grown == NULL)
            return -1;
        index->by_number = grown;
        index->capacity = capacity;
    }
    entry = calloc(1, sizeof *entry);
    if (entry == NULL)
        return -1;
    entry->name = strdup(name);
    if (entry->name == NULL) {
        free(entry);
        return -1;
    }
    entry->number = (uint32_t)index->count;
    index->by_number[index->count++] = entry;
    HASH_ADD_KEYPTR(hh, index->by_name, entry->name, strlen(entry->name),
                    entry);
    *number = entry->number;
    return 0;
}

int ts_name_index_find(const ts_name_index *index, const char *name,
                       uint32_t *number)
{
    const name_entry *entry = find_entry(index, name);
    if (entry == NULL)
        return 0;
    *number = entry->number;
    return 1;
}

size_t ts_name_index_count(const ts_name_index *index)
{
    return index->count;
}

const char *ts_name_index_name(const ts_name_index *index, uint32_t number)
{
    return index->by_number[number]->name;
}
