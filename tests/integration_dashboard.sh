#!/usr/bin/env bash
# The dashboard and the feed on the HTTP endpoint: bearer token (401
# without it, 200 with it, 401 with a wrong one; the page shell stays
# public), token files the daemon refuses, the CORS allow-list and its
# preflights, path traversal, /feed as Server-Sent Events carrying exactly
# the published outcomes (one event per sanitized point and rejection,
# compared with what `tracesan tail` received), its filters and stream
# cap, a client that stops reading (dropped and cut off, both counted),
# and hostile requests that must neither crash the daemon nor stall its
# data path.
# The ZeroMQ driver; /feed and /dashboard.json through the JetStream driver
# are checked by integration_jetstream_parity.sh (access control is the
# endpoint's, the same for every driver).
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || fatal "$PYTHON is not installed (scripts/setup.sh installs python3)"
FEED_CLIENT=$top_srcdir/tests/feed_client.py
SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
ROWS=$(data_rows "$SAMPLE")
LEAFLET_JS=/usr/share/javascript/leaflet/leaflet.js

TOKEN=dashboard-test-token-0123456789abcdef
TOKEN_FILE=$TMPD/http.token
printf '%s\n' "$TOKEN" >"$TOKEN_FILE"
chmod 600 "$TOKEN_FILE"
ALLOWED=http://allowed.example:8080
AUTH=(-H "Authorization: Bearer $TOKEN")

