#include "ops/feed.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "wire/json_codec.h"
#include "engine/log.h"

/* What a stream's socket output may hold before events wait in its queue,
 * where the oldest can still be dropped whole. */
#define FEED_OUTPUT_BYTES (16 * 1024)
/* The kernel's share per stream: without a bound, a client that never
 * reads parks megabytes in socket buffers before the daemon notices. */
#define FEED_SOCKET_SNDBUF (32 * 1024)
/* A comment line this often keeps idle streams through proxies and finds
 * clients that went away without a FIN. */
#define FEED_KEEPALIVE_MS 15000
#define FEED_TICK_MS 250
/* An SSE client sends nothing after its request; one that keeps sending
 * is not one, and reading it would cost the loop for nothing. */
#define FEED_MAX_INPUT_BYTES 4096
#define FEED_FILTER_MAX_CHARS 128
/* EventSource clients reconnect after this many milliseconds. */
#define FEED_RETRY_MS 3000

/* One encoded event, shared by the queues that hold it. */
typedef struct feed_event {
    size_t refs;
    size_t len;
    char text[];
} feed_event;

typedef struct feed_filters {
    char topics[TS_FEED_MAX_FILTERS][FEED_FILTER_MAX_CHARS];
    size_t n_topics;
    char profiles[TS_FEED_MAX_FILTERS][FEED_FILTER_MAX_CHARS];
    size_t n_profiles;
} feed_filters;

typedef struct feed_stream {
    ts_feed *feed;
    struct bufferevent *bev;
    struct feed_stream *prev, *next;
    feed_filters filters;
    feed_event **queue;          /* ring, oldest at head */
    size_t head, count, cap;
    size_t queued_bytes;
    uint64_t dropped_unreported;
    /* When data first waited in our buffers (output or queue) since the
     * stream last handed everything to the kernel; 0 when it has. */
    int64_t behind_since_ms;
    int64_t last_write_ms;
    size_t input_bytes;
} feed_stream;

struct ts_feed {
    struct event_base *base;
    ts_feed_limits limits;
    const ts_format *format;     /* what published bytes are in */
    feed_stream *streams;
    size_t n_streams;
    struct event *tick;
    ts_buf json;
    ts_buf topic;
    double tokens;               /* the rate limit's bucket */
    int64_t tokens_at_ms;
    ts_feed_counters counters;
};

static int64_t monotonic_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void event_unref(feed_event *event)
{
    if (--event->refs == 0)
        free(event);
}

/* ------------------------------------------------------------ streams */

static void stream_close(feed_stream *stream)
{
    ts_feed *feed = stream->feed;
    if (stream->prev != NULL)
        stream->prev->next = stream->next;
    else
        feed->streams = stream->next;
    if (stream->next != NULL)
        stream->next->prev = stream->prev;
    feed->n_streams--;
    for (size_t i = 0; i < stream->count; i++)
        event_unref(stream->queue[(stream->head + i) % stream->cap]);
    free(stream->queue);
    bufferevent_free(stream->bev);
    free(stream);
}

static void write_event(feed_stream *stream, const feed_event *event)
{
    struct evbuffer *out = bufferevent_get_output(stream->bev);
    if (stream->dropped_unreported > 0) {
        evbuffer_add_printf(out, "event: dropped\ndata: {\"events\":%" PRIu64
                            "}\n\n", stream->dropped_unreported);
        stream->dropped_unreported = 0;
    }
    evbuffer_add(out, event->text, event->len);
    stream->feed->counters.events_sent++;
}

static feed_event *queue_pop(feed_stream *stream)
{
    feed_event *event = stream->queue[stream->head];
    stream->head = (stream->head + 1) % stream->cap;
    stream->count--;
    stream->queued_bytes -= event->len;
    return event;
}

