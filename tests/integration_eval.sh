#!/usr/bin/env bash
# `tracesan eval` on a hand-made pair of files whose every figure is worked
# out below, and `tracesan sample` on a synthetic dense trace with a slow,
# a fast and a slow hour; then sample -> sanitize -> eval end to end.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

for cmd in eval sample; do
    "$TRACESAN" "$cmd" --help >/dev/null 2>&1 ||
        fatal "$TRACESAN has no '$cmd' command (tools/tracesan.c dispatch)"
done

# --- eval ------------------------------------------------------------------
TRUE_CSV=$TMPD/true.csv
SAN_CSV=$TMPD/sanitized.csv
cat >"$TRUE_CSV" <<'EOF'
user,ts,lat,lon
a,100,0.0,10.0
a,160,0.0,10.0
a,220,0.0,10.0
a,280,0.0,10.0
a,340,0.0,10.0
a,90000,0.0,10.0
b,100,45.0,7.0
b,100,45.0,7.0
EOF
# a: rows at 280 and 340 were dropped (exhausted); 90000 opens a new
# window (eps_spent == eps_point). b: a repeated timestamp, joined in
# order; geoind leaves `predicted` empty. c: no true row, ignored.
cat >"$SAN_CSV" <<'EOF'
user,ts,lat,lon,mechanism,eps_point,eps_spent,eps_remaining,profile,predicted
a,100,0.0100000,10.0000000,predictive,0.001,0.001,0.009,p,0
a,160,0.0100000,10.0000000,predictive,0.0005,0.0015,0.0085,p,1
a,220,0.0200000,10.0000000,predictive,0.002,0.0035,0.0065,p,0
a,90000,0.0000000,10.0300000,predictive,0.001,0.001,0.009,p,0
b,100,45.0100000,7.0000000,geoind,0.002,0.002,0.008,g,
b,100,45.0200000,7.0000000,geoind,0.002,0.004,0.006,g,
c,100,1.0000000,1.0000000,geoind,0.002,0.002,0.008,g,
EOF
# By hand, R = 6371008.8 m: 0.01 degree of latitude (or of longitude on
# the equator) is 1111.95 m.
#   a: errors 1111.95, 1111.95, 2223.90, 3335.85 -> mean 1945.9, α(0.9) =
#      4th of 4 = 3335.9; predicted 1 of 4; rho = mean(0.1, 0.05, 0.2, 0.1)
#      = 0.1125; 2 windows, 1 exhausted after 3 covered points.
#   b: errors 1111.95, 2223.90 -> mean 1667.9, α(0.9) = 2nd of 2; rho 0.2;
#      one window, not exhausted.
#   all: mean 11119.50 / 6 = 1853.3; α(0.9) = 6th of 6 = 3335.9;
#      predicted 1 of the 4 rows that define it; rho 0.85 / 6 = 0.14167.
EXPECTED='user,n,dropped,mean_err_m,alpha90_m,pred_rate,rho,windows,exhausted,covered
a,4,2,1945.9,3335.9,0.2500,0.11250,2,1,3.00
b,2,0,1667.9,2223.9,-,0.20000,1,0,-
(all),6,2,1853.3,3335.9,0.2500,0.14167,3,1,3.00'
rc=0
"$TRACESAN" eval --format csv "$TRUE_CSV" "$SAN_CSV" >"$TMPD/eval.csv" \
    2>"$TMPD/eval.err" || rc=$?
check_eq "eval: exit status" 0 "$rc"
check_eq "eval: figures worked out by hand" "$EXPECTED" "$(cat "$TMPD/eval.csv")"
check "eval: the unmatched sanitized row is reported" \
    grep -q '1 sanitized rows have no true row' "$TMPD/eval.err"
"$TRACESAN" eval "$TRUE_CSV" "$SAN_CSV" >"$TMPD/eval.txt" 2>/dev/null
check_eq "eval: table has a header and one line per user plus overall" 4 \
    "$(wc -l <"$TMPD/eval.txt")"
check "eval: table columns are aligned" \
    awk 'NR == 1 { w = length($0) } length($0) != w { exit 1 }' "$TMPD/eval.txt"
gzip -c "$TRUE_CSV" >"$TMPD/true.csv.gz"
check_eq "eval: gzip true trace" "$EXPECTED" \
    "$("$TRACESAN" eval --format csv "$TMPD/true.csv.gz" "$SAN_CSV" 2>/dev/null)"
rc=0
"$TRACESAN" eval --format json "$TRUE_CSV" "$SAN_CSV" >/dev/null 2>&1 || rc=$?
check_eq "eval: unknown format is a usage error" 1 "$rc"
rc=0
"$TRACESAN" eval "$TRUE_CSV" "$TRUE_CSV" >/dev/null 2>"$TMPD/eval_bad.err" || rc=$?
check_eq "eval: a file without the sanitized columns is refused" 1 "$rc"
check "eval: the refusal names the missing column" \
    grep -q "no 'eps_point' column" "$TMPD/eval_bad.err"

