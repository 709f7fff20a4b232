#!/usr/bin/env bash
# Benchmark the daemon on loopback with the shipped geoind profile.
#   (a) throughput: replay -> tracesand -> tail, N synthetic points, 5 runs,
#       points/s = N / (replay start .. tail has the N-th message); median.
#   (b) latency at a fixed offered rate with bench_pipeline --latency.
# Prints figures only. Run from a build directory (or set BUILD_DIR):
#   make bench            # or: bench/run.sh [N] [RATE] [SECONDS]
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
N=${1:-1000000}
RATE=${2:-50000}
SECONDS_AT_RATE=${3:-5}
RUNS=${BENCH_RUNS:-5}
USERS=10000

for p in "$build/tracesand" "$build/tracesan" "$build/bench/bench_pipeline"; do
    [ -x "$p" ] || { echo "bench: $p not built (make -C $build all bench/bench_pipeline)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tracesan-bench.XXXXXX")
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

# Budget for 1000 points per user per window (each user gets <= 250 here);
# deep queues so nothing is dropped at PUB/SUB high-water marks.
start_daemon() {
    "$build/tracesand" -c "$srcdir/conf/tracesand.conf" \
        -o 'input.endpoint=tcp://127.0.0.1:*' -o 'output.endpoint=tcp://127.0.0.1:*' \
        -o profiles.geoind.points_per_window=1000 \
        -o input.hwm=2000000 -o output.hwm=2000000 -o log.level=warn \
        -o 'state.dir=""' 2>"$tmp/daemon.log" &
    daemon_pid=$!
    local ready=""
    for _ in $(seq 200); do
        ready=$(sed -n 's/.*ready input=\([^ ]*\) output=\([^ ]*\).*/\1 \2/p' \
                    "$tmp/daemon.log" 2>/dev/null || true)
        [ -n "$ready" ] && break
        sleep 0.05
    done
    [ -n "$ready" ] || { echo "bench: daemon did not start" >&2; cat "$tmp/daemon.log" >&2; exit 1; }
    input_ep=${ready% *}
    output_ep=${ready#* }
}

stop_daemon() {
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || echo "bench: daemon exited with $?" >&2
    daemon_pid=""
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "bench: machine: $(nproc) cores, $(uname -srm)"
echo "bench: generating $N synthetic points over $USERS users"
"$build/bench/bench_pipeline" --gen "$N" --users "$USERS" "$tmp/points.csv"

echo "bench: (a) throughput replay -> tracesand -> tail, $RUNS runs of $N points"
: >"$tmp/rates"
for run in $(seq "$RUNS"); do
    start_daemon
    rm -f "$tmp/ready"
    "$build/tracesan" tail --connect "$output_ep" --count "$N" --timeout 30 \
        --ready-file "$tmp/ready" >"$tmp/tail.csv" 2>"$tmp/tail.err" &
    tail_pid=$!
    waited=0
    while [ ! -e "$tmp/ready" ]; do
        kill -0 "$tail_pid" 2>/dev/null || { echo "bench: tail exited" >&2; cat "$tmp/tail.err" >&2; exit 1; }
        waited=$((waited + 1))
        [ $waited -lt 1000 ] || { echo "bench: tail not connected after 20 s" >&2; exit 1; }
        sleep 0.02
    done
    t0=$(ms)
    "$build/tracesan" replay --connect "$input_ep" "$tmp/points.csv" 2>"$tmp/replay.err"
    t_sent=$(ms)
    wait "$tail_pid" || true
    tail_pid=""
    t1=$(ms)
    stop_daemon
    got=$(( $(wc -l <"$tmp/tail.csv") - 1 ))
    rate=$(awk -v n="$got" -v t="$((t1 - t0))" 'BEGIN { printf "%.0f", n / (t / 1000) }')
    echo "bench:   run $run: $got/$N points in $((t1 - t0)) ms (replay done after $((t_sent - t0)) ms): $rate points/s"
    [ "$got" -eq "$N" ] || echo "bench:   run $run: WARNING: $((N - got)) points missing"
    echo "$rate" >>"$tmp/rates"
done
echo "bench: throughput median: $(median <"$tmp/rates") points/s"

echo "bench: (b) latency at $RATE points/s for $SECONDS_AT_RATE s (one update per message)"
start_daemon
"$build/bench/bench_pipeline" --latency --input "$input_ep" --output "$output_ep" \
    --rate "$RATE" --seconds "$SECONDS_AT_RATE" --users 1000 | sed 's/^/bench:   /'
stop_daemon
