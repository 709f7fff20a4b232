/* The JetStream driver's setting rows (nats.*, docs/scale-out.md): the
 * connection, the partitions, leases and the changelog. */
#ifndef TRACESAN_DRIVERS_JETSTREAM_NATS_SETTINGS_H
#define TRACESAN_DRIVERS_JETSTREAM_NATS_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/config.h"

typedef struct ts_nats_settings {
    const char *servers;                 /* comma-separated URLs */
    size_t partitions;
    size_t replicas;
    const char *instance_id;             /* "" = host name and pid */
    int64_t lease_ttl_ms;
    size_t fetch_batch;
    size_t max_ack_pending;
    int64_t dedupe_window_ms;
    size_t snapshot_every;
    size_t groups_in_flight;             /* per partition, between fetch
                                            and the inputs' ack */
    size_t restores_at_once;
    int standby;                         /* warm copies of the others */
    const char *creds_file;              /* NULL = none */
    const char *nkey_seed_file;
    const char *nkey_public;             /* with nkey_seed_file */
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
} ts_nats_settings;

extern const ts_setting_section ts_nats_setting_section;

/* The rows' defaults (the CLI's connection starts from them). */
void ts_nats_settings_defaults(ts_nats_settings *nats);
/* The rows' values in a configuration loaded with the section. */
const ts_nats_settings *ts_nats_settings_of(const ts_config *config);

#endif
