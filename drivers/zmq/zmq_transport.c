/* ZeroMQ transport driven by libevent.
 *
 * ZMQ_FD is not a data fd: it is an edge-triggered "something changed"
 * signal, and it is reset whenever libzmq processes its command queue (on
 * zmq_recv, zmq_send, or reading ZMQ_EVENTS). So a readiness callback must
 * keep reading while ZMQ_EVENTS reports POLLIN, and when it stops early
 * (read budget spent) it must re-activate itself, because no new edge will
 * come for the messages already queued.
 */
#include "drivers/zmq/zmq_transport.h"

#include <errno.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "drivers/zmq/curve_keys.h"
#include "engine/log.h"
#include "drivers/zmq/zap.h"

#define ENDPOINT_MAX 256
/* Bounded so that a stopped subscriber cannot keep the daemon from exiting,
 * long enough to hand the last batch to a connected one. */
#define OUTPUT_LINGER_MS 2000
/* Bytes of input handled per readiness callback (input.read_budget bounds
 * the messages): a few large messages must not keep the loop from the
 * HTTP endpoint and the timers. At least one message is always read. */
#define READ_BYTES_BUDGET (1u << 20)

struct ts_transport {
    void *context;
    void *input;
    void *output;
    struct event_base *base;
    struct event *readable;
    /* PUSH output only: watches the output's ZMQ_FD while input reading is
     * paused because no consumer can take more. */
    struct event *output_ready;
    int paused;
    int lossless_output;   /* PUSH: a full output pauses input */
    int subscriber_output; /* XPUB: reads subscriptions, counts cut-offs */
    /* Set by pause_input (e.g. the store cannot commit): no reading at all,
     * whatever the output can take. */
    int held;
    ts_transport_counters counters;
    ts_zap *zap;
    ts_on_message_fn on_message;
    ts_on_batch_end_fn on_batch_end;
    ts_on_output_ready_fn on_output_ready;
    void *arg;
    size_t read_budget;
    zmq_msg_t frame;
    char input_endpoint[ENDPOINT_MAX];
    char output_endpoint[ENDPOINT_MAX];
};

static void on_readable(evutil_socket_t fd, short what, void *arg);
static void on_output_ready(evutil_socket_t fd, short what, void *arg);

static int set_int_option(void *socket, int option, int value)
{
    return zmq_setsockopt(socket, option, &value, sizeof value);
}

/* Makes `socket` a CURVE server whose clients the ZAP handler vets under
 * `domain`. The secret key only passes through libzmq's copy. */
static int enable_curve(void *socket, const ts_zmq_settings *settings,
                        const char *domain, const char *what, char *err,
                        size_t errlen)
{
    if (!settings->curve_enabled)
        return 0;
    if (settings->curve_server_secret == NULL) {
        snprintf(err, errlen, "%s: CURVE is on but no server key is loaded",
                 what);
        return -1;
    }
    if (set_int_option(socket, ZMQ_CURVE_SERVER, 1) != 0 ||
        zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY,
                       settings->curve_server_secret,
                       TS_CURVE_KEY_BYTES) != 0 ||
        zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) != 0) {
        snprintf(err, errlen, "%s: cannot enable CURVE: %s", what,
                 zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

static int attach(void *socket, ts_socket_mode mode, const char *endpoint,
                  char *resolved, size_t resolved_len, const char *what,
                  char *err, size_t errlen)
{
    int rc = mode == TS_SOCKET_BIND ? zmq_bind(socket, endpoint)
                                    : zmq_connect(socket, endpoint);
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot %s %s: %s", what,
                 mode == TS_SOCKET_BIND ? "bind" : "connect", endpoint,
                 zmq_strerror(zmq_errno()));
        return -1;
    }
    size_t len = resolved_len;
    if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, resolved, &len) != 0 ||
        len == 0) {
        snprintf(resolved, resolved_len, "%s", endpoint);
    } else {
        resolved[resolved_len - 1] = '\0';
    }
    return 0;
}

