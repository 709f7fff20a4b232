#!/usr/bin/env bash
# Per-release latency of the delta-location-set profiles (issue 5
# acceptance): the FULL step of ops->release (prior, delta-set, drift and
# surrogate, hull, K, T, PIM sample, posterior, state write-back) through
# the registry, on the acceptance setting of bench/eval_delta.sh:
#   GeoLife Beijing box 39.75,116.15,40.10,116.60, 340 m cells, 5 s tick,
#   popular model learnt on the 15 training users, test users
#   6,15,31,46,63 (their fixes inside the box, the first of each tick, one
#   state block per user, whole traces in time order), epsilon 1,
#   delta 0.01, exact beliefs: belief_capacity CAPACITY (default 16384,
#   above the grid's 12 995 cells) and prune_threshold PRUNE (default 0).
#   Since pruned mass counts against delta, the profile's defaults
#   (1024 cells, no pruning) cannot hold 0.99 of this model's initial
#   distribution, and with pruning at 1e-6 most releases are refused as
#   uncertified; the exact belief is what docs/delta_privacy.md measures.
# Runs bench_belief --trace RUNS times per mechanism (seeds 1..RUNS) and
# prints the median over runs of each run's median, p90, p99 and max
# release latency (microseconds) and of the belief memory per user.
#
# Usage (from a build directory, or set BUILD_DIR):
#   bench/bench_delta.sh [DATA.csv.gz]          # or: make bench
# Default data: ../shared/data/geolife-beijing-20users.csv.gz next to the
# source tree; when it is absent the script says so and exits 0. Derived
# files live in a temporary directory removed on exit (GeoLife may not be
# redistributed). RUNS=N (default 5), MECHS="pim lm-delta",
# TEST_USERS=a,b,c (default 6,15,31,46,63), TICK_S=T (default 5),
# CAPACITY=C (default 16384), PRUNE=T (default 0).
set -euo pipefail

BENCH=bench_delta
. "$(dirname "$0")/common.sh"
data=${1:-$GEOLIFE}
runs=${RUNS:-5}
mechs=${MECHS:-pim lm-delta}
test_users=${TEST_USERS:-6,15,31,46,63}
tick=${TICK_S:-5}
capacity=${CAPACITY:-16384}
prune=${PRUNE:-0}
region=39.75,116.15,40.10,116.60

need_data "$data"
need_programs "$tracesan" "$build/bench/bench_belief"

scratch_dir

model=$tmp/model.bin
"$tracesan" learn --region "$region" --cell-m 340 --tick-s "$tick" \
    --exclude-users "$test_users" --output "$model" "$data" 2>"$tmp/learn.log" ||
    { cat "$tmp/learn.log" >&2; exit 1; }
tail -n 1 "$tmp/learn.log" | sed 's/^/bench_delta: /'

# Same selection as bench/eval_delta.sh, without cutting into windows.
gzip -dc "$data" | awk -F, -v users="$test_users" -v tick="$tick" '
    BEGIN { n = split(users, list, ","); for (i = 1; i <= n; i++) want[list[i]] = 1
            split("'"$region"'", box, ","); print "user,ts,lat,lon" }
    NR == 1 || !($1 in want) { next }
    $3 < box[1] || $3 > box[3] || $4 < box[2] || $4 > box[4] { next }
    { k = $1 "," int($2 / tick); if (k in seen) next; seen[k] = 1; print }
' >"$tmp/test.csv"
echo "bench_delta: $(($(wc -l <"$tmp/test.csv") - 1)) releases of users" \
     "$test_users, tick $tick s, $runs runs per mechanism"


for mech in $mechs; do
    : >"$tmp/runs.txt"
    for s in $(seq 1 "$runs"); do
        "$build/bench/bench_belief" --model "$model" --trace "$tmp/test.csv" \
            --profile-mech "$mech" --capacity "$capacity" --threshold "$prune" \
            --seed "$s" >"$tmp/run.txt" ||
            { cat "$tmp/run.txt" >&2; exit 1; }
        [ "$s" = 1 ] && cp "$tmp/run.txt" "$tmp/run1.txt"
        # "  release latency us: median M  p90 P  p99 Q  max X" and
        # "  belief memory per user: live bytes median M  p99 Q  max X; ..."
        awk '/release latency us:/ { lat = $5 " " $7 " " $9 " " $11 }
             /belief memory per user:/ { sub(/;$/, "", $12); mem = $8 " " $10 " " $12
                                         state = $15 }
             / releases \(/ { dss = $NF; refused = $4; sub(/^\(/, "", refused) }
             END { print lat, mem, state, dss, refused }' "$tmp/run.txt" >>"$tmp/runs.txt"
    done
    col() { awk -v c="$1" '{ print $c }' "$tmp/runs.txt" | median; }
    printf '%-8s latency us (median of %d runs): median %s  p90 %s  p99 %s  max %s\n' \
        "$mech" "$runs" "$(col 1)" "$(col 2)" "$(col 3)" "$(col 4)"
    printf '%-8s belief bytes per user: median %s  p99 %s  max %s; state block %s; mean |dX| %s; refused %s\n' \
        "$mech" "$(col 5)" "$(col 6)" "$(col 7)" "$(col 8)" "$(col 9)" "$(col 10)"
    # Where the tail comes from: the prior after a gap of k ticks costs k
    # sparse products (k <= max_ticks; beyond, a cheap reset).
    echo "$mech      by ticks since the user's last release (run 1):"
    sed -n '/latency us by ticks/,/reset/p' "$tmp/run1.txt" | tail -n +2
done
