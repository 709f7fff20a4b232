#!/usr/bin/env bash
# PRIVIC online, through the real daemon and real sockets:
#   1. Replayed in chunks with a short cycle, the privic profile's channel
#      version advances, reports carry it (never going back in publish
#      order), every report is a cell centre inside the region with
#      eps_point = 2 beta / 1000 per metre and eps_floor = eps_point times
#      the cell diagonal.
#   2. density.privic estimates arrive on the feed and sum to 1, and GET
#      /density/privic serves GeoJSON whose 408 cells' probabilities sum
#      to 1.
#   3. After kill -9 and a restart on the same state.dir, the version and
#      the cycle count do not go back, and reports resume at that version.
#   4. A geoind profile with density = true estimates its own feed's
#      distribution: GET /density/geoind serves cells summing to 1, and
#      its points carry no channel version.
#   5. Offline, `tracesan privic` honours ba_max_steps and ibu_max_steps
#      on every cycle, and --control never re-fits BA.
# The ZeroMQ driver: with the JetStream driver the loop runs cluster-wide
# (a population lease, versions in a KV bucket, docs/scale-out.md), and
# integration_jetstream_privic.sh checks versions, reports and the density
# feed there across a kill of the instance that runs it (a restart's
# resume is that test's takeover; the geoind density and the offline tool
# do not depend on the driver).
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
command -v python3 >/dev/null 2>&1 || fatal "python3 is not installed (scripts/setup.sh installs it)"

http_get() { curl -s --max-time 5 "http://$HTTP_EP$1"; }
metric() {  # metric NAME: value of the privic profile's sample
    http_get /metrics | awk -v s="$1{profile=\"privic\"}" '$1 == s { print $2 }'
}
# wait_metric NAME MINIMUM SECONDS: until the sample reaches MINIMUM.
wait_metric() {
    local tries=$(( $3 * 10 )) value
    while [ $tries -gt 0 ]; do
        value=$(metric "$1")
        [ -n "$value" ] && [ "${value%.*}" -ge "$2" ] && return 0
        sleep 0.1
        tries=$((tries - 1))
    done
    note "$1 stayed at '${value:-}' (wanted >= $2)"
    return 1
}

CYCLE=60
USERS=20
CHUNKS=4
PER_CHUNK=$(( USERS * 3 ))       # 3 points per user per chunk
STATE=$TMPD/state
NOW=$(date +%s)
T0=$((NOW - 7200))

# A chunk: USERS users, 3 points each, inside the paper's box (lat
# 37.7228-37.7946, lon -122.5153 to -122.3789), time increasing per user.
make_chunk() {  # make_chunk INDEX FILE
    awk -v k="$1" -v t="$T0" -v users="$USERS" 'BEGIN {
        srand(40 + k); print "user,ts,lat,lon"
        for (j = 0; j < 3; j++)
            for (u = 0; u < users; u++)
                printf "cab%02d,%d,%.6f,%.6f\n", u, t + 100 * k + 10 * j + u,
                       37.7300 + 0.0600 * rand(), -122.5000 + 0.1100 * rand()
    }' >"$2"
}

run_conf=(-o "state.dir=$STATE" -o "profiles.privic.cycle_reports=$CYCLE"
          -o "output.density_publish_s=1")

# ------------------------------------------------- 1. versions advance
start_daemon privic1 "${run_conf[@]}"
start_tail privic1 $(( CHUNKS * PER_CHUNK )) --topic sanitized.privic \
    --topic rejected
for k in $(seq 1 $CHUNKS); do
    make_chunk "$k" "$TMPD/chunk$k.csv"
    replay "$TMPD/chunk$k.csv" --profile privic
    # Each chunk closes a cycle; wait for its channel so the next chunk
    # is released through a newer version.
    wait_metric tracesand_privic_cycles_total "$k" 120 ||
        fail "privic1: cycle $k did not complete"
done
wait_tail privic1 60
OUT1=$TAIL_OUT
check_eq "privic1: every update sanitized" $(( CHUNKS * PER_CHUNK )) "$(data_rows "$OUT1")"
check_eq "privic1: no rejections" 0 "$(data_rows "$TAIL_REJ")"

col() {  # col NAME FILE: index of a header column
    head -n 1 "$2" | tr ',' '\n' | grep -nx "$1" | cut -d: -f1
}
VCOL=$(col channel_version "$OUT1")
check "privic1: the feed has a channel_version column" test -n "$VCOL"
awk -F, -v c="$VCOL" 'NR > 1 { print $c }' "$OUT1" >"$TMPD/versions1"
check "privic1: every report carries a channel version" \
    awk 'NF == 0 || $1 < 1 { exit 1 }' "$TMPD/versions1"
