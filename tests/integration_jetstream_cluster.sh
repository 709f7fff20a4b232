#!/usr/bin/env bash
# The scale-out acceptance run (issues 16 and 30, docs/scale-out.md): a
# 3-node nats-server cluster with JetStream and replicas = 3, two
# tracesand instances keeping warm standby copies of each other's
# partitions, P = 16, a replay of 100,000 points of 1,000 users. During it
# one instance is killed with SIGKILL (its local state directory deleted)
# and then one nats-server node. At the end: every input has exactly one
# output after dedupe, the replicated ledger covers (and equals) the eps
# published for every user, no window is over budget, and no partition was
# held by two instances at once.
#
# Printed: how long after the kill the survivor held and had rebuilt the
# killed instance's partitions (issue 30: within lease_ttl + 2 s), and how
# long after the node's kill every output was there (issue 30: within
# 30 s). Asserted: the survivor kept every lease through the node's loss
# (no "lease not renewed" or "taken" after it: its renewals ride out the
# lease bucket's leader election, docs/scale-out.md "Leases"), and the outputs'
# completion under a generous ceiling.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

: "${JS_USERS:=1000}"
: "${JS_PER_USER:=100}"
: "${JS_RATE:=4000}"
# Long enough for the survivor to ride out the leader election that
# follows the loss of a node (4 to 9 s of raft election timeout in
# nats-server 2.9; an owner keeps its lease through 3/4 ttl of silence),
# as docs/scale-out.md advises.
TTL=15
# The taker holds the leases a ttl after it last saw them renewed; the
# rebuilds, from standby copies, add little. Issue 30's target (ttl + 2 s)
# is printed; the assertion only catches a takeover that did not happen
# or waited for something else (a second ttl, a full rebuild), with room
# for 2 loaded cores.
BOUND_MS=10000
# What "outputs complete after the node's loss" may take here at most;
# the target (30 s) is printed, not asserted: 2 shared cores are no
# measure of a cluster.
COMPLETE_CEILING_S=150
POINTS=$((JS_USERS * JS_PER_USER))
started=$(date +%s)

start_nats_cluster
make_trace "$TMPD/trace.csv" "$JS_USERS" "$JS_PER_USER"
mkdir -p "$TMPD/a-state"
COMMON=(-o nats.lease_ttl_s=$TTL -o nats.replicas=3 -o nats.partitions=16
        -o nats.standby=true)

start_instance a "${COMMON[@]}" -o "state.dir=$TMPD/a-state"
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
start_instance b "${COMMON[@]}"
B_PID=$INSTANCE_PID B_LOG=$INSTANCE_LOG B_HTTP=$INSTANCE_HTTP
wait_split "$A_HTTP" "$B_HTTP" 60
check_eq "two instances own 8 partitions each" "8 8" \
    "$SPLIT"

# The producer talks to node 0; node 2 is the one killed.
"$TRACESAN" replay --jetstream "nats://127.0.0.1:${NATS_PORTS[0]}" \
    --partitions 16 --replicas 3 --rate "$JS_RATE" "$TMPD/trace.csv" \
    2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")
sleep 4
A_HELD=$(held_partitions "$A_LOG" | tr '\n' ' ')
kill -KILL "$A_PID"
mark_ms KILL_MS
wait "$A_PID" 2>/dev/null
forget_pid "$A_PID"
rm -rf "$TMPD/a-state"
note "killed instance a at $KILL_MS (it held partitions $A_HELD)"

wait_owned "$B_HTTP" $(( TTL + 30 ))
check_eq "b owns all 16 partitions after the kill" 16 "$OWNED"
last_take=$(sed -n 's/.*lease acquired .* at_ms=\([0-9]*\).*/\1/p' "$B_LOG" |
                sort -n | tail -n 1)
last_take=${last_take:-0}
takeover_ms=$((last_take - KILL_MS))
last_restore=0
for p in $A_HELD; do
    at=$(sed -n "s/.*partition $p restored: .* at_ms=\([0-9]*\).*/\1/p" "$B_LOG" |
             tail -n 1)
    [ "${at:-0}" -gt "$last_restore" ] && last_restore=$at
done
restored_ms=$((last_restore - KILL_MS))
note "takeover: b held a's partitions $takeover_ms ms and had rebuilt them $restored_ms ms after the kill (lease_ttl $((TTL * 1000)) ms; issue 30's target: lease_ttl + 2000 ms)"
if [ "$last_take" -gt "$KILL_MS" ] && [ $takeover_ms -le $((TTL * 1000 + BOUND_MS)) ]; then
    pass "takeover within lease_ttl + $BOUND_MS ms ($takeover_ms ms)"
