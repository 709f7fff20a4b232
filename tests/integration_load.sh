#!/usr/bin/env bash
# Backpressure under load (real processes): a PUSH output feeding a slow
# consumer, flooded by a producer at twice the rate the consumer can take.
#   - the daemon's memory stays bounded (VmRSS samples during the flood stay
#     under a bound derived from the configured HWMs and message sizes),
#   - it stays responsive (/healthz answers 200 within 1 s throughout),
#   - every outcome is accounted for: received by the consumer or counted
#     in tracesand_dropped_total{cause="output_hwm"}, and input pauses are
#     counted in tracesand_input_pauses_total{cause="output_full"}.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
ZMQ_PULL_COUNT=${ZMQ_PULL_COUNT:-$top_builddir/tests/zmq_pull_count}
[ -x "$ZMQ_PULL_COUNT" ] || fatal "$ZMQ_PULL_COUNT is not built"
# ASan keeps freed memory in a quarantine (256 MiB by default), which would
# read as growth; a small one keeps the RSS bound meaningful under
# --enable-sanitizers. Ignored by uninstrumented builds.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"

# The consumer sleeps CONSUMER_DELAY_US per message, so it takes at most
# 1e6 / CONSUMER_DELAY_US messages/s (less with receive overhead): that is
# the sustainable rate, one output message per update. The producer sends
# at twice that.
CONSUMER_DELAY_US=500
SUSTAINABLE_RATE=$(( 1000000 / CONSUMER_DELAY_US ))
FLOOD_RATE=$(( 2 * SUSTAINABLE_RATE ))
# TS_LOAD_SECONDS=60 makes a flood big enough that unbounded queueing
# would be far above the RSS bound (CI keeps it short).
FLOOD_SECONDS=${TS_LOAD_SECONDS:-4}
POINTS=$(( FLOOD_RATE * FLOOD_SECONDS ))
USERS=200
BATCH=20
INPUT_HWM=1000
OUTPUT_HWM=500
READ_BUDGET=256

NOW=$(date +%s)
awk -v t="$((NOW - 3600))" -v n="$POINTS" -v users="$USERS" 'BEGIN {
    print "user,ts,lat,lon";
    for (i = 0; i < n; i++)
        printf "load%03d,%d,%.5f,%.5f\n", i % users, t + int(i / users),
               40.7 + (i % 97) * 1e-4, -73.9 - (i % 89) * 1e-4 }' >"$TMPD/load.csv"

start_daemon load -o 'output.type=push' -o "output.hwm=$OUTPUT_HWM" \
    -o "input.hwm=$INPUT_HWM" -o "input.read_budget=$READ_BUDGET"
[ -n "$HTTP_EP" ] || fatal "the ready line names no http endpoint"

vmrss_kb() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status" 2>/dev/null; }
metric() {
    awk -v s="$1" '$1 == s { print $2; exit }' "$2"
}
BASELINE_KB=$(vmrss_kb "$DAEMON_PID")

"$ZMQ_PULL_COUNT" --connect "$OUTPUT_EP" --count "$POINTS" --timeout 3 \
    --delay-us "$CONSUMER_DELAY_US" >"$TMPD/consumer.out" 2>"$TMPD/consumer.err" &
CONSUMER_PID=$!
background_pids+=("$CONSUMER_PID")
sleep 0.3

FLOOD_STARTED=$(date +%s.%N)
replay_in_background flood "$TMPD/load.csv" --rate "$FLOOD_RATE" --batch "$BATCH"

