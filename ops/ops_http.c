#include "ops/ops_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <strings.h>
#include <unistd.h>

#include "ops/http_access.h"
#include "ops/http_parse.h"
#include "engine/log.h"
#include "ops/health.h"

#define HOST_MAX 256
/* Scrapers send small GETs; a head larger than this is not one of them. */
#define MAX_HEAD_BYTES 8192
/* A request head must arrive whole within this long of the connection
 * opening or of the previous reply, however its bytes trickle in: an idle
 * timeout alone let one byte every 8 s hold a slot for ever (issue 25,
 * item 7). A reply stalled this long (the client reads nothing) is
 * dropped too. */
#define HEAD_TIMEOUT_S 10
#define WRITE_TIMEOUT_S 10
/* With every slot taken, a new connection closes the one that has waited
 * longest for a head, if it has waited this long: so /healthz is answered
 * even while slow clients hold every slot, and a burst of new connections
 * cannot push out one another before they had time to send a head. */
#define EVICT_AFTER_MS 1000
/* Replies queued for a client that does not read: past this, its further
 * pipelined requests wait until it has read. */
#define MAX_QUEUED_REPLY_BYTES (256 * 1024)
/* After accept() fails for want of descriptors or memory, the listener
 * rests this long (doubling up to the maximum) instead of spinning on a
 * backlog it cannot take. */
#define ACCEPT_BACKOFF_FIRST_MS 100
#define ACCEPT_BACKOFF_MAX_MS 2000

/* A small HTTP/1.1 server of our own rather than libevent's evhttp: the
 * evhttp of Debian's libevent 2.1 cannot cap its connections nor tell us
 * when one closes, and an accept() failing with EMFILE made it spin. This
 * one serves GET, HEAD and CORS preflights, bounded in every dimension:
 * connections, head size and time, queued reply bytes. A streaming
 * route takes its connection over, and the feed's own limits apply. */
struct ts_ops_http {
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *accept_resume;
    long accept_backoff_ms;
    size_t max_connections;
    size_t open_connections;
    /* All open connections, for eviction and the final free: in the
     * order they began to wait for a head, longest waiting first. */
    struct http_connection *connections, *last_connection;
    ts_ops_http_counters counters;
    ts_ops_render_fn render;
    void *arg;
    char address[HOST_MAX + 16];
    ts_ops_route routes[TS_OPS_MAX_ROUTES];
    size_t n_routes;
    int has_token;
    unsigned char token_digest[TS_HTTP_TOKEN_DIGEST_BYTES];
    char **cors_origins;
    size_t n_cors_origins;
};

typedef struct http_connection {
    ts_ops_http *http;
    struct bufferevent *bev;
    struct http_connection *prev, *next;
    int closing; /* the last reply is queued; close once it is written */
    /* Fires HEAD_TIMEOUT_S after waiting_since_ms unless a head came. */
    struct event *head_deadline;
    uint64_t waiting_since_ms; /* monotonic; when we began to wait */
} http_connection;

/* One request: its parsed head and what the server derives from it. */
typedef struct http_request {
    ts_http_head head;
    const char *query;           /* after '?' in target, "" if none */
    int head_only;
    /* The allowed origin echoed in replies (one of ours), or NULL. */
    const char *allowed_origin;
} http_request;

