#include "ops/dashboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire/codec.h"
#include "wire/json_codec.h"
#include "engine/log.h"
#include "engine/safe_open.h"

#ifndef TS_DASHBOARD_DIR
#define TS_DASHBOARD_DIR "/usr/local/share/tracesan/www"
#endif
/* The source tree's www/, for a build run before `make install` (set by
 * configure; "" when configured --without-source-dashboard). */
#ifndef TS_SOURCE_DASHBOARD_DIR
#define TS_SOURCE_DASHBOARD_DIR ""
#endif
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

typedef struct served_file {
    const char *name;            /* relative to its directory */
    const char *content_type;
    unsigned char *data;         /* NULL: not found at start */
    size_t len;
} served_file;

enum { PAGE_INDEX, PAGE_SCRIPT, PAGE_STYLE, N_PAGE_FILES };

static const served_file page_files[N_PAGE_FILES] = {
    [PAGE_INDEX] = { "index.html", "text/html; charset=utf-8", NULL, 0 },
    [PAGE_SCRIPT] = { "dashboard.js", "text/javascript; charset=utf-8",
                      NULL, 0 },
    [PAGE_STYLE] = { "dashboard.css", "text/css; charset=utf-8", NULL, 0 },
};
static const char *const page_paths[N_PAGE_FILES] = {
    "/", "/dashboard.js", "/dashboard.css",
};

/* What the page and Leaflet's own stylesheet load. */
static const served_file leaflet_files[] = {
    { "leaflet.js", "text/javascript; charset=utf-8", NULL, 0 },
    { "leaflet.css", "text/css; charset=utf-8", NULL, 0 },
    { "images/layers.png", "image/png", NULL, 0 },
    { "images/layers-2x.png", "image/png", NULL, 0 },
    { "images/marker-icon.png", "image/png", NULL, 0 },
    { "images/marker-icon-2x.png", "image/png", NULL, 0 },
    { "images/marker-shadow.png", "image/png", NULL, 0 },
};
#define N_LEAFLET_FILES (sizeof leaflet_files / sizeof leaflet_files[0])

/* The argument of one page file's route. */
typedef struct page_route {
    const struct ts_dashboard *dashboard;
    int index;
} page_route;

struct ts_dashboard {
    served_file page[N_PAGE_FILES];
    page_route routes[N_PAGE_FILES];
    served_file leaflet[N_LEAFLET_FILES];
    /* The page's own headers: its Content-Security-Policy allows scripts
     * from here only, and images from the tile server when there is one. */
    char *page_headers;
    ts_buf config_json;
};

const char *ts_dashboard_installed_dir(void)
{
    return TS_DASHBOARD_DIR;
}

/* 0 and the file in memory, or -1 (errno-style reason in `why`). */
static int read_file(const char *dir, served_file *file, char *why,
                     size_t len)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file->name) >=
        sizeof path) {
        snprintf(why, len, "path too long");
        return -1;
    }
    char reason[128];
    FILE *f = ts_fopen_regular(path, reason, sizeof reason);
    if (f == NULL) {
        snprintf(why, len, "%.400s: %s", path, reason);
        return -1;
    }
    ts_buf buf = { 0 };
    unsigned char chunk[16384];
    size_t n;
    int failed = 0;
    while (!failed && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (buf.len + n > TS_DASHBOARD_MAX_FILE_BYTES) {
            snprintf(why, len, "%.400s: larger than %zu bytes", path,
                     TS_DASHBOARD_MAX_FILE_BYTES);
            failed = 1;
        } else if (ts_buf_append(&buf, chunk, n) != 0) {
            snprintf(why, len, "%.400s: out of memory", path);
            failed = 1;
        }
    }
    if (!failed && ferror(f)) {
        snprintf(why, len, "%.400s: read error", path);
        failed = 1;
    }
    fclose(f);
    if (failed) {
        ts_buf_free(&buf);
        return -1;
    }
    /* An empty file is still a file: data must not stay NULL. */
    if (buf.data == NULL && ts_buf_reserve(&buf, 1) != 0) {
        snprintf(why, len, "%.400s: out of memory", path);
        return -1;
    }
    file->data = buf.data;
    file->len = buf.len;
    return 0;
}

