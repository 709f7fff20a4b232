#!/usr/bin/env bash
# The ZMQ_FD pitfall: ZMQ_FD is edge-triggered, so when many messages arrive
# behind one notification a daemon that reads one message per wake-up (or
# forgets to re-arm after its read budget) stalls with messages queued.
# Stop the daemon, queue 10,000 one-update messages, resume it: every one
# must come out of the feed.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

require_programs "$ZMQ_SEND_RAW"
N=10000
USERS=100

# Enough budget for 100 points per user; queues deep enough for the burst.
# log.level=warn: the ready and summary lines must still be printed.
start_daemon burst \
    -o profiles.geoind.points_per_window=1000 \
    -o input.hwm=1000000 \
    -o output.hwm=1000000 \
    -o log.level=warn
start_tail burst "$N"

kill -STOP "$DAEMON_PID"
"$ZMQ_SEND_RAW" --connect "$INPUT_EP" --burst "$N" --users "$USERS" \
    --user-prefix burst- 2>"$TMPD/send.log" &
SENDER_PID=$!
background_pids+=("$SENDER_PID")
# Let the sender hand the whole burst to its I/O thread and the kernel
# while the daemon cannot read.
sleep 1
kill -CONT "$DAEMON_PID"
if wait_for_pid "$SENDER_PID" 60 && [ "$waited_status" -eq 0 ]; then
    pass "sender delivered $N messages"
else
    fail "sender did not finish"
    show_file "$TMPD/send.log"
fi

wait_tail burst 60
check_eq "all $N burst messages sanitized" "$N" "$(data_rows "$TAIL_OUT")"
check_eq "no rejections in the burst" 0 "$(data_rows "$TAIL_REJ")"
check_eq "every burst user seen" "$USERS" \
    "$(awk -F, 'NR > 1 { u[$1] = 1 } END { for (k in u) n++; print n + 0 }' "$TAIL_OUT")"
# SIGINT stops it as cleanly as SIGTERM.
stop_daemon burst INT
check_eq "summary updates" "$N" "$(summary_value updates)"
check_eq "summary sanitized" "$N" "$(summary_value sanitized)"

finish
