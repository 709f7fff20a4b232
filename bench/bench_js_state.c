/* Which JetStream layout for the replicated per-partition state (issue 16:
 * "a replicated KV bucket, or a per-partition changelog stream ...; choose
 * one and justify it by measurement").
 *
 * Both write G groups of U dirty user records of B bytes each and wait,
 * group by group, until JetStream has acknowledged all of it (what the
 * debit-before-publish rule waits for):
 *   kv         one KV put per user: async publishes to $KV.<bucket>.<key>
 *              (the KV API of libnats 3.4 has only synchronous puts, which
 *              would cost a round trip per user), then wait for all acks
 *   changelog  one record per group holding every user, one publish
 * Prints each layout's group commit time percentiles and records/s.
 *   bench_js_state URL [USERS_PER_GROUP] [GROUPS] [RECORD_BYTES] [REPLICAS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nats/nats.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, double *t, int groups, int users,
                   double total)
{
    qsort(t, (size_t)groups, sizeof *t, compare);
    printf("bench_js_state: %-9s %6d groups x %5d users: p50 %.2f ms, p90 "
           "%.2f ms, p99 %.2f ms; %.0f records/s\n", name, groups, users,
           t[groups / 2] * 1e3, t[groups * 9 / 10] * 1e3,
           t[groups * 99 / 100] * 1e3, groups * (double)users / total);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_js_state URL [USERS] [GROUPS] [BYTES] "
                "[REPLICAS]\n");
        return 2;
    }
    int users = argc > 2 ? atoi(argv[2]) : 500;
    int groups = argc > 3 ? atoi(argv[3]) : 200;
    int bytes = argc > 4 ? atoi(argv[4]) : 100;
    int replicas = argc > 5 ? atoi(argv[5]) : 1;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = 1 << 20;
    if (natsConnection_ConnectTo(&nc, argv[1]) != NATS_OK ||
        natsConnection_JetStream(&js, nc, &jo) != NATS_OK) {
        fprintf(stderr, "bench_js_state: cannot connect to %s\n", argv[1]);
        return 1;
    }
    kvStore *kv = NULL;
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = "bench_state";
    kc.History = 1;
    kc.Replicas = replicas;
    kc.StorageType = js_FileStorage;
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    const char *subjects[] = { "bench.changelog.*" };
    sc.Name = "BENCH_CHANGELOG";
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Replicas = replicas;
    jsErrCode code = 0;
    if (js_CreateKeyValue(&kv, js, &kc) != NATS_OK ||
        js_AddStream(NULL, js, &sc, NULL, &code) != NATS_OK) {
        fprintf(stderr, "bench_js_state: cannot create the bucket/stream\n");
        return 1;
    }
    char *record = malloc((size_t)bytes);
    memset(record, 'r', (size_t)bytes);
    size_t group_len = (size_t)users * ((size_t)bytes + 24);
    char *group = malloc(group_len);
    memset(group, 'g', group_len);
    double *t = calloc((size_t)groups, sizeof *t);
    char subject[128];

    double start = now_s();
    for (int g = 0; g < groups; g++) {
        double t0 = now_s();
        for (int u = 0; u < users; u++) {
            snprintf(subject, sizeof subject, "$KV.bench_state.u%d", u + g % 7);
            js_PublishAsync(js, subject, record, bytes, NULL);
        }
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = 30000;
        if (js_PublishAsyncComplete(js, &po) != NATS_OK) {
            fprintf(stderr, "bench_js_state: kv puts not acknowledged\n");
            return 1;
        }
        t[g] = now_s() - t0;
    }
    report("kv", t, groups, users, now_s() - start);

    start = now_s();
    for (int g = 0; g < groups; g++) {
        double t0 = now_s();
        jsPubAck *ack = NULL;
        snprintf(subject, sizeof subject, "bench.changelog.%d", g % 16);
        if (js_Publish(&ack, js, subject, group, (int)group_len, NULL,
                       &code) != NATS_OK) {
            fprintf(stderr, "bench_js_state: changelog append failed (group "
                    "of %zu bytes)\n", group_len);
            return 1;
        }
        jsPubAck_Destroy(ack);
        t[g] = now_s() - t0;
    }
    report("changelog", t, groups, users, now_s() - start);

    js_DeleteKeyValue(js, "bench_state");
    js_DeleteStream(js, "BENCH_CHANGELOG", NULL, NULL);
    kvStore_Destroy(kv);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    free(record);
    free(group);
    free(t);
    nats_Close();
    return 0;
}
