# Shared helpers of the MQTT tests (sourced after lib.sh): a Mosquitto
# broker on a free loopback port with its own configuration and
# persistence directory, and tracesand with input.type = "mqtt".
MOSQUITTO=${MOSQUITTO:-$(command -v mosquitto || ls /usr/sbin/mosquitto 2>/dev/null)}
PY=${PY:-python3}
[ -x "$MOSQUITTO" ] || { echo "1..0 # SKIP mosquitto is not installed (Debian package mosquitto)"; exit 77; }

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_port() {
    local port=$1 i
    for i in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# start_broker [EXTRA_CONF_FILE]: a broker on BROKER_PORT (picked once,
# kept across restarts) persisting to $TMPD/broker. Sets BROKER_PID,
# BROKER_URL.
start_broker() {
    : "${BROKER_PORT:=$(free_port)}"
    mkdir -p "$TMPD/broker"
    {
        echo "persistence true"
        echo "persistence_location $TMPD/broker/"
        echo "autosave_interval 1"
        # The daemon's queue while it is away: nothing dropped.
        echo "max_queued_messages 0"
        echo "max_queued_bytes 0"
        echo "log_dest file $TMPD/broker.log"
        [ -n "${MQTT_BROKER_DEBUG:-}" ] && echo "log_type all"
        # Started as root, mosquitto would become user mosquitto, which
        # cannot write to the test's private directory.
        echo "user $(id -un)"
        if [ -n "${1:-}" ]; then
            cat "$1"
        else
            echo "listener $BROKER_PORT 127.0.0.1"
            echo "allow_anonymous true"
        fi
    } >"$TMPD/broker.conf"
    "$MOSQUITTO" -c "$TMPD/broker.conf" >>"$TMPD/broker.out" 2>&1 &
    BROKER_PID=$!
    background_pids+=("$BROKER_PID")
    wait_port "$BROKER_PORT" || { show_file "$TMPD/broker.log"; fatal "mosquitto did not open port $BROKER_PORT"; }
    BROKER_URL=mqtt://127.0.0.1:$BROKER_PORT
}

stop_broker() {
    kill -TERM "$BROKER_PID" 2>/dev/null
    wait_for_pid "$BROKER_PID" 10 || { kill -KILL "$BROKER_PID"; wait "$BROKER_PID" 2>/dev/null; forget_pid "$BROKER_PID"; }
}

# start_mqtt_daemon NAME [-o ...]: tracesand reading the broker; the
# ready line names the broker.
start_mqtt_daemon() {
    local name=$1
    shift
    start_daemon "$name" -o 'input.type="mqtt"' -o 'output.type="mqtt"' \
        -o "mqtt.url=\"$BROKER_URL\"" "$@"
}

# wait_healthy HTTP [WANT]: /healthz answers WANT (200 or 503) within 20 s.
wait_health() {
    local http=$1 want=$2 code i
    for i in $(seq 1 200); do
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://$http/healthz")
        [ "$code" = "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

# metric HTTP NAME: the value of one series (the first line naming it).
metric() {
    curl -s "http://$1/metrics" | awk -v n="$2" '$1 == n { print $2; exit }'
}

# wait_metric HTTP NAME MIN [SECONDS]: until the series is at least MIN
# (20 s by default); prints its last value.
wait_metric() {
    local http=$1 name=$2 min=$3 tries=$(( ${4:-20} * 20 )) value=0
    while [ "$tries" -gt 0 ]; do
        value=$(metric "$http" "$name")
        [ "${value:-0}" -ge "$min" ] && break
        tries=$((tries - 1))
        sleep 0.05
    done
    echo "${value:-0}"
}

# mqtt_tail NAME COUNT [options]: tracesan tail --mqtt into $TMPD/NAME.jsonl
# (background; waits for its ready file). Sets MTAIL_PID, MTAIL_OUT.
mqtt_tail() {
    local name=$1 count=$2
    shift 2
    MTAIL_OUT=$TMPD/$name.jsonl
    "$TRACESAN" tail --mqtt "$BROKER_URL" --count "$count" \
        --ready-file "$TMPD/$name.ready" "$@" >"$MTAIL_OUT" \
        2>"$TMPD/$name.tail.log" </dev/null &
    MTAIL_PID=$!
    background_pids+=("$MTAIL_PID")
    local i
    for i in $(seq 1 200); do
        [ -e "$TMPD/$name.ready" ] && return 0
        is_running "$MTAIL_PID" || break
        sleep 0.05
    done
    show_file "$TMPD/$name.tail.log"
    fatal "tracesan tail --mqtt ($name) did not start"
}
