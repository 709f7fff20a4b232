/* ZAP handler served from the event loop.
 *
 * The REP socket's ZMQ_FD follows the same edge-triggered rule as the
 * transport's input socket: drain while ZMQ_EVENTS says POLLIN, and
 * re-activate when stopping early, because the edge for requests already
 * queued has been consumed.
 */
#include "drivers/zmq/zap.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "engine/log.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_VERSION "1.0"
/* RFC 27 requests have 7 frames for CURVE; more is malformed anyway. */
#define ZAP_MAX_FRAMES 8
#define ZAP_FRAME_MAX 256
/* Requests served per readiness callback before yielding to the loop. */
#define ZAP_BUDGET 64
/* A refused client reconnects every 100 ms by default: cap the log. */
#define DENIAL_LOGS_PER_SECOND 5

struct ts_zap {
    void *socket;
    struct event *readable;
    ts_curve_allow_list input_allow;
    ts_curve_allow_list output_allow;
    int output_restricted;
    ts_zap_counters counters;
    time_t log_second;
    unsigned logs_this_second;
    uint64_t logs_suppressed;
};

typedef struct zap_frame {
    unsigned char data[ZAP_FRAME_MAX];
    size_t len; /* true length; data holds at most ZAP_FRAME_MAX bytes */
} zap_frame;

enum { F_VERSION, F_REQUEST_ID, F_DOMAIN, F_ADDRESS, F_IDENTITY,
       F_MECHANISM, F_CREDENTIALS };

static int frame_is(const zap_frame *frame, const char *text)
{
    size_t len = strlen(text);
    return frame->len == len && memcmp(frame->data, text, len) == 0;
}

static void frame_text(const zap_frame *frame, char *out, size_t outlen)
{
    size_t len = frame->len < ZAP_FRAME_MAX ? frame->len : ZAP_FRAME_MAX;
    if (len >= outlen)
        len = outlen - 1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = frame->data[i];
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    out[len] = '\0';
}

/* Reads one whole request; returns the number of frames (the excess over
 * ZAP_MAX_FRAMES drained), 0 when none is pending. */
static size_t receive_request(ts_zap *zap, zap_frame *frames)
{
    size_t n = 0;
    int more = 1;
    while (more) {
        int flags = n == 0 ? ZMQ_DONTWAIT : 0;
        zap_frame scratch;
        zap_frame *frame = n < ZAP_MAX_FRAMES ? &frames[n] : &scratch;
        int rc = zmq_recv(zap->socket, frame->data, ZAP_FRAME_MAX, flags);
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                continue;
            return n;
        }
        frame->len = (size_t)rc;
        if (n < ZAP_MAX_FRAMES + 1)
            n++;
        int value = 0;
        size_t len = sizeof value;
        more = zmq_getsockopt(zap->socket, ZMQ_RCVMORE, &value, &len) == 0 &&
               value != 0;
    }
    return n;
}

static void send_part(void *socket, const void *data, size_t len, int flags)
{
    while (zmq_send(socket, data, len, flags) < 0 && zmq_errno() == EINTR) {
    }
}

static void reply(ts_zap *zap, const zap_frame *request_id, int allowed,
                  const char *status_text)
{
    send_part(zap->socket, ZAP_VERSION, strlen(ZAP_VERSION), ZMQ_SNDMORE);
    send_part(zap->socket, request_id != NULL ? request_id->data : NULL,
              request_id != NULL && request_id->len <= ZAP_FRAME_MAX
                  ? request_id->len : 0,
              ZMQ_SNDMORE);
    send_part(zap->socket, allowed ? "200" : "400", 3, ZMQ_SNDMORE);
    send_part(zap->socket, status_text, strlen(status_text), ZMQ_SNDMORE);
    send_part(zap->socket, "", 0, ZMQ_SNDMORE); /* user id */
    send_part(zap->socket, "", 0, 0);           /* metadata */
}

static int may_log_denial(ts_zap *zap)
{
    time_t now = time(NULL);
    if (now != zap->log_second) {
        if (zap->logs_suppressed > 0)
            ts_log(TS_LOG_WARN, "zap: %llu more denials not logged",
                   (unsigned long long)zap->logs_suppressed);
        zap->log_second = now;
        zap->logs_this_second = 0;
        zap->logs_suppressed = 0;
    }
    if (zap->logs_this_second >= DENIAL_LOGS_PER_SECOND) {
        zap->logs_suppressed++;
        return 0;
    }
    zap->logs_this_second++;
    return 1;
}

/* Decides one request. The log names the side, the peer address and a
 * short fingerprint of the (public) client key, nothing more. */
