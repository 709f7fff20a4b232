/* Configuration loading: the shipped file, defaults, `-o path=value`
 * overrides, and that every kind of mistake is reported as FILE:LINE (or
 * as the override that caused it). Uses the real `geoind` mechanism. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drivers/driver_registry.h"
#include "drivers/zmq/zmq_settings.h"
#include "engine/config.h"
#include "ops/catalog.h"
#include "engine/log.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"

#define LN10 2.302585092994046

static char err[512];
static char temp_path[64];

static const char *shipped_config(void)
{
    static char path[4096];
    const char *top = getenv("top_srcdir");
    snprintf(path, sizeof path, "%s/conf/tracesand.conf",
             top != NULL && top[0] != '\0' ? top : ".");
    return path;
}

/* Writes `text` to a fresh temporary file; returns its path. */
static const char *write_config(const char *text)
{
    if (temp_path[0] != '\0')
        unlink(temp_path);
    snprintf(temp_path, sizeof temp_path, "/tmp/check_config_XXXXXX");
    int fd = mkstemp(temp_path);
    ck_assert_int_ge(fd, 0);
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    return temp_path;
}

static void teardown(void)
{
    if (temp_path[0] != '\0')
        unlink(temp_path);
    temp_path[0] = '\0';
}

static ts_config *load(const char *path, const char *const *overrides,
                       size_t n)
{
    err[0] = '\0';
    return ts_config_load(path, overrides, n, err, sizeof err);
}

/* The load must fail with an error starting with `prefix` and mentioning
 * `needle`. */
static void expect_error(const char *path, const char *const *overrides,
                         size_t n, const char *prefix, const char *needle)
{
    ts_config *config = load(path, overrides, n);
    ck_assert_msg(config == NULL, "expected failure (%s)", needle);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0,
                  "error '%s' does not start with '%s'", err, prefix);
    ck_assert_msg(strstr(err, needle) != NULL,
                  "error '%s' does not mention '%s'", err, needle);
}

/* A single override the configuration refuses, blaming the override. */
static void expect_override_error(const char *path, const char *override,
                                  const char *needle)
{
    const char *overrides[] = { override };
    char prefix[256];
    snprintf(prefix, sizeof prefix, "override '%s': ", override);
    expect_error(path, overrides, 1, prefix, needle);
}

static void expect_file_error(const char *text, int line, const char *needle)
{
    const char *path = write_config(text);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    expect_error(path, NULL, 0, prefix, needle);
}

static const ts_profile *profile_named(const ts_profile *profiles, size_t n,
                                       const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(profiles[i].name, name) == 0)
            return &profiles[i];
    return NULL;
}

static void free_profiles(ts_profile *profiles, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        profiles[i].ops->profile_free(profiles[i].mech);
        free(profiles[i].name);
    }
    free(profiles);
}

/* -------------------------------------------------------- happy paths */

