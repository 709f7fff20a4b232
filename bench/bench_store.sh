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

here=$(cd "$(dirname "$0")" && pwd)
srcdir=$(cd "$here/.." && pwd)
if [ -n "${BUILD_DIR:-}" ]; then
    build=$(cd "$BUILD_DIR" && pwd)
elif [ -x ./tracesand ] && [ -x ./bench/bench_pipeline ]; then
    build=$(pwd)
else
    build=$srcdir/build
fi
N=${1:-300000}
RUNS=${2:-3}
USERS=10000
MODES=${BENCH_STORE_MODES:-"memory batch full"}

for p in "$build/tracesand" "$build/tracesan" "$build/bench/bench_pipeline"; do
    [ -x "$p" ] || { echo "bench_store: $p not built" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tracesan-bench-store.XXXXXX")
daemon_pid=""
tail_pid=""
cleanup() {
    [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

start_daemon() {  # start_daemon MODE
    local state=(-o 'state.dir=""')
    if [ "$1" != memory ]; then
        rm -rf "$tmp/state"
        state=(-o "state.dir=$tmp/state" -o "state.sync=$1")
    fi
    "$build/tracesand" -c "$srcdir/conf/tracesand.conf" \
        -o 'input.endpoint=tcp://127.0.0.1:*' -o 'output.endpoint=tcp://127.0.0.1:*' \
        -o profiles.geoind.points_per_window=1000 \
        -o input.hwm=2000000 -o output.hwm=2000000 -o log.level=warn \
        -o 'http.listen=127.0.0.1:0' \
        "${state[@]}" 2>"$tmp/daemon.log" &
    daemon_pid=$!
    local ready=""
    for _ in $(seq 200); do
        ready=$(sed -n 's/.*ready input=\([^ ]*\) output=\([^ ]*\).*/\1 \2/p' \
                    "$tmp/daemon.log" 2>/dev/null || true)
        [ -n "$ready" ] && break
        sleep 0.05
    done
    [ -n "$ready" ] || { echo "bench_store: daemon did not start" >&2; cat "$tmp/daemon.log" >&2; exit 1; }
    input_ep=${ready% *}
    output_ep=${ready#* }
}

echo "bench_store: machine: $(nproc) cores, $(uname -srm); state in $tmp ($(df -T "$tmp" | awk 'NR == 2 { print $2 }'))"
"$build/bench/bench_pipeline" --gen "$N" --users "$USERS" "$tmp/points.csv"
for run in $(seq "$RUNS"); do
    for mode in $MODES; do
        start_daemon "$mode"
        rm -f "$tmp/ready"
        "$build/tracesan" tail --connect "$output_ep" --count "$N" --timeout 30 \
            --ready-file "$tmp/ready" >"$tmp/tail.csv" 2>"$tmp/tail.err" &
        tail_pid=$!
        while [ ! -e "$tmp/ready" ]; do
            kill -0 "$tail_pid" 2>/dev/null || { echo "bench_store: tail exited" >&2; cat "$tmp/tail.err" >&2; exit 1; }
            sleep 0.02
        done
        t0=$(ms)
        "$build/tracesan" replay --connect "$input_ep" "$tmp/points.csv" 2>"$tmp/replay.err"
        wait "$tail_pid" || true
        tail_pid=""
        t1=$(ms)
        kill -TERM "$daemon_pid"
        wait "$daemon_pid" || echo "bench_store: daemon exited with $?" >&2
        daemon_pid=""
        got=$(( $(wc -l <"$tmp/tail.csv") - 1 ))
        rate=$(awk -v n="$got" -v t="$((t1 - t0))" 'BEGIN { printf "%.0f", n / (t / 1000) }')
        echo "bench_store:   run $run $mode: $got/$N points in $((t1 - t0)) ms: $rate points/s"
        echo "$rate" >>"$tmp/rates.$mode"
    done
done
for mode in $MODES; do
    echo "bench_store: median $mode: $(median <"$tmp/rates.$mode") points/s"
done
if [ -f "$tmp/rates.memory" ] && [ -f "$tmp/rates.batch" ]; then
    awk -v m="$(median <"$tmp/rates.memory")" -v b="$(median <"$tmp/rates.batch")" \
        'BEGIN { printf "bench_store: batch / memory = %.2f (acceptance: >= 0.70)\n", b / m }'
fi