/* Reads every file of a set; warns with the first one missing, since a
 * page without it answers 404 or draws no map. */
static void read_set(const char *what, const char *dir, served_file *files,
                     size_t n, const char *key)
{
    char first_missing[600] = "";
    size_t missing = 0;
    for (size_t i = 0; i < n; i++) {
        char why[560];
        if (read_file(dir, &files[i], why, sizeof why) != 0 &&
            missing++ == 0)
            snprintf(first_missing, sizeof first_missing, "%s", why);
    }
    if (missing > 0)
        ts_log(TS_LOG_WARN, "dashboard: %zu of %zu %s files unreadable (%s); "
               "they answer 404 (%s names the directory)", missing, n, what,
               first_missing, key);
}

/* What http.dashboard_dir = "" means: the installed copy, or, when that
 * has no page and this build was never installed, the source tree's. */
static const char *default_page_dir(void)
{
    char installed[4096];
    snprintf(installed, sizeof installed, "%s/%s", TS_DASHBOARD_DIR,
             page_files[PAGE_INDEX].name);
    if (TS_SOURCE_DASHBOARD_DIR[0] == '\0' || access(installed, F_OK) == 0)
        return TS_DASHBOARD_DIR;
    return TS_SOURCE_DASHBOARD_DIR;
}

static int append_text(ts_buf *buf, const char *text)
{
    return ts_buf_append(buf, text, strlen(text));
}

static int build_config_json(ts_buf *buf, const ts_dashboard_options *o)
{
    int rc = append_text(buf, "{\"version\":") |
             ts_json_put_string(buf, PACKAGE_VERSION) |
             append_text(buf, ",\"tile_url\":") |
             ts_json_put_string(buf, o->tile_url != NULL ? o->tile_url : "") |
             append_text(buf, ",\"tile_attribution\":") |
             ts_json_put_string(buf, o->tile_attribution != NULL
                                         ? o->tile_attribution : "") |
             append_text(buf, ",\"token_required\":") |
             append_text(buf, o->token_required ? "true" : "false") |
             append_text(buf, ",\"feed\":") |
             append_text(buf, o->feed_enabled ? "true" : "false") |
             append_text(buf, ",\"profiles\":[");
    for (size_t i = 0; i < o->n_profiles; i++)
        rc |= (i > 0 ? append_text(buf, ",") : 0) |
              ts_json_put_string(buf, o->profiles[i]);
    return rc | append_text(buf, "]}");
}

/* The CSP source for a tile URL template's host: a "*." wildcard for a
 * leading "{s}." (Leaflet's subdomains), the scheme alone when the host
 * has other placeholders or characters a CSP could misread. */
