#!/usr/bin/env bash
# `tracesan eval` on a hand-made pair of files whose every figure is worked
# out below, and `tracesan sample` on a synthetic dense trace with a slow,
# a fast and a slow hour; then sample -> sanitize -> eval end to end.
# Then eval's evaluation-only figures: kNN precision/recall on hand-built
# POIs, and the drift ratio of pim replayed from the published points of a
# model learnt with `tracesan learn` (with the |ΔX| cross-check).
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

# --- eval: kNN precision and recall -------------------------------------------
# Three POIs on the equator, 0.01 degree apart, in a file whose header has
# lon before lat, a quoted name with a comma, an extra column and one
# unusable row.
POI=$TMPD/poi.csv
cat >"$POI" <<'EOF'
name,lon,lat,kind
"p0, west",0.00,0.0,x
p1,0.01,0.0,y
p2,0.02,0.0,z
broken,east,0.0,w
EOF
KNN_TRUE=$TMPD/knn_true.csv
KNN_SAN=$TMPD/knn_sanitized.csv
cat >"$KNN_TRUE" <<'EOF'
user,ts,lat,lon
k,100,0.0,0.004
k,200,0.0,0.004
e,100,0.0,0.013
EOF
cat >"$KNN_SAN" <<'EOF'
user,ts,lat,lon,mechanism,eps_point,eps_spent,eps_remaining,profile,predicted
k,100,0.0000000,0.0080000,geoind,0.002,0.002,0.008,g,
k,200,0.0000000,0.0180000,geoind,0.002,0.004,0.006,g,
e,100,0.0000000,0.0130000,geoind,0.002,0.002,0.008,g,
EOF
# k = 1, k' = 2; distances in units of 0.001 degree.
#   k@100: true 4 -> R = {p0} (4 < 6); released 8 -> R' = {p1 (2), p0 (8)}:
#          1 in common: precision 1/2, recall 1/1.
#   k@200: released 18 -> R' = {p2 (2), p1 (8)}: 0 in common.
#   e@100: true 13 -> R = {p1}; released = true -> R' = {p1, p2}: 1/2, 1.
#   k: precision 0.25, recall 0.5; e: 0.5, 1; all: 1/3, 2/3.
rc=0
"$TRACESAN" eval --format csv --poi "$POI" --knn 1 --knn-returned 2 \
    "$KNN_TRUE" "$KNN_SAN" >"$TMPD/knn.csv" 2>"$TMPD/knn.err" || rc=$?
check_eq "knn: exit status" 0 "$rc"
check_eq "knn: three columns appended, drift not computed" \
    "user,n,dropped,mean_err_m,alpha90_m,pred_rate,rho,windows,exhausted,covered,drift_ratio,knn_precision,knn_recall" \
    "$(head -n 1 "$TMPD/knn.csv")"
check_eq "knn: precision and recall worked out by hand (k = 1, k' = 2)" \
    "k,-,0.2500,0.5000
e,-,0.5000,1.0000
(all),-,0.3333,0.6667" \
    "$(awk -F, 'NR > 1 { print $1 "," $11 "," $12 "," $13 }' "$TMPD/knn.csv")"
check "knn: the unusable POI row is reported" \
    grep -q "1 rows without a valid lat/lon ignored" "$TMPD/knn.err"
# Released == true: both sets are the same, whatever k.
awk -F, 'NR == 1 { print "user,ts,lat,lon,mechanism,eps_point,eps_spent,eps_remaining,profile,predicted"; next }
    { print $1 "," $2 "," $3 "," $4 ",geoind,0.002,0.002,0.008,g," }' \
    "$KNN_TRUE" >"$TMPD/knn_exact.csv"
check_eq "knn: released == true gives precision = recall = 1 (k = k' = 2)" \
    "1.0000,1.0000" \
    "$("$TRACESAN" eval --format csv --poi "$POI" --knn 2 "$KNN_TRUE" \
        "$TMPD/knn_exact.csv" 2>/dev/null | awk -F, '$1 == "(all)" { print $12 "," $13 }')"
rc=0
"$TRACESAN" eval --poi "$POI" --knn 2 --knn-returned 1 "$KNN_TRUE" "$KNN_SAN" \
    >/dev/null 2>&1 || rc=$?
