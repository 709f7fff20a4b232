#!/usr/bin/env bash
# cip-gp through the real daemon, with the shipped profile:
#   1. secret = "all" (shipped): every report carries sigma_z_m =
#      r sqrt(lambda d / (2 eps)) = 100 sqrt(10) m and spends eps / d; the
#      mean distance from the (fixed) true points is sigma sqrt(pi/2)
#      within five standard errors; no true point is published.
#   2. traces_per_window = 1: each user gets d reports per window, the
#      rest are rejected as budget_exhausted.
#   3. secret = "every_other": a user reporting every 5 s gets the noise
#      certified for 5 s at every length scale up to 60 s (1159.48 m), a
#      user reporting every 2 s has every point closer than min_interval_s
#      rejected as cadence_too_fast (every other one), and each trace
#      spends at most epsilon.
#   4. `tracesan cip-loss --every-length-scale` prints the sigma_z the
#      daemon used, and draws the paper's Fig. 2(a) (--plot) as a PNG of
#      the requested size.
#   5. Issue 25: a profile whose sigma_x_m once made the calibration loop
#      for ever (1e-160 with every_other) is refused by --check-config at
#      once, naming the key (under `timeout`, so a hang fails the test).
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v python3 >/dev/null 2>&1 || fatal "python3 is not installed (scripts/setup.sh installs it)"

USERS=4
PER_USER=25
T0=$(( $(date +%s) - 7200 ))
awk -v t="$T0" -v users="$USERS" -v n="$PER_USER" 'BEGIN {
    print "user,ts,lat,lon"
    for (j = 0; j < n; j++)
        for (u = 0; u < users; u++)
            printf "car%d,%d,%.6f,%.6f\n", u, t + 5 * j, 39.90 + 0.01 * u, 116.40 }' \
    >"$TMPD/steady.csv"
TOTAL=$(( USERS * PER_USER ))

# column FILE NAME: the values of one column by header name.
column() {
    python3 - "$1" "$2" <<'EOF'
import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    print(row[sys.argv[2]])
EOF
}

# mean_distance_ok TRUTH OUT SIGMA: the mean distance of each report from
# its user's true point is sigma sqrt(pi/2) (Rayleigh) within five
# standard errors, sigma sqrt((4 - pi) / 2) / sqrt(n).
mean_distance_ok() {
    python3 - "$1" "$2" "$3" <<'EOF'
import csv, math, sys
truth = {r["user"]: (float(r["lat"]), float(r["lon"])) for r in csv.DictReader(open(sys.argv[1]))}
sigma = float(sys.argv[3])
R = 6371008.8
d = []
for r in csv.DictReader(open(sys.argv[2])):
    lat0, lon0 = truth[r["user"]]
    lat, lon = float(r["lat"]), float(r["lon"])
    dy = math.radians(lat - lat0) * R
    dx = math.radians(lon - lon0) * R * math.cos(math.radians(lat0))
    d.append(math.hypot(dx, dy))
mean = sum(d) / len(d)
want = sigma * math.sqrt(math.pi / 2)
se = sigma * math.sqrt((4 - math.pi) / 2) / math.sqrt(len(d))
print("# mean distance %.1f m, expected %.1f m, se %.1f m, n %d" % (mean, want, se, len(d)))
sys.exit(0 if abs(mean - want) < 5 * se else 1)
EOF
}

only_mechanism_cip_gp() {
    [ "$(column "$1" mechanism | sort -u)" = cip-gp ]
}

# traces_within_epsilon FILE: the spends of each run of 10 reports sum to
# at most epsilon = 1.
traces_within_epsilon() {
    column "$1" eps_point |
        awk '{ s += $1 } NR % 10 == 0 { if (s > 1 + 1e-9) exit 1; s = 0 }'
}

# all_between FILE COLUMN LO HI
all_between() {
    column "$1" "$2" | awk -v lo="$3" -v hi="$4" '
        { n++; if ($1 + 0 < lo || $1 + 0 > hi) { print "# out of range: " $1; bad++ } }
        END { exit (bad > 0 || n == 0) }'
}

# ------------------------------------------------------- 1. secret = all
SIGMA_ALL=316.227766
start_daemon all
start_tail all "$TOTAL" --topic sanitized.cip-gp --topic rejected
replay "$TMPD/steady.csv" --profile cip-gp
wait_tail all 60
check_eq "all: every point sanitized" "$TOTAL" "$(data_rows "$TAIL_OUT")"
check_eq "all: the CSV carries sigma_z_m" "$SANITIZED_HEADER" "$(head -n 1 "$TAIL_OUT")"
check "all: mechanism cip-gp" only_mechanism_cip_gp "$TAIL_OUT"
check "all: sigma_z_m = 100 sqrt(10) m on every report" \
    all_between "$TAIL_OUT" sigma_z_m 316.2277 316.2282
check "all: each report spends epsilon / d = 0.1" \
    all_between "$TAIL_OUT" eps_point 0.0999999 0.1000002
check "all: mean distance is sigma sqrt(pi/2)" \
    mean_distance_ok "$TMPD/steady.csv" "$TAIL_OUT" "$SIGMA_ALL"
check "all: no true point published" no_input_point_published "$TMPD/steady.csv" "$TAIL_OUT"
check "all: no coordinate in the daemon log" no_coordinates_in "$TMPD/steady.csv" "$DAEMON_LOG"
stop_daemon all