static void tile_source(const char *tile_url, char *out, size_t size)
{
    out[0] = '\0';
    if (tile_url == NULL || tile_url[0] == '\0')
        return;
    const char *host = strstr(tile_url, "://");
    if (host == NULL)
        return;
    host += 3;
    size_t scheme_len = (size_t)(host - tile_url);
    size_t host_len = strcspn(host, "/");
    const char *rest = host;
    size_t rest_len = host_len;
    int wildcard = strncmp(host, "{s}.", 4) == 0;
    if (wildcard) {
        rest += 4;
        rest_len -= 4;
    }
    int clean = rest_len > 0;
    for (size_t i = 0; i < rest_len; i++)
        if (strchr("abcdefghijklmnopqrstuvwxyz0123456789.-:[]", rest[i]) ==
                NULL &&
            strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZ", rest[i]) == NULL)
            clean = 0;
    if (!clean)
        snprintf(out, size, " %.*s", (int)(scheme_len - 2), tile_url);
    else
        snprintf(out, size, " %.*s%s%.*s", (int)scheme_len, tile_url,
                 wildcard ? "*." : "", (int)rest_len, rest);
}

static char *build_page_headers(const char *tile_url)
{
    char tiles[512];
    tile_source(tile_url, tiles, sizeof tiles);
    const char *format =
        "Content-Security-Policy: default-src 'none'; script-src 'self'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:%s; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'\r\n"
        "Referrer-Policy: no-referrer\r\n"
        "X-Frame-Options: DENY\r\n";
    size_t size = strlen(format) + strlen(tiles) + 1;
    char *headers = malloc(size);
    if (headers != NULL)
        snprintf(headers, size, format, tiles);
    return headers;
}

ts_dashboard *ts_dashboard_new(const ts_dashboard_options *options)
{
    ts_dashboard *dashboard = calloc(1, sizeof *dashboard);
    if (dashboard == NULL)
        return NULL;
    memcpy(dashboard->page, page_files, sizeof page_files);
    memcpy(dashboard->leaflet, leaflet_files, sizeof leaflet_files);
    const char *dir = options->dashboard_dir;
    if (dir == NULL || dir[0] == '\0')
        dir = default_page_dir();
    read_set("dashboard", dir, dashboard->page, N_PAGE_FILES,
             "http.dashboard_dir");
    if (dashboard->page[PAGE_INDEX].data != NULL)
        ts_log(TS_LOG_INFO, "dashboard: serving the page from %s", dir);
    read_set("Leaflet", options->leaflet_dir, dashboard->leaflet,
             N_LEAFLET_FILES, "http.leaflet_dir");
    dashboard->page_headers = build_page_headers(options->tile_url);
    if (dashboard->page_headers == NULL ||
        build_config_json(&dashboard->config_json, options) != 0) {
        ts_dashboard_free(dashboard);
        return NULL;
    }
    return dashboard;
}

void ts_dashboard_free(ts_dashboard *dashboard)
{
    if (dashboard == NULL)
        return;
    for (size_t i = 0; i < N_PAGE_FILES; i++)
        free(dashboard->page[i].data);
    for (size_t i = 0; i < N_LEAFLET_FILES; i++)
        free(dashboard->leaflet[i].data);
    free(dashboard->page_headers);
    ts_buf_free(&dashboard->config_json);
    free(dashboard);
}

/* ------------------------------------------------------------- routes */

static void serve_file(const served_file *file, const char *headers,
                       ts_ops_reply *reply)
{
    if (file == NULL || file->data == NULL) {
        reply->status = 404;
        reply->content_type = "text/plain";
        reply->body = "not found\n";
        reply->len = 10;
        return;
    }
    reply->status = 200;
    reply->content_type = file->content_type;
    reply->headers = headers;
    reply->body = file->data;
    reply->len = file->len;
}

static void serve_page(void *arg, const char *rest, const char *query,
                       ts_ops_reply *reply)
{
    (void)rest;
    (void)query;
    const page_route *route = arg;
    const ts_dashboard *dashboard = route->dashboard;
    serve_file(&dashboard->page[route->index],
               route->index == PAGE_INDEX ? dashboard->page_headers : NULL,
               reply);
}

static void serve_leaflet(void *arg, const char *rest, const char *query,
                          ts_ops_reply *reply)
{
    (void)query;
    const ts_dashboard *dashboard = arg;
    const served_file *found = NULL;
    /* Exact names only: "../" or "%2e" never match one. */
    for (size_t i = 0; i < N_LEAFLET_FILES && found == NULL; i++)
        if (strcmp(rest, dashboard->leaflet[i].name) == 0)
            found = &dashboard->leaflet[i];
    serve_file(found, NULL, reply);
}

static void serve_config(void *arg, const char *rest, const char *query,
                         ts_ops_reply *reply)
{
    (void)rest;
    (void)query;
    const ts_dashboard *dashboard = arg;
    reply->status = 200;
    reply->content_type = "application/json";
    reply->body = dashboard->config_json.data;
    reply->len = dashboard->config_json.len;
}

int ts_dashboard_add_routes(ts_dashboard *dashboard, ts_ops_http *http)
{
    int rc = 0;
    for (int i = 0; i < N_PAGE_FILES; i++) {
        dashboard->routes[i] = (page_route){ .dashboard = dashboard,
                                             .index = i };
        rc |= ts_ops_http_add_route(http, &(ts_ops_route){
            .path = page_paths[i], .public = 1, .serve = serve_page,
            .arg = &dashboard->routes[i] });
    }
    rc |= ts_ops_http_add_route(http, &(ts_ops_route){
        .path = "/leaflet/", .public = 1, .serve = serve_leaflet,
        .arg = dashboard });
    rc |= ts_ops_http_add_route(http, &(ts_ops_route){
        .path = "/dashboard.json", .serve = serve_config,
        .arg = dashboard });
    return rc;
}
