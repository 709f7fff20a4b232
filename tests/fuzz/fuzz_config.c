/* libFuzzer target: the configuration loader (libconfig file + overrides).
 *
 * Input layout: the configuration file text, then optionally a NUL byte and
 * up to MAX_OVERRIDES NUL-separated `-o path=value` override strings. The
 * file goes through a memfd and its /proc/self/fd path, because
 * ts_config_load only takes a path. A configuration that loads must also
 * turn into profiles and a pipeline (the mechanisms validate their own
 * parameters there), and its error text must never be empty. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/config.h"
#include "drivers/zmq/zmq_settings.h"
#include "ops/catalog.h"
#include "engine/log.h"
#include "engine/pipeline.h"
#include "mechanisms/rng.h"

#define TS_FUZZ_TARGET "fuzz_config"
#include "tests/fuzz/fuzz_support.h"

#define MAX_OVERRIDES 4

static ts_fuzz_file config_file;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ts_log_init("fuzz_config", TS_LOG_ERROR, 0);
    ts_fuzz_file_open(&config_file, "fuzz_config.conf");
    return 0;
}

static void try_load(const char *path, const char *const *overrides,
                     size_t n_overrides)
{
    char err[512];
    memset(err, 0x5a, sizeof err);
    ts_config *config = ts_config_load(path, overrides, n_overrides, err,
                                       sizeof err);
    if (config == NULL) {
        if (memchr(err, '\0', sizeof err) == NULL || err[0] == '\0')
            ts_fuzz_die("failed load without an error message");
        return;
    }
    const ts_settings *settings = ts_config_settings(config);
    const ts_zmq_settings *zmq = ts_zmq_settings_of(config);
    if (settings == NULL || zmq == NULL ||
        settings->default_profile == NULL || zmq->input_endpoint == NULL ||
        zmq->output_endpoint == NULL)
        ts_fuzz_die("loaded configuration lacks a required setting");
    if (zmq->n_subscriptions > TS_SETTING_MAX_LIST)
        ts_fuzz_die("too many subscriptions accepted");

    /* The pipeline may legitimately refuse (say, a table size too large to
     * allocate); what matters is that it does so cleanly. Cap the table so a
     * valid but huge users.max_users does not exhaust the fuzzer's memory
     * limit: that is a resource limit, not a bug. */
    if (settings->limits.max_users <= 100000) {
        ts_rng *rng = ts_rng_new_seeded(1);
        if (rng == NULL)
            ts_fuzz_die("rng");
        ts_pipeline *pipeline = ts_config_make_pipeline(config, rng, err,
                                                        sizeof err);
        if (pipeline != NULL) {
            if (ts_pipeline_default_profile(pipeline) == NULL)
                ts_fuzz_die("pipeline without a default profile");
            ts_pipeline_free(pipeline);
        }
        ts_rng_free(rng);
    }
    ts_config_free(config);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t file_size = nul != NULL ? (size_t)(nul - data) : size;
    ts_fuzz_file_write(&config_file, data, file_size);

    const char *overrides[MAX_OVERRIDES];
    size_t n_overrides = 0;
    char *rest = NULL;
    if (nul != NULL) {
        size_t rest_size = size - file_size - 1;
        rest = malloc(rest_size + 1);
        if (rest == NULL)
            ts_fuzz_die("malloc");
        memcpy(rest, nul + 1, rest_size);
        rest[rest_size] = '\0';
        char *cursor = rest;
        char *end = rest + rest_size;
        while (n_overrides < MAX_OVERRIDES && cursor <= end) {
            overrides[n_overrides++] = cursor;
            cursor += strlen(cursor) + 1;
        }
    }

    try_load(config_file.path, overrides, n_overrides);
    /* The same overrides on the built-in defaults, as `-o` without `-c`. */
    if (n_overrides > 0)
        try_load(NULL, overrides, n_overrides);
    free(rest);
    return 0;
}
