#!/usr/bin/env python3
"""Checks of the MQTT tests on what `tracesan tail --mqtt` printed.

  mqtt_check.py outcomes INPUT.csv OUT.jsonl [--exactly-one]
      every input (user, ts) has at least one outcome (exactly one with
      --exactly-one), the outcomes of one input are identical, no output
      names an input that was not sent, and no sanitized point equals an
      input point at 7 decimals. Prints a summary line.
  mqtt_check.py ledger OUT.jsonl STATE.csv BUDGET [--all-published]
      per user: the eps of the distinct sanitized points published <= the
      ledger's spent (tracesan state list) <= BUDGET; with
      --all-published, equal: every debit's point was published.
  mqtt_check.py synth USERS POINTS OUT.csv [PREFIX]
      a synthetic trace: USERS users with POINTS fixes each, a minute
      apart, around New York.
Exit 1 with the offending inputs listed on failure."""
import csv
import json
import random
import sys


def read_inputs(path):
    inputs, points = set(), set()
    with open(path) as f:
        for row in csv.DictReader(f):
            ts = int(round(float(row["ts"]) * 1000))
            inputs.add((row["user"], ts))
            points.add("%.7f,%.7f" % (float(row["lat"]), float(row["lon"])))
    return inputs, points


def read_outcomes(path):
    outcomes = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            message = json.loads(line)
            kind, body = next(iter(message.items()))
            if kind == "density":
                continue
            key = (body.get("user_id", ""), int(body.get("timestamp_ms", 0)))
            outcomes.setdefault(key, []).append((kind, body))
    return outcomes


def check_outcomes(args):
    inputs, points = read_inputs(args[0])
    outcomes = read_outcomes(args[1])
    exactly_one = "--exactly-one" in args
    bad = 0
    repeated = 0
    for key in sorted(inputs):
        got = outcomes.get(key, [])
        if not got or (exactly_one and len(got) != 1):
            print("# input %s: %d outcomes" % (key, len(got)))
            bad += 1
        if len(got) > 1:
            repeated += 1
            if any(json.dumps(o, sort_keys=True) !=
                   json.dumps(got[0], sort_keys=True) for o in got):
                print("# input %s: outcomes differ: %s" % (key, got))
                bad += 1
    for key, got in outcomes.items():
        if key not in inputs and key[0] != "":
            print("# outcome for an input never sent: %s" % (key,))
            bad += 1
        for kind, body in got:
            if kind == "sanitized" and "%.7f,%.7f" % (
                    body["lat"], body["lon"]) in points:
                print("# raw input point published for %s" % (key,))
                bad += 1
    sanitized = sum(1 for g in outcomes.values() if g[0][0] == "sanitized")
    print("# inputs=%d with_outcome=%d repeated=%d sanitized=%d bad=%d" % (
        len(inputs), sum(1 for k in inputs if k in outcomes), repeated,
        sanitized, bad))
    return 1 if bad else 0


def check_ledger(args):
    outcomes = read_outcomes(args[0])
    budget = float(args[2])
    published = {}
    for key, got in outcomes.items():
        kind, body = got[0]
        if kind == "sanitized":
            published[key[0]] = published.get(key[0], 0.0) + body["eps_point"]
    ledger = {}
    with open(args[1]) as f:
        for row in csv.DictReader(f):
            ledger[row["user"]] = float(row["spent"])
    bad = 0
    for user, eps in published.items():
        spent = ledger.get(user, 0.0)
        if spent + 1e-9 < eps:
            print("# user %s: published eps %.9g > ledger %.9g" % (
                user, eps, spent))
            bad += 1
    if "--all-published" in args:
        for user, spent in ledger.items():
            if user in published or spent > 0:
                if abs(published.get(user, 0.0) - spent) > 1e-9:
                    print("# user %s: ledger %.9g, published %.9g" % (
                        user, spent, published.get(user, 0.0)))
                    bad += 1
    for user, spent in ledger.items():
        if spent > budget + 1e-9:
            print("# user %s: ledger %.9g over budget %.9g" % (
                user, spent, budget))
            bad += 1
    print("# users=%d published_eps=%.6g ledger_eps=%.6g bad=%d" % (
        len(published), sum(published.values()),
        sum(v for u, v in ledger.items() if u in published), bad))
    return 1 if bad else 0


def synth(args):
    users, points, path = int(args[0]), int(args[1]), args[2]
    prefix = args[3] if len(args) > 3 else "v"
    rng = random.Random(27)
    with open(path, "w") as f:
        f.write("user,ts,lat,lon\n")
        for p in range(points):
            for u in range(users):
                f.write("%s%d,%d,%.7f,%.7f\n" % (
                    prefix, u, 1700000000 + 60 * p,
                    40.70 + rng.random() * 0.1, -74.02 + rng.random() * 0.1))
    return 0


if __name__ == "__main__":
    command, rest = sys.argv[1], sys.argv[2:]
    sys.exit({"outcomes": check_outcomes, "ledger": check_ledger,
              "synth": synth}[command](rest))