static int queue_push(feed_stream *stream, feed_event *event)
{
    if (stream->count == stream->cap) {
        size_t cap = stream->cap > 0 ? stream->cap * 2 : 64;
        feed_event **grown = malloc(cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        for (size_t i = 0; i < stream->count; i++)
            grown[i] = stream->queue[(stream->head + i) % stream->cap];
        free(stream->queue);
        stream->queue = grown;
        stream->cap = cap;
        stream->head = 0;
    }
    stream->queue[(stream->head + stream->count) % stream->cap] = event;
    stream->count++;
    stream->queued_bytes += event->len;
    event->refs++;
    return 0;
}

static void count_drop(feed_stream *stream)
{
    stream->feed->counters.events_dropped++;
    stream->dropped_unreported++;
}

/* Moves queued events into the socket's output while it has room. (The
 * bufferevent alone writes to the socket: its output's front is frozen to
 * everyone else.) */
static void pump(feed_stream *stream, int64_t now)
{
    struct evbuffer *out = bufferevent_get_output(stream->bev);
    while (stream->count > 0 && evbuffer_get_length(out) < FEED_OUTPUT_BYTES) {
        feed_event *event = queue_pop(stream);
        write_event(stream, event);
        event_unref(event);
        stream->last_write_ms = now;
    }
}

/* The data path's side: never blocks, never grows a stream's memory past
 * its bound. */
static void deliver(feed_stream *stream, feed_event *event, int64_t now)
{
    pump(stream, now);
    if (stream->behind_since_ms == 0)
        stream->behind_since_ms = now;
    struct evbuffer *out = bufferevent_get_output(stream->bev);
    if (stream->count == 0 && evbuffer_get_length(out) < FEED_OUTPUT_BYTES) {
        write_event(stream, event);
        stream->last_write_ms = now;
        return;
    }
    size_t bound = stream->feed->limits.buffer_bytes;
    if (event->len > bound) {
        count_drop(stream);
        return;
    }
    while (stream->queued_bytes + event->len > bound) {
        count_drop(stream);
        event_unref(queue_pop(stream));
    }
    if (queue_push(stream, event) != 0)
        count_drop(stream);
}

/* The kernel took all the output: the stream has caught up, unless
 * events still wait in its queue, which move up now. */
static void on_stream_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    feed_stream *stream = arg;
    if (stream->count == 0)
        stream->behind_since_ms = 0;
    else
        pump(stream, monotonic_ms());
}

static void on_stream_read(struct bufferevent *bev, void *arg)
{
    feed_stream *stream = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    stream->input_bytes += evbuffer_get_length(in);
    evbuffer_drain(in, evbuffer_get_length(in));
    if (stream->input_bytes > FEED_MAX_INPUT_BYTES)
        stream_close(stream);
}

static void on_stream_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        stream_close(arg);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ts_feed *feed = arg;
    int64_t now = monotonic_ms();
    feed_stream *next;
    for (feed_stream *stream = feed->streams; stream != NULL;
         stream = next) {
        next = stream->next;
        if (stream->behind_since_ms != 0 &&
            now - stream->behind_since_ms >= feed->limits.stall_ms) {
            feed->counters.cutoffs++;
            ts_log(TS_LOG_INFO, "feed: cut off a stream that stayed behind "
                   "for %" PRId64 " ms (%zu bytes queued)",
                   now - stream->behind_since_ms, stream->queued_bytes);
            stream_close(stream);
            continue;
        }
        struct evbuffer *out = bufferevent_get_output(stream->bev);
        /* Events skipped after the last one a stream was sent would
         * otherwise be reported only with its next event, which may never
         * come: an idle stream is told now. */
        if (stream->count == 0 && evbuffer_get_length(out) == 0 &&
            stream->dropped_unreported > 0) {
            evbuffer_add_printf(out, "event: dropped\ndata: {\"events\":%"
                                PRIu64 "}\n\n", stream->dropped_unreported);
            stream->dropped_unreported = 0;
            stream->last_write_ms = now;
        }
        if (stream->count == 0 && evbuffer_get_length(out) == 0 &&
            now - stream->last_write_ms >= FEED_KEEPALIVE_MS) {
            evbuffer_add(out, ": keepalive\n\n", 13);
            stream->last_write_ms = now;
        }
    }
}

/* ------------------------------------------------------------- filters */

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes [value, end) into out; -1 on a bad escape, a control
 * character or a value too long. */
static int decode_value(const char *value, const char *end, char *out,
                        size_t size)
{
    size_t n = 0;
    for (const char *p = value; p < end; p++) {
        int c = (unsigned char)*p;
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            if (end - p < 3 || hex_value(p[1]) < 0 || hex_value(p[2]) < 0)
                return -1;
            c = hex_value(p[1]) * 16 + hex_value(p[2]);
            p += 2;
        }
        if (c < 0x20 || c == 0x7f || n + 1 >= size)
            return -1;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return 0;
}

