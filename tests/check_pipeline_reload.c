/* ts_pipeline_replace_profiles: new parameters take effect while users keep
 * their window and spend; a change of shape is refused and leaves the
 * pipeline exactly as it was. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/config.h"
#include "ops/catalog.h"
#include "engine/pipeline.h"
#include "engine/pipeline_reload.h"
#include "inference/model_file.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"

/* Shipped geoind defaults: window budget ln 10 / 100 m. */
#define WINDOW_BUDGET (2.302585092994046 / 100.0)
#define TOLERANCE 1e-12

static ts_config *load(const char *const *overrides, size_t n)
{
    char err[512];
    ts_config *config = ts_config_load(NULL, overrides, n, err, sizeof err);
    ck_assert_msg(config != NULL, "config: %s", err);
    return config;
}

static void send(ts_pipeline *pipeline, const char *user, int64_t ts_s,
                 ts_outcome *out)
{
    ts_input input = {
        .user_id = user, .ts_ms = ts_s * 1000, .lat = 40.7, .lon = -74.0,
    };
    ts_pipeline_process(pipeline, &input, out);
}

static int replace_with(ts_pipeline *pipeline, const char *const *overrides,
                        size_t n, char *err, size_t errlen)
{
    ts_config *config = load(overrides, n);
    ts_profile *profiles = NULL;
    size_t n_profiles = 0, default_index = 0;
    ck_assert_int_eq(ts_config_build_profiles(config, &profiles, &n_profiles,
                                              &default_index, err, errlen), 0);
    int rc = ts_pipeline_replace_profiles(pipeline, profiles, n_profiles,
                                          default_index, err, errlen);
    ts_config_free(config);
    return rc;
}

TS_TEST(new_parameters_apply_and_spend_is_kept)
{
    const char *before[] = { "profiles.geoind.points_per_window=3" };
    const char *after[] = { "profiles.geoind.points_per_window=6" };
    ts_rng *rng = ts_rng_new_seeded(7);
    char err[512];
    ts_config *config = load(before, 1);
    ts_pipeline *pipeline = ts_config_make_pipeline(config, rng, err,
                                                    sizeof err);
    ck_assert_msg(pipeline != NULL, "%s", err);
    ts_outcome out;
    send(pipeline, "a", 1700000000, &out);
    send(pipeline, "a", 1700000010, &out);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.eps_spent_window, 2 * WINDOW_BUDGET / 3,
                            TOLERANCE);
    const ts_profile *slot = ts_pipeline_profile_at(pipeline, 0);

    ck_assert_int_eq(replace_with(pipeline, after, 1, err, sizeof err), 0);
    /* Same slot, so outcomes and users that point at it stay valid. */
    ck_assert_ptr_eq(ts_pipeline_profile_at(pipeline, 0), slot);
    ck_assert_uint_eq(ts_pipeline_user_count(pipeline), 1);
    send(pipeline, "a", 1700000020, &out);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.report.eps_point, WINDOW_BUDGET / 6,
                            TOLERANCE);
    ck_assert_double_eq_tol(out.eps_spent_window, 5 * WINDOW_BUDGET / 6,
                            TOLERANCE);
    send(pipeline, "a", 1700000030, &out);
    ck_assert(out.sanitized);
    send(pipeline, "a", 1700000040, &out);
    ck_assert(!out.sanitized);
    ck_assert_int_eq(out.reason, TS_REASON_BUDGET_EXHAUSTED);
    send(pipeline, "b", 1700000040, &out);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.eps_spent_window, WINDOW_BUDGET / 6,
                            TOLERANCE);
    ts_pipeline_free(pipeline);
    ts_config_free(config);
    ts_rng_free(rng);
}
END_TEST

