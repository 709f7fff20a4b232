#include "daemon/ops_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "daemon/metrics.h"

#define HOST_MAX 256

struct ts_ops_http {
    struct evhttp *http;
    ts_ops_render_fn render;
    void *arg;
    char address[HOST_MAX + 16];
};

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

/* Every reply goes through here, HEAD included. libevent sends a HEAD
 * reply's body and leaves out its Content-Length, which desynchronises a
 * keep-alive client (issue 10, item 15); so a HEAD reply gets the length
 * the GET would have, and no body. */
static void reply_text(struct evhttp_request *request, int code,
                       const char *reason, const char *body, size_t len,
                       const char *content_type)
{
    struct evbuffer *out = evbuffer_new();
    if (out == NULL) {
        evhttp_send_error(request, HTTP_INTERNAL, NULL);
        return;
    }
    struct evkeyvalq *headers = evhttp_request_get_output_headers(request);
    evhttp_add_header(headers, "Content-Type", content_type);
    evhttp_add_header(headers, "Cache-Control", "no-store");
    if (evhttp_request_get_command(request) == EVHTTP_REQ_HEAD) {
        char length[32];
        snprintf(length, sizeof length, "%zu", len);
        evhttp_add_header(headers, "Content-Length", length);
    } else {
        evbuffer_add(out, body, len);
    }
    evhttp_send_reply(request, code, reason, out);
    evbuffer_free(out);
}

static void reply_plain(struct evhttp_request *request, int code,
                        const char *reason, const char *body)
{
    reply_text(request, code, reason, body, strlen(body), "text/plain");
}

static int only_get(struct evhttp_request *request)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(request);
    if (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD)
        return 1;
    evhttp_add_header(evhttp_request_get_output_headers(request), "Allow",
                      "GET, HEAD");
    reply_plain(request, 405, "Method Not Allowed", "method not allowed\n");
    return 0;
}

static void on_metrics(struct evhttp_request *request, void *arg)
{
    ts_ops_http *http = arg;
    if (!only_get(request))
        return;
    size_t len = 0;
    char *body = http->render(http->arg, &len);
    if (body == NULL) {
        reply_plain(request, HTTP_INTERNAL, "Internal Server Error",
                    "internal error\n");
        return;
    }
    reply_text(request, HTTP_OK, "OK", body, len,
               "text/plain; version=0.0.4; charset=utf-8");
    free(body);
}

static void on_healthz(struct evhttp_request *request, void *arg)
{
    (void)arg;
    if (!only_get(request))
        return;
    char reason[300];
    if (ts_metrics_healthy(reason, sizeof reason)) {
        reply_text(request, HTTP_OK, "OK", "ok\n", 3, "text/plain");
        return;
    }
    size_t n = strlen(reason);
    if (n + 1 < sizeof reason) {
        reason[n++] = '\n';
        reason[n] = '\0';
    }
    reply_text(request, HTTP_SERVUNAVAIL, "Service Unavailable", reason, n,
               "text/plain");
}

static void on_other(struct evhttp_request *request, void *arg)
{
    (void)arg;
    reply_plain(request, HTTP_NOTFOUND, "Not Found", "not found\n");
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

ts_ops_http *ts_ops_http_start(struct event_base *base, const char *listen,
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
    http->render = render;
    http->arg = arg;
    http->http = evhttp_new(base);
    if (http->http == NULL) {
        snprintf(err, errlen, "http: cannot create the server");
        goto fail;
    }
    /* Scrapers send small GETs; anything large is not one of them. */
    evhttp_set_max_headers_size(http->http, 8192);
    evhttp_set_max_body_size(http->http, 0);
    evhttp_set_timeout(http->http, 10);
    evhttp_set_allowed_methods(http->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    if (evhttp_set_cb(http->http, "/metrics", on_metrics, http) != 0 ||
        evhttp_set_cb(http->http, "/healthz", on_healthz, http) != 0) {
        snprintf(err, errlen, "http: cannot register handlers");
        goto fail;
    }
    evhttp_set_gencb(http->http, on_other, http);
    struct evhttp_bound_socket *socket =
        evhttp_bind_socket_with_handle(http->http, host, (ev_uint16_t)port);
    if (socket == NULL) {
        snprintf(err, errlen, "http.listen '%s': cannot bind: %s", listen,
                 errno != 0 ? strerror(errno) : "unknown error");
        goto fail;
    }
    if (bound_address(evhttp_bound_socket_get_fd(socket), http->address,
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

void ts_ops_http_free(ts_ops_http *http)
{
    if (http == NULL)
        return;
    if (http->http != NULL)
        evhttp_free(http->http);
    free(http);
}
