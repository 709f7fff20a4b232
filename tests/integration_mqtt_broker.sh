#!/usr/bin/env bash
# MQTT broker restart (issue 27): Mosquitto stopped and started again
# mid-stream. /healthz goes unhealthy and back, the daemon reconnects with
# backoff, and nothing that was acknowledged is lost: every input the
# replay had a PUBACK for gets an outcome.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mqtt_lib.sh"

"$PY" "$top_srcdir/tests/mqtt_check.py" synth 50 60 "$TMPD/trace.csv"
start_broker
mqtt_tail out 0 --encoding json --client-id tail-broker --timeout 120
start_mqtt_daemon broker -o "state.dir=\"$TMPD/state\"" \
    -o 'mqtt.client_id="tracesand-broker"' -o 'mqtt.retry_max_s=1' \
    -o 'mqtt.topics=["fleet/+/location"]' -o 'mqtt.topic_formats=["json"]' \
    -o 'mqtt.user_from_topic=2' -o 'output.encoding="json"'
check "healthy once connected" wait_health "$HTTP_EP" 200

"$TRACESAN" replay --mqtt "$BROKER_URL" --topic 'fleet/{user}/location' \
    --payload json --rate 1000 "$TMPD/trace.csv" 2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")
sleep 1
stop_broker
note "broker stopped mid-stream"
check "/healthz unhealthy while the broker is away" wait_health "$HTTP_EP" 503
curl -s "http://$HTTP_EP/healthz" | sed 's/^/# healthz: /'; echo
sleep 1
start_broker
note "broker started again"
check "/healthz healthy again" wait_health "$HTTP_EP" 200
if wait_for_pid "$REPLAY_PID" 60 && [ "$waited_status" -eq 0 ]; then
    pass "replay rode out the restart"
else
    fail "replay failed"; show_file "$TMPD/replay.log"
fi
for i in $(seq 1 60); do
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/trace.csv" \
        "$MTAIL_OUT" >/dev/null 2>&1 && break
    sleep 1
done
check "every acknowledged input has its outcome" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/trace.csv" "$MTAIL_OUT"
check_ge "reconnections counted" 1 "$(metric "$HTTP_EP" tracesand_mqtt_reconnects_total)"
check_ge "connections counted" 2 "$(metric "$HTTP_EP" tracesand_mqtt_connections_total)"
stop_daemon broker
kill -TERM "$MTAIL_PID"; wait "$MTAIL_PID" 2>/dev/null; forget_pid "$MTAIL_PID"
stop_broker
finish
