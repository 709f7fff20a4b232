/* The HTTP endpoint's setting rows (http.*): where it listens, the
 * dashboard's files and map tiles, the bearer token and CORS allow-list
 * (read and checked when the configuration loads, ops/http_access.h), and
 * the feed's limits (ops/feed.h). */
#ifndef TRACESAN_OPS_HTTP_SETTINGS_H
#define TRACESAN_OPS_HTTP_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/config.h"

#define TS_MAX_CORS_ORIGINS TS_SETTING_MAX_LIST

typedef struct ts_http_settings {
    const char *http_listen;             /* "" = off */
    size_t http_max_connections;
    const char *http_dashboard_dir;      /* "" = the installed copy */
    const char *http_leaflet_dir;
    const char *http_tile_url;           /* "" = no tiles, graticule only */
    const char *http_tile_attribution;
    const char *http_token;              /* NULL = no authentication */
    const char *http_token_file;
    const char *http_cors_origins[TS_MAX_CORS_ORIGINS];
    size_t n_http_cors_origins;
    size_t http_feed_max_streams;        /* 0 = no /feed */
    size_t http_feed_buffer_kb;
    int64_t http_feed_stall_ms;
    size_t http_feed_max_rate;           /* 0 = no limit */
    char *owned_token;                   /* read from http.token_file */
} ts_http_settings;

extern const ts_setting_section ts_http_setting_section;

void ts_http_settings_defaults(ts_http_settings *settings);

/* Resolves http.token / http.token_file into settings->http_token: the
 * file (when set) must be readable by its owner only and hold one token
 * (a trailing newline is fine); the copy goes to *owned_token, which the
 * caller wipes and frees with ts_http_token_free. Checks every CORS
 * origin too. 0, or -1 with *blamed_key naming the offending key and
 * `problem` the reason (never the token). */
int ts_http_access_load(ts_http_settings *settings, char **owned_token,
                        const char **blamed_key, char *problem, size_t len);
const ts_http_settings *ts_http_settings_of(const ts_config *config);

#endif
