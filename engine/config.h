/* Configuration: a libconfig file plus `-o path=value` overrides.
 *
 * Overrides use libconfig path syntax (profiles.geoind.radius_m=200). The
 * value is parsed as a libconfig scalar (int, float, bool, "string"); a bare
 * word that is not a scalar is taken as a string. An override of an existing
 * setting must keep a compatible type (an int may set a float); an override
 * of a missing setting creates it and its parent groups.
 *
 * All errors come back as "FILE:LINE: message" (or "override 'x': message"),
 * which is what `--check-config` prints.
 */
#ifndef TRACESAN_ENGINE_CONFIG_H
#define TRACESAN_ENGINE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "engine/pipeline.h"
#include "engine/settings.h"

typedef struct ts_config ts_config;

/* Load FILE (NULL = no file, defaults only) and apply overrides in order,
 * with the rows of `sections` (the core rows are always in; the daemon's
 * and the CLI's catalog of every module's section is ops/catalog.h's
 * ts_config_load). Validates every setting, runs each section's finish,
 * and every profile (the mechanism parses its own parameters). Returns
 * NULL and fills err on any problem. */
ts_config *ts_config_load_sections(const ts_setting_section *const *sections,
                                   size_t n_sections, const char *path,
                                   const char *const *overrides,
                                   size_t n_overrides, char *err,
                                   size_t errlen);
/* Configurations are reference-counted: a holder of profiles shared from
 * one (below) keeps a reference for as long as it uses them, on any
 * thread. ts_config_free drops one and frees the last. */
ts_config *ts_config_ref(const ts_config *config);
void ts_config_free(ts_config *config);

/* 1 when the name is letters, digits, '_' and '-' only (as a profile's):
 * safe in subjects, message ids and file names. */
int ts_config_plain_name(const char *name);

/* The core rows' values. Strings inside point into the config and live as
 * long as it. */
const ts_settings *ts_config_settings(const ts_config *config);
/* A section's values (its module casts them to its struct); NULL when the
 * config was loaded without that section. */
const void *ts_config_section(const ts_config *config,
                              const ts_setting_section *section);
/* The sections the config was loaded with, the core's first. */
const ts_setting_section *const *ts_config_sections(const ts_config *config,
                                                    size_t *n);
/* SIGHUP: calls report(key) for every restart-only row whose value
 * differs between the running and the new configuration, and for what
 * sections compare themselves (a key file's content). How many. */
size_t ts_config_restart_changes(const ts_config *running,
                                 const ts_config *fresh,
                                 void (*report)(const char *key, void *arg),
                                 void *arg);

/* Build the profiles array for ts_pipeline_new (ownership passes to the
 * caller). Returns -1 with err filled on failure. */
int ts_config_build_profiles(const ts_config *config, ts_profile **profiles,
                             size_t *n_profiles, size_t *default_index,
                             char *err, size_t errlen);

/* Convenience: profiles + limits -> a pipeline. NULL with err on failure. */
ts_pipeline *ts_config_make_pipeline(const ts_config *config, ts_rng *rng,
                                     char *err, size_t errlen);

/* As the two above, but every profile's mechanism is the one the load
 * built (and checked), shared instead of built again: a model or a
 * channel is in memory once however many pipelines (JetStream
 * partitions, reloads) use it. Valid while the caller holds a reference
 * to `config`. A release only reads a mechanism's profile, so pipelines
 * on one thread share it safely. */
int ts_config_share_profiles(const ts_config *config, ts_profile **profiles,
                             size_t *n_profiles, size_t *default_index,
                             char *err, size_t errlen);
ts_pipeline *ts_config_make_shared_pipeline(const ts_config *config,
                                            ts_rng *rng, char *err,
                                            size_t errlen);

#endif
