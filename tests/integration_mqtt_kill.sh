#!/usr/bin/env bash
# MQTT kill test (issue 27): 20 000 points at QoS 1, tracesand killed
# with SIGKILL three times mid-stream and restarted on the same persistent
# session. Afterwards every input has at least one outcome, the outcomes
# of a redelivered input are identical, the ledger holds at least the eps
# of everything published, and no user is over budget.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mqtt_lib.sh"

USERS=${MQTT_KILL_USERS:-200} POINTS=${MQTT_KILL_POINTS:-100}
"$PY" "$top_srcdir/tests/mqtt_check.py" synth $USERS $POINTS "$TMPD/trace.csv"
total=$((USERS * POINTS))
# geoind's budget per window: level / radius_m (conf/tracesand.conf).
BUDGET=0.02302585092994046

daemon_args=(-o "state.dir=\"$TMPD/state\"" -o 'state.sync="batch"'
    -o 'mqtt.client_id="tracesand-kill"'
    -o 'mqtt.topics=["fleet/+/location"]' -o 'mqtt.topic_formats=["json"]'
    -o 'mqtt.user_from_topic=2' -o 'output.encoding="json"'
    -o 'mqtt.max_inflight=200')

start_broker
# The tail keeps a session of its own: nothing published while it
# reconnects is lost to it.
mqtt_tail out 0 --encoding json --client-id tail-kill --timeout 150
start_mqtt_daemon first "${daemon_args[@]}"
wait_health "$HTTP_EP" 200 || fatal "daemon not connected"

"$TRACESAN" replay --mqtt "$BROKER_URL" --topic 'fleet/{user}/location' \
    --payload json "$TMPD/trace.csv" 2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")

redelivered=0
for round in 1 2 3; do
    sleep 1.5
    redelivered=$((redelivered + $(metric "$HTTP_EP" tracesand_mqtt_redeliveries_total)))
    kill -KILL "$DAEMON_PID"
    wait "$DAEMON_PID" 2>/dev/null
    forget_pid "$DAEMON_PID"
    note "round $round: tracesand killed"
    start_mqtt_daemon "restart$round" "${daemon_args[@]}"
done

wait_for_pid "$REPLAY_PID" 120 && [ "$waited_status" -eq 0 ] ||
    { show_file "$TMPD/replay.log"; fatal "replay failed"; }
# Done when every input has an outcome (or the time is up).
for i in $(seq 1 90); do
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/trace.csv" \
        "$MTAIL_OUT" >/dev/null 2>&1 && break
    sleep 1
done
sleep 1
redelivered=$((redelivered + $(metric "$HTTP_EP" tracesand_mqtt_redeliveries_total)))
stop_daemon restart3
kill -TERM "$MTAIL_PID"; wait "$MTAIL_PID" 2>/dev/null; forget_pid "$MTAIL_PID"

check "every input has an outcome; a redelivered input's are identical" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/trace.csv" "$MTAIL_OUT"
# The kills came mid-stream: messages whose outcomes were committed but
# not acknowledged came again, and were answered from what was kept.
check_ge "redelivered messages answered with their kept outcomes" 1 "$redelivered"
"$TRACESAN" state --dir "$TMPD/state" list >"$TMPD/ledger.csv" ||
    fatal "tracesan state list failed"
check "ledger >= eps published, nobody over budget" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" ledger "$MTAIL_OUT" "$TMPD/ledger.csv" "$BUDGET"
# Every debit's point reached the output: a message committed and not
# acknowledged when the daemon died came again and got its outcomes.
check "every debited point was published" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" ledger "$MTAIL_OUT" "$TMPD/ledger.csv" "$BUDGET" --all-published
stop_broker
finish
