#!/usr/bin/env bash
# The JetStream mode against a secured nats-server (docs/scale-out.md,
# "Securing the connection"): mutual TLS (a test CA, a server certificate
# for 127.0.0.1, a client certificate; the server verifies clients) and
# NKey authentication (a user NKey made by tests/nkey_keypair).
#   a. tracesand with nats.nkey_seed_file, nats.nkey_public,
#      nats.tls_ca_file, nats.tls_cert_file and nats.tls_key_file reaches
#      its ready line; `tracesan replay --jetstream` with the same
#      credentials as options publishes a trace; every input gets exactly
#      one output (read back with `tracesan jetstream` and the options);
#      the daemon stops cleanly.
#   b. fail closed: tracesand without the client certificate, with an NKey
#      the server does not know, or without the CA exits 1 at start-up,
#      logs the cause and processes nothing of the input waiting for it.
#   c. the CLI without credentials, with an unknown NKey, without the
#      client certificate or with a missing creds file exits non-zero with
#      an error; options that only go in pairs (or exclude each other) are
#      refused.
# Then a correctly configured instance processes the input left waiting.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

if ! command -v openssl >/dev/null; then
    echo "1..0 # SKIP openssl is not installed (Debian package openssl)"
    exit 77
fi
NKEY_KEYPAIR=${NKEY_KEYPAIR:-$top_builddir/tests/nkey_keypair}
require_nats "$NKEY_KEYPAIR"

USERS=20
PER_USER=20
POINTS=$((USERS * PER_USER))
LATE_POINTS=20          # replayed while only refused instances run
REFUSED_WITHIN=15       # seconds a refused instance may take to exit

# ---------------------------------------------------------- certificates
# EC keys: quick to make. The CA gets explicit CA extensions (Go's TLS,
# in nats-server, checks them).
cert_dir=$TMPD/pki
mkdir -p "$cert_dir"
(
    cd "$cert_dir" &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -nodes -keyout ca.key -out ca.pem -days 2 \
        -subj "/CN=tracesan test CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout server.key -out server.csr -subj "/CN=127.0.0.1" &&
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
        >server.ext &&
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key \
        -set_serial 2 -days 2 -extfile server.ext -out server.pem &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout client.key -out client.csr -subj "/CN=tracesand" &&
    printf 'extendedKeyUsage=clientAuth\n' >client.ext &&
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key \
        -set_serial 3 -days 2 -extfile client.ext -out client.pem
) >"$TMPD/openssl.log" 2>&1 || { show_file "$TMPD/openssl.log"; fatal "openssl failed"; }
CA=$cert_dir/ca.pem
CLIENT_CERT=$cert_dir/client.pem
CLIENT_KEY=$cert_dir/client.key

# ----------------------------------------------------------------- NKeys
USER_PUB=$("$NKEY_KEYPAIR" "$TMPD/user.seed") || fatal "nkey_keypair failed"
OTHER_PUB=$("$NKEY_KEYPAIR" "$TMPD/other.seed") || fatal "nkey_keypair failed"
check "nkey_keypair: a user public key (U + 55 base32 characters)" \
    grep -qxE 'U[A-Z2-7]{55}' <<<"$USER_PUB"