TS_TEST(shape_changes_are_refused_and_change_nothing)
{
    const char *before[] = { "profiles.geoind.points_per_window=3" };
    ts_rng *rng = ts_rng_new_seeded(8);
    char err[512];
    ts_config *config = load(before, 1);
    ts_pipeline *pipeline = ts_config_make_pipeline(config, rng, err,
                                                    sizeof err);
    ck_assert_msg(pipeline != NULL, "%s", err);
    ts_outcome out;
    send(pipeline, "a", 1700000000, &out);
    ck_assert(out.sanitized);

    /* A second profile: the count changes. */
    const char *added[] = {
        "profiles.geoind.points_per_window=6",
        "profiles.other.mechanism=\"geoind\"",
    };
    ck_assert_int_eq(replace_with(pipeline, added, 2, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "restart"));
    /* A renamed profile (and default) instead of geoind. */
    const char *renamed[] = {
        "default_profile=\"other\"",
        "profiles.other.mechanism=\"geoind\"",
    };
    ts_config *renamed_config = NULL;
    {
        /* Built from scratch: the built-in geoind exists only without a
         * profiles group, so this yields just `other`. */
        renamed_config = load(renamed, 2);
        ts_profile *profiles = NULL;
        size_t n = 0, def = 0;
        ck_assert_int_eq(ts_config_build_profiles(renamed_config, &profiles,
                                                  &n, &def, err, sizeof err),
                         0);
        ck_assert_int_eq(ts_pipeline_replace_profiles(pipeline, profiles, n,
                                                      def, err, sizeof err),
                         -1);
        ts_config_free(renamed_config);
    }
    /* Unchanged: still 3 points per window for everyone. */
    send(pipeline, "a", 1700000010, &out);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.report.eps_point, WINDOW_BUDGET / 3,
                            TOLERANCE);
    ck_assert_str_eq(ts_pipeline_profile_at(pipeline, 0)->name, "geoind");
    ck_assert_uint_eq(ts_pipeline_profile_count(pipeline), 1);
    ts_pipeline_free(pipeline);
    ts_config_free(config);
    ts_rng_free(rng);
}
END_TEST

/* A one-cell model (the smallest valid file) at a temporary path. */
static void write_one_cell_model(char *path, size_t path_len)
{
    snprintf(path, path_len, "%s/check_reload_model.XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *out = fdopen(fd, "wb");
    ck_assert_ptr_nonnull(out);
    char err[256] = "";
    ts_grid grid;
    ck_assert_msg(ts_grid_init(&grid, 0.0, 0.0, 0.0005, 0.0005, 100.0, err,
                               sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(grid.cols * grid.rows, 1);
    static const uint64_t row_start[2] = { 0, 1 };
    static const uint32_t col[1] = { 0 };
    static const double prob[1] = { 1.0 };
    static const double initial[1] = { 1.0 };
    ts_markov markov = {
        .cell_count = 1, .tick_s = 60.0, .nnz = 1, .row_start = row_start,
        .col = col, .prob = prob, .initial = initial, .fallback = NULL,
    };
    ts_model_source popular = { .markov = &markov, .transitions = 1 };
    ck_assert_msg(ts_model_write(out, &grid, 10.0, &popular, NULL, 0, NULL,
                                 err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(fclose(out), 0);
}

static void expect_disabled(ts_pipeline *pipeline)
{
    ts_input input = { .user_id = "d", .ts_ms = 1700000000000, .lat = 0.0001,
                       .lon = 0.0001, .profile = "pim" };
    ts_outcome out;
    ts_pipeline_process(pipeline, &input, &out);
    ck_assert(!out.sanitized);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_msg(strstr(out.detail, "is disabled") != NULL, "%s",
                  out.detail);
}

/* A disabled profile (model = "") is not in the pipeline: reloading with it
 * still disabled applies; enabling it adds a profile, which needs a restart
 * and is refused without changing anything. */
TS_TEST(disabled_profile_across_reloads)
{
    char model[512];
    write_one_cell_model(model, sizeof model);
    char enable[600];
    snprintf(enable, sizeof enable, "profiles.pim.model=\"%s\"", model);
    const char *disabled[] = { "profiles.pim.mechanism=pim",
                               "profiles.pim.model=\"\"",
                               "profiles.geoind.points_per_window=3" };
    const char *still_disabled[] = { "profiles.pim.mechanism=pim",
                                     "profiles.pim.model=\"\"",
                                     "profiles.geoind.points_per_window=6" };
    const char *enabled[] = { "profiles.pim.mechanism=pim", enable,
                              "profiles.geoind.points_per_window=6" };
    ts_rng *rng = ts_rng_new_seeded(5);
    char err[512];
    ts_config *config = load(disabled, 3);
    ts_pipeline *pipeline = ts_config_make_pipeline(config, rng, err,
                                                    sizeof err);
    ck_assert_msg(pipeline != NULL, "%s", err);
    ck_assert_uint_eq(ts_pipeline_profile_count(pipeline), 1);
    expect_disabled(pipeline);

    ck_assert_msg(replace_with(pipeline, still_disabled, 3, err,
                               sizeof err) == 0, "%s", err);
    expect_disabled(pipeline);
    ts_outcome out;
    send(pipeline, "a", 1700000000, &out);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.report.eps_point, WINDOW_BUDGET / 6,
                            TOLERANCE);

    ck_assert_int_eq(replace_with(pipeline, enabled, 3, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "restart"));
    expect_disabled(pipeline);
    ck_assert_uint_eq(ts_pipeline_profile_count(pipeline), 1);

    unlink(model);
    ts_pipeline_free(pipeline);
    ts_config_free(config);
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    return ts_check_main("pipeline_reload", 0, NULL, NULL);
}