static int parse_filters(const char *query, feed_filters *filters,
                         const char **message)
{
    memset(filters, 0, sizeof *filters);
    for (const char *part = query; *part != '\0';) {
        const char *end = strchr(part, '&');
        if (end == NULL)
            end = part + strlen(part);
        const char *equals = memchr(part, '=', (size_t)(end - part));
        size_t key_len = (size_t)((equals != NULL ? equals : end) - part);
        const char *value = equals != NULL ? equals + 1 : end;
        if (key_len == 5 && strncmp(part, "topic", 5) == 0) {
            if (filters->n_topics == TS_FEED_MAX_FILTERS) {
                *message = "at most 8 topic= filters\n";
                return -1;
            }
            if (decode_value(value, end,
                             filters->topics[filters->n_topics],
                             FEED_FILTER_MAX_CHARS) != 0) {
                *message = "bad topic= value\n";
                return -1;
            }
            filters->n_topics++;
        } else if (key_len == 7 && strncmp(part, "profile", 7) == 0) {
            if (filters->n_profiles == TS_FEED_MAX_FILTERS) {
                *message = "at most 8 profile= filters\n";
                return -1;
            }
            char *profile = filters->profiles[filters->n_profiles];
            if (decode_value(value, end, profile, FEED_FILTER_MAX_CHARS) !=
                    0 ||
                profile[0] == '\0') {
                *message = "bad profile= value\n";
                return -1;
            }
            filters->n_profiles++;
        } else if (key_len > 0) {
            *message = "unknown parameter (the feed takes topic= and "
                       "profile=)\n";
            return -1;
        }
        part = *end == '&' ? end + 1 : end;
    }
    return 0;
}

static int topic_wanted(const feed_filters *filters, const char *topic)
{
    if (filters->n_topics == 0)
        return 1;
    for (size_t i = 0; i < filters->n_topics; i++)
        if (strncmp(topic, filters->topics[i],
                    strlen(filters->topics[i])) == 0)
            return 1;
    return 0;
}

/* profile NULL: the outcome names none, so a profile filter refuses it. */
static int profile_wanted(const feed_filters *filters, const char *profile)
{
    if (filters->n_profiles == 0)
        return 1;
    if (profile == NULL)
        return 0;
    for (size_t i = 0; i < filters->n_profiles; i++)
        if (strcmp(profile, filters->profiles[i]) == 0)
            return 1;
    return 0;
}

/* ------------------------------------------------------------- events */

/* Whether the rate limit lets one more event be encoded now (without
 * taking it). */
static int have_token(ts_feed *feed)
{
    if (feed->limits.max_rate == 0)
        return 1;
    int64_t now = monotonic_ms();
    double rate = (double)feed->limits.max_rate;
    feed->tokens += (double)(now - feed->tokens_at_ms) * rate / 1000.0;
    if (feed->tokens > rate)
        feed->tokens = rate;
    feed->tokens_at_ms = now;
    return feed->tokens >= 1.0;
}

/* An event over the rate: the streams that would have taken it learn of
 * it with their next `event: dropped`. `profile` NULL: not known, so only
 * streams without a profile filter count it. */
static void skip_event(ts_feed *feed, const char *topic, const char *profile)
{
    feed->counters.events_skipped++;
    for (feed_stream *s = feed->streams; s != NULL; s = s->next)
        if (topic_wanted(&s->filters, topic) &&
            (profile != NULL ? profile_wanted(&s->filters, profile)
                             : s->filters.n_profiles == 0))
            s->dropped_unreported++;
}

