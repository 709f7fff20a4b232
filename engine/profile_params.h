/* A mechanism's parameters (the ts_params of mechanisms/mechanism.h) read
 * from one profile's group of the libconfig file: numbers, booleans and
 * strings by key, models through the load's shared cache, a channel file
 * opened for profile_new to copy from. Kept apart from engine/config.c,
 * which decides which groups are profiles and what their errors say. */
#ifndef TRACESAN_ENGINE_PROFILE_PARAMS_H
#define TRACESAN_ENGINE_PROFILE_PARAMS_H

#include <libconfig.h>

#include "inference/channel_file.h"
#include "inference/model_cache.h"
#include "mechanisms/mechanism.h"

typedef struct ts_profile_params {
    config_setting_t *group;
    ts_model_cache *models;      /* NULL: every model is refused */
    /* Set when the mechanism asked for a model or channel and the key was
     * "": the shipped configuration's way of leaving a profile disabled. */
    int file_empty;
    ts_channel_file *channel;    /* opened for profile_new, closed after */
} ts_profile_params;

/* The ts_params that read `source` (which must outlive them). */
ts_params ts_profile_params_bind(ts_profile_params *source);
/* Closes the channel file profile_new was given, if any. */
void ts_profile_params_close(ts_profile_params *source);

#endif
