#include "drivers/mqtt/mqtt_packet.h"

#include <stdio.h>
#include <string.h>

#include "wire/json_schema.h"

/* v5 property identifiers used here. */
#define PROP_SESSION_EXPIRY 0x11
#define PROP_RECEIVE_MAXIMUM 0x21
#define PROP_MAXIMUM_PACKET_SIZE 0x27
#define PROP_REASON_STRING 0x1F

/* ------------------------------------------------------------ writing */

static size_t varint_size(size_t value)
{
    size_t n = 1;
    while (value >= 128) {
        value /= 128;
        n++;
    }
    return n;
}

static void put_varint(uint8_t *p, size_t value)
{
    do {
        uint8_t byte = (uint8_t)(value % 128);
        value /= 128;
        *p++ = value > 0 ? (uint8_t)(byte | 0x80) : byte;
    } while (value > 0);
}

/* A packet under construction: the body goes to `body`, then the fixed
 * header and body are appended to out in one piece. */
typedef struct writer {
    uint8_t *p;
    uint8_t *start;
} writer;

static void put_u8(writer *w, unsigned v) { *w->p++ = (uint8_t)v; }

static void put_u16(writer *w, unsigned v)
{
    *w->p++ = (uint8_t)(v >> 8);
    *w->p++ = (uint8_t)v;
}

static void put_u32(writer *w, uint32_t v)
{
    put_u16(w, v >> 16);
    put_u16(w, v & 0xFFFF);
}

static void put_bytes(writer *w, const void *data, size_t len)
{
    put_u16(w, (unsigned)len);
    if (len > 0)
        memcpy(w->p, data, len);
    w->p += len;
}

/* Reserves room for a packet of `body` bytes of type byte `first`; w
 * points at the body. -1 when it cannot be expressed or allocated. */
static int begin(ts_buf *out, uint8_t first, size_t body, writer *w)
{
    if (body > TS_MQTT_MAX_REMAINING ||
        ts_buf_reserve(out, 1 + varint_size(body) + body) != 0)
        return -1;
    uint8_t *p = out->data + out->len;
    *p++ = first;
    put_varint(p, body);
    p += varint_size(body);
    w->start = out->data + out->len;
    w->p = p;
    return 0;
}

static void end(ts_buf *out, const writer *w)
{
    out->len += (size_t)(w->p - w->start);
}

static size_t string_field(const char *s)
{
    return 2 + (s != NULL ? strlen(s) : 0);
}

int ts_mqtt_write_connect(ts_buf *out, const ts_mqtt_connect *c)
{
    int v5 = c->version == TS_MQTT_V5;
    size_t id_len = strlen(c->client_id);
    if (id_len > 65535 || (c->username && strlen(c->username) > 65535) ||
        c->password_len > 65535)
        return -1;
    size_t props = 0;
    if (v5) {
        if (c->session_expiry_s > 0)
            props += 5;
        if (c->receive_maximum > 0)
            props += 3;
    }
    size_t body = 6 + 1 + 1 + 2 + (v5 ? varint_size(props) + props : 0) +
                  2 + id_len;
    if (c->username != NULL)
        body += string_field(c->username);
    if (c->password != NULL)
        body += 2 + c->password_len;
    writer w;
    if (begin(out, TS_MQTT_CONNECT << 4, body, &w) != 0)
        return -1;
    put_bytes(&w, "MQTT", 4);
    put_u8(&w, (unsigned)c->version);
    unsigned flags = c->clean_start ? 0x02 : 0;
    if (c->username != NULL)
        flags |= 0x80;
    if (c->password != NULL)
        flags |= 0x40;
    put_u8(&w, flags);
    put_u16(&w, c->keepalive_s);
    if (v5) {
        put_varint(w.p, props);
        w.p += varint_size(props);
        if (c->session_expiry_s > 0) {
            put_u8(&w, PROP_SESSION_EXPIRY);
            put_u32(&w, c->session_expiry_s);
        }
        if (c->receive_maximum > 0) {
            put_u8(&w, PROP_RECEIVE_MAXIMUM);
            put_u16(&w, c->receive_maximum);
        }
    }
    put_bytes(&w, c->client_id, id_len);
    if (c->username != NULL)
        put_bytes(&w, c->username, strlen(c->username));
    if (c->password != NULL)
        put_bytes(&w, c->password, c->password_len);
    end(out, &w);
    return 0;
}

