#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_mqtt (tests/fuzz/fuzz_mqtt.c): what a
real Mosquitto sends a subscriber, and vehicles' payloads.

    tests/fuzz/make_mqtt_corpus.py OUT_DIR [MOSQUITTO]

Starts a broker on a free loopback port, and for MQTT 3.1.1 and 5 opens
a subscriber and a publisher over raw sockets: the subscriber's CONNECT,
SUBSCRIBE, a PINGREQ, the PUBACKs of what it receives; the publisher's
QoS 0 and 1 messages (OwnTracks JSON, tracesan JSON, a LocationBatch),
one of them larger than a TCP segment. Every byte the broker sent each
client is saved, as the client read it, behind the harness's part byte
(0: a broker's byte stream). The other parts get payloads (2), topic
filter and topic pairs (1), and outcome topics with payloads (3).
Needs Python and mosquitto only."""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(b)) + b


def packet(first, body):
    return bytes([first]) + varint(len(body)) + body


def connect(client_id, v5, clean=True):
    flags = 0x02 if clean else 0
    body = string("MQTT") + bytes([5 if v5 else 4, flags]) + \
        struct.pack(">H", 30)
    if v5:
        # Receive Maximum 10, Session Expiry 0.
        props = bytes([0x21]) + struct.pack(">H", 10)
        body += varint(len(props)) + props
    body += string(client_id)
    return packet(0x10, body)


def subscribe(pid, flt, v5):
    body = struct.pack(">H", pid)
    if v5:
        body += b"\x00"
    body += string(flt) + bytes([0x01 | (0x04 if v5 else 0)])
    return packet(0x82, body)


def publish(topic, payload, qos, pid, v5):
    body = string(topic)
    if qos:
        body += struct.pack(">H", pid)
    if v5:
        body += b"\x00"
    return packet(0x30 | qos << 1, body + payload)


def puback(pid):
    return packet(0x40, struct.pack(">H", pid))


def read_for(sock, seconds):
    sock.settimeout(0.2)
    got = bytearray()
    end = time.time() + seconds
    while time.time() < end:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        got += chunk
    return bytes(got)


def split_packets(data):
    at = 0
    while at + 2 <= len(data):
        n, mult, i = 0, 1, at + 1
        while data[i] & 0x80:
            n += (data[i] & 0x7F) * mult
            mult *= 128
            i += 1
        n += data[i] * mult
        yield data[at], data[i + 1:i + 1 + n]
        at = i + 1 + n


OWNTRACKS = (b'{"_type":"location","tid":"al","lat":40.7128,"lon":-74.006,'
             b'"tst":1700000000,"acc":12,"batt":80}')
TRACESAN_JSON = (b'{"user_id":"truck-17","lat":40.7131,"lon":-74.0052,'
                 b'"timestamp_ms":1700000060000,"horizontal_accuracy_m":8}')
ISO_JSON = (b'{"lat":40.73,"lon":-73.98,'
            b'"time":"2023-11-14T23:13:20.250+01:00"}')


def location_batch():
    """A LocationBatch of two updates, protobuf by hand."""
    def update(user, ts, lat, lon):
        body = b"\x0a" + bytes([len(user)]) + user.encode()
        body += b"\x10" + varint(ts)
        body += b"\x19" + struct.pack("<d", lat)
        body += b"\x21" + struct.pack("<d", lon)
        return body
    out = b""
    for u in (update("v1", 1700000000000, 40.71, -74.0),
              update("v2", 1700000001000, 40.72, -73.99)):
        out += b"\x0a" + varint(len(u)) + u
    return out


def session(port, v5):
    sub = socket.create_connection(("127.0.0.1", port))
    pub = socket.create_connection(("127.0.0.1", port))
    sub.sendall(connect("seed-sub-%d" % v5, v5) +
                subscribe(1, "fleet/+/location", v5) +
                subscribe(2, "fleet/batch", v5))
    pub.sendall(connect("seed-pub-%d" % v5, v5))
    time.sleep(0.3)
    messages = [("fleet/al/location", OWNTRACKS, 1),
                ("fleet/truck-17/location", TRACESAN_JSON, 1),
                ("fleet/x/location", ISO_JSON, 0),
                ("fleet/batch", location_batch(), 1),
                ("fleet/big/location", b"{" + b" " * 3000 + b"}", 1)]
    for pid, (topic, payload, qos) in enumerate(messages, start=10):
        pub.sendall(publish(topic, payload, qos, pid, v5))
    sub.sendall(packet(0xC0, b""))
    got = read_for(sub, 1.0)
    acks = b""
    for first, body in split_packets(got):
        if first >> 4 == 3 and (first >> 1) & 3:
            tlen = struct.unpack(">H", body[:2])[0]
            pid = struct.unpack(">H", body[2 + tlen:4 + tlen])[0]
            acks += puback(pid)
    sub.sendall(acks)
    pub_got = read_for(pub, 0.5)
    sub.close()
    pub.close()
    return got, pub_got


def main():
    out = sys.argv[1]
    mosquitto = sys.argv[2] if len(sys.argv) > 2 else "mosquitto"
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        conf = os.path.join(tmp, "broker.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\n" % port)
            f.write("user %s\n" % os.environ.get("USER", "root"))
        broker = subprocess.Popen([mosquitto, "-c", conf],
                                  stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            for v5, name in ((False, "v311"), (True, "v5")):
                sub_bytes, pub_bytes = session(port, v5)
                with open(os.path.join(out, "stream_sub_%s" % name),
                          "wb") as f:
                    f.write(b"\x00" + sub_bytes)
                with open(os.path.join(out, "stream_pub_%s" % name),
                          "wb") as f:
                    f.write(b"\x00" + pub_bytes)
                # Each packet alone, and the stream cut short inside the
                # large PUBLISH (what an oversized message looks like).
                for i, (first, body) in enumerate(split_packets(sub_bytes)):
                    with open(os.path.join(out, "packet_%s_%02d" % (name, i)),
                              "wb") as f:
                        f.write(b"\x00" + bytes([first]) +
                                varint(len(body)) + body)
                with open(os.path.join(out, "stream_cut_%s" % name),
                          "wb") as f:
                    f.write(b"\x00" + sub_bytes[:len(sub_bytes) - 1500])
        finally:
            broker.terminate()
            broker.wait()
    seeds = {
        "topic_user_level": b"\x01fleet/+/location\nfleet/truck-17/location",
        "topic_hash": b"\x01fleet/#\nfleet",
        "topic_sys": b"\x01#\n$SYS/broker/load",
        "topic_empty_level": b"\x01fleet/+/location\nfleet//location",
        "payload_owntracks": b"\x02\x01" + OWNTRACKS,
        "payload_tracesan": b"\x02\x02" + TRACESAN_JSON,
        "payload_iso": b"\x02\x03" + ISO_JSON,
        "payload_auto": b"\x02\x00" + TRACESAN_JSON,
        "payload_batch": b"\x02\x00" + location_batch(),
        "output_rejected": b"\x03rejected\n" +
        b"\x0a\x09a/b+#\xff\x00\x01",
        "output_sanitized_json": b"\x03sanitized.geoind\n" +
        b'{"user_id":"truck/17","lat":40.7}',
        "output_iso": b"\x032023-11-14T22:13:20Z",
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
