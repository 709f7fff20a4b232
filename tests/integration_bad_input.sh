#!/usr/bin/env bash
# Every class of bad input gets a Rejection with its reason, a counter in the
# daemon's summary, a log line without coordinates, and the daemon stays up:
# a valid point sent after all of them is still sanitized.
# The ZeroMQ driver; the rate-limited rejection log through the JetStream
# driver is checked by integration_jetstream_parity.sh.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

require_programs "$ZMQ_SEND_RAW"
BAD=$TEST_DATA/bad_input.csv

# Small limits so oversized and batch_too_large are cheap to provoke; replay
# uses batches of 5 to stay under both.
MAX_BYTES=2048
MAX_UPDATES=20
start_daemon bad \
    -o input.max_message_bytes=$MAX_BYTES \
    -o input.max_batch_updates=$MAX_UPDATES

# Message-level rejections: nothing in them can be parsed into an update.
EXPECT_MESSAGES=6
ROWS=$(data_rows "$BAD")
# Plus a valid two-frame message and a final valid point.
EXPECT_TOTAL=$((EXPECT_MESSAGES + ROWS + 2))
LONG_USER=$(awk -F, '$2 == 1700000070 { print $1 }' "$BAD")

start_tail bad "$EXPECT_TOTAL"
send_raw --hex ffffffff                        # malformed: truncated varint tag
send_raw --hex 0a05ff                          # malformed: field longer than the message
send_raw --frames 3                            # malformed: 3 frames (payload valid)
send_raw --size $((MAX_BYTES * 2))             # oversized
send_raw --empty-batch                         # empty_batch
send_raw --batch-of $((MAX_UPDATES + 1))       # batch_too_large
send_raw --burst 1 --topic any-topic --user-prefix twoframe-   # valid: [topic][payload]
# Update-level rejections and 3 valid rows (ok1, the first 'back' and
# 'switch').
replay "$BAD" --batch 5
# The daemon must still be alive and sanitizing after all of that.
send_raw --burst 1 --user-prefix final- --ts-start 1700000500000
wait_tail bad 30
check "daemon still running after the bad inputs" is_running "$DAEMON_PID"
stop_daemon bad

check_eq "rejections CSV header" "$REJECTED_HEADER" "$(head -n 1 "$TAIL_REJ")"
declare -A expected=(
    [malformed]=3
    [oversized]=1
    [empty_batch]=1
    [batch_too_large]=1
    [missing_user_id]=1
    [invalid_coordinate]=4
    [time_went_backwards]=1
    [unknown_profile]=1
    [invalid_timestamp]=1
    [invalid_user_id]=1
    [profile_conflict]=1
)
expected_rejected=0
for reason in "${!expected[@]}"; do
    expected_rejected=$((expected_rejected + expected[$reason]))
    check_eq "reason $reason on the rejected topic" "${expected[$reason]}" \
        "$(count_reason "$reason")"
done
check_eq "no other rejections" "$expected_rejected" "$(data_rows "$TAIL_REJ")"

# Which update got which reason.
reason_of() {
    awk -F, -v u="$1" -v t="${2:-}" 'NR > 1 && $1 == u && (t == "" || $2 == t) { print $3 }' \
        "$TAIL_REJ" | sort | tr '\n' ' ' | sed 's/ $//'
}
check_eq "empty user -> missing_user_id" "missing_user_id" "$(reason_of '' 1700000010)"
check_eq "NaN latitude -> invalid_coordinate" "invalid_coordinate" "$(reason_of badnan)"
check_eq "infinite longitude -> invalid_coordinate" "invalid_coordinate" "$(reason_of badinf)"
check_eq "latitude 91.23 -> invalid_coordinate" "invalid_coordinate" "$(reason_of badlat)"
check_eq "longitude 181.35 -> invalid_coordinate" "invalid_coordinate" "$(reason_of badlon)"
check_eq "timestamp going backwards -> time_went_backwards" "time_went_backwards" "$(reason_of back)"
check_eq "unknown profile -> unknown_profile" "unknown_profile" "$(reason_of prof)"
check_eq "timestamp in the year 2100 -> invalid_timestamp" "invalid_timestamp" "$(reason_of future)"
# (An invalid user id is not echoed back, so match the row by its timestamp.)
check_eq "200-byte user id -> invalid_user_id" "invalid_user_id" \
    "$( { reason_of "$LONG_USER" 1700000070; reason_of '' 1700000070; } | tr -d '\n')"
check_eq "profile switch inside the window -> profile_conflict" "profile_conflict" "$(reason_of switch)"
check_eq "the first 'switch' point is sanitized" 1 \
    "$(awk -F, 'NR > 1 && $1 == "switch" && $2 == 1700000000' "$TAIL_OUT" | wc -l)"
check_eq "a two-frame [topic][payload] message is accepted" 1 \
    "$(awk -F, 'NR > 1 && $1 == "twoframe-0"' "$TAIL_OUT" | wc -l)"
check_eq "the first 'back' point is sanitized" 1 \
    "$(awk -F, 'NR > 1 && $1 == "back" && $2 == 1700000100' "$TAIL_OUT" | wc -l)"
check_eq "the valid point sent last is sanitized" 1 \
    "$(awk -F, 'NR > 1 && $1 == "final-0"' "$TAIL_OUT" | wc -l)"
check_eq "valid points sanitized (ok1, back, switch, twoframe-0, final-0)" 5 "$(data_rows "$TAIL_OUT")"
check "no published point equals an input point" \
    no_input_point_published "$BAD" "$TAIL_OUT"

for reason in "${!expected[@]}"; do
    check_eq "summary rejected.$reason" "${expected[$reason]}" \
        "$(summary_value "rejected.$reason")"
done
check_eq "summary rejected (total)" "$expected_rejected" \
    "$(summary_value rejected)"
check_eq "summary sanitized" 5 "$(summary_value sanitized)"
check_eq "summary updates" $((ROWS + 2)) "$(summary_value updates)"
# (Rejection log lines are rate-limited to 10/s, so not every one is there.)
check "rejection log lines name user and reason" \
    grep -qE 'tracesand: warn: rejected user=[^ ]+ reason=[a-z_]+: ' "$DAEMON_LOG"
check "a message-level rejection is logged with user=-" \
    grep -qE 'tracesand: warn: rejected user=- reason=(malformed|oversized|empty_batch|batch_too_large): ' "$DAEMON_LOG"
check "no input coordinate in the daemon log" no_coordinates_in "$BAD" "$DAEMON_LOG"
check "no input coordinate in the rejection details" no_coordinates_in "$BAD" "$TAIL_REJ"

finish