TS_TEST(test_shipped_config_loads)
{
    ts_config *config = load(shipped_config(), NULL, 0);
    ck_assert_msg(config != NULL, "%s", err);
    const ts_settings *s = ts_config_settings(config);
    const ts_zmq_settings *z = ts_zmq_settings_of(config);
    ck_assert_str_eq(z->input_endpoint, "tcp://127.0.0.1:7001");
    ck_assert_str_eq(ts_driver_input_type(config), "pull");
    ck_assert_int_eq(z->input_mode, TS_SOCKET_BIND);
    ck_assert_str_eq(z->output_endpoint, "tcp://127.0.0.1:7002");
    ck_assert_int_eq(z->output_mode, TS_SOCKET_BIND);
    ck_assert_uint_eq(z->n_subscriptions, 1);
    ck_assert_str_eq(z->subscriptions[0], "");
    ck_assert_int_eq(z->input_hwm, 100000);
    ck_assert_uint_eq(s->max_message_bytes, 1048576);
    ck_assert_uint_eq(s->max_batch_updates, 10000);
    ck_assert_uint_eq(z->read_budget, 256);
    ck_assert_int_eq(s->max_future_ms, 600000);
    ck_assert_uint_eq(s->limits.max_users, 1000000);
    ck_assert_int_eq(s->limits.idle_ttl_ms, 3600000);
    ck_assert_uint_eq(s->limits.max_user_id_bytes, 128);
    ck_assert_int_eq(s->expire_interval_ms, 1000);
    ck_assert_int_eq(s->log_level, TS_LOG_INFO);
    ck_assert_int_eq(s->log_syslog, 0);
    ck_assert_str_eq(s->default_profile, "geoind");

    ts_profile *profiles;
    size_t n, def;
    ck_assert_int_eq(ts_config_build_profiles(config, &profiles, &n, &def, err,
                                              sizeof err), 0);
    ck_assert_uint_ge(n, 1);
    ck_assert_str_eq(profiles[def].name, "geoind");
    const ts_profile *geoind = profile_named(profiles, n, "geoind");
    ck_assert_ptr_nonnull(geoind);
    ck_assert_str_eq(geoind->ops->name, "geoind");
    ck_assert_double_eq_tol(geoind->window_budget, LN10 / 100.0, 1e-15);
    ck_assert_int_eq(geoind->window_ms, 86400000);
    ck_assert_int_eq(geoind->on_exhausted, TS_ON_EXHAUSTED_DROP);
    const ts_profile *repeat = profile_named(profiles, n, "geoind-repeat");
    if (repeat != NULL)
        ck_assert_int_eq(repeat->on_exhausted, TS_ON_EXHAUSTED_REPEAT);
    free_profiles(profiles, n);

    ts_rng *rng = ts_rng_new_seeded(1);
    ts_pipeline *pipeline = ts_config_make_pipeline(config, rng, err,
                                                    sizeof err);
    ck_assert_msg(pipeline != NULL, "%s", err);
    ts_input in = { .user_id = "u", .ts_ms = 1000, .lat = 48.85,
                    .lon = 2.35, .profile = NULL };
    ts_outcome out;
    ts_pipeline_process(pipeline, &in, &out);
    ck_assert(out.sanitized);
    ck_assert_double_eq_tol(out.report.eps_point, LN10 / 100.0 / 30, 1e-15);
    ts_pipeline_free(pipeline);
    ts_rng_free(rng);
    ts_config_free(config);
}
END_TEST

