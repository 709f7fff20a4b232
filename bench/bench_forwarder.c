/* bench_forwarder: the baseline tracesand is measured against (bench/run.sh).
 *
 *   bench_forwarder -c tracesand.conf [-o PATH=VALUE]...
 *
 * The daemon's own parts without a mechanism or state: the same
 * configuration, ZeroMQ transport and libevent loop, the same message
 * intake (scan, unpack, limits) and the same outbox and codec, publishing
 * one SanitizedLocation per update on sanitized.<profile>. What it
 * publishes is a fixed point, never the input's: this program exists to
 * time the plumbing, and must not be usable as an unsanitized bridge.
 * Prints the daemon's "ready input=... output=..." line on stderr, and the
 * updates it forwarded when SIGTERM/SIGINT stops it.
 */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datapath/intake.h"
#include "datapath/outbox.h"
#include "drivers/driver_registry.h"
#include "drivers/zmq/zmq_transport.h"
#include "engine/config.h"
#include "engine/pipeline.h"
#include "ops/catalog.h"
#include "wire/format.h"

#define MAX_OVERRIDES 64

/* Named like the profile tracesand runs in the same bench, so both
 * publish the same bytes per point; it is never asked to release. */
static const ts_mechanism_ops forwarded_ops = { .name = "geoind" };

typedef struct forwarder {
    const ts_settings *settings;
    const ts_format *format;
    size_t batch_outcomes;       /* 0: one message per outcome */
    ts_format_batch batch;
    ts_buf topic, payload;
    ts_transport *transport;
    struct event_base *base;
    ts_outbox outbox;
    ts_codec_arena arena;
    ts_wire_update *wire;
    ts_profile profile;
    uint64_t forwarded;
    uint64_t refused;
} forwarder;

/* The open OutcomeBatch as one message, when it holds any. */
static void flush(forwarder *f)
{
    const void *data;
    size_t len;
    if (ts_format_batch_count(&f->batch) == 0 ||
        ts_format_batch_payload(f->format, &f->batch, &f->payload, &data,
                                &len) != 0)
        return;
    ts_outbox_put(&f->outbox, TS_TOPIC_BATCH, sizeof TS_TOPIC_BATCH - 1,
                  data, len);
    ts_format_batch_reset(&f->batch);
}

/* As the group body outputs: one message, or into the open batch. */
static void output(forwarder *f, const ts_outcome *outcome, ts_reason reason,
                   const char *detail)
{
    if (f->batch_outcomes > 0) {
        if (outcome != NULL)
            ts_format_batch_outcome(f->format, &f->batch, outcome);
        else
            ts_format_batch_rejection(f->format, &f->batch, reason, detail);
        if (ts_format_batch_count(&f->batch) >= f->batch_outcomes)
            flush(f);
        return;
    }
    ts_buf_reset(&f->topic);
    ts_buf_reset(&f->payload);
    if ((outcome != NULL
             ? ts_format_outcome(f->format, outcome, &f->topic, &f->payload)
             : ts_format_rejection(f->format, reason, detail, &f->topic,
                                   &f->payload)) == 0)
        ts_outbox_put(&f->outbox, f->topic.data, f->topic.len,
                      f->payload.data, f->payload.len);
}

static void on_message(void *arg, const ts_inbound *message)
{
    forwarder *f = arg;
    Tracesan__V1__LocationBatch *batch;
    ts_reason reason;
    char detail[160];
    if (ts_intake_open(f->settings, message, f->wire, &f->arena, &batch,
                       &reason, detail, sizeof detail) != 0) {
        f->refused++;
        output(f, NULL, reason, detail);
        flush(f);
        return;
    }
    for (size_t i = 0; i < batch->n_updates; i++) {
        ts_input input;
        ts_codec_input_from_update(batch->updates[i], &input);
        ts_outcome outcome = {
            .sanitized = 1,
            .user_id = input.user_id != NULL ? input.user_id : "",
            .ts_ms = input.ts_ms,
            .profile = &f->profile,
            .report = { .lat = 0.0, .lon = 0.0, .eps_point = 1e-3 },
            .eps_spent_window = 1e-3,
            .eps_remaining = 1.0,
            .window_start_ms = input.ts_ms,
        };
        output(f, &outcome, TS_REASON_NONE, NULL);
        f->forwarded++;
    }
    ts_codec_batch_release(&f->arena, batch);
    flush(f);
}

