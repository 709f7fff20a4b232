/* Model files opened once per path and shared by every profile that names
 * the path, until the cache is freed (a configuration's lifetime). */
#ifndef TRACESAN_INFERENCE_MODEL_CACHE_H
#define TRACESAN_INFERENCE_MODEL_CACHE_H

#include <stddef.h>

#include "inference/model_file.h"

typedef struct ts_model_cache ts_model_cache;

ts_model_cache *ts_model_cache_new(void);
/* Closes every model it opened (NULL-safe). */
void ts_model_cache_free(ts_model_cache *cache);

/* The model at `path`, opened on first use. NULL with err filled (the
 * model file's own message) when it cannot be opened. */
const ts_model *ts_model_cache_get(ts_model_cache *cache, const char *path,
                                   char *err, size_t errlen);

#endif
