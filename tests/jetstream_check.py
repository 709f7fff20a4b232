"""Acceptance checks of the JetStream mode over what a run left behind.

usage: jetstream_check.py INPUT.csv OUTPUTS.csv LEDGER.csv CHANGELOG.csv
                          LOG[:KILL_MS]...

INPUT.csv is the replayed trace (user,ts,lat,lon); the others come from
`tracesan jetstream outputs|ledger|changelog`; each LOG is an instance's
stderr, with the wall-clock ms it was killed when it was. Prints one TAP-ish
line per check ("ok"/"not ok") and exits 1 when any failed.
"""
import collections
import csv
import re
import sys

EPS = 1e-9
failed = 0


def report(ok, what):
    global failed
    print(("ok - " if ok else "not ok - ") + what)
    if not ok:
        failed += 1


def main():
    inputs_path, outputs_path, ledger_path, changelog_path = sys.argv[1:5]
    logs = sys.argv[5:]

    want = collections.Counter()
    with open(inputs_path) as f:
        next(f)
        for line in f:
            cells = line.rstrip("\n").split(",")
            if len(cells) >= 4:
                want[(cells[0], round(float(cells[1]) * 1000))] += 1

    seen_ids = set()
    duplicates = 0
    got = collections.Counter()
    windows = collections.defaultdict(float)    # (user, start) -> sum eps
    budgets = {}
    last_window = {}
    backwards = collections.Counter()
    with open(outputs_path, newline="") as f:
        for row in csv.DictReader(f):
            msg_id, kind, user = row["msg_id"], row["kind"], row["user"]
            if msg_id in seen_ids:
                duplicates += 1
                continue
            seen_ids.add(msg_id)
            got[(user, int(row["ts_ms"]))] += 1
            if kind == "sanitized":
                start = int(row["window_start_ms"])
                windows[(user, start)] += float(row["eps_point"])
                budgets[(user, start)] = max(
                    budgets.get((user, start), 0.0),
                    float(row["eps_spent_window"]) +
                    float(row["eps_remaining"]))
                last_window[user] = max(last_window.get(user, start), start)
            elif row["reason"] == "time_went_backwards":
                backwards[user] += 1
    print("# inputs %d, outputs %d distinct (%d duplicate ids dropped)"
          % (sum(want.values()), len(seen_ids), duplicates))
    missing = want - got
    extra = got - want
    report(not missing and not extra,
           "every input has exactly one output (%d missing, %d extra)"
           % (sum(missing.values()), sum(extra.values())))

    # The trace is in time order per user: a user's update arriving after
    # a later one means the producer or the daemon reordered a partition.
    report(not backwards, "no update rejected as time_went_backwards "
           "(%d updates of %d users%s)" % (
               sum(backwards.values()), len(backwards),
               (": " + ",".join(sorted(backwards)[:5])) if backwards else ""))

    over = [k for k, v in windows.items() if v > budgets[k] + EPS]
    report(not over, "no window over budget (%d windows, %d over)"
           % (len(windows), len(over)))

    ledger = {}
    with open(ledger_path) as f:
        next(f)
        for line in f:
            user, part, profile, start, length, spent = \
                line.rstrip("\n").split(",")
            ledger[user] = (int(start), float(spent))
    short = []
    for user, start in last_window.items():
        entry = ledger.get(user)
        if entry is None or entry[0] < start or (
                entry[0] == start and entry[1] + EPS < windows[(user, start)]):
            short.append(user)
    report(not short, "replicated ledger >= the eps published, per user "
           "(%d users, %d short%s)" % (len(last_window), len(short),
                                       (": " + ",".join(short[:5])) if short else ""))
    # Every debit belongs to a committed group, and every committed group
    # is published (or republished by the next owner): a ledger above the
    # eps published means an input was debited twice.
    double = [u for u, start in last_window.items()
              if u in ledger and ledger[u][0] == start and
              ledger[u][1] > windows[(u, start)] + 1e-6]
    report(not double, "no double debit: ledger == eps published in the "
           "current window (%d above%s)" % (len(double),
                                            (": " + ",".join(double[:5])) if double else ""))

    epochs = collections.defaultdict(list)
    owners = {}
    bad_owner = 0
    with open(changelog_path) as f:
        next(f)
        for line in f:
            seq, part, kind, owner, epoch, last = line.rstrip("\n").split(",")
            epochs[part].append(int(epoch))
            if owners.setdefault((part, epoch), owner) != owner:
                bad_owner += 1
    regress = [p for p, e in epochs.items()
               if any(b < a for a, b in zip(e, e[1:]))]
    report(not regress and not bad_owner,
           "changelog: epochs never go back and each has one owner "
           "(%d partitions)" % len(epochs))

    intervals = collections.defaultdict(list)   # partition -> (start, end, who)
    pattern = re.compile(r"lease (acquired|released) partition=(\d+) "
                         r"epoch=\d+ at_ms=(\d+)")
    for spec in logs:
        path, _, kill = spec.partition(":")
        open_at = {}
        with open(path) as f:
            for line in f:
                m = pattern.search(line)
                if not m:
                    continue
                what, part, at = m.group(1), m.group(2), int(m.group(3))
                if what == "acquired":
                    open_at[part] = at
                elif part in open_at:
                    intervals[part].append((open_at.pop(part), at, path))
        end = int(kill) if kill else 1 << 62
        for part, at in open_at.items():
            intervals[part].append((at, end, path))
    overlaps = 0
    longest = 0
    for part, spans in intervals.items():
        spans.sort()
        for (s1, e1, w1), (s2, e2, w2) in zip(spans, spans[1:]):
            if s2 < e1 and w1 != w2:
                overlaps += 1
                longest = max(longest, e1 - s2)
    report(overlaps == 0, "no partition held by two instances at once "
           "(%d partitions, %d overlaps%s)" % (
               len(intervals), overlaps,
               ", the longest %d ms" % longest if overlaps else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
