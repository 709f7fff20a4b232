#!/usr/bin/env bash
# output.format = "batch": the outcomes of one input message come out as one
# OutcomeBatch on topic "batch". The same feed through a per-point daemon
# and a batched one yields the same (user, ts) sanitized rows and the same
# rejections; the batched daemon publishes one message per input message;
# a malformed message is a batch of one rejection; no coordinate of the
# input appears in the batched output.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

require_programs "$ZMQ_SEND_RAW"
FEED=$TMPD/feed.csv
printf 'user,ts,lat,lon\n' >"$FEED"
for i in $(seq 0 299); do
    printf 'u%d,%d,48.85%02d1,2.35%02d7\n' $((i % 20)) $((1700000000 + i)) \
        $((i % 100)) $((i % 100))
done >>"$FEED"

# 20 users x 15 points, 10 points per window: 100 budget_exhausted.
run_mode() {  # run_mode NAME FORMAT
    start_daemon "$1" -o "output.format=$2" \
        -o profiles.geoind.points_per_window=10 -o input.max_backdate_s=0
    start_tail "$1" 301
    replay "$FEED" --batch 50
    send_raw --hex ffffffff
    wait_tail "$1" 30
    stop_daemon "$1"
    cut -d, -f1,2 "$TAIL_OUT" | sort >"$TMPD/$1.keys"
    cut -d, -f1,2,3 "$TAIL_REJ" | sort >"$TMPD/$1.rejkeys"
    cp "$TAIL_OUT" "$TMPD/$1.out"
    cp "$TAIL_REJ" "$TMPD/$1.rej"
}

run_mode point point
run_mode batch batch

check_eq "per-point: 200 sanitized" 200 "$(data_rows "$TMPD/point.out")"
check_eq "batched: 200 sanitized" 200 "$(data_rows "$TMPD/batch.out")"
check "same users and timestamps sanitized" \
    cmp -s "$TMPD/point.keys" "$TMPD/batch.keys"
check "same rejections" cmp -s "$TMPD/point.rejkeys" "$TMPD/batch.rejkeys"
check_eq "batched: 100 budget_exhausted" 100 \
    "$(count_reason budget_exhausted "$TMPD/batch.rej")"
check_eq "batched: the malformed message is one rejection" 1 \
    "$(count_reason malformed "$TMPD/batch.rej")"
# 300 updates in batches of 50: 6 messages, plus the malformed one.
check_eq "batched: one output message per input message" 7 \
    "$(summary_value published)"
check "batched: no input point published" \
    no_input_point_published "$FEED" "$TMPD/batch.out"
check "batched: no input coordinate in a rejection" \
    no_coordinates_in "$FEED" "$TMPD/batch.rej"

finish
