#include "ops/http_settings.h"

#include <stdio.h>
#include <string.h>

#include "ops/http_access.h"
#include "ops/ops_http.h"

static int check_listen(const char *value, char *problem, size_t len)
{
    if (value[0] == '\0')
        return 0;
    char host[256];
    char why[256];
    unsigned port;
    if (ts_ops_http_parse_listen(value, host, sizeof host, &port, why,
                                 sizeof why) == 0)
        return 0;
    snprintf(problem, len, "%s (use \"127.0.0.1:9107\", or \"\" to turn the "
             "endpoint off)", why);
    return -1;
}

/* A Leaflet URL template: fetched by the browser, never by the daemon. */
static int check_tile_url(const char *value, char *problem, size_t len)
{
    if (value[0] == '\0')
        return 0;
    int printable = 1;
    for (const char *p = value; *p != '\0'; p++)
        if (*p < 0x21 || *p > 0x7e || strchr("\"'<>\\", *p) != NULL)
            printable = 0;
    if (printable &&
        (strncmp(value, "https://", 8) == 0 ||
         strncmp(value, "http://", 7) == 0) &&
        strstr(value, "{z}") != NULL && strstr(value, "{x}") != NULL &&
        strstr(value, "{y}") != NULL)
        return 0;
    snprintf(problem, len, "must be an http(s) URL template with {z}, {x} "
             "and {y}, e.g. \"https://tile.example.org/{z}/{x}/{y}.png\", "
             "or \"\" for no tiles");
    return -1;
}

#define INT_ROW(...) TS_INT_ROW(ts_http_settings, __VA_ARGS__)
#define STRING_ROW(...) TS_STRING_ROW(ts_http_settings, __VA_ARGS__)
#define RESTART TS_APPLY_RESTART

static const ts_setting_def http_rows[] = {
    STRING_ROW("http.listen", http_listen, "127.0.0.1:9107",
               TS_SETTING_EMPTY_OK, check_listen, RESTART,
               "operator HTTP endpoint host:port; \"\" = off"),
    INT_ROW("http.max_connections", http_max_connections, 1, 65536, 1, "64",
            RESTART, "most HTTP connections open at once"),
    STRING_ROW("http.dashboard_dir", http_dashboard_dir, "",
               TS_SETTING_EMPTY_OK, NULL, RESTART,
               "the dashboard's files; \"\" = the installed copy"),
    STRING_ROW("http.leaflet_dir", http_leaflet_dir,
               "/usr/share/javascript/leaflet", 0, NULL, RESTART,
               "Leaflet's files (Debian package libjs-leaflet)"),
    STRING_ROW("http.tile_url", http_tile_url, "", TS_SETTING_EMPTY_OK,
               check_tile_url, RESTART,
               "map tile URL template for the dashboard; \"\" = none"),
    STRING_ROW("http.tile_attribution", http_tile_attribution, "",
               TS_SETTING_EMPTY_OK, NULL, RESTART,
               "attribution text the tile server requires"),
    STRING_ROW("http.token", http_token, NULL, TS_SETTING_EMPTY_UNSET, NULL,
               RESTART, "bearer token the dashboard's data, the feed and "
               "/metrics require; unset = none"),
    STRING_ROW("http.token_file", http_token_file, NULL,
               TS_SETTING_EMPTY_UNSET, NULL, RESTART,
               "file holding the bearer token (mode 0600)"),
    { .key = "http.cors_origins", .type = TS_SETTING_STRING_LIST,
      TS_ROW_FIELD(ts_http_settings, http_cors_origins),
      .count_offset = offsetof(ts_http_settings, n_http_cors_origins),
      .min = 0, .max = TS_MAX_CORS_ORIGINS, .apply = RESTART,
      .doc = "origins whose pages may read the endpoint (CORS)" },
    INT_ROW("http.feed_max_streams", http_feed_max_streams, 0, 4096, 1,
            "16", RESTART, "most /feed streams open at once; 0 = no feed"),
    INT_ROW("http.feed_buffer_kb", http_feed_buffer_kb, 1, 65536, 1, "1024",
            RESTART, "events queued per feed stream, in KiB"),
    INT_ROW("http.feed_stall_timeout_s", http_feed_stall_ms, 1, 3600, 1000,
            "10", RESTART, "a stream behind this long is cut off"),
    INT_ROW("http.feed_max_rate", http_feed_max_rate, 0, 10000000, 1,
            "20000", RESTART, "events the feed encodes per second; 0 = any"),
};

int ts_http_access_load(ts_http_settings *settings, char **owned_token,
                        const char **blamed_key, char *problem, size_t len)
{
    *owned_token = NULL;
    for (size_t i = 0; i < settings->n_http_cors_origins; i++) {
        if (ts_http_origin_check(settings->http_cors_origins[i], problem,
                                 len) != 0) {
            *blamed_key = "http.cors_origins";
            return -1;
        }
    }
    if (settings->http_token != NULL && settings->http_token_file != NULL) {
        *blamed_key = "http.token_file";
        snprintf(problem, len, "and http.token are both set: keep one "
                 "(the file keeps the token out of the configuration)");
        return -1;
    }
    if (settings->http_token_file != NULL) {
        *blamed_key = "http.token_file";
        char why[512];
        char *token = ts_http_read_token_file(settings->http_token_file, why,
                                      sizeof why);
        if (token == NULL) {
            snprintf(problem, len, "%s", why);
            return -1;
        }
        if (ts_http_token_check(token, why, sizeof why) != 0) {
            snprintf(problem, len, "'%s': the token %s",
                     settings->http_token_file, why);
            ts_http_token_free(token);
            return -1;
        }
        *owned_token = token;
        settings->http_token = token;
        return 0;
    }
    if (settings->http_token != NULL &&
        ts_http_token_check(settings->http_token, problem, len) != 0) {
        *blamed_key = "http.token";
        return -1;
    }
    return 0;
}

/* The token file is read now, like the CURVE keys, so that a missing or
 * empty one fails --check-config and the start. */
static void finish_http(void *values, ts_setting_context *context)
{
    ts_http_settings *s = values;
    const char *blamed = NULL;
    char problem[640];
    if (ts_http_access_load(s, &s->owned_token, &blamed, problem,
                            sizeof problem) != 0)
        ts_setting_fail(context, blamed, "%s %s", blamed, problem);
}

static void release_http(void *values)
{
    ts_http_settings *s = values;
    ts_http_token_free(s->owned_token);
    s->owned_token = NULL;
}

const ts_setting_section ts_http_setting_section = {
    .name = "http",
    TS_SECTION_ROWS(http_rows),
    .size = sizeof(ts_http_settings),
    .finish = finish_http,
    .release = release_http,
};

void ts_http_settings_defaults(ts_http_settings *settings)
{
    ts_setting_section_defaults(&ts_http_setting_section, settings);
}

const ts_http_settings *ts_http_settings_of(const ts_config *config)
{
    return ts_config_section(config, &ts_http_setting_section);
}
