#!/usr/bin/env bash
# Memory per user: RSS of tracesand before and after admitting U new geoind
# users (one point each), with the shipped configuration and with a pim
# model configured next to it. Before issue 11 every user carried a state
# block sized for the largest profile, so configuring a pim model made each
# geoind user cost 16 KB; now a user holds only its own profile's state.
#   bench/bench_users.sh [U] [RUNS]      (from a build dir, or BUILD_DIR=...)
set -euo pipefail
BENCH=bench_users
. "$(dirname "$0")/lib.sh"
U=${1:-100000}
RUNS=${2:-3}

# A small model over the bundled NYC sample: the pim profile's per-user
# state depends on belief_capacity, not on the model's size.
"$tracesan" learn --region 40.5,-74.3,41.0,-73.7 --cell-m 3000 \
    --tick-s 300 --output "$tmp/nyc.model" \
    "$srcdir/data/sample/gowalla-nyc-sample.csv" 2>"$tmp/learn.log" ||
    { cat "$tmp/learn.log" >&2; exit 1; }
"$build/bench/bench_pipeline" --gen "$U" --users "$U" "$tmp/points.csv"

echo "bench_users: machine: $(nproc) cores, $(uname -srm); $U new users per run"
for run in $(seq "$RUNS"); do
    for setup in shipped pim-model; do
        extra=(-o 'state.dir=""' -o "users.max_users=$((U + 1000))")
        [ $setup = pim-model ] && extra+=(-o "profiles.pim.model=$tmp/nyc.model")
        start_server "$build/tracesand" "${extra[@]}"
        before=$(rss_kb "$daemon_pid")
        timed_replay "$tmp/points.csv" "$U"
        after=$(rss_kb "$daemon_pid")
        stop_server
        per_user=$(awk -v a="$after" -v b="$before" -v n="$U" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
        echo "bench_users:   run $run $setup: $got/$U points, RSS $before -> $after kB: $per_user B per user; admitted in $elapsed_ms ms"
        echo "$per_user" >>"$tmp/per_user.$setup"
    done
done
for setup in shipped pim-model; do
    echo "bench_users: median $setup: $(median <"$tmp/per_user.$setup") B of RSS per geoind user (target: <= 300)"
done
