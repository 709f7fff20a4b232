/* The per-user pipeline around a real mechanism: a pim profile built from
 * a model file through the configuration, as the daemon builds it
 * (outside the region, the belief across windows, a disabled profile). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine/config.h"
#include "ops/catalog.h"
#include "engine/pipeline.h"
#include "inference/model_file.h"
#include "mechanisms/rng.h"
#include "state/changelog.h"
#include "state/store.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_mechanism.h"
#include "tests/support/pipeline_fixture.h"

/* ------------------------------------------- a real pim profile (model) */

#define PIM_CELL_M 100.0
#define PIM_EARTH_R 6371008.8
#define PIM_DEG (180.0 / 3.14159265358979323846)

/* A 3 x 3 grid of 100 m cells at (0, 0) whose chain jumps anywhere
 * uniformly: enough for the mechanism to run; the test is about the
 * pipeline around it. Written to a temporary file; the caller unlinks.
 * With `stay` the chain never moves (each row is its own cell), so the
 * belief narrows with every release instead of returning to uniform. */
static void write_pim_model_chain(char *path, size_t path_len, int stay)
{
    snprintf(path, path_len, "%s/check_pipeline_model.XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *out = fdopen(fd, "wb");
    ck_assert_ptr_nonnull(out);

    char err[256] = "";
    ts_grid grid;
    double side_deg = 299.0 / PIM_EARTH_R * PIM_DEG;  /* 3 cells a side */
    ck_assert_msg(ts_grid_init(&grid, 0.0, 0.0, side_deg, side_deg,
                               PIM_CELL_M, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(grid.cols * grid.rows, 9);
    static uint64_t row_start[10];
    static uint32_t col[81];
    static double prob[81];
    static double initial[9];
    for (uint32_t from = 0; from < 9; from++) {
        initial[from] = 1.0 / 9;
        if (stay) {
            row_start[from + 1] = from + 1;
            col[from] = from;
            prob[from] = 1.0;
            continue;
        }
        row_start[from + 1] = 9 * (from + 1);
        for (uint32_t to = 0; to < 9; to++) {
            col[9 * from + to] = to;
            prob[9 * from + to] = 1.0 / 9;
        }
    }
    ts_markov markov = {
        .cell_count = 9, .tick_s = 60.0, .nnz = stay ? 9 : 81,
        .row_start = row_start,
        .col = col, .prob = prob, .initial = initial, .fallback = NULL,
    };
    ts_model_source popular = { .markov = &markov, .transitions = 1 };
    ck_assert_msg(ts_model_write(out, &grid, 10.0, &popular, NULL, 0, NULL,
                                 err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(fclose(out), 0);
}

/* The model file's path, and the same as a configuration string literal. */
typedef struct model_file {
    char path[512];
    char literal[600];
} model_file;

static void write_model_file(model_file *file, int stay)
{
    write_pim_model_chain(file->path, sizeof file->path, stay);
    snprintf(file->literal, sizeof file->literal, "\"%s\"", file->path);
}

/* A pipeline from the built-in defaults plus these overrides. */
static ts_pipeline *pipeline_with_overrides(const char *const *overrides,
                                            size_t n, ts_rng *source)
{
    char err[512] = "";
    ts_config *config = ts_config_load(NULL, overrides, n, err, sizeof err);
    ck_assert_msg(config != NULL, "%s", err);
    ts_pipeline *made = ts_config_make_pipeline(config, source, err,
                                                sizeof err);
    ck_assert_msg(made != NULL, "%s", err);
    ts_config_free(config);
    return made;
}

/* Profile "pim" with the given model path (a libconfig string literal)
 * and outside_region policy (NULL: the default). */
static ts_pipeline *pim_pipeline_with(const char *model_literal,
                                      const char *outside, ts_rng *source)
{
    char model_override[640], outside_override[100];
    snprintf(model_override, sizeof model_override, "profiles.pim.model=%s",
             model_literal);
    snprintf(outside_override, sizeof outside_override,
             "profiles.pim.outside_region=\"%s\"", outside ? outside : "");
    const char *overrides[] = { "profiles.pim.mechanism=pim", model_override,
                                "profiles.pim.points_per_window=100",
                                outside_override };
    return pipeline_with_overrides(overrides, outside ? 4 : 3, source);
}

static ts_pipeline *pim_pipeline(const char *model_literal, ts_rng *source)
{
    return pim_pipeline_with(model_literal, NULL, source);
}

static ts_outcome pim_point(ts_pipeline *p, const char *user, int64_t ts_ms,
                            double lat, double lon)
{
    ts_input in = { .user_id = user, .ts_ms = ts_ms, .lat = lat, .lon = lon,
                    .profile = "pim" };
    ts_outcome out;
    ts_pipeline_process(p, &in, &out);
    return out;
}

/* The pim profile's tests build their pipeline from a model file of their
 * own, without the fake mechanism's fixture. */

/* outside_region = "reject": an out-of-region point is refused as
 * outside_region, counted, and changes nothing: the same seeded run without
 * it publishes exactly the same next point (belief, ledger and rng stream
 * all untouched). */
TS_TEST(test_pim_outside_region)
{
    model_file model;
    write_model_file(&model, 0);
    ts_rng *rng_a = ts_rng_new_seeded(7);
    ts_rng *rng_b = ts_rng_new_seeded(7);
    ck_assert_ptr_nonnull(rng_a);
    ck_assert_ptr_nonnull(rng_b);
    ts_pipeline *with = pim_pipeline_with(model.literal, "reject", rng_a);
    ts_pipeline *without = pim_pipeline_with(model.literal, "reject", rng_b);
    unlink(model.path);

    const double inside = 150.0 / PIM_EARTH_R * PIM_DEG;   /* centre cell */
    const double outside_lat = 0.5, outside_lon = 0.25;    /* ~55 km off */
    ts_outcome a1 = pim_point(with, "u", 1000, inside, inside);
    ts_outcome b1 = pim_point(without, "u", 1000, inside, inside);
    ck_assert_msg(a1.sanitized, "%s", a1.detail);
    ck_assert(b1.sanitized);

    ts_outcome refused = pim_point(with, "u", 61000, outside_lat,
                                   outside_lon);
    ck_assert(!refused.sanitized);
    ck_assert_msg(refused.reason == TS_REASON_OUTSIDE_REGION,
                  "reason %s: %s", ts_reason_name(refused.reason),
                  refused.detail);
    ck_assert_ptr_null(strstr(refused.detail, "0.5"));
    ck_assert_ptr_null(strstr(refused.detail, "0.25"));
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(with);
    ck_assert_uint_eq(stats->rejected[TS_REASON_OUTSIDE_REGION], 1);
    ck_assert_uint_eq(stats->sanitized, 1);

    /* a fresh user whose first point is outside is not kept */
    refused = pim_point(with, "fresh", 61000, outside_lat, outside_lon);
    ck_assert_int_eq(refused.reason, TS_REASON_OUTSIDE_REGION);
    ck_assert_uint_eq(ts_pipeline_user_count(with), 1);

    ts_outcome a2 = pim_point(with, "u", 121000, inside, inside);
    ts_outcome b2 = pim_point(without, "u", 121000, inside, inside);
    ck_assert(a2.sanitized);
    ck_assert(b2.sanitized);
    ck_assert(a2.report.lat == b2.report.lat);
    ck_assert(a2.report.lon == b2.report.lon);
    ck_assert_uint_eq(a2.report.delta_set_size, b2.report.delta_set_size);
    ck_assert_double_eq(a2.eps_spent_window, b2.eps_spent_window);
    ck_assert_double_eq_tol(a2.eps_spent_window, 2.0, 1e-12);

    ts_pipeline_free(with);
    ts_pipeline_free(without);
    ts_rng_free(rng_a);
    ts_rng_free(rng_b);
}
END_TEST

/* The default, outside_region = "surrogate": an out-of-region point is an
 * ordinary release -- sanitized, spent, counted as sanitized, with nothing
 * in the outcome that differs in kind from an in-region point. */
TS_TEST(test_pim_outside_region_default)
{
    model_file model;
    write_model_file(&model, 0);
    ts_rng *rng = ts_rng_new_seeded(7);
    ck_assert_ptr_nonnull(rng);
    ts_pipeline *p = pim_pipeline(model.literal, rng);
    unlink(model.path);

    const double inside = 150.0 / PIM_EARTH_R * PIM_DEG;
    ts_outcome first = pim_point(p, "u", 1000, inside, inside);
    ck_assert_msg(first.sanitized, "%s", first.detail);
    ts_outcome away = pim_point(p, "u", 61000, 0.5, 0.25);
    ck_assert_msg(away.sanitized, "%s", away.detail);
    ck_assert_uint_gt(away.report.delta_set_size, 0);
    ck_assert_double_eq_tol(away.eps_spent_window, 2.0, 1e-12);
    ts_outcome fresh = pim_point(p, "fresh", 61000, 0.5, 0.25);
    ck_assert_msg(fresh.sanitized, "%s", fresh.detail);
    const ts_pipeline_stats *stats = ts_pipeline_get_stats(p);
    ck_assert_uint_eq(stats->sanitized, 3);
    ck_assert_uint_eq(stats->rejected[TS_REASON_OUTSIDE_REGION], 0);
    ts_pipeline_free(p);
    ts_rng_free(rng);
}
END_TEST

/* pim's state (belief, last release time) follows published points only,
 * so a user's next budget window carries it over (window_keeps_belief,
 * the default): with the same seed, a run whose window ends after three
 * releases publishes exactly what a run with one long window does, while
 * its ledger starts again. With window_keeps_belief = false the new window
 * starts from the initial distribution, whose set is all 9 cells. */
static ts_pipeline *pim_window_pipeline(const char *literal, int window_s,
                                        int keep, ts_rng *source)
{
    char model[640], window[100], keeps[100];
    snprintf(model, sizeof model, "profiles.pim.model=%s", literal);
    snprintf(window, sizeof window, "profiles.pim.budget_window_s=%d",
             window_s);
    snprintf(keeps, sizeof keeps, "profiles.pim.window_keeps_belief=%s",
             keep ? "true" : "false");
    const char *overrides[] = { "profiles.pim.mechanism=pim", model,
                                "profiles.pim.points_per_window=100",
                                "profiles.pim.epsilon=8", window, keeps };
    return pipeline_with_overrides(overrides, 6, source);
}

TS_TEST(test_pim_belief_crosses_windows)
{
    model_file model;
    write_model_file(&model, 1);
    ts_rng *rng[3];
    ts_pipeline *p[3];
    /* 0: one long window; 1: 150 s windows, carried; 2: 150 s, reset */
    for (int i = 0; i < 3; i++) {
        rng[i] = ts_rng_new_seeded(11);
        ck_assert_ptr_nonnull(rng[i]);
        p[i] = pim_window_pipeline(model.literal, i == 0 ? 86400 : 150, i != 2,
                                   rng[i]);
    }
    unlink(model.path);

    const double inside = 150.0 / PIM_EARTH_R * PIM_DEG;   /* centre cell */
    ts_outcome out[3];
    for (int step = 0; step < 12; step++) {
        int64_t ts_ms = 1000 + 60000 * (int64_t)step;
        for (int i = 0; i < 3; i++) {
            out[i] = pim_point(p[i], "u", ts_ms, inside, inside);
            ck_assert_msg(out[i].sanitized, "%s", out[i].detail);
        }
        ck_assert(out[1].report.lat == out[0].report.lat);
        ck_assert(out[1].report.lon == out[0].report.lon);
        ck_assert_uint_eq(out[1].report.delta_set_size,
                          out[0].report.delta_set_size);
        /* the ledger is per window all the same: 150 s holds 3 releases */
        ck_assert_double_eq_tol(out[1].eps_spent_window, 8.0 * (step % 3 + 1),
                                1e-12);
        ck_assert_double_eq_tol(out[0].eps_spent_window, 8.0 * (step + 1),
                                1e-12);
        if (step % 3 == 0)
            ck_assert_uint_eq(out[2].report.delta_set_size, 9);
    }
    /* Otherwise the comparison above could not tell carrying from
     * resetting: the belief did narrow. */
    ck_assert_uint_lt(out[0].report.delta_set_size, 9);
    for (int i = 0; i < 3; i++) {
        ts_pipeline_free(p[i]);
        ts_rng_free(rng[i]);
    }
}
END_TEST

/* model = "": the profile is configured but disabled; its updates are
 * rejected as unknown_profile with a detail saying why, and the other
 * profiles run. */
TS_TEST(test_disabled_profile_rejected)
{
    ts_rng *source = ts_rng_new_seeded(9);
    ck_assert_ptr_nonnull(source);
    ts_pipeline *p = pim_pipeline("\"\"", source);
    ck_assert_ptr_null(ts_pipeline_find_profile(p, "pim"));
    ck_assert_uint_eq(ts_pipeline_profile_count(p), 1);

    ts_outcome out = pim_point(p, "u", 1000, 1.0, 1.0);
    ck_assert(!out.sanitized);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_ptr_nonnull(strstr(out.detail, "'pim' is disabled"));
    ck_assert_ptr_nonnull(strstr(out.detail, "no model"));
    ck_assert_uint_eq(ts_pipeline_user_count(p), 0);

    ts_input other = { .user_id = "u", .ts_ms = 1000, .lat = 1.0,
                       .lon = 1.0, .profile = "nope" };
    ts_pipeline_process(p, &other, &out);
    ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
    ck_assert_str_eq(out.detail, "unknown profile 'nope'");

    other.profile = NULL;  /* the default, geoind, still works */
    ts_pipeline_process(p, &other, &out);
    ck_assert(out.sanitized);
    ts_pipeline_free(p);
    ts_rng_free(source);
}
END_TEST

int main(void)
{
    return ts_check_main("pipeline_pim", 0, NULL, NULL);
}
