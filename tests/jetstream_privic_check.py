#!/usr/bin/env python3
"""Checks of tests/integration_jetstream_privic.sh over what the run left
in JetStream: the population bucket's history and the output stream.

usage: jetstream_privic_check.py PORT INPUT.csv KILL_MS PROFILE
       jetstream_privic_check.py --count PORT

The second form prints the number of distinct outcomes in TRACESAN_OUT.

PORT is the nats-server's client port on 127.0.0.1; INPUT.csv the replayed
trace; KILL_MS the wall-clock ms the lease holder was killed at. Both
streams are read over the plain NATS protocol (an ephemeral push consumer
each), so no client library is needed; the daemons ran with
output.encoding = "json". Prints one TAP-ish line per check ("ok"/"not
ok", "#" for notes) and exits 1 when any failed.
"""
import base64
import collections
import json
import socket
import struct
import sys
import uuid

results = []


def report(ok, what):
    results.append((bool(ok), what))
    print(("not ok - ", "ok - ")[bool(ok)] + what)


def note(what):
    print("# " + what)


# ------------------------------------------------------------ reading

def dump_stream(port, stream, filter_subject=None):
    """Every message of `stream` (on `filter_subject`): dicts with subject,
    seq, ts_ns, headers, data. Empty when the stream does not exist."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    f = sock.makefile("rb")
    f.readline()  # INFO
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,'
                 b'"headers":true,"no_responders":true}\r\nPING\r\n')
    deliver = "dump." + uuid.uuid4().hex
    inbox = "inbox." + uuid.uuid4().hex
    sock.sendall(("SUB %s 1\r\nSUB %s 2\r\n" % (deliver, inbox)).encode())
    config = {"deliver_subject": deliver, "deliver_policy": "all",
              "ack_policy": "none", "replay_policy": "instant"}
    if filter_subject:
        config["filter_subject"] = filter_subject
    body = json.dumps({"stream_name": stream, "config": config}).encode()
    sock.sendall(b"PUB $JS.API.CONSUMER.CREATE.%s %s %d\r\n%s\r\n" % (
        stream.encode(), inbox.encode(), len(body), body))
    messages, pending = [], None
    while pending != 0:
        line = f.readline()
        if not line:
            break
        parts = line.split()
        if parts[0] == b"PING":
            sock.sendall(b"PONG\r\n")
            continue
        if parts[0] not in (b"MSG", b"HMSG"):
            continue
        size = int(parts[-1])
        payload = f.read(size + 2)[:size]
        if parts[2] == b"2":  # the API's answer
            answer = json.loads(payload)
            # No such stream, or nothing (more) to deliver.
            if "error" in answer or answer.get("num_pending", 1) == 0:
                break
            continue
        headers = {}
        if parts[0] == b"HMSG":
            hlen = int(parts[-2])
            for h in payload[:hlen].decode().split("\r\n")[1:]:
                if ": " in h:
                    k, v = h.split(": ", 1)
                    headers[k] = v
            payload = payload[hlen:]
        # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        meta = parts[3].decode().split(".")
        pending = int(meta[-1])
        messages.append({"subject": parts[1].decode(), "seq": int(meta[-4]),
                         "ts_ns": int(meta[-2]), "headers": headers,
                         "data": payload})
    sock.close()
    return messages


def decode_record(data):
    """A format-2 population record (mechanisms/population.h)."""
    fmt, version, cycles, reports, cells = struct.unpack_from("<BIIQI", data)
    at = struct.calcsize("<BIIQI")
    assert fmt == 2, "format %d" % fmt
    kind = data[at]
    at += 1
    theta = None
    if kind == 2:
        theta = struct.unpack_from("<%dd" % cells, data, at)
        at += 8 * cells
    prev_kind = data[at]
    at += 1
    if prev_kind == 2:
        at += 8 * cells
    stale, outside, estimated, last, est_ms, out_seq = struct.unpack_from(
        "<QQQQqQ", data, at)
    assert at + 48 == len(data), "%d trailing bytes" % (len(data) - at - 48)
    return {"version": version, "cycles": cycles, "reports_total": reports,
            "cells": cells, "theta": theta, "previous": prev_kind,
            "stale": stale, "outside": outside, "out_seq": out_seq}


# ------------------------------------------------------------- checks

def distinct_outputs(port):
    """Outcomes in TRACESAN_OUT, one per message id (the density estimates
    share the stream)."""
    return len({m["headers"].get("Nats-Msg-Id")
                for m in dump_stream(port, "TRACESAN_OUT")
                if m["subject"].startswith("tracesan.out.") or
                m["subject"] == "tracesan.rejected"})


def main():
    if sys.argv[1] == "--count":
        print(distinct_outputs(int(sys.argv[2])))
        sys.exit(0)
    port, inputs_path, kill_ms, profile = (int(sys.argv[1]), sys.argv[2],
                                           int(sys.argv[3]), sys.argv[4])
    kill_ns = kill_ms * 1000000
    history = []
    for m in dump_stream(port, "KV_tracesan_population",
                         "$KV.tracesan_population." + profile):
        record = decode_record(m["data"])
        record.update(revision=m["seq"], ts_ns=m["ts_ns"])
        history.append(record)
    outputs = dump_stream(port, "TRACESAN_OUT")
    note("bucket history: %d records, versions %s" % (
        len(history), [r["version"] for r in history]))
    report(len(history) >= 2, "the population bucket holds the profile's "
           "records (%d)" % len(history))
    if not history:
        return
    versions = [r["version"] for r in history]
    report(versions[0] == 1 and all(b == a + 1 for a, b in
                                    zip(versions, versions[1:])),
           "versions rise by one per revision from 1: none issued twice, "
           "none skipped")
    written_at = {r["version"]: r["ts_ns"] for r in history}
    before = [r for r in history[1:] if r["ts_ns"] < kill_ns]
    after = [r for r in history if r["ts_ns"] > kill_ns]
    report(len(before) >= 2 and len(after) >= 2,
           "new versions were written before (%d) and after (%d) the "
           "holder was killed" % (len(before), len(after)))
    if before and after:
        note("handover: the kill came %.0f ms after the last version "
             "before it, the next version %.0f ms after the kill" % (
                 (kill_ns - before[-1]["ts_ns"]) / 1e6,
                 (after[0]["ts_ns"] - kill_ns) / 1e6))

    want = 0
    with open(inputs_path) as f:
        want = sum(1 for _ in f) - 1
    reports = []
    ids = set()
    rejected = 0
    for m in outputs:
        if m["subject"] == "tracesan.rejected":
            rejected += 1
        if not m["subject"].startswith("tracesan.out."):
            continue
        msg_id = m["headers"].get("Nats-Msg-Id", "")
        if msg_id in ids:
            continue
        ids.add(msg_id)
        if m["subject"] != "tracesan.out." + profile:
            continue
        loc = json.loads(m["data"])
        reports.append({"seq": m["seq"], "ts_ns": m["ts_ns"],
                        "partition": msg_id.split(".")[0],
                        "user": loc["user_id"],
                        "version": loc.get("channel_version", 1),
                        "repeated": loc.get("repeated", False)})
    report(len(ids) == want and rejected == 0,
           "every input has exactly one sanitized output (%d of %d, %d "
           "rejected)" % (len(ids), want, rejected))
    named = collections.Counter(r["version"] for r in reports)
    note("reports per version: %s" % dict(sorted(named.items())))
    unknown = [v for v in named if v not in written_at]
    report(not unknown, "every report names a version of the bucket's "
           "history (unknown: %s)" % unknown)
    early = [r for r in reports if r["version"] in written_at and
             r["ts_ns"] < written_at[r["version"]]]
    report(not early, "no report was published before its version was "
           "written (%d early)" % len(early))
    report(any(r["version"] > 2 and r["ts_ns"] > kill_ns for r in reports),
           "reports after the kill come from versions written since")
    for key in ("partition", "user"):
        last, back = {}, 0
        for r in reports:
            if r["version"] < last.get(r[key], 0):
                back += 1
            last[r[key]] = max(last.get(r[key], 0), r["version"])
        report(back == 0, "per %s, versions never go back in stream order "
               "(%d times back)" % (key, back))

    # Each record accounts for every report of the profile up to its
    # out_seq exactly once: counted, stale or outside.
    start = history[0]["out_seq"]
    counted = [r for r in reports if not r["repeated"]]
    wrong = []
    for rec in history[1:]:
        have = sum(1 for r in counted if start < r["seq"] <= rec["out_seq"])
        accounted = rec["reports_total"] + rec["stale"] + rec["outside"]
        if have != accounted:
            wrong.append((rec["version"], have, accounted))
    report(not wrong, "every record accounts for each report up to its "
           "stream position once, across the failover (wrong: %s)" % wrong)
    last = history[-1]
    note("last record: version %d, cycle %d, %d reports counted, %d stale, "
         "outputs to sequence %d" % (last["version"], last["cycles"],
                                     last["reports_total"], last["stale"],
                                     last["out_seq"]))

    densities = [m for m in outputs
                 if m["subject"] == "tracesan.density." + profile]
    dens = [json.loads(m["data"]) for m in densities]
    later = [m["ts_ns"] for m in densities if m["ts_ns"] > kill_ns]
    if later:
        note("the first density estimate after the kill: %.0f ms after it"
             % ((later[0] - kill_ns) / 1e6))
    report(any(m["ts_ns"] < kill_ns for m in densities) and
           any(m["ts_ns"] > kill_ns for m in densities),
           "density.%s estimates were published before (%d) and after (%d) "
           "the kill" % (profile,
                         sum(m["ts_ns"] < kill_ns for m in densities),
                         sum(m["ts_ns"] > kill_ns for m in densities)))
    bad = [d for d in dens if len(d["probability"]) != d["rows"] * d["cols"]
           or abs(sum(d["probability"]) - 1.0) > 1e-9]
    report(densities and not bad, "every estimate has its grid's cells "
           "summing to 1 (%d bad)" % len(bad))
    seen = [d["channel_version"] for d in dens]
    report(all(b >= a for a, b in zip(seen, seen[1:])),
           "the estimates' versions never go back")
    report(all(v in written_at for v in seen) and
           all(m["ts_ns"] >= written_at.get(d["channel_version"], 1 << 64)
               for m, d in zip(densities, dens)),
           "every estimate is one the bucket held when it was published")
    print("# last_version %d" % last["version"])


main()
sys.exit(0 if all(ok for ok, _ in results) else 1)