int ts_ops_http_parse_listen(const char *listen, char *host, size_t host_size,
                             unsigned *port, char *err, size_t errlen)
{
    const char *colon = strrchr(listen, ':');
    if (colon == NULL || colon == listen || colon[1] == '\0') {
        snprintf(err, errlen, "'%s' is not host:port", listen);
        return -1;
    }
    const char *host_start = listen;
    const char *host_end = colon;
    if (listen[0] == '[') {
        if (colon[-1] != ']') {
            snprintf(err, errlen, "'%s': an IPv6 host needs [brackets]:port",
                     listen);
            return -1;
        }
        host_start = listen + 1;
        host_end = colon - 1;
    }
    size_t host_len = (size_t)(host_end - host_start);
    if (host_len == 0 || host_len >= host_size) {
        snprintf(err, errlen, "'%s': bad host", listen);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long value = strtoul(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || value > 65535 || colon[1] == '-' ||
        colon[1] == '+') {
        snprintf(err, errlen, "'%s': port must be 0..65535", listen);
        return -1;
    }
    if (listen[0] != '[' &&
        memchr(host_start, ':', host_len) != NULL) {
        snprintf(err, errlen, "'%s': an IPv6 host needs [brackets]:port",
                 listen);
        return -1;
    }
    if (memchr(host_start, '[', host_len) != NULL ||
        memchr(host_start, ']', host_len) != NULL) {
        snprintf(err, errlen, "'%s': bad host", listen);
        return -1;
    }
    memcpy(host, host_start, host_len);
    host[host_len] = '\0';
    *port = (unsigned)value;
    return 0;
}


static uint64_t monotonic_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

static void link_last(ts_ops_http *http, http_connection *conn)
{
    conn->next = NULL;
    conn->prev = http->last_connection;
    if (conn->prev != NULL)
        conn->prev->next = conn;
    else
        http->connections = conn;
    http->last_connection = conn;
}

static void unlink_connection(http_connection *conn)
{
    ts_ops_http *http = conn->http;
    if (conn->prev != NULL)
        conn->prev->next = conn->next;
    else
        http->connections = conn->next;
    if (conn->next != NULL)
        conn->next->prev = conn->prev;
    else
        http->last_connection = conn->prev;
}

/* Unlinks the connection and frees what is ours of it, not the
 * bufferevent (a stream may have taken it over). */
static void connection_forget(http_connection *conn)
{
    unlink_connection(conn);
    conn->http->open_connections--;
    if (conn->head_deadline != NULL)
        event_free(conn->head_deadline);
    free(conn);
}

static void connection_free(http_connection *conn)
{
    bufferevent_free(conn->bev);
    connection_forget(conn);
}

/* From now on the connection waits for a head, for HEAD_TIMEOUT_S at
 * most; it goes to the end of the list, which stays in waiting order. */
static void wait_for_head(http_connection *conn)
{
    static const struct timeval limit = { .tv_sec = HEAD_TIMEOUT_S };
    unlink_connection(conn);
    link_last(conn->http, conn);
    conn->waiting_since_ms = monotonic_ms();
    event_add(conn->head_deadline, &limit);
}

/* The connection that has waited longest for a head, if that is more than
 * EVICT_AFTER_MS; connections writing a reply are never picked. */
static http_connection *longest_waiting(ts_ops_http *http)
{
    uint64_t now = monotonic_ms();
    for (http_connection *conn = http->connections; conn != NULL;
         conn = conn->next) {
        if (conn->closing ||
            evbuffer_get_length(bufferevent_get_output(conn->bev)) > 0)
            continue;
        return now - conn->waiting_since_ms >= EVICT_AFTER_MS ? conn : NULL;
    }
    return NULL;
}

static const char *status_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Internal Server Error";
    }
}

/* The CORS lines every reply to `req` carries: its origin reflected when
 * it is on the allow-list, and Vary so that caches keep replies to
 * different origins apart. */
static void cors_headers(const ts_ops_http *http, const http_request *req,
                         char *out, size_t size)
{
    out[0] = '\0';
    if (http->n_cors_origins == 0)
        return;
    if (req != NULL && req->allowed_origin != NULL)
        snprintf(out, size, "Access-Control-Allow-Origin: %s\r\n"
                 "Vary: Origin\r\n", req->allowed_origin);
    else
        snprintf(out, size, "Vary: Origin\r\n");
}

