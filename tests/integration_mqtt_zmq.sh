#!/usr/bin/env bash
# MQTT paired with ZeroMQ (issue 27: output.type = "mqtt" is optional).
#
# MQTT in, ZeroMQ PUSH out: a QoS 1 message's PUBACK waits until its
# outcomes are committed AND taken by the PUSH socket. With no consumer
# connected, the first group is committed and nothing is acknowledged;
# once a consumer connects, every update has exactly one outcome on
# ZeroMQ and every message its PUBACK.
#
# ZeroMQ PULL in, MQTT out: while the broker is away the outcomes wait
# (/healthz 503, nothing published, nothing dropped); once it is back
# every update has exactly one outcome on MQTT.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mqtt_lib.sh"

SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
head -n 201 "$SAMPLE" >"$TMPD/sample.csv"
total=$(data_rows "$TMPD/sample.csv")

start_broker

# ------------------------------------------------ MQTT in, ZeroMQ out
start_daemon mqtt-push -o 'input.type="mqtt"' -o 'output.type="push"' \
    -o "mqtt.url=\"$BROKER_URL\"" -o "state.dir=\"$TMPD/state\"" \
    -o 'mqtt.client_id="tracesand-push"' \
    -o 'mqtt.topics=["fleet/+/location"]' -o 'mqtt.topic_formats=["json"]' \
    -o 'mqtt.user_from_topic=2'
check "ready line names the broker and the PUSH endpoint" \
    test "${INPUT_EP%%:*}" = mqtt -a "${OUTPUT_EP%%:*}" = tcp
wait_health "$HTTP_EP" 200 || fatal "daemon not connected to the broker"
"$TRACESAN" replay --mqtt "$BROKER_URL" --topic 'fleet/{user}/location' \
    --payload json "$TMPD/sample.csv" 2>>"$TMPD/replay.log" ||
    fatal "replay into the broker failed"
# No consumer on the PUSH socket: the first group commits, then waits.
check_ge "a group was committed" 1 \
    "$(wait_metric "$HTTP_EP" tracesand_store_commit_duration_seconds_count 1)"
check_ge "messages were handed to the driver" 1 \
    "$(metric "$HTTP_EP" tracesand_mqtt_messages_total)"
sleep 0.5
check_eq "no PUBACK while the PUSH output cannot take the outcomes" 0 \
    "$(metric "$HTTP_EP" tracesand_mqtt_acks_total)"
"$TRACESAN" tail --connect "$OUTPUT_EP" --pull --format jsonl \
    --count "$total" --timeout 30 >"$TMPD/push.jsonl" 2>"$TMPD/push.log" ||
    { show_file "$TMPD/push.log"; fail "ZeroMQ consumer got $(wc -l <"$TMPD/push.jsonl") of $total outcomes"; }
check "every update has exactly one outcome on ZeroMQ" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/sample.csv" \
    "$TMPD/push.jsonl" --exactly-one
check_eq "every message acknowledged once its outcomes were taken" "$total" \
    "$(wait_metric "$HTTP_EP" tracesand_mqtt_acks_total "$total" 5)"
stop_daemon mqtt-push

# ------------------------------------------------ ZeroMQ in, MQTT out
# The tail's session outlives the broker's restart: what the daemon
# publishes once the broker is back reaches it.
mqtt_tail mqtt-out "$total" --client-id tail-zmq-in --timeout 60
stop_broker
start_daemon pull-mqtt -o 'input.type="pull"' -o 'output.type="mqtt"' \
    -o "mqtt.url=\"$BROKER_URL\"" -o 'mqtt.client_id="tracesand-pull"'
check "ready line names the PULL endpoint and the broker" \
    test "${INPUT_EP%%:*}" = tcp -a "${OUTPUT_EP%%:*}" = mqtt
check "/healthz 503 while the broker is away" wait_health "$HTTP_EP" 503
replay "$TMPD/sample.csv" --batch 20
sleep 1
check_eq "nothing published while the broker is away" 0 \
    "$(metric "$HTTP_EP" tracesand_mqtt_published_total)"
start_broker
check "/healthz 200 once the broker is back" wait_health "$HTTP_EP" 200
if wait_for_pid "$MTAIL_PID" 60 && [ "$waited_status" -eq 0 ]; then
    pass "the MQTT tail received $total outcomes"
else
    fail "the MQTT tail received $(wc -l <"$MTAIL_OUT") of $total outcomes"
    show_file "$DAEMON_LOG"
fi
check "every update has exactly one outcome on MQTT" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/sample.csv" \
    "$MTAIL_OUT" --exactly-one
check "no input coordinate in the logs" no_coordinates_in "$TMPD/sample.csv" \
    <(cat "$TMPD/mqtt-push.daemon.log" "$TMPD/pull-mqtt.daemon.log")
stop_daemon pull-mqtt
stop_broker
finish
