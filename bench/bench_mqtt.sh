#!/usr/bin/env bash
# Points per second through the MQTT driver against the ZeroMQ one in the
# same run, and against a bare relay as the floor (docs/mqtt.md,
# "Benchmark"):
#   mqtt   replay --mqtt (one JSON fix per message, QoS 1, per-vehicle
#          topics) -> Mosquitto -> tracesand (MQTT in and out, QoS 1,
#          PUBACK after commit) -> Mosquitto -> tail --mqtt
#   mqtt_push  the same MQTT input, the outcomes on a ZeroMQ PUSH socket
#          -> tail --pull (the PUBACK after the PUSH socket took them)
#   zmq    replay (one fix per message) -> tracesand (PULL/PUB) -> tail
#   relay  replay --mqtt -> Mosquitto -> mosquitto_sub | mosquitto_pub
#          (QoS 1 both ways, no processing) -> Mosquitto -> mosquitto_sub
# Each time is from the replay's start to the last point's arrival; both
# daemons commit to LMDB with state.sync = batch.
#   bench/bench_mqtt.sh [N] [RUNS]    (from a build dir, or BUILD_DIR=...)
set -euo pipefail

BENCH=bench_mqtt
. "$(dirname "$0")/lib.sh"
N=${1:-20000}
RUNS=${2:-3}
USERS=200
MOSQUITTO=$(command -v mosquitto || echo /usr/sbin/mosquitto)
[ -x "$MOSQUITTO" ] || { echo "$BENCH: mosquitto not installed" >&2; exit 1; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/broker.conf" <<CONF
listener $port 127.0.0.1
allow_anonymous true
max_queued_messages 0
user $(id -un)
CONF
"$MOSQUITTO" -c "$tmp/broker.conf" >"$tmp/broker.log" 2>&1 &
broker_pid=$!
trap 'kill $broker_pid 2>/dev/null; cleanup' EXIT
sleep 0.5
url=mqtt://127.0.0.1:$port

python3 "$srcdir/tests/mqtt_check.py" synth $USERS $((N / USERS)) "$tmp/trace.csv"
n=$(( $(wc -l <"$tmp/trace.csv") - 1 ))

run_mqtt() {
    start_server "$build/tracesand" -o 'input.type="mqtt"' \
        -o 'output.type="mqtt"' -o "mqtt.url=\"$url\"" \
        -o "state.dir=\"$tmp/state-mqtt-$1\"" -o 'state.sync="batch"' \
        -o 'mqtt.topics=["fleet/+/location"]' -o 'mqtt.topic_formats=["json"]' \
        -o 'mqtt.user_from_topic=2' -o "mqtt.client_id=\"bench-$1\""
    sleep 0.5
    rm -f "$tmp/ready"
    "$tracesan" tail --mqtt "$url" --count "$n" --timeout 120 \
        --ready-file "$tmp/ready" >"$tmp/tail.jsonl" 2>"$tmp/tail.err" &
    tail_pid=$!
    while [ ! -e "$tmp/ready" ]; do sleep 0.02; done
    local t0
    t0=$(ms)
    "$tracesan" replay --mqtt "$url" --topic 'fleet/{user}/location' \
        --payload json "$tmp/trace.csv" 2>"$tmp/replay.err"
    wait "$tail_pid" || true
    tail_pid=""
    elapsed_ms=$(( $(ms) - t0 ))
    got=$(wc -l <"$tmp/tail.jsonl")
    stop_server
}

run_mqtt_push() {
    start_server "$build/tracesand" -o 'input.type="mqtt"' \
        -o 'output.type="push"' -o "mqtt.url=\"$url\"" \
        -o "state.dir=\"$tmp/state-push-$1\"" -o 'state.sync="batch"' \
        -o 'mqtt.topics=["fleet/+/location"]' -o 'mqtt.topic_formats=["json"]' \
        -o 'mqtt.user_from_topic=2' -o "mqtt.client_id=\"bench-push-$1\""
    sleep 0.5
    start_tail "$n" --pull
    local t0
    t0=$(ms)
    "$tracesan" replay --mqtt "$url" --topic 'fleet/{user}/location' \
        --payload json "$tmp/trace.csv" 2>"$tmp/replay.err"
    wait_tail
    elapsed_ms=$(( $(ms) - t0 ))
    stop_server
}

run_zmq() {
    start_server "$build/tracesand" \
        -o "state.dir=\"$tmp/state-zmq-$1\"" -o 'state.sync="batch"'
    start_tail "$n"
    local t0
    t0=$(ms)
    "$tracesan" replay --connect "$input_ep" --batch 1 "$tmp/trace.csv" \
        2>"$tmp/replay.err"
    wait_tail
    elapsed_ms=$(( $(ms) - t0 ))
    stop_server
}

run_relay() {
    mosquitto_sub -p "$port" -q 1 -t "relay/out" -C "$n" -W 120 >"$tmp/relay.out" &
    local sink=$!
    mosquitto_sub -p "$port" -q 1 -t "fleet/+/location" -C "$n" -W 120 |
        mosquitto_pub -p "$port" -q 1 -t relay/out -l &
    local relay=$!
    sleep 0.5
    local t0
    t0=$(ms)
    "$tracesan" replay --mqtt "$url" --topic 'fleet/{user}/location' \
        --payload json "$tmp/trace.csv" 2>"$tmp/replay.err"
    wait "$sink" || true
    elapsed_ms=$(( $(ms) - t0 ))
    got=$(wc -l <"$tmp/relay.out")
    wait "$relay" 2>/dev/null || true
}

printf '%-9s %4s %8s %10s %12s\n' mode run points ms points/s
for mode in mqtt mqtt_push zmq relay; do
    : >"$tmp/$mode.rates"
    for r in $(seq 1 "$RUNS"); do
        "run_$mode" "$r"
        rate=$(awk -v n="$got" -v ms="$elapsed_ms" 'BEGIN { printf "%.0f", n * 1000 / ms }')
        printf '%-9s %4d %8d %10d %12d\n' "$mode" "$r" "$got" "$elapsed_ms" "$rate"
        echo "$rate" >>"$tmp/$mode.rates"
    done
done
m_mqtt=$(median <"$tmp/mqtt.rates")
m_push=$(median <"$tmp/mqtt_push.rates")
m_zmq=$(median <"$tmp/zmq.rates")
m_relay=$(median <"$tmp/relay.rates")
echo
printf 'median points/s: mqtt %s  mqtt_push %s  zmq %s  relay %s\n' \
    "$m_mqtt" "$m_push" "$m_zmq" "$m_relay"
awk -v a="$m_mqtt" -v p="$m_push" -v b="$m_zmq" -v c="$m_relay" 'BEGIN {
    printf "ratios: mqtt/zmq %.3f  mqtt/relay %.2f  mqtt_push/zmq %.3f  mqtt_push/relay %.2f\n",
        a / b, a / c, p / b, p / c }'