/* `req` is NULL for replies to heads that could not be parsed. */
static void send_reply(http_connection *conn, const http_request *req,
                       int code, const char *content_type,
                       const char *headers, const void *body, size_t len)
{
    struct evbuffer *out = bufferevent_get_output(conn->bev);
    char cors[TS_HTTP_ORIGIN_MAX_CHARS + 64];
    cors_headers(conn->http, req, cors, sizeof cors);
    evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", code, status_reason(code));
    /* A 204 has no body and so no length or type. */
    if (code != 204)
        evbuffer_add_printf(out, "Content-Type: %s\r\n"
                            "Content-Length: %zu\r\n", content_type, len);
    evbuffer_add_printf(out,
                        "Cache-Control: no-store\r\n"
                        "X-Content-Type-Options: nosniff\r\n"
                        "%s%s%s\r\n",
                        cors, headers != NULL ? headers : "",
                        conn->closing ? "Connection: close\r\n" : "");
    /* A HEAD reply carries the GET's length and no body, so a keep-alive
     * client stays in step (issue 10, item 15). */
    if ((req == NULL || !req->head_only) && len > 0 && code != 204)
        evbuffer_add(out, body, len);
}

static void send_plain(http_connection *conn, const http_request *req,
                       int code, const char *body)
{
    send_reply(conn, req, code, "text/plain", NULL, body, strlen(body));
}

static void serve_metrics(http_connection *conn, const http_request *req)
{
    size_t len = 0;
    char *body = conn->http->render(conn->http->arg, &len);
    if (body == NULL) {
        send_plain(conn, req, 500, "internal error\n");
        return;
    }
    send_reply(conn, req, 200, "text/plain; version=0.0.4; charset=utf-8",
               NULL, body, len);
    free(body);
}

static void serve_healthz(http_connection *conn, const http_request *req)
{
    char reason[300];
    if (ts_metrics_healthy(reason, sizeof reason)) {
        send_plain(conn, req, 200, "ok\n");
        return;
    }
    size_t n = strlen(reason);
    if (n + 1 < sizeof reason) {
        reason[n++] = '\n';
        reason[n] = '\0';
    }
    send_reply(conn, req, 503, "text/plain", NULL, reason, n);
}

static void serve_route(http_connection *conn, const http_request *req,
                        const ts_ops_route *route, const char *rest)
{
    ts_ops_reply reply = { .status = 500, .content_type = "text/plain" };
    route->serve(route->arg, rest, req->query, &reply);
    if (reply.body == NULL && reply.len > 0)
        reply.status = 500;
    if (reply.status == 500 && reply.body == NULL)
        send_plain(conn, req, 500, "internal error\n");
    else
        send_reply(conn, req, reply.status, reply.content_type,
                   reply.headers, reply.body, reply.len);
    free(reply.owned);
}

static const char *allowed_origin(const ts_ops_http *http,
                                  const http_request *req)
{
    if (!req->head.has_origin)
        return NULL;
    for (size_t i = 0; i < http->n_cors_origins; i++)
        if (strcmp(http->cors_origins[i], req->head.origin) == 0)
            return http->cors_origins[i];
    return NULL;
}

static const ts_ops_route *find_route(const ts_ops_http *http,
                                      const char *path, const char **rest)
{
    for (size_t i = 0; i < http->n_routes; i++) {
        const char *route_path = http->routes[i].path;
        size_t len = strlen(route_path);
        int prefix = len > 1 && route_path[len - 1] == '/';
        if (prefix ? strncmp(path, route_path, len) == 0
                   : strcmp(path, route_path) == 0) {
            *rest = path + (prefix ? len : strlen(path));
            return &http->routes[i];
        }
    }
    return NULL;
}

static int authorized(ts_ops_http *http, const http_request *req)
{
    if (!http->has_token)
        return 1;
    if (req->head.has_authorization &&
        ts_http_authorization_matches(http->token_digest,
                                      req->head.authorization))
        return 1;
    http->counters.unauthorized++;
    return 0;
}

