#!/usr/bin/env bash
# JSON lines, the Kafka-style bridges, with no broker: the bundled sample
# turned into LocationUpdate JSON lines goes through `tracesan replay
# --format jsonl` into the real daemon, and `tracesan tail --format jsonl`
# brings out exactly what `tail --format csv` sees of the same run, field
# for field; the outcomes match a plain CSV replay of the sample. Bad lines
# are skipped and reported by line number without their coordinates (a
# byte order mark is taken off the first line, reported on another); a
# trickle from a pipe is forwarded without waiting for a full batch;
# gzip input is read; density estimates come out as JSON lines too.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

PY=/usr/bin/python3
if [ ! -x "$PY" ]; then
    echo "1..0 # SKIP $PY is missing"
    exit 77
fi
SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
ROWS=$(data_rows "$SAMPLE")
JSONL=$TMPD/sample.jsonl
BAD_JSONL=$TMPD/with_bad_lines.jsonl
EXPECTED_ERRORS=$TMPD/expected_errors.txt
# Coordinates that appear only in the bad lines: no error may repeat them.
SECRET_LAT=40.7771234
SECRET_LON=-73.9871234

# --- the sample as JSON lines, and a copy with bad lines among them --------
# Timestamps in ms as numbers, every third one as a string (what proto3's
# JSON mapping writes), every third object with its keys in reverse order.
"$PY" - "$SAMPLE" "$JSONL" "$BAD_JSONL" "$EXPECTED_ERRORS" \
    "$SECRET_LAT" "$SECRET_LON" <<'EOF' || fatal "cannot write the JSON lines"
import csv, json, sys
sample, good_path, bad_path, expected_path, lat, lon = sys.argv[1:7]
lines = []
with open(sample, newline="") as f:
    for i, row in enumerate(csv.DictReader(f)):
        ms = int(row["ts"]) * 1000
        update = {"user_id": row["user"], "timestamp_ms": ms,
                  "lat": float(row["lat"]), "lon": float(row["lon"])}
        if i % 3 == 1:
            update["timestamp_ms"] = str(ms)
        if i % 3 == 2:
            update = dict(reversed(list(update.items())))
        lines.append(json.dumps(update))
with open(good_path, "w") as f:
    f.write("\n".join(lines) + "\n")

head = '{"user_id":"bad","timestamp_ms":1254682593000,'
bad = [
    (head + f'"lat":{lat},"lon":NaN}}', "lon: NaN and infinities are not JSON numbers"),
    (head + f'"lat":{lat},"lon":{lon},"speed":3}}', "unknown field 'speed' in tracesan.v1.LocationUpdate"),
    (head + f'"lat":{lat},"lat":{lat},"lon":{lon}}}', "lat: field given twice"),
    (head + f'"lat":"{lat}","lon":{lon}}}', "lat: expected a number, found a string"),
    (head + f'"lat":{lat},"lon":{lon}', "unexpected end of input"),
    ('{"user_id":"bad","timestamp_ms":1254682593000.5,' + f'"lat":{lat}}}', "timestamp_ms: expected an integer, found a fraction"),
    (head + f'"lat":{lat},"lon":{lon}}} {lat}', "unexpected data after the object"),
    (f'[{lat},{lon}]', "expected an object, found an array"),
    (f'{{"{lat}":{lon}}}', "unknown field (its name, not an identifier, is not shown)"),
    (head + f'"lat":1e999,"lon":{lon}}}', "lat: number out of range"),
    (head + '"lat":' + lat + ',"lon":' + lon + ',"profile":"' + "x" * (17 << 20) + '"}', "line longer than 16777216 bytes"),
    ("\ufeff" + head + f'"lat":{lat},"lon":{lon}}}', "the line starts with a byte order mark (U+FEFF), which only the first line may have"),
]
out, expected, n = [], [], 0
def emit(text):
    global n
    out.append(text)
    n += 1
for i, line in enumerate(lines):
    emit(line)
    if i in (4, 800) or i == len(lines) - 1:
        emit("")                       # blank lines are not bad lines
        for text, error in bad[:4] if i == 4 else bad[4:8] if i == 800 else bad[8:]:
            emit(text)
            expected.append(f"tracesan: line {n}: skipped: {error}")
# A byte order mark opens the file, as some editors write it: the first
# line is still read.
with open(bad_path, "w") as f:
    f.write("\ufeff" + "\n".join(out) + "\n")
with open(expected_path, "w") as f:
    f.write("\n".join(expected) + "\n")
EOF
BAD_LINES=$(wc -l <"$EXPECTED_ERRORS")

