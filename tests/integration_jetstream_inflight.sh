#!/usr/bin/env bash
# Several groups in flight, and an instance killed between a record's
# append and its publish (issue 30). One nats-server, two instances with
# nats.groups_in_flight = 8 and one input message per group
# (nats.fetch_batch = 1), so a partition has several groups between fetch
# and acknowledgement at once. Instance a carries the test hook
# TRACESAND_TEST_EXIT_BEFORE_PUBLISH: once it has committed enough
# groups, it exits (as kill -9 would: _exit, nothing flushed or handed
# back) right after the quorum stored a group's record and before any of
# its outcomes is published, at a moment when other groups of the same
# partition are in flight. b takes a's partitions over; its rebuild must
# publish the committed group's outcomes (under their message ids), and
# process the groups a had not committed as if for the first time. At
# the end: every input has exactly one output, the replicated ledger
# equals the eps published (nothing lost, nothing debited twice), no
# window is over budget, no partition had two owners at once. (No
# snapshot rolls the changelog up here, so a's last record stays to be
# looked at.)
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

TTL=2
USERS=200
PER_USER=40
POINTS=$((USERS * PER_USER))
# Groups a commits before the hook may fire (then at the first commit
# with another group of its partition in flight).
EXIT_AFTER=150
COMMON=(-o nats.lease_ttl_s=$TTL -o nats.groups_in_flight=8
        -o nats.fetch_batch=1 -o nats.snapshot_every=100000)

start_nats_single
make_trace "$TMPD/trace.csv" $USERS $PER_USER

TRACESAND_TEST_EXIT_BEFORE_PUBLISH=$EXIT_AFTER \
    start_instance a "${COMMON[@]}"
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
wait_owned "$A_HTTP" 20
check_eq "a owns all 16 partitions" 16 "$OWNED"
start_instance b "${COMMON[@]}" -o nats.standby=true
B_PID=$INSTANCE_PID B_LOG=$INSTANCE_LOG B_HTTP=$INSTANCE_HTTP
wait_split "$A_HTTP" "$B_HTTP" 20
check_eq "a and b own 8 partitions each" "8 8" \
    "$SPLIT"

# Small messages as fast as they are stored, so that groups are many and
# each partition has a backlog.
"$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 --batch 4 \
    "$TMPD/trace.csv" 2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")

# Groups in flight, seen from outside while a runs.
most=0
for _ in $(seq 100); do
    kill -0 "$A_PID" 2>/dev/null || break
    n=$(curl -s "http://$A_HTTP/metrics" |
            awk '/^tracesand_partition_groups_in_flight\{/ { if ($2 > m) m = $2 } END { print m + 0 }')
    [ "${n:-0}" -gt "$most" ] && most=$n
    sleep 0.1
done
note "a had at most $most groups of one partition in flight (seen on /metrics every 0.1 s)"

wait_for_pid "$A_PID" 60 || fatal "a did not exit through the test hook"
forget_pid "$A_PID"
check_eq "a exited through the hook (status 137)" 137 "$waited_status"
hook=$(grep 'test hook: exiting' "$A_LOG" | tail -n 1)
note "${hook#tracesand: warn: }"
EXIT_MS=$(sed -n 's/.*test hook: exiting at_ms=\([0-9]*\).*/\1/p' <<<"$hook")
HOOK_PART=$(sed -n 's/.*after partition \([0-9]*\).s record.*/\1/p' <<<"$hook")
HOOK_INPUT=$(sed -n 's/.*inputs up to \([0-9]*\) was stored.*/\1/p' <<<"$hook")
in_flight=$(sed -n 's/.*with \([0-9]*\) groups in flight.*/\1/p' <<<"$hook")
check_ge "the hook fired with several groups of the partition in flight" 2 \
    "${in_flight:-0}"

wait_replay "$REPLAY_PID" 60 "replay exits 0"
if wait_distinct_outputs $POINTS 90; then pass "TRACESAN_OUT holds $POINTS outputs"
else fail "outputs missing"; show_file "$B_LOG" 30; fi
check "b republished the committed group a never published (partition $HOOK_PART)" \
    grep -qE "partition $HOOK_PART restored: .* [1-9][0-9]* records republished" "$B_LOG"
DAEMON_PID=$B_PID DAEMON_LOG=$B_LOG stop_daemon b

read_streams
# The group a committed and never published: its record is in the
# changelog (written by a), and its outcomes are in TRACESAN_OUT once.
check "the record a stored before exiting is in the changelog" \
    bash -c "awk -F, -v p='$HOOK_PART' -v l='$HOOK_INPUT' '\$2 == p && \$4 == \"a\" && \$6 == l' '$TMPD/changelog.csv' | grep -q ."
check_eq "its last input's outcomes were published once" 1 \
    "$(awk -F, -v id="$HOOK_PART.$HOOK_INPUT.0" '$2 == id' "$TMPD/outputs.csv" | wc -l)"
stream_checks "$A_LOG:$EXIT_MS" "$B_LOG"
finish