check_eq "knn: k' < k is a usage error" 1 "$rc"
rc=0
"$TRACESAN" eval --poi "$POI" --knn 4 "$KNN_TRUE" "$KNN_SAN" >/dev/null \
    2>"$TMPD/knn_few.err" || rc=$?
check_eq "knn: more neighbours than POIs is an error" 1 "$rc"
check "knn: the error says how many POIs there are" \
    grep -q "has 3 usable POIs" "$TMPD/knn_few.err"
printf 'name,x,y\np,0.0,0.0\n' >"$TMPD/poi_xy.csv"
rc=0
"$TRACESAN" eval --poi "$TMPD/poi_xy.csv" --knn 1 "$KNN_TRUE" "$KNN_SAN" \
    >/dev/null 2>"$TMPD/poi_xy.err" || rc=$?
check_eq "knn: a POI file without lat/lon columns is refused" 1 "$rc"
check "knn: the refusal names the missing column" \
    grep -q "no 'lat' column" "$TMPD/poi_xy.err"

# --- eval: drift ratio of pim, replayed -----------------------------------------
# 12 users, 40 fixes one minute apart, random walks of up to ~120 m a step
# in a 2.2 x 1.7 km box; 300 m cells. Learnt with the default maximum
# speed (120 km/h: 2 km a tick), smoothing reaches every cell of the box
# from every cell, so every prior has every cell in its support.
DFEED=$TMPD/drift_feed.csv
DMODEL=$TMPD/drift_model.bin
awk 'BEGIN {
    srand(29)
    print "user,ts,lat,lon"
    for (u = 0; u < 12; u++) {
        lat = 39.902 + rand() * 0.016; lon = 116.302 + rand() * 0.016
        for (i = 0; i < 40; i++) {
            lat += (rand() - 0.5) * 0.002; lon += (rand() - 0.5) * 0.0025
            if (lat < 39.9005) lat = 39.9005; if (lat > 39.9195) lat = 39.9195
            if (lon < 116.3005) lon = 116.3005; if (lon > 116.3195) lon = 116.3195
            printf "d%02d,%d,%.7f,%.7f\n", u, 1700000000 + 60 * i, lat, lon
        }
    }
}' >"$DFEED"
DROWS=$(data_rows "$DFEED")
if ! "$TRACESAN" learn --region 39.9,116.3,39.92,116.32 --cell-m 300 \
        --tick-s 60 --output "$DMODEL" "$DFEED" 2>"$TMPD/drift_learn.log"; then
    show_file "$TMPD/drift_learn.log"
    fatal "tracesan learn failed"
fi
# Windows of 10 releases (600 s), so the replay must zero its state where
# the pipeline did.
pd_profile() { # DELTA [WINDOW_S [KEEPS_BELIEF]]
    echo -o profiles.pd.mechanism=pim -o "profiles.pd.model=\"$DMODEL\"" \
        -o profiles.pd.delta="$1" -o profiles.pd.prune_threshold=0 \
        -o profiles.pd.belief_capacity=4096 -o profiles.pd.points_per_window=10 \
        -o profiles.pd.budget_window_s="${2:-600}" \
        -o profiles.pd.window_keeps_belief="${3:-true}"
}
# drift_run NAME SANITIZE_DELTA EVAL_DELTA [EVAL_WINDOW_S [KEEPS_BELIEF]]:
# KEEPS_BELIEF (window_keeps_belief) on both sides, the windows 600 s.
drift_run() {
    local name=$1
    # shellcheck disable=SC2046 # pd_profile's words are options
    "$TRACESAN" sanitize --seed 4 --profile pd $(pd_profile "$2" 600 "${5:-true}") \
        "$DFEED" >"$TMPD/$name.sanitized.csv" 2>"$TMPD/$name.sanitize.err"
    rc=0
    # shellcheck disable=SC2046
    "$TRACESAN" eval --format csv --profile pd \
        $(pd_profile "$3" "${4:-600}" "${5:-true}") \
        --series "$TMPD/$name.series.csv" "$DFEED" "$TMPD/$name.sanitized.csv" \
        >"$TMPD/$name.eval.csv" 2>"$TMPD/$name.eval.err" || rc=$?
}
all_column() { awk -F, -v c="$2" '$1 == "(all)" { print $c }' "$TMPD/$1.eval.csv"; }
replay_count() { # NAME KEY: a figure of eval's "replayed" line
    sed -n "s/.*replayed [0-9]* releases.* $2=\([0-9]*\).*/\1/p" "$TMPD/$1.eval.err"
}