check "nkey_keypair: a user seed (SU + 56 base32 characters), mode 0600" \
    bash -c "grep -qxE 'SU[A-Z2-7]{56}' '$TMPD/user.seed' &&
             [ \"\$(stat -c %a '$TMPD/user.seed')\" = 600 ]"
check "nkey_keypair: two calls give two different keys" \
    test "$USER_PUB" != "$OTHER_PUB"

# ------------------------------------------------------------ nats-server
port=$(free_port)
cat >"$TMPD/nats.conf" <<CONF
listen: 127.0.0.1:$port
jetstream { store_dir: "$TMPD/nats0" }
tls {
  cert_file: "$cert_dir/server.pem"
  key_file: "$cert_dir/server.key"
  ca_file: "$CA"
  verify: true
  timeout: 5
}
authorization {
  users = [ { nkey: $USER_PUB } ]
}
CONF
"$NATS_SERVER" -c "$TMPD/nats.conf" >"$TMPD/nats0.log" 2>&1 &
NATS_PIDS=($!)
background_pids+=("$!")
wait_nats_port "$port"
NATS_URL=tls://127.0.0.1:$port
# The CLI options of every helper's `tracesan jetstream` call.
NATS_CLI_OPTS=(--nkey-seed "$TMPD/user.seed" --nkey-public "$USER_PUB"
               --tls-ca "$CA" --tls-cert "$CLIENT_CERT" --tls-key "$CLIENT_KEY")
SECURE_SETTINGS=(-o "nats.nkey_seed_file=$TMPD/user.seed"
                 -o "nats.nkey_public=$USER_PUB" -o "nats.tls_ca_file=$CA"
                 -o "nats.tls_cert_file=$CLIENT_CERT"
                 -o "nats.tls_key_file=$CLIENT_KEY")

# ---------------------------------------- a. the whole path, authenticated
make_trace "$TMPD/trace.csv" $USERS $PER_USER
start_instance secure "${SECURE_SETTINGS[@]}"
S_PID=$INSTANCE_PID S_LOG=$INSTANCE_LOG S_HTTP=$INSTANCE_HTTP
pass "tracesand with an NKey and mutual TLS reaches its ready line"
wait_owned "$S_HTTP" 10
check_eq "it owns all 16 partitions" 16 "$OWNED"

replay_status=0
"$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 \
    "${NATS_CLI_OPTS[@]}" "$TMPD/trace.csv" 2>"$TMPD/replay.log" ||
    replay_status=$?
check_eq "tracesan replay --jetstream with --nkey-seed and --tls-* exits 0" \
    0 "$replay_status"
[ "$replay_status" -eq 0 ] || show_file "$TMPD/replay.log"

if wait_distinct_outputs $POINTS 30; then
    pass "TRACESAN_OUT holds $POINTS distinct outputs"
else
    fail "outputs missing"
    show_file "$S_LOG"
fi
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$S_HTTP/healthz")
check_eq "/healthz answers 200" 200 "$code"
check "/metrics: tracesand_jetstream_connected 1" \
    bash -c "curl -s 'http://$S_HTTP/metrics' | grep -qx 'tracesand_jetstream_connected 1'"
DAEMON_PID=$S_PID DAEMON_LOG=$S_LOG stop_daemon secure

read_streams
check_eq "tracesan jetstream outputs (with the options) prints a header and one line per input" \
    $((POINTS + 1)) "$(wc -l <"$TMPD/outputs.csv")"
stream_checks "$S_LOG"

# Input waiting for the next instance: refused instances must not touch it.
# One user, fewer points than a batch: one more message in TRACESAN_IN.
make_trace "$TMPD/late.csv" 1 $LATE_POINTS
IN_BEFORE=$(stream_msgs TRACESAN_IN)
"$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 \
    "${NATS_CLI_OPTS[@]}" "$TMPD/late.csv" 2>>"$TMPD/replay.log" ||
    fatal "the second replay failed"
IN_MSGS=$(stream_msgs TRACESAN_IN)
check_eq "a second replay adds one message to TRACESAN_IN" \
    $((IN_BEFORE + 1)) "$IN_MSGS"

# ----------------------------------------------------- b. fail closed
# run_refused NAME [-o ...]: tracesand with these connection settings;
# waits up to REFUSED_WITHIN s for it to exit. Sets REFUSED_STATUS (the
# exit status, or "running"), REFUSED_LOG, REFUSED_MS.
run_refused() {
    local name=$1 started pid
    shift
    REFUSED_LOG=$TMPD/$name.log
    started=$(now_ms)
    "${daemon_wrapper[@]}" "$TRACESAND" -c "$SHIPPED_CONF" \
        -o input.type=jetstream -o output.type=jetstream \
        -o "nats.servers=$NATS_URL" -o "nats.instance_id=$name" \
        -o 'state.dir=""' -o input.max_backdate_s=0 \
        -o http.listen=127.0.0.1:0 "$@" 2>"$REFUSED_LOG" </dev/null &
    pid=$!
    background_pids+=("$pid")
    if wait_for_pid "$pid" $REFUSED_WITHIN; then
        REFUSED_STATUS=$waited_status
    else
        REFUSED_STATUS=running
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        forget_pid "$pid"
    fi
    REFUSED_MS=$(( $(now_ms) - started ))
}

# refused_checks WHAT PATTERN: the checks of one refused start.
refused_checks() {
    note "$1: exit status $REFUSED_STATUS after $REFUSED_MS ms; it logged:"
    grep -v '^$' "$REFUSED_LOG" | tail -n 3 | sed 's/^/#   /'
    check_eq "$1: tracesand exits 1 within ${REFUSED_WITHIN} s" 1 "$REFUSED_STATUS"
    check "$1: no ready line" bash -c "! grep -q 'ready input=' '$REFUSED_LOG'"
    check "$1: the error names the cause" grep -qE -e "$2" "$REFUSED_LOG"
}

no_cert=(-o "nats.nkey_seed_file=$TMPD/user.seed" -o "nats.nkey_public=$USER_PUB"
         -o "nats.tls_ca_file=$CA")
run_refused no-cert "${no_cert[@]}"
refused_checks "without nats.tls_cert_file" \
    'cannot connect to nats.servers: .*may require a client certificate, and none is configured'

wrong_nkey=(-o "nats.nkey_seed_file=$TMPD/other.seed" -o "nats.nkey_public=$OTHER_PUB"
            -o "nats.tls_ca_file=$CA" -o "nats.tls_cert_file=$CLIENT_CERT"
            -o "nats.tls_key_file=$CLIENT_KEY")
run_refused wrong-nkey "${wrong_nkey[@]}"
refused_checks "with an NKey the server does not know" \
    'cannot connect to nats.servers: Authentication Violation.*Authorization Violation.*refused the credentials or NKey'

no_ca=(-o "nats.nkey_seed_file=$TMPD/user.seed" -o "nats.nkey_public=$USER_PUB"
       -o "nats.tls_cert_file=$CLIENT_CERT" -o "nats.tls_key_file=$CLIENT_KEY")
run_refused no-ca "${no_ca[@]}"
refused_checks "without nats.tls_ca_file" \
    'cannot connect to nats.servers: SSL Error.*no CA certificates are configured'

check_eq "the refused instances processed nothing (TRACESAN_OUT still $POINTS)" \
    $POINTS "$(stream_msgs TRACESAN_OUT)"

# ------------------------------------------------------------- c. the CLI
# cli_refused WHAT PATTERN COMMAND...: exits non-zero and prints PATTERN.
cli_refused() {
    local what=$1 pattern=$2 status=0
    shift 2
    "$@" >"$TMPD/cli.out" 2>"$TMPD/cli.err" </dev/null || status=$?
    note "$what: exit status $status: $(head -n 1 "$TMPD/cli.err")"
    if [ "$status" -ne 0 ] && grep -qE -e "$pattern" "$TMPD/cli.err"; then
        pass "$what: exits $status with an error"
    else
        fail "$what: exit status $status, stderr: $(head -c 300 "$TMPD/cli.err")"
    fi
}

cli_refused "tracesan jetstream status without credentials" \
    'tracesan jetstream: cannot connect to nats.servers' \
    "$TRACESAN" jetstream --server "$NATS_URL" status
cli_refused "tracesan replay --jetstream without credentials" \
    'tracesan replay: cannot connect to nats.servers' \
    "$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 "$TMPD/late.csv"
cli_refused "tracesan jetstream status with an unknown NKey" \
    'Authorization Violation' \
    "$TRACESAN" jetstream --server "$NATS_URL" --nkey-seed "$TMPD/other.seed" \
    --nkey-public "$OTHER_PUB" --tls-ca "$CA" --tls-cert "$CLIENT_CERT" \
    --tls-key "$CLIENT_KEY" status
cli_refused "tracesan jetstream status without the client certificate" \
    'may require a client certificate' \
    "$TRACESAN" jetstream --server "$NATS_URL" --nkey-seed "$TMPD/user.seed" \
    --nkey-public "$USER_PUB" --tls-ca "$CA" status
cli_refused "--nkey-seed without --nkey-public is refused" \
    '--nkey-seed and --nkey-public go together' \
    "$TRACESAN" jetstream --server "$NATS_URL" --nkey-seed "$TMPD/user.seed" status
cli_refused "--tls-cert without --tls-key is refused" \
    '--tls-cert and --tls-key go together' \
    "$TRACESAN" replay --jetstream "$NATS_URL" --tls-cert "$CLIENT_CERT" \
    "$TMPD/late.csv"
cli_refused "--creds with --nkey-seed is refused" \
    '--creds and --nkey-seed are exclusive' \
    "$TRACESAN" jetstream --server "$NATS_URL" --creds "$TMPD/none.creds" \
    --nkey-seed "$TMPD/user.seed" --nkey-public "$USER_PUB" status
cli_refused "--creds with a missing file" 'cannot connect to nats.servers: .*none\.creds' \
    "$TRACESAN" replay --jetstream "$NATS_URL" --creds "$TMPD/none.creds" \
    --tls-ca "$CA" --tls-cert "$CLIENT_CERT" --tls-key "$CLIENT_KEY" \
    "$TMPD/late.csv"
# A tls:// URL is a demand, not a wish: against a server without TLS the
# client refuses instead of falling back to clear text.
PLAIN_PORT=$(free_port)
"$NATS_SERVER" -a 127.0.0.1 -p "$PLAIN_PORT" >"$TMPD/plain.log" 2>&1 &
background_pids+=("$!")
wait_nats_port "$PLAIN_PORT"
cli_refused "a tls:// URL to a server without TLS" \
    'cannot connect to nats.servers' \
    "$TRACESAN" jetstream --server "tls://127.0.0.1:$PLAIN_PORT" status
check_eq "the refused replays published nothing (TRACESAN_IN unchanged)" \
    "$IN_MSGS" "$(stream_msgs TRACESAN_IN)"

# With the right credentials the waiting input is processed after all.
start_instance secure2 "${SECURE_SETTINGS[@]}"
S_PID=$INSTANCE_PID S_LOG=$INSTANCE_LOG
if wait_distinct_outputs $((POINTS + LATE_POINTS)) 30; then
    pass "a correctly configured instance then processes the waiting input"
else
    fail "the waiting input was not processed"
    show_file "$S_LOG"
fi
DAEMON_PID=$S_PID DAEMON_LOG=$S_LOG stop_daemon secure2
finish
