#include "inference/model_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct model_entry {
    char *path;
    ts_model *model;
    struct model_entry *next;
} model_entry;

struct ts_model_cache {
    model_entry *head;
};

ts_model_cache *ts_model_cache_new(void)
{
    return calloc(1, sizeof(ts_model_cache));
}

void ts_model_cache_free(ts_model_cache *cache)
{
    if (cache == NULL)
        return;
    while (cache->head != NULL) {
        model_entry *e = cache->head;
        cache->head = e->next;
        ts_model_close(e->model);
        free(e->path);
        free(e);
    }
    free(cache);
}

const ts_model *ts_model_cache_get(ts_model_cache *cache, const char *path,
                                   char *err, size_t errlen)
{
    for (model_entry *e = cache->head; e != NULL; e = e->next)
        if (strcmp(e->path, path) == 0)
            return e->model;
    model_entry *entry = calloc(1, sizeof *entry);
    if (entry == NULL || (entry->path = strdup(path)) == NULL) {
        free(entry);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (ts_model_open(path, &entry->model, err, errlen) < 0) {
        free(entry->path);
        free(entry);
        return NULL;
    }
    entry->next = cache->head;
    cache->head = entry;
    return entry->model;
}