# Sample while the producer floods and the consumer drains the backlog.
max_rss_kb=0 max_healthz_s=0 healthz_bad=0 samples=0
while is_running "$CONSUMER_PID"; do
    rss=$(vmrss_kb "$DAEMON_PID")
    [ -n "$rss" ] && [ "$rss" -gt "$max_rss_kb" ] && max_rss_kb=$rss
    reply=$(curl -s --max-time 2 -o /dev/null -w '%{http_code} %{time_total}' \
                "http://$HTTP_EP/healthz")
    code=${reply% *} took=${reply#* }
    [ "$code" = 200 ] || healthz_bad=$((healthz_bad + 1))
    max_healthz_s=$(awk -v a="$max_healthz_s" -v b="$took" 'BEGIN { print (b > a) ? b : a }')
    samples=$((samples + 1))
    sleep 0.2
done
wait "$CONSUMER_PID" 2>/dev/null
forget_pid "$CONSUMER_PID"
wait_for_pid "$REPLAY_PID" 10 || fail "replay did not finish"
check "replay sent every point" grep -q "sent $POINTS updates" "$TMPD/flood.replay.log"
received=$(cat "$TMPD/consumer.out")
flood_s=$(awk -v a="$FLOOD_STARTED" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

curl -s --max-time 5 "http://$HTTP_EP/metrics" >"$TMPD/metrics.txt"
updates=$(metric tracesand_updates_total "$TMPD/metrics.txt")
published=$(metric tracesand_messages_published_total "$TMPD/metrics.txt")
dropped_hwm=$(metric 'tracesand_dropped_total{cause="output_hwm"}' "$TMPD/metrics.txt")
dropped_error=$(metric 'tracesand_dropped_total{cause="output_error"}' "$TMPD/metrics.txt")
pauses=$(metric 'tracesand_input_pauses_total{cause="output_full"}' "$TMPD/metrics.txt")

# Bound: what the bounded queues can hold plus a fixed allowance.
#   input:  INPUT_HWM messages of BATCH updates, each update < 64 bytes of
#           protobuf, and libzmq's per-message overhead (< 128 bytes);
#   output: OUTPUT_HWM messages (2 frames of < 256 bytes, 2 x 128 overhead);
#   outbox: one readiness group, READ_BUDGET x BATCH outcomes of < 512
#           bytes (payload, topic, index entry);
#   users:  USERS x 4 KiB of per-user state;
#   8 MiB for allocator fragmentation, libzmq's I/O buffers and the HTTP
#   server. Unbounded queueing of the flood would add POINTS x ~300 bytes
#   on the output side alone, and the producer's backlog on the input side.
input_bytes=$(( INPUT_HWM * (BATCH * 64 + 128) ))
output_bytes=$(( OUTPUT_HWM * (2 * 256 + 2 * 128) ))
outbox_bytes=$(( READ_BUDGET * BATCH * 512 ))
users_bytes=$(( USERS * 4096 ))
queued_kb=$(( (input_bytes + output_bytes + outbox_bytes + users_bytes) / 1024 ))
slack_kb=8192
# ASan builds: every allocation carries redzones and 1/8 shadow, and the
# 4 MiB quarantine above still holds freed blocks: the same bound scaled.
if ldd "$TRACESAND" 2>/dev/null | grep -q libasan; then
    queued_kb=$(( queued_kb * 3 ))
    slack_kb=$(( slack_kb * 2 ))
fi
BOUND_KB=$(( BASELINE_KB + queued_kb + slack_kb ))

note "flood: $POINTS updates at $FLOOD_RATE/s (sustainable <= $SUSTAINABLE_RATE/s) over ${flood_s}s"
note "rss: baseline ${BASELINE_KB} kB, max ${max_rss_kb} kB, bound ${BOUND_KB} kB ($samples samples)"
note "healthz: slowest ${max_healthz_s}s, non-200 $healthz_bad"
note "outcomes: updates=$updates published=$published received=$received dropped_output_hwm=$dropped_hwm dropped_output_error=$dropped_error input_pauses_output_full=$pauses"

check_ge "RSS was sampled during the flood" 3 "$samples"
check "daemon RSS stays under the bound" test "$max_rss_kb" -le "$BOUND_KB"
check_eq "/healthz always 200 during the flood" 0 "$healthz_bad"
check "/healthz answers within 1 s during the flood" \
    awk -v s="$max_healthz_s" 'BEGIN { exit !(s < 1.0) }'
check_eq "every update was read" "$POINTS" "$updates"
check_eq "every published message reached the consumer" "$published" "$received"
check_eq "every outcome is published or counted as dropped" "$updates" \
    "$(( published + dropped_hwm + dropped_error ))"
check "input pauses for the full output are counted" test "${pauses:-0}" -gt 0
check "the consumer was the bottleneck (it took longer than the flood)" \
    awk -v s="$flood_s" -v f="$FLOOD_SECONDS" 'BEGIN { exit !(s > 1.5 * f) }'

# 2. A burst in big batches: one readiness group then yields more outcomes
# than the output HWM can take at once. A PUSH output is lossless: the
# excess waits in the outbox while input pauses, and goes out as the
# consumer drains (issue 10, item 13: it used to be dropped).
BURST_POINTS=10000
BURST_BATCH=1000
head -n $(( BURST_POINTS + 1 )) "$TMPD/load.csv" >"$TMPD/burst.csv"
"$ZMQ_PULL_COUNT" --connect "$OUTPUT_EP" --count "$BURST_POINTS" --timeout 2 \
    --delay-us "$CONSUMER_DELAY_US" >"$TMPD/burst.consumer.out" 2>/dev/null &
CONSUMER_PID=$!
background_pids+=("$CONSUMER_PID")
sleep 0.3
"$TRACESAN" replay --connect "$INPUT_EP" --batch "$BURST_BATCH" \
    "$TMPD/burst.csv" 2>"$TMPD/burst.replay.log" </dev/null
wait_for_pid "$CONSUMER_PID" 30 || kill -KILL "$CONSUMER_PID"
burst_received=$(cat "$TMPD/burst.consumer.out")
curl -s --max-time 5 "http://$HTTP_EP/metrics" >"$TMPD/metrics2.txt"
updates2=$(metric tracesand_updates_total "$TMPD/metrics2.txt")
published2=$(metric tracesand_messages_published_total "$TMPD/metrics2.txt")
dropped_hwm2=$(metric 'tracesand_dropped_total{cause="output_hwm"}' "$TMPD/metrics2.txt")
dropped_error2=$(metric 'tracesand_dropped_total{cause="output_error"}' "$TMPD/metrics2.txt")
failures2=$(metric tracesand_publish_failures_total "$TMPD/metrics2.txt")
pauses2=$(metric 'tracesand_input_pauses_total{cause="output_full"}' "$TMPD/metrics2.txt")
note "burst: $BURST_POINTS updates in batches of $BURST_BATCH: received=$burst_received dropped_output_hwm=$(( dropped_hwm2 - dropped_hwm ))"
check_eq "burst: every update was read" "$(( POINTS + BURST_POINTS ))" "$updates2"
check_eq "burst: nothing dropped at the output HWM" "$dropped_hwm" "$dropped_hwm2"
check_eq "burst: the consumer got every outcome" "$BURST_POINTS" "$burst_received"
check "burst: input paused while the output was full" test "${pauses2:-0}" -gt "${pauses:-0}"
check_eq "burst: every outcome is published or counted as dropped" "$updates2" \
    "$(( published2 + dropped_hwm2 + dropped_error2 ))"
check_eq "burst: the drop causes add up to the publish failures" "$failures2" \
    "$(( dropped_hwm2 + dropped_error2 ))"
check_eq "burst: every published message reached the consumer" \
    "$(( published2 - published ))" "$burst_received"

stop_daemon load
finish
