#!/usr/bin/env bash
# Issue 25, items 7 and 8: the HTTP endpoint against an attacker on loopback.
#   8. Heads two parsers could frame differently (request smuggling behind a
#      proxy): each is answered once, with 400 (or 501 for a transfer coding
#      we do not implement, 413 for a body we do not take), and the
#      connection closes; the request glued behind it is never served.
#   7. Slowloris: 64 connections (http.max_connections) each trickling one
#      byte of a head every 2 s and reconnecting whenever closed, with a
#      token set. /healthz, probed throughout, answers every time within 1 s
#      (measured at the client; the times are printed), and the closes are
#      counted as evictions and head timeouts.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
PYTHON=${PYTHON:-/usr/bin/python3}
CLIENT=$top_srcdir/tests/http_hostile_client.py
TOKEN=http-hostile-token-0123456789abcdef

start_daemon http-hostile -o "http.token=\"$TOKEN\"" -o 'log.level=warn'
[ -n "$HTTP_EP" ] || fatal "the ready line names no http endpoint"
HOST=${HTTP_EP%:*} PORT=${HTTP_EP##*:}
metric() {
    curl -s --max-time 5 -H "Authorization: Bearer $TOKEN" \
        "http://$HTTP_EP/metrics" | awk -v s="$1" '$1 == s { print $2; exit }'
}

# --- 8. framing ----------------------------------------------------------
# A valid request glued behind each head: served only if the head's framing
# was misread.
SECOND=$'GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n'
refused_heads=0
frame() { # EXPECTED DESCRIPTION HEAD
    local hex got
    [ "$1" = 413 ] || refused_heads=$((refused_heads + 1))
    hex=$(printf '%s' "$3$SECOND" | od -An -v -tx1 | tr -d ' \n')
    got=$("$PYTHON" "$CLIENT" frame "$HOST" "$PORT" "$hex")
    check_eq "framing: $2: one reply, $1, connection closed" "$1 closed" "$got"
}
GET=$'GET /healthz HTTP/1.1\r\nHost: t\r\n'
frame 400 "Content-Length: abc" "${GET}Content-Length: abc"$'\r\n\r\n'
frame 400 "Content-Length: 0x1f" "${GET}Content-Length: 0x1f"$'\r\n\r\n'
frame 400 "Content-Length: 0 31" "${GET}Content-Length: 0 31"$'\r\n\r\n'
frame 400 "Content-Length: +0" "${GET}Content-Length: +0"$'\r\n\r\n'
frame 400 "Content-Length: -0" "${GET}Content-Length: -0"$'\r\n\r\n'
frame 400 "empty Content-Length" "${GET}Content-Length:"$'\r\n\r\n'
frame 400 "Content-Length 0 then 31" \
    "${GET}Content-Length: 0"$'\r\n'"Content-Length: 31"$'\r\n\r\n'
frame 400 "Content-Length: 0, 31" "${GET}Content-Length: 0, 31"$'\r\n\r\n'
frame 400 "space before the colon (Content-Length)" \
    "${GET}Content-Length : 0"$'\r\n\r\n'
frame 400 "space before the colon (Transfer-Encoding)" \
    "${GET}Transfer-Encoding : chunked"$'\r\n\r\n'
frame 400 "obs-fold continuation" \
    "${GET}X-A: b"$'\r\n'" continued: yes"$'\r\n\r\n'
frame 400 "bare LF blank line" "${GET}"$'\n'
frame 400 "bare LF ending a field" "${GET}X-A: b"$'\n\r\n'
frame 400 "bare CR inside a field" "${GET}X-A: b"$'\r'"c"$'\r\n\r\n'
frame 400 "Transfer-Encoding with Content-Length" \
    "${GET}Transfer-Encoding: chunked"$'\r\n'"Content-Length: 0"$'\r\n\r\n'
frame 400 "Transfer-Encoding not ending in chunked" \
    "${GET}Transfer-Encoding: chunked, identity"$'\r\n\r\n'
frame 400 "Transfer-Encoding in HTTP/1.0" \
    $'GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n'
frame 501 "Transfer-Encoding: gzip, chunked" \
    "${GET}Transfer-Encoding: gzip, chunked"$'\r\n\r\n'
frame 413 "a chunked body" \
    "${GET}Transfer-Encoding: chunked"$'\r\n\r\n'"0"$'\r\n\r\n'
frame 400 "two Host fields" "${GET}Host: u"$'\r\n\r\n'
frame 400 "no Host in HTTP/1.1" $'GET /healthz HTTP/1.1\r\n\r\n'
frame 400 "two spaces in the request line" $'GET  /healthz HTTP/1.1\r\nHost: t\r\n\r\n'
# The good ones stay served in step: keep-alive, Content-Length 0.
check_eq "framing: Content-Length: 0 keeps the connection" "200,200 open" \
    "$("$PYTHON" "$CLIENT" frame "$HOST" "$PORT" \
        "$(printf '%s' "${GET}Content-Length: 0"$'\r\n\r\n'"$SECOND" |
           od -An -v -tx1 | tr -d ' \n')")"
check_eq "framing: each refusal counted" "$refused_heads" \
    "$(metric tracesand_http_bad_requests_total)"

# --- 7. slowloris --------------------------------------------------------
ATTACK_S=14
"$PYTHON" "$CLIENT" slowloris "$HOST" "$PORT" 64 "$ATTACK_S" 2 \
    "$TMPD/slow.ready" >"$TMPD/slow.out" 2>"$TMPD/slow.err" &
SLOW_PID=$!
background_pids+=("$SLOW_PID")
for _ in $(seq 1 100); do
    [ -e "$TMPD/slow.ready" ] && break
    sleep 0.05
done
[ -e "$TMPD/slow.ready" ] || fatal "the slowloris client did not connect"
# Every slot is taken now; probe while the attack goes on.
sleep 1.5
: >"$TMPD/probes.txt"
end=$(( $(date +%s) + ATTACK_S - 3 ))
while [ "$(date +%s)" -lt "$end" ]; do
    curl -s --max-time 5 -o /dev/null -w '%{http_code} %{time_total}\n' \
        "http://$HTTP_EP/healthz" >>"$TMPD/probes.txt"
    sleep 0.5
done
wait_for_pid "$SLOW_PID" 30 || kill -KILL "$SLOW_PID"
forget_pid "$SLOW_PID"
probes=$(wc -l <"$TMPD/probes.txt")
probes_bad=$(awk '$1 != 200' "$TMPD/probes.txt" | wc -l)
probes_slow=$(awk '$2 > 1.0' "$TMPD/probes.txt" | wc -l)
note "slowloris: $(cat "$TMPD/slow.out"); probe times (s):" \
    $(awk '{ print $1 ":" $2 }' "$TMPD/probes.txt")
check_ge "slowloris: /healthz probed during the attack" 10 "$probes"
check_eq "slowloris: every probe answered 200" 0 "$probes_bad"
check_eq "slowloris: every probe answered within 1 s" 0 "$probes_slow"
check_ge "slowloris: attackers evicted for the probes (counted)" 1 \
    "$(metric tracesand_http_evictions_total)"
check_ge "slowloris: unfinished heads timed out (counted)" 1 \
    "$(metric tracesand_http_head_timeouts_total)"
stop_daemon http-hostile
finish