TS_TEST(test_defaults_without_file)
{
    ts_config *config = load(NULL, NULL, 0);
    ck_assert_msg(config != NULL, "%s", err);
    const ts_settings *s = ts_config_settings(config);
    const ts_zmq_settings *z = ts_zmq_settings_of(config);
    ck_assert_str_eq(z->input_endpoint, "tcp://127.0.0.1:7001");
    ck_assert_str_eq(z->output_endpoint, "tcp://127.0.0.1:7002");
    ck_assert_str_eq(s->default_profile, "geoind");
    ts_profile *profiles;
    size_t n, def;
    ck_assert_int_eq(ts_config_build_profiles(config, &profiles, &n, &def, err,
                                              sizeof err), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(profiles[0].name, "geoind");
    ck_assert_double_eq_tol(profiles[0].window_budget, LN10 / 100.0, 1e-15);
    ck_assert_int_eq(profiles[0].on_exhausted, TS_ON_EXHAUSTED_DROP);
    free_profiles(profiles, n);
    ts_config_free(config);
}
END_TEST

TS_TEST(test_overrides_of_existing_settings)
{
    const char *overrides[] = {
        "profiles.geoind.radius_m=200",          /* int into a float */
        "input.endpoint=tcp://127.0.0.1:7101",   /* bare word: a string */
        "output.endpoint=\"tcp://127.0.0.1:*\"", /* quoted string */
        "users.max_users=5",
        "log.level=debug",
        "log.syslog=true",
        "input.subscribe=[\"a.\", \"b.\"]",
        "input.type=sub",
        "users.max_users=7",                     /* later wins */
    };
    ts_config *config = load(shipped_config(), overrides,
                             sizeof overrides / sizeof overrides[0]);
    ck_assert_msg(config != NULL, "%s", err);
    const ts_settings *s = ts_config_settings(config);
    const ts_zmq_settings *z = ts_zmq_settings_of(config);
    ck_assert_str_eq(z->input_endpoint, "tcp://127.0.0.1:7101");
    ck_assert_str_eq(z->output_endpoint, "tcp://127.0.0.1:*");
    ck_assert_uint_eq(s->limits.max_users, 7);
    ck_assert_int_eq(s->log_level, TS_LOG_DEBUG);
    ck_assert_int_eq(s->log_syslog, 1);
    ck_assert_str_eq(ts_driver_input_type(config), "sub");
    ck_assert_uint_eq(z->n_subscriptions, 2);
    ck_assert_str_eq(z->subscriptions[0], "a.");
    ck_assert_str_eq(z->subscriptions[1], "b.");

    ts_profile *profiles;
    size_t n, def;
    ck_assert_int_eq(ts_config_build_profiles(config, &profiles, &n, &def, err,
                                              sizeof err), 0);
    const ts_profile *geoind = profile_named(profiles, n, "geoind");
    ck_assert_double_eq_tol(geoind->window_budget, LN10 / 200.0, 1e-15);
    free_profiles(profiles, n);
    ts_config_free(config);
}
END_TEST

TS_TEST(test_overrides_create_settings)
{
    const char *overrides[] = {
        "profiles.geoind.radius_m=200",
        "input.endpoint=tcp://127.0.0.1:7001",
        "input.max_future_s=0",
        "profiles.strict.mechanism=geoind",
        "profiles.strict.level=1.0",
        "profiles.strict.points_per_window=10",
        "profiles.strict.on_exhausted=repeat",
        "profiles.strict.budget_window_s=3600",
        "default_profile=strict",
    };
    ts_config *config = load(NULL, overrides,
                             sizeof overrides / sizeof overrides[0]);
    ck_assert_msg(config != NULL, "%s", err);
    const ts_settings *s = ts_config_settings(config);
    const ts_zmq_settings *z = ts_zmq_settings_of(config);
    ck_assert_str_eq(z->input_endpoint, "tcp://127.0.0.1:7001");
    ck_assert_int_eq(s->max_future_ms, 0);
    ts_profile *profiles;
    size_t n, def;
    ck_assert_int_eq(ts_config_build_profiles(config, &profiles, &n, &def, err,
                                              sizeof err), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(profiles[def].name, "strict");
    const ts_profile *geoind = profile_named(profiles, n, "geoind");
    ck_assert_double_eq_tol(geoind->window_budget, LN10 / 200.0, 1e-15);
    const ts_profile *strict = profile_named(profiles, n, "strict");
    ck_assert_double_eq_tol(strict->window_budget, 1.0 / 100.0, 1e-15);
    ck_assert_int_eq(strict->window_ms, 3600000);
    ck_assert_int_eq(strict->on_exhausted, TS_ON_EXHAUSTED_REPEAT);
    free_profiles(profiles, n);
    ts_config_free(config);
}
END_TEST

TS_TEST(test_override_of_new_profile_in_file)
{
    const char *path = write_config(
        "profiles = {\n"
        "  p1 = { mechanism = \"geoind\"; };\n"
        "};\n"
        "default_profile = \"p1\";\n");
    const char *overrides[] = { "profiles.p1.radius_m=50.5" };
    ts_config *config = load(path, overrides, 1);
    ck_assert_msg(config != NULL, "%s", err);
    ts_profile *profiles;
    size_t n, def;
    ck_assert_int_eq(ts_config_build_profiles(config, &profiles, &n, &def, err,
                                              sizeof err), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_double_eq_tol(profiles[0].window_budget, LN10 / 50.5, 1e-15);
    free_profiles(profiles, n);
    ts_config_free(config);
}
END_TEST

/* ------------------------------------------------- override mistakes */

TS_TEST(test_override_type_mismatch)
{
    struct { const char *override; const char *needle; } cases[] = {
        { "users.max_users=1.5", "integer" },
        { "profiles.geoind.radius_m=abc", "float" },
        { "profiles.geoind.radius_m=true", "float" },
        { "input=5", "group" },
        { "input.endpoint=5", "string" },
        { "input.endpoint.port=5", "not a group" },
        { "log.syslog=1", "boolean" },
        { "input.endpoint", "path=value" },
        { "=5", "path=value" },
        { "input.bad name=1", "invalid setting name" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_override_error(shipped_config(), cases[i].override,
                              cases[i].needle);
}
END_TEST

TS_TEST(test_override_semantic_errors_name_the_override)
{
    /* created with the wrong type / out of range: validation blames the
     * override, not a file line */
    expect_override_error(NULL, "users.max_users=\"many\"",
                          "must be an integer");
    expect_override_error(shipped_config(), "users.max_users=0",
                          "users.max_users");
    expect_override_error(shipped_config(), "profiles.geoind.radius_m=-5",
                          "radius_m");
    expect_override_error(NULL, "inptu.endpoint=tcp://127.0.0.1:1",
                          "unknown setting 'inptu'");
    expect_override_error(shipped_config(), "default_profile=nope", "nope");
    /* a value with a second statement is one string, not two settings */
    expect_override_error(shipped_config(),
                          "default_profile=geoind; users = 5",
                          "default_profile");
    expect_override_error(shipped_config(), "profiles.geoind.mechanism=nope",
                          "unknown mechanism 'nope'");
    /* the JetStream mode needs both sides (main.c and the JetStream run
     * would refuse too, but only at start: --check-config must say so) */
    expect_override_error(shipped_config(), "input.type=\"jetstream\"",
                          "needs output.type = \"jetstream\"");
    expect_override_error(shipped_config(), "output.type=\"jetstream\"",
                          "needs input.type = \"jetstream\"");
    expect_override_error(shipped_config(),
                          "nats.nkey_seed_file=\"/tmp/seed\"",
                          "nats.nkey_seed_file needs nats.nkey_public");
    expect_override_error(shipped_config(),
                          "nats.tls_cert_file=\"/tmp/cert.pem\"",
                          "nats.tls_cert_file needs nats.tls_key_file");
    const char *both[] = { "input.type=\"jetstream\"",
                           "output.type=\"jetstream\"" };
    ts_config *config = load(shipped_config(), both, 2);
    ck_assert_msg(config != NULL, "%s", err);
    ts_config_free(config);
}
END_TEST

/* ----------------------------------------------------- file mistakes */

TS_TEST(test_syntax_error_line)
{
    expect_file_error("# comment\n"
                      "input = {\n"
                      "  endpoint = \"tcp://127.0.0.1:7001\";\n"
                      "  hwm = 10 10;\n"
                      "};\n",
                      4, "syntax error");
}
END_TEST

TS_TEST(test_missing_file)
{
    expect_error("/nonexistent/tracesand.conf", NULL, 0,
                 "/nonexistent/tracesand.conf: ", "No such file");
}
END_TEST

TS_TEST(test_unknown_keys_with_line)
{
    expect_file_error("input = {\n"
                      "  endpoint = \"tcp://127.0.0.1:7001\";\n"
                      "  endpiont = \"tcp://127.0.0.1:7001\";\n"
                      "};\n",
                      3, "unknown setting 'input.endpiont'");
    expect_file_error("log = { level = \"info\"; };\n"
                      "\n"
                      "outptu = { };\n",
                      3, "unknown setting 'outptu'");
    expect_file_error("users = {\n max_user = 5;\n};\n", 2,
                      "unknown setting 'users.max_user'");
    expect_file_error("output = {\n hwm = 1;\n linger = 5;\n};\n", 3,
                      "unknown setting 'output.linger'");
    /* a typo in a mechanism parameter */
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "    radius = 200.0;\n"
                      "  };\n"
                      "};\n",
                      4, "unknown setting 'profiles.geoind.radius'");
}
END_TEST

TS_TEST(test_type_and_range_errors_with_line)
{
    expect_file_error("input = {\n  hwm = \"lots\";\n};\n", 2,
                      "input.hwm must be an integer");
    expect_file_error("input = {\n  type = \"push\";\n};\n", 2,
                      "\"pull\", \"sub\", \"jetstream\" or \"mqtt\"");
    expect_file_error("input = {\n  endpoint = \"localhost\";\n};\n", 2,
                      "ZeroMQ endpoint");
    expect_file_error("input = {\n  subscribe = [ 1, 2 ];\n};\n", 2,
                      "input.subscribe");
    expect_file_error("\n\nusers = { max_users = 0; };\n", 3,
                      "users.max_users must be between 1");
    expect_file_error("log = {\n  level = \"loud\";\n};\n", 2, "log.level");
    expect_file_error("log = {\n  syslog = \"yes\";\n};\n", 2, "true or false");
    expect_file_error("\ninput = 5;\n", 2, "must be a group");
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "    on_exhausted = \"retry\";\n"
                      "  };\n"
                      "};\n",
                      4, "\"drop\" or \"repeat\"");
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "    budget_window_s = 0;\n"
                      "  };\n"
                      "};\n",
                      4, "budget_window_s must be between 1");
}
END_TEST

TS_TEST(test_unknown_mechanism)
{
    expect_file_error("profiles = {\n"
                      "  p = {\n"
                      "    mechanism = \"laplace3000\";\n"
                      "  };\n"
                      "};\n"
                      "default_profile = \"p\";\n",
                      3, "unknown mechanism 'laplace3000'");
    expect_file_error("profiles = {\n"
                      "  p = {\n"
                      "    radius_m = 5.0;\n"
                      "  };\n"
                      "};\n"
                      "default_profile = \"p\";\n",
                      2, "no 'mechanism'");
}
END_TEST

TS_TEST(test_bad_default_profile)
{
    expect_file_error("profiles = {\n"
                      "  a = { mechanism = \"geoind\"; };\n"
                      "};\n"
                      "default_profile = \"b\";\n",
                      4, "default_profile 'b'");
    /* absent: the default name "geoind" must exist */
    expect_file_error("\n"
                      "profiles = {\n"
                      "  a = { mechanism = \"geoind\"; };\n"
                      "};\n",
                      2, "'geoind'");
    expect_file_error("profiles = {\n};\n", 1, "no profile");
}
END_TEST

TS_TEST(test_mechanism_parameter_errors)
{
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "    level = 1.0;\n"
                      "    radius_m = -5.0;\n"
                      "  };\n"
                      "};\n",
                      5, "radius_m");
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "    points_per_window = 0;\n"
                      "  };\n"
                      "};\n",
                      4, "points_per_window");
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "    points_per_window = 2.5;\n"
                      "  };\n"
                      "};\n",
                      4, "points_per_window");
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "\n"
                      "    level = \"high\";\n"
                      "  };\n"
                      "};\n",
                      5, "level");
}
END_TEST

