#!/usr/bin/env bash
# Throughput cost of the durable store: the same replay -> tracesand -> tail
# measurement as bench/run.sh (a), with the shipped geoind profile, for
#   memory   no state.dir (in-memory ledgers)
#   batch    state.dir + state.sync = batch (group commit, one data fsync per
#            event-loop group)
#   full     state.dir + state.sync = full
# Runs are interleaved (memory, batch, full, memory, ...) so all modes see
# the same machine conditions. Prints each run and the medians.
#   bench/bench_store.sh [N] [RUNS]      (from a build dir, or BUILD_DIR=...)
set -euo pipefail

BENCH=bench_store
. "$(dirname "$0")/lib.sh"
N=${1:-300000}
RUNS=${2:-3}
USERS=10000
MODES=${BENCH_STORE_MODES:-"memory batch full"}

start_daemon() {  # start_daemon MODE
    local state=(-o 'state.dir=""')
    if [ "$1" != memory ]; then
        rm -rf "$tmp/state"
        state=(-o "state.dir=$tmp/state" -o "state.sync=$1")
    fi
    start_server "$build/tracesand" "${state[@]}"
}

echo "bench_store: machine: $(nproc) cores, $(uname -srm); state in $tmp ($(df -T "$tmp" | awk 'NR == 2 { print $2 }'))"
"$build/bench/bench_pipeline" --gen "$N" --users "$USERS" "$tmp/points.csv"
for run in $(seq "$RUNS"); do
    for mode in $MODES; do
        start_daemon "$mode"
        timed_replay "$tmp/points.csv" "$N"
        stop_server
        rate=$(awk -v n="$got" -v t="$elapsed_ms" 'BEGIN { printf "%.0f", n / (t / 1000) }')
        echo "bench_store:   run $run $mode: $got/$N points in $elapsed_ms ms: $rate points/s"
        echo "$rate" >>"$tmp/rates.$mode"
    done
done
for mode in $MODES; do
    echo "bench_store: median $mode: $(median <"$tmp/rates.$mode") points/s"
done
if [ -f "$tmp/rates.memory" ] && [ -f "$tmp/rates.batch" ]; then
    awk -v m="$(median <"$tmp/rates.memory")" -v b="$(median <"$tmp/rates.batch")" \
        'BEGIN { printf "bench_store: batch / memory = %.2f (target: >= 0.90, a durable-store cost of at most 10 %%)\n", b / m }'
fi