check "privic1: versions never go back in publish order" \
    awk 'NR > 1 && $1 < last { exit 1 } { last = $1 }' "$TMPD/versions1"
last_version=$(tail -n 1 "$TMPD/versions1")
check_ge "privic1: the last chunk went through a newer channel" 3 "$last_version"
check "privic1: reports are inside the region at eps_point 0.002" \
    awk -F, 'NR > 1 && ($3 < 37.7228 || $3 > 37.7946 || $4 < -122.5153 ||
             $4 > -122.3789 || $6 != 0.002) { exit 1 }' "$OUT1"
# A cell centre: (lat - lat_min) / cell height is a half-integer.
check "privic1: reports are cell centres" \
    awk -F, 'NR > 1 {
        r = ($3 - 37.7228) / ((37.7946 - 37.7228) / 17) - 0.5
        c = ($4 + 122.5153) / ((122.5153 - 122.3789) / 24) - 0.5
        if (r - int(r + 0.5) > 1e-3 || int(r + 0.5) - r > 1e-3 ||
            c - int(c + 0.5) > 1e-3 || int(c + 0.5) - c > 1e-3) exit 1 }' "$OUT1"
FCOL=$(col eps_floor "$OUT1")
check "privic1: the feed has an eps_floor column" test -n "$FCOL"
# 0.002 per metre times the 499.6 m x 469.6 m cells' diagonal, 685.7 m.
check "privic1: every report books eps_floor 1.3714 nats beside eps_point" \
    awk -F, -v c="$FCOL" 'NR > 1 && ($c < 1.3713 || $c > 1.3715) { exit 1 }' \
    "$OUT1"
no_input_point_published "$TMPD/chunk1.csv" "$OUT1"

# ------------------------------------------------- 2. the density feed
# A subscriber of its own, without --count: estimates come every second.
start_tail density 0 --topic density.privic --density "$TMPD/density1.csv"
tries=$(( TS_START_TIMEOUT * 10 ))
while [ "$(data_rows "$TMPD/density1.csv")" -lt 2 ] && [ $tries -gt 0 ]; do
    sleep 0.1
    tries=$((tries - 1))
done
kill -TERM "$TAIL_PID" 2>/dev/null
wait "$TAIL_PID" 2>/dev/null
forget_pid "$TAIL_PID"
check_ge "privic1: density.privic estimates arrived" 2 "$(data_rows "$TMPD/density1.csv")"
check "privic1: every density.privic estimate has 408 cells summing to 1" \
    awk -F, 'NR > 1 && ($1 != "privic" || $9 != 408 || $10 < 1 - 1e-9 ||
             $10 > 1 + 1e-9) { exit 1 }' "$TMPD/density1.csv"
http_get /density/privic >"$TMPD/density.geojson"
check "privic1: /density/privic is GeoJSON of 408 closed cells summing to 1" \
    python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["type"] == "FeatureCollection", doc["type"]
cells = doc["features"]
assert len(cells) == 408, len(cells)
total = 0.0
for f in cells:
    assert f["type"] == "Feature"
    ring = f["geometry"]["coordinates"][0]
    assert f["geometry"]["type"] == "Polygon" and ring[0] == ring[-1]
    p = f["properties"]["probability"]
    assert p >= 0.0
    total += p
assert abs(total - 1.0) < 1e-9, total
assert doc["channel_version"] >= 2 and doc["cycle"] >= 1, doc
' "$TMPD/density.geojson"
check_eq "privic1: unknown profile has no density" 404 \
    "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://$HTTP_EP/density/nope")"
version_before=$(metric tracesand_privic_channel_version)
cycles_before=$(metric tracesand_privic_cycles_total)

# --------------------------------------- 3. kill -9 and restart resume
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null
forget_pid "$DAEMON_PID"
start_daemon privic2 "${run_conf[@]}"
check "privic2: the restart says where the loop resumed" \
    grep -q "PRIVIC resumed at channel version $version_before" "$DAEMON_LOG"
check_eq "privic2: channel version after kill -9" "$version_before" \
    "$(metric tracesand_privic_channel_version)"
check_ge "privic2: cycle count after kill -9" "$cycles_before" \
    "$(metric tracesand_privic_cycles_total)"
start_tail privic2 "$USERS" --topic sanitized.privic --topic rejected
awk -v t="$((T0 + 1000))" -v users="$USERS" 'BEGIN { print "user,ts,lat,lon"
    for (u = 0; u < users; u++)
        printf "cab%02d,%d,37.7600,-122.4400\n", u, t + u }' >"$TMPD/after.csv"
