#!/usr/bin/env bash
# Does a release ever wait for a PRIVIC recomputation? tracesand runs each
# cycle's IBU and BA on a worker thread while the event loop goes on
# releasing through the installed channel. This measures end-to-end
# latency (send -> tracesand -> subscriber, bench_pipeline --latency) of
# the privic profile at RATE points per second for SECONDS seconds, twice:
#   quiet    cycle_reports larger than the run: no cycle ever runs
#   cycles   cycle_reports = CYCLE (default 1000): a cycle every
#            CYCLE / RATE seconds, each ~0.25 s of IBU + BA on this grid
# and prints both latency lines, the cycles completed and their IBU + BA
# time from the daemon's log. Had the computation run on the event loop,
# every point arriving during a cycle would wait for it: p99 would be of
# the order of the cycle's time. Figures only.
#
# Usage (from a build directory, or set BUILD_DIR): bench/bench_privic_daemon.sh
# Environment: RATE (default 2000), SECONDS_AT_RATE (default 10), CYCLE
# (default 1000).
set -euo pipefail

BENCH=bench_privic_daemon
. "$(dirname "$0")/lib.sh"
rate=${RATE:-2000}
seconds=${SECONDS_AT_RATE:-10}
cycle=${CYCLE:-1000}

# run NAME CYCLE_REPORTS: one latency run on a fresh LMDB store (the
# ledger's group commits are part of the path measured).
run() {
    rm -rf "$tmp/state"
    start_server "$build/tracesand" -o log.level=info \
        -o "state.dir=\"$tmp/state\"" -o 'default_profile="privic"' \
        -o profiles.privic.points_per_window=1000000 \
        -o "profiles.privic.cycle_reports=$2" -o output.density_publish_s=0
    echo "$BENCH: $1: $("$build/bench/bench_pipeline" --latency \
        --input "$input_ep" --output "$output_ep" --rate "$rate" \
        --seconds "$seconds")"
    stop_server
    cp "$tmp/daemon.log" "$tmp/$1.log"
}

echo "$BENCH: machine: $(nproc) cores, $(uname -srm); privic profile" \
     "(24 x 17 cells), $rate points/s for $seconds s"
run quiet 1000000000
run cycles "$cycle"
# "PRIVIC cycle K on N reports: IBU I iterations X ms, BA J iterations Y ms"
awk -v bench="$BENCH" '/PRIVIC cycle [0-9]+ on/ {
        for (i = 2; i <= NF; i++) if ($i == "ms," || $i == "ms") s += $(i - 1)
        n++; if ($(NF - 6) + 0 > worst) worst = $(NF - 6) + 0 }
    END { printf "%s: cycles: %d completed, IBU + BA %.0f ms on the worker " \
          "in all (%.0f ms a cycle)\n", bench, n, s, n ? s / n : 0 }' \
    "$tmp/cycles.log"