# start_jsonl_tail NAME COUNT [options]: like start_tail, without
# --rejections, so everything comes on stdout ($TAIL_OUT).
start_jsonl_tail() {
    local name=$1 count=$2 ready=$TMPD/$1.tail.ready
    shift 2
    TAIL_OUT=$TMPD/$name.jsonl
    TAIL_ERR=$TMPD/$name.tail.log
    TAIL_REJ=/dev/null
    local count_args=()
    [ "$count" -gt 0 ] && count_args=(--count "$count")
    "$TRACESAN" tail --connect "$OUTPUT_EP" --format jsonl "${count_args[@]}" \
        --ready-file "$ready" "$@" >"$TAIL_OUT" 2>"$TAIL_ERR" </dev/null &
    TAIL_PID=$!
    background_pids+=("$TAIL_PID")
    local tries=$(( TS_START_TIMEOUT * 20 ))
    while [ ! -e "$ready" ]; do
        is_running "$TAIL_PID" || { show_file "$TAIL_ERR"; fatal "tail $name exited"; }
        tries=$((tries - 1))
        [ $tries -gt 0 ] || fatal "tail $name not ready within ${TS_START_TIMEOUT}s"
        sleep 0.05
    done
}
check_eq "the sample became one JSON line per check-in" "$ROWS" "$(wc -l <"$JSONL")"

# --- sanitize --format jsonl: the same points as from the CSV, same seed ---
"$TRACESAN" sanitize --config "$SHIPPED_CONF" --seed 7 "$SAMPLE" \
    >"$TMPD/sanitize.csv" 2>"$TMPD/sanitize_csv.err" ||
    fatal "tracesan sanitize (CSV) failed"
"$TRACESAN" sanitize --config "$SHIPPED_CONF" --seed 7 --format jsonl - \
    <"$BAD_JSONL" >"$TMPD/sanitize.jsonl" 2>"$TMPD/sanitize_jsonl.err" ||
    fatal "tracesan sanitize --format jsonl failed"
csv_summary=$(tail -n 1 "$TMPD/sanitize_csv.err")
csv_sanitized=$(sed -n 's/.* sanitized=\([0-9]*\) .*/\1/p' <<<"$csv_summary")
csv_rejected=$(sed -n 's/.* rejected=\([0-9]*\) .*/\1/p' <<<"$csv_summary")
check_eq "sanitize --format jsonl: bad lines rejected as malformed, the rest as from CSV" \
    "sanitize: rows=$((ROWS + BAD_LINES)) sanitized=$csv_sanitized rejected=$((csv_rejected + BAD_LINES)) malformed=$BAD_LINES budget_exhausted=$csv_rejected" \
    "$(tail -n 1 "$TMPD/sanitize_jsonl.err")"
check "sanitize --format jsonl: malformed lines named by line number, without coordinates" \
    sh -c 'grep -q "^tracesan: line 7: rejected user=- reason=malformed: lon: NaN" "$1" &&
           ! grep -qe "$2" -e "$3" "$1"' sh "$TMPD/sanitize_jsonl.err" "$SECRET_LAT" "$SECRET_LON"
same_points() {
    "$PY" - "$TMPD/sanitize.csv" "$TMPD/sanitize.jsonl" <<'EOF'
import csv, json, sys
with open(sys.argv[1], newline="") as f:
    rows = [(r["user"], int(r["ts"]) * 1000, r["lat"], r["lon"],
             round(float(r["eps_remaining"]), 8)) for r in csv.DictReader(f)]
with open(sys.argv[2]) as f:
    points = [json.loads(line)["sanitized"] for line in f]
lines = [(p["user_id"], p["timestamp_ms"], f"{p['lat']:.7f}", f"{p['lon']:.7f}",
          round(p["eps_remaining"], 8)) for p in points]
if rows != lines or not rows:
    print(f"# {len(rows)} CSV rows, {len(lines)} JSON lines")
    sys.exit(1)
EOF
}
check "sanitize --format jsonl: the same points, in order, as the CSV run with the same seed" \
    same_points

# --- run 1: replay --format jsonl; tail in both formats side by side --------
start_daemon jsonl
start_tail csv "$ROWS"
CSV_PID=$TAIL_PID CSV_OUT=$TAIL_OUT CSV_REJ=$TAIL_REJ
start_jsonl_tail jsonl "$ROWS"
JSONL_PID=$TAIL_PID JSONL_OUT=$TAIL_OUT
# And one that puts its rejections in a file of their own.
start_tail split "$ROWS" --format jsonl
SPLIT_PID=$TAIL_PID SPLIT_OUT=$TAIL_OUT SPLIT_REJ=$TAIL_REJ
REPLAY_ERR=$TMPD/replay_jsonl.err
"$TRACESAN" replay --connect "$INPUT_EP" --format jsonl "$BAD_JSONL" \
    2>"$REPLAY_ERR" </dev/null