# --- sample ----------------------------------------------------------------
DENSE=$TMPD/dense.csv
T0=1700000000
# w: one fix a second for 3 h; 1 m/s northwards in the first and last hour,
# 10 m/s (36 km/h) in the second: 7200 slow fixes (the first fix has no
# predecessor and takes the speed to its successor). z: 20 m/s throughout.
awk -v t0="$T0" 'BEGIN {
    print "user,ts,lat,lon"
    lat = 39.9
    for (i = 0; i < 10800; i++) {
        if (i > 0) lat += ((i < 3600 || i >= 7200) ? 1 : 10) / 111195.0
        printf "w,%d,%.7f,116.4000000\n", t0 + i, lat
    }
    for (i = 0; i < 600; i++)
        printf "z,%d,%.7f,116.5000000\n", t0 + i, 39.9 + 20 * i / 111195.0
}' >"$DENSE"

sample() { # NAME ARGS...
    local name=$1
    shift
    rc=0
    "$TRACESAN" sample "$@" "$DENSE" >"$TMPD/$name.csv" 2>"$TMPD/$name.err" || rc=$?
}
sample p0 --seed 3 --p 0
check_eq "sample: exit status" 0 "$rc"
check_eq "sample: header" "user,ts,lat,lon" "$(head -n 1 "$TMPD/p0.csv")"
check "sample: every query is a point of the input" \
    awk -F, 'NR == FNR { have[$0] = 1; next } FNR > 1 && !($0 in have) { exit 1 }' \
    "$DENSE" "$TMPD/p0.csv"
check_eq "sample: nothing from the fast hour" 0 \
    "$(awk -F, -v t0="$T0" 'NR > 1 && $2 >= t0 + 3600 && $2 < t0 + 7200' "$TMPD/p0.csv" | wc -l)"
check_eq "sample: nothing from the fast user" 0 \
    "$(awk -F, 'NR > 1 && $1 == "z"' "$TMPD/p0.csv" | wc -l)"
# Gaps of 60 s +- 10 %: about 60 queries per slow hour; consecutive
# queries inside a slow hour 30 .. 90 s apart (5 sigma).
n0=$(data_rows "$TMPD/p0.csv")
check "sample: p = 0 gives about one query a minute in the slow hours ($n0)" \
    test "$n0" -ge 100 -a "$n0" -le 130
check "sample: p = 0 gaps within 60 s +- 5 sigma" \
    awk -F, -v t0="$T0" 'NR > 2 && ($2 < t0 + 3600) == (prev < t0 + 3600) {
        gap = $2 - prev; if (gap < 30 || gap > 90) exit 1 } NR > 1 { prev = $2 }' \
    "$TMPD/p0.csv"
check "sample: summary on stderr" \
    grep -q "^sample: rows=11400 users=2 slow=7200 sampled=$n0\$" "$TMPD/p0.err"
sample p1 --seed 3 --p 1
n1=$(data_rows "$TMPD/p1.csv")
# Gaps of 3600 s +- 360 s: t0, then one more in the first hour when the
# gap comes out under 3600 s, else the first slow fix of the third hour
# (t0 + 7200), and at most one more before the end: 2 to 4 queries.
check "sample: p = 1 gives a query an hour ($n1)" test "$n1" -ge 2 -a "$n1" -le 4
sample half_a --seed 5 --p 0.5
sample half_b --seed 5 --p 0.5
check "sample: the same seed gives the same sample" \
    cmp -s "$TMPD/half_a.csv" "$TMPD/half_b.csv"
sample half_c --seed 6 --p 0.5
check "sample: another seed gives another sample" \
    eval '! cmp -s "$TMPD/half_a.csv" "$TMPD/half_c.csv"'
sample bad --seed 1 --p 1.5
check_eq "sample: p outside [0, 1] is a usage error" 1 "$rc"
sample noseed --p 0.5
check_eq "sample: --seed is required" 1 "$rc"

# --- sample -> sanitize -> eval -----------------------------------------------
"$TRACESAN" sanitize --config "$SHIPPED_CONF" --profile predictive-rate \
    --seed 9 "$TMPD/p0.csv" >"$TMPD/p0.sanitized.csv" 2>/dev/null
"$TRACESAN" eval --format csv "$TMPD/p0.csv" "$TMPD/p0.sanitized.csv" \
    >"$TMPD/p0.eval.csv" 2>/dev/null
check_eq "round trip: eval sees every sanitized row" \
    "$(data_rows "$TMPD/p0.sanitized.csv")" \
    "$(awk -F, '$1 == "(all)" { print $2 }' "$TMPD/p0.eval.csv")"
check_eq "round trip: sanitized + dropped = sampled" "$n0" \
    "$(awk -F, '$1 == "(all)" { print $2 + $3 }' "$TMPD/p0.eval.csv")"
check "round trip: a prediction rate is reported" \
    awk -F, '$1 == "(all)" && $6 != "-" { ok = 1 } END { exit !ok }' "$TMPD/p0.eval.csv"

finish