# ------------------------------------- 2. one trace of budget per window
start_daemon capped -o profiles.cip-gp.traces_per_window=1
start_tail capped "$TOTAL" --topic sanitized.cip-gp --topic rejected
replay "$TMPD/steady.csv" --profile cip-gp
wait_tail capped 60
check_eq "capped: d = 10 reports per user" "$(( USERS * 10 ))" "$(data_rows "$TAIL_OUT")"
check_eq "capped: the rest budget_exhausted" "$(( USERS * (PER_USER - 10) ))" \
    "$(count_reason budget_exhausted)"
stop_daemon capped

# ------------------------------------------------- 3. every other point
awk -v t="$T0" 'BEGIN { print "user,ts,lat,lon"
    for (j = 0; j < 20; j++) {
        printf "steady,%d,39.900000,116.400000\n", t + 5 * j
        printf "eager,%d,39.950000,116.450000\n", t + 2 * j } }' >"$TMPD/cadence.csv"
start_daemon every_other -o 'profiles.cip-gp.secret="every_other"'
start_tail every_other 40 --topic sanitized.cip-gp --topic rejected
replay "$TMPD/cadence.csv" --profile cip-gp
wait_tail every_other 60
# eager at 0, 2, 4, ... s: the points at 2 and 6 s past a release are too
# close (< 5 s); 0, 6, 12, ... are released: 7 of 20.
check_eq "every_other: eager's too-close points rejected as cadence_too_fast" 13 \
    "$(count_reason cadence_too_fast)"
check_eq "every_other: 20 + 7 reports" 27 "$(data_rows "$TAIL_OUT")"
awk -F, 'NR == 1 || $1 == "steady"' "$TAIL_OUT" >"$TMPD/steady_out.csv"
check "every_other: steady's noise is certified for 5 s at every l <= 60 s (1159.48 m)" \
    all_between "$TMPD/steady_out.csv" sigma_z_m 1159.4 1159.6
check "every_other: each trace of 10 spends at most epsilon = 1" \
    traces_within_epsilon "$TMPD/steady_out.csv"
stop_daemon every_other

# --------------------------------------------------- 4. tracesan cip-loss
# The daemon's sigma_z for steady 5 s is what the operator's tool prints.
DAEMON_SIGMA=$(column "$TMPD/steady_out.csv" sigma_z_m | sed -n 1p)
check_eq "cip-loss: --every-length-scale --epsilon 1 at 5 s, l <= 60 s gives the daemon's sigma_z" \
    "$(printf '%.4f' "$DAEMON_SIGMA")" \
    "$("$TRACESAN" cip-loss --points 10 --interval-s 5 --length-scale-s 60 --epsilon 1 \
         --every-length-scale | awk -F, 'NR == 2 { printf "%.4f", $2 }')"
# At l = 60 s alone the noise would be 1153.96 m, but the loss is not
# monotone in l: the nine-point trace of issue 24 at that noise is within
# 1 at l = 60 s and above it at 36 s, and its certified bound over every
# l <= 60 s is above 1 too.
IRREGULAR=0,7.2,19.6,48.1,81.5,86.5,92.4,97.4,102.9
check "cip-loss --times: L*(36 s) > 1 > L*(60 s) for the nine-point trace" sh -c '
    "$1" cip-loss --times "$2" --length-scale-s 60 --length-scale-s 36 --sigma-z-m 1153.96097 |
    awk -F, "NR == 2 && \$3 < 1 { a = 1 } NR == 3 && \$3 > 1.1 { b = 1 } END { exit !(a && b) }"' \
    _ "$TRACESAN" "$IRREGULAR"
check "cip-loss --every-length-scale: certified bound above L* at the peak" sh -c '
    "$1" cip-loss --times "$2" --length-scale-s 60 --sigma-z-m 1153.96097 --every-length-scale |
    awk -F, "NR == 2 { exit !(\$3 >= \$4 && \$4 > 1.1 && \$5 > 30 && \$5 < 45) }"' \
    _ "$TRACESAN" "$IRREGULAR"
# png_size FILE: "WIDTHxHEIGHT" from the PNG signature and IHDR chunk.
png_size() {
    python3 - "$1" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
print("%dx%d" % struct.unpack(">II", data[16:24]))
EOF
}
"$TRACESAN" cip-loss --points 10 --interval-s 1 --length-scale-s 1 --length-scale-s 3 \
    --independent --sigma-z-m 0.5 --sigma-z-m 1 --sigma-z-m 2 --radius-m 1 \
    --plot "$TMPD/fig2a.png" --plot-size 640x400 >"$TMPD/fig2a.csv"
check_eq "cip-loss --plot: a PNG of the requested size" 640x400 "$(png_size "$TMPD/fig2a.png")"
check_eq "cip-loss --plot: the table is still printed" 10 "$(wc -l <"$TMPD/fig2a.csv")"
check "cip-loss --plot: refused with --epsilon, no file left" \
    sh -c '! "$1" cip-loss --points 4 --interval-s 1 --length-scale-s 1 --epsilon 1 \
             --plot "$2/bad.png" 2>/dev/null && [ ! -e "$2/bad.png" ]' _ "$TRACESAN" "$TMPD"

# ------------------------------------ 5. computations that used to hang
for value in 1e-160 1e-155; do
    rc=0
    timeout 20 "$TRACESAND" --check-config "$SHIPPED_CONF" \
        -o 'profiles.cip-gp.secret="every_other"' -o "profiles.cip-gp.sigma_x_m=$value" \
        >"$TMPD/tiny.out" 2>"$TMPD/tiny.err" </dev/null || rc=$?
    check_eq "check-config sigma_x_m=$value: exits 1 at once (124 = timed out)" 1 "$rc"
    check "check-config sigma_x_m=$value: the error names sigma_x_m and its range" \
        grep -q "sigma_x_m: must be in \[1e-06" "$TMPD/tiny.err"
done

finish
