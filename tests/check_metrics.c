/* Prometheus rendering of ops/metrics: every counter comes from its
 * source, histograms are cumulative with fixed bounds, label values are
 * escaped, and health is reported consistently. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/metrics.h"
#include "ops/ops_http.h"
#include "tests/support/check_run.h"

static ts_pipeline_stats stats;
static ts_metrics_sources sources;

static void setup(void)
{
    memset(&stats, 0, sizeof stats);
    memset(&sources, 0, sizeof sources);
    sources.pipeline = &stats;
    ts_metrics_set_healthy();
}

static char *render(const ts_metrics *metrics)
{
    size_t len = 0;
    char *text = ts_metrics_render(metrics, &sources, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(strlen(text), len);
    return text;
}

/* The value of the sample whose line starts with `series ` (exact series
 * text, labels included); -1 when absent. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        if (end == NULL)
            break;
        line = end + 1;
    }
    return -1.0;
}

TS_TEST(counters_come_from_the_pipeline_stats)
{
    const char *names[] = { "geoind" };
    ts_metrics *metrics = ts_metrics_new(names, 1);
    ck_assert_ptr_nonnull(metrics);
    stats.updates = 120;
    stats.sanitized = 100;
    stats.repeated = 4;
    stats.rejected[TS_REASON_BUDGET_EXHAUSTED] = 15;
    stats.rejected[TS_REASON_MALFORMED] = 2;
    stats.budget_exhaustions = 3;
    sources.updates_before_pipeline = 5;
    sources.users = 7;
    sources.messages_in = 11;
    sources.messages_published = 117;
    sources.publish_failures = 1;
    char *text = render(metrics);
    ck_assert_double_eq(sample(text, "tracesand_updates_total"), 125);
    ck_assert_double_eq(sample(text, "tracesand_sanitized_total"), 100);
    ck_assert_double_eq(sample(text, "tracesand_repeated_total"), 4);
    ck_assert_double_eq(
        sample(text, "tracesand_rejected_total{reason=\"budget_exhausted\"}"),
        15);
    ck_assert_double_eq(
        sample(text, "tracesand_rejected_total{reason=\"malformed\"}"), 2);
    ck_assert_double_eq(
        sample(text, "tracesand_rejected_total{reason=\"oversized\"}"), 0);
    /* "none" is not a rejection reason. */
    ck_assert_double_eq(
        sample(text, "tracesand_rejected_total{reason=\"none\"}"), -1);
    ck_assert_double_eq(sample(text, "tracesand_budget_exhaustions_total"), 3);
    ck_assert_double_eq(sample(text, "tracesand_users"), 7);
    ck_assert_double_eq(sample(text, "tracesand_messages_received_total"), 11);
    ck_assert_double_eq(sample(text, "tracesand_messages_published_total"),
                        117);
    ck_assert_double_eq(sample(text, "tracesand_publish_failures_total"), 1);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE tracesand_users gauge\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "# TYPE tracesand_updates_total counter\n"));
    free(text);
    ts_metrics_free(metrics);
}
END_TEST

TS_TEST(histograms_are_cumulative_with_fixed_bounds)
{
    const char *names[] = { "geoind", "predictive" };
    ts_metrics *metrics = ts_metrics_new(names, 2);
    ck_assert_ptr_nonnull(metrics);
    /* 3 us lands in the 5e-06 bucket, 0.2 s in 0.25, 100 s only in +Inf. */
    ts_metrics_observe_profile(metrics, 1, 3e-6);
    ts_metrics_observe_profile(metrics, 1, 0.2);
    ts_metrics_observe_profile(metrics, 1, 100.0);
    ts_metrics_observe_profile(metrics, 7, 1.0); /* unknown: ignored */
    ts_metrics_observe_commit(metrics, 0.004, 100);
    ts_metrics_observe_commit(metrics, 0.001, 1);
    char *text = render(metrics);
    static const struct {
        const char *series;
        double value;
    } expected[] = {
        { "tracesand_update_duration_seconds_bucket{profile=\"predictive\",le=\"2.5e-06\"}", 0 },
        { "tracesand_update_duration_seconds_bucket{profile=\"predictive\",le=\"5e-06\"}", 1 },
        { "tracesand_update_duration_seconds_bucket{profile=\"predictive\",le=\"0.1\"}", 1 },
        { "tracesand_update_duration_seconds_bucket{profile=\"predictive\",le=\"0.25\"}", 2 },
        { "tracesand_update_duration_seconds_bucket{profile=\"predictive\",le=\"10\"}", 2 },
        { "tracesand_update_duration_seconds_bucket{profile=\"predictive\",le=\"+Inf\"}", 3 },
        { "tracesand_update_duration_seconds_count{profile=\"predictive\"}", 3 },
        { "tracesand_update_duration_seconds_count{profile=\"geoind\"}", 0 },
        { "tracesand_store_commit_batch_size_bucket{le=\"64\"}", 1 },
        { "tracesand_store_commit_batch_size_bucket{le=\"128\"}", 2 },
        { "tracesand_store_commit_batch_size_sum", 101 },
        { "tracesand_store_commit_duration_seconds_bucket{le=\"0.001\"}", 1 },
        { "tracesand_store_commit_duration_seconds_bucket{le=\"0.005\"}", 2 },
        { "tracesand_store_commit_duration_seconds_count", 2 },
    };
    for (size_t i = 0; i < sizeof expected / sizeof *expected; i++) {
        double got = sample(text, expected[i].series);
        ck_assert_msg(got == expected[i].value, "%s: %g, expected %g",
                      expected[i].series, got, expected[i].value);
    }
    ck_assert_double_eq_tol(
        sample(text,
               "tracesand_update_duration_seconds_sum{profile=\"predictive\"}"),
        100.200003, 1e-9);

    /* Buckets never decrease along a series. */
    double previous = -1.0;
    for (const char *line = strstr(text, "tracesand_event_loop_lag_seconds_bucket");
         line != NULL && strncmp(line, "tracesand_event_loop_lag_seconds_bucket", 39) == 0;
         line = strchr(line, '\n') + 1) {
        double v = strtod(strchr(line, ' ') + 1, NULL);
        ck_assert(v >= previous);
        previous = v;
    }
    free(text);
    ts_metrics_free(metrics);
}
END_TEST

