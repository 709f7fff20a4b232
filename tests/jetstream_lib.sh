# Helpers of the JetStream tests and bench (sourced after tests/lib.sh, or
# alone with TMPD set): nats-server on free loopback ports, tracesand
# instances in the JetStream mode, waiting for outputs.

NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || true)}
# Connection options (--tls-ca, --nkey-seed, ...) appended to every
# `tracesan jetstream` call of these helpers; empty for a plain server.
[ -n "${NATS_CLI_OPTS[*]+set}" ] || NATS_CLI_OPTS=()
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

# require_nats [PROGRAM...]: skips the test (exit 77) without nats-server;
# then the daemon, the CLI and these programs must exist.
require_nats() {
    if [ -z "$NATS_SERVER" ]; then
        echo "1..0 # SKIP nats-server is not installed (Debian package nats-server)"
        exit 77
    fi
    require_programs "$TRACESAND" "$TRACESAN" "$@"
}

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_nats_single: one server with JetStream. Sets NATS_URL, NATS_PIDS.
start_nats_single() {
    local port
    port=$(free_port)
    "$NATS_SERVER" -js -a 127.0.0.1 -p "$port" -sd "$TMPD/nats0" \
        >"$TMPD/nats0.log" 2>&1 &
    NATS_PIDS=($!)
    background_pids+=("$!")
    NATS_URL=nats://127.0.0.1:$port
    wait_nats_port "$port"
}

wait_nats_port() {
    local tries=100
    while [ $tries -gt 0 ]; do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
        tries=$((tries - 1))
    done
    fatal "nats-server did not open port $1"
}

# start_nats_cluster: three servers, one cluster, JetStream on each, own
# storage directories. Sets NATS_URL (all three), NATS_PIDS, NATS_PORTS.
start_nats_cluster() {
    local i routes="" cports=() cport
    NATS_PORTS=()
    for i in 0 1 2; do
        NATS_PORTS+=("$(free_port)")
        cports+=("$(free_port)")
    done
    for i in 0 1 2; do
        routes="$routes${routes:+, }nats-route://127.0.0.1:${cports[$i]}"
    done
    NATS_PIDS=()
    NATS_URL=""
    for i in 0 1 2; do
        cat >"$TMPD/nats$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:${NATS_PORTS[$i]}
jetstream { store_dir: "$TMPD/nats$i" }
cluster {
  name: tracesan
  listen: 127.0.0.1:${cports[$i]}
  routes: [ $routes ]
}
CONF
        "$NATS_SERVER" -c "$TMPD/nats$i.conf" >"$TMPD/nats$i.log" 2>&1 &
        NATS_PIDS+=($!)
        background_pids+=("$!")
        NATS_URL="$NATS_URL${NATS_URL:+,}nats://127.0.0.1:${NATS_PORTS[$i]}"
    done
    for i in 0 1 2; do
        wait_nats_port "${NATS_PORTS[$i]}"
    done
}

# kill_nats INDEX: SIGKILL nats-server node INDEX and reap it.
kill_nats() {
    local pid=${NATS_PIDS[$1]}
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    forget_pid "$pid"
}

# wait_replay PID SECONDS CHECK: the background replay PID (stderr in
# $TMPD/replay.log) exits 0 within SECONDS, as the check named CHECK.
wait_replay() {
    if wait_for_pid "$1" "$2"; then
        check_eq "$3" 0 "$waited_status"
    else
        fail "replay did not finish"
    fi
    show_file "$TMPD/replay.log" 5
}