/* An install is durable unless asked otherwise: the shipped file names a
 * store directory; "" (or no key) is the explicit memory-only mode. */
TS_TEST(test_state_dir_shipped_and_empty)
{
    ts_config *config = load(shipped_config(), NULL, 0);
    ck_assert_msg(config != NULL, "%s", err);
    const char *dir = ts_config_settings(config)->state_dir;
    ck_assert_ptr_nonnull(dir);
    ck_assert_str_eq(dir, "/var/lib/tracesand");
    ts_config_free(config);

    const char *memory[] = { "state.dir=\"\"" };
    config = load(shipped_config(), memory, 1);
    ck_assert_msg(config != NULL, "%s", err);
    ck_assert_ptr_null(ts_config_settings(config)->state_dir);
    ts_config_free(config);

    const char *elsewhere[] = { "state.dir=\"/tmp/x\"" };
    config = load(shipped_config(), elsewhere, 1);
    ck_assert_msg(config != NULL, "%s", err);
    ck_assert_str_eq(ts_config_settings(config)->state_dir, "/tmp/x");
    ts_config_free(config);

    const char *not_text[] = { "state.dir=5" };
    ck_assert_ptr_null(load(shipped_config(), not_text, 1));
    ck_assert_msg(strstr(err, "state.dir is a string") != NULL,
                  "err '%s'", err);
}
END_TEST

