#!/usr/bin/env bash
# Operations: /metrics agrees with the daemon's own summary after a replay,
# /healthz answers, SIGHUP applies a new profile parameter without losing
# users' spend, a broken file on SIGHUP is refused while the daemon keeps
# running, and sd_notify sends READY=1 ... STOPPING=1 (plus WATCHDOG=1 and
# RELOADING=1) to $NOTIFY_SOCKET.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

NOTIFY_LISTEN=${NOTIFY_LISTEN:-$top_builddir/tests/notify_listen}
require_programs "$NOTIFY_LISTEN"
command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"

FEED=$TEST_DATA/feed.csv
FEED_ROWS=$(data_rows "$FEED")
# Shipped geoind profile: window budget l / r = ln 10 / 100 m.
WINDOW_BUDGET=0.02302585092994046

CONF=$TMPD/ops.conf
write_conf() {
    sed "s/^\([[:space:]]*points_per_window = \)30;/\1$1;/" "$SHIPPED_CONF" >"$CONF"
    grep -q "points_per_window = $1;" "$CONF" || fatal "could not set points_per_window in $CONF"
}

http_get() { curl -s --max-time 5 "http://$HTTP_EP$1"; }
http_status() { curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://$HTTP_EP$1"; }

# metric NAME [FILE]: value of the sample line "NAME value" (exact series).
metric() {
    local series=$1 file=${2:-}
    if [ -n "$file" ]; then
        awk -v s="$series" '$1 == s { print $2; exit }' "$file"
    else
        http_get /metrics | awk -v s="$series" '$1 == s { print $2; exit }'
    fi
}

# wait_updates N: until /metrics counts N updates (the daemon has read them).
wait_updates() {
    local want=$1 tries=$(( TS_START_TIMEOUT * 10 )) got=""
    while [ $tries -gt 0 ]; do
        got=$(metric tracesand_updates_total)
        [ "$got" = "$want" ] && return 0
        sleep 0.1
        tries=$((tries - 1))
    done
    fail "daemon did not count $want updates (metrics say '$got')"
    return 1
}

wait_for_line() {
    local line=$1 tries=$(( TS_START_TIMEOUT * 10 ))
    while [ $tries -gt 0 ]; do
        grep -q "^$line" "$TMPD/notify.txt" && return 0
        sleep 0.1
        tries=$((tries - 1))
    done
    return 1
}

# --- run 1: metrics, health, reload ------------------------------------------
write_conf 3
# With a durable store, so its group commits show up in the metrics.
start_daemon ops -c "$CONF" -o "state.dir=$TMPD/state"
check "ready line names the HTTP endpoint (http.listen port 0)" test -n "$HTTP_EP"
check_eq "/healthz status" 200 "$(http_status /healthz)"
check_eq "/healthz body" ok "$(http_get /healthz)"
check_eq "unknown path is 404" 404 "$(http_status /nope)"
# Issue 10, item 15: a HEAD reply carries the GET's Content-Length and no
# body, so a keep-alive client can send HEAD, HEAD and GET on one
# connection and read three responses, the last with the body.
keepalive_transcript() {
    local host=${HTTP_EP%:*} port=${HTTP_EP##*:}
    exec 3<>"/dev/tcp/$host/$port" || return 1
    printf 'HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nHEAD /nope HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' >&3
    timeout 5 cat <&3 | tr -d '\r'
    exec 3<&-
}
keepalive_transcript >"$TMPD/keepalive.txt"
check_eq "keep-alive: three responses" 3 "$(grep -c '^HTTP/1.1 ' "$TMPD/keepalive.txt")"
check_eq "keep-alive: HEAD /healthz has the GET's Content-Length" 3 \
    "$(awk '/^HTTP\/1.1 /{n++} n==1 && /^Content-Length:/{print $2}' "$TMPD/keepalive.txt")"
check_eq "keep-alive: HEAD /nope is a 404 with a length" 10 \
    "$(awk '/^HTTP\/1.1 /{n++} n==2 && /^Content-Length:/{print $2}' "$TMPD/keepalive.txt")"
check_eq "keep-alive: the only body is the GET's" "ok" \
    "$(awk '/^HTTP\/1.1 /{n++; head=1; next} head && /^$/{head=0; next} !head{print n": "$0}' "$TMPD/keepalive.txt" | sed 's/^3: //')"
# A taken http.listen address is a startup error, not a silent omission.
rc=0
"$TRACESAND" -c "$CONF" -o 'input.endpoint=tcp://127.0.0.1:*' \
    -o 'output.endpoint=tcp://127.0.0.1:*' -o "http.listen=$HTTP_EP" \
    -o 'state.dir=""' >/dev/null 2>"$TMPD/busy.log" </dev/null || rc=$?
check_eq "busy http.listen: daemon refuses to start" 1 "$rc"
check "busy http.listen: error names the address" grep -q "http.listen '$HTTP_EP': cannot bind" "$TMPD/busy.log"

printf 'user,ts,lat,lon\nops-a,1700000000,40.7111111,-74.0111111\nops-a,1700000100,40.7122222,-74.0122222\n' >"$TMPD/before.csv"
printf 'user,ts,lat,lon\nops-a,1700000200,40.7133333,-74.0133333\nops-a,1700000300,40.7144444,-74.0144444\nops-a,1700000400,40.7155555,-74.0155555\nops-b,1700000000,40.7166666,-74.0166666\n' >"$TMPD/after.csv"
printf 'user,ts,lat,lon\nops-c,1700000000,40.7177777,-74.0177777\n' >"$TMPD/last.csv"
TOTAL=$((FEED_ROWS + 2 + 4 + 1))

start_tail ops "$TOTAL"
replay "$FEED"
replay "$TMPD/before.csv"
wait_updates $((FEED_ROWS + 2))

# Reload with twice the points per window: each point costs half as much;
# ops-a keeps the 2/3 of its budget already spent.
write_conf 6
kill -HUP "$DAEMON_PID"
check "SIGHUP: reload completes" wait_log "reload complete"
check "SIGHUP: the reloaded profile is logged" \
    wait_log "reload: profile 'geoind' parameters reloaded"
replay "$TMPD/after.csv"
wait_updates $((FEED_ROWS + 6))

# A broken file: refused with FILE:LINE, the daemon keeps serving.
printf 'this is not libconfig\n' >>"$CONF"
kill -HUP "$DAEMON_PID"
check "broken SIGHUP: reload refused and logged" wait_log "reload refused"
check "broken SIGHUP: error names the file and line" \
    grep -qE "reload refused.*$(basename "$CONF"):[0-9]+: " "$DAEMON_LOG"
check "broken SIGHUP: daemon still running" is_running "$DAEMON_PID"
check_eq "broken SIGHUP: /healthz still 200" 200 "$(http_status /healthz)"
check_eq "metrics: one reload applied" 1 "$(metric tracesand_config_reloads_total)"
check_eq "metrics: one reload refused" 1 "$(metric tracesand_config_reload_failures_total)"
replay "$TMPD/last.csv"
wait_tail ops 60
wait_updates "$TOTAL"

http_get /metrics >"$TMPD/metrics.txt"
stop_daemon ops

check_eq "metrics vs summary: updates" "$(summary_value updates)" \
    "$(metric tracesand_updates_total "$TMPD/metrics.txt")"
check_eq "metrics vs summary: sanitized" "$(summary_value sanitized)" \
    "$(metric tracesand_sanitized_total "$TMPD/metrics.txt")"
check_eq "metrics vs summary: repeated" "$(summary_value repeated)" \
    "$(metric tracesand_repeated_total "$TMPD/metrics.txt")"
check_eq "metrics vs summary: users" "$(summary_value users)" \
    "$(metric tracesand_users "$TMPD/metrics.txt")"
check_eq "metrics vs summary: rejected.budget_exhausted" \
    "$(summary_value rejected.budget_exhausted)" \
    "$(metric 'tracesand_rejected_total{reason="budget_exhausted"}' "$TMPD/metrics.txt")"
check_eq "metrics vs summary: rejected (sum over reasons)" "$(summary_value rejected)" \
    "$(awk '$1 ~ /^tracesand_rejected_total\{/ { n += $2 } END { print n + 0 }' "$TMPD/metrics.txt")"
check_eq "metrics: updates = feed + 7" "$TOTAL" "$(metric tracesand_updates_total "$TMPD/metrics.txt")"
check_eq "metrics: messages published = one per update" "$TOTAL" \
    "$(metric tracesand_messages_published_total "$TMPD/metrics.txt")"
check_eq "metrics: latency histogram counted every update of profile geoind" \
    "$(( $(summary_value updates) ))" \
    "$(metric 'tracesand_update_duration_seconds_count{profile="geoind"}' "$TMPD/metrics.txt")"
check_ge "metrics: store group commits observed" 1 \
    "$(metric tracesand_store_commit_duration_seconds_count "$TMPD/metrics.txt")"
check_ge "metrics: store commit batch sizes observed" 1 \
    "$(metric tracesand_store_commit_batch_size_count "$TMPD/metrics.txt")"
check_ge "metrics: event-loop lag observed" 1 \
    "$(metric tracesand_event_loop_lag_seconds_count "$TMPD/metrics.txt")"
check "metrics: no user id appears" \
    sh -c "! grep -q 'ops-a\|ops-b\|heavy' '$TMPD/metrics.txt'"

# ops-a: 2 points at B/3 before the reload, then B/6 each; spend carries over.
ledger_after_reload() {
    awk -F, -v B="$WINDOW_BUDGET" '
        function near(a, b) { d = a - b; if (d < 0) d = -d; return d <= 1e-7 * B }
        $1 == "ops-a" { n++; ep[n] = $6; sp[n] = $7 }
        $1 == "ops-b" { bep = $6; bsp = $7 }
        END {
            if (n != 4) { print "# ops-a sanitized rows: " n; exit 1 }
            if (!near(ep[1], B / 3) || !near(ep[2], B / 3)) { print "# before: " ep[1] " " ep[2]; bad++ }
            if (!near(ep[3], B / 6) || !near(ep[4], B / 6)) { print "# after: " ep[3] " " ep[4]; bad++ }
            if (!near(sp[3], 5 * B / 6)) { print "# spend not carried: " sp[3]; bad++ }
            if (!near(sp[4], B)) { print "# final spend " sp[4]; bad++ }
            if (!near(bep, B / 6) || !near(bsp, B / 6)) { print "# new user: " bep " " bsp; bad++ }
            exit bad > 0
        }' "$TAIL_OUT"
}
check "SIGHUP: new points_per_window applies, ops-a keeps its spend" ledger_after_reload
check_eq "SIGHUP: ops-a exhausted on its 5th point" 1 \
    "$(awk -F, '$1 == "ops-a" && $3 == "budget_exhausted"' "$TAIL_REJ" | wc -l)"
check_eq "after refused reload: ops-c sanitized" 1 \
    "$(awk -F, '$1 == "ops-c"' "$TAIL_OUT" | wc -l)"

# --- run 2: sd_notify ----------------------------------------------------------
SOCK=$TMPD/notify.sock
"$NOTIFY_LISTEN" "$SOCK" 60 >"$TMPD/notify.txt" 2>"$TMPD/notify.err" &
LISTEN_PID=$!
background_pids+=("$LISTEN_PID")
tries=100
while [ ! -S "$SOCK" ] && [ $tries -gt 0 ]; do sleep 0.05; tries=$((tries - 1)); done
[ -S "$SOCK" ] || fatal "notify_listen did not bind $SOCK"

write_conf 30
NOTIFY_SOCKET=$SOCK WATCHDOG_USEC=400000 start_daemon notify -c "$CONF"
check "notify: READY=1 after the ready line" wait_for_line "READY=1"
sleep 0.5
# Two restart-only keys change: the reload names exactly those (the table
# of settings drives the comparison; output.type and state.map_size_mb were
# missing from the hand-kept list it replaced).
sed -i -e 's/^\([[:space:]]*\)# type = "pub";/\1type = "push";/' \
    -e 's/^\([[:space:]]*map_size_mb = \)1024;/\12048;/' "$CONF"
grep -q '^[[:space:]]*type = "push";' "$CONF" && grep -q 'map_size_mb = 2048;' "$CONF" ||
    fatal "could not change output.type and state.map_size_mb in $CONF"
kill -HUP "$DAEMON_PID"
check "notify: reload logged" wait_log "reload complete"
check "reload names output.type as restart-only" \
    grep -q "reload: output.type changed; it takes effect only after a restart" "$DAEMON_LOG"
check "reload names state.map_size_mb as restart-only" \
    grep -q "reload: state.map_size_mb changed; it takes effect only after a restart" "$DAEMON_LOG"
check_eq "reload names no other restart-only key" 2 \
    "$(grep -c 'changed; it takes effect only after a restart' "$DAEMON_LOG")"
# A new profile cannot be added live: refused, old profiles kept.
sed 's/^profiles = {$/profiles = {\n    extra = { mechanism = "geoind"; };/' "$CONF" >"$CONF.new" && mv "$CONF.new" "$CONF"
grep -q 'extra = { mechanism' "$CONF" || fatal "could not add a profile to $CONF"
# ... and while at it halve geoind's points_per_window: the refused reload
# must not log that change (nor any other) as if it had been applied
# (issue 10, item 16: profiles were compared by position, before the
# compatibility check).
sed -i 's/^\([[:space:]]*points_per_window = \)30;/\115;/' "$CONF"
log_lines_before=$(wc -l <"$DAEMON_LOG")
kill -HUP "$DAEMON_PID"
check "SIGHUP adding a profile: refused as needing a restart" \
    wait_log "reload refused.*adding or removing profiles needs a restart"
check "SIGHUP adding a profile: daemon still running" is_running "$DAEMON_PID"
check "refused reload: no profile change is logged as applied" \
    bash -c "! tail -n +$((log_lines_before + 1)) '$DAEMON_LOG' | grep -q 'reload: profile'"
stop_daemon notify
if wait_for_pid "$LISTEN_PID" 10; then
    check_eq "notify: listener saw STOPPING=1" 0 "$waited_status"
else
    fail "notify: listener still waiting for STOPPING=1"
fi
first_ready=$(grep -n '^READY=1' "$TMPD/notify.txt" | head -n 1 | cut -d: -f1)
stopping=$(grep -n '^STOPPING=1' "$TMPD/notify.txt" | head -n 1 | cut -d: -f1)
check "notify: READY=1 comes before STOPPING=1" test -n "$first_ready" -a -n "$stopping" -a "${first_ready:-0}" -lt "${stopping:-0}"
check "notify: WATCHDOG=1 pinged (WATCHDOG_USEC=400000)" grep -q '^WATCHDOG=1' "$TMPD/notify.txt"
check "notify: RELOADING=1 on SIGHUP" grep -q '^RELOADING=1' "$TMPD/notify.txt"
check "notify: STATUS= with counts" grep -q '^STATUS=updates=' "$TMPD/notify.txt"
show_file "$TMPD/notify.txt" 8

# --- run 3: http.listen = "" turns the endpoint off ------------------------------
start_daemon nohttp -o 'http.listen=""'
check_eq "http.listen \"\": no http= in the ready line" "" "$HTTP_EP"
stop_daemon nohttp

finish
