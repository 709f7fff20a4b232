# Shared by the scripts that time a running server: a scratch directory
# removed on exit, starting a daemon-like program and reading its endpoints
# from its "ready" line, its CPU time and RSS from /proc, and the median.
# Source after setting BENCH (the script's name for messages).

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_programs "$build/tracesand" "$tracesan" "$build/bench/bench_pipeline" \
    "$build/bench/bench_forwarder"

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tracesan-$BENCH.XXXXXX")
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

CLK_TCK=$(getconf CLK_TCK)
ms() { echo $(( $(date +%s%N) / 1000000 )); }

# start_server PROGRAM [ARGS...]: the shipped configuration on ephemeral
# loopback ports, deep queues so nothing is dropped at PUB/SUB high-water
# marks, a budget of 1000 points per user and window, and no backdate
# bound (the generated points are from 2023). Sets daemon_pid,
# input_ep, output_ep.
start_server() {
    local program=$1
    shift
    "$program" -c "$srcdir/conf/tracesand.conf" \
        -o 'input.endpoint=tcp://127.0.0.1:*' -o 'output.endpoint=tcp://127.0.0.1:*' \
        -o profiles.geoind.points_per_window=1000 \
        -o input.hwm=2000000 -o output.hwm=2000000 -o log.level=warn \
        -o 'http.listen=127.0.0.1:0' -o input.max_backdate_s=0 "$@" 2>"$tmp/daemon.log" &
    daemon_pid=$!
    local ready=""
    for _ in $(seq 400); do
        ready=$(sed -n 's/.*ready input=\([^ ]*\) output=\([^ ]*\).*/\1 \2/p' \
                    "$tmp/daemon.log" 2>/dev/null || true)
        [ -n "$ready" ] && break
        sleep 0.05
    done
    [ -n "$ready" ] || { echo "$BENCH: $program did not start" >&2; cat "$tmp/daemon.log" >&2; exit 1; }
    input_ep=${ready% *}
    output_ep=${ready#* }
}

stop_server() {
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || echo "$BENCH: server exited with $?" >&2
    daemon_pid=""
}

# CPU seconds (user + system) a live process has used.
cpu_seconds() {
    awk -v tck="$CLK_TCK" '{ sub(/.*\) /, ""); printf "%.3f\n", ($12 + $13) / tck }' "/proc/$1/stat"
}

rss_kb() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# start_tail N [TAIL OPTIONS]: a tail for N points on output_ep, connected
# before return; its CPU time lands in $tmp/tail.cpu.
start_tail() {
    local n=$1
    shift
    rm -f "$tmp/ready"
    ( TIMEFORMAT='%U %S'
      time "$tracesan" tail --connect "$output_ep" --count "$n" --timeout 60 "$@" \
          --ready-file "$tmp/ready" >"$tmp/tail.csv" 2>"$tmp/tail.err" ) 2>"$tmp/tail.cpu" &
    tail_pid=$!
    local waited=0
    while [ ! -e "$tmp/ready" ]; do
        kill -0 "$tail_pid" 2>/dev/null || { echo "$BENCH: tail exited" >&2; cat "$tmp/tail.err" >&2; exit 1; }
        waited=$((waited + 1))
        [ $waited -lt 1000 ] || { echo "$BENCH: tail not connected after 20 s" >&2; exit 1; }
        sleep 0.02
    done
}

# replay FILE: sends FILE to input_ep; its CPU time lands in $tmp/replay.cpu.
replay() {
    ( TIMEFORMAT='%U %S'
      time "$tracesan" replay --connect "$input_ep" "$1" 2>"$tmp/replay.err" ) 2>"$tmp/replay.cpu"
}

# Waits for the tail and sets got to the points it received (not in $(...):
# a subshell cannot wait for the tail).
wait_tail() {
    wait "$tail_pid" || true
    tail_pid=""
    got=$(( $(wc -l <"$tmp/tail.csv") - 1 ))
}

# timed_replay FILE N [TAIL OPTIONS]: a tail for N points, FILE replayed to
# the server; sets got and elapsed_ms (replay start to the tail's last
# point).
timed_replay() {
    local file=$1 n=$2
    shift 2
    start_tail "$n" "$@"
    local t0
    t0=$(ms)
    replay "$file"
    wait_tail
    elapsed_ms=$(( $(ms) - t0 ))
}

cpu_of() { awk '{ printf "%.3f\n", $1 + $2 }' "$1"; }