check_eq "replay --format jsonl exits 0 despite bad lines" 0 "$?"
TAIL_PID=$CSV_PID
wait_tail csv 60
TAIL_PID=$JSONL_PID
wait_tail jsonl 60
TAIL_PID=$SPLIT_PID
wait_tail split 60
stop_daemon jsonl
check_eq "replay: every good line sent" "replay: sent $ROWS updates in 17 messages" \
    "$(grep '^replay: sent' "$REPLAY_ERR")"
check_eq "replay: bad lines counted" "replay: skipped $BAD_LINES bad lines" \
    "$(grep '^replay: skipped' "$REPLAY_ERR")"
# Each expected message is the start of the reported one (which goes on
# with the byte offset).
reported_as_expected() {
    grep '^tracesan: line ' "$REPLAY_ERR" >"$TMPD/reported.txt"
    [ "$(wc -l <"$TMPD/reported.txt")" -eq "$BAD_LINES" ] &&
        paste -d '\n' "$EXPECTED_ERRORS" "$TMPD/reported.txt" | awk '
            NR % 2 == 1 { want = $0; next }
            index($0, want) != 1 { print "# expected: " want; print "# got:      " $0; bad++ }
            END { exit bad > 0 }'
}
check "replay: each bad line reported once, by line number and field" \
    reported_as_expected
check "replay: no error repeats a coordinate of a bad line" \
    sh -c '! grep -qe "$1" -e "$2" -e 7771234 -e 9871234 "$3"' sh \
    "$SECRET_LAT" "$SECRET_LON" "$REPLAY_ERR"
check "daemon: no input coordinate in its log" \
    no_coordinates_in "$SAMPLE" "$DAEMON_LOG"
check_eq "daemon: summary updates" "$ROWS" "$(summary_value updates)"
check "tail --format jsonl --rejections FILE: the same lines, rejections in FILE" \
    cmp -s <(sort "$JSONL_OUT") <(sort "$SPLIT_OUT" "$SPLIT_REJ")
check "tail --format jsonl --rejections FILE: only rejections there" \
    sh -c '[ -s "$1" ] && ! grep -qv "^{\"rejected\":" "$1"' sh "$SPLIT_REJ"

# Field for field: the JSON lines and the CSV rows of the same feed.
compare_jsonl_csv() {
    "$PY" - "$JSONL_OUT" "$CSV_OUT" "$CSV_REJ" "$ROWS" <<'EOF'
import csv, json, math, sys
jsonl, sanitized_csv, rejected_csv, rows = sys.argv[1:5]
def refuse(token):
    raise ValueError(f"non-JSON number {token}")
bad = 0
def problem(text):
    global bad
    bad += 1
    if bad <= 10:
        print("# " + text)
points, rejections = {}, {}
with open(jsonl) as f:
    for n, line in enumerate(f, 1):
        if not line.endswith("\n") or "\n" in line[:-1]:
            problem(f"line {n} is not one line")
        obj = json.loads(line, parse_constant=refuse)
        if not isinstance(obj, dict) or len(obj) != 1:
            problem(f"line {n}: not a one-key envelope")
            continue
        (kind, body), = obj.items()
        key = (body.get("user_id", ""), body.get("timestamp_ms", 0))
        if kind == "sanitized":
            points[key] = body
        elif kind == "rejected":
            rejections[key] = body
        else:
            problem(f"line {n}: unexpected kind {kind}")
def ms(text):
    return round(float(text) * 1000)
with open(sanitized_csv, newline="") as f:
    csv_points = {(r["user"], ms(r["ts"])): r for r in csv.DictReader(f)}
with open(rejected_csv, newline="") as f:
    csv_rejections = {(r["user"], ms(r["ts"]) if r["ts"] else 0): r
                      for r in csv.DictReader(f)}
if set(points) != set(csv_points):
    problem(f"sanitized keys differ: {len(points)} JSON, {len(csv_points)} CSV")
if set(rejections) != set(csv_rejections):
    problem(f"rejection keys differ: {len(rejections)} JSON, {len(csv_rejections)} CSV")
if len(points) + len(rejections) != int(rows):
    problem(f"{len(points)} + {len(rejections)} outputs for {rows} inputs")
for key, p in points.items():
    r = csv_points.get(key)
    if r is None:
        continue
    if not isinstance(p["timestamp_ms"], int) or not isinstance(p["lat"], float):
        problem(f"{key}: JSON types")
    for field, column in (("lat", "lat"), ("lon", "lon")):
        if f"{p[field]:.7f}" != r[column]:
            problem(f"{key}: {field} {p[field]!r} vs CSV {r[column]}")
    for field, column in (("eps_point", "eps_point"),
                          ("eps_spent_window", "eps_spent"),
                          ("eps_remaining", "eps_remaining")):
        if not math.isclose(p[field], float(r[column]), rel_tol=1e-8, abs_tol=1e-15):
            problem(f"{key}: {field} {p[field]!r} vs CSV {r[column]}")
    for field in ("profile", "mechanism"):
        if p[field] != r[field]:
            problem(f"{key}: {field} differs")
    if p.get("repeated") is not False or "window_start_ms" not in p:
        problem(f"{key}: repeated/window_start_ms missing")
for key, j in rejections.items():
    r = csv_rejections.get(key)
    if r is None:
        continue
    if j["reason"] != "REJECTION_REASON_" + r["reason"].upper():
        problem(f"{key}: reason {j['reason']} vs CSV {r['reason']}")
    if j.get("detail", "") != r["detail"]:
        problem(f"{key}: detail differs")
print(f"# {len(points)} points and {len(rejections)} rejections compared")
sys.exit(1 if bad else 0)
EOF
}
check "tail --format jsonl equals tail --format csv of the same feed, field for field" \
    compare_jsonl_csv
