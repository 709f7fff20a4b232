#!/usr/bin/env bash
# End to end through the real daemon: replay a trace, collect the feed with
# tail, and check the contract on every message: one output per input, no
# input point published, ledger arithmetic, budget exhaustion (drop and
# repeat), and the SUB input variant.
# The ZeroMQ driver; /feed through the JetStream driver is checked by
# integration_jetstream_parity.sh.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

FEED=$TEST_DATA/feed.csv
ROWS=$(data_rows "$FEED")
HEAVY_ROWS=$(awk -F, '$1 == "heavy"' "$FEED" | wc -l)
# Shipped geoind profile: level ln 10 over radius 100 m, 30 points per window.
WINDOW_BUDGET=0.02302585092994046
POINTS_PER_WINDOW=30
EXCESS=$((HEAVY_ROWS - POINTS_PER_WINDOW))
USERS=$(awk -F, 'NR > 1 { u[$1] = 1 } END { for (k in u) n++; print n }' "$FEED")

# mechanism and profile columns, valid WGS84, eps_point as configured,
# eps_spent the running sum of eps_point per user, eps_remaining the rest.
ledger_consistent() {
    local out=$1 eps_point=$2
    tail -n +2 "$out" | sort -t, -k1,1 -k2,2n | awk -F, -v total="$WINDOW_BUDGET" -v ep="$eps_point" '
        function close_to(a, b, tol) { d = a - b; if (d < 0) d = -d; return d <= tol }
        {
            if ($5 != "geoind" || $9 != "geoind") { if (bad++ < 10) print "# mechanism/profile: " $0 }
            if ($3 < -90 || $3 > 90 || $4 < -180 || $4 >= 180) { if (bad++ < 10) print "# not WGS84: " $0 }
            if (ep != "" && !close_to($6, ep, 1e-8 * ep)) { if (bad++ < 10) print "# eps_point " $6 " != " ep ": " $0 }
            if ($1 != user) { user = $1; sum = 0 }
            sum += $6
            if (!close_to($7, sum, 1e-7 * total)) { if (bad++ < 10) print "# eps_spent " $7 " != running sum " sum ": " $0 }
            if (!close_to($8, total - $7, 1e-7 * total)) { if (bad++ < 10) print "# eps_remaining " $8 " != " total " - " $7 ": " $0 }
        }
        END { exit bad > 0 }'
}

require_programs "$ZMQ_SEND_RAW"
eps_point=$(awk -v t="$WINDOW_BUDGET" -v n="$POINTS_PER_WINDOW" 'BEGIN { printf "%.12g", t / n }')

# --- run 1: shipped profile, on_exhausted = drop -----------------------------
start_daemon drop
# A second subscriber with a topic filter sees only the rejections.
start_tail topic "$EXCESS" --topic rejected
TOPIC_PID=$TAIL_PID TOPIC_OUT=$TAIL_OUT TOPIC_REJ=$TAIL_REJ
start_tail drop "$ROWS"
replay "$FEED"
wait_tail drop 60
TAIL_PID=$TOPIC_PID
wait_tail "topic" 10
stop_daemon drop
check_eq "--topic rejected: no sanitized rows" 0 "$(data_rows "$TOPIC_OUT")"
check_eq "--topic rejected: every rejection" "$EXCESS" "$(count_reason budget_exhausted "$TOPIC_REJ")"
check_eq "drop: sanitized CSV header" "$SANITIZED_HEADER" "$(head -n 1 "$TAIL_OUT")"
check_eq "drop: rejections CSV header" "$REJECTED_HEADER" "$(head -n 1 "$TAIL_REJ")"
check "drop: every input yields exactly one sanitized row or rejection" \
    one_output_per_input "$TAIL_OUT" "$TAIL_REJ"
check_eq "drop: sanitized rows" $((ROWS - EXCESS)) "$(data_rows "$TAIL_OUT")"
check_eq "drop: budget_exhausted rejections for the excess of 'heavy'" "$EXCESS" \
    "$(awk -F, 'NR > 1 && $1 == "heavy" && $3 == "budget_exhausted"' "$TAIL_REJ" | wc -l)"
