/* Every driver, found by name or by the input.type it serves, and the two
 * rows that choose one: input.type and output.type, whose choices are the
 * drivers' own (a new driver adds its types by being listed here). An
 * output.type of another driver than input.type's pairs that driver's
 * output side with the input (datapath/output.h). */
#ifndef TRACESAN_DRIVERS_DRIVER_REGISTRY_H
#define TRACESAN_DRIVERS_DRIVER_REGISTRY_H

#include <stddef.h>

#include "datapath/driver.h"
#include "engine/config.h"

/* NULL-terminated, in registry order (the first is the default's). */
const ts_driver_ops *const *ts_driver_all(void);
const ts_driver_ops *ts_driver_find(const char *name);
/* The driver serving input.type `type`; NULL when none does. */
const ts_driver_ops *ts_driver_for_input_type(const char *type);

/* input.type and output.type. */
typedef struct ts_driver_settings {
    int input_type;              /* index into the input.type choices */
    int output_type;
} ts_driver_settings;

extern const ts_setting_section ts_driver_setting_section;

/* What a configuration loaded with the section chose. */
const char *ts_driver_input_type(const ts_config *config);
const char *ts_driver_output_type(const ts_config *config);
const ts_driver_ops *ts_driver_of_config(const ts_config *config);
/* output.type's output side when it is another driver's than input.type's
 * (ts_driver_env.output); NULL when the driver publishes itself. */
const ts_output_ops *ts_driver_output_of_config(const ts_config *config);

/* The registry's section and every driver's own, in registry order. */
const ts_setting_section *const *ts_driver_setting_sections(size_t *n);

#endif
