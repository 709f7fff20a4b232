#!/usr/bin/env bash
# mi-channel through the real CLI and daemon:
#   1. `tracesan optimize` writes a channel file from a small training CSV
#      (three users around three corners of a box in Paris) and reports
#      I(U;Z), E[d], the gap and the iterations.
#   2. The shipped mi-channel profile (channel = "") is disabled: the
#      daemon starts, and an update addressed to it is rejected as
#      unknown_profile.
#   3. With -o profiles.mi-channel.channel=FILE (no geo-ind epsilon):
#      every report is a cell centre of the file's grid with eps_point 0,
#      and each user gets exactly points_per_window reports per window,
#      the rest rejected as budget_exhausted.
#   4. A channel optimized with --geoind-epsilon spends that epsilon per
#      report, publishes eps_floor = epsilon times the cell diagonal, and
#      is capped by the window budget like geoind.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v python3 >/dev/null 2>&1 || fatal "python3 is not installed (scripts/setup.sh installs it)"

BOX=48.80,2.25,48.90,2.40
USERS=4
PER_USER=8
CAP=5
T0=$(( $(date +%s) - 7200 ))

awk 'BEGIN { srand(7); print "user,ts,lat,lon"
    split("48.82 2.27 48.82 2.37 48.88 2.27", c, " ")
    for (i = 0; i < 300; i++) { u = i % 3
        printf "u%d,%d,%.6f,%.6f\n", u, 1600000000 + i,
               c[2 * u + 1] + 0.01 * (rand() - 0.5),
               c[2 * u + 2] + 0.01 * (rand() - 0.5) } }' >"$TMPD/train.csv"
awk -v t="$T0" -v users="$USERS" -v n="$PER_USER" 'BEGIN { srand(11)
    print "user,ts,lat,lon"
    for (j = 0; j < n; j++)
        for (u = 0; u < users; u++)
            printf "car%d,%d,%.6f,%.6f\n", u, t + 10 * j + u,
                   48.81 + 0.08 * rand(), 2.26 + 0.13 * rand() }' >"$TMPD/live.csv"
TOTAL=$(( USERS * PER_USER ))

# every_report_a_centre OUT CELL_M: each sanitized (lat, lon) is the centre
# of a cell of the grid of BOX and CELL_M (inference/grid.h's projection),
# at the 7 decimals the CSV carries.
every_report_a_centre() {
    python3 - "$1" "$2" "$BOX" <<'EOF'
import csv, math, sys
out, cell_m, box = sys.argv[1], float(sys.argv[2]), [float(v) for v in sys.argv[3].split(",")]
R = 6371008.8
lat0, lon0 = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
c0 = math.cos(math.radians(lat0))
def project(lat, lon):
    return (R * math.radians(lon - lon0) * c0, R * math.radians(lat - lat0))
x_min, y_min = project(box[0], box[1])
rows = list(csv.DictReader(open(out)))
assert rows, "no reports"
for r in rows:
    x, y = project(float(r["lat"]), float(r["lon"]))
    fx, fy = (x - x_min) / cell_m - 0.5, (y - y_min) / cell_m - 0.5
    assert abs(fx - round(fx)) < 1e-3 and abs(fy - round(fy)) < 1e-3, (r["lat"], r["lon"], fx, fy)
EOF
}

# per_user_counts FILE: "N" lines, one per user, of its data rows.
per_user_counts() {
    awk -F, 'NR > 1 { n[$1]++ } END { for (u in n) print n[u] }' "$1" | sort -u | tr '\n' ' '
}

# ------------------------------------------------------ 1. optimize
if "$TRACESAN" optimize --region "$BOX" --cell-m 1500 --distortion-m 3000 \
        -o "$TMPD/plain.channel" "$TMPD/train.csv" 2>"$TMPD/optimize.log"; then
    pass "optimize: writes a channel file"
else
    fail "optimize: exit status $?"
    show_file "$TMPD/optimize.log"
fi
check "optimize: reports I(U;Z), E[d], the gap, iterations and time" \
    grep -Eq 'mi_bits=[0-9.]+ mean_distortion_m=[0-9.]+ gap_bits=[0-9.e+-]+ iterations=[0-9]+ converged=yes .*time=' \
    "$TMPD/optimize.log"
check "optimize: says the guarantee is not DP without --geoind-epsilon" \
    grep -q 'guarantee=information-theoretic (not DP)' "$TMPD/optimize.log"
