#!/usr/bin/env bash
# Benchmark the daemon on loopback with the shipped geoind profile, against
# bench_forwarder: the same configuration, transport, intake, outbox and
# codec with no mechanism and no state.
#   (a) throughput: replay -> SERVER -> tail, N synthetic points, RUNS runs
#       alternating tracesand and the forwarder so both see the same
#       machine; points/s = N / (replay start .. tail has the N-th point).
#       Also the CPU seconds per million points of the server, replay and
#       tail, so it shows which process is the limit on a small machine.
#       Medians, and tracesand / forwarder ratios. Once with per-point
#       output and once with output.format = "batch" (one message per input
#       batch), for both servers. Lossless: output.type = "push" and a
#       PULL tail, so a slow moment stalls the input instead of dropping
#       points; a run that still lost points is reported, and no ratio is
#       printed from a server with such a run.
#       With BENCH_BASELINE=DIR (a build directory of another version, e.g.
#       /work/main/build), its tracesand runs alternately in the same
#       passes, and its ratio to this build is printed too.
#   (b) latency at a fixed offered rate with bench_pipeline --latency.
# Prints figures only. Run from a build directory (or set BUILD_DIR):
#   make bench            # or: bench/run.sh [N] [RATE] [SECONDS]
set -euo pipefail
BENCH=bench
. "$(dirname "$0")/lib.sh"

N=${1:-1000000}
RATE=${2:-50000}
SECONDS_AT_RATE=${3:-5}
RUNS=${BENCH_RUNS:-5}
USERS=10000

echo "bench: machine: $(nproc) cores, $(uname -srm)"
echo "bench: generating $N synthetic points over $USERS users"
"$build/bench/bench_pipeline" --gen "$N" --users "$USERS" "$tmp/points.csv"

echo "bench: (a) throughput replay -> server -> tail, $RUNS runs of $N points each"
SERVERS="tracesand forwarder tracesand-batch forwarder-batch"
if [ -n "${BENCH_BASELINE:-}" ]; then
    [ -x "$BENCH_BASELINE/tracesand" ] || { echo "bench: no $BENCH_BASELINE/tracesand" >&2; exit 1; }
    SERVERS="$SERVERS baseline baseline-batch"
    echo "bench: baseline: $BENCH_BASELINE/tracesand"
fi
for run in $(seq "$RUNS"); do
    for server in $SERVERS; do
        format=point
        case $server in *-batch) format=batch ;; esac
        case $server in
            tracesand*) start_server "$build/tracesand" -o 'state.dir=""' -o "output.format=$format" -o output.type=push ;;
            baseline*) start_server "$BENCH_BASELINE/tracesand" -o 'state.dir=""' -o "output.format=$format" -o output.type=push ;;
            *) start_server "$build/bench/bench_forwarder" -o "output.format=$format" -o output.type=push ;;
        esac
        timed_replay "$tmp/points.csv" "$N" --pull
        server_cpu=$(cpu_seconds "$daemon_pid")
        stop_server
        rate=$(awk -v n="$got" -v t="$elapsed_ms" 'BEGIN { printf "%.0f", n / (t / 1000) }')
        per_m() { awk -v c="$1" -v n="$got" 'BEGIN { printf "%.2f", (n > 0) ? c * 1e6 / n : 0 }'; }
        s=$(per_m "$server_cpu"); r=$(per_m "$(cpu_of "$tmp/replay.cpu")"); t=$(per_m "$(cpu_of "$tmp/tail.cpu")")
        echo "bench:   run $run $server: $got/$N points in $elapsed_ms ms: $rate points/s; CPU s per M points: server $s, replay $r, tail $t"
        if [ "$got" -ne "$N" ]; then
            echo "bench:   run $run $server: WARNING: $((N - got)) points missing"
            echo "$run" >>"$tmp/lossy.$server"
        fi
        echo "$rate" >>"$tmp/rate.$server"
        echo "$s" >>"$tmp/cpu.$server"
        echo "$r" >>"$tmp/cpu_replay.$server"
        echo "$t" >>"$tmp/cpu_tail.$server"
    done
done
for server in $SERVERS; do
    echo "bench: median $server: $(median <"$tmp/rate.$server") points/s, server CPU $(median <"$tmp/cpu.$server") s/M points (replay $(median <"$tmp/cpu_replay.$server"), tail $(median <"$tmp/cpu_tail.$server"))"
done
# ratio WHAT A B: medians of A over B, unless a run of either lost points.
ratio() {
    local what=$1 a=$2 b=$3
    if [ -s "$tmp/lossy.$a" ] || [ -s "$tmp/lossy.$b" ]; then
        echo "bench: $what: no ratio: runs lost points ($a: $(cat "$tmp/lossy.$a" 2>/dev/null | wc -l), $b: $(cat "$tmp/lossy.$b" 2>/dev/null | wc -l))"
        return
    fi
    awk -v rd="$(median <"$tmp/rate.$a")" -v rf="$(median <"$tmp/rate.$b")" \
        -v cd="$(median <"$tmp/cpu.$a")" -v cf="$(median <"$tmp/cpu.$b")" -v what="$what" \
        'BEGIN { printf "bench: %s: throughput %.2f, CPU per point %.2f\n", what, rd / rf, cd / cf }'
}
ratio "tracesand / forwarder (per-point output)" tracesand forwarder
ratio "tracesand / forwarder (batch output)" tracesand-batch forwarder-batch
if [ -n "${BENCH_BASELINE:-}" ]; then
    ratio "this build / baseline (per-point output)" tracesand baseline
    ratio "this build / baseline (batch output)" tracesand-batch baseline-batch
fi

echo "bench: (b) latency at $RATE points/s for $SECONDS_AT_RATE s (one update per message)"
start_server "$build/tracesand" -o 'state.dir=""'
"$build/bench/bench_pipeline" --latency --input "$input_ep" --output "$output_ep" \
    --rate "$RATE" --seconds "$SECONDS_AT_RATE" --users 1000 | sed 's/^/bench:   /'
stop_server
