#include "drivers/jetstream/nats_settings.h"

#define INT_ROW(...) TS_INT_ROW(ts_nats_settings, __VA_ARGS__)
#define STRING_ROW(...) TS_STRING_ROW(ts_nats_settings, __VA_ARGS__)
#define BOOL_ROW(...) TS_BOOL_ROW(ts_nats_settings, __VA_ARGS__)
#define RESTART TS_APPLY_RESTART
/* A file the connection reads; unset (or "") = none. */
#define FILE_ROW(k, f, doc_)                                                 \
    STRING_ROW(k, f, NULL, TS_SETTING_EMPTY_UNSET, NULL, RESTART, doc_)

static const ts_setting_def nats_rows[] = {
    STRING_ROW("nats.servers", servers, "nats://127.0.0.1:4222", 0, NULL,
               RESTART, "NATS server URLs, comma-separated"),
    INT_ROW("nats.partitions", partitions, 1, 4096, 1, "16", RESTART,
            "input partitions P (subjects tracesan.in.<p>)"),
    INT_ROW("nats.replicas", replicas, 1, 5, 1, "1", RESTART,
            "replicas of the streams and the lease bucket"),
    STRING_ROW("nats.instance_id", instance_id, "", TS_SETTING_EMPTY_OK,
               NULL, RESTART,
               "this instance's name in leases; \"\" = host name and pid"),
    INT_ROW("nats.lease_ttl_s", lease_ttl_ms, 1, 3600, 1000, "10", RESTART,
            "a partition lease not renewed this long is free"),
    INT_ROW("nats.fetch_batch", fetch_batch, 1, 100000, 1, "256", RESTART,
            "input messages fetched per partition per group"),
    INT_ROW("nats.max_ack_pending", max_ack_pending, 1, 1000000, 1, "4096",
            RESTART, "unacknowledged input messages per partition"),
    INT_ROW("nats.dedupe_window_s", dedupe_window_ms, 1, 604800, 1000, "600",
            RESTART, "output stream duplicate window"),
    INT_ROW("nats.snapshot_every", snapshot_every, 1, 1000000, 1, "256",
            RESTART, "changelog records between two snapshots"),
    INT_ROW("nats.groups_in_flight", groups_in_flight, 1, 16, 1, "4",
            RESTART, "groups of a partition between fetch and input ack"),
    INT_ROW("nats.restores_at_once", restores_at_once, 1, 64, 1, "8",
            RESTART, "partitions rebuilt concurrently"),
    BOOL_ROW("nats.standby", standby, "false", RESTART,
             "keep warm copies of the partitions others own"),
    FILE_ROW("nats.creds_file", creds_file,
             "NATS credentials file (JWT and NKey seed)"),
    FILE_ROW("nats.nkey_seed_file", nkey_seed_file,
             "NKey seed file (without a creds file)"),
    /* Not a file, but unset the same way. */
    FILE_ROW("nats.nkey_public", nkey_public,
             "the user's public NKey, with nkey_seed_file"),
    FILE_ROW("nats.tls_ca_file", tls_ca_file,
             "CA certificates: set, the connection requires TLS"),
    FILE_ROW("nats.tls_cert_file", tls_cert_file,
             "client certificate chain for TLS"),
    FILE_ROW("nats.tls_key_file", tls_key_file,
             "client private key for TLS"),
};

/* Keys that only work in pairs: refused here rather than at the first
 * connection attempt, so --check-config tells. */
static void finish_nats(void *values, ts_setting_context *context)
{
    const ts_nats_settings *s = values;
    const struct {
        const char *key, *value, *needs, *needed;
        int creds_suffice;   /* a creds file replaces the NKey pair */
    } pairs[] = {
        { "nats.nkey_seed_file", s->nkey_seed_file, "nats.nkey_public",
          s->nkey_public, 1 },
        { "nats.nkey_public", s->nkey_public, "nats.nkey_seed_file",
          s->nkey_seed_file, 1 },
        { "nats.tls_cert_file", s->tls_cert_file, "nats.tls_key_file",
          s->tls_key_file, 0 },
        { "nats.tls_key_file", s->tls_key_file, "nats.tls_cert_file",
          s->tls_cert_file, 0 },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i].value != NULL && pairs[i].needed == NULL &&
            !(pairs[i].creds_suffice && s->creds_file != NULL))
            ts_setting_fail(context, pairs[i].key, "%s needs %s",
                            pairs[i].key, pairs[i].needs);
}

const ts_setting_section ts_nats_setting_section = {
    .name = "nats",
    TS_SECTION_ROWS(nats_rows),
    .size = sizeof(ts_nats_settings),
    .finish = finish_nats,
};

void ts_nats_settings_defaults(ts_nats_settings *nats)
{
    ts_setting_section_defaults(&ts_nats_setting_section, nats);
}

const ts_nats_settings *ts_nats_settings_of(const ts_config *config)
{
    return ts_config_section(config, &ts_nats_setting_section);
}
