#!/usr/bin/python3
"""Test helpers for tracesand's /feed (Server-Sent Events).

  feed_client.py slow HOST PORT PATH HOLD_S [TOKEN]
      Connects with a 4 KiB receive buffer, sends the request and reads
      nothing for HOLD_S seconds (a client that stopped reading), then reads
      until the server closes. Prints "closed after N bytes" when it did,
      "still open" when it did not within 10 s.

  feed_client.py compare SSE_FILE SANITIZED_CSV REJECTED_CSV INPUT_CSV
      Checks that the events of a captured stream are exactly the outcomes
      `tracesan tail` received: one `sanitized` event per sanitized row
      (same user, time and point), one `rejected` event per rejection row,
      with the wire format's field names, and that no event carries an
      input coordinate. Prints what differs; exit status 1 if anything does.
"""

import csv
import json
import socket
import sys
import time

SANITIZED_FIELDS = {"user_id", "timestamp_ms", "lat", "lon", "profile",
                    "mechanism", "eps_point", "eps_spent_window",
                    "eps_remaining", "window_start_ms", "repeated"}
REJECTION_FIELDS = {"user_id", "timestamp_ms", "reason", "detail",
                    "profile"}


def slow(host, port, path, hold, token=None):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Set before connecting, so the window the daemon sees is small.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    auth = "Authorization: Bearer %s\r\n" % token if token else ""
    sock.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n"
                  % (path, host, auth)).encode())
    time.sleep(float(hold))
    sock.settimeout(10)
    received = 0
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += len(chunk)
    except ConnectionResetError:
        pass
    except socket.timeout:
        print("still open after %d bytes" % received)
        return 0
    print("closed after %d bytes" % received)
    return 0


def read_events(path):
    """(name, object) pairs of an SSE capture."""
    with open(path, encoding="utf-8") as capture:
        text = capture.read()
    events = []
    # A capture cut mid-event (the client was stopped) ends without its
    # blank line: only complete events count.
    for block in text.split("\n\n")[:-1]:
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


def csv_rows(path):
    with open(path, newline="", encoding="utf-8") as source:
        return list(csv.DictReader(source))


def ts_ms(text):
    return int(round(float(text) * 1000))


def compare(sse_path, sanitized_csv, rejected_csv, input_csv):
    problems = []
    events = read_events(sse_path)
    sanitized = [e for n, e in events if n == "sanitized"]
    rejected = [e for n, e in events if n == "rejected"]
    others = sorted({n for n, _ in events} - {"sanitized", "rejected"})
    if others:
        problems.append("unexpected event names: %s" % others)

    for event in sanitized[:1]:
        missing = SANITIZED_FIELDS - set(event)
        if missing:
            problems.append("sanitized event lacks %s" % sorted(missing))
    for event in rejected[:1]:
        unknown = set(event) - REJECTION_FIELDS
        if unknown or "reason" not in event:
            problems.append("rejected event fields %s" % sorted(event))

    published = {}
    for row in csv_rows(sanitized_csv):
        key = (row["user"], ts_ms(row["ts"]))
        published.setdefault(key, []).append((float(row["lat"]),
                                              float(row["lon"])))
    seen = 0
    for event in sanitized:
        key = (event.get("user_id"), event.get("timestamp_ms"))
        points = published.get(key)
        match = None
        for point in points or []:
            if abs(point[0] - event["lat"]) <= 1e-7 and \
                    abs(point[1] - event["lon"]) <= 1e-7:
                match = point
                break
        if match is None:
            if len(problems) < 20:
                problems.append("event not published: %s" % (key,))
            continue
        points.remove(match)
        seen += 1
    left = sum(len(points) for points in published.values())
    if left:
        problems.append("%d published points had no event" % left)

    rejections = {}
    for row in csv_rows(rejected_csv):
        key = (row["user"], ts_ms(row["ts"]) if row["ts"] else 0)
        rejections[key] = rejections.get(key, 0) + 1
    for event in rejected:
        key = (event.get("user_id", ""), event.get("timestamp_ms", 0))
        if rejections.get(key, 0) == 0:
            problems.append("rejection event not published: %s" % (key,))
        else:
            rejections[key] -= 1
    if sum(rejections.values()):
        problems.append("%d rejections had no event"
                        % sum(rejections.values()))

    truth = set()
    for row in csv_rows(input_csv):
        truth.add(("%.7f" % float(row["lat"]), "%.7f" % float(row["lon"])))
    for event in sanitized:
        if ("%.7f" % event["lat"], "%.7f" % event["lon"]) in truth:
            problems.append("an event carries an input point")
            break

    for problem in problems:
        print("# " + problem)
    print("# %d sanitized and %d rejected events checked"
          % (seen, len(rejected)))
    return 1 if problems else 0


def main(argv):
    if len(argv) in (6, 7) and argv[1] == "slow":
        return slow(*argv[2:])
    if len(argv) == 6 and argv[1] == "compare":
        return compare(*argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