/* The shipped file lists pim and lm-delta with model = "": they load as
 * disabled profiles, left out of the pipeline, whose updates are rejected
 * as unknown_profile with a detail that says why. */
TS_TEST(test_shipped_model_profiles_disabled)
{
    ts_config *config = load(shipped_config(), NULL, 0);
    ck_assert_msg(config != NULL, "%s", err);
    ts_profile *profiles;
    size_t n, def;
    ck_assert_int_eq(ts_config_build_profiles(config, &profiles, &n, &def, err,
                                              sizeof err), 0);
    ck_assert_ptr_null(profile_named(profiles, n, "pim"));
    ck_assert_ptr_null(profile_named(profiles, n, "lm-delta"));
    ck_assert_str_eq(profiles[def].name, "geoind");
    free_profiles(profiles, n);

    ts_rng *rng = ts_rng_new_seeded(1);
    ts_pipeline *pipeline = ts_config_make_pipeline(config, rng, err,
                                                    sizeof err);
    ck_assert_msg(pipeline != NULL, "%s", err);
    static const char *const disabled[] = { "pim", "lm-delta" };
    for (size_t i = 0; i < 2; i++) {
        ts_input in = { .user_id = "u", .ts_ms = 1000, .lat = 48.85,
                        .lon = 2.35, .profile = disabled[i] };
        ts_outcome out;
        ts_pipeline_process(pipeline, &in, &out);
        ck_assert(!out.sanitized);
        ck_assert_int_eq(out.reason, TS_REASON_UNKNOWN_PROFILE);
        ck_assert_msg(strstr(out.detail, "is disabled") != NULL &&
                      strstr(out.detail, "no model configured") != NULL &&
                      strstr(out.detail, disabled[i]) != NULL,
                      "detail '%s'", out.detail);
    }
    ts_pipeline_free(pipeline);
    ts_rng_free(rng);
    ts_config_free(config);
}
END_TEST

