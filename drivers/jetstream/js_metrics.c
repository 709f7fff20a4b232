#include "drivers/jetstream/js_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/log.h"

static const double COMMIT_BOUNDS[N_COMMIT_BOUNDS] = {
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5
};

void ts_js_observe_commit(ts_jetstream *m, partition *p, double seconds)
{
    pthread_mutex_lock(&m->lock);
    size_t b = 0;
    while (b < N_COMMIT_BOUNDS && seconds > COMMIT_BOUNDS[b])
        b++;
    m->commit_buckets[b]++;
    m->commit_count++;
    m->commit_sum += seconds;
    m->stats[p->index].commits++;
    m->stats[p->index].commit_seconds_sum += seconds;
    if (m->n_latencies < LATENCY_SAMPLES)
        m->latencies[m->n_latencies++] = seconds;
    else
        m->latencies[m->commit_count % LATENCY_SAMPLES] = seconds;
    pthread_mutex_unlock(&m->lock);
}

static void add_stats(ts_pipeline_stats *total, const ts_pipeline_stats *now,
                      ts_pipeline_stats *counted)
{
    total->updates += now->updates - counted->updates;
    total->sanitized += now->sanitized - counted->sanitized;
    total->repeated += now->repeated - counted->repeated;
    for (int r = 0; r < TS_REASON_COUNT; r++)
        total->rejected[r] += now->rejected[r] - counted->rejected[r];
    total->users_created += now->users_created - counted->users_created;
    total->users_expired += now->users_expired - counted->users_expired;
    total->budget_exhaustions +=
        now->budget_exhaustions - counted->budget_exhaustions;
    *counted = *now;
}

/* Partitions come and go with their pipelines; the totals keep what each
 * counted while it was ours. */
void ts_js_count_pipeline(ts_jetstream *m, partition *p)
{
    if (m->stats == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    if (p->pipeline != NULL) {
        add_stats(&m->totals.pipeline, ts_pipeline_get_stats(p->pipeline),
                  &p->counted);
        m->stats[p->index].users = ts_pipeline_user_count(p->pipeline);
    } else {
        m->stats[p->index].users = 0;
    }
    m->totals.messages_in = m->group.messages;
    m->totals.updates_before_pipeline = m->group.refused_before_pipeline;
    m->totals.encode_failures = m->group.encode_failures;
    pthread_mutex_unlock(&m->lock);
}

int ts_js_render_metrics(ts_jetstream *m, ts_buf *out)
{
    char line[256];
    int rc = 0;
#define PUT(...)                                                            \
    do {                                                                    \
        int n_ = snprintf(line, sizeof line, __VA_ARGS__);                  \
        if (rc == 0 && ts_buf_append(out, line, (size_t)n_) != 0)           \
            rc = -1;                                                        \
    } while (0)
    pthread_mutex_lock(&m->lock);
    PUT("# HELP tracesand_jetstream_connected 1 while ts_js_connected to NATS\n"
        "# TYPE tracesand_jetstream_connected gauge\n"
        "tracesand_jetstream_connected %d\n", m->connected);
    static const struct { const char *name, *type, *help; } rows[] = {
        { "tracesand_partition_owned", "gauge",
          "1 while this instance holds the partition's lease" },
        { "tracesand_partition_lag_messages", "gauge",
          "input messages waiting in the partition's consumer" },
        { "tracesand_partition_messages_total", "counter",
          "input messages processed" },
        { "tracesand_partition_updates_total", "counter",
          "updates processed" },
        { "tracesand_partition_commits_total", "counter",
          "changelog records committed" },
        { "tracesand_partition_commit_seconds_sum", "counter",
          "time from a group's first fetch to its changelog acknowledgement" },
        { "tracesand_partition_takeovers_total", "counter",
          "times this instance took the partition over" },
        { "tracesand_partition_fenced_total", "counter",
          "commits refused because another owner wrote first" },
        { "tracesand_partition_republished_total", "counter",
          "changelog records republished on takeover" },
        { "tracesand_partition_duplicate_inputs_total", "counter",
          "input messages a producer had sent before, acknowledged unprocessed" },
        { "tracesand_partition_reused_sequences_total", "counter",
          "new input messages at a sequence already committed, not processed" },
        { "tracesand_partition_groups_in_flight", "gauge",
          "groups between their fetch and their inputs' acknowledgement" },
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        PUT("# HELP %s %s\n# TYPE %s %s\n", rows[r].name, rows[r].help,
            rows[r].name, rows[r].type);
        for (uint32_t i = 0; i < m->n_partitions; i++) {
            const part_stats *s = &m->stats[i];
            switch (r) {
            case 0: PUT("%s{partition=\"%u\"} %d\n", rows[r].name, i, s->owned); break;
            case 1: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->lag); break;
            case 2: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->messages); break;
            case 3: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->updates); break;
            case 4: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->commits); break;
            case 5: PUT("%s{partition=\"%u\"} %.6f\n", rows[r].name, i, s->commit_seconds_sum); break;
            case 6: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->takeovers); break;
            case 7: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->fenced); break;
            case 8: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->republished); break;
            case 9: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->duplicates); break;
            case 10: PUT("%s{partition=\"%u\"} %" PRIu64 "\n", rows[r].name, i, s->reused); break;
            default: PUT("%s{partition=\"%u\"} %zu\n", rows[r].name, i, s->in_flight); break;
            }
        }
    }
    PUT("# HELP tracesand_jetstream_commit_seconds fetch to changelog "
        "acknowledgement, per group\n"
        "# TYPE tracesand_jetstream_commit_seconds histogram\n");
    uint64_t cumulative = 0;
    for (size_t b = 0; b < N_COMMIT_BOUNDS; b++) {
        cumulative += m->commit_buckets[b];
        PUT("tracesand_jetstream_commit_seconds_bucket{le=\"%g\"} %" PRIu64
            "\n", COMMIT_BOUNDS[b], cumulative);
    }
    cumulative += m->commit_buckets[N_COMMIT_BOUNDS];
    PUT("tracesand_jetstream_commit_seconds_bucket{le=\"+Inf\"} %" PRIu64
        "\ntracesand_jetstream_commit_seconds_sum %.6f\n"
        "tracesand_jetstream_commit_seconds_count %" PRIu64 "\n",
        cumulative, m->commit_sum, m->commit_count);
    pthread_mutex_unlock(&m->lock);
#undef PUT
    return rc;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void ts_js_log_latencies(ts_jetstream *m)
{
    if (m->n_latencies == 0)
        return;
    qsort(m->latencies, m->n_latencies, sizeof *m->latencies, compare_double);
    size_t n = m->n_latencies;
    uint64_t updates = 0;
    for (uint32_t i = 0; i < m->n_partitions; i++)
        updates += m->stats[i].updates;
    ts_log(TS_LOG_INFO, "jetstream summary updates=%" PRIu64 " commits=%"
           PRIu64 " commit_ms p50=%.2f p90=%.2f p99=%.2f max=%.2f", updates,
           m->commit_count, m->latencies[n / 2] * 1000,
           m->latencies[n * 9 / 10] * 1000, m->latencies[n * 99 / 100] * 1000,
           m->latencies[n - 1] * 1000);
}