status_of() { curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$@"; }
headers_of() { curl -s --max-time 5 -o /dev/null -D - "$@" | tr -d '\r'; }
url() { printf 'http://%s%s' "$HTTP_EP" "$1"; }

# metric NAME: the value of one series on /metrics (read with the token).
metric() {
    curl -s --max-time 5 "${AUTH[@]}" "$(url /metrics)" |
        awk -v s="$1" '$1 == s { print $2; exit }'
}

# wait_metric NAME VALUE [ge]: until the series reads VALUE (or at least
# VALUE), 10 s at most.
wait_metric() {
    local tries=100 got=""
    while [ $tries -gt 0 ]; do
        got=$(metric "$1")
        [ "$got" = "$2" ] && return 0
        [ "${3:-}" = ge ] && [ "${got:-0}" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.1
        tries=$((tries - 1))
    done
    note "$1 is '$got', expected ${3:-}${3:+ }'$2'"
    return 1
}

# events FILE NAME: complete events of that name in an SSE capture.
events() { grep -c "^event: $2\$" "$1" 2>/dev/null || true; }

# wait_events FILE NAME COUNT: until the capture holds COUNT such events.
wait_events() {
    local tries=200
    while [ "$(events "$1" "$2")" -lt "$3" ] && [ $tries -gt 0 ]; do
        sleep 0.1
        tries=$((tries - 1))
    done
    [ "$(events "$1" "$2")" -ge "$3" ]
}

# stream NAME QUERY [curl options]: a /feed client in the background,
# writing to $TMPD/NAME.sse. Sets STREAM_PID.
stream() {
    local name=$1 query=$2
    shift 2
    curl -sN --max-time 60 "$@" "$(url "/feed$query")" >"$TMPD/$name.sse" \
        2>/dev/null &
    STREAM_PID=$!
    background_pids+=("$STREAM_PID")
}

stop_stream() {
    kill "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    forget_pid "$1"
}

# --- token files the daemon refuses --------------------------------------
refuses() {
    local what=$1 file=$2 rc=0
    "$TRACESAND" --check-config "$SHIPPED_CONF" \
        -o "http.token_file=\"$file\"" >/dev/null 2>"$TMPD/refused.log" || rc=$?
    check_eq "token file $what: configuration refused" 1 "$rc"
    check "token file $what: the error names http.token_file" \
        grep -q "http.token_file" "$TMPD/refused.log"
    cat "$TMPD/refused.log" >>"$TMPD/refused-all.log"
}
refuses "missing" "$TMPD/no-such-file"
: >"$TMPD/empty.token"; chmod 600 "$TMPD/empty.token"
refuses "empty" "$TMPD/empty.token"
printf '%s\n' "$TOKEN" >"$TMPD/shared.token"; chmod 644 "$TMPD/shared.token"
refuses "readable by others" "$TMPD/shared.token"
printf 'short\n' >"$TMPD/short.token"; chmod 600 "$TMPD/short.token"
refuses "with a short token" "$TMPD/short.token"
check "token file errors never quote the token" \
    bash -c "! grep -q -- '$TOKEN' '$TMPD/refused-all.log'"
rc=0
"$TRACESAND" --check-config "$SHIPPED_CONF" -o "http.token=$TOKEN" \
    -o "http.token_file=\"$TOKEN_FILE\"" >/dev/null 2>"$TMPD/both.log" || rc=$?
check_eq "http.token and http.token_file together are refused" 1 "$rc"
rc=0
"$TRACESAND" --check-config "$SHIPPED_CONF" \
    -o 'http.cors_origins="https://example.org/"' >/dev/null 2>&1 || rc=$?
check_eq "a CORS origin with a path is refused" 1 "$rc"

# --- run 1: token, CORS, dashboard files, fast streams, cap, hostility ---
start_daemon dash -o "http.token_file=\"$TOKEN_FILE\"" \
    -o "http.cors_origins=\"$ALLOWED\"" -o http.feed_max_streams=3 \
    -o "http.dashboard_dir=\"$top_srcdir/www\""
test -n "$HTTP_EP" || fatal "the ready line names no HTTP endpoint"

# Auth: data needs the token, the page shell and /healthz do not.
for path in /feed /dashboard.json /metrics /density/geoind; do
    check_eq "auth: $path without the token is 401" 401 "$(status_of "$(url "$path")")"
    check_eq "auth: $path with a wrong token is 401" 401 \
        "$(status_of -H "Authorization: Bearer wrong-$TOKEN" "$(url "$path")")"
done
check_eq "auth: /dashboard.json with the token is 200" 200 \
    "$(status_of "${AUTH[@]}" "$(url /dashboard.json)")"
check_eq "auth: /metrics with the token is 200" 200 \
    "$(status_of "${AUTH[@]}" "$(url /metrics)")"
check_eq "auth: /density/geoind with the token passes (404: no estimate)" 404 \
    "$(status_of "${AUTH[@]}" "$(url /density/geoind)")"
check_eq "auth: the scheme is case-insensitive" 200 \
    "$(status_of -H "Authorization: bearer $TOKEN" "$(url /dashboard.json)")"
check_eq "auth: /healthz stays open" 200 "$(status_of "$(url /healthz)")"
check "auth: 401 says WWW-Authenticate: Bearer" \
    grep -q '^WWW-Authenticate: Bearer realm="tracesand"' \
    <(headers_of "$(url /feed)")
check "auth: a wrong token is invalid_token" grep -q 'error="invalid_token"' \
    <(headers_of -H "Authorization: Bearer wrong-$TOKEN" "$(url /feed)")
check_eq "auth: two Authorization headers are a bad request" 400 \
    "$(status_of "${AUTH[@]}" -H "Authorization: Bearer x" "$(url /dashboard.json)")"
check_ge "auth: refusals are counted" 8 "$(metric tracesand_http_unauthorized_total)"
curl -s --max-time 5 "${AUTH[@]}" "$(url /dashboard.json)" >"$TMPD/config.json"
check "dashboard.json: says the token is required and the feed is on" \
    "$PYTHON" -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(not (c["token_required"] and c["feed"] and "geoind" in c["profiles"] and c["tile_url"] == ""))' "$TMPD/config.json"

# The page shell: public, with a restrictive Content-Security-Policy.
check_eq "page: GET / without the token is 200" 200 "$(status_of "$(url /)")"
headers_of "$(url /)" >"$TMPD/page.headers"
check "page: served as HTML" grep -q '^Content-Type: text/html' "$TMPD/page.headers"
check "page: scripts from this origin only" \
    grep -q "^Content-Security-Policy: default-src 'none'; script-src 'self'" "$TMPD/page.headers"
check "page: has the points-drawn element" \
    grep -q 'id="points-drawn"' <(curl -s --max-time 5 "$(url /)")
check_eq "page: dashboard.js" 200 "$(status_of "$(url /dashboard.js)")"
check_eq "page: dashboard.css" 200 "$(status_of "$(url /dashboard.css)")"
if [ -r "$LEAFLET_JS" ]; then
    check_eq "leaflet: leaflet.js served from libjs-leaflet" 200 \
        "$(status_of "$(url /leaflet/leaflet.js)")"
    check "leaflet: byte for byte the installed file" \
        cmp -s "$LEAFLET_JS" <(curl -s --max-time 5 "$(url /leaflet/leaflet.js)")
else
    note "libjs-leaflet is not installed: leaflet checks skipped"
fi

# Path traversal and names outside the allow-lists: 404, nothing leaks.
for path in /leaflet/../../../../etc/passwd /leaflet/%2e%2e/%2e%2e/etc/passwd \
            /..%2f..%2fetc%2fpasswd /leaflet/images/../../../../../etc/passwd \
            /dashboard.js/../../etc/passwd /index.html /leaflet/ \
            /leaflet/leaflet.js.map /www/index.html '/leaflet//etc/passwd'; do
    code=$(curl -s --max-time 5 --path-as-is -o "$TMPD/traversal.body" \
           -w '%{http_code}' "$(url "$path")")
    check_eq "traversal: $path is 404" 404 "$code"
    if grep -q 'root:' "$TMPD/traversal.body"; then
        fail "traversal: $path leaked /etc/passwd"
    fi
done

# CORS: only listed origins are reflected; preflights answered for them.
headers_of "${AUTH[@]}" -H "Origin: $ALLOWED" "$(url /dashboard.json)" >"$TMPD/cors.ok"
check "cors: a listed origin is reflected" \
    grep -qx "Access-Control-Allow-Origin: $ALLOWED" "$TMPD/cors.ok"
headers_of "${AUTH[@]}" -H "Origin: http://evil.example" "$(url /dashboard.json)" >"$TMPD/cors.evil"
check "cors: another origin is not" bash -c "! grep -qi '^Access-Control-Allow-Origin' '$TMPD/cors.evil'"
check "cors: replies vary by Origin" grep -qx 'Vary: Origin' "$TMPD/cors.evil"
check "cors: 401 replies reflect a listed origin too (the page can read them)" \
    grep -qx "Access-Control-Allow-Origin: $ALLOWED" \
    <(headers_of -H "Origin: $ALLOWED" "$(url /feed)")
preflight() {
    curl -s --max-time 5 -o /dev/null -D - -X OPTIONS -H "Origin: $1" \
        -H 'Access-Control-Request-Method: GET' \
        -H 'Access-Control-Request-Headers: authorization' "$(url /feed)" | tr -d '\r'
}
preflight "$ALLOWED" >"$TMPD/preflight.ok"
check "cors: preflight from a listed origin is 204" grep -q '^HTTP/1.1 204' "$TMPD/preflight.ok"
check "cors: preflight allows the Authorization header" \
    grep -q '^Access-Control-Allow-Headers: Authorization' "$TMPD/preflight.ok"
check "cors: preflight reflects the origin" \
    grep -qx "Access-Control-Allow-Origin: $ALLOWED" "$TMPD/preflight.ok"
check "cors: preflight from another origin is 403" \
    grep -q '^HTTP/1.1 403' <(preflight http://evil.example)
check_eq "cors: refused preflights are counted" 1 "$(metric tracesand_http_cors_denied_total)"

# The feed: bad requests first (they must not take a slot).
check_eq "feed: HEAD is 405" 405 "$(status_of -I "${AUTH[@]}" "$(url /feed)")"
check_eq "feed: unknown parameter is 400" 400 "$(status_of "${AUTH[@]}" "$(url '/feed?since=0')")"
check_eq "feed: bad escape is 400" 400 "$(status_of "${AUTH[@]}" "$(url '/feed?topic=%zz')")"
check_eq "feed: nine topic filters are 400" 400 \
    "$(status_of "${AUTH[@]}" "$(url '/feed?topic=a&topic=b&topic=c&topic=d&topic=e&topic=f&topic=g&topic=h&topic=i')")"

start_tail dash "$ROWS"
stream all "" "${AUTH[@]}"
ALL_PID=$STREAM_PID
stream rejections "?topic=rejected" "${AUTH[@]}"
REJ_PID=$STREAM_PID
stream nobody "?profile=no-such-profile" "${AUTH[@]}"
NOBODY_PID=$STREAM_PID
check "feed: three streams open" wait_metric tracesand_feed_streams 3
check_eq "feed: a fourth stream is refused with 503 (http.feed_max_streams = 3)" 503 \
    "$(status_of "${AUTH[@]}" "$(url /feed)")"
check_eq "feed: the refusal is counted" 1 \
    "$(metric 'tracesand_feed_streams_total{result="refused"}')"

replay "$SAMPLE"
wait_tail dash 60
SANITIZED=$(data_rows "$TAIL_OUT")
REJECTED=$(data_rows "$TAIL_REJ")
check_eq "sample: every update yields one output" "$ROWS" $((SANITIZED + REJECTED))
check "feed: the fast client received every event" \
    wait_events "$TMPD/all.sse" sanitized "$SANITIZED"
wait_events "$TMPD/all.sse" rejected "$REJECTED" || true
check_eq "feed: one sanitized event per published point" "$SANITIZED" \
    "$(events "$TMPD/all.sse" sanitized)"
check_eq "feed: ... which is the daemon's sanitized counter" \
    "$(metric tracesand_sanitized_total)" "$(events "$TMPD/all.sse" sanitized)"
check_eq "feed: one rejected event per rejection" "$REJECTED" \
    "$(events "$TMPD/all.sse" rejected)"
check "feed: the events are exactly the published outcomes, wire field names, no input point" \
    "$PYTHON" "$FEED_CLIENT" compare "$TMPD/all.sse" "$TAIL_OUT" "$TAIL_REJ" "$SAMPLE"
wait_events "$TMPD/rejections.sse" rejected "$REJECTED" || true
check_eq "feed: ?topic=rejected gets the rejections" "$REJECTED" \
    "$(events "$TMPD/rejections.sse" rejected)"
check_eq "feed: ... and no sanitized point" 0 "$(events "$TMPD/rejections.sse" sanitized)"
check_eq "feed: ?profile=no-such-profile gets nothing" 0 \
    "$(grep -c '^event:' "$TMPD/nobody.sse")"
check_eq "feed: nothing dropped for fast clients" 0 "$(metric tracesand_feed_events_dropped_total)"
stop_stream "$ALL_PID"
stop_stream "$REJ_PID"
stop_stream "$NOBODY_PID"
check "feed: closed streams free their slots" wait_metric tracesand_feed_streams 0
check "feed: SSE content type" grep -q '^Content-Type: text/event-stream' \
    <(curl -s --max-time 1 -N -D - -o /dev/null "${AUTH[@]}" "$(url /feed)" | tr -d '\r'; true)

# Hostility: a crowd of streams that never read, oversized and malformed
# heads, bytes after the request; the daemon answers, then carries on.
host=${HTTP_EP%:*} port=${HTTP_EP##*:}
crowd=()
for i in $(seq 1 20); do
    "$PYTHON" "$FEED_CLIENT" slow "$host" "$port" /feed 30 "$TOKEN" \
        >/dev/null 2>&1 &
    crowd+=($!)
    background_pids+=($!)
done
big=$(head -c 20000 /dev/zero | tr '\0' a)
check_eq "hostile: a 20 kB header is 431" 431 \
    "$(status_of -H "X-Big: $big" "$(url /healthz)")"
check_eq "hostile: a 2000-character token is 401" 401 \
    "$(status_of -H "Authorization: Bearer ${big:0:2000}" "$(url /dashboard.json)")"
garbage_reply() {
    exec 3<>"/dev/tcp/$host/$port" || return 1
    printf '%s' "$1" >&3
    timeout 5 head -c 12 <&3
    exec 3<&-
}
check_eq "hostile: a garbage request line is 400" "HTTP/1.1 400" \
    "$(garbage_reply $'GARBAGE\r\n\r\n')"
check_eq "hostile: a header without a colon is 400" "HTTP/1.1 400" \
    "$(garbage_reply $'GET / HTTP/1.1\r\nno colon here\r\n\r\n')"
check_eq "hostile: a request with a body is 413" "HTTP/1.1 413" \
    "$(garbage_reply $'GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello')"
check_eq "hostile: POST is 405" "HTTP/1.1 405" \
    "$(garbage_reply $'POST /feed HTTP/1.1\r\nHost: t\r\n\r\n')"
start_tail dash2 "$ROWS"
replay "$SAMPLE"
wait_tail dash2 60
check_eq "hostile: the data path carried on (every outcome published)" "$ROWS" \
    $(( $(data_rows "$TAIL_OUT") + $(data_rows "$TAIL_REJ") ))
check_eq "hostile: /healthz still answers" 200 "$(status_of "$(url /healthz)")"
# 3 of the 20 got a stream; the other 17 (and the fourth stream above)
# were refused.
check "hostile: the crowd met the stream cap (refusals counted)" \
    wait_metric 'tracesand_feed_streams_total{result="refused"}' 18 ge
for pid in "${crowd[@]}"; do
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    forget_pid "$pid"
done
stop_daemon dash
check "the token never reaches the log" bash -c "! grep -q -- '$TOKEN' '$DAEMON_LOG'"
check "no input coordinate in the daemon log" no_coordinates_in "$SAMPLE" "$DAEMON_LOG"

# --- run 2: a client that stops reading -----------------------------------
# A 1 KiB queue and a 1 s stall timeout. The sample, replayed over about
# 3 s, soon fills the client's socket buffers; from then on its events
# wait in the daemon, the queue drops the oldest, and a second later the
# stream is cut off, while the data path goes on.
start_daemon slow -o http.feed_buffer_kb=1 -o http.feed_stall_timeout_s=1
AUTH=()
"$PYTHON" "$FEED_CLIENT" slow "${HTTP_EP%:*}" "${HTTP_EP##*:}" /feed 4 \
    >"$TMPD/slow.out" 2>&1 &
SLOW_PID=$!
background_pids+=("$SLOW_PID")
check "slow: its stream is open" wait_metric tracesand_feed_streams 1
start_tail slow "$ROWS"
replay "$SAMPLE" --rate 600 --batch 20
wait_tail slow 60
check "slow: the client is cut off" wait_metric tracesand_feed_cutoffs_total 1
check "slow: ... and its slot freed" wait_metric tracesand_feed_streams 0
dropped=$(metric tracesand_feed_events_dropped_total)
check_ge "slow: dropped events are counted" 1 "$dropped"
sent=$(metric tracesand_feed_events_sent_total)
check "slow: it was handed fewer events than were published" test "$sent" -lt "$ROWS"
wait_for_pid "$SLOW_PID" 20 || kill "$SLOW_PID"
check "slow: the client saw the server close the stream" grep -q '^closed after' "$TMPD/slow.out"
check "slow: the cut-off is logged" grep -q 'feed: cut off a stream' "$DAEMON_LOG"
stop_daemon slow

# --- run 3: the feed's rate limit -----------------------------------------
# At most 200 events a second (a 200-event burst allowance): the sample's
# burst is mostly skipped before encoding, every event is either sent or
# skipped, and the stream is told how many it missed.
start_daemon rate -o http.feed_max_rate=200
stream rate ""
RATE_PID=$STREAM_PID
check "rate: its stream is open" wait_metric tracesand_feed_streams 1
start_tail rate "$ROWS"
replay "$SAMPLE"
wait_tail rate 60
sleep 0.5
sent=$(metric tracesand_feed_events_sent_total)
skipped=$(metric tracesand_feed_events_skipped_total)
check_eq "rate: every outcome was either sent or skipped" "$ROWS" $((sent + skipped))
check "rate: the burst beyond the allowance was skipped ($skipped)" \
    test "$skipped" -ge $((ROWS - 400))
check_ge "rate: the allowance was sent" 150 "$sent"
wait_events "$TMPD/rate.sse" sanitized 1 || true
stop_stream "$RATE_PID"
check "rate: the stream was told it missed events" \
    grep -q '^event: dropped' "$TMPD/rate.sse"
stop_daemon rate

finish
