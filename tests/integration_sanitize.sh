#!/usr/bin/env bash
# `tracesan sanitize`: the offline pipeline on CSV files. Exact header,
# one row per accepted input, reproducible with --seed, gzip input, bad rows
# reported on stderr with their reason and counted in the summary.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

FEED=$TEST_DATA/feed.csv
BAD=$TEST_DATA/sanitize_bad.csv
ROWS=$(data_rows "$FEED")
POINTS_PER_WINDOW=30
EXCESS=$(( $(awk -F, '$1 == "heavy"' "$FEED" | wc -l) - POINTS_PER_WINDOW ))

# sanitize NAME ARGS...: runs tracesan sanitize; sets rc; output in
# $TMPD/NAME.csv, stderr in $TMPD/NAME.err.
sanitize() {
    local name=$1
    shift
    rc=0
    "$TRACESAN" sanitize --config "$SHIPPED_CONF" --profile geoind "$@" \
        >"$TMPD/$name.csv" 2>"$TMPD/$name.err" </dev/null || rc=$?
    if [ "$rc" -ne 0 ]; then
        show_file "$TMPD/$name.err" 5
    fi
}

summary_of() { grep '^sanitize: rows=' "$TMPD/$1.err" | tail -n 1; }

sanitize seed42 --seed 42 "$FEED"
check_eq "seed 42: exit status" 0 "$rc"
check_eq "seed 42: header" "$SANITIZED_HEADER" "$(head -n 1 "$TMPD/seed42.csv")"
check_eq "seed 42: one row per input within budget" $((ROWS - EXCESS)) "$(data_rows "$TMPD/seed42.csv")"
check "seed 42: no output point equals an input point" \
    no_input_point_published "$FEED" "$TMPD/seed42.csv"
check_eq "seed 42: mechanism and profile columns" "geoind,geoind" \
    "$(awk -F, 'NR > 1 { print $5 "," $9 }' "$TMPD/seed42.csv" | sort -u | tr '\n' ' ' | sed 's/ $//')"
check_eq "seed 42: budget_exhausted rejections on stderr" "$EXCESS" \
    "$(grep -c 'rejected user=heavy reason=budget_exhausted' "$TMPD/seed42.err")"
summary=$(summary_of seed42)
check_eq "seed 42: summary" "sanitize: rows=$ROWS sanitized=$((ROWS - EXCESS)) rejected=$EXCESS budget_exhausted=$EXCESS" "$summary"
check_eq "seed 42: summary is the last stderr line" "$summary" "$(tail -n 1 "$TMPD/seed42.err")"
# Output rows keep the input's (user, ts) and order.
check_eq "seed 42: user,ts columns follow the input" \
    "$(awk -F, 'NR > 1 && !($1 == "heavy" && ++h > 30) { print $1 "," $2 }' "$FEED" | md5sum)" \
    "$(awk -F, 'NR > 1 { print $1 "," $2 }' "$TMPD/seed42.csv" | md5sum)"

sanitize seed42-again --seed 42 "$FEED"
check "same seed gives identical output" cmp -s "$TMPD/seed42.csv" "$TMPD/seed42-again.csv"
sanitize seed43 --seed 43 "$FEED"
check_eq "seed 43: exit status" 0 "$rc"
check "a different seed gives different output" \
    eval '! cmp -s "$TMPD/seed42.csv" "$TMPD/seed43.csv"'
differing=$(paste -d'|' "$TMPD/seed42.csv" "$TMPD/seed43.csv" |
            awk -F'|' 'NR > 1 && $1 != $2 { n++ } END { print n + 0 }')
check_eq "a different seed moves every point" $((ROWS - EXCESS)) "$differing"
sanitize unseeded "$FEED"
check "no --seed (OS randomness) differs from seed 42" \
    eval '! cmp -s "$TMPD/seed42.csv" "$TMPD/unseeded.csv"'

gzip -c "$FEED" >"$TMPD/feed.csv.gz"
sanitize gz --seed 42 "$TMPD/feed.csv.gz"
check_eq "gzip input: exit status" 0 "$rc"
check "gzip input gives the same output as plain" cmp -s "$TMPD/seed42.csv" "$TMPD/gz.csv"

rc=0
"$TRACESAN" sanitize --config "$SHIPPED_CONF" --profile geoind --seed 42 - \
    <"$FEED" >"$TMPD/stdin.csv" 2>"$TMPD/stdin.err" || rc=$?
check_eq "stdin input: exit status" 0 "$rc"
check "stdin input gives the same output" cmp -s "$TMPD/seed42.csv" "$TMPD/stdin.csv"

# -o overrides apply to the offline pipeline too.
sanitize repeat --seed 42 -o profiles.geoind.on_exhausted=repeat "$FEED"
check_eq "-o on_exhausted=repeat: every row sanitized" "$ROWS" "$(data_rows "$TMPD/repeat.csv")"
check_eq "-o on_exhausted=repeat: summary" "sanitize: rows=$ROWS sanitized=$ROWS rejected=0" \
    "$(summary_of repeat)"

# Bad rows: stderr names the file line (header = line 1) and the reason.
sanitize bad --seed 7 "$BAD"
check_eq "bad rows: exit status 0 (file processed)" 0 "$rc"
check_eq "bad rows: sanitized rows" 3 "$(data_rows "$TMPD/bad.csv")"
# (A missing user may be shown as "-" or as nothing.)
for expect in "line 4: rejected user=s2 reason=invalid_coordinate" \
              "line 5: rejected user=s3 reason=invalid_coordinate" \
              "line 6: rejected user=-? reason=missing_user_id" \
              "line 7: rejected user=s1 reason=time_went_backwards" \
              "line 9: rejected user=s4 reason=invalid_coordinate"; do
    check "bad rows: stderr has 'tracesan: $expect'" \
        grep -qE "^tracesan: $expect" "$TMPD/bad.err"
done
bad_summary=$(summary_of bad)
check "bad rows: summary counts" \
    eval '[[ "$bad_summary" == "sanitize: rows=8 sanitized=3 rejected=5 "* ]]'
for pair in invalid_coordinate=3 missing_user_id=1 time_went_backwards=1; do
    check "bad rows: summary has $pair" eval '[[ " $bad_summary " == *" $pair "* ]]'
done
check "bad rows: no input coordinate on stderr" no_coordinates_in "$BAD" "$TMPD/bad.err"
check "bad rows: no output point equals an input point" \
    no_input_point_published "$BAD" "$TMPD/bad.csv"

# Usage and I/O errors exit 1.
sanitize missing-file --seed 1 "$TMPD/does-not-exist.csv"
check_eq "missing input file: exit status 1" 1 "$rc"
rc=0
"$TRACESAN" sanitize --config "$TEST_DATA/check_bad_radius.conf" --profile geoind "$FEED" \
    >/dev/null 2>"$TMPD/badconf.err" || rc=$?
check_eq "invalid config: exit status 1" 1 "$rc"
check "invalid config: error names file and line" \
    grep -qF "$TEST_DATA/check_bad_radius.conf:8:" "$TMPD/badconf.err"

finish
