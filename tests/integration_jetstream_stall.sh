#!/usr/bin/env bash
# A consumer that stops delivering what its partition's subject holds is
# recreated (docs/scale-out.md, "No input can wedge a partition"). Here
# one is made so: partition 3's consumer is replaced by one with an
# hour's ack_wait, and another client takes the delivery of the next
# input stored on tracesan.in.3 and never acknowledges it, as a delivery
# lost on its way would be. The daemon sees the consumer exists and its
# fetches come back empty; only the partition's backlog says something
# is wrong. Within
# AckWait (60 s) + lease_ttl_s of the last delivery it must recreate the
# consumer, and the stored input must get its output.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

TTL=10
BOUND_S=$((60 + TTL + 60))   # the guard's wait, and room for 2 loaded cores

start_nats_single
PORT=${NATS_URL##*:}
start_instance a -o nats.lease_ttl_s=$TTL
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
wait_owned "$A_HTTP" 30
check_eq "a owns all 16 partitions" 16 "$OWNED"

# Users of partition 3: one for a warm-up input, one for the stranded one.
"$PY" - >"$TMPD/users.txt" <<'PYEOF'
def part(u):
    h = 2166136261
    for b in u.encode():
        h = ((h ^ b) * 16777619) & 0xffffffff
    return h % 16
print(" ".join([u for u in ("u%d" % i for i in range(1000)) if part(u) == 3][:2]))
PYEOF
read -r warm stranded <"$TMPD/users.txt"
printf 'user,ts,lat,lon\n%s,1700000000,40.7,-74.0\n' "$warm" >"$TMPD/warm.csv"
printf 'user,ts,lat,lon\n%s,1700000000,40.7,-74.0\n' "$stranded" >"$TMPD/stranded.csv"

# A delivery just now, so that the daemon does not look at its consumer
# (it does after a quiet ttl) while the steps below replace it.
"$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 "$TMPD/warm.csv" \
    2>"$TMPD/replay.log" || fatal "replay failed"
wait_distinct_outputs 1 30 || fatal "the warm-up input got no output"

# The replacement, and a client that takes the next delivery and never
# acknowledges it: with an hour's ack_wait the consumer waits an hour
# before it delivers that input again (a work queue takes only
# deliver_policy "all", so this is how a consumer can strand one).
js_request "$PORT" '$JS.API.CONSUMER.DELETE.TRACESAN_IN.tracesan-p3' '' \
    >"$TMPD/rogue.txt"
js_request "$PORT" '$JS.API.CONSUMER.DURABLE.CREATE.TRACESAN_IN.tracesan-p3' \
    '{"stream_name":"TRACESAN_IN","config":{"durable_name":"tracesan-p3","filter_subject":"tracesan.in.3","ack_policy":"explicit","ack_wait":3600000000000}}' \
    >>"$TMPD/rogue.txt"
# The pull waits (20 s at most) for the next input; libnats' fetches are
# NoWait, so the waiting request is the one served.
"$PY" - "$PORT" >>"$TMPD/rogue.txt" <<'PYEOF' &
import json, socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
f = sock.makefile("rb")
f.readline()
body = json.dumps({"batch": 1, "expires": 20 * 10**9}).encode()
sock.sendall(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _INBOX.c 1\r\n'
             b"PUB $JS.API.CONSUMER.MSG.NEXT.TRACESAN_IN.tracesan-p3 _INBOX.c %d\r\n"
             % len(body) + body + b"\r\n")
print("pulling", flush=True)
while True:
    line = f.readline().rstrip(b"\r\n")
    if line == b"PING":
        sock.sendall(b"PONG\r\n")
    elif line.split()[:1] in ([b"MSG"], [b"HMSG"]):
        # a delivery has headers (HMSG); a 408 status without a message
        # would mean nothing came
        f.read(int(line.split()[-1]) + 2)
        print("taken" if b"408" not in line and b"$JS.ACK" in line else
              "no delivery: %s" % line.decode())
        break
PYEOF
ROGUE=$!
for _ in $(seq 100); do grep -q pulling "$TMPD/rogue.txt" && break; sleep 0.1; done
"$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 "$TMPD/stranded.csv" \
    2>>"$TMPD/replay.log" || fatal "replay failed"
wait "$ROGUE"
mark_ms STRANDED_MS
check "partition 3's consumer was deleted" grep -q '"success":true' "$TMPD/rogue.txt"
check "... and made again with an hour's ack_wait" \
    grep -q '"ack_wait":3600000000000' "$TMPD/rogue.txt"
check "another client took the stranded input's delivery" \
    grep -qx taken "$TMPD/rogue.txt"
check_eq "the stranded input is stored on tracesan.in.3" 1 \
    "$(stream_msgs TRACESAN_IN)"

if wait_distinct_outputs 2 $BOUND_S; then
    mark_ms DONE_MS
    pass "the stranded input got its output ($(( (DONE_MS - STRANDED_MS) / 1000 )) s later)"
else
    fail "the stranded input got no output within $BOUND_S s"
    show_file "$A_LOG" 20
fi
check "the daemon said it recreated the consumer" \
    grep -q 'partition 3: no delivery for .* with 1 stored inputs waiting' "$A_LOG"
check_eq "TRACESAN_IN keeps nothing" 0 "$(stream_msgs TRACESAN_IN)"
DAEMON_PID=$A_PID DAEMON_LOG=$A_LOG stop_daemon a
finish