static int open_input(ts_transport *t, const ts_transport_options *options,
                      char *err, size_t errlen)
{
    const ts_zmq_settings *settings = options->zmq;
    int type = options->sub_input ? ZMQ_SUB : ZMQ_PULL;
    t->input = zmq_socket(t->context, type);
    if (t->input == NULL) {
        snprintf(err, errlen, "input: cannot create socket: %s",
                 zmq_strerror(zmq_errno()));
        return -1;
    }
    int64_t hard_cap = (int64_t)ts_input_frame_cap(options->core);
    if (set_int_option(t->input, ZMQ_RCVHWM,
                       ts_input_queue_messages(options->core,
                                               settings)) != 0 ||
        zmq_setsockopt(t->input, ZMQ_MAXMSGSIZE, &hard_cap,
                       sizeof hard_cap) != 0 ||
        set_int_option(t->input, ZMQ_LINGER, 0) != 0) {
        snprintf(err, errlen, "input: cannot set socket options: %s",
                 zmq_strerror(zmq_errno()));
        return -1;
    }
    if (enable_curve(t->input, settings, TS_ZAP_DOMAIN_INPUT, "input", err,
                     errlen) != 0)
        return -1;
    if (type == ZMQ_SUB) {
        size_t n = settings->n_subscriptions;
        for (size_t i = 0; i < n; i++) {
            const char *prefix = settings->subscriptions[i];
            if (zmq_setsockopt(t->input, ZMQ_SUBSCRIBE, prefix,
                               strlen(prefix)) != 0) {
                snprintf(err, errlen, "input: cannot subscribe: %s",
                         zmq_strerror(zmq_errno()));
                return -1;
            }
        }
        /* An empty list would make a socket that never receives anything,
         * which is never what an operator means. */
        if (n == 0 && zmq_setsockopt(t->input, ZMQ_SUBSCRIBE, "", 0) != 0) {
            snprintf(err, errlen, "input: cannot subscribe: %s",
                     zmq_strerror(zmq_errno()));
            return -1;
        }
    }
    return attach(t->input, settings->input_mode, settings->input_endpoint,
                  t->input_endpoint, sizeof t->input_endpoint, "input", err,
                  errlen);
}

static int open_output(ts_transport *t, const ts_transport_options *options,
                       char *err, size_t errlen)
{
    const ts_zmq_settings *settings = options->zmq;
    t->lossless_output = options->push_output;
    t->subscriber_output = !t->lossless_output;
    /* XPUB, not PUB: a PUB drops a message for a subscriber at its HWM
     * without a trace. XPUB with NODROP refuses the send instead (EAGAIN),
     * which is how a subscriber falling behind gets counted before the
     * message goes out lossily to everyone else (publish_to_subscribers). */
    t->output = zmq_socket(t->context, t->lossless_output ? ZMQ_PUSH
                                                          : ZMQ_XPUB);
    if (t->output == NULL) {
        snprintf(err, errlen, "output: cannot create socket: %s",
                 zmq_strerror(zmq_errno()));
        return -1;
    }
    if (set_int_option(t->output, ZMQ_SNDHWM,
                       ts_output_queue_messages(settings,
                                                options->format)) != 0 ||
        set_int_option(t->output, ZMQ_LINGER, OUTPUT_LINGER_MS) != 0 ||
        (t->subscriber_output &&
         set_int_option(t->output, ZMQ_XPUB_NODROP, 1) != 0)) {
        snprintf(err, errlen, "output: cannot set socket options: %s",
                 zmq_strerror(zmq_errno()));
        return -1;
    }
    if (enable_curve(t->output, settings, TS_ZAP_DOMAIN_OUTPUT, "output",
                     err, errlen) != 0)
        return -1;
    if (t->lossless_output) {
        int fd = -1;
        size_t fd_len = sizeof fd;
        if (zmq_getsockopt(t->output, ZMQ_FD, &fd, &fd_len) != 0) {
            snprintf(err, errlen, "output: cannot get ZMQ_FD: %s",
                     zmq_strerror(zmq_errno()));
            return -1;
        }
        t->output_ready = event_new(t->base, fd, EV_READ | EV_PERSIST,
                                    on_output_ready, t);
        if (t->output_ready == NULL) {
            snprintf(err, errlen, "output: cannot create event");
            return -1;
        }
    }
    return attach(t->output, settings->output_mode, settings->output_endpoint,
                  t->output_endpoint, sizeof t->output_endpoint, "output",
                  err, errlen);
}

