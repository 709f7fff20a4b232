#!/usr/bin/env bash
# The issue-5 acceptance run: delta-location-set privacy (pim) against the
# planar-Laplace-on-the-delta-set baseline (lm-delta) on GeoLife, as in
# Xiao & Xiong (CCS 2015): 340 m cells over Beijing, epsilon = 1,
# delta = 0.01. A popular Markov model is learnt from 15 users; the other
# 5 users' traces (inside the box, one fix per model tick) are sanitized
# with both profiles for SEEDS seeds and evaluated with `tracesan eval`:
# mean and RMS distance, alpha(0.9) and |ΔX| (mean, median, min).
#
# Tick: TICK_S seconds (default 5). The paper releases at every GeoLife
# update ("every 1~60 seconds"); 5 s is this subset's modal sampling
# interval, and one release per tick makes each release one model step.
# Longer ticks widen the one-step spread of the popular model, and the
# delta set grows with it (60 s gave a mean |ΔX| of ~670 cells).
#
# Windows: as in the paper's Section 6.2 (trajectories of 500 timestamps),
# each test user's resampled trace is cut at gaps longer than GAP_S
# (default 60 s) into trajectories, and each trajectory into windows of
# WINDOW_STEPS (default 500) consecutive releases; shorter remainders are
# dropped. Every window is sanitized as its own pseudonym ("user-w"), so
# its belief starts from the model's initial distribution, like a new user.
#
# Also reported, with `tracesan eval --config`: the drift ratio (the share
# of releases whose true cell was outside ΔX; evaluation only, replayed
# from the published points and the true trace) and kNN precision/recall
# (k = k' = 5) against a public POI layer: the centres of the 340 m cells
# the 15 TRAINING users visited (the test users' own places are not in it).
# And |ΔX| and the error by step within a window ("over time").
#
# Usage (from a build directory, or set BUILD_DIR / TRACESAN):
#   bench/eval_delta.sh [DATA.csv.gz]
# Default data: ../shared/data/geolife-beijing-20users.csv.gz next to the
# source tree; when it is absent the script says so and exits 0. Everything
# derived from the data lives in a temporary directory removed on exit
# (GeoLife may not be redistributed). SEEDS=N (default 20),
# TEST_USERS=a,b,c,d,e (default: every 4th user of the sorted ids, from
# the 2nd), TICK_S=T, WINDOW_STEPS=N, GAP_S=S, MAX_WINDOWS=N (default 0:
# all windows), IN_SAMPLE=1 (diagnostic: learn on the test users too),
# REGION=LAT_MIN,LON_MIN,LAT_MAX,LON_MAX (default the Beijing box above;
# the paper used the area within the 3rd ring road, about
# 39.855,116.305,39.970,116.462), CAPACITY=N (belief_capacity).
set -euo pipefail

BENCH=eval_delta
. "$(dirname "$0")/common.sh"
data=${1:-$GEOLIFE}
seeds=${SEEDS:-20}
tick=${TICK_S:-5}
window_steps=${WINDOW_STEPS:-500}
gap_s=${GAP_S:-60}
max_windows=${MAX_WINDOWS:-0}
region=${REGION:-39.75,116.15,40.10,116.60}
conf=$srcdir/conf/tracesand.conf

need_data "$data"
need_programs "$tracesan"

scratch_dir

test_users=$(test_users "$data" 4 2)
echo "eval_delta: test users $test_users, tick $tick s, $seeds seeds" >&2

# IN_SAMPLE=1 learns the model on all users, test users included: not the
# acceptance setting, a diagnostic of how much of the drift comes from the
# test users going where the 15 training users never went.
exclude=(--exclude-users "$test_users")
if [ "${IN_SAMPLE:-0}" = 1 ]; then
    exclude=()
    echo "eval_delta: IN_SAMPLE=1: the model is learnt on the test users too" >&2
fi
model=$tmp/model.bin
"$tracesan" learn --region "$region" --cell-m 340 --tick-s "$tick" \
    "${exclude[@]}" --output "$model" "$data" 2>"$tmp/learn.log" ||
    { cat "$tmp/learn.log" >&2; exit 1; }