else
    fail "takeover took $takeover_ms ms (lease_ttl $((TTL * 1000)) + $BOUND_MS)"
fi

# The node killed is the one leading the changelog (TRACESAN_STATE), or
# failing that the outputs, when that is n1 or n2 (the producer talks to
# n0): then appends and publishes in flight lose their answers and the
# streams elect new leaders, the hard case. Else n2.
# JS_VICTIM_STREAMS=TRACESAN_IN kills the input stream's leader instead:
# resends of messages stored before the election may be stored again
# (docs/scale-out.md, "Producers").
victim=2
for stream in ${JS_VICTIM_STREAMS:-TRACESAN_STATE TRACESAN_OUT}; do
    leader=$(js_api "${NATS_PORTS[0]}" "\$JS.API.STREAM.INFO.$stream" |
                 sed -n 's/.*"leader":"n\([0-9]\)".*/\1/p')
    note "$stream is led by n${leader:-?}"
    if [ "${leader:-0}" = 1 ] || [ "${leader:-0}" = 2 ]; then
        victim=$leader
        break
    fi
done
NODE_LOG_MARK=$(wc -l <"$B_LOG")
kill_nats "$victim"
mark_ms NODE_KILL_MS
note "killed nats-server node n$victim at $NODE_KILL_MS"

wait_replay "$REPLAY_PID" 150 \
    "replay exits 0 (it resends what a failover left unanswered)"
complete_ms=""
deadline=$(( $(date +%s) + COMPLETE_CEILING_S + 60 ))
while [ "$(date +%s)" -lt $deadline ]; do
    have=$(stream_msgs TRACESAN_OUT)
    if [ "${have:-0}" -ge $POINTS ]; then
        mark_ms DONE_MS
        complete_ms=$((DONE_MS - NODE_KILL_MS))
        break
    fi
    sleep 0.5
done
if wait_distinct_outputs $POINTS 60; then pass "TRACESAN_OUT holds $POINTS outputs"
else fail "outputs missing"; show_file "$B_LOG" 30; fi
note "outputs complete ${complete_ms:-never} ms after node n$victim's kill (issue 30's target: 30000 ms)"
check "outputs complete within ${COMPLETE_CEILING_S} s of the node's kill (${complete_ms:-never} ms)" \
    test -n "$complete_ms" -a "${complete_ms:-0}" -le $((COMPLETE_CEILING_S * 1000))
tail -n +"$NODE_LOG_MARK" "$B_LOG" | grep -v 'rejected user=\|more rejections' |
    grep 'lease\|warn' | sed 's/^/#   after the node kill: /' | head -n 20
# Nobody else is there to take them: a lease "taken" is b's own renewal,
# stored with its answer lost in the election, read as someone else's
# (one run of 11 lost all 16 that way, and 19 s of throughput, before
# the refusal was settled by reading the lease back).
check "b kept every lease through the node's loss (none 'not renewed' or 'taken')" \
    bash -c "! tail -n +$NODE_LOG_MARK '$B_LOG' | grep -q 'lease not renewed\|reason=lease taken\|lease lost .*reason=taken'"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$B_HTTP/healthz")
check_eq "/healthz of b answers 200 with one node down" 200 "$code"
DAEMON_PID=$B_PID DAEMON_LOG=$B_LOG stop_daemon b
grep 'jetstream summary' "$B_LOG" | sed 's/^/# /'

read_streams
# The standby copies: b's rebuild of each of a's partitions read only the
# records its copy did not have yet, not the changelog before its fence.
standby_ok=1
for p in $A_HELD; do
    read_n=$(sed -n "s/.*partition $p restored: .* \([0-9]*\) records read.*/\1/p" "$B_LOG" |
                 tail -n 1)
    before=$(awk -F, -v p="$p" 'NR > 1 && $2 == p { if ($3 == "fence" && $4 == "b") exit; n++ }
                                END { print n + 0 }' "$TMPD/changelog.csv")
    note "partition $p: b's rebuild read ${read_n:-?} of the $before records before its fence"
    [ "${read_n:-999}" -lt "$before" ] || standby_ok=0
done
check "b rebuilt a's partitions from its standby copies (only their tails read)" \
    test $standby_ok = 1
stream_checks "$A_LOG:$KILL_MS" "$B_LOG"
note "cluster run took $(( $(date +%s) - started )) s"
finish