int ts_mqtt_write_publish(ts_buf *out, int version, const char *topic,
                          size_t topic_len, const void *payload, size_t len,
                          int qos, uint16_t packet_id, int dup)
{
    if (topic_len > 65535)
        return -1;
    size_t body = 2 + topic_len + (qos > 0 ? 2 : 0) +
                  (version == TS_MQTT_V5 ? 1 : 0) + len;
    uint8_t first = (uint8_t)(TS_MQTT_PUBLISH << 4 | (qos & 3) << 1 |
                              (dup ? 0x08 : 0));
    writer w;
    if (begin(out, first, body, &w) != 0)
        return -1;
    put_bytes(&w, topic, topic_len);
    if (qos > 0)
        put_u16(&w, packet_id);
    if (version == TS_MQTT_V5)
        put_u8(&w, 0);  /* no properties */
    if (len > 0)
        memcpy(w.p, payload, len);
    w.p += len;
    end(out, &w);
    return 0;
}

int ts_mqtt_write_puback(ts_buf *out, int version, uint16_t packet_id)
{
    (void)version;  /* v5: reason 0 and no properties may be left out */
    writer w;
    if (begin(out, TS_MQTT_PUBACK << 4, 2, &w) != 0)
        return -1;
    put_u16(&w, packet_id);
    end(out, &w);
    return 0;
}

int ts_mqtt_write_subscribe(ts_buf *out, int version, uint16_t packet_id,
                            const char *const *filters, size_t n, int qos)
{
    size_t body = 2 + (version == TS_MQTT_V5 ? 1 : 0);
    for (size_t i = 0; i < n; i++) {
        if (strlen(filters[i]) > 65535)
            return -1;
        body += string_field(filters[i]) + 1;
    }
    writer w;
    if (begin(out, TS_MQTT_SUBSCRIBE << 4 | 0x02, body, &w) != 0)
        return -1;
    put_u16(&w, packet_id);
    if (version == TS_MQTT_V5)
        put_u8(&w, 0);
    for (size_t i = 0; i < n; i++) {
        put_bytes(&w, filters[i], strlen(filters[i]));
        /* v5 option 0x04: No Local. */
        put_u8(&w, (unsigned)(qos & 3) | (version == TS_MQTT_V5 ? 0x04 : 0));
    }
    end(out, &w);
    return 0;
}

int ts_mqtt_write_empty(ts_buf *out, int version, int type)
{
    (void)version;  /* v5 DISCONNECT: reason 0 may be left out */
    writer w;
    if (begin(out, (uint8_t)(type << 4), 0, &w) != 0)
        return -1;
    end(out, &w);
    return 0;
}

/* ------------------------------------------------------------ reading */

int ts_mqtt_read_header(const uint8_t *data, size_t len, uint8_t *first,
                        size_t *remaining, size_t *header_len)
{
    if (len < 2)
        return 0;
    size_t value = 0, multiplier = 1;
    for (size_t i = 1; i < 5; i++) {
        if (i >= len)
            return 0;
        value += (size_t)(data[i] & 0x7F) * multiplier;
        if ((data[i] & 0x80) == 0) {
            *first = data[0];
            *remaining = value;
            *header_len = i + 1;
            return 1;
        }
        multiplier *= 128;
    }
    return -1;
}

typedef struct reader {
    const uint8_t *p, *end;
} reader;

static int get_u8(reader *r, unsigned *v)
{
    if (r->p >= r->end)
        return -1;
    *v = *r->p++;
    return 0;
}

static int get_u16(reader *r, unsigned *v)
{
    if (r->end - r->p < 2)
        return -1;
    *v = (unsigned)r->p[0] << 8 | r->p[1];
    r->p += 2;
    return 0;
}

static int get_u32(reader *r, uint32_t *v)
{
    unsigned hi, lo;
    if (get_u16(r, &hi) != 0 || get_u16(r, &lo) != 0)
        return -1;
    *v = (uint32_t)hi << 16 | lo;
    return 0;
}

static int get_varint(reader *r, size_t *v)
{
    size_t value = 0, multiplier = 1;
    for (int i = 0; i < 4; i++) {
        unsigned byte;
        if (get_u8(r, &byte) != 0)
            return -1;
        value += (byte & 0x7F) * multiplier;
        if ((byte & 0x80) == 0) {
            *v = value;
            return 0;
        }
        multiplier *= 128;
    }
    return -1;
}

/* The v5 properties block: skips every property, keeping the few the
 * client uses. -1 on a malformed block or an unknown identifier (whose
 * length cannot be known). */
typedef struct props {
    uint16_t receive_maximum;
    uint32_t maximum_packet_size;
    const uint8_t *reason;
    size_t reason_len;
} props;