check "tail --format jsonl: the sample has budget_exhausted rejections" \
    grep -q '^{"rejected":{"user_id":"[^"]*","timestamp_ms":[0-9]*,"reason":"REJECTION_REASON_BUDGET_EXHAUSTED"' "$JSONL_OUT"

# --- run 2: the same sample replayed as CSV gives the same outcomes ---------
outcomes() {  # user,ts,outcome per input, sorted
    { awk -F, 'NR > 1 { print $1 "," $2 ",sanitized" }' "$1"
      awk -F, 'NR > 1 { print $1 "," $2 "," $3 }' "$2"; } | sort
}
start_daemon csv
start_tail csvreplay "$ROWS"
replay "$SAMPLE"
wait_tail csvreplay 60
stop_daemon csv
check "JSON lines replay and CSV replay of the sample: same outcome for every check-in" \
    cmp -s <(outcomes "$CSV_OUT" "$CSV_REJ") <(outcomes "$TAIL_OUT" "$TAIL_REJ")

# --- run 3: a gzip file, a trickle from a pipe, density lines ---------------
start_daemon stream -o profiles.geoind.density=true \
    -o 'profiles.geoind.region="40.55,-74.1,40.9,-73.7"' \
    -o profiles.geoind.rows=6 -o profiles.geoind.cols=8 \
    -o profiles.geoind.cycle_reports=500 -o output.density_publish_s=1
start_jsonl_tail density 0 --topic density.
DENSITY_PID=$TAIL_PID DENSITY_OUT=$TAIL_OUT
start_jsonl_tail gzip "$ROWS"
gzip -c "$JSONL" >"$TMPD/sample.jsonl.gz"
replay "$TMPD/sample.jsonl.gz" --format jsonl
wait_tail gzip 60
check_eq "gzip: one JSON line per check-in" "$ROWS" "$(wc -l <"$TAIL_OUT")"

tries=$(( TS_START_TIMEOUT * 10 ))
while [ ! -s "$DENSITY_OUT" ] && [ $tries -gt 0 ]; do
    sleep 0.1
    tries=$((tries - 1))
done
kill -TERM "$DENSITY_PID"
wait_for_pid "$DENSITY_PID" 10 || kill -KILL "$DENSITY_PID"
check "density estimates come out as {\"density\":...} lines of 48 cells summing to 1" \
    "$PY" -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines, "no density line"
for line in lines:
    d = json.loads(line)["density"]
    assert d["profile"] == "geoind" and d["rows"] == 6 and d["cols"] == 8, d
    assert len(d["probability"]) == 48 and abs(sum(d["probability"]) - 1) < 1e-9
' "$DENSITY_OUT"