void ts_transport_close(ts_transport *t)
{
    if (t == NULL)
        return;
    if (t->readable != NULL)
        event_free(t->readable);
    if (t->output_ready != NULL)
        event_free(t->output_ready);
    zmq_msg_close(&t->frame);
    if (t->input != NULL)
        zmq_close(t->input);
    if (t->output != NULL)
        zmq_close(t->output);
    if (t->zap != NULL) {
        ts_zap_counters counters = ts_zap_get_counters(t->zap);
        ts_log(counters.denied > 0 ? TS_LOG_WARN : TS_LOG_INFO,
               "zap summary accepted=%llu denied=%llu",
               (unsigned long long)counters.accepted,
               (unsigned long long)counters.denied);
        /* After the CURVE sockets: none may wait on a handler that is gone
         * while zmq_ctx_term drains them. */
        ts_zap_stop(t->zap);
    }
    if (t->context != NULL)
        zmq_ctx_term(t->context);
    free(t);
}

int ts_transport_open(ts_transport **out, const ts_transport_options *options,
                      struct event_base *base, char *err, size_t errlen)
{
    const ts_zmq_settings *settings = options->zmq;
    *out = NULL;
    ts_transport *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    zmq_msg_init(&t->frame);
    t->base = base;
    t->read_budget = settings->read_budget > 0 ? settings->read_budget : 1;
    t->context = zmq_ctx_new();
    if (t->context == NULL) {
        snprintf(err, errlen, "cannot create ZeroMQ context: %s",
                 zmq_strerror(zmq_errno()));
        ts_transport_close(t);
        return -1;
    }
    zmq_ctx_set(t->context, ZMQ_IO_THREADS, 1);
    if (settings->curve_enabled) {
        /* Before any bind: a handshake that finds no handler is let
         * through by libzmq, which would make CURVE allow everyone. */
        if (!zmq_has("curve")) {
            snprintf(err, errlen, "security.curve is on but this libzmq "
                     "was built without CURVE support");
            ts_transport_close(t);
            return -1;
        }
        t->zap = ts_zap_start(t->context, base, settings->curve_input_allow,
                              settings->curve_output_allow, err, errlen);
        if (t->zap == NULL) {
            ts_transport_close(t);
            return -1;
        }
    }
    /* Output first: once input is bound, producers may start sending, and
     * every accepted update must have somewhere to go. */
    if ((!options->no_output && open_output(t, options, err, errlen) != 0) ||
        (!options->no_input && open_input(t, options, err, errlen) != 0)) {
        ts_transport_close(t);
        return -1;
    }
    if (options->no_input) {
        *out = t;
        return 0;
    }
    int fd = -1;
    size_t fd_len = sizeof fd;
    if (zmq_getsockopt(t->input, ZMQ_FD, &fd, &fd_len) != 0) {
        snprintf(err, errlen, "input: cannot get ZMQ_FD: %s",
                 zmq_strerror(zmq_errno()));
        ts_transport_close(t);
        return -1;
    }
    t->readable = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, t);
    if (t->readable == NULL) {
        snprintf(err, errlen, "input: cannot create event");
        ts_transport_close(t);
        return -1;
    }
    *out = t;
    return 0;
}

static int input_has_message(ts_transport *t)
{
    int events = 0;
    size_t len = sizeof events;
    if (zmq_getsockopt(t->input, ZMQ_EVENTS, &events, &len) != 0)
        return 0;
    return (events & ZMQ_POLLIN) != 0;
}

/* Receives the rest of a multipart message; `frame` ends up holding the
 * last part, which is the payload. */
static size_t receive_remaining_parts(ts_transport *t, size_t frames)
{
    while (zmq_msg_more(&t->frame)) {
        /* Parts of one message arrive atomically, so this cannot block;
         * only an interrupted call is retried. */
        if (zmq_msg_recv(&t->frame, t->input, ZMQ_DONTWAIT) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            return 0; /* torn message: reported as malformed */
        }
        /* Every part is counted, however many: the rejection says how
         * many there were (a size_t cannot overflow on parts that each
         * took memory). */
        frames++;
    }
    return frames;
}

static int output_writable(ts_transport *t)
{
    int events = 0;
    size_t len = sizeof events;
    if (zmq_getsockopt(t->output, ZMQ_EVENTS, &events, &len) != 0)
        return 0;
    return (events & ZMQ_POLLOUT) != 0;
}

