#!/usr/bin/env bash
# MQTT over TLS (issue 27): a client certificate and a password file end
# to end; a wrong CA, no client certificate or a wrong password fails
# closed with an error naming the cause; an mqtts:// URL never falls back
# to clear text; a password file others can read is refused at load, and
# by tracesan replay/tail --mqtt.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mqtt_lib.sh"
command -v openssl >/dev/null || { echo "1..0 # SKIP openssl missing"; exit 77; }
command -v mosquitto_passwd >/dev/null || { echo "1..0 # SKIP mosquitto_passwd missing"; exit 77; }

pki=$TMPD/pki
mkdir -p "$pki"
make_ca() {  # NAME
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" \
        -keyout "$pki/$1.key" -out "$pki/$1.pem" 2>/dev/null
}
make_cert() {  # NAME CA SAN
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" \
        -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
    printf 'subjectAltName=%s\n' "$3" >"$pki/$1.ext"
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$2.pem" -CAkey "$pki/$2.key" \
        -CAcreateserial -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.pem" 2>/dev/null
}
make_ca ca
make_ca other-ca
make_cert server ca "IP:127.0.0.1,DNS:localhost"
make_cert client ca "DNS:tracesand"
chmod 600 "$pki"/*.key
mosquitto_passwd -b -c "$TMPD/broker.passwd" fleet 'correct horse' 2>/dev/null
printf 'correct horse\n' >"$TMPD/password"; chmod 600 "$TMPD/password"
printf 'wrong horse\n' >"$TMPD/wrong"; chmod 600 "$TMPD/wrong"

BROKER_PORT=$(free_port)
PLAIN_PORT=$(free_port)
cat >"$TMPD/tls.conf" <<CONF
allow_anonymous false
password_file $TMPD/broker.passwd
listener $BROKER_PORT 127.0.0.1
cafile $pki/ca.pem
certfile $pki/server.pem
keyfile $pki/server.key
require_certificate true
listener $PLAIN_PORT 127.0.0.1
CONF
start_broker "$TMPD/tls.conf"
TLS_URL=mqtts://127.0.0.1:$BROKER_PORT

tls_daemon() {  # NAME [extra -o ...]
    local name=$1
    shift
    start_daemon "$name" -o 'input.type="mqtt"' -o 'output.type="mqtt"' \
        -o "mqtt.url=\"$TLS_URL\"" -o "mqtt.client_id=\"$name\"" \
        -o 'mqtt.username="fleet"' -o 'mqtt.retry_max_s=1' \
        -o 'mqtt.topics=["fleet/+/location"]' -o 'mqtt.topic_formats=["json"]' \
        -o 'mqtt.user_from_topic=2' -o 'output.encoding="json"' "$@"
}

# --- end to end ---------------------------------------------------------
tls_daemon good -o "mqtt.password_file=\"$TMPD/password\"" \
    -o "mqtt.tls_ca_file=\"$pki/ca.pem\"" \
    -o "mqtt.tls_cert_file=\"$pki/client.pem\"" \
    -o "mqtt.tls_key_file=\"$pki/client.key\""
check "connected over TLS with a client certificate and a password" \
    wait_health "$HTTP_EP" 200
"$PY" "$top_srcdir/tests/mqtt_check.py" synth 5 4 "$TMPD/trace.csv"
tls_opts=(--username fleet --password-file "$TMPD/password"
    --tls-ca-file "$pki/ca.pem" --tls-cert-file "$pki/client.pem"
    --tls-key-file "$pki/client.key")
MTAIL_OUT=$TMPD/out.jsonl
"$TRACESAN" tail --mqtt "$TLS_URL" "${tls_opts[@]}" --count 20 --timeout 30 \
    --encoding json --ready-file "$TMPD/tail.ready" >"$MTAIL_OUT" 2>"$TMPD/tail.log" &
MTAIL_PID=$!
background_pids+=("$MTAIL_PID")
for i in $(seq 1 100); do [ -e "$TMPD/tail.ready" ] && break; sleep 0.05; done
"$TRACESAN" replay --mqtt "$TLS_URL" "${tls_opts[@]}" \
    --topic 'fleet/{user}/location' --payload json "$TMPD/trace.csv" \
    2>"$TMPD/replay.log" || { show_file "$TMPD/replay.log"; fail "replay over TLS"; }
wait_for_pid "$MTAIL_PID" 30
check "every update answered over TLS" \
    "$PY" "$top_srcdir/tests/mqtt_check.py" outcomes "$TMPD/trace.csv" "$MTAIL_OUT" --exactly-one
check "the password is not in the log" bash -c "! grep -q 'horse' '$DAEMON_LOG'"
stop_daemon good

# --- failing closed -----------------------------------------------------
# expect_refusal NAME PATTERN [-o ...]: unhealthy, the log names the cause.
expect_refusal() {
    local name=$1 pattern=$2
    shift 2
    tls_daemon "$name" "$@"
    local ok=0 i
    for i in $(seq 1 100); do
        grep -q "$pattern" "$DAEMON_LOG" && { ok=1; break; }
        sleep 0.1
    done
    if [ $ok = 1 ] && wait_health "$HTTP_EP" 503; then
        pass "$name: refused, unhealthy, the log says '$pattern'"
    else
        fail "$name: no '$pattern' in the log, or /healthz not 503"
        show_file "$DAEMON_LOG" 5
    fi
    check_eq "$name: nothing received" 0 \
        "$(metric "$HTTP_EP" tracesand_mqtt_messages_total)"
    stop_daemon "$name"
}
expect_refusal wrong-ca "not trusted" \
    -o "mqtt.password_file=\"$TMPD/password\"" \
    -o "mqtt.tls_ca_file=\"$pki/other-ca.pem\"" \
    -o "mqtt.tls_cert_file=\"$pki/client.pem\"" \
    -o "mqtt.tls_key_file=\"$pki/client.key\""
expect_refusal no-cert "TLS handshake failed" \
    -o "mqtt.password_file=\"$TMPD/password\"" \
    -o "mqtt.tls_ca_file=\"$pki/ca.pem\""
expect_refusal wrong-password "refused the connection: .*password" \
    -o "mqtt.password_file=\"$TMPD/wrong\"" \
    -o "mqtt.tls_ca_file=\"$pki/ca.pem\"" \
    -o "mqtt.tls_cert_file=\"$pki/client.pem\"" \
    -o "mqtt.tls_key_file=\"$pki/client.key\""
# mqtts:// against the clear-text listener: a TLS handshake or nothing.
TLS_URL=mqtts://127.0.0.1:$PLAIN_PORT expect_refusal no-fallback "TLS" \
    -o "mqtt.password_file=\"$TMPD/password\"" \
    -o "mqtt.tls_ca_file=\"$pki/ca.pem\""
check "no clear-text CONNECT reached the broker from no-fallback" \
    bash -c "! grep -q 'as no-fallback' '$TMPD/broker.log'"

chmod 644 "$TMPD/password"
if "$TRACESAND" -c "$SHIPPED_CONF" --check-config -o 'input.type="mqtt"' \
        -o 'output.type="mqtt"' -o 'mqtt.username="fleet"' \
        -o "mqtt.password_file=\"$TMPD/password\"" >"$TMPD/check.log" 2>&1; then
    fail "a password file others can read is accepted"
else
    check "a password file others can read is refused, saying chmod 600" \
        grep -q "chmod 600" "$TMPD/check.log"
fi
# The tools apply the daemon's rule: the same file, the same refusal,
# before anything is sent (the broker would take the password).
for tool in replay tail; do
    if [ $tool = replay ]; then
        args=(--topic 'fleet/{user}/location' --payload json "$TMPD/trace.csv")
    else
        args=(--count 1 --timeout 5)
    fi
    if "$TRACESAN" $tool --mqtt "$TLS_URL" "${tls_opts[@]}" "${args[@]}" \
            >/dev/null 2>"$TMPD/$tool-mode.log"; then
        fail "tracesan $tool --password-file accepts a file others can read"
    else
        check "tracesan $tool refuses a password file others can read, saying chmod 600" \
            grep -q "chmod 600" "$TMPD/$tool-mode.log"
    fi
done
stop_broker
finish
