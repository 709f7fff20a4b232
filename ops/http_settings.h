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
const ts_http_settings *ts_http_settings_of(const ts_config *config);

#endif