/* A PUSH output with no consumer able to take a message (none connected,
 * or all at their HWM) pauses input: messages then wait in the input
 * socket and, past its HWM, in the producers, instead of being lost here.
 * Reading ZMQ_EVENTS resets the output's ZMQ_FD, so any later change
 * (a consumer connects or drains) raises it again. */
static void wait_for_output(ts_transport *t)
{
    if (!t->paused) {
        t->paused = 1;
        t->counters.input_pauses_output++;
        /* The input's ZMQ_FD stays raised while messages wait unread, so
         * its event must go or the loop would spin. */
        if (t->readable != NULL)
            event_del(t->readable);
        event_add(t->output_ready, NULL);
        ts_log(TS_LOG_DEBUG, "output cannot accept more; input paused");
    }
    /* The failed send may itself have consumed the edge that says a
     * consumer has room again. */
    if (output_writable(t))
        event_active(t->output_ready, EV_READ, 0);
}

static int pause_for_output(ts_transport *t)
{
    if (t->output_ready == NULL || output_writable(t))
        return 0;
    wait_for_output(t);
    return 1;
}

static void on_output_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_transport *t = arg;
    if (!t->paused || !output_writable(t))
        return;
    /* Outcomes the daemon could not hand over go first; while some remain
     * the output is full again and input stays paused. */
    if (t->on_output_ready != NULL && t->on_output_ready(t->arg) != 0)
        return;
    t->paused = 0;
    event_del(t->output_ready);
    if (t->held || t->readable == NULL)
        return; /* resume_input re-arms the input */
    ts_log(TS_LOG_DEBUG, "output accepts again; input resumed");
    event_add(t->readable, NULL);
    event_active(t->readable, EV_READ, 0);
}

/* An XPUB queues (un)subscriptions for the application to read; they are
 * of no use here, but unread they would pile up with every subscriber
 * that comes and goes. */
static void drain_subscriptions(ts_transport *t)
{
    if (!t->subscriber_output)
        return;
    char discard[64];
    for (int i = 0; i < 1024; i++) {
        if (zmq_recv(t->output, discard, sizeof discard, ZMQ_DONTWAIT) < 0 &&
            zmq_errno() != EINTR)
            break;
    }
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_transport *t = arg;
    if (t->held || pause_for_output(t))
        return;
    size_t received = 0;
    size_t bytes = 0;
    while (received < t->read_budget && bytes < READ_BYTES_BUDGET &&
           !t->held && !t->paused) {
        if (zmq_msg_recv(&t->frame, t->input, ZMQ_DONTWAIT) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            break; /* EAGAIN: drained for now */
        }
        size_t frames = receive_remaining_parts(t, 1);
        ts_inbound message = {
            .payload = zmq_msg_data(&t->frame),
            .len = zmq_msg_size(&t->frame),
            .frames = frames,
        };
        received++;
        bytes += message.len;
        t->on_message(t->arg, &message);
    }
    if (received > 0)
        t->on_batch_end(t->arg);
    drain_subscriptions(t);
    /* Reading ZMQ_EVENTS here also covers the sends done by on_batch_end:
     * whatever they consumed from the notification fd, a pending message is
     * seen now and served on the next loop turn, after other events. */
    if (!t->held && !t->paused && input_has_message(t))
        event_active(t->readable, EV_READ, 0);
}

void ts_transport_pause_input(ts_transport *t)
{
    if (t->held)
        return;
    t->held = 1;
    /* The input's ZMQ_FD stays raised while messages wait unread: its event
     * must go or the loop would spin. */
    event_del(t->readable);
    if (t->paused) {
        t->paused = 0;
        event_del(t->output_ready);
    }
}

void ts_transport_resume_input(ts_transport *t)
{
    if (!t->held)
        return;
    t->held = 0;
    if (t->paused)
        return; /* on_output_ready re-arms the input once the output
                   has taken what waits for it */
    event_add(t->readable, NULL);
    /* Edges that fired while paused are gone; on_readable reads ZMQ_EVENTS
     * (and the output's state) again instead of waiting for a new one. */
    event_active(t->readable, EV_READ, 0);
}

