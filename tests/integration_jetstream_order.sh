#!/usr/bin/env bash
# The producer keeps each user's order across the loss of the stream's
# leader (issue 25, "Also found"). A 3-node cluster, TRACESAN_IN with 3
# replicas, one tracesand instance; `tracesan replay --jetstream` publishes
# a time-ordered trace to all three servers and, one second in, the
# server leading TRACESAN_IN is killed. Publishes refused during the
# election, or whose answer died with the server, must be stored before
# anything after them on their partition: then no update is rejected as
# time_went_backwards and every input has exactly one output. Before the
# fix, refused publishes were re-sent from libnats' error callback after
# later messages of the same partition were stored.
#
# Also: replay refuses to create the streams with a guessed replica count,
# and `tracesan jetstream outputs` names rejection reasons.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

: "${JS_USERS:=150}"
: "${JS_PER_USER:=200}"
: "${JS_RATE:=5000}"
# The producer under test (another build's tracesan shows what it did).
: "${REPLAY_TRACESAN:=$TRACESAN}"
POINTS=$((JS_USERS * JS_PER_USER))

start_nats_cluster
make_trace "$TMPD/trace.csv" "$JS_USERS" "$JS_PER_USER"

# Before any daemon made the streams, replay does not guess their
# replicas. (Until the cluster has elected its JetStream leader, replay
# fails for that reason instead: tried again.)
for _ in $(seq 60); do
    "$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 \
        "$TMPD/trace.csv" 2>"$TMPD/guess.log"
    guess_status=$?
    grep -q 'does not exist yet' "$TMPD/guess.log" && break
    sleep 0.5
done
check_eq "replay before any daemon, without --replicas, exits 1" 1 "$guess_status"
check "... and says how to go on" \
    grep -q 'TRACESAN_IN does not exist yet: start a tracesand first, or give the daemons. nats.replicas with --replicas R' \
    "$TMPD/guess.log"
check "... and creates no stream" \
    bash -c "! '$TRACESAN' jetstream --server '$NATS_URL' status 2>/dev/null | grep -q ."

start_instance a -o nats.replicas=3 -o nats.partitions=16 \
    -o nats.lease_ttl_s=6
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
wait_owned "$A_HTTP" 30
check_eq "a owns all 16 partitions" 16 "$OWNED"
check "the streams were created with 3 replicas" \
    bash -c "'$TRACESAN' jetstream --server '$NATS_URL' status | grep -q 'stream=TRACESAN_IN .* replicas=3'"

# stream_leader: the server name (n0..n2) leading TRACESAN_IN.
stream_leader() {
    local port
    for port in "${NATS_PORTS[@]}"; do
        js_api "$port" '$JS.API.STREAM.INFO.TRACESAN_IN' 2>/dev/null |
            sed -n 's/.*"cluster":{[^}]*"leader":"\(n[0-9]\)".*/\1/p' |
            head -n 1 | grep . && return 0
    done
    return 1
}
LEADER=$(stream_leader) || fatal "no leader of TRACESAN_IN"
note "TRACESAN_IN is led by $LEADER"

"$REPLAY_TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 \
    --rate "$JS_RATE" "$TMPD/trace.csv" 2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")
sleep 1
kill_nats "${LEADER#n}"
note "killed the stream leader $LEADER at $(now_ms)"

wait_replay "$REPLAY_PID" 150 "replay exits 0 after the leader's loss"
if wait_distinct_outputs $POINTS 240; then pass "TRACESAN_OUT holds $POINTS outputs"
else fail "outputs missing"; show_file "$A_LOG" 20; fi
DAEMON_PID=$A_PID DAEMON_LOG=$A_LOG stop_daemon a

read_streams
check_eq "outputs: the header names the columns" \
    "seq,msg_id,kind,user,ts_ms,lat,lon,eps_point,eps_spent_window,eps_remaining,window_start_ms,reason" \
    "$(head -n 1 "$TMPD/outputs.csv")"
check "outputs: a rejection carries its reason's name" \
    grep -q ',rejected,.*,budget_exhausted$' "$TMPD/outputs.csv"
check "outputs: a sanitized point carries its coordinates" \
    grep -qE ',sanitized,u[0-9]+,[0-9]+,-?[0-9]+\.[0-9]{7},-?[0-9]+\.[0-9]{7},' "$TMPD/outputs.csv"
stream_checks "$A_LOG"
finish
