#include "ops/catalog.h"

#include <pthread.h>

#include "drivers/driver_registry.h"
#include "ops/http_settings.h"
#include "wire/format.h"

#define MAX_SECTIONS 32

static const ts_setting_section *sections[MAX_SECTIONS];
static size_t n_sections;
static pthread_once_t gathered = PTHREAD_ONCE_INIT;

static void gather(void)
{
    sections[n_sections++] = &ts_core_setting_section;
    sections[n_sections++] = &ts_format_setting_section;
    size_t n;
    const ts_setting_section *const *drivers = ts_driver_setting_sections(&n);
    for (size_t i = 0; i < n && n_sections < MAX_SECTIONS - 1; i++)
        sections[n_sections++] = drivers[i];
    sections[n_sections++] = &ts_http_setting_section;
}

const ts_setting_section *const *ts_catalog(size_t *n)
{
    pthread_once(&gathered, gather);
    *n = n_sections;
    return sections;
}

ts_config *ts_config_load(const char *path, const char *const *overrides,
                          size_t n_overrides, char *err, size_t errlen)
{
    size_t n;
    const ts_setting_section *const *all = ts_catalog(&n);
    return ts_config_load_sections(all, n, path, overrides, n_overrides, err,
                                   errlen);
}

const ts_setting_def *ts_catalog_find(const char *key,
                                      const ts_setting_section **section)
{
    size_t n;
    const ts_setting_section *const *all = ts_catalog(&n);
    return ts_setting_find_in(all, n, key, section);
}