void ts_transport_start(ts_transport *t, ts_on_message_fn on_message,
                        ts_on_batch_end_fn on_batch_end,
                        ts_on_output_ready_fn on_output_ready, void *arg)
{
    t->on_message = on_message;
    t->on_batch_end = on_batch_end;
    t->on_output_ready = on_output_ready;
    t->arg = arg;
    if (t->readable == NULL)
        return;  /* an output alone */
    event_add(t->readable, NULL);
    /* Messages may have queued before the event existed; their edge has
     * already fired, so look once unconditionally. */
    event_active(t->readable, EV_READ, 0);
}

static int send_frame(ts_transport *t, const void *data, size_t len,
                      int flags)
{
    for (;;) {
        if (zmq_send(t->output, data, len, flags | ZMQ_DONTWAIT) >= 0)
            return 0;
        if (zmq_errno() != EINTR)
            return -1;
    }
}

/* XPUB with NODROP answers EAGAIN, before queueing anything, when any
 * matching subscriber is at its HWM. Count that, then send without NODROP
 * so every subscriber with room still gets the message. libzmq then takes
 * the full subscriber out of the distribution until it has read down to
 * its low-water mark: it misses this message and every one published
 * meanwhile, and libzmq tells nobody how many. What can be counted
 * exactly is the cut-offs (each costs that subscriber at least one
 * message); exact loss accounting needs a lossless output (PUSH). */
static int publish_to_subscribers(ts_transport *t, const void *topic,
                                  size_t topic_len, const void *payload,
                                  size_t len)
{
    if (send_frame(t, topic, topic_len, ZMQ_SNDMORE) == 0)
        return send_frame(t, payload, len, 0);
    if (zmq_errno() != EAGAIN)
        return -1;
    t->counters.subscriber_cutoffs++;
    if (set_int_option(t->output, ZMQ_XPUB_NODROP, 0) != 0)
        return -1;
    int rc = send_frame(t, topic, topic_len, ZMQ_SNDMORE);
    if (rc == 0)
        rc = send_frame(t, payload, len, 0);
    if (set_int_option(t->output, ZMQ_XPUB_NODROP, 1) != 0)
        ts_log(TS_LOG_WARN, "output: cannot restore ZMQ_XPUB_NODROP: %s",
               zmq_strerror(zmq_errno()));
    return rc;
}

ts_publish_result ts_transport_publish(ts_transport *t, const void *topic,
                                       size_t topic_len, const void *payload,
                                       size_t len)
{
    int rc;
    if (t->subscriber_output) {
        rc = publish_to_subscribers(t, topic, topic_len, payload, len);
    } else {
        rc = send_frame(t, topic, topic_len, ZMQ_SNDMORE);
        if (rc != 0 && zmq_errno() == EAGAIN) {
            /* Nothing was queued: the caller keeps the message and offers
             * it again from on_output_ready. */
            wait_for_output(t);
            return TS_PUBLISH_BLOCKED;
        }
        /* The first part is queued, so libzmq accepts the rest of the
         * message regardless of the high-water mark. */
        if (rc == 0)
            rc = send_frame(t, payload, len, 0);
    }
    if (rc == 0)
        return TS_PUBLISH_SENT;
    t->counters.publish_dropped_error++;
    return TS_PUBLISH_FAILED;
}

static ts_publish_result publish_to(void *arg, const void *topic,
                                    size_t topic_len, const void *payload,
                                    size_t len)
{
    return ts_transport_publish(arg, topic, topic_len, payload, len);
}

ts_publisher ts_transport_publisher(ts_transport *t)
{
    return (ts_publisher){ t, publish_to };
}

int ts_transport_reload_allow_lists(ts_transport *t,
                                    const ts_zmq_settings *settings,
                                    char *err, size_t errlen)
{
    if (t->zap == NULL || !settings->curve_enabled)
        return 0;
    if (ts_zap_replace_allow_lists(t->zap, settings->curve_input_allow,
                                   settings->curve_output_allow, err,
                                   errlen) != 0)
        return -1;
    return 1;
}

void ts_transport_get_counters(const ts_transport *t,
                               ts_transport_counters *out)
{
    *out = t->counters;
    if (t->zap != NULL) {
        ts_zap_counters zap = ts_zap_get_counters(t->zap);
        out->has_zap = 1;
        out->zap_accepted = zap.accepted;
        out->zap_denied = zap.denied;
    }
}

const char *ts_transport_input_endpoint(const ts_transport *t)
{
    return t->input_endpoint;
}

const char *ts_transport_output_endpoint(const ts_transport *t)
{
    return t->output_endpoint;
}
