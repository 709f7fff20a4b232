#include "drivers/driver_registry.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "drivers/jetstream/jetstream_driver.h"
#include "drivers/mqtt/mqtt_driver.h"
#include "drivers/zmq/zmq_driver.h"

static const ts_driver_ops *const drivers[] = {
    &ts_zmq_driver,
    &ts_jetstream_driver,
    &ts_mqtt_driver,
    NULL,
};

#define N_DRIVERS (sizeof drivers / sizeof drivers[0] - 1)
/* Types per driver, at most: room for the choices lists below. */
#define MAX_TYPES 8

const ts_driver_ops *const *ts_driver_all(void)
{
    return drivers;
}

const ts_driver_ops *ts_driver_find(const char *name)
{
    for (size_t i = 0; i < N_DRIVERS; i++)
        if (strcmp(drivers[i]->name, name) == 0)
            return drivers[i];
    return NULL;
}

static const ts_driver_ops *serving(const char *type, int input)
{
    for (size_t i = 0; i < N_DRIVERS; i++) {
        const char *const *types = input ? drivers[i]->input_types
                                         : drivers[i]->output_types;
        for (size_t t = 0; types[t] != NULL; t++)
            if (strcmp(types[t], type) == 0)
                return drivers[i];
    }
    return NULL;
}

const ts_driver_ops *ts_driver_for_input_type(const char *type)
{
    return serving(type, 1);
}

/* ---------------------------------------------------------------- rows */

/* The choices are the drivers' types in registry order, gathered once. */
static const char *input_choices[N_DRIVERS * MAX_TYPES + 1];
static const char *output_choices[N_DRIVERS * MAX_TYPES + 1];

static void gather(const char **choices, int input)
{
    size_t n = 0;
    for (size_t i = 0; i < N_DRIVERS; i++) {
        const char *const *types = input ? drivers[i]->input_types
                                         : drivers[i]->output_types;
        for (size_t t = 0; types[t] != NULL && t < MAX_TYPES; t++)
            choices[n++] = types[t];
    }
    choices[n] = NULL;
}

static ts_setting_def driver_rows[] = {
    TS_CHOICE_ROW(ts_driver_settings, "input.type", input_type,
                  input_choices, "pull", TS_APPLY_RESTART,
                  "which driver reads updates: a ZeroMQ PULL or SUB socket, "
                  "JetStream partitions (docs/scale-out.md) or MQTT topics "
                  "(docs/mqtt.md)"),
    TS_CHOICE_ROW(ts_driver_settings, "output.type", output_type,
                  output_choices, "pub", TS_APPLY_RESTART,
                  "PUB (best effort), PUSH (lossless, pauses input), MQTT "
                  "or JetStream; ZeroMQ and MQTT pair with either input, "
                  "JetStream only with its own"),
};

/* Set once the rows' choices are gathered (below). */
static const char *chosen(const char *const *choices, int index)
{
    return choices[index];
}

/* Writes `"a"` or `"a" or "b"`: the types a driver accepts on a side. */
static void list_types(const char *const *types, char *buf, size_t len)
{
    ts_choices_text(types, buf, len);
}

/* input.type picks the driver; output.type is one of its own, or another
 * driver's output side its input can publish through (MQTT in, ZeroMQ
 * out, and the reverse). JetStream's outcomes are records of the
 * partitions it owns, so its input and output go only together. The side
 * blamed is the one that cannot pair: "input.type = jetstream" alone
 * says what output.type it needs. */
static void finish_drivers(void *values, ts_setting_context *context)
{
    const ts_driver_settings *s = values;
    const char *in = chosen(input_choices, s->input_type);
    const char *out = chosen(output_choices, s->output_type);
    const ts_driver_ops *reader = serving(in, 1);
    const ts_driver_ops *writer = serving(out, 0);
    if (reader == writer || (reader->takes_outputs && writer->output != NULL))
        return;
    char needed[256];
    if (!reader->takes_outputs) {
        list_types(reader->output_types, needed, sizeof needed);
        ts_setting_fail(context, "input.type", "input.type = \"%s\" needs "
                        "output.type = %s: the %s driver publishes only "
                        "through its own output", in, needed, reader->name);
    } else {
        list_types(writer->input_types, needed, sizeof needed);
        ts_setting_fail(context, "output.type", "output.type = \"%s\" "
                        "needs input.type = %s: the %s driver's output "
                        "takes only its own input", out, needed,
                        writer->name);
    }
}

const ts_setting_section ts_driver_setting_section = {
    .name = "drivers",
    TS_SECTION_ROWS(driver_rows),
    .size = sizeof(ts_driver_settings),
    .finish = finish_drivers,
};

static pthread_once_t gathered = PTHREAD_ONCE_INIT;
static const ts_setting_section *sections[N_DRIVERS + 2];
static size_t n_sections;

static void gather_choices(void)
{
    gather(input_choices, 1);
    gather(output_choices, 0);
    sections[n_sections++] = &ts_driver_setting_section;
    for (size_t i = 0; i < N_DRIVERS; i++)
        if (drivers[i]->settings != NULL)
            sections[n_sections++] = drivers[i]->settings;
}

const ts_setting_section *const *ts_driver_setting_sections(size_t *n)
{
    pthread_once(&gathered, gather_choices);
    *n = n_sections;
    return sections;
}

const char *ts_driver_input_type(const ts_config *config)
{
    const ts_driver_settings *s =
        ts_config_section(config, &ts_driver_setting_section);
    return s != NULL ? chosen(input_choices, s->input_type) : NULL;
}

const char *ts_driver_output_type(const ts_config *config)
{
    const ts_driver_settings *s =
        ts_config_section(config, &ts_driver_setting_section);
    return s != NULL ? chosen(output_choices, s->output_type) : NULL;
}

const ts_driver_ops *ts_driver_of_config(const ts_config *config)
{
    const char *type = ts_driver_input_type(config);
    return type != NULL ? serving(type, 1) : NULL;
}

const ts_output_ops *ts_driver_output_of_config(const ts_config *config)
{
    const ts_driver_ops *reader = ts_driver_of_config(config);
    const char *type = ts_driver_output_type(config);
    const ts_driver_ops *writer = type != NULL ? serving(type, 0) : NULL;
    return reader != NULL && writer != NULL && writer != reader
               ? writer->output
               : NULL;
}
