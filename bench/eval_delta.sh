#!/usr/bin/env bash
# The issue-5 acceptance run: delta-location-set privacy (pim) against the
# planar-Laplace-on-the-delta-set baseline (lm-delta) on GeoLife, as in
# Xiao & Xiong (CCS 2015): 340 m cells over Beijing, epsilon = 1,
# delta = 0.01. A popular Markov model is learnt from 15 users; the other
# 5 users' traces (inside the box, one fix per model tick) are sanitized
# with both profiles for SEEDS seeds and evaluated with `tracesan eval`:
# mean and RMS distance, alpha(0.9) and |ΔX| (mean, median, min).
#
# Tick: TICK_S seconds (default 60). Each release is then one model step,
# so the prior advances by exactly one transition between fixes (fixes
# closer than a tick would repeat a release in the same step, and the
# subsampling keeps the first fix of each tick). 60 s keeps the
# speed-reachable neighbourhood per step small (120 km/h = 2 km = ~6
# cells), so the learnt matrix is sparse and the run takes minutes; longer
# ticks widen both the reachable set and the delta set.
#
# Usage (from a build directory, or set BUILD_DIR / TRACESAN):
#   bench/eval_delta.sh [DATA.csv.gz]
# Default data: ../shared/data/geolife-beijing-20users.csv.gz next to the
# source tree; when it is absent the script says so and exits 0. Everything
# derived from the data lives in a temporary directory removed on exit
# (GeoLife may not be redistributed). SEEDS=N (default 20),
# TEST_USERS=a,b,c,d,e (default: every 4th user of the sorted ids, from
# the 2nd), TICK_S=T.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(cd "$here/.." && pwd)
data=${1:-$srcdir/../shared/data/geolife-beijing-20users.csv.gz}
seeds=${SEEDS:-20}
tick=${TICK_S:-60}
region=39.75,116.15,40.10,116.60
conf=$srcdir/conf/tracesand.conf

if [ ! -f "$data" ]; then
    echo "eval_delta: $data not found; skipping (the GeoLife subset is" \
         "not part of the repository)" >&2
    exit 0
fi
if [ -n "${TRACESAN:-}" ]; then
    tracesan=$TRACESAN
elif [ -n "${BUILD_DIR:-}" ]; then
    tracesan=$BUILD_DIR/tracesan
elif [ -x ./tracesan ]; then
    tracesan=./tracesan
else
    tracesan=$srcdir/build/tracesan
fi
[ -x "$tracesan" ] || { echo "eval_delta: $tracesan not built" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tracesan-evaldelta.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ -n "${TEST_USERS:-}" ]; then
    test_users=$TEST_USERS
else
    test_users=$(gzip -dc "$data" | awk -F, 'NR > 1 { print $1 }' | sort -u -n |
        awk 'NR % 4 == 2' | paste -sd, -)
fi
echo "eval_delta: test users $test_users, tick $tick s, $seeds seeds" >&2

model=$tmp/model.bin
"$tracesan" learn --region "$region" --cell-m 340 --tick-s "$tick" \
    --exclude-users "$test_users" -o "$model" "$data" 2>"$tmp/learn.log" ||
    { cat "$tmp/learn.log" >&2; exit 1; }
tail -n 3 "$tmp/learn.log" | sed 's/^/eval_delta: learn: /' >&2

# The test users' fixes inside the box, the first of each tick.
gzip -dc "$data" | awk -F, -v users="$test_users" -v tick="$tick" '
    BEGIN { n = split(users, list, ","); for (i = 1; i <= n; i++) want[list[i]] = 1
            split("'"$region"'", box, ",") }
    NR == 1 { print "user,ts,lat,lon"; next }
    !($1 in want) { next }
    $3 < box[1] || $3 > box[3] || $4 < box[2] || $4 > box[4] { next }
    { k = $1 "," int($2 / tick); if (k in seen) next; seen[k] = 1; print $1 "," $2 "," $3 "," $4 }
' >"$tmp/test.csv"
echo "eval_delta: $(($(wc -l <"$tmp/test.csv") - 1)) test fixes" >&2

profiles=(
    -o profiles.pim.mechanism=pim -o "profiles.pim.model=\"$model\""
    -o profiles.pim.epsilon=1.0 -o profiles.pim.delta=0.01
    -o profiles.pim.points_per_window=1000000
    -o profiles.lmd.mechanism=lm-delta -o "profiles.lmd.model=\"$model\""
    -o profiles.lmd.epsilon=1.0 -o profiles.lmd.delta=0.01
    -o profiles.lmd.points_per_window=1000000
)
results=$tmp/results.csv
: >"$results"
for s in $(seq 1 "$seeds"); do
    for profile in pim lmd; do
        "$tracesan" sanitize --config "$conf" --seed "$s" --profile "$profile" \
            "${profiles[@]}" "$tmp/test.csv" >"$tmp/out.csv" \
            2>"$tmp/sanitize.log" || { cat "$tmp/sanitize.log" >&2; exit 1; }
        "$tracesan" eval --format csv "$tmp/test.csv" "$tmp/out.csv" \
            2>"$tmp/eval.log" | awk -F, -v s="$s" -v p="$profile" \
            '$1 == "(all)" { print p "," s "," $0 }' >>"$results"
    done
    echo "eval_delta: seed $s done" >&2
done

# eval columns after "p,seed,": user n dropped mean rmse alpha90 pred rho
# windows exhausted covered dss_mean dss_median dss_min. Means over seeds,
# each seed weighing the same; dss_min is the minimum over seeds.
awk -F, '
    { k = $1; seeds[k]++; n[k] += $4; dr[k] += $5; mean[k] += $6; rmse[k] += $7
      a90[k] += $8; dm[k] += $14; dmed[k] += $15
      if (!(k in dmin) || $16 < dmin[k]) dmin[k] = $16 }
    END {
        printf "%-8s %5s %7s %7s %10s %8s %9s %8s %10s %7s\n", "profile", "seeds",
            "n", "dropped", "mean_err_m", "rmse_m", "alpha90_m", "dss_mean", "dss_median", "dss_min"
        split("pim lmd", order, " ")
        for (i = 1; i <= 2; i++) { k = order[i]; if (!(k in seeds)) continue; c = seeds[k]
            printf "%-8s %5d %7.0f %7.0f %10.1f %8.1f %9.1f %8.2f %10.1f %7d\n", k, c,
                n[k] / c, dr[k] / c, mean[k] / c, rmse[k] / c, a90[k] / c, dm[k] / c, dmed[k] / c, dmin[k] }
    }' "$results"