replay "$TMPD/after.csv" --profile privic
wait_tail privic2 60
check "privic2: reports resume at the persisted version or later" \
    awk -F, -v c="$(col channel_version "$TAIL_OUT")" -v v="$version_before" \
        'NR > 1 && $c < v { exit 1 }' "$TAIL_OUT"
stop_daemon privic2

# --------------------------------------------- 4. a geoind feed's density
start_daemon geoind1 -o profiles.geoind.density=true \
    -o 'profiles.geoind.region="37.7228,-122.5153,37.7946,-122.3789"' \
    -o profiles.geoind.rows=17 -o profiles.geoind.cols=24 \
    -o profiles.geoind.cycle_reports=$CYCLE
start_tail geoind1 "$PER_CHUNK" --topic sanitized.geoind --topic rejected
replay "$TMPD/chunk1.csv" --profile geoind
wait_tail geoind1 60
check "geoind1: points carry no channel version" \
    awk -F, -v c="$(col channel_version "$TAIL_OUT")" 'NR > 1 && $c != "" { exit 1 }' "$TAIL_OUT"
tries=$(( TS_START_TIMEOUT * 10 ))
while [ "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://$HTTP_EP/density/geoind")" != 200 ] &&
      [ $tries -gt 0 ]; do
    sleep 0.1
    tries=$((tries - 1))
done
http_get /density/geoind >"$TMPD/geoind.geojson"
check "geoind1: /density/geoind has 408 cells summing to 1 at version 1" \
    python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["mechanism"] == "geoind" and doc["channel_version"] == 1, doc
cells = doc["features"]
assert len(cells) == 408, len(cells)
total = sum(f["properties"]["probability"] for f in cells)
assert abs(total - 1.0) < 1e-9, total
' "$TMPD/geoind.geojson"
stop_daemon geoind1

# ------------------------ 5. the paper's budgets, and the loop's control
# tracesan privic on the bundled sample with the paper's truncated BA
# (ba_max_steps = 5) and a fixed IBU budget (ibu_max_steps = 40): every
# cycle runs exactly those steps; --control never re-fits BA (no BA step
# after the first channel); both start from the same channel, so their
# first cycles agree.
SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
BOX=$(awk -F, 'NR > 1 { if (n++ == 0) { a = c = $3; b = d = $4 }
    if ($3 < a) a = $3; if ($3 > c) c = $3; if ($4 < b) b = $4; if ($4 > d) d = $4 }
    END { printf "%.6f,%.6f,%.6f,%.6f", a, b, c, d }' "$SAMPLE")
offline=(--config "$SHIPPED_CONF" --profile privic --seed 5
         -o "profiles.privic.region=\"$BOX\"" -o profiles.privic.cycle_reports=500
         -o profiles.privic.ba_max_steps=5 -o profiles.privic.ibu_max_steps=40)
"$TRACESAN" privic "${offline[@]}" "$SAMPLE" >"$TMPD/loop.csv" 2>"$TMPD/loop.log" ||
    fail "tracesan privic with ba_max_steps and ibu_max_steps: exit status $?"
"$TRACESAN" privic --control "${offline[@]}" "$SAMPLE" >"$TMPD/control.csv" \
    2>"$TMPD/control.log" || fail "tracesan privic --control: exit status $?"
check_eq "offline: 3 cycles of the loop" 3 "$(data_rows "$TMPD/loop.csv")"
check_eq "offline: 3 cycles of the control" 3 "$(data_rows "$TMPD/control.csv")"
check "offline: the loop re-fits BA with exactly 5 steps and runs 40 IBU steps" \
    awk -F, 'NR > 1 && ($5 != 5 || $7 != 40) { exit 1 }' "$TMPD/loop.csv"
check "offline: the control never re-fits BA, and runs 40 IBU steps" \
    awk -F, 'NR > 1 && ($5 != 0 || $7 != 40) { exit 1 }' "$TMPD/control.csv"
check_eq "offline: the first cycle is the same channel's in both" \
    "$(awk -F, 'NR == 2 { print $3 }' "$TMPD/loop.csv")" \
    "$(awk -F, 'NR == 2 { print $3 }' "$TMPD/control.csv")"
rc=0
"$TRACESAN" privic --control --compare-laplace "${offline[@]}" "$SAMPLE" \
    >/dev/null 2>&1 || rc=$?
check_eq "offline: --control with --compare-laplace is refused" 1 "$rc"
finish