tail -n 3 "$tmp/learn.log" | sed 's/^/eval_delta: learn: /' >&2

# The test users' fixes inside the box, the first of each tick, cut into
# trajectories at gaps > GAP_S and into windows of WINDOW_STEPS releases.
gzip -dc "$data" | awk -F, -v users="$test_users" -v tick="$tick" \
    -v steps="$window_steps" -v gap="$gap_s" -v maxw="$max_windows" '
    BEGIN { n = split(users, list, ","); for (i = 1; i <= n; i++) want[list[i]] = 1
            split("'"$region"'", box, ","); print "user,ts,lat,lon" }
    function flush(   i) {
        if (len == steps && (maxw == 0 || windows < maxw)) {
            windows++
            for (i = 1; i <= len; i++) print cur "-" windows "," buf[i]
        }
        len = 0
    }
    NR == 1 { next }
    !($1 in want) { next }
    $3 < box[1] || $3 > box[3] || $4 < box[2] || $4 > box[4] { next }
    { k = $1 "," int($2 / tick); if (k in seen) next; seen[k] = 1
      if ($1 != cur || $2 - last > gap) { flush(); cur = $1 }
      last = $2; buf[++len] = $2 "," $3 "," $4
      if (len == steps) flush() }
    END { flush() }
' >"$tmp/test.csv"
echo "eval_delta: $(($(wc -l <"$tmp/test.csv") - 1)) test fixes in" \
     "$(awk -F, 'NR > 1 { print $1 }' "$tmp/test.csv" | sort -u | wc -l)" \
     "windows of $window_steps" >&2

# Public POI layer: centres of the cells visited by the training users.
gzip -dc "$data" | awk -F, -v users="$test_users" '
    BEGIN { n = split(users, list, ","); for (i = 1; i <= n; i++) skip[list[i]] = 1
            split("'"$region"'", box, ",")
            pi = 3.141592653589793; cell = 340
            dlat = cell / 111195.0
            dlon = cell / (111195.0 * cos((box[1] + box[3]) / 2 * pi / 180))
            print "lat,lon" }
    NR == 1 || ($1 in skip) { next }
    $3 < box[1] || $3 > box[3] || $4 < box[2] || $4 > box[4] { next }
    { r = int(($3 - box[1]) / dlat); c = int(($4 - box[2]) / dlon); k = r "," c
      if (!(k in seen)) { seen[k] = 1
          printf "%.6f,%.6f\n", box[1] + (r + 0.5) * dlat, box[2] + (c + 0.5) * dlon } }
' >"$tmp/poi.csv"
echo "eval_delta: $(($(wc -l <"$tmp/poi.csv") - 1)) POIs" >&2

profiles=(
    -o profiles.pim.mechanism=pim -o "profiles.pim.model=\"$model\""
    -o profiles.pim.epsilon=1.0 -o profiles.pim.delta=0.01
    -o profiles.pim.points_per_window=1000000
    -o profiles.lmd.mechanism=lm-delta -o "profiles.lmd.model=\"$model\""
    -o profiles.lmd.epsilon=1.0 -o profiles.lmd.delta=0.01
    -o profiles.lmd.points_per_window=1000000
)
# CAPACITY=N sets belief_capacity for both profiles (default 16384, above
# the Beijing model's 12 995 cells: the belief is exact). Beliefs that do
# not fit are pruned, and what pruning drops is no longer certified, so a
# smaller capacity shows up as refused releases ("dropped"), or as a
# refused profile when it cannot hold 1 - delta of the initial
# distribution (2 047 cells at delta = 0.01).
capacity=${CAPACITY:-16384}
profiles+=(-o "profiles.pim.belief_capacity=$capacity"
           -o "profiles.lmd.belief_capacity=$capacity")
