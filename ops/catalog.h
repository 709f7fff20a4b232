/* The catalog: every module's setting rows, as the daemon and the CLI load
 * a configuration file (engine/settings.h): the core's, the output
 * format's, the driver choice and each driver's, the HTTP endpoint's. */
#ifndef TRACESAN_OPS_CATALOG_H
#define TRACESAN_OPS_CATALOG_H

#include <stddef.h>

#include "engine/config.h"

/* Every section, the core's first. */
const ts_setting_section *const *ts_catalog(size_t *n);

/* ts_config_load_sections over the catalog. */
ts_config *ts_config_load(const char *path, const char *const *overrides,
                          size_t n_overrides, char *err, size_t errlen);

/* The row of `key` in the catalog and its section (may be NULL). */
const ts_setting_def *ts_catalog_find(const char *key,
                                      const ts_setting_section **section);

#endif
