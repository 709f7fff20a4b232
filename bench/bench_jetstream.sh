#!/usr/bin/env bash
# Throughput of the JetStream scale-out mode against the single-machine
# default, in one run (docs/scale-out.md, "Benchmark"):
#   zmq-lmdb   replay -> tracesand (ZeroMQ, LMDB state.sync = full) -> tail
#   js-1       one instance on one nats-server (R1): replay --jetstream,
#              until TRACESAN_OUT holds every outcome
#   js-2       two instances sharing the 16 partitions, same server
#   js-1-r3    one instance on a 3-node cluster with replicas = 3
#              (BENCH_JS_CLUSTER=1; the cluster shares the same 2 cores)
# and the commit latency percentiles each instance logs at exit, plus the
# state-layout measurement (bench/bench_js_state: KV bucket vs changelog).
# With BENCH_BASELINE=DIR (another build directory) js-1-baseline runs
# that build's tracesand as js-1, in the same passes, and the ratio of
# js-1 to it is printed. BENCH_JS_MODES picks modes (e.g. "js-1 js-2").
#
# Machines emulated on one host (BENCH_JS_CAP=FRACTION): every tracesand
# (the ZeroMQ one and each JetStream instance) runs in a cgroup of its own
# capped at FRACTION of a CPU (cgroup v1 cpu.cfs_quota_us) and pinned
# (taskset) to the last CPU, the nats-servers together in one capped at
# BENCH_JS_SERVER_CAP CPUs (default 1) pinned to the others; the producer
# and consumers run beside the servers, uncapped. So "an instance" always
# has the same CPU, whatever else runs: js-2 / js-1 says what a second
# machine adds, and js-1 / zmq-lmdb compares the two modes on equal CPU.
# Without a writable /sys/fs/cgroup/cpu the caps are left out and only the
# pinning is done (then the instances of js-2 share one CPU: said so).
#   bench/bench_jetstream.sh [N] [RUNS]    (from a build dir, or BUILD_DIR=...)
set -euo pipefail

BENCH=bench_jetstream
. "$(dirname "$0")/lib.sh"
N=${1:-100000}
RUNS=${2:-1}
USERS=1000
BASE_MODES=${BENCH_JS_MODES:-"zmq-lmdb js-1 js-2"}
[ "${BENCH_JS_CLUSTER:-0}" = 1 ] && BASE_MODES="$BASE_MODES js-1-r3"
[ -n "${BENCH_BASELINE:-}" ] && BASE_MODES="$BASE_MODES js-1-baseline"
# Each mode with per-point output (one message per outcome) and with
# output.format = "batch" (one OutcomeBatch per input message; replay's
# 100 updates per message = output.batch_outcomes): "MODE" and
# "MODE-batch".
FORMATS=${BENCH_JS_FORMATS:-"point batch"}
MODES=""
for f in $FORMATS; do
    for m in $BASE_MODES; do
        case $f in batch) MODES="$MODES $m-batch" ;; *) MODES="$MODES $m" ;; esac
    done