TS_TEST(negative_and_nan_observations_count_as_zero)
{
    ts_metrics *metrics = ts_metrics_new(NULL, 0);
    ck_assert_ptr_nonnull(metrics);
    ts_metrics_observe_loop_lag(metrics, -0.5);
    ts_metrics_observe_loop_lag(metrics, NAN);
    char *text = render(metrics);
    ck_assert_double_eq(
        sample(text, "tracesand_event_loop_lag_seconds_bucket{le=\"1e-06\"}"), 2);
    ck_assert_double_eq(sample(text, "tracesand_event_loop_lag_seconds_sum"), 0);
    ck_assert_double_eq(sample(text, "tracesand_event_loop_lag_last_seconds"), 0);
    free(text);
    ts_metrics_free(metrics);
}
END_TEST

TS_TEST(profile_label_values_are_escaped)
{
    const char *names[] = { "a\"b\\c\nd" };
    ts_metrics *metrics = ts_metrics_new(names, 1);
    ck_assert_ptr_nonnull(metrics);
    char *text = render(metrics);
    ck_assert_ptr_nonnull(strstr(
        text, "tracesand_update_duration_seconds_count{profile=\"a\\\"b\\\\c\\nd\"} 0\n"));
    free(text);
    ts_metrics_free(metrics);
}
END_TEST

TS_TEST(health_keeps_the_first_reason)
{
    char reason[64];
    ck_assert_int_eq(ts_metrics_healthy(reason, sizeof reason), 1);
    ck_assert_str_eq(reason, "");
    ts_metrics_set_unhealthy("store not writable");
    ts_metrics_set_unhealthy("later problem");
    ck_assert_int_eq(ts_metrics_healthy(reason, sizeof reason), 0);
    ck_assert_str_eq(reason, "store not writable");
    ts_metrics *metrics = ts_metrics_new(NULL, 0);
    ck_assert_ptr_nonnull(metrics);
    char *text = render(metrics);
    ck_assert_double_eq(sample(text, "tracesand_healthy"), 0);
    free(text);
    ts_metrics_set_healthy();
    ck_assert_int_eq(ts_metrics_healthy(reason, sizeof reason), 1);
    text = render(metrics);
    ck_assert_double_eq(sample(text, "tracesand_healthy"), 1);
    free(text);
    ts_metrics_free(metrics);
}
END_TEST

TS_TEST(reloads_are_counted)
{
    ts_metrics *metrics = ts_metrics_new(NULL, 0);
    ck_assert_ptr_nonnull(metrics);
    ts_metrics_count_reload(metrics, 1);
    ts_metrics_count_reload(metrics, 0);
    ts_metrics_count_reload(metrics, 0);
    char *text = render(metrics);
    ck_assert_double_eq(sample(text, "tracesand_config_reloads_total"), 1);
    ck_assert_double_eq(sample(text, "tracesand_config_reload_failures_total"), 2);
    free(text);
    ts_metrics_free(metrics);
}
END_TEST

TS_TEST(listen_addresses_parse)
{
    char host[64];
    char err[128];
    unsigned port = 1;
    ck_assert_int_eq(ts_ops_http_parse_listen("127.0.0.1:9107", host,
                                              sizeof host, &port, err,
                                              sizeof err), 0);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_uint_eq(port, 9107);
    ck_assert_int_eq(ts_ops_http_parse_listen("[::1]:0", host, sizeof host,
                                              &port, err, sizeof err), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_uint_eq(port, 0);
    const char *bad[] = { "9107", ":9107", "localhost:", "h:65536", "h:-1",
                          "h:12x", "[::1:80", "::1]:80" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(ts_ops_http_parse_listen(bad[i], host, sizeof host,
                                               &port, err, sizeof err) == -1,
                      "accepted '%s'", bad[i]);
}
END_TEST

int main(void)
{
    return ts_check_main("metrics", 0, setup, NULL);
}
