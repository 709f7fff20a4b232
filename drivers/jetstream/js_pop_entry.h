/* One profile's part of the cluster-wide population job
 * (js_population.h): what it shows (the bucket's last record), the
 * channels it holds, and installing them on the profile. Internal to
 * drivers/jetstream/; js_pop_holder.c runs the loop on it and
 * js_population.c the rest.
 *
 * A channel is built at most once per version on an instance and kept
 * here while anything reads it: the profile releasing through it
 * (installed), the version waiting for the JetStream thread (pending),
 * and the loop's two sources while this instance holds the lease. */
#ifndef TRACESAN_DRIVERS_JETSTREAM_JS_POP_ENTRY_H
#define TRACESAN_DRIVERS_JETSTREAM_JS_POP_ENTRY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#include "drivers/jetstream/partition_lease.h"
#include "drivers/jetstream/sub_graveyard.h"
#include "mechanisms/population.h"
#include "wire/density.h"
#include "wire/format.h"

#define TS_JS_POP_HELD_MAX 8
#define TS_JS_POP_NAME_MAX 128
#define TS_JS_POP_KEY_MAX (TS_JS_POP_NAME_MAX + 16)

struct ts_driver;

/* What every profile's entry uses of the module. */
typedef struct ts_js_pop_ctx {
    struct ts_driver *m;
    jsCtx *js;                   /* the module thread's calls */
    kvStore *kv;                 /* tracesan_population, on js */
    kvStore *lease_kv;           /* tracesan_leases, on js */
    const ts_format *format;     /* output.encoding */
    int batch;                   /* output.format = "batch" */
    int64_t ttl_ms;              /* nats.lease_ttl_s */
    int64_t publish_ms;          /* output.density_publish_s */
    pthread_mutex_t lock;        /* every entry's shared part */
    ts_sub_graveyard *graveyard; /* the driver's (sub_graveyard.h) */
} ts_js_pop_ctx;

typedef struct ts_js_pop_held {
    void *channel;
    uint32_t version;
} ts_js_pop_held;

/* The loop while this instance holds the profile's lease (the module
 * thread's only). */
typedef struct ts_js_pop_holder {
    int holding;
    ts_lease_view view;          /* the lease as last read */
    uint64_t lease_rev;
    uint64_t epoch;              /* the revision it was taken at */
    int64_t deadline_ms;
    int64_t next_renew_ms;
    int64_t next_look_ms;        /* when to read the lease again */
    int ready;                   /* the loop resumed from the bucket */
    ts_population_loop loop;
    uint64_t kv_rev;             /* the record the loop goes on from */
    uint64_t last_seq;           /* last output-stream sequence counted */
    natsSubscription *sub;
    ts_population_job job;
    pthread_t job_thread;
    int job_threaded;            /* job_thread is to be joined */
    int job_running;
    int job_done;                /* set by the job thread (atomic) */
    uint64_t job_out_seq;        /* the loop's counters at the close */
    uint64_t job_reports_total;
    uint64_t job_stale;
    uint64_t job_outside;
    int64_t next_density_ms;
} ts_js_pop_holder;

typedef struct ts_js_pop_entry {
    ts_js_pop_ctx *ctx;
    char name[TS_JS_POP_NAME_MAX];
    const char *mechanism;
    const ts_population_ops *ops;
    void *mech;                  /* shared by every partition's pipeline */
    size_t n;
    char est_key[TS_JS_POP_KEY_MAX];     /* in tracesan_population */
    char lease_key[TS_JS_POP_KEY_MAX];   /* in tracesan_leases */
    char reports_subject[TS_JS_POP_KEY_MAX];
    /* Under ctx->lock: */
    ts_js_pop_held held[TS_JS_POP_HELD_MAX];
    const void *installed;       /* NULL: the profile's own first channel */
    uint32_t installed_version;
    void *pending;               /* adopted, not installed yet */
    uint32_t pending_version;
    ts_population_record shown;  /* the bucket's last record */
    int has_shown;
    int lease_held;
    uint64_t failures;
    uint64_t densities_published;
    uint64_t densities_dropped;
    double last_ibu_ms;
    double last_build_ms;
    /* The module thread's: */
    uint64_t seen_rev;           /* the bucket's revision last adopted */
    int warned_grid;
    ts_js_pop_holder holder;
} ts_js_pop_entry;

/* Fills the entry for a profile (name, ops, mechanism); keys and
 * subjects follow from the name. The profile releases through its own
 * first channel, version 1. */
void ts_js_pop_entry_init(ts_js_pop_entry *e, ts_js_pop_ctx *ctx,
                          const char *name, const char *mechanism,
                          const ts_population_ops *ops, void *mech);
/* Puts the profile back on its first channel and frees what it holds
 * (the holder must be stopped). */
void ts_js_pop_entry_free(ts_js_pop_entry *e);

/* The channel of `version`, whose prior is theta (NULL: uniform): the one
 * held, or built now (BA) and held. NULL with err on failure. */
const void *ts_js_pop_channel(ts_js_pop_entry *e, uint32_t version,
                              const double *theta, char *err,
                              size_t errlen);
/* Holds a channel built elsewhere (the holder's job). -1 when full (the
 * caller still owns it). */
int ts_js_pop_hold(ts_js_pop_entry *e, void *channel, uint32_t version);
/* Frees what nothing reads any more (module thread). */
void ts_js_pop_collect(ts_js_pop_entry *e);

/* The newest version installed or waiting. */
uint32_t ts_js_pop_newest(ts_js_pop_entry *e);
/* A held channel for the JetStream thread to install, when it is newer
 * than what it has. */
void ts_js_pop_offer(ts_js_pop_entry *e, const void *channel,
                     uint32_t version);
/* JetStream thread (or before it runs): installs the waiting version.
 * 1 when one went in. */
int ts_js_pop_install_pending(ts_js_pop_entry *e);
/* JetStream thread: reads the bucket's latest record with `js` and
 * installs its version when newer. 0, or -1 when it could not. */
int ts_js_pop_catch_up(ts_js_pop_entry *e, jsCtx *js);

/* The bucket's record for the entry: 1 found (free it), 0 absent, -1 on
 * an error (logged) or bytes that are no record. The bucket allows
 * direct gets, which any replica may answer, a little behind: */
int ts_js_pop_read(ts_js_pop_entry *e, kvStore *kv,
                   ts_population_record *record, uint64_t *revision);
/* the same from the stream's leader, which holds every write it
 * acknowledged: what an ordering argument needs (a restored partition's
 * catching up, a holder's resuming). */
int ts_js_pop_read_latest(ts_js_pop_entry *e, jsCtx *js,
                          ts_population_record *record, uint64_t *revision);
/* Shows a record (a copy) on /density and /metrics, unless the one shown
 * is newer. */
void ts_js_pop_show(ts_js_pop_entry *e, const ts_population_record *record);
/* Whether a record is of this profile's grid (logs once when not). */
int ts_js_pop_same_grid(ts_js_pop_entry *e,
                        const ts_population_record *record);
/* The view of the shown record (under ctx->lock). */
ts_density_view ts_js_pop_view(const ts_js_pop_entry *e);

#endif