# A producer that writes one update, then pauses: the partial batch must go
# out while it waits, not when the pipe closes. The producer holds its
# second line until the first has come out of the daemon (or 60 s pass),
# so a slow machine cannot blur the order; it notes which happened. The
# tail leaves out the density lines this daemon publishes every second.
start_jsonl_tail trickle 2 --topic sanitized. --topic rejected
now_ms=$(( $(date +%s) * 1000 ))
{
    printf '{"user_id":"trickle","timestamp_ms":%s,"lat":40.7,"lon":-74}\n' "$now_ms"
    waited=0
    while [ ! -s "$TAIL_OUT" ] && [ $waited -lt 600 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if [ -s "$TAIL_OUT" ]; then echo forwarded; else echo held; fi \
        >"$TMPD/trickle.first"
    printf '{"user_id":"trickle","timestamp_ms":%s,"lat":40.7,"lon":-74}\n' "$((now_ms + 1000))"
} | "$TRACESAN" replay --connect "$INPUT_EP" --format jsonl --batch 100 - \
    2>"$TMPD/trickle.err" &
PRODUCER_PID=$!
background_pids+=("$PRODUCER_PID")
wait_tail trickle 90
wait_for_pid "$PRODUCER_PID" 10
check_eq "pipe: the first update is forwarded while the producer pauses" \
    forwarded "$(cat "$TMPD/trickle.first" 2>/dev/null)"
check_eq "pipe: replay sent both updates in two messages" \
    "replay: sent 2 updates in 2 messages" "$(grep '^replay: sent' "$TMPD/trickle.err")"
stop_daemon stream

# --- run 4: an update too large for a message is refused alone -------------
# (issue 25, item 9.) Three files of 101 lines, users a*, b*, c*: line 51
# of the first has a 1.2 MB user id, of the second 3 MB (past the frame
# cap, where ZeroMQ drops the connection), of the third 300 KB (small
# enough for a message; the daemon refuses that update alone as
# invalid_user_id). Before the fix the first sank the 99 updates of its
# batch (one `oversized` rejection) and the second vanished while replay
# exited 0 "sent 101 updates".
make_big_id_lines() {
    "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys
path, prefix, id_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "w") as f:
    for i in range(101):
        user = prefix * id_bytes if i == 50 else "%s%d" % (prefix, i)
        f.write(json.dumps({"user_id": user, "timestamp_ms": 1700000000000 + i,
                            "lat": 40.7, "lon": -74.0}) + "\n")
EOF
}
make_big_id_lines "$TMPD/big_a.jsonl" a 1200000
make_big_id_lines "$TMPD/big_b.jsonl" b 3000000
make_big_id_lines "$TMPD/big_c.jsonl" c 300000
start_daemon oversized
start_tail oversized 301
for f in a b; do
    "$TRACESAN" replay --connect "$INPUT_EP" --format jsonl "$TMPD/big_$f.jsonl" \
        2>"$TMPD/big_$f.err" </dev/null
    check_eq "oversized $f: replay exits 2 (sent the rest, refused one)" 2 "$?"
    check "oversized $f: line 51 named as not sent, with the limit" \
        grep -q '^tracesan: line 51: not sent: the update takes [0-9]* bytes, more than a message may (input.max_message_bytes = 1048576)$' \
        "$TMPD/big_$f.err"
    check_eq "oversized $f: the 100 others sent" \
        "replay: sent 100 updates in 1 messages" "$(grep '^replay: sent' "$TMPD/big_$f.err")"
    check_eq "oversized $f: the refusal counted" \
        "replay: refused 1 updates larger than input.max_message_bytes (1048576 bytes)" \
        "$(grep '^replay: refused' "$TMPD/big_$f.err")"
done
"$TRACESAN" replay --connect "$INPUT_EP" --format jsonl "$TMPD/big_c.jsonl" \
    2>"$TMPD/big_c.err" </dev/null
check_eq "a 300 KB id fits a message: replay exits 0" 0 "$?"
# A batch the daemon would refuse whole is refused before anything is
# sent, and a number out of an option's range says the range.
"$TRACESAN" replay --connect "$INPUT_EP" --batch 20000 "$TMPD/big_c.jsonl" \
    2>"$TMPD/big_batch.err" </dev/null
check_eq "replay --batch above input.max_batch_updates exits 1" 1 "$?"
check "... naming the limit" grep -q \
    'batch 20000 is more than the daemon takes in one message (input.max_batch_updates = 10000' \
    "$TMPD/big_batch.err"
"$TRACESAN" replay --connect "$INPUT_EP" --batch 200000000 "$TMPD/big_c.jsonl" \
    2>"$TMPD/big_batch.err" </dev/null
check "replay --batch out of its range says the range" grep -q \
    -- '--batch needs an integer from 1 to 100000000' "$TMPD/big_batch.err"
wait_tail oversized 60
stop_daemon oversized
check_eq "every other update of the three files sanitized" 300 "$(data_rows "$TAIL_OUT")"
check_eq "the daemon refused the 300 KB id alone, as invalid_user_id" \
    "invalid_user_id" "$(awk -F, 'NR > 1 { print $3 }' "$TAIL_REJ")"

finish
