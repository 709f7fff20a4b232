#!/usr/bin/env bash
# PRIVIC loops and density estimates cluster-wide in the JetStream driver
# (issue 26 item 5, docs/scale-out.md), across two handovers of the
# population lease while reports flow: one nats-server, two instances
# sharing 16 partitions, a privic profile with a short cycle, 1,600
# reports replayed at 100 a second. The lease's holder is frozen (SIGSTOP)
# past its lease, the other instance takes over, the first is thawed (it
# must find it lost the lease and write nothing), then the new holder is
# killed (SIGKILL) and the first takes the lease back. From the population
# bucket's history and TRACESAN_OUT (tests/jetstream_privic_check.py):
#   - channel versions rise by exactly one per bucket revision (none
#     issued twice, none lost), and new ones were written on both sides
#     of the kill;
#   - every report names a version the bucket held before the report was
#     published; per partition and per user, versions never go back in
#     stream order, across the handovers;
#   - every record accounts for each report up to its stream position
#     exactly once (counted, stale or outside), so no holder lost or
#     double-counted what the one before had read;
#   - density.privic estimates (408 cells summing to 1) were published
#     before and after the kill, never going back in version;
# and on the survivor: it serves /density/privic at the bucket's last
# version, releases through it, and hands the lease back at exit.
# A single server shows the lease handovers with the least time; the
# 3-node cluster test (integration_jetstream_cluster.sh) covers losing a
# server.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

USERS=40 PER_USER=40 RATE=100
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
    "$SPLIT"

holder() {  # holder LOG: 1 when its last population lease line is "acquired"
    sed -n 's/.*population lease \([a-z]*\) profile=privic .*/\1/p' "$1" |
        tail -n 1 | grep -qx acquired
}
tries=100
while ! holder "$A_LOG" && ! holder "$B_LOG" && [ $tries -gt 0 ]; do
    sleep 0.1
    tries=$((tries - 1))
done
# H: the first holder (frozen, thawed, the survivor); S: the second (killed).
if holder "$A_LOG"; then
    H_PID=$A_PID H_LOG=$A_LOG H_HTTP=$A_HTTP
    S_PID=$B_PID S_LOG=$B_LOG S_HTTP=$B_HTTP
else
    H_PID=$B_PID H_LOG=$B_LOG H_HTTP=$B_HTTP
    S_PID=$A_PID S_LOG=$A_LOG S_HTTP=$A_HTTP
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

# wait_log LOG PATTERN: until LOG has a line matching PATTERN (20 s).
wait_log() {
    local tries=200
    while ! grep -q "$2" "$1" && [ $tries -gt 0 ]; do
        sleep 0.1
        tries=$((tries - 1))
    done
}

# 1. The holder frozen (SIGSTOP) past its lease once it has written a few
#    versions: the other instance takes the lease and goes on; thawed, the
#    first finds it lost the lease and writes nothing.
check_ge "the first holder ran cycles" 3 "$(wait_cycles "$H_LOG" 3)"
# The other instance adopts each version from the bucket (its partitions
# stay where they are, so no restore installs it).
version_of() {
    curl -s --max-time 5 "http://$1/metrics" |
        sed -n 's/^tracesand_privic_channel_version{profile="privic"} //p'
}
tries=50
while [ "$(version_of "$S_HTTP")" -lt 4 ] && [ $tries -gt 0 ]; do
    sleep 0.1
    tries=$((tries - 1))
done
check_ge "the other instance releases through the versions it adopted" 4 \
    "$(version_of "$S_HTTP")"
kill -STOP "$H_PID"
wait_log "$S_LOG" 'population lease acquired profile=privic'
check "the other instance took the lease once the frozen one's aged out" \
    grep -q 'population lease acquired profile=privic .* reason=expired' "$S_LOG"
check_ge "and ran cycles" 2 "$(wait_cycles "$S_LOG" 2)"
kill -CONT "$H_PID"
wait_log "$H_LOG" 'population lease lost profile=privic'
check "thawed, the first holder found it had lost the lease" \
    grep -q 'population lease lost profile=privic' "$H_LOG"
# 2. The new holder killed (SIGKILL) while reports flow: the first takes the
#    lease back and resumes from the bucket.
kill -KILL "$S_PID"
mark_ms KILL_MS
wait "$S_PID" 2>/dev/null
forget_pid "$S_PID"

wait_replay "$REPLAY_PID" $(( POINTS / RATE + 60 )) "replay: every point stored"
CHECK=$top_srcdir/tests/jetstream_privic_check.py
tries=60
while [ "$("$PY" "$CHECK" --count "$NATS_PORT")" -lt $POINTS ] &&
      [ $tries -gt 0 ]; do
    sleep 1
    tries=$((tries - 1))
done
check_eq "the first holder took the lease back after the kill" 2 \
    "$(grep -c 'population lease acquired profile=privic' "$H_LOG")"
# Cycles it ran between losing the lease and taking it back: none.
check_eq "it wrote nothing while it did not hold the lease" 0 \
    "$(awk '/population lease lost profile=privic/ { lost = 1 }
            /population lease acquired profile=privic/ { lost = 0 }
            lost && /PRIVIC cycle [0-9]* on/ { n++ } END { print n + 0 }' "$H_LOG")"
check_ge "and ran cycles after the kill" 2 \
    "$(awk '/population lease acquired/ { n++ } n == 2 && /PRIVIC cycle [0-9]* on/ { c++ }
            END { print c + 0 }' "$H_LOG")"
check "it resumed the loop from the bucket" \
    grep -q 'PRIVIC loop resumed at channel version [0-9]* after [1-9]' "$H_LOG"
# A density tick after its last cycle.
sleep 2

"$PY" "$CHECK" "$NATS_PORT" \
    "$TMPD/trace.csv" "$KILL_MS" privic >"$TMPD/checks.txt"
report_checks "$TMPD/checks.txt"
LAST=$(sed -n 's/^# last_version //p' "$TMPD/checks.txt")

curl -s --max-time 5 "http://$H_HTTP/density/privic" >"$TMPD/density.geojson"
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
curl -s --max-time 5 "http://$H_HTTP/metrics" >"$TMPD/metrics"
check_eq "the survivor releases through the last version" "${LAST:-?}" \
    "$(sed -n 's/^tracesand_privic_channel_version{profile="privic"} //p' "$TMPD/metrics")"
check_eq "and says it holds the lease" 1 \
    "$(sed -n 's/^tracesand_privic_lease_held{profile="privic"} //p' "$TMPD/metrics")"
check_eq "no partition was restored without its version caught up" 0 \
    "$(grep -c 'population bucket could not be read' "$H_LOG")"

kill -TERM "$H_PID"
wait_for_pid "$H_PID" 20 || fail "the survivor did not stop"
check "at exit it hands the lease back" \
    grep -q 'population lease released profile=privic .* reason=shutdown' "$H_LOG"
finish