static int skip_string(reader *r, const uint8_t **s, size_t *len)
{
    unsigned n;
    if (get_u16(r, &n) != 0 || (size_t)(r->end - r->p) < n)
        return -1;
    if (s != NULL) {
        *s = r->p;
        *len = n;
    }
    r->p += n;
    return 0;
}

static int read_props(reader *r, props *out)
{
    size_t len;
    if (get_varint(r, &len) != 0 || (size_t)(r->end - r->p) < len)
        return -1;
    reader pr = { r->p, r->p + len };
    r->p += len;
    while (pr.p < pr.end) {
        size_t id;
        unsigned u;
        uint32_t u32;
        size_t vlen;
        if (get_varint(&pr, &id) != 0)
            return -1;
        switch (id) {
        case 0x01: case 0x17: case 0x19: case 0x24: case 0x25: case 0x28:
        case 0x29: case 0x2A:                                 /* byte */
            if (get_u8(&pr, &u) != 0)
                return -1;
            break;
        case 0x13: case 0x22: case 0x23:                      /* two bytes */
            if (get_u16(&pr, &u) != 0)
                return -1;
            break;
        case PROP_RECEIVE_MAXIMUM:
            if (get_u16(&pr, &u) != 0 || u == 0)
                return -1;
            if (out != NULL)
                out->receive_maximum = (uint16_t)u;
            break;
        case 0x02: case 0x11: case 0x18:                      /* four */
            if (get_u32(&pr, &u32) != 0)
                return -1;
            break;
        case PROP_MAXIMUM_PACKET_SIZE:
            if (get_u32(&pr, &u32) != 0)
                return -1;
            if (out != NULL)
                out->maximum_packet_size = u32;
            break;
        case 0x0B:                                            /* varint */
            if (get_varint(&pr, &vlen) != 0)
                return -1;
            break;
        case PROP_REASON_STRING: {
            const uint8_t *s;
            size_t n;
            if (skip_string(&pr, &s, &n) != 0)
                return -1;
            if (out != NULL) {
                out->reason = s;
                out->reason_len = n;
            }
            break;
        }
        case 0x03: case 0x08: case 0x09: case 0x12: case 0x15: case 0x16:
        case 0x1A: case 0x1C:                                 /* strings */
            if (skip_string(&pr, NULL, NULL) != 0)
                return -1;
            break;
        case 0x26:                                            /* a pair */
            if (skip_string(&pr, NULL, NULL) != 0 ||
                skip_string(&pr, NULL, NULL) != 0)
                return -1;
            break;
        default:
            return -1;
        }
    }
    return 0;
}

size_t ts_mqtt_publish_head_len(uint8_t first, const uint8_t *body,
                                size_t available)
{
    if (available < 2)
        return 0;
    size_t need = 2 + ((size_t)body[0] << 8 | body[1]) +
                  (((first >> 1) & 3) > 0 ? 2 : 0);
    return available >= need ? need : 0;
}

int ts_mqtt_read_publish(uint8_t first, const uint8_t *body, size_t len,
                         int version, int head_only, ts_mqtt_publish *out,
                         const char **why)
{
    memset(out, 0, sizeof *out);
    reader r = { body, body + len };
    out->qos = (first >> 1) & 3;
    out->dup = (first & 0x08) != 0;
    out->retain = first & 1;
    const uint8_t *topic;
    size_t topic_len;
    if (out->qos == 3) {
        *why = "PUBLISH with QoS 3";
        return -1;
    }
    if (skip_string(&r, &topic, &topic_len) != 0) {
        *why = "PUBLISH shorter than its topic";
        return -1;
    }
    out->topic = (const char *)topic;
    out->topic_len = topic_len;
    if (out->qos > 0) {
        unsigned id;
        if (get_u16(&r, &id) != 0 || id == 0) {
            *why = "PUBLISH without a packet identifier";
            return -1;
        }
        out->packet_id = (uint16_t)id;
    }
    if (head_only)
        return 0;
    if (version == TS_MQTT_V5 && read_props(&r, NULL) != 0) {
        *why = "PUBLISH with malformed properties";
        return -1;
    }
    out->payload = r.p;
    out->payload_len = (size_t)(r.end - r.p);
    return 0;
}