/* Disabled is only for model = "": every other parameter of the profile is
 * still checked, and a model that cannot be opened stays an error. */
TS_TEST(test_disabled_profile_still_validated)
{
    /* the disabled profile's other parameters, with their lines */
    expect_file_error("profiles = {\n"
                      "  geoind = { mechanism = \"geoind\"; };\n"
                      "  pim = {\n"
                      "    mechanism = \"pim\";\n"
                      "    model = \"\";\n"
                      "    epsilon = -1.0;\n"
                      "  };\n"
                      "};\n",
                      6, "epsilon");
    expect_file_error("profiles = {\n"
                      "  geoind = { mechanism = \"geoind\"; };\n"
                      "  pim = {\n"
                      "    mechanism = \"pim\";\n"
                      "    model = \"\";\n"
                      "    epsilom = 1.0;\n"
                      "  };\n"
                      "};\n",
                      6, "epsilom");
    /* an unopenable path: FILE:LINE of the model key */
    expect_file_error("profiles = {\n"
                      "  geoind = { mechanism = \"geoind\"; };\n"
                      "  pim = {\n"
                      "    mechanism = \"pim\";\n"
                      "    model = \"/nonexistent/tracesan.model\";\n"
                      "  };\n"
                      "};\n",
                      5, "/nonexistent/tracesan.model");
    /* the default profile must be usable */
    expect_file_error("default_profile = \"pim\";\n"
                      "profiles = {\n"
                      "  geoind = { mechanism = \"geoind\"; };\n"
                      "  pim = { mechanism = \"pim\"; model = \"\"; };\n"
                      "};\n",
                      1, "default_profile 'pim' is disabled");
    /* a mechanism without models has no `model` key to empty */
    expect_file_error("profiles = {\n"
                      "  geoind = {\n"
                      "    mechanism = \"geoind\";\n"
                      "    model = \"\";\n"
                      "  };\n"
                      "};\n",
                      4, "unknown setting");
    /* enabling through an override reaches the model file */
    expect_override_error(shipped_config(),
                          "profiles.pim.model=/nonexistent/x.model",
                          "/nonexistent/x.model");
}
END_TEST

TS_TEST(test_errors_are_single_lines)
{
    ts_config *config = load(shipped_config(), NULL, 0);
    ck_assert_ptr_nonnull(config);
    ts_config_free(config);
    const char *overrides[] = { "users.max_users=1.5" };
    ck_assert_ptr_null(load(shipped_config(), overrides, 1));
    ck_assert_ptr_null(strchr(err, '\n'));
    ck_assert_uint_gt(strlen(err), 0);
}
END_TEST

/* Issue 26: the mechanisms the load built are the ones every shared
 * pipeline releases through (built once, not once per pipeline or
 * partition), and a reference keeps them alive after the loader's
 * ts_config_free. */
TS_TEST(test_shared_profiles_are_built_once)
{
    ts_config *config = load(shipped_config(), NULL, 0);
    ck_assert_msg(config != NULL, "%s", err);
    ts_rng *rng = ts_rng_new_seeded(3);
    ts_pipeline *a = ts_config_make_shared_pipeline(config, rng, err,
                                                    sizeof err);
    ts_pipeline *b = ts_config_make_shared_pipeline(config, rng, err,
                                                    sizeof err);
    ts_pipeline *own = ts_config_make_pipeline(config, rng, err, sizeof err);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(own);
    size_t n = ts_pipeline_profile_count(a);
    ck_assert_uint_ge(n, 1);
    for (size_t i = 0; i < n; i++) {
        ck_assert_ptr_eq(ts_pipeline_profile_at(a, i)->mech,
                         ts_pipeline_profile_at(b, i)->mech);
        ck_assert_ptr_ne(ts_pipeline_profile_at(a, i)->mech,
                         ts_pipeline_profile_at(own, i)->mech);
    }
    /* The holder's reference outlives the loader's. */
    ts_config *held = ts_config_ref(config);
    ts_config_free(config);
    ts_input in = { .user_id = "u", .ts_ms = 1000, .lat = 48.85,
                    .lon = 2.35 };
    ts_outcome out;
    ts_pipeline_process(a, &in, &out);
    ck_assert(out.sanitized);
    ts_pipeline_free(a);
    ts_pipeline_free(b);
    ts_pipeline_free(own);
    ts_config_free(held);
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    return ts_check_main("config", 0, NULL, teardown);
}