check "optimize: refuses a missing --distortion-m" \
    sh -c '! "$1" optimize --region "$2" --cell-m 1500 -o "$3/x" "$3/train.csv" 2>/dev/null' \
    _ "$TRACESAN" "$BOX" "$TMPD"

# ---------------------------------------------- 2. disabled by default
start_daemon disabled
check "disabled: the daemon logs the profile as disabled" \
    grep -q "profile 'mi-channel' (mechanism mi-channel) is disabled" "$DAEMON_LOG"
start_tail disabled 1 --topic sanitized --topic rejected
head -n 2 "$TMPD/live.csv" >"$TMPD/one.csv"
replay "$TMPD/one.csv" --profile mi-channel
wait_tail disabled 30
check_eq "disabled: rejected as unknown_profile" 1 "$(count_reason unknown_profile)"
stop_daemon disabled

# run_capped NAME: the live trace through a daemon whose mi-channel profile
# uses $TMPD/NAME.channel and publishes CAP points per user and window;
# the rest are budget_exhausted.
run_capped() {
    local name=$1
    start_daemon "$name" -o "profiles.mi-channel.channel=\"$TMPD/$name.channel\"" \
        -o "profiles.mi-channel.points_per_window=$CAP"
    start_tail "$name" "$TOTAL" --topic sanitized.mi-channel --topic rejected
    replay "$TMPD/live.csv" --profile mi-channel
    wait_tail "$name" 60
    check_eq "$name: $CAP reports per user" "$(( USERS * CAP ))" "$(data_rows "$TAIL_OUT")"
    check_eq "$name: the rest budget_exhausted" "$(( USERS * (PER_USER - CAP) ))" \
        "$(count_reason budget_exhausted)"
}

# ---------------------------- 3. no geo-ind: centres, eps 0, the cap
run_capped plain
check_eq "plain: every user capped at $CAP" "$CAP " "$(per_user_counts "$TAIL_OUT")"
check "plain: every report is a cell centre" every_report_a_centre "$TAIL_OUT" 1500
check "plain: mechanism mi-channel, eps_point 0, nothing spent" \
    awk -F, 'NR > 1 && ($5 != "mi-channel" || $6 + 0 != 0 || $7 + 0 != 0) { exit 1 }' "$TAIL_OUT"
check "plain: every report says its guarantee is information-theoretic" \
    awk -F, 'NR == 1 && $13 != "information_theoretic" { exit 1 }
             NR > 1 && $13 != 1 { exit 1 }' "$TAIL_OUT"
check "plain: and books no eps_floor" \
    awk -F, 'NR > 1 && $15 != "" { exit 1 }' "$TAIL_OUT"
check "plain: no true point published" no_input_point_published "$TMPD/live.csv" "$TAIL_OUT"
stop_daemon plain

# ------------------------------------- 4. geo-ind: spends its epsilon
EPS=0.001
if "$TRACESAN" optimize --region "$BOX" --cell-m 3000 --distortion-m 3000 \
        --geoind-epsilon "$EPS" --max-iterations 300 \
        -o "$TMPD/geoind.channel" "$TMPD/train.csv" 2>"$TMPD/optimize2.log"; then
    pass "optimize --geoind-epsilon: writes a channel file"
else
    fail "optimize --geoind-epsilon: exit status $?"
    show_file "$TMPD/optimize2.log"
fi
run_capped geoind
check "geoind: every report is a cell centre" every_report_a_centre "$TAIL_OUT" 3000
check "geoind: no report claims an information-theoretic guarantee" \
    awk -F, 'NR > 1 && $13 != "" { exit 1 }' "$TAIL_OUT"
check "geoind: eps_point is the file's epsilon per metre" \
    awk -F, -v e="$EPS" 'NR > 1 && ($6 < e * (1 - 1e-6) || $6 > e * (1 + 1e-5)) { exit 1 }' "$TAIL_OUT"
# The constant on true points: eps_point times the 3 km cells' diagonal.
check "geoind: eps_floor is eps_point times the cell diagonal" \
    awk -F, 'NR == 1 && $15 != "eps_floor" { exit 1 }
             NR > 1 && ($15 / $6 < 4242.63 || $15 / $6 > 4242.65) { exit 1 }' "$TAIL_OUT"
stop_daemon geoind
finish
