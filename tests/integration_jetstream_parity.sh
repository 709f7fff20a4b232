#!/usr/bin/env bash
# The JetStream driver runs the same group body, format table and
# operations side as the ZeroMQ driver (issue 26), so what the ZeroMQ
# tests check of these holds here too, on one instance and one
# nats-server:
#   - batch output (integration_batch_output.sh): one OutcomeBatch per
#     input message, on subject tracesan.batch;
#   - /feed (integration_feed.sh, integration_dashboard.sh): one event per
#     outcome this instance published, and no input coordinate in any;
#     /dashboard.json says the feed is on;
#   - the rate-limited rejection log (integration_bad_input.sh);
#   - the per-profile latency histogram (integration_ops.sh);
#   - output.encoding = "json" for every message.
# PRIVIC loops and the density estimate run cluster-wide with this driver
# (one instance holds a profile's population lease and writes each version
# to a replicated KV bucket): integration_jetstream_privic.sh checks them
# across a kill of that instance; here, that the daemon runs the shipped
# privic profile's loop and takes its lease.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

# 20 users of 15 points, 10 a window: 5 budget_exhausted each.
USERS=20 PER_USER=15
POINTS=$((USERS * PER_USER)) SANITIZED=$((USERS * 10))
REJECTED=$((POINTS - SANITIZED))

start_nats_single
make_trace "$TMPD/trace.csv" $USERS $PER_USER

# Every message of the run: the stream's count before and after a replay.
run() {  # run NAME [-o ...]
    local name=$1
    shift
    start_instance "$name" -o profiles.geoind.points_per_window=10 "$@"
    HTTP=$INSTANCE_HTTP PID=$INSTANCE_PID LOG=$INSTANCE_LOG
    wait_owned "$HTTP" 15
    curl -sN --max-time 60 "http://$HTTP/feed" >"$TMPD/$name.sse" &
    FEED_PID=$!
    background_pids+=("$FEED_PID")
    # The stream's response head means it is open.
    for _ in $(seq 100); do
        [ -s "$TMPD/$name.sse" ] && break
        sleep 0.05
    done
    IN_BEFORE=$(stream_last_seq TRACESAN_IN)
    OUT_BEFORE=$(stream_msgs TRACESAN_OUT)
    "$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 --batch 5 \
        "$TMPD/trace.csv" 2>"$TMPD/$name.replay.log" ||
        fatal "replay failed"
    IN_MSGS=$(( $(stream_last_seq TRACESAN_IN) - ${IN_BEFORE:-0} ))
    local deadline=$(( $(date +%s) + 30 ))
    while [ "$(grep -c '^event: ' "$TMPD/$name.sse")" -lt $POINTS ] &&
        [ "$(date +%s)" -lt $deadline ]; do
        sleep 0.2
    done
    OUT_MSGS=$(( $(stream_msgs TRACESAN_OUT) - ${OUT_BEFORE:-0} ))
    curl -s "http://$HTTP/metrics" >"$TMPD/$name.metrics"
    curl -s "http://$HTTP/dashboard.json" >"$TMPD/$name.dashboard"
    kill "$FEED_PID" 2>/dev/null
    kill -TERM "$PID"
    wait_for_pid "$PID" 20 || fatal "$name did not stop"
}

sse_events() { grep -c "^event: $1\$" "$2"; }

# The feed's sanitized events as user,ts,lat,lon rows (with a header), for
# no_input_point_published.
sse_points() {
    sed -n 's/^data: {"user_id":"\([^"]*\)","timestamp_ms":\([0-9]*\),"lat":\([^,]*\),"lon":\([^,]*\),.*/\1,\2,\3,\4/p' "$1" |
        { echo "user,ts,lat,lon"; cat; }
}

# Rejection lines logged plus those the limiter counted instead.
rejections_accounted() {
    awk '/rejected user=/ { n++ }
         /more rejections not logged/ { for (i = 1; i <= NF; i++) if ($i == "more") n += $(i - 1) }
         END { print n + 0 }' "$1"
}

run batch -o output.format=batch
check_eq "batch: one OutcomeBatch per input message" "$IN_MSGS" "$OUT_MSGS"
check "batch: more than one input message" test "$IN_MSGS" -gt 1
check_eq "feed: one sanitized event per sanitized outcome" $SANITIZED \
    "$(sse_events sanitized "$TMPD/batch.sse")"
check_eq "feed: one rejected event per rejection" $REJECTED \
    "$(sse_events rejected "$TMPD/batch.sse")"
check_eq "feed: the rejections are budget_exhausted" $REJECTED \
    "$(grep -c 'REJECTION_REASON_BUDGET_EXHAUSTED' "$TMPD/batch.sse")"
sse_points "$TMPD/batch.sse" >"$TMPD/batch.points"
check_eq "feed: every sanitized event has its point" $SANITIZED \
    "$(data_rows "$TMPD/batch.points")"
check "feed: no published point equals an input point" \
    no_input_point_published "$TMPD/trace.csv" "$TMPD/batch.points"
check_eq "feed: no rejection carries a coordinate" 0 \
    "$(grep -A1 '^event: rejected' "$TMPD/batch.sse" | grep -c '"lat"')"
check "dashboard.json: the feed is on" \
    grep -q '"feed":true' "$TMPD/batch.dashboard"
check_eq "metrics: the pipeline's time per update, for every update" \
    $POINTS "$(sed -n 's/^tracesand_update_duration_seconds_count{profile="geoind"} //p' "$TMPD/batch.metrics")"
check_eq "metrics: every output message counted as published" "$OUT_MSGS" \
    "$(sed -n 's/^tracesand_messages_published_total //p' "$TMPD/batch.metrics")"
check "log: rejections are logged, rate-limited" \
    grep -q 'rejected user=u[0-9]* reason=budget_exhausted' "$LOG"
check_eq "log: every rejection logged or counted by the limiter" \
    $REJECTED "$(rejections_accounted "$LOG")"
check "log: the limiter held some back (10 lines a second)" \
    grep -q 'more rejections not logged (limit 10/s)' "$LOG"
check "summary: the counts of every partition" \
    grep -q "summary updates=$POINTS sanitized=$SANITIZED .*rejected=$REJECTED" "$LOG"
check "log: the PRIVIC loop runs cluster-wide" \
    grep -q "profile privic: PRIVIC loop and density estimate cluster-wide" "$LOG"
check "log: this instance took the privic population lease" \
    grep -q "population lease acquired profile=privic" "$LOG"
check "log: no driver says the loop does not run" \
    bash -c "! grep -q 'does not run with the jetstream driver' '$LOG'"

run json -o output.encoding=json
check_eq "json: one message per outcome" $POINTS "$OUT_MSGS"
check_eq "json: the feed reads JSON output too" $POINTS \
    "$(grep -c '^event: ' "$TMPD/json.sse")"
sse_points "$TMPD/json.sse" >"$TMPD/json.points"
check "json: no published point equals an input point" \
    no_input_point_published "$TMPD/trace.csv" "$TMPD/json.points"

finish