done
tracesand_bin=$build/tracesand
NATS_SERVER=$(command -v nats-server) || { echo "$BENCH: nats-server not installed" >&2; exit 1; }

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
nats_pids=()
instance_pids=()
stop_all() {
    local p
    for p in "${instance_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    for p in "${nats_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    instance_pids=()
    nats_pids=()
}

# ----------------------------------------------- emulated machines
CAP=${BENCH_JS_CAP:-}
SERVER_CAP=${BENCH_JS_SERVER_CAP:-1}
CG_ROOT=/sys/fs/cgroup/cpu
CG_PREFIX=tsbench-$$
cgroups=()
ncpu=$(nproc)
last_cpu=$((ncpu - 1))
other_cpus=0
[ "$ncpu" -gt 1 ] && other_cpus=0-$((ncpu - 2))
capped=0
if [ -n "$CAP" ]; then
    if mkdir "$CG_ROOT/$CG_PREFIX-probe" 2>/dev/null; then
        rmdir "$CG_ROOT/$CG_PREFIX-probe"
        capped=1
    else
        echo "$BENCH: $CG_ROOT is not writable: CPU caps left out, pinning only" >&2
    fi
fi
# machine NAME CPUS CPULIST: prints a wrapper that runs its arguments in
# cgroup NAME (capped at CPUS CPUs when caps are on) pinned to CPULIST.
machine() {
    local name=$1 cpus=$2 list=$3 dir=$CG_ROOT/$CG_PREFIX-$1
    if [ $capped = 1 ] && [ ! -d "$dir" ]; then
        mkdir "$dir"
        echo 100000 >"$dir/cpu.cfs_period_us"
        awk -v c="$cpus" 'BEGIN { printf "%d\n", c * 100000 }' >"$dir/cpu.cfs_quota_us"
        cgroups+=("$dir")
    fi
    local wrapper=$tmp/on-$name
    {
        echo '#!/bin/sh'
        [ $capped = 1 ] && echo "echo \$\$ >'$dir/cgroup.procs'"
        echo "exec taskset -c '$list' \"\$@\""
    } >"$wrapper"
    chmod +x "$wrapper"
    echo "$wrapper"
}
# machine() runs in a command substitution, so what it adds to cgroups
# never reaches this shell: every cgroup of this run is found by its
# prefix instead.
remove_machines() {
    local d
    for d in "${cgroups[@]}" "$CG_ROOT/$CG_PREFIX"-*; do
        [ -d "$d" ] && rmdir "$d" 2>/dev/null
    done
    cgroups=()
    return 0
}
on_servers=()
if [ -n "$CAP" ]; then
    on_servers=("$(machine servers "$SERVER_CAP" "$other_cpus")")
    # Every CLI call (the ZeroMQ mode's replay and tail too) beside the
    # servers, off the instances' CPU.
    printf '#!/bin/sh\nexec taskset -c "%s" "%s" "$@"\n' "$other_cpus" \
        "$tracesan" >"$tmp/tracesan-pinned"
    chmod +x "$tmp/tracesan-pinned"
    tracesan=$tmp/tracesan-pinned
fi
# on_instance K: the wrapper of the Kth instance's machine (none uncapped).
on_instance() {
    [ -n "$CAP" ] && machine "inst$1" "$CAP" "$last_cpu"
}
trap 'stop_all; remove_machines; cleanup' EXIT

wait_port() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$BENCH: nats-server did not start" >&2
    exit 1
}

start_nats() {  # start_nats 1|3: sets nats_url
    rm -rf "$tmp/nats"*
    nats_url=""
    if [ "$1" = 1 ]; then
        local port
        port=$(free_port)
        "${on_servers[@]}" "$NATS_SERVER" -js -a 127.0.0.1 -p "$port" -sd "$tmp/nats0" >"$tmp/nats0.log" 2>&1 &
        nats_pids+=($!)
        nats_url=nats://127.0.0.1:$port
        wait_port "$port"
        return
    fi
    local ports=() cports=() routes="" i
    for i in 0 1 2; do ports+=("$(free_port)"); cports+=("$(free_port)"); done
    for i in 0 1 2; do routes="$routes${routes:+, }nats-route://127.0.0.1:${cports[$i]}"; done
    for i in 0 1 2; do
        printf 'server_name: n%s\nlisten: 127.0.0.1:%s\njetstream { store_dir: "%s" }\ncluster { name: bench, listen: 127.0.0.1:%s, routes: [ %s ] }\n' \
            "$i" "${ports[$i]}" "$tmp/nats$i" "${cports[$i]}" "$routes" >"$tmp/nats$i.conf"
        "${on_servers[@]}" "$NATS_SERVER" -c "$tmp/nats$i.conf" >"$tmp/nats$i.log" 2>&1 &
        nats_pids+=($!)
        nats_url="$nats_url${nats_url:+,}nats://127.0.0.1:${ports[$i]}"
    done
    for i in 0 1 2; do wait_port "${ports[$i]}"; done
}