# start_instance NAME [-o ...]: tracesand in the JetStream mode. Sets
# INSTANCE_PID, INSTANCE_LOG, INSTANCE_HTTP.
start_instance() {
    local name=$1
    shift
    INSTANCE_LOG=$TMPD/$name.log
    "$TRACESAND" -c "$SHIPPED_CONF" -o input.type=jetstream \
        -o output.type=jetstream -o "nats.servers=$NATS_URL" \
        -o "nats.instance_id=$name" -o 'state.dir=""' \
        -o input.max_backdate_s=0 -o http.listen=127.0.0.1:0 \
        "$@" 2>"$INSTANCE_LOG" </dev/null &
    INSTANCE_PID=$!
    background_pids+=("$INSTANCE_PID")
    local tries=$(( ${TS_START_TIMEOUT:-20} * 20 + 1200 ))
    while [ $tries -gt 0 ]; do
        grep -q "ready input=jetstream" "$INSTANCE_LOG" 2>/dev/null && break
        if ! kill -0 "$INSTANCE_PID" 2>/dev/null; then
            show_file "$INSTANCE_LOG"
            fatal "tracesand $name exited before its ready line"
        fi
        sleep 0.05
        tries=$((tries - 1))
    done
    [ $tries -gt 0 ] || { show_file "$INSTANCE_LOG"; fatal "$name: no ready line"; }
    INSTANCE_HTTP=$(sed -n 's/.*ready input=jetstream.* http=\([^ ]*\).*/\1/p' \
                        "$INSTANCE_LOG" | head -n 1)
}

# stream_msgs NAME: messages in a stream now (empty when unknown).
stream_msgs() {
    "$TRACESAN" jetstream --server "$NATS_URL" "${NATS_CLI_OPTS[@]}" status \
        2>/dev/null |
        sed -n "s/^stream=$1 msgs=\([0-9]*\).*/\1/p"
}

# stream_last_seq NAME: the stream's last sequence, i.e. messages stored
# since it was made (TRACESAN_IN, a work queue, keeps none once processed).
stream_last_seq() {
    "$TRACESAN" jetstream --server "$NATS_URL" "${NATS_CLI_OPTS[@]}" status \
        2>/dev/null |
        sed -n "s/^stream=$1 .*last_seq=\([0-9]*\).*/\1/p"
}

# wait_outputs N SECONDS: until TRACESAN_OUT holds N messages.
wait_outputs() {
    local want=$1 deadline=$(( $(date +%s) + $2 )) have
    while [ "$(date +%s)" -lt $deadline ]; do
        have=$(stream_msgs TRACESAN_OUT)
        [ "${have:-0}" -ge "$want" ] && return 0
        sleep 0.5
    done
    note "TRACESAN_OUT holds ${have:-?} of $want outputs"
    return 1
}

# wait_distinct_outputs N SECONDS: until TRACESAN_OUT holds N distinct
# message ids. The stream's count alone can reach N early: a takeover
# republishes records beyond the dedupe window's reach as duplicates,
# while a partition still being rebuilt has outputs to come.
wait_distinct_outputs() {
    local want=$1 deadline=$(( $(date +%s) + $2 )) have=""
    while [ "$(date +%s)" -lt $deadline ]; do
        have=$(stream_msgs TRACESAN_OUT)
        if [ "${have:-0}" -ge "$want" ]; then
            have=$("$TRACESAN" jetstream --server "$NATS_URL" \
                       "${NATS_CLI_OPTS[@]}" outputs 2>/dev/null |
                       tail -n +2 | cut -d, -f2 | sort -u | wc -l)
            [ "$have" -ge "$want" ] && return 0
        fi
        sleep 2
    done
    note "TRACESAN_OUT holds ${have:-?} of $want outputs (distinct ids)"
    return 1
}