drift_run d0 0 0
check_eq "drift: exit status" 0 "$rc"
check_eq "drift: every row sanitized" "$DROWS" "$(data_rows "$TMPD/d0.sanitized.csv")"
check_eq "drift: columns after dss_min" "dss_min,drift_ratio,knn_precision,knn_recall" \
    "$(head -n 1 "$TMPD/d0.eval.csv" | cut -d, -f14-)"
check_eq "drift: every release replayed" "$DROWS" \
    "$(sed -n 's/.*replayed \([0-9]*\) releases.*/\1/p' "$TMPD/d0.eval.err")"
check_eq "drift: replay errors" 0 "$(replay_count d0 errors)"
check_eq "drift: delta = 0, no pruning: |ΔX| replayed as published" 0 \
    "$(replay_count d0 dss_mismatches)"
check_eq "drift: delta = 0, no pruning: the true cell is always in ΔX" \
    "0.0000" "$(all_column d0 15)"
check_eq "drift: --series has a drifted column" \
    "user,ts,delta_set_size,error_m,drifted" "$(head -n 1 "$TMPD/d0.series.csv")"

drift_run d5 0.5 0.5
check_eq "drift: delta = 0.5: |ΔX| replayed as published (windows mirrored)" 0 \
    "$(replay_count d5 dss_mismatches)"
d5=$(all_column d5 15)
check "drift: delta = 0.5: some true cells fall outside ΔX ($d5)" \
    awk -v d="$d5" 'BEGIN { exit !(d > 0 && d < 1) }'
check_eq "drift: the ratio is the series' drifted mean" "$d5" \
    "$(awk -F, 'NR > 1 { s += $5; n++ } END { printf "%.4f", s / n }' "$TMPD/d5.series.csv")"
check "drift: nothing about drift in the sanitized output" \
    eval '! grep -qi drift "$TMPD/d5.sanitized.csv"'

drift_run dx 0 0.5
dx=$(replay_count dx dss_mismatches)
check "drift: eval with another delta reports |ΔX| mismatches ($dx)" \
    test "${dx:-0}" -gt 0
check "drift: and warns that its configuration is not the sanitizer's" \
    grep -q "warning: the replayed |ΔX| differs" "$TMPD/dx.eval.err"
# With window_keeps_belief = false every budget window restarts the
# belief: eval mirrors the restarts, and notices when its windows are not
# the sanitizer's. By default the belief crosses windows, so their length
# changes no release and the replay matches whatever it is.
drift_run dr 0.5 0.5 600 false
check_eq "drift: windows restarting the belief are mirrored" 0 \
    "$(replay_count dr dss_mismatches)"
drift_run dw 0.5 0.5 1200 false
dw=$(replay_count dw dss_mismatches)
check "drift: eval with another budget window reports mismatches ($dw)" \
    test "${dw:-0}" -gt 0
drift_run dk 0.5 0.5 1200
check_eq "drift: the belief crosses budget windows: their length changes no release" 0 \
    "$(replay_count dk dss_mismatches)"

rc=0
"$TRACESAN" eval --profile nosuch "$DFEED" "$TMPD/d0.sanitized.csv" \
    >/dev/null 2>&1 || rc=$?
check_eq "drift: an unknown profile is an error" 1 "$rc"
"$TRACESAN" eval --format csv --profile geoind "$DFEED" \
    "$TMPD/d0.sanitized.csv" >"$TMPD/geo.eval.csv" 2>"$TMPD/geo.eval.err"
check "drift: a profile that is not pim/lm-delta is said to have no drift" \
    grep -q "mechanism geoind, which has no replay: no drift ratio" "$TMPD/geo.eval.err"

finish
