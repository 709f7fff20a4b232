/* The operator's HTTP endpoint (libevent bufferevents, on the daemon's loop):
 * GET /metrics (Prometheus text) and GET /healthz ("ok" or 503 + reason).
 *
 * It runs on the event loop thread, so a scrape reads the counters without
 * locks; rendering is a few kilobytes of snprintf, far below a batch.
 */
#ifndef TRACESAN_DAEMON_OPS_HTTP_H
#define TRACESAN_DAEMON_OPS_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

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
} ts_ops_http_counters;

/* Bind `listen` and serve at most `max_connections` clients at a time.
 * NULL with err filled on failure. */
ts_ops_http *ts_ops_http_start(struct event_base *base, const char *listen,
                               size_t max_connections,
                               ts_ops_render_fn render, void *arg, char *err,
                               size_t errlen);
/* Serves GET/HEAD of every path under `prefix` ("/density/") through
 * `serve`, which gets the rest of the path and returns a malloc'ed body
 * (NULL: 500) with its status and content type. One such route. */
typedef char *(*ts_ops_resource_fn)(void *arg, const char *rest,
                                    int *status, const char **content_type,
                                    size_t *len);
void ts_ops_http_set_resource(ts_ops_http *http, const char *prefix,
                              ts_ops_resource_fn serve, void *arg);
ts_ops_http_counters ts_ops_http_get_counters(const ts_ops_http *http);
/* "host:port" actually bound (ephemeral port resolved). */
const char *ts_ops_http_address(const ts_ops_http *http);
void ts_ops_http_free(ts_ops_http *http);

#endif