start_instance() {  # start_instance NAME REPLICAS K
    local wrap=()
    [ -n "$CAP" ] && wrap=("$(on_instance "$3")")
    "${wrap[@]}" "$tracesand_bin" -c "$srcdir/conf/tracesand.conf" -o input.type=jetstream \
        -o "output.format=$format" \
        -o output.type=jetstream -o "nats.servers=$nats_url" -o "nats.instance_id=$1" \
        -o "nats.replicas=$2" -o 'state.dir=""' -o profiles.geoind.points_per_window=1000 \
        -o input.max_backdate_s=0 -o http.listen=127.0.0.1:0 -o log.level=info \
        2>"$tmp/$1.log" &
    instance_pids+=($!)
    for _ in $(seq 1200); do
        grep -q "ready input=jetstream" "$tmp/$1.log" && return 0
        sleep 0.05
    done
    echo "$BENCH: instance $1 did not start" >&2
    cat "$tmp/$1.log" >&2
    exit 1
}

owned() {
    local http
    http=$(sed -n 's/.* http=\([^ ]*\).*/\1/p' "$tmp/$1.log" | head -n 1)
    curl -s "http://$http/metrics" | awk '/^tracesand_partition_owned\{/ { n += $2 } END { print n + 0 }'
}

in_last_seq() {
    "$tracesan" jetstream --server "$nats_url" status 2>/dev/null |
        sed -n 's/^stream=TRACESAN_IN .*last_seq=\([0-9]*\).*/\1/p'
}

out_msgs() {
    "$tracesan" jetstream --server "$nats_url" status 2>/dev/null |
        sed -n 's/^stream=TRACESAN_OUT msgs=\([0-9]*\).*/\1/p'
}

# run_js NAME_PREFIX INSTANCES REPLICAS NODES: sets rate, producer_rate.
run_js() {
    local n_inst=$2 replicas=$3 nodes=$4 i want
    start_nats "$nodes"
    for i in $(seq "$n_inst"); do start_instance "$1$i" "$replicas" "$i"; done
    want=$(( 16 / n_inst ))
    for _ in $(seq 300); do
        local ok=1
        for i in $(seq "$n_inst"); do [ "$(owned "$1$i")" -eq "$want" ] || ok=0; done
        [ $ok = 1 ] && break
        sleep 0.1
    done
    local t0 t_prod t_end expect
    t0=$(ms)
    "$tracesan" replay --jetstream "$nats_url" --replicas "$replicas" --partitions 16 \
        "$tmp/points.csv" 2>"$tmp/replay.err"
    t_prod=$(ms)
    # Per point: one output each. Batched: one per input message (the
    # stream's last sequence; TRACESAN_IN keeps none once processed).
    expect=$N
    [ "$format" = batch ] && expect=$(in_last_seq)
    for _ in $(seq 6000); do
        [ "$(out_msgs)" -ge "$expect" ] 2>/dev/null && break
        sleep 0.05
    done
    t_end=$(ms)
    got=$(out_msgs)
    [ "$format" = batch ] && [ "$got" -ge "$expect" ] && got=$N
    rate=$(awk -v n="$got" -v t="$((t_end - t0))" 'BEGIN { printf "%.0f", n / (t / 1000) }')
    producer_rate=$(awk -v n="$N" -v t="$((t_prod - t0))" 'BEGIN { printf "%.0f", n / (t / 1000) }')
    stop_all
    for i in $(seq "$n_inst"); do
        sed -n 's/.*jetstream summary /'"$1$i"': /p' "$tmp/$1$i.log" >>"$tmp/latency.txt"
    done
}

echo "$BENCH: machine: $(nproc) cores, $(uname -srm); nats-server $("$NATS_SERVER" --version | awk '{ print $NF }'); $N points of $USERS users; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$CAP" ]; then
    if [ $capped = 1 ]; then
        echo "$BENCH: emulated machines: each tracesand capped at $CAP CPU on CPU $last_cpu, the nats-servers at $SERVER_CAP CPU on CPU $other_cpus, producer and consumers beside them"
    else
        echo "$BENCH: pinned only (no cgroup caps): tracesands on CPU $last_cpu (js-2's two instances share it), servers and tools on CPU $other_cpus"
    fi