static void send_unauthorized(http_connection *conn, const http_request *req)
{
    /* RFC 6750: a wrong token says invalid_token; none says nothing. */
    send_reply(conn, req, 401, "text/plain",
               req->head.has_authorization
                   ? "WWW-Authenticate: Bearer realm=\"tracesand\", "
                     "error=\"invalid_token\"\r\n"
                   : "WWW-Authenticate: Bearer realm=\"tracesand\"\r\n",
               "a bearer token is required\n", 27);
}

/* OPTIONS: a CORS preflight (browsers send it before a cross-origin
 * request with an Authorization header) or a plain capability query. */
static void serve_options(http_connection *conn, const http_request *req)
{
    if (!req->head.preflight) {
        send_reply(conn, req, 204, NULL, "Allow: GET, HEAD, OPTIONS\r\n",
                   NULL, 0);
        return;
    }
    if (req->allowed_origin == NULL ||
        (strcmp(req->head.preflight_method, "GET") != 0 &&
         strcmp(req->head.preflight_method, "HEAD") != 0)) {
        conn->http->counters.cors_denied++;
        send_plain(conn, req, 403, "origin or method not allowed\n");
        return;
    }
    send_reply(conn, req, 204, NULL,
               "Access-Control-Allow-Methods: GET, HEAD\r\n"
               "Access-Control-Allow-Headers: Authorization, Cache-Control, "
               "Last-Event-ID\r\n"
               "Access-Control-Max-Age: 600\r\n",
               NULL, 0);
}

/* Returns 1 when a streaming route took the connection over (conn is then
 * gone), else 0 with a reply queued. */
static int serve_stream(http_connection *conn, const http_request *req,
                        const ts_ops_route *route)
{
    if (req->head_only) {
        send_reply(conn, req, 405, "text/plain", "Allow: GET\r\n",
                   "a stream has no HEAD\n", 20);
        return 0;
    }
    char cors[TS_HTTP_ORIGIN_MAX_CHARS + 64];
    cors_headers(conn->http, req, cors, sizeof cors);
    const char *message = "refused\n";
    int status = route->stream(route->arg, req->query, conn->bev, cors,
                               &message);
    if (status != 200) {
        conn->closing = 1;
        send_plain(conn, req, status, message);
        return 0;
    }
    /* The stream owns the bufferevent now: forget the connection. */
    connection_forget(conn);
    return 1;
}

/* One complete head, parsed: answer it. A request with a body gets its
 * error and the connection closes, since the next request's start could
 * not be found. Returns 1 when a stream took the connection over. */
static int serve_request(http_connection *conn, http_request *req)
{
    conn->closing = req->head.has_body || !req->head.keep_alive;
    req->allowed_origin = allowed_origin(conn->http, req);
    if (req->head.has_body) {
        send_plain(conn, req, 413, "requests carry no body here\n");
        return 0;
    }
    if (strcmp(req->head.method, "OPTIONS") == 0) {
        serve_options(conn, req);
        return 0;
    }
    req->head_only = strcmp(req->head.method, "HEAD") == 0;
    if (!req->head_only && strcmp(req->head.method, "GET") != 0) {
        send_reply(conn, req, 405, "text/plain",
                   "Allow: GET, HEAD, OPTIONS\r\n", "method not allowed\n",
                   19);
        return 0;
    }
    char *query = strchr(req->head.target, '?');
    req->query = "";
    if (query != NULL) {
        *query = '\0';
        req->query = query + 1;
    }
    ts_ops_http *http = conn->http;
    if (strcmp(req->head.target, "/healthz") == 0) {
        serve_healthz(conn, req);
        return 0;
    }
    const char *rest = "";
    const ts_ops_route *route = NULL;
    int metrics = strcmp(req->head.target, "/metrics") == 0;
    if (!metrics)
        route = find_route(http, req->head.target, &rest);
    if (!metrics && route == NULL) {
        send_plain(conn, req, 404, "not found\n");
        return 0;
    }
    if ((metrics || !route->public) && !authorized(http, req)) {
        send_unauthorized(conn, req);
        return 0;
    }
    if (metrics)
        serve_metrics(conn, req);
    else if (route->stream != NULL)
        return serve_stream(conn, req, route);
    else
        serve_route(conn, req, route, rest);
    return 0;
}

