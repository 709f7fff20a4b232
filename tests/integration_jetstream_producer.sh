#!/usr/bin/env bash
# A producer's message stored twice is processed once (docs/scale-out.md,
# "Producers"). JetStream's duplicate window did not stop such a copy in
# the cluster test with the leader of TRACESAN_IN killed: a resend whose
# first copy's answer died with the leader was stored again under a new
# sequence, and 300 inputs were processed twice. Here the broker is made to store
# the copies without any failover: TRACESAN_IN is created beforehand with
# a 1 s duplicate window, and the same file is replayed twice under one
# --producer name, the second time after the window. The daemon must
# acknowledge every copy without processing it (counted, logged), and a
# later replay under another name must be processed as usual.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

USERS=64
PER_USER=5
POINTS=$((USERS * PER_USER))
BOUND_S=60

start_nats_single
PORT=${NATS_URL##*:}
# TRACESAN_IN as the daemon makes it (work queue, the 16 partition
# subjects), with a duplicate window of 1 s instead of 2 minutes.
subjects=$(printf '"tracesan.in.%d",' $(seq 0 15))
js_request "$PORT" '$JS.API.STREAM.CREATE.TRACESAN_IN' \
    "{\"name\":\"TRACESAN_IN\",\"subjects\":[${subjects%,}],\"retention\":\"workqueue\",\"storage\":\"file\",\"num_replicas\":1,\"duplicate_window\":1000000000}" \
    >"$TMPD/create.txt"
check "TRACESAN_IN is created with a 1 s duplicate window" \
    grep -q '"duplicate_window":1000000000' "$TMPD/create.txt"

make_trace "$TMPD/trace.csv" $USERS $PER_USER
start_instance a
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
wait_owned "$A_HTTP" 20
check_eq "a owns all 16 partitions" 16 "$OWNED"

replay_as() {  # NAME FILE: replay FILE under producer NAME, 10 per message
    "$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 --batch 10 \
        --producer "$1" "$2" 2>"$TMPD/replay-$1.log" ||
        fatal "replay as $1 failed: $(cat "$TMPD/replay-$1.log")"
    sed -n 's/.* in \([0-9]*\) messages .*/\1/p' "$TMPD/replay-$1.log"
}

first=$(replay_as fleet-1 "$TMPD/trace.csv")
wait_distinct_outputs $POINTS $BOUND_S || fail "the first replay's outputs are missing"
stored_first=$(stream_last_seq TRACESAN_IN)
note "the first replay stored $first messages (TRACESAN_IN last sequence $stored_first)"

sleep 2  # past the duplicate window: the broker stores the copies again
second=$(replay_as fleet-1 "$TMPD/trace.csv")
stored_second=$(stream_last_seq TRACESAN_IN)
check_eq "the broker stored all $first copies again" $((stored_first + first)) \
    "$stored_second"
dups=""
for _ in $(seq $((BOUND_S * 4))); do
    dups=$(curl -s "http://$A_HTTP/metrics" |
               awk '/^tracesand_partition_duplicate_inputs_total\{/ { n += $2 } END { print n + 0 }')
    [ "${dups:-0}" -ge "$first" ] && [ "$(stream_msgs TRACESAN_IN)" = 0 ] && break
    sleep 0.25
done
check_eq "the daemon acknowledged the $first copies without processing them" \
    "$first" "$dups"
check_eq "TRACESAN_IN keeps none of them" 0 "$(stream_msgs TRACESAN_IN)"
check "the copies are logged" grep -q 'a producer had sent before' "$A_LOG"

# A later trace under another name is new input, processed.
awk -F, 'NR == 1 { print; next } { printf "%s,%d,%s,%s\n", $1, $2 + 86400, $3, $4 }' \
    "$TMPD/trace.csv" >"$TMPD/later.csv"
cat "$TMPD/trace.csv" >"$TMPD/both.csv"
tail -n +2 "$TMPD/later.csv" >>"$TMPD/both.csv"
replay_as fleet-2 "$TMPD/later.csv" >/dev/null
if wait_distinct_outputs $((2 * POINTS)) $BOUND_S; then
    pass "another producer's messages are processed"
else
    fail "another producer's messages are missing"
fi
DAEMON_PID=$A_PID DAEMON_LOG=$A_LOG stop_daemon a
read_streams
"$PY" "$top_srcdir/tests/jetstream_check.py" "$TMPD/both.csv" \
    "$TMPD/outputs.csv" "$TMPD/ledger.csv" "$TMPD/changelog.csv" \
    "$A_LOG" >"$TMPD/checks.txt"
report_checks "$TMPD/checks.txt"
finish
