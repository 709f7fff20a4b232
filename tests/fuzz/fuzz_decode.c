/* libFuzzer target: untrusted bytes on the daemon's input socket.
 *
 * Follows the daemon's path for one message: decode the LocationBatch, turn
 * every update into pipeline input, run it through a pipeline built from the
 * built-in defaults, and encode the outcome for publication. Beyond memory
 * and UB errors (ASan/UBSan) it checks the privacy contract on every
 * update: exactly one outcome, and a sanitized outcome never carries the
 * raw coordinates. A fresh pipeline and a fixed seed per input keep every
 * crash reproducible from its input alone. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/codec.h"
#include "engine/config.h"
#include "ops/catalog.h"
#include "engine/log.h"
#include "engine/pipeline.h"
#include "mechanisms/rng.h"

#define TS_FUZZ_TARGET "fuzz_decode"
#include "tests/fuzz/fuzz_support.h"

/* The daemon rejects bigger batches before they reach the pipeline
 * (input.max_batch_updates); a smaller cap keeps each run fast. */
#define FUZZ_MAX_BATCH_UPDATES 1000

static ts_config *defaults_config;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Rejections are logged at warn; thousands per second would drown the
     * fuzzer's own output. */
    ts_log_init("fuzz_decode", TS_LOG_ERROR, 0);
    char err[512];
    defaults_config = ts_config_load(NULL, NULL, 0, err, sizeof err);
    if (defaults_config == NULL)
        ts_fuzz_die(err);
    return 0;
}

/* The published payload must say what the outcome says: decode it back. */
static void check_payload(const ts_outcome *outcome, const ts_buf *topic,
                          const ts_buf *payload)
{
    if (outcome->sanitized) {
        if (topic->len < strlen(TS_TOPIC_SANITIZED_PREFIX) ||
            memcmp(topic->data, TS_TOPIC_SANITIZED_PREFIX,
                   strlen(TS_TOPIC_SANITIZED_PREFIX)) != 0)
            ts_fuzz_die("sanitized outcome published under a non-sanitized topic");
        Tracesan__V1__SanitizedLocation *msg =
            tracesan__v1__sanitized_location__unpack(NULL, payload->len,
                                                     payload->data);
        if (msg == NULL)
            ts_fuzz_die("sanitized payload does not decode");
        if (!msg->has_lat || !msg->has_lon ||
            msg->lat != outcome->report.lat ||
            msg->lon != outcome->report.lon)
            ts_fuzz_die("sanitized payload coordinates differ from the report");
        tracesan__v1__sanitized_location__free_unpacked(msg, NULL);
    } else {
        if (topic->len != strlen(TS_TOPIC_REJECTED) ||
            memcmp(topic->data, TS_TOPIC_REJECTED, topic->len) != 0)
            ts_fuzz_die("rejection published under a wrong topic");
        Tracesan__V1__Rejection *msg =
            tracesan__v1__rejection__unpack(NULL, payload->len,
                                            payload->data);
        if (msg == NULL)
            ts_fuzz_die("rejection payload does not decode");
        if (!msg->has_reason || (int)msg->reason != (int)outcome->reason)
            ts_fuzz_die("rejection payload reason differs from the outcome");
        tracesan__v1__rejection__free_unpacked(msg, NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The daemon's order: scan the wire, then unpack. Both must agree on
     * what is a batch and how many updates it holds. */
    static ts_wire_update wire[FUZZ_MAX_BATCH_UPDATES];
    size_t n_scanned = 0;
    int scanned = ts_codec_scan_batch(data, size, &n_scanned, wire,
                                      FUZZ_MAX_BATCH_UPDATES);
    Tracesan__V1__LocationBatch *batch = ts_codec_decode_batch(data, size);
    if (batch != NULL && (scanned < 0 || n_scanned != batch->n_updates))
        ts_fuzz_die("the wire scan disagrees with protobuf-c's unpack");
    if (batch == NULL)
        return 0;
    if (batch->n_updates == 0 || batch->n_updates > FUZZ_MAX_BATCH_UPDATES) {
        ts_codec_batch_free(batch);
        return 0;
    }

    ts_rng *rng = ts_rng_new_seeded(0x7261636573616eULL);
    if (rng == NULL)
        ts_fuzz_die("rng");
    char err[512];
    ts_pipeline *pipeline =
        ts_config_make_pipeline(defaults_config, rng, err, sizeof err);
    if (pipeline == NULL)
        ts_fuzz_die(err);

    ts_buf topic = { 0 };
    ts_buf payload = { 0 };
    for (size_t i = 0; i < batch->n_updates; i++) {
        ts_input input;
        ts_codec_input_from_update(batch->updates[i], &input);
        ts_codec_input_wire(&wire[i], &input);
        uint64_t before = ts_pipeline_get_stats(pipeline)->updates;

        ts_outcome outcome;
        memset(&outcome, 0xa5, sizeof outcome);
        ts_pipeline_process(pipeline, &input, &outcome);

        if (ts_pipeline_get_stats(pipeline)->updates != before + 1)
            ts_fuzz_die("an update was not counted exactly once");
        if (outcome.sanitized != 0 && outcome.sanitized != 1)
            ts_fuzz_die("outcome.sanitized is neither 0 nor 1");
        if (outcome.sanitized) {
            /* Bitwise equality is the leak: noise of exactly zero in both
             * axes has probability zero, so equal coordinates mean the raw
             * point went out. */
            if (outcome.report.lat == input.lat &&
                outcome.report.lon == input.lon)
                ts_fuzz_die("sanitized coordinates equal the input coordinates");
            if (!isfinite(outcome.report.lat) ||
                !isfinite(outcome.report.lon) ||
                fabs(outcome.report.lat) > 90.0 ||
                fabs(outcome.report.lon) > 180.0)
                ts_fuzz_die("sanitized coordinates are not valid WGS84");
        } else {
            if (outcome.reason <= TS_REASON_NONE ||
                outcome.reason >= TS_REASON_COUNT)
                ts_fuzz_die("rejection without a valid reason");
            if (memchr(outcome.detail, '\0', sizeof outcome.detail) == NULL)
                ts_fuzz_die("rejection detail is not NUL-terminated");
        }

        ts_buf_reset(&topic);
        ts_buf_reset(&payload);
        if (ts_codec_encode_outcome(&outcome, &topic, &payload) != 0)
            ts_fuzz_die("encoding an outcome failed");
        check_payload(&outcome, &topic, &payload);
    }
    /* The sweep runs between batches in the daemon; run it here too. */
    ts_pipeline_expire(pipeline, 64);

    ts_buf_free(&topic);
    ts_buf_free(&payload);
    ts_pipeline_free(pipeline);
    ts_rng_free(rng);
    ts_codec_batch_free(batch);
    return 0;
}