static void on_batch_end(void *arg)
{
    forwarder *f = arg;
    ts_publisher publisher = ts_transport_publisher(f->transport);
    ts_outbox_publish(&f->outbox, &publisher);
}

static int on_output_ready(void *arg)
{
    forwarder *f = arg;
    ts_publisher publisher = ts_transport_publisher(f->transport);
    return ts_outbox_publish(&f->outbox, &publisher);
}

static void on_signal(evutil_socket_t signum, short what, void *arg)
{
    (void)signum;
    (void)what;
    event_base_loopbreak(((forwarder *)arg)->base);
}

int main(int argc, char **argv)
{
    const char *config_path = NULL;
    const char *overrides[MAX_OVERRIDES];
    size_t n_overrides = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            config_path = argv[++i];
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc &&
                   n_overrides < MAX_OVERRIDES) {
            overrides[n_overrides++] = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_forwarder -c CONFIG "
                    "[-o PATH=VALUE]...\n");
            return 2;
        }
    }
    char err[512] = "";
    ts_config *config = ts_config_load(config_path, overrides, n_overrides,
                                       err, sizeof err);
    if (config == NULL) {
        fprintf(stderr, "bench_forwarder: %s\n", err);
        return 1;
    }
    forwarder f = { .settings = ts_config_settings(config) };
    const ts_format_settings *format =
        ts_config_section(config, &ts_format_setting_section);
    f.format = ts_format_of(format);
    f.batch_outcomes = format->batch ? format->batch_outcomes : 0;
    ts_codec_arena_init(&f.arena);
    f.profile.name = (char *)"geoind";
    f.profile.ops = &forwarded_ops;
    f.wire = calloc(f.settings->max_batch_updates, sizeof *f.wire);
    f.base = event_base_new();
    int status = 1;
    ts_transport_options options = {
        .core = f.settings,
        .zmq = ts_zmq_settings_of(config),
        .format = format,
        .sub_input = strcmp(ts_driver_input_type(config), "sub") == 0,
        .push_output = strcmp(ts_driver_output_type(config), "push") == 0,
    };
    if (f.wire == NULL || f.base == NULL ||
        ts_transport_open(&f.transport, &options, f.base, err,
                          sizeof err) != 0) {
        fprintf(stderr, "bench_forwarder: cannot start: %s\n", err);
        goto out;
    }
    struct event *term = evsignal_new(f.base, SIGTERM, on_signal, &f);
    struct event *interrupt = evsignal_new(f.base, SIGINT, on_signal, &f);
    event_add(term, NULL);
    event_add(interrupt, NULL);
    ts_transport_start(f.transport, on_message, on_batch_end,
                       on_output_ready, &f);
    fprintf(stderr, "bench_forwarder: ready input=%s output=%s\n",
            ts_transport_input_endpoint(f.transport),
            ts_transport_output_endpoint(f.transport));
    status = event_base_dispatch(f.base) < 0;
    fprintf(stderr, "bench_forwarder: forwarded %llu updates, refused %llu "
            "messages\n", (unsigned long long)f.forwarded,
            (unsigned long long)f.refused);
    event_free(term);
    event_free(interrupt);
out:
    if (f.transport != NULL)
        ts_transport_close(f.transport);
    ts_format_batch_free(&f.batch);
    ts_buf_free(&f.topic);
    ts_buf_free(&f.payload);
    if (f.base != NULL)
        event_base_free(f.base);
    ts_outbox_free(&f.outbox);
    ts_codec_arena_free(&f.arena);
    free(f.wire);
    ts_config_free(config);
    return status;
}