/* Encodes `message` once and hands it to every stream that wants it. */
static void emit(ts_feed *feed, const char *name, const char *topic,
                 const char *profile, const ProtobufCMessage *message)
{
    int wanted = 0;
    for (feed_stream *s = feed->streams; s != NULL && !wanted; s = s->next)
        wanted = topic_wanted(&s->filters, topic) &&
                 profile_wanted(&s->filters, profile);
    if (!wanted)
        return;
    if (!have_token(feed)) {
        skip_event(feed, topic, profile);
        return;
    }
    if (feed->limits.max_rate > 0)
        feed->tokens -= 1.0;
    feed->json.len = 0;
    if (ts_json_from_message(message, &feed->json) != 0 ||
        memchr(feed->json.data, '\n', feed->json.len) != NULL ||
        memchr(feed->json.data, '\r', feed->json.len) != NULL) {
        /* A line break would end the event early: not served. */
        feed->counters.encode_failures++;
        return;
    }
    size_t name_len = strlen(name);
    size_t len = 7 + name_len + 7 + feed->json.len + 2;
    feed_event *event = malloc(sizeof *event + len);
    if (event == NULL) {
        feed->counters.encode_failures++;
        return;
    }
    event->refs = 1; /* ours, until every stream has had it */
    event->len = len;
    char *p = event->text;
    memcpy(p, "event: ", 7);
    memcpy(p += 7, name, name_len);
    memcpy(p += name_len, "\ndata: ", 7);
    memcpy(p += 7, feed->json.data, feed->json.len);
    memcpy(p + feed->json.len, "\n\n", 2);
    int64_t now = monotonic_ms();
    for (feed_stream *s = feed->streams; s != NULL; s = s->next)
        if (topic_wanted(&s->filters, topic) &&
            profile_wanted(&s->filters, profile))
            deliver(s, event, now);
    event_unref(event);
}

static void emit_sanitized(ts_feed *feed,
                           const Tracesan__V1__SanitizedLocation *location)
{
    const char *profile = location->profile != NULL ? location->profile : "";
    feed->topic.len = 0;
    if (ts_buf_append(&feed->topic, TS_TOPIC_SANITIZED_PREFIX,
                      strlen(TS_TOPIC_SANITIZED_PREFIX)) != 0 ||
        ts_buf_append(&feed->topic, profile, strlen(profile) + 1) != 0) {
        feed->counters.encode_failures++;
        return;
    }
    emit(feed, "sanitized", (const char *)feed->topic.data,
         location->profile, &location->base);
}

static void emit_rejection(ts_feed *feed,
                           const Tracesan__V1__Rejection *rejection)
{
    const char *profile = rejection->profile;
    if (profile != NULL && profile[0] == '\0')
        profile = NULL;
    emit(feed, "rejected", TS_TOPIC_REJECTED, profile, &rejection->base);
}

/* Whether some stream could want a message on `topic` before it is
 * decoded: the topic filters decide, and for sanitized.<profile> the
 * profile filters too. */
static int topic_has_takers(const ts_feed *feed, const char *topic,
                            size_t topic_len)
{
    char text[FEED_FILTER_MAX_CHARS + 16];
    if (topic_len >= sizeof text)
        return 1; /* decide after decoding */
    memcpy(text, topic, topic_len);
    text[topic_len] = '\0';
    size_t prefix = strlen(TS_TOPIC_SANITIZED_PREFIX);
    const char *profile = strncmp(text, TS_TOPIC_SANITIZED_PREFIX,
                                  prefix) == 0 ? text + prefix : NULL;
    for (const feed_stream *s = feed->streams; s != NULL; s = s->next)
        if (topic_wanted(&s->filters, text) &&
            (profile == NULL || profile_wanted(&s->filters, profile)))
            return 1;
    return 0;
}

/* skip_event before decoding: the profile of a sanitized point is in its
 * topic, a rejection's is not known. */
static void skip_topic(ts_feed *feed, const void *topic, size_t topic_len)
{
    char text[FEED_FILTER_MAX_CHARS + 16];
    if (topic_len >= sizeof text) {
        feed->counters.events_skipped++;
        return;
    }
    memcpy(text, topic, topic_len);
    text[topic_len] = '\0';
    size_t prefix = strlen(TS_TOPIC_SANITIZED_PREFIX);
    skip_event(feed, text,
               strncmp(text, TS_TOPIC_SANITIZED_PREFIX, prefix) == 0
                   ? text + prefix : NULL);
}

static int topic_is(const void *topic, size_t len, const char *name)
{
    return len == strlen(name) && memcmp(topic, name, len) == 0;
}

