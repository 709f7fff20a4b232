#!/usr/bin/env bash
# PRIVIC loops and density estimates cluster-wide in the JetStream driver
# (issue 26 item 5, docs/scale-out.md), across a kill of the instance that
# runs them: one nats-server, two instances sharing 16 partitions, a privic
# profile with a short cycle, reports replayed at a steady rate, and the
# holder of the population lease SIGKILLed while they flow. From the
# population bucket's history and TRACESAN_OUT (tests/jetstream_privic_check.py):
#   - channel versions rise by exactly one per bucket revision (none
#     issued twice, none lost), and new ones were written by both holders;
#   - every report names a version the bucket held before the report was
#     published; per partition and per user, versions never go back in
#     stream order, across the handover;
#   - every record accounts for each report up to its stream position
#     exactly once (counted, stale or outside), so the new holder neither
#     lost nor double-counted what the old one had read;
#   - density.privic estimates (408 cells summing to 1) were published
#     before and after the kill, never going back in version;
# and on the survivor: it took the lease once the old one aged out, serves
# /density/privic at the bucket's last version, and releases through it.
# A single server shows the lease handover with the least time; the
# 3-node cluster test (integration_jetstream_cluster.sh) covers losing a
# server.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

USERS=40 PER_USER=30 RATE=100
POINTS=$((USERS * PER_USER))
start_nats_single
NATS_PORT=${NATS_URL##*:}

# The paper's San Francisco box (the shipped privic grid), a point a
# minute per user, 40 users interleaved.
awk -v t="$(( $(date +%s) - 7200 ))" -v users=$USERS -v per=$PER_USER 'BEGIN {
    srand(26); print "user,ts,lat,lon"
    for (j = 0; j < per; j++)
        for (u = 0; u < users; u++)
            printf "cab%02d,%d,%.6f,%.6f\n", u, t + 60 * j + u,
                   37.7300 + 0.0600 * rand(), -122.5000 + 0.1100 * rand()
}' >"$TMPD/trace.csv"

opts=(-o nats.lease_ttl_s=2 -o output.encoding=json
      -o output.density_publish_s=1
      -o profiles.privic.cycle_reports=40
      -o profiles.privic.ibu_max_iterations=200
      -o profiles.privic.points_per_window=1000)
start_instance a "${opts[@]}"
A_PID=$INSTANCE_PID A_HTTP=$INSTANCE_HTTP A_LOG=$INSTANCE_LOG
start_instance b "${opts[@]}"
B_PID=$INSTANCE_PID B_HTTP=$INSTANCE_HTTP B_LOG=$INSTANCE_LOG
wait_split "$A_HTTP" "$B_HTTP" 30
check_eq "the instances share the partitions" "8 8" \
    "$(owned_count "$A_HTTP") $(owned_count "$B_HTTP")"

holder() {  # holder LOG: 1 when its last population lease line is "acquired"
    sed -n 's/.*population lease \([a-z]*\) profile=privic .*/\1/p' "$1" |
        tail -n 1 | grep -qx acquired
}
tries=100
while ! holder "$A_LOG" && ! holder "$B_LOG" && [ $tries -gt 0 ]; do
    sleep 0.1
    tries=$((tries - 1))
done
if holder "$A_LOG"; then
    H_PID=$A_PID H_LOG=$A_LOG S_PID=$B_PID S_HTTP=$B_HTTP S_LOG=$B_LOG
else
    H_PID=$B_PID H_LOG=$B_LOG S_PID=$A_PID S_HTTP=$A_HTTP S_LOG=$A_LOG
fi
check "one instance holds the population lease" holder "$H_LOG"
check "and only one" bash -c "! grep -q 'population lease acquired' '$S_LOG'"

"$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 --batch 1 \
    --rate $RATE --profile privic "$TMPD/trace.csv" 2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")

# wait_cycles LOG N: until the instance logged N cycles (30 s at most);
# prints how many it did.
wait_cycles() {
    local tries=300 n
    while n=$(grep -c 'PRIVIC cycle [0-9]* on' "$1"); [ "$n" -lt "$2" ] &&
          [ $tries -gt 0 ]; do
        sleep 0.1
        tries=$((tries - 1))
    done
    echo "$n"
}

# Kill the holder once it has written a few versions.
check_ge "the holder ran cycles before the kill" 3 "$(wait_cycles "$H_LOG" 3)"
kill -KILL "$H_PID"
mark_ms KILL_MS
wait "$H_PID" 2>/dev/null
forget_pid "$H_PID"

wait_replay "$REPLAY_PID" $(( POINTS / RATE + 60 )) "replay: every point stored"
CHECK=$top_srcdir/tests/jetstream_privic_check.py
tries=60
while [ "$("$PY" "$CHECK" --count "$NATS_PORT")" -lt $POINTS ] &&
      [ $tries -gt 0 ]; do
    sleep 1
    tries=$((tries - 1))
done
check_ge "the survivor ran cycles after the takeover" 3 \
    "$(wait_cycles "$S_LOG" 3)"
check "the survivor took the lease once the old one aged out" \
    grep -q 'population lease acquired profile=privic .* reason=expired' "$S_LOG"
check "it resumed the loop from the bucket" \
    grep -q 'PRIVIC loop resumed at channel version [0-9]* after [1-9]' "$S_LOG"
# A density tick after the survivor's last cycle.
sleep 2

"$PY" "$CHECK" "$NATS_PORT" \
    "$TMPD/trace.csv" "$KILL_MS" privic >"$TMPD/checks.txt"
report_checks "$TMPD/checks.txt"
LAST=$(sed -n 's/^# last_version //p' "$TMPD/checks.txt")

curl -s --max-time 5 "http://$S_HTTP/density/privic" >"$TMPD/density.geojson"
check "the survivor serves /density/privic at the bucket's last version" \
    "$PY" -c '
import json, sys
doc = json.load(open(sys.argv[1]))
cells = doc["features"]
assert len(cells) == 408, len(cells)
total = sum(f["properties"]["probability"] for f in cells)
assert abs(total - 1.0) < 1e-9, total
assert doc["channel_version"] == int(sys.argv[2]), (doc["channel_version"], sys.argv[2])
' "$TMPD/density.geojson" "${LAST:-0}"
curl -s --max-time 5 "http://$S_HTTP/metrics" >"$TMPD/metrics"
check_eq "the survivor releases through the last version" "${LAST:-?}" \
    "$(sed -n 's/^tracesand_privic_channel_version{profile="privic"} //p' "$TMPD/metrics")"
check_eq "and says it holds the lease" 1 \
    "$(sed -n 's/^tracesand_privic_lease_held{profile="privic"} //p' "$TMPD/metrics")"
check_eq "no partition was restored without its version caught up" 0 \
    "$(grep -c 'population bucket could not be read' "$S_LOG")"

kill -TERM "$S_PID"
wait_for_pid "$S_PID" 20 || fail "the survivor did not stop"
check "at exit it hands the lease back" \
    grep -q 'population lease released profile=privic .* reason=shutdown' "$S_LOG"
finish