int ts_mqtt_read_connack(const uint8_t *body, size_t len, int version,
                         ts_mqtt_connack *out)
{
    memset(out, 0, sizeof *out);
    out->receive_maximum = 65535;
    reader r = { body, body + len };
    unsigned flags, code;
    if (get_u8(&r, &flags) != 0 || get_u8(&r, &code) != 0)
        return -1;
    out->session_present = flags & 1;
    out->code = (int)code;
    if (version == TS_MQTT_V5 && r.p < r.end) {
        props p = { .receive_maximum = 65535 };
        if (read_props(&r, &p) != 0)
            return -1;
        out->receive_maximum = p.receive_maximum;
        out->maximum_packet_size = p.maximum_packet_size;
        size_t n = 0;
        for (size_t i = 0; i < p.reason_len && n + 1 < sizeof out->reason;
             i++)
            if (p.reason[i] >= 0x20 && p.reason[i] < 0x7F)
                out->reason[n++] = (char)p.reason[i];
        out->reason[n] = '\0';
    }
    return 0;
}

int ts_mqtt_read_puback(const uint8_t *body, size_t len, int version,
                        uint16_t *packet_id, int *reason)
{
    (void)version;
    reader r = { body, body + len };
    unsigned id, code = 0;
    if (get_u16(&r, &id) != 0)
        return -1;
    if (r.p < r.end && get_u8(&r, &code) != 0)
        return -1;
    *packet_id = (uint16_t)id;
    *reason = (int)code;
    return 0;
}

int ts_mqtt_read_suback(const uint8_t *body, size_t len, int version,
                        uint16_t *packet_id, int *failure)
{
    reader r = { body, body + len };
    unsigned id;
    if (get_u16(&r, &id) != 0 ||
        (version == TS_MQTT_V5 && read_props(&r, NULL) != 0) || r.p >= r.end)
        return -1;
    *packet_id = (uint16_t)id;
    *failure = 0;
    while (r.p < r.end) {
        unsigned code = *r.p++;
        if (code >= 0x80 && *failure == 0)
            *failure = (int)code;
    }
    return 0;
}

const char *ts_mqtt_connack_text(int version, int code)
{
    if (version != TS_MQTT_V5) {
        switch (code) {
        case 0: return "accepted";
        case 1: return "unacceptable protocol version";
        case 2: return "client identifier rejected";
        case 3: return "server unavailable";
        case 4: return "bad user name or password (mqtt.username, "
                       "mqtt.password_file)";
        case 5: return "not authorized (a wrong password or user, or "
                       "no right to connect: mqtt.username, "
                       "mqtt.password_file)";
        default: return "unknown refusal";
        }
    }
    switch (code) {
    case 0x00: return "accepted";
    case 0x80: return "unspecified error";
    case 0x81: return "malformed packet";
    case 0x82: return "protocol error";
    case 0x84: return "unsupported protocol version";
    case 0x85: return "client identifier not valid";
    case 0x86: return "bad user name or password (mqtt.username, "
                      "mqtt.password_file)";
    /* Mosquitto answers a wrong password so, not with 0x86. */
    case 0x87: return "not authorized (a wrong password or user, or no "
                      "right to connect: mqtt.username, "
                      "mqtt.password_file)";
    case 0x88: return "server unavailable";
    case 0x89: return "server busy";
    case 0x8A: return "banned";
    case 0x8C: return "bad authentication method";
    case 0x95: return "packet too large";
    case 0x97: return "quota exceeded";
    case 0x9F: return "connection rate exceeded";
    default: return "refused";
    }
}

/* ------------------------------------------------------------- topics */

int ts_mqtt_topic_is_valid(const char *topic, size_t len)
{
    const unsigned char *s = (const unsigned char *)topic;
    if (len == 0 || len > 65535)
        return 0;
    for (size_t i = 0; i < len;) {
        if (s[i] == 0)
            return 0;
        size_t n = ts_json_utf8_length(s + i, len - i);
        if (n == 0)
            return 0;
        i += n;
    }
    return 1;
}

int ts_mqtt_topic_matches(const char *filter, const char *topic,
                          size_t topic_len)
{
    size_t t = 0;
    const char *f = filter;
    /* Topics starting with $ are the broker's; wildcards at the first
     * level do not match them. */
    if (topic_len > 0 && topic[0] == '$' && (*f == '+' || *f == '#'))
        return 0;
    for (;;) {
        if (*f == '#')
            return 1;
        if (*f == '+') {
            while (t < topic_len && topic[t] != '/')
                t++;
            f++;
        } else {
            while (*f != '\0' && *f != '/') {
                if (t >= topic_len || topic[t] != *f)
                    return 0;
                f++;
                t++;
            }
        }
        if (*f == '\0')
            return t == topic_len;
        /* *f == '/' */
        if (t == topic_len)
            return f[1] == '#' && f[2] == '\0';
        if (topic[t] != '/')
            return 0;
        f++;
        t++;
    }
}
