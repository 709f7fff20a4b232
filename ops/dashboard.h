/* The live dashboard's files on the HTTP endpoint:
 *
 *   GET /                 the page (www/index.html)
 *   GET /dashboard.js, /dashboard.css
 *   GET /leaflet/...      Leaflet from Debian's libjs-leaflet
 *   GET /dashboard.json   what the page needs to know: tile URL template
 *                         and attribution, profiles, whether the feed is on
 *                         and whether a token is required
 *
 * Files come from a fixed allow-list of names, read once at start into
 * memory (at most TS_DASHBOARD_MAX_FILE_BYTES each), so no request path
 * ever reaches the file system. The files carry no data and are served
 * without the token (a browser cannot send one when it opens a page);
 * /dashboard.json, like the feed and the density, requires it.
 */
#ifndef TRACESAN_OPS_DASHBOARD_H
#define TRACESAN_OPS_DASHBOARD_H

#include <stddef.h>

#include "ops/ops_http.h"

#define TS_DASHBOARD_MAX_FILE_BYTES ((size_t)4 << 20)

typedef struct ts_dashboard ts_dashboard;

typedef struct ts_dashboard_options {
    const char *dashboard_dir;   /* "" or NULL: the installed copy, else
                                  * the source tree's www/ (uninstalled) */
    const char *leaflet_dir;
    const char *tile_url;        /* "" or NULL: no tiles */
    const char *tile_attribution;
    int token_required;
    int feed_enabled;
    const char *const *profiles; /* configured profile names */
    size_t n_profiles;
} ts_dashboard_options;

/* Reads the files (a missing one is a warning and answers 404) and logs
 * the directory of the page it serves. NULL when memory ran out. */
ts_dashboard *ts_dashboard_new(const ts_dashboard_options *options);
/* 0, or -1 when the endpoint's route table is full. */
int ts_dashboard_add_routes(ts_dashboard *dashboard, ts_ops_http *http);
void ts_dashboard_free(ts_dashboard *dashboard);

/* The installed copy: $(pkgdatadir)/www of this build, which "" stands
 * for unless it has no page and the build knows its source tree's. */
const char *ts_dashboard_installed_dir(void);

#endif
