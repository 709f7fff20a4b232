/* `-o path=value` overrides applied to a parsed libconfig tree, and the
 * small libconfig helpers the configuration loader's messages share. */
#ifndef TRACESAN_ENGINE_CONFIG_OVERRIDE_H
#define TRACESAN_ENGINE_CONFIG_OVERRIDE_H

#include <stddef.h>

#include <libconfig.h>

/* Sets the setting at `path` (separated by '.', ':' or '/') to `value`,
 * parsed as a libconfig value or else taken as a bare string. A scalar
 * keeps its type (an integer is accepted for a float); a missing setting
 * or group is created. Each setting it writes carries `override` as its
 * hook, so later errors can name the override; `override` must outlive
 * `cfg`. -1 with the reason in err. */
int ts_config_apply_override(config_t *cfg, char *override, char *err,
                             size_t errlen);

/* "profiles.geoind.radius_m" */
void ts_libconfig_setting_path(const config_setting_t *setting, char *buf,
                               size_t len);
/* "an integer", "a string", ... */
const char *ts_libconfig_type_name(int type);
int ts_libconfig_is_integer(int type);

#endif