/* Bytes came: answer every complete head buffered, refuse a head that
 * cannot be framed or grows too large (closing: what follows it cannot be
 * told apart from a request). */
static void on_connection_read(struct bufferevent *bev, void *arg)
{
    http_connection *conn = arg;
    ts_ops_http *http = conn->http;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (!conn->closing && evbuffer_get_length(in) > 0) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) >
            MAX_QUEUED_REPLY_BYTES) {
            /* Resumed by on_connection_write once the client has read. */
            bufferevent_disable(bev, EV_READ);
            return;
        }
        size_t len = evbuffer_get_length(in);
        if (len > MAX_HEAD_BYTES)
            len = MAX_HEAD_BYTES;
        const char *bytes = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
        http_request req = { .query = "" };
        size_t consumed = 0;
        ts_http_parse_result parsed =
            bytes != NULL ? ts_http_parse_head(bytes, len, &req.head,
                                               &consumed)
                          : TS_HTTP_HEAD_REFUSED;
        if (bytes == NULL) {
            req.head.error_status = 500;
            req.head.error = "out of memory";
        } else if (parsed == TS_HTTP_HEAD_INCOMPLETE) {
            if (len < MAX_HEAD_BYTES)
                break;
            parsed = TS_HTTP_HEAD_REFUSED;
            req.head.error_status = 431;
            req.head.error = "request head too large";
        }
        if (parsed == TS_HTTP_HEAD_REFUSED) {
            if (bytes != NULL)
                http->counters.bad_requests++;
            conn->closing = 1;
            char message[128];
            snprintf(message, sizeof message, "%s\n", req.head.error);
            send_plain(conn, NULL, req.head.error_status, message);
            break;
        }
        evbuffer_drain(in, consumed);
        if (serve_request(conn, &req))
            return;
        if (!conn->closing)
            wait_for_head(conn);
    }
    if (conn->closing) {
        bufferevent_disable(bev, EV_READ);
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
            connection_free(conn);
    }
}

static void on_connection_write(struct bufferevent *bev, void *arg)
{
    http_connection *conn = arg;
    /* Called once the output has drained. */
    if (conn->closing) {
        connection_free(conn);
        return;
    }
    if (!(bufferevent_get_enabled(bev) & EV_READ)) {
        bufferevent_enable(bev, EV_READ);
        on_connection_read(bev, conn);
    }
}

static void on_connection_event(struct bufferevent *bev, short what,
                                void *arg)
{
    http_connection *conn = arg;
    if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) &&
        evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
        /* The client is done sending, not reading: finish the replies. */
        conn->closing = 1;
        bufferevent_disable(bev, EV_READ);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        connection_free(conn);
}

static void on_head_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_connection *conn = arg;
    struct bufferevent *bev = conn->bev;
    conn->closing = 1;
    bufferevent_disable(bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
        return; /* closed once the replies are written */
    if (evbuffer_get_length(bufferevent_get_input(bev)) == 0) {
        connection_free(conn); /* an idle keep-alive connection */
        return;
    }
    /* Part of a head came, too slowly: say so, then close. */
    conn->http->counters.head_timeouts++;
    send_plain(conn, NULL, 408, "request head not received in time\n");
}

