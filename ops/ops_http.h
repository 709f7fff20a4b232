/* The daemon's HTTP endpoint (libevent bufferevents, on the daemon's loop):
 * GET /metrics (Prometheus text), GET /healthz ("ok" or 503 + reason), and
 * the routes the daemon adds: the density GeoJSON, the dashboard's files
 * and the /feed stream.
 *
 * It runs on the event loop thread, so a scrape reads the counters without
 * locks; rendering is a few kilobytes of snprintf, far below a batch.
 *
 * Access: with a token set (ts_ops_http_set_access), every route not
 * marked public and /metrics answer 401 without "Authorization: Bearer
 * <token>"; /healthz stays open. Requests whose Origin is on the CORS
 * allow-list get it reflected in Access-Control-Allow-Origin, and OPTIONS
 * preflights from such origins are answered.
 *
 * Slow and hostile clients: request heads are parsed strictly
 * (ops/http_parse.h; a head that could be framed two ways is refused and
 * its connection closed), must arrive whole within 10 s, and with every
 * slot taken a new connection takes the slot of the one that has waited
 * longest (over 1 s) for a head, so that /healthz stays answered.
 */
#ifndef TRACESAN_OPS_OPS_HTTP_H
#define TRACESAN_OPS_OPS_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct bufferevent;

typedef struct ts_ops_http ts_ops_http;

/* Produces the /metrics body (malloc'ed, caller frees; NULL on failure). */
typedef char *(*ts_ops_render_fn)(void *arg, size_t *len);

/* Split "host:port" ("[v6]:port" for IPv6); port 0 asks for an ephemeral
 * one. 0 on success, -1 with err filled otherwise. */
int ts_ops_http_parse_listen(const char *listen, char *host, size_t host_size,
                             unsigned *port, char *err, size_t errlen);

typedef struct ts_ops_http_counters {
    uint64_t connections_accepted;
    uint64_t connections_refused; /* closed at once: max_connections open */
    uint64_t accept_errors;       /* accept() failed (EMFILE backs off) */
    uint64_t open_connections;    /* gauge */
    uint64_t unauthorized;        /* 401: no or a wrong bearer token */
    uint64_t cors_denied;         /* preflights from unlisted origins */
    uint64_t bad_requests;        /* heads refused: framing, size (4xx/5xx) */
    uint64_t head_timeouts;       /* heads not complete within 10 s */
    uint64_t evictions;           /* closed for a newcomer when full */
} ts_ops_http_counters;

/* Bind `listen` and serve at most `max_connections` clients at a time.
 * NULL with err filled on failure. */
ts_ops_http *ts_ops_http_start(struct event_base *base, const char *listen,
                               size_t max_connections,
                               ts_ops_render_fn render, void *arg, char *err,
                               size_t errlen);

/* Bearer token (NULL: none) and CORS allow-list; copied. 0, or -1 when
 * memory ran out. */
int ts_ops_http_set_access(ts_ops_http *http, const char *token,
                           const char *const *cors_origins,
                           size_t n_cors_origins);

/* What a route answers. `body` is copied out before the server frees
 * `owned` (may be NULL); `headers` are extra "Name: value\r\n" lines. */
typedef struct ts_ops_reply {
    int status;
    const char *content_type;
    const char *headers;
    const void *body;
    size_t len;
    void *owned;
} ts_ops_reply;

/* GET/HEAD of the route's path. `rest` is the path after the route's
 * prefix ("" for an exact path), `query` what followed '?' ("" if none).
 * reply->status starts at 500. */
typedef void (*ts_ops_serve_fn)(void *arg, const char *rest,
                                const char *query, ts_ops_reply *reply);

/* GET of a streaming route: 200 means the callback wrote the response head
 * (with `headers`, the CORS lines, added) to `bev` and owns it from now
 * on, callbacks and all; any other status refuses, and the server answers
 * with it and `*message`. */
typedef int (*ts_ops_stream_fn)(void *arg, const char *query,
                                struct bufferevent *bev, const char *headers,
                                const char **message);

typedef struct ts_ops_route {
    /* An exact path ("/", "/dashboard.json"), or a prefix when it ends in
     * '/' and is longer than "/" ("/density/", "/leaflet/"). */
    const char *path;
    /* Served without the token: files that carry no data. */
    int public;
    ts_ops_serve_fn serve;      /* one of these two */
    ts_ops_stream_fn stream;
    void *arg;
} ts_ops_route;

/* At most TS_OPS_MAX_ROUTES; the first match wins. 0, or -1 when full. */
#define TS_OPS_MAX_ROUTES 16
int ts_ops_http_add_route(ts_ops_http *http, const ts_ops_route *route);

ts_ops_http_counters ts_ops_http_get_counters(const ts_ops_http *http);
/* "host:port" actually bound (ephemeral port resolved). */
const char *ts_ops_http_address(const ts_ops_http *http);
void ts_ops_http_free(ts_ops_http *http);

#endif