fi
"$build/bench/bench_pipeline" --gen "$N" --users "$USERS" "$tmp/points.csv"
: >"$tmp/latency.txt"
for run in $(seq "$RUNS"); do
    for mode in $MODES; do
        format=point
        case $mode in *-batch) format=batch ;; esac
        case ${mode%-batch} in
            zmq-lmdb)
                rm -rf "$tmp/state"
                zmq_daemon=$build/tracesand
                if [ -n "$CAP" ]; then
                    printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$(on_instance 1)" \
                        "$build/tracesand" >"$tmp/zmq-daemon"
                    chmod +x "$tmp/zmq-daemon"
                    zmq_daemon=$tmp/zmq-daemon
                fi
                start_server "$zmq_daemon" -o "state.dir=$tmp/state" -o state.sync=full \
                    -o "output.format=$format"
                timed_replay "$tmp/points.csv" "$N"
                stop_server
                rate=$(awk -v n="$got" -v t="$elapsed_ms" 'BEGIN { printf "%.0f", n / (t / 1000) }')
                echo "$BENCH:   run $run $mode: $got/$N points in $elapsed_ms ms: $rate points/s" ;;
            js-1) run_js "r${run}a" 1 1 1 ;;
            js-2) run_js "r${run}b" 2 1 1 ;;
            js-1-r3) run_js "r${run}c" 1 3 3 ;;
            js-1-baseline)
                tracesand_bin=$BENCH_BASELINE/tracesand
                run_js "r${run}d" 1 1 1
                tracesand_bin=$build/tracesand ;;
        esac
        case $mode in js-*)
            echo "$BENCH:   run $run $mode: $got/$N outcomes: $rate points/s (producer alone: $producer_rate points/s)" ;;
        esac
        echo "$rate" >>"$tmp/rates.$mode"
    done
done
for mode in $MODES; do
    echo "$BENCH: median $mode: $(median <"$tmp/rates.$mode") points/s"
done
# ratio A B: the medians' ratio, when both modes ran.
ratio() {
    [ -f "$tmp/rates.$1" ] && [ -f "$tmp/rates.$2" ] || return 0
    awk -v a="$1" -v b="$2" -v ra="$(median <"$tmp/rates.$1")" \
        -v rb="$(median <"$tmp/rates.$2")" \
        'BEGIN { printf "bench_jetstream: %s / %s = %.2f\n", a, b, ra / rb }'
}
for f in $FORMATS; do
    sfx=""
    [ "$f" = batch ] && sfx=-batch
    for m in $BASE_MODES; do
        [ "$m" = zmq-lmdb ] || ratio "$m$sfx" "zmq-lmdb$sfx"
    done
    ratio "js-2$sfx" "js-1$sfx"
done
[ -n "${BENCH_BASELINE:-}" ] && ratio js-1 js-1-baseline
echo "$BENCH: commit latency (fetch to changelog acknowledgement, per group), per instance:"
sed 's/^/bench_jetstream:   /' "$tmp/latency.txt"
echo "$BENCH: state layout, groups of 500 and 50 dirty users (100-byte records), R1:"
start_nats 1
"$build/bench/bench_js_state" "${nats_url}" 500 200 100 1
"$build/bench/bench_js_state" "${nats_url}" 50 400 100 1
stop_all
if [ "${BENCH_JS_CLUSTER:-0}" = 1 ]; then
    echo "$BENCH: state layout on the 3-node cluster, R3:"
    start_nats 3
    sleep 3
    "$build/bench/bench_js_state" "${nats_url%%,*}" 500 200 100 3
    "$build/bench/bench_js_state" "${nats_url%%,*}" 50 400 100 3
    stop_all
fi