/* The published bytes back to a message, in the output's format. */
static ProtobufCMessage *decode(ts_feed *feed,
                                const ProtobufCMessageDescriptor *descriptor,
                                const void *payload, size_t len)
{
    ProtobufCMessage *message = NULL;
    if (feed->format->read(descriptor, payload, len, NULL, &message) != 0) {
        feed->counters.encode_failures++;
        return NULL;
    }
    return message;
}

void ts_feed_on_published(void *arg, const void *topic, size_t topic_len,
                          const void *payload, size_t len)
{
    ts_feed *feed = arg;
    if (feed == NULL || feed->streams == NULL)
        return;
    size_t prefix = strlen(TS_TOPIC_SANITIZED_PREFIX);
    int sanitized = topic_len > prefix &&
                    memcmp(topic, TS_TOPIC_SANITIZED_PREFIX, prefix) == 0;
    if (sanitized || topic_is(topic, topic_len, TS_TOPIC_REJECTED)) {
        if (!topic_has_takers(feed, topic, topic_len))
            return;
        if (!have_token(feed)) {
            skip_topic(feed, topic, topic_len);
            return;
        }
        ProtobufCMessage *message = decode(
            feed, sanitized ? &tracesan__v1__sanitized_location__descriptor
                            : &tracesan__v1__rejection__descriptor,
            payload, len);
        if (message == NULL)
            return;
        if (sanitized)
            emit_sanitized(feed, (Tracesan__V1__SanitizedLocation *)message);
        else
            emit_rejection(feed, (Tracesan__V1__Rejection *)message);
        protobuf_c_message_free_unpacked(message, NULL);
    } else if (topic_is(topic, topic_len, TS_TOPIC_BATCH)) {
        Tracesan__V1__OutcomeBatch *batch = (Tracesan__V1__OutcomeBatch *)
            decode(feed, &tracesan__v1__outcome_batch__descriptor, payload,
                   len);
        if (batch == NULL)
            return;
        for (size_t i = 0; i < batch->n_sanitized; i++)
            emit_sanitized(feed, batch->sanitized[i]);
        for (size_t i = 0; i < batch->n_rejected; i++)
            emit_rejection(feed, batch->rejected[i]);
        protobuf_c_message_free_unpacked(&batch->base, NULL);
    }
}

/* -------------------------------------------------------------- public */

int ts_feed_open_stream(void *arg, const char *query,
                        struct bufferevent *bev, const char *headers,
                        const char **message)
{
    ts_feed *feed = arg;
    if (feed->n_streams >= feed->limits.max_streams) {
        feed->counters.streams_refused++;
        *message = "too many feed streams open (http.feed_max_streams)\n";
        return 503;
    }
    feed_stream *stream = calloc(1, sizeof *stream);
    if (stream == NULL) {
        *message = "out of memory\n";
        return 503;
    }
    if (parse_filters(query, &stream->filters, message) != 0) {
        free(stream);
        return 400;
    }
    int sndbuf = FEED_SOCKET_SNDBUF;
    /* Best effort: the queue bounds memory whatever the kernel keeps. */
    (void)setsockopt(bufferevent_getfd(bev), SOL_SOCKET, SO_SNDBUF, &sndbuf,
                     sizeof sndbuf);
    stream->feed = feed;
    stream->bev = bev;
    stream->last_write_ms = monotonic_ms();
    /* Whatever the client pipelined after its request is not for us. */
    struct evbuffer *in = bufferevent_get_input(bev);
    stream->input_bytes = evbuffer_get_length(in);
    evbuffer_drain(in, evbuffer_get_length(in));
    bufferevent_set_timeouts(bev, NULL, NULL);
    /* The write callback then means "all handed to the kernel": the
     * kernel's buffer keeps the connection busy while the queue refills
     * the output. */
    bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
    bufferevent_setcb(bev, on_stream_read, on_stream_write, on_stream_event,
                      stream);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    evbuffer_add_printf(bufferevent_get_output(bev),
                        "HTTP/1.1 200 OK\r\n"
                        "Content-Type: text/event-stream; charset=utf-8\r\n"
                        "Cache-Control: no-store\r\n"
                        "X-Content-Type-Options: nosniff\r\n"
                        "X-Accel-Buffering: no\r\n"
                        "Connection: close\r\n"
                        "%s\r\n"
                        "retry: %d\n: tracesand feed\n\n",
                        headers, FEED_RETRY_MS);
    stream->next = feed->streams;
    if (stream->next != NULL)
        stream->next->prev = stream;
    feed->streams = stream;
    feed->n_streams++;
    feed->counters.streams_accepted++;
    return 200;
}

