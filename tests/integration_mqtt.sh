#!/usr/bin/env bash
# MQTT round trip (issue 27): the bundled sample through Mosquitto into
# tracesand and back, as per-vehicle JSON on fleet/<vehicle>/location and
# as protobuf LocationBatch messages on fleet/batch. Every update gets
# exactly one outcome, read back from MQTT; no raw coordinate appears on
# any topic or in the log; the PUBACKs follow the commits; /feed shows
# the sanitized points.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mqtt_lib.sh"

SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
head -n 401 "$SAMPLE" >"$TMPD/sample.csv"
# Users split in two: odd ids as JSON per vehicle, even ids as batches.
awk -F, 'NR == 1 || $1 % 2 == 1' "$TMPD/sample.csv" >"$TMPD/json.csv"
awk -F, 'NR == 1 || $1 % 2 == 0' "$TMPD/sample.csv" >"$TMPD/batch.csv"
total=$(data_rows "$TMPD/sample.csv")

start_broker
start_mqtt_daemon roundtrip -o "state.dir=\"$TMPD/state\"" \
    -o 'mqtt.topics=["fleet/+/location", "fleet/batch"]' \
    -o 'mqtt.topic_formats=["json", "protobuf"]' \
    -o 'mqtt.user_from_topic=2' -o 'output.encoding="json"'
check "daemon healthy once connected" wait_health "$HTTP_EP" 200
# Everything on the broker, to look for coordinates on any topic.
mosquitto_sub -p "$BROKER_PORT" -t '#' -v -W 60 >"$TMPD/all_topics.txt" 2>/dev/null &
SUB_PID=$!
background_pids+=("$SUB_PID")
mqtt_tail out "$total" --encoding json
# The operator's feed sees what the driver published.
curl -sN --max-time 60 "http://$HTTP_EP/feed" >"$TMPD/feed.sse" 2>/dev/null &
FEED_PID=$!
background_pids+=("$FEED_PID")
sleep 0.3

"$TRACESAN" replay --mqtt "$BROKER_URL" --topic 'fleet/{user}/location' \
    --payload json "$TMPD/json.csv" 2>>"$TMPD/replay.log" ||
    fatal "replay (JSON) failed"
"$TRACESAN" replay --mqtt "$BROKER_URL" --topic 'fleet/batch' \
    --payload protobuf --batch 25 "$TMPD/batch.csv" 2>>"$TMPD/replay.log" ||
    fatal "replay (protobuf) failed"
if wait_for_pid "$MTAIL_PID" 60; then
    pass "tail received $total outcomes"
else
    fail "tail received $(wc -l <"$MTAIL_OUT") of $total outcomes"
    show_file "$DAEMON_LOG"
fi

check "every update has exactly one outcome, none leaks its input point" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/sample.csv" \
    "$MTAIL_OUT" --exactly-one
sanitized=$(grep -c '^{"sanitized"' "$MTAIL_OUT")
check_ge "some points sanitized" 1 "$sanitized"
sleep 0.5
kill "$FEED_PID" 2>/dev/null; wait "$FEED_PID" 2>/dev/null; forget_pid "$FEED_PID"
check_eq "/feed showed every sanitized point published" "$sanitized" \
    "$(grep -c '^event: sanitized' "$TMPD/feed.sse")"
check_eq "every input acknowledged after its commit" \
    "$(( $(data_rows "$TMPD/json.csv") + ($(data_rows "$TMPD/batch.csv") + 24) / 25 ))" \
    "$(metric "$HTTP_EP" tracesand_mqtt_acks_total)"
check_eq "no redelivery in a clean run" 0 \
    "$(metric "$HTTP_EP" tracesand_mqtt_redeliveries_total)"
# Output topics carry profile and user only; payloads are sanitized.
# (The input topics carry the inputs, of course: every other topic is
# checked.)
kill "$SUB_PID"; wait "$SUB_PID" 2>/dev/null; forget_pid "$SUB_PID"
grep -a "^tracesan/" "$TMPD/all_topics.txt" >"$TMPD/output_topics.txt"
# Topics name a profile and a user of the input, nothing else; what the
# payloads hold was checked pair by pair above (check 3).
awk -F, 'NR > 1 { print "tracesan/sanitized/geoind/" $1; print "tracesan/rejected/" $1 }' \
    "$TMPD/sample.csv" | sort -u >"$TMPD/allowed_topics.txt"
cut -d' ' -f1 "$TMPD/output_topics.txt" | sort -u >"$TMPD/seen_topics.txt"
check "every output topic is a template with an input's user and profile" \
    test -z "$(comm -23 "$TMPD/seen_topics.txt" "$TMPD/allowed_topics.txt")"
check "no input coordinate in the log" no_coordinates_in "$TMPD/sample.csv" "$DAEMON_LOG"
check "outputs on the default topic templates" \
    grep -aq '^tracesan/sanitized/geoind/' "$TMPD/output_topics.txt"
stop_daemon roundtrip
stop_broker
finish