now_ms() { echo $(( 10#${EPOCHREALTIME/./} / 1000 )); }
# mark_ms VAR: the wall-clock ms now, into VAR, without forking: right
# after a kill, a fork for `date` on a loaded machine can come seconds
# late, which made the killed instance's lease interval look as if it
# lasted into its successor's.
mark_ms() { printf -v "$1" '%s' $(( 10#${EPOCHREALTIME/./} / 1000 )); }

# js_api PORT SUBJECT...: JetStream API requests (empty bodies) over the
# plain NATS protocol; prints each answer.
js_api() {
    local port=$1 n=0 line
    shift
    exec 5<>"/dev/tcp/127.0.0.1/$port" || return 1
    read -r -t 5 line <&5
    printf 'CONNECT {"verbose":false}\r\nSUB _INBOX.tsjs 1\r\n' >&5
    for subject; do printf 'PUB %s _INBOX.tsjs 0\r\n\r\n' "$subject" >&5; done
    while [ $n -lt $# ] && read -r -t 5 line <&5; do
        case $line in MSG*) read -r -t 5 line <&5; echo "$line"; n=$((n + 1)) ;; esac
    done
    exec 5>&-
}

# js_request PORT SUBJECT BODY: one JetStream API request with a (JSON,
# ASCII) body; prints the answer.
js_request() {
    local port=$1 subject=$2 body=$3 line
    exec 5<>"/dev/tcp/127.0.0.1/$port" || return 1
    read -r -t 5 line <&5
    printf 'CONNECT {"verbose":false}\r\nSUB _INBOX.tsreq 1\r\nPUB %s _INBOX.tsreq %d\r\n%s\r\n' \
        "$subject" "${#body}" "$body" >&5
    while read -r -t 5 line <&5; do
        case $line in MSG*) read -r -t 5 line <&5; echo "${line%$'\r'}"; break ;; esac
    done
    exec 5>&-
}

# held_partitions LOG: the partitions whose last lease line in LOG is
# "acquired".
held_partitions() {
    sed -n 's/.*lease \(acquired\|released\) partition=\([0-9]*\) .*/\2 \1/p' "$1" |
        awk '{ last[$1] = $2 } END { for (p in last) if (last[p] == "acquired") print p }' |
        sort -n
}

# owned_count HTTP: partitions an instance reports owning (0 when its
# /metrics does not answer within 10 s).
owned_count() {
    curl -s --max-time 10 "http://$1/metrics" |
        awk '/^tracesand_partition_owned\{/ { n += $2 } END { print n + 0 }'
}

# Ownership moves when leases age, rebuilds finish and instances hand
# partitions back, each slower on 2 loaded cores than anything a test
# should bet on: the waits below end as soon as their condition holds,
# and give up only after at least this long.
: "${JS_OWNERSHIP_PATIENCE_S:=90}"

# wait_owned HTTP SECONDS: until the instance at HTTP owns all 16
# partitions, or max(SECONDS, JS_OWNERSHIP_PATIENCE_S) passed. OWNED is
# the count it saw last (what the caller checks: a second read could
# catch a /metrics that did not answer).
wait_owned() {
    local wait_s=$2
    [ "$wait_s" -ge "$JS_OWNERSHIP_PATIENCE_S" ] || wait_s=$JS_OWNERSHIP_PATIENCE_S
    local deadline=$(( $(date +%s) + wait_s ))
    while OWNED=$(owned_count "$1"); [ "$OWNED" -lt 16 ] &&
          [ "$(date +%s)" -lt $deadline ]; do
        sleep 0.1
    done
}

# wait_split HTTP_A HTTP_B SECONDS: until the two instances own 8
# partitions each, or max(SECONDS, JS_OWNERSHIP_PATIENCE_S) passed. SPLIT
# is "A B" as it saw them last.
wait_split() {
    local wait_s=$3 a b
    [ "$wait_s" -ge "$JS_OWNERSHIP_PATIENCE_S" ] || wait_s=$JS_OWNERSHIP_PATIENCE_S
    local deadline=$(( $(date +%s) + wait_s ))
    while a=$(owned_count "$1"); b=$(owned_count "$2"); SPLIT="$a $b"
          { [ "$a" -ne 8 ] || [ "$b" -ne 8 ]; } && [ "$(date +%s)" -lt $deadline ]; do
        sleep 0.1
    done
}

# make_trace FILE USERS POINTS_PER_USER: a synthetic trace, time-ordered,
# users interleaved, one point a minute each.
make_trace() {
    "$PY" - "$1" "$2" "$3" <<'PYEOF'
import random, sys
path, users, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(7)
base = 1700000000
with open(path, "w") as f:
    f.write("user,ts,lat,lon\n")
    for k in range(per):
        for u in range(users):
            f.write("u%d,%d,%.6f,%.6f\n" % (u, base + 60 * k + u % 60,
                    40.7 + rnd.uniform(-0.05, 0.05),
                    -74.0 + rnd.uniform(-0.05, 0.05)))
PYEOF
}

# read_streams: the outputs, the ledger and the changelog as CSV, into
# $TMPD/{outputs,ledger,changelog}.csv.
read_streams() {
    local what
    for what in outputs ledger changelog; do
        "$TRACESAN" jetstream --server "$NATS_URL" "${NATS_CLI_OPTS[@]}" \
            $what >"$TMPD/$what.csv" ||
            fatal "cannot read $what"
    done
}

# stream_checks LOG[:KILL_MS]...: tests/jetstream_check.py over the trace
# and the streams read by read_streams, each of its lines a check (exactly
# one output per input, ledger = epsilon published, no window over budget,
# epochs, no overlapping leases); each instance's log, with the wall-clock
# ms it was killed at when it was.
stream_checks() {
    "$PY" "$top_srcdir/tests/jetstream_check.py" "$TMPD/trace.csv" \
        "$TMPD/outputs.csv" "$TMPD/ledger.csv" "$TMPD/changelog.csv" \
        "$@" >"$TMPD/checks.txt"
    report_checks "$TMPD/checks.txt"
}

# report_checks FILE: a checker's "ok - "/"not ok - " lines as this test's
# checks, its other lines as notes.
report_checks() {
    local line
    while read -r line; do
        case $line in
            "ok - "*) pass "${line#ok - }" ;;
            "not ok - "*) fail "${line#not ok - }" ;;
            *) note "${line#\# }" ;;
        esac
    done <"$1"
}

# js_publish_raw PORT SUBJECT KIND COUNT: COUNT messages made by KIND,
# published to SUBJECT as a JetStream producer would (a reply inbox for
# the answer), over the plain NATS protocol. KIND is garbage:BYTES (that
# many bytes that are no LocationBatch) or empty_updates:N (a LocationBatch
# of N empty updates). Prints one line per message: "seq=S" with the
# stream sequence JetStream stored it under, or "refused=..." with the
# error or status the server answered.
js_publish_raw() {
    "$PY" - "$@" <<'PYEOF'
import json, socket, sys
port, subject, kind, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
what, _, n = kind.partition(":")
if what == "garbage":
    payload = b"\xff" * int(n)
elif what == "empty_updates":
    payload = b"\x0a\x00" * int(n)       # LocationBatch.updates = {}, n times
else:
    sys.exit("unknown kind " + kind)
sock = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
f = sock.makefile("rb")
f.readline()                                     # INFO
sock.sendall(b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\n'
             b"SUB _INBOX.tsraw.* 1\r\n")
def answer():
    while True:
        line = f.readline().rstrip(b"\r\n")
        if line == b"PING":
            sock.sendall(b"PONG\r\n")
            continue
        words = line.split()
        if not words:
            continue
        if words[0] == b"MSG":
            body = f.read(int(words[-1]) + 2)[:-2]
            reply = json.loads(body)
            if "error" in reply:
                return "refused=" + reply["error"].get("description", "?").replace(" ", "_")
            return "seq=%d" % reply["seq"]
        if words[0] == b"HMSG":
            body = f.read(int(words[-1]) + 2)[:-2]
            status = body.split(b"\r\n")[0].decode()
            return "refused=" + status.replace(" ", "_")
        if words[0] == b"-ERR":
            return "refused=" + line.decode().replace(" ", "_")
for i in range(count):
    sock.sendall(b"PUB %s _INBOX.tsraw.%d %d\r\n" % (subject.encode(), i, len(payload))
                 + payload + b"\r\n")
    print(answer(), flush=True)
PYEOF
}

# metric HTTP NAME{LABELS}: the value of one series on an instance's
# /metrics (empty when absent).
metric() {
    curl -s "http://$1/metrics" | awk -v k="$2" '$1 == k { print $2 }'
}