static void on_accept(struct evconnlistener *listener, evutil_socket_t fd,
                      struct sockaddr *address, int address_len, void *arg)
{
    (void)listener;
    (void)address;
    (void)address_len;
    ts_ops_http *http = arg;
    http->accept_backoff_ms = 0;
    if (http->open_connections >= http->max_connections) {
        /* The slots are for scrapers and health checks, and an idle crowd
         * must not starve the ZeroMQ sockets of fds: the newcomer takes
         * the slot of the longest wait for a head, or is closed at once. */
        http_connection *evicted = longest_waiting(http);
        if (evicted == NULL) {
            http->counters.connections_refused++;
            evutil_closesocket(fd);
            return;
        }
        http->counters.evictions++;
        connection_free(evicted);
    }
    http_connection *conn = calloc(1, sizeof *conn);
    struct bufferevent *bev =
        conn != NULL ? bufferevent_socket_new(http->base, fd,
                                              BEV_OPT_CLOSE_ON_FREE)
                     : NULL;
    if (bev != NULL)
        conn->head_deadline = evtimer_new(http->base, on_head_deadline, conn);
    if (bev == NULL || conn->head_deadline == NULL) {
        if (bev != NULL)
            bufferevent_free(bev);
        else
            evutil_closesocket(fd);
        free(conn);
        http->counters.accept_errors++;
        return;
    }
    conn->http = http;
    conn->bev = bev;
    link_last(http, conn);
    http->open_connections++;
    http->counters.connections_accepted++;
    static const struct timeval write_limit = { .tv_sec = WRITE_TIMEOUT_S };
    bufferevent_set_timeouts(bev, NULL, &write_limit);
    bufferevent_setcb(bev, on_connection_read, on_connection_write,
                      on_connection_event, conn);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    wait_for_head(conn);
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_ops_http *http = arg;
    evconnlistener_enable(http->listener);
}

static void on_accept_error(struct evconnlistener *listener, void *arg)
{
    ts_ops_http *http = arg;
    int error = EVUTIL_SOCKET_ERROR();
    http->counters.accept_errors++;
    if (error != EMFILE && error != ENFILE && error != ENOBUFS &&
        error != ENOMEM)
        return; /* one failed connection; the next accept is unaffected */
    /* Out of descriptors or memory: the pending connection stays in the
     * backlog and the listener would fire again at once. Rest instead. */
    http->accept_backoff_ms = http->accept_backoff_ms == 0
                                  ? ACCEPT_BACKOFF_FIRST_MS
                                  : http->accept_backoff_ms * 2;
    if (http->accept_backoff_ms > ACCEPT_BACKOFF_MAX_MS)
        http->accept_backoff_ms = ACCEPT_BACKOFF_MAX_MS;
    evconnlistener_disable(listener);
    struct timeval delay = {
        .tv_sec = http->accept_backoff_ms / 1000,
        .tv_usec = (http->accept_backoff_ms % 1000) * 1000,
    };
    event_add(http->accept_resume, &delay);
    ts_log(TS_LOG_WARN, "http: accept failed: %s; not accepting for %ld ms",
           evutil_socket_error_to_string(error), http->accept_backoff_ms);
}

static int bound_address(evutil_socket_t fd, char *out, size_t size)
{
    struct sockaddr_storage address;
    socklen_t address_len = sizeof address;
    if (getsockname(fd, (struct sockaddr *)&address, &address_len) != 0)
        return -1;
    char host[INET6_ADDRSTRLEN];
    if (address.ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)&address;
        if (inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host) == NULL)
            return -1;
        snprintf(out, size, "%s:%u", host, (unsigned)ntohs(v4->sin_port));
        return 0;
    }
    if (address.ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&address;
        if (inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host) == NULL)
            return -1;
        snprintf(out, size, "[%s]:%u", host, (unsigned)ntohs(v6->sin6_port));
        return 0;
    }
    return -1;
}