ts_feed *ts_feed_new(struct event_base *base, const ts_feed_limits *limits,
                     const ts_format *format)
{
    ts_feed *feed = calloc(1, sizeof *feed);
    if (feed == NULL)
        return NULL;
    feed->base = base;
    feed->format = format;
    feed->limits = *limits;
    feed->tokens = (double)limits->max_rate;
    feed->tokens_at_ms = monotonic_ms();
    feed->tick = event_new(base, -1, EV_PERSIST, on_tick, feed);
    struct timeval period = { .tv_sec = 0, .tv_usec = FEED_TICK_MS * 1000 };
    if (feed->tick == NULL || event_add(feed->tick, &period) != 0) {
        ts_feed_free(feed);
        return NULL;
    }
    return feed;
}

void ts_feed_free(ts_feed *feed)
{
    if (feed == NULL)
        return;
    while (feed->streams != NULL)
        stream_close(feed->streams);
    if (feed->tick != NULL)
        event_free(feed->tick);
    ts_buf_free(&feed->json);
    ts_buf_free(&feed->topic);
    free(feed);
}

ts_feed_counters ts_feed_get_counters(const ts_feed *feed)
{
    ts_feed_counters counters = feed->counters;
    counters.streams_open = feed->n_streams;
    return counters;
}

static int append_printf(ts_buf *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int append_printf(ts_buf *out, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line)
        return -1;
    return ts_buf_append(out, line, (size_t)n);
}

int ts_feed_render_metrics(const ts_feed *feed, ts_buf *out)
{
    ts_feed_counters c = ts_feed_get_counters(feed);
    return append_printf(out,
               "# HELP tracesand_feed_streams /feed streams open now.\n"
               "# TYPE tracesand_feed_streams gauge\n"
               "tracesand_feed_streams %" PRIu64 "\n", c.streams_open) |
           append_printf(out,
               "# HELP tracesand_feed_streams_total /feed streams, by "
               "outcome: served, or refused with 503 because "
               "http.feed_max_streams were open.\n"
               "# TYPE tracesand_feed_streams_total counter\n"
               "tracesand_feed_streams_total{result=\"accepted\"} %" PRIu64
               "\n"
               "tracesand_feed_streams_total{result=\"refused\"} %" PRIu64
               "\n", c.streams_accepted, c.streams_refused) |
           append_printf(out,
               "# HELP tracesand_feed_events_sent_total Events handed to "
               "feed streams (one per stream per event).\n"
               "# TYPE tracesand_feed_events_sent_total counter\n"
               "tracesand_feed_events_sent_total %" PRIu64 "\n",
               c.events_sent) |
           append_printf(out,
               "# HELP tracesand_feed_events_dropped_total Events dropped, "
               "oldest first, from the queue of a stream that read too "
               "slowly (http.feed_buffer_kb).\n"
               "# TYPE tracesand_feed_events_dropped_total counter\n"
               "tracesand_feed_events_dropped_total %" PRIu64 "\n",
               c.events_dropped) |
           append_printf(out,
               "# HELP tracesand_feed_events_skipped_total Events not "
               "encoded because the feed was over http.feed_max_rate.\n"
               "# TYPE tracesand_feed_events_skipped_total counter\n"
               "tracesand_feed_events_skipped_total %" PRIu64 "\n",
               c.events_skipped) |
           append_printf(out,
               "# HELP tracesand_feed_cutoffs_total Streams closed because "
               "they did not catch up for http.feed_stall_timeout_s.\n"
               "# TYPE tracesand_feed_cutoffs_total counter\n"
               "tracesand_feed_cutoffs_total %" PRIu64 "\n", c.cutoffs) |
           append_printf(out,
               "# HELP tracesand_feed_encode_failures_total Published "
               "messages the feed could not decode or encode (not "
               "served).\n"
               "# TYPE tracesand_feed_encode_failures_total counter\n"
               "tracesand_feed_encode_failures_total %" PRIu64 "\n",
               c.encode_failures);
}
