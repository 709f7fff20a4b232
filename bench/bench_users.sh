#!/usr/bin/env bash
# Memory per user: RSS of tracesand before and after admitting new users
# (one point each).
#   shipped     U geoind users, the shipped configuration
#   pim-model   U geoind users with a pim model configured next to them:
#               before issue 11 every user carried a state block sized for
#               the largest profile; now a user holds only its own
#               profile's state
#   pim-users   U/10 users of the pim profile itself: before issue 25
#               (item 10) each held belief_capacity x 16 B (16 KiB) of
#               belief whatever the model; now the cells its belief holds,
#               at most the model's cells (docs/delta_privacy.md, "Memory")
#   bench/bench_users.sh [U] [RUNS]      (from a build dir, or BUILD_DIR=...)
set -euo pipefail
BENCH=bench_users
. "$(dirname "$0")/lib.sh"
U=${1:-100000}
RUNS=${2:-3}
PIM_U=$(( U / 10 ))

# A small model over the bundled NYC sample (3 km cells, 19 x 17).
"$tracesan" learn --region 40.5,-74.3,41.0,-73.7 --cell-m 3000 \
    --tick-s 300 --output "$tmp/nyc.model" \
    "$srcdir/data/sample/gowalla-nyc-sample.csv" 2>"$tmp/learn.log" ||
    { cat "$tmp/learn.log" >&2; exit 1; }
cells=$(sed -n 's/.*model cells=\([0-9]*\).*/\1/p' "$tmp/learn.log")
"$build/bench/bench_pipeline" --gen "$U" --users "$U" "$tmp/points.csv"
awk -F, -v n="$PIM_U" 'NR == 1 { print $0 ",profile"; next }
                       NR <= n + 1 { print $0 ",pim" }' \
    "$tmp/points.csv" >"$tmp/pim_points.csv"

echo "bench_users: machine: $(nproc) cores, $(uname -srm); $U new users per run ($PIM_U for pim-users; model of $cells cells)"
setups="shipped pim-model pim-users"
for run in $(seq "$RUNS"); do
    for setup in $setups; do
        extra=(-o 'state.dir=""' -o "users.max_users=$((U + 1000))")
        [ $setup != shipped ] && extra+=(-o "profiles.pim.model=$tmp/nyc.model")
        points=$tmp/points.csv n=$U
        [ $setup = pim-users ] && points=$tmp/pim_points.csv n=$PIM_U
        start_server "$build/tracesand" "${extra[@]}"
        before=$(rss_kb "$daemon_pid")
        timed_replay "$points" "$n"
        after=$(rss_kb "$daemon_pid")
        stop_server
        per_user=$(awk -v a="$after" -v b="$before" -v n="$n" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
        echo "bench_users:   run $run $setup: $got/$n points, RSS $before -> $after kB: $per_user B per user; admitted in $elapsed_ms ms"
        echo "$per_user" >>"$tmp/per_user.$setup"
    done
done
for setup in shipped pim-model; do
    echo "bench_users: median $setup: $(median <"$tmp/per_user.$setup") B of RSS per geoind user (target: <= 300)"
done
echo "bench_users: median pim-users: $(median <"$tmp/per_user.pim-users") B of RSS per pim user ($cells-cell model, belief_capacity 1024)"