static struct evconnlistener *listen_on(ts_ops_http *http, const char *host,
                                        unsigned port, int *error)
{
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE };
    struct addrinfo *found = NULL;
    int rc = getaddrinfo(host, service, &hints, &found);
    if (rc != 0) {
        *error = rc == EAI_SYSTEM ? errno : EADDRNOTAVAIL;
        return NULL;
    }
    struct evconnlistener *listener = NULL;
    *error = EADDRNOTAVAIL;
    for (struct addrinfo *ai = found; ai != NULL && listener == NULL;
         ai = ai->ai_next) {
        listener = evconnlistener_new_bind(
            http->base, on_accept, http,
            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
            -1, ai->ai_addr, (int)ai->ai_addrlen);
        if (listener == NULL)
            *error = errno;
    }
    freeaddrinfo(found);
    return listener;
}

ts_ops_http *ts_ops_http_start(struct event_base *base, const char *listen,
                               size_t max_connections,
                               ts_ops_render_fn render, void *arg, char *err,
                               size_t errlen)
{
    char host[HOST_MAX];
    unsigned port = 0;
    if (ts_ops_http_parse_listen(listen, host, sizeof host, &port, err,
                                 errlen) != 0)
        return NULL;
    ts_ops_http *http = calloc(1, sizeof *http);
    if (http == NULL) {
        snprintf(err, errlen, "http: out of memory");
        return NULL;
    }
    http->base = base;
    http->render = render;
    http->arg = arg;
    http->max_connections = max_connections;
    http->accept_resume = evtimer_new(base, on_accept_resume, http);
    if (http->accept_resume == NULL) {
        snprintf(err, errlen, "http: out of memory");
        goto fail;
    }
    int error = 0;
    http->listener = listen_on(http, host, port, &error);
    if (http->listener == NULL) {
        snprintf(err, errlen, "http.listen '%s': cannot bind: %s", listen,
                 strerror(error));
        goto fail;
    }
    evconnlistener_set_error_cb(http->listener, on_accept_error);
    if (bound_address(evconnlistener_get_fd(http->listener), http->address,
                      sizeof http->address) != 0)
        snprintf(http->address, sizeof http->address, "%s", listen);
    return http;

fail:
    ts_ops_http_free(http);
    return NULL;
}

const char *ts_ops_http_address(const ts_ops_http *http)
{
    return http->address;
}

int ts_ops_http_add_route(ts_ops_http *http, const ts_ops_route *route)
{
    if (http->n_routes == TS_OPS_MAX_ROUTES)
        return -1;
    http->routes[http->n_routes++] = *route;
    return 0;
}

static void free_cors_origins(ts_ops_http *http)
{
    for (size_t i = 0; i < http->n_cors_origins; i++)
        free(http->cors_origins[i]);
    free(http->cors_origins);
    http->cors_origins = NULL;
    http->n_cors_origins = 0;
}

int ts_ops_http_set_access(ts_ops_http *http, const char *token,
                           const char *const *cors_origins,
                           size_t n_cors_origins)
{
    http->has_token = token != NULL;
    if (token != NULL)
        ts_http_token_digest(token, http->token_digest);
    free_cors_origins(http);
    if (n_cors_origins == 0)
        return 0;
    http->cors_origins = calloc(n_cors_origins, sizeof *http->cors_origins);
    if (http->cors_origins == NULL)
        return -1;
    for (size_t i = 0; i < n_cors_origins; i++) {
        http->cors_origins[i] = strdup(cors_origins[i]);
        if (http->cors_origins[i] == NULL) {
            http->n_cors_origins = i;
            free_cors_origins(http);
            return -1;
        }
    }
    http->n_cors_origins = n_cors_origins;
    return 0;
}

ts_ops_http_counters ts_ops_http_get_counters(const ts_ops_http *http)
{
    ts_ops_http_counters counters = http->counters;
    counters.open_connections = http->open_connections;
    return counters;
}

void ts_ops_http_free(ts_ops_http *http)
{
    if (http == NULL)
        return;
    while (http->connections != NULL)
        connection_free(http->connections);
    if (http->listener != NULL)
        evconnlistener_free(http->listener);
    if (http->accept_resume != NULL)
        event_free(http->accept_resume);
    free_cors_origins(http);
    free(http);
}