results=$tmp/results.csv
steps=$tmp/steps.csv
: >"$results"
: >"$steps"
for s in $(seq 1 "$seeds"); do
    for profile in pim lmd; do
        "$tracesan" sanitize --config "$conf" --seed "$s" --profile "$profile" \
            "${profiles[@]}" "$tmp/test.csv" >"$tmp/out.csv" \
            2>"$tmp/sanitize.log" || { cat "$tmp/sanitize.log" >&2; exit 1; }
        "$tracesan" eval --format csv --config "$conf" --profile "$profile" \
            "${profiles[@]}" --poi "$tmp/poi.csv" --knn 5 \
            --series "$tmp/series.csv" "$tmp/test.csv" "$tmp/out.csv" \
            2>"$tmp/eval.log" | awk -F, -v s="$s" -v p="$profile" \
            '$1 == "(all)" { print p "," s "," $0 }' >>"$results" ||
            { cat "$tmp/eval.log" >&2; exit 1; }
        # The replay must reproduce every published |ΔX|: otherwise the
        # drift ratio is not the sanitizer's.
        grep -q "replayed .* dss_mismatches=0 errors=0" "$tmp/eval.log" ||
            { echo "eval_delta: replay does not match the release:" >&2
              cat "$tmp/eval.log" >&2; exit 1; }
        # Step index within each window (series rows are in input order).
        awk -F, -v p="$profile" 'NR > 1 { print p "," ++step[$1] "," $3 "," $4 }' \
            "$tmp/series.csv" >>"$steps"
    done
    echo "eval_delta: seed $s done" >&2
done

# eval columns after "p,seed,": user n dropped mean rmse alpha90 pred rho
# windows exhausted covered dss_mean dss_median dss_min drift_ratio
# knn_precision knn_recall. Means over seeds, each seed weighing the same;
# dss_min is the minimum over seeds.
awk -F, '
    { k = $1; seeds[k]++; n[k] += $4; dr[k] += $5; mean[k] += $6; rmse[k] += $7
      a90[k] += $8; dm[k] += $14; dmed[k] += $15; drift[k] += $17
      kp[k] += $18; kr[k] += $19
      if (!(k in dmin) || $16 < dmin[k]) dmin[k] = $16 }
    END {
        printf "%-8s %5s %7s %7s %10s %8s %9s %8s %10s %7s %7s %7s %7s\n", "profile",
            "seeds", "n", "dropped", "mean_err_m", "rmse_m", "alpha90_m", "dss_mean",
            "dss_median", "dss_min", "drift", "knn_p", "knn_r"
        split("pim lmd", order, " ")
        for (i = 1; i <= 2; i++) { k = order[i]; if (!(k in seeds)) continue; c = seeds[k]
            printf "%-8s %5d %7.0f %7.0f %10.1f %8.1f %9.1f %8.2f %10.1f %7d %7.4f %7.4f %7.4f\n",
                k, c, n[k] / c, dr[k] / c, mean[k] / c, rmse[k] / c, a90[k] / c, dm[k] / c,
                dmed[k] / c, dmin[k], drift[k] / c, kp[k] / c, kr[k] / c }
    }' "$results"

# Over time: mean |ΔX| and mean error at some steps of the windows, over
# all windows and seeds.
echo
awk -F, '
    BEGIN { split("1 2 5 10 25 50 100 200 300 400 500", at, " ")
            for (i in at) want[at[i]] = 1 }
    ($2 in want) { k = $1 "," $2; c[k]++; d[k] += $3; e[k] += $4 }
    END {
        printf "%6s %10s %10s %12s %12s\n", "step", "pim_dss", "lmd_dss", "pim_err_m", "lmd_err_m"
        for (i = 1; i <= 11; i++) { s = at[i]; p = "pim," s; l = "lmd," s
            if (!(p in c) && !(l in c)) continue
            printf "%6d %10.1f %10.1f %12.1f %12.1f\n", s, c[p] ? d[p] / c[p] : 0,
                c[l] ? d[l] / c[l] : 0, c[p] ? e[p] / c[p] : 0, c[l] ? e[l] / c[l] : 0 }
    }' "$steps"