check_eq "drop: no other rejections" "$EXCESS" "$(data_rows "$TAIL_REJ")"
check "drop: no published point equals an input point" \
    no_input_point_published "$FEED" "$TAIL_OUT"
check "drop: mechanism, profile, WGS84 range and ledger per row" \
    ledger_consistent "$TAIL_OUT" "$eps_point"
check_eq "drop: summary updates" "$ROWS" "$(summary_value updates)"
check_eq "drop: summary sanitized" $((ROWS - EXCESS)) "$(summary_value sanitized)"
check_eq "drop: summary rejected" "$EXCESS" "$(summary_value rejected)"
check_eq "drop: summary rejected.budget_exhausted" "$EXCESS" \
    "$(summary_value rejected.budget_exhausted)"
check_eq "drop: summary users" "$USERS" "$(summary_value users)"
check "drop: no input coordinate in the daemon log" no_coordinates_in "$FEED" "$DAEMON_LOG"

# --- run 2: on_exhausted = repeat ------------------------------------------------
start_daemon repeat -o profiles.geoind.on_exhausted=repeat
start_tail repeat "$ROWS"
replay "$FEED"
wait_tail repeat 60
stop_daemon repeat
check_eq "repeat: every input is sanitized" "$ROWS" "$(data_rows "$TAIL_OUT")"
check_eq "repeat: no rejections" 0 "$(data_rows "$TAIL_REJ")"
check "repeat: every input yields exactly one output" \
    one_output_per_input "$TAIL_OUT" "$TAIL_REJ"
check "repeat: no published point equals an input point" \
    no_input_point_published "$FEED" "$TAIL_OUT"
# Rows past the budget repeat the last paid point (same lat/lon, ledger
# unchanged) and cost nothing.
repeats_ok() {
    awk -F, '$1 == "heavy"' "$TAIL_OUT" | sort -t, -k2,2n | awk -F, -v n="$POINTS_PER_WINDOW" '
        NR == n { lat = $3; lon = $4; spent = $7 }
        NR > n {
            if ($3 != lat || $4 != lon) { print "# repeat moved: " $0 " (last paid " lat "," lon ")"; bad++ }
            if ($6 + 0 != 0) { print "# repeat has eps_point " $6; bad++ }
            if ($7 != spent) { print "# repeat changed eps_spent: " $7 " vs " spent; bad++ }
            repeats++
        }
        END { exit (bad > 0 || repeats == 0) }'
}
check "repeat: the excess rows repeat the last sanitized point at zero cost" repeats_ok
check "repeat: paid rows keep the ledger" \
    ledger_consistent <(awk -F, 'NR == 1 || $6 + 0 != 0' "$TAIL_OUT") "$eps_point"
check_eq "repeat: summary repeated" "$EXCESS" "$(summary_value repeated)"
check_eq "repeat: summary sanitized" "$ROWS" "$(summary_value sanitized)"

# --- run 3: SUB input, replay over PUB (best effort delivery) --------------------
start_daemon sub -o input.type=sub
start_tail sub "$ROWS" --timeout 5
replay "$FEED" --socket pub
wait_for_pid "$TAIL_PID" 60 || kill -TERM "$TAIL_PID"
stop_daemon sub
got=$(data_rows "$TAIL_OUT")
note "sub: $got of $ROWS inputs sanitized, $(data_rows "$TAIL_REJ") rejected"
# SUB is best effort in general, but replay waits (XPUB) until the daemon's
# subscription has arrived, so on loopback every input must come through.
check_eq "sub: every input yields one output through a SUB input" \
    "$ROWS" "$((got + $(data_rows "$TAIL_REJ")))"
check "sub: no published point equals an input point" \
    no_input_point_published "$FEED" "$TAIL_OUT"
sub_subset() {
    awk -F, 'FNR == 1 { f++; next } f == 1 { want[$1 "," $2] = 1; next }
             !(($1 "," $2) in want) || seen[$1 "," $2]++ { print "# unexpected " $0; bad++ }
             END { exit bad > 0 }' "$FEED" "$TAIL_OUT" "$TAIL_REJ"
}
check "sub: each output matches a distinct input" sub_subset
check_eq "sub: summary updates match what tail saw" \
    $((got + $(data_rows "$TAIL_REJ"))) "$(summary_value updates)"

finish
