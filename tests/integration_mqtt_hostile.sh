#!/usr/bin/env bash
# Hostile MQTT input (issue 27): oversized payloads, malformed JSON and
# protobuf, a topic with no user level, a user with NUL or invalid UTF-8,
# a flood from 10 000 distinct topics faster than the daemon. Each is a
# counted refusal; memory stays bounded; other topics are not stalled.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mqtt_lib.sh"

start_broker
start_mqtt_daemon hostile -o "state.dir=\"$TMPD/state\"" -o 'state.sync="none"' \
    -o 'input.max_message_bytes=4096' -o 'users.max_users=5000' \
    -o 'mqtt.topics=["fleet/+/location", "fleet/batch", "raw/#"]' \
    -o 'mqtt.topic_formats=["json", "protobuf", "json"]' \
    -o 'mqtt.user_from_topic=2' -o 'output.encoding="json"'
wait_health "$HTTP_EP" 200 || fatal "daemon not connected"
mqtt_tail out 0 --encoding json --timeout 120

pub() { mosquitto_pub -p "$BROKER_PORT" -q 1 "$@"; }
rejected() { metric "$HTTP_EP" "tracesand_rejected_total{reason=\"$1\"}"; }
refused() { metric "$HTTP_EP" "tracesand_mqtt_refusals_total{cause=\"$1\"}"; }
wait_metric() {  # NAME-FUNCTION ARG WANT
    local i
    for i in $(seq 1 100); do
        [ "$("$1" "$2")" = "$3" ] && return 0
        sleep 0.1
    done
    return 1
}

head -c 10000 /dev/zero | tr '\0' 'x' >"$TMPD/big"
pub -t fleet/v1/location -f "$TMPD/big"
check "an oversized payload is a counted refusal" wait_metric refused oversized 1
pub -t fleet/v1/location -m '{"lat": 40.7, "lon": '
check "malformed JSON is a counted refusal" wait_metric refused malformed 1
pub -t fleet/batch -m 'this is not a LocationBatch'
check "malformed protobuf is a counted rejection" wait_metric rejected malformed 2
pub -t fleet//location -m '{"lat":40.7,"lon":-74.0,"timestamp_ms":1700000000000}'
check "a topic with no user level is a counted refusal" wait_metric refused no_user_level 1
pub -t raw/x -m '{"user_id":"a\u0000b","lat":40.7,"lon":-74.0,"timestamp_ms":1700000000000}'
check "a user id with NUL is a counted refusal" wait_metric refused malformed 2
printf '{"user_id":"a\xff\xfeb","lat":40.7,"lon":-74.0,"timestamp_ms":1700000000000}' >"$TMPD/bad_utf8"
pub -t raw/x -f "$TMPD/bad_utf8"
check "a user id of invalid UTF-8 is a counted refusal" wait_metric refused malformed 3
# A topic that is not UTF-8 never reaches the daemon: the broker drops
# the publisher that sends it (MQTT requires UTF-8 topics).
"$PY" - "$BROKER_PORT" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
cid = b"hostile"
body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
s.sendall(bytes([0x10, len(body)]) + body)
s.recv(4)
topic = b"fleet/\xff\xfe/location"
payload = b'{"lat":40.7,"lon":-74.0,"timestamp_ms":1700000000000}'
body = len(topic).to_bytes(2, "big") + topic + payload
s.sendall(bytes([0x30, len(body)]) + body)
s.settimeout(5)
try:
    closed = s.recv(1) == b""
except OSError:
    closed = True
sys.exit(0 if closed else 1)
PYEOF
check "the broker drops a publisher of an invalid UTF-8 topic" test $? -eq 0
check "the daemon stays connected" wait_health "$HTTP_EP" 200

# The flood: 10 000 vehicles, one fix each, as fast as the replay goes;
# the user table holds 5000, the rest are refused, counted.
"$PY" "$top_srcdir/tests/mqtt_check.py" synth 10000 1 "$TMPD/flood.csv"
rss_before=$(awk '/VmRSS/ { print $2 }' "/proc/$DAEMON_PID/status")
"$TRACESAN" replay --mqtt "$BROKER_URL" --topic 'fleet/{user}/location' \
    --payload json "$TMPD/flood.csv" 2>"$TMPD/flood.log" &
FLOOD_PID=$!
background_pids+=("$FLOOD_PID")
sleep 0.3
pub -t fleet/good/location -m '{"lat":40.71,"lon":-74.01,"timestamp_ms":1700000000000}'
found=0
for i in $(seq 1 300); do
    grep -q '"user_id":"good"' "$MTAIL_OUT" && { found=1; break; }
    sleep 0.1
done
check_eq "another vehicle's update is answered during the flood" 1 "$found"
wait_for_pid "$FLOOD_PID" 60 || fatal "the flood replay did not finish"
check "users past users.max_users are counted refusals" \
    wait_metric rejected user_table_full 5001
rss_after=$(awk '/VmRSS/ { print $2 }' "/proc/$DAEMON_PID/status")
note "RSS before the flood ${rss_before} kB, after ${rss_after} kB"
check "RSS grew by less than 64 MiB over 10 000 topics" \
    test $((rss_after - rss_before)) -lt 65536
check "still healthy" wait_health "$HTTP_EP" 200
curl -s "http://$HTTP_EP/metrics" | grep '^tracesand_mqtt_refusals_total' | sed 's/^/# /'
stop_daemon hostile
kill -TERM "$MTAIL_PID"; wait "$MTAIL_PID" 2>/dev/null; forget_pid "$MTAIL_PID"
stop_broker
finish
