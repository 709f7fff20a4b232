#!/usr/bin/env bash
# The scale-out acceptance run (issue 16, docs/scale-out.md): a 3-node
# nats-server cluster with JetStream and replicas = 3, two tracesand
# instances, P = 16, a replay of 100,000 points of 1,000 users. During it
# one instance is killed with SIGKILL (its local state directory deleted)
# and then one nats-server node. At the end: every input has exactly one
# output after dedupe, the replicated ledger covers (and equals) the eps
# published for every user, no window is over budget, and no partition was
# held by two instances at once.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

: "${JS_USERS:=1000}"
: "${JS_PER_USER:=100}"
: "${JS_RATE:=8000}"
# Longer than the leader elections that follow the loss of a node (a few
# seconds, more on 2 shared cores), as docs/scale-out.md advises.
TTL=6
# The taker notices an aged lease at its next tick (ttl/4) and rebuilds
# the partition; a cluster reelecting a stream leader adds a few seconds.
BOUND_MS=4000
POINTS=$((JS_USERS * JS_PER_USER))
started=$(date +%s)

start_nats_cluster
make_trace "$TMPD/trace.csv" "$JS_USERS" "$JS_PER_USER"
mkdir -p "$TMPD/a-state"
COMMON=(-o nats.lease_ttl_s=$TTL -o nats.replicas=3 -o nats.partitions=16)

start_instance a "${COMMON[@]}" -o "state.dir=$TMPD/a-state"
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
start_instance b "${COMMON[@]}"
B_PID=$INSTANCE_PID B_LOG=$INSTANCE_LOG B_HTTP=$INSTANCE_HTTP
wait_split "$A_HTTP" "$B_HTTP" 30
check_eq "two instances own 8 partitions each" "8 8" \
    "$(owned_count "$A_HTTP") $(owned_count "$B_HTTP")"

# The producer talks to node 0; node 2 is the one killed.
"$TRACESAN" replay --jetstream "nats://127.0.0.1:${NATS_PORTS[0]}" \
    --partitions 16 --replicas 3 --rate "$JS_RATE" "$TMPD/trace.csv" \
    2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")
sleep 4
kill -KILL "$A_PID"
mark_ms KILL_MS
wait "$A_PID" 2>/dev/null
forget_pid "$A_PID"
rm -rf "$TMPD/a-state"
note "killed instance a at $KILL_MS"

wait_owned "$B_HTTP" $(( TTL + 15 ))
check_eq "b owns all 16 partitions after the kill" 16 "$(owned_count "$B_HTTP")"
last_take=$(sed -n 's/.*lease acquired .* at_ms=\([0-9]*\).*/\1/p' "$B_LOG" |
                sort -n | tail -n 1)
last_take=${last_take:-0}
takeover_ms=$((last_take - KILL_MS))
note "takeover completed $takeover_ms ms after the kill (lease_ttl $((TTL * 1000)) ms)"
if [ "$last_take" -gt "$KILL_MS" ] && [ $takeover_ms -le $((TTL * 1000 + BOUND_MS)) ]; then
    pass "takeover within lease_ttl + $BOUND_MS ms ($takeover_ms ms)"
else
    fail "takeover took $takeover_ms ms (lease_ttl $((TTL * 1000)) + $BOUND_MS)"
fi

kill_nats 2
note "killed nats-server node n2 at $(now_ms)"

wait_replay "$REPLAY_PID" 120 \
    "replay exits 0 (it resends what a failover left unanswered)"
if wait_distinct_outputs $POINTS 240; then pass "TRACESAN_OUT holds $POINTS outputs"
else fail "outputs missing"; show_file "$B_LOG" 30; fi
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$B_HTTP/healthz")
check_eq "/healthz of b answers 200 with one node down" 200 "$code"
DAEMON_PID=$B_PID DAEMON_LOG=$B_LOG stop_daemon b
grep 'jetstream summary' "$B_LOG" | sed 's/^/# /'

read_streams
stream_checks "$A_LOG:$KILL_MS" "$B_LOG"
note "cluster run took $(( $(date +%s) - started )) s"
finish