static void handle_request(ts_zap *zap, const zap_frame *frames, size_t n)
{
    const zap_frame *request_id = n > F_REQUEST_ID ? &frames[F_REQUEST_ID]
                                                   : NULL;
    const char *why = NULL;
    const char *side = "?";
    char fingerprint[TS_CURVE_FINGERPRINT_CHARS + 1] = "-";
    if (n != F_CREDENTIALS + 1 || !frame_is(&frames[F_VERSION], ZAP_VERSION))
        why = "malformed request";
    else if (!frame_is(&frames[F_MECHANISM], "CURVE"))
        why = "mechanism is not CURVE";
    else if (frames[F_CREDENTIALS].len != TS_CURVE_KEY_BYTES)
        why = "malformed CURVE credentials";
    if (why == NULL) {
        const unsigned char *key = frames[F_CREDENTIALS].data;
        ts_curve_fingerprint(key, fingerprint);
        if (frame_is(&frames[F_DOMAIN], TS_ZAP_DOMAIN_INPUT)) {
            side = "input";
            if (!ts_curve_allow_list_contains(&zap->input_allow, key))
                why = "key not on the input allow-list";
        } else if (frame_is(&frames[F_DOMAIN], TS_ZAP_DOMAIN_OUTPUT)) {
            side = "output";
            if (zap->output_restricted &&
                !ts_curve_allow_list_contains(&zap->output_allow, key))
                why = "key not on the output allow-list";
        } else {
            why = "unknown ZAP domain";
        }
    }
    if (why == NULL) {
        zap->counters.accepted++;
        ts_log(TS_LOG_DEBUG, "zap: accepted %s client key=%s", side,
               fingerprint);
        reply(zap, request_id, 1, "OK");
        return;
    }
    zap->counters.denied++;
    if (may_log_denial(zap)) {
        char address[64] = "-";
        if (n > F_ADDRESS)
            frame_text(&frames[F_ADDRESS], address, sizeof address);
        ts_log(TS_LOG_WARN, "zap: denied %s client key=%s address=%s: %s",
               side, fingerprint, address, why);
    }
    reply(zap, request_id, 0, "denied");
}

static int has_request(ts_zap *zap)
{
    int events = 0;
    size_t len = sizeof events;
    if (zmq_getsockopt(zap->socket, ZMQ_EVENTS, &events, &len) != 0)
        return 0;
    return (events & ZMQ_POLLIN) != 0;
}

static void on_zap_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_zap *zap = arg;
    zap_frame frames[ZAP_MAX_FRAMES];
    for (int served = 0; served < ZAP_BUDGET; served++) {
        size_t n = receive_request(zap, frames);
        if (n == 0)
            break;
        handle_request(zap, frames, n);
    }
    if (has_request(zap))
        event_active(zap->readable, EV_READ, 0);
}

ts_zap *ts_zap_start(void *context, struct event_base *base,
                     const ts_curve_allow_list *input_allow,
                     const ts_curve_allow_list *output_allow, char *err,
                     size_t errlen)
{
    ts_zap *zap = calloc(1, sizeof *zap);
    if (zap == NULL) {
        snprintf(err, errlen, "zap: out of memory");
        return NULL;
    }
    zap->output_restricted = output_allow != NULL;
    if (ts_curve_allow_list_copy(&zap->input_allow, input_allow) != 0 ||
        ts_curve_allow_list_copy(&zap->output_allow, output_allow) != 0) {
        snprintf(err, errlen, "zap: out of memory");
        goto fail;
    }
    zap->socket = zmq_socket(context, ZMQ_REP);
    int linger = 0;
    if (zap->socket == NULL ||
        zmq_setsockopt(zap->socket, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_bind(zap->socket, ZAP_ENDPOINT) != 0) {
        snprintf(err, errlen, "zap: cannot bind %s: %s", ZAP_ENDPOINT,
                 zmq_strerror(zmq_errno()));
        goto fail;
    }
    int fd = -1;
    size_t fd_len = sizeof fd;
    if (zmq_getsockopt(zap->socket, ZMQ_FD, &fd, &fd_len) != 0) {
        snprintf(err, errlen, "zap: cannot get ZMQ_FD: %s",
                 zmq_strerror(zmq_errno()));
        goto fail;
    }
    zap->readable = event_new(base, fd, EV_READ | EV_PERSIST, on_zap_readable,
                              zap);
    if (zap->readable == NULL || event_add(zap->readable, NULL) != 0) {
        snprintf(err, errlen, "zap: cannot create event");
        goto fail;
    }
    /* Requests may queue before the loop runs; their edge is not seen. */
    event_active(zap->readable, EV_READ, 0);
    return zap;

fail:
    ts_zap_stop(zap);
    return NULL;
}

int ts_zap_replace_allow_lists(ts_zap *zap,
                               const ts_curve_allow_list *input_allow,
                               const ts_curve_allow_list *output_allow,
                               char *err, size_t errlen)
{
    /* Both copies first, so a failure leaves the running lists whole. */
    ts_curve_allow_list input_copy;
    ts_curve_allow_list output_copy;
    if (ts_curve_allow_list_copy(&input_copy, input_allow) != 0) {
        snprintf(err, errlen, "zap: out of memory");
        return -1;
    }
    if (ts_curve_allow_list_copy(&output_copy, output_allow) != 0) {
        ts_curve_allow_list_free(&input_copy);
        snprintf(err, errlen, "zap: out of memory");
        return -1;
    }
    ts_curve_allow_list_free(&zap->input_allow);
    ts_curve_allow_list_free(&zap->output_allow);
    zap->input_allow = input_copy;
    zap->output_allow = output_copy;
    zap->output_restricted = output_allow != NULL;
    return 0;
}

ts_zap_counters ts_zap_get_counters(const ts_zap *zap)
{
    return zap->counters;
}

void ts_zap_stop(ts_zap *zap)
{
    if (zap == NULL)
        return;
    if (zap->readable != NULL)
        event_free(zap->readable);
    if (zap->socket != NULL)
        zmq_close(zap->socket);
    ts_curve_allow_list_free(&zap->input_allow);
    ts_curve_allow_list_free(&zap->output_allow);
    free(zap);
}
