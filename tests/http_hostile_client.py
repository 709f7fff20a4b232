#!/usr/bin/env python3
"""Hostile HTTP clients for tests/integration_http_hostile.sh.

  http_hostile_client.py frame HOST PORT HEX
      Sends the bytes (hex) in one write, then reads until the server
      closes or 3 s pass. Prints one line: the status codes of the replies
      seen, comma-separated ("-" for none), then "closed" or "open".

  http_hostile_client.py slowloris HOST PORT N SECONDS INTERVAL READY
      Holds N connections for SECONDS, each sending one byte of a request
      head every INTERVAL seconds (never completing it) and opening a new
      one whenever the server closes it, as an attacker would. Touches
      READY once all N are connected; prints "connects=C closes=D" at the
      end (D: connections the server closed).
"""
import os
import re
import select
import socket
import sys
import time

HEAD = b"GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 4000


def frame(host, port, payload):
    sock = socket.create_connection((host, port), timeout=5)
    sock.sendall(payload)
    received = b""
    closed = False
    deadline = time.monotonic() + 3.0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        received += chunk
    sock.close()
    codes = re.findall(rb"(?:^|\n)HTTP/1\.[01] (\d{3}) ", received)
    print("%s %s" % (",".join(c.decode() for c in codes) or "-",
                     "closed" if closed else "open"))


class Slow:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.setblocking(False)
        self.sent = 0
        self.next_at = time.monotonic()


def slowloris(host, port, n, seconds, interval, ready):
    conns = []
    connects = closes = 0
    end = time.monotonic() + seconds
    for _ in range(n):
        conns.append(Slow(host, port))
        connects += 1
    open(ready, "w").close()
    while time.monotonic() < end:
        now = time.monotonic()
        for i, conn in enumerate(conns):
            gone = False
            readable, _, _ = select.select([conn.sock], [], [], 0)
            if readable:
                try:
                    gone = conn.sock.recv(4096) == b""
                except OSError:
                    gone = True
            if not gone and now >= conn.next_at:
                try:
                    conn.sock.send(HEAD[conn.sent % len(HEAD):][:1])
                    conn.sent += 1
                    conn.next_at = now + interval
                except OSError:
                    gone = True
            if gone:
                closes += 1
                conn.sock.close()
                try:
                    conns[i] = Slow(host, port)
                    connects += 1
                except OSError:
                    conns[i] = None
        conns = [c for c in conns if c is not None]
        while len(conns) < n:
            try:
                conns.append(Slow(host, port))
                connects += 1
            except OSError:
                break
        time.sleep(0.05)
    for conn in conns:
        conn.sock.close()
    print("connects=%d closes=%d" % (connects, closes))


def main():
    mode = sys.argv[1]
    host, port = sys.argv[2], int(sys.argv[3])
    if mode == "frame":
        frame(host, port, bytes.fromhex(sys.argv[4]))
    elif mode == "slowloris":
        slowloris(host, port, int(sys.argv[4]), float(sys.argv[5]),
                  float(sys.argv[6]), sys.argv[7])
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
