#!/usr/bin/env bash
# Durable state through real processes:
#   1. SIGTERM drains and commits: a restarted daemon on the same state.dir
#      continues the user's ledger (no fresh budget).
#   2. kill -9 at random moments (at least 20 kills) during a long replay:
#      for every user, the ledger's spend >= the eps of all points the
#      subscriber actually received, and no window exceeds its budget.
#   3. An unusable store: the daemon refuses to start; a store that fills
#      up mid-run pauses input and reports unhealthy without publishing
#      undebited points.
#   4. (root) A full disk that is freed again: the retried commit publishes
#      the held group, health and input come back, nothing is lost.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

# Shipped geoind profile (level ln 10 over 100 m), with a small number of
# points per window so exhaustion matters.
WINDOW_BUDGET=0.02302585092994046
PPW=10
NOW=$(date +%s)
# Timestamps in the recent past: accepted (not in the future) and all in
# one 24 h budget window.
T0=$((NOW - 7200))

state_spent() {  # state_spent DIR USER: the user's ledger spend, from export
    "$TRACESAN" state --dir "$1" export |
        awk -v u="$2" 'index($0, "{\"user\":\"" u "\",") == 1 {
            match($0, /"spent":[^,]*/); print substr($0, RSTART + 8, RLENGTH - 8) }'
}

# ------------------------------------------- 1. restart keeps the budget
STATE1=$TMPD/state1
FIRST=6
SECOND=8
awk -v t="$T0" -v n="$FIRST" 'BEGIN { print "user,ts,lat,lon";
    for (i = 0; i < n; i++) printf "alice,%d,40.7%04d,-73.9%04d\n", t + i, i, i }' \
    >"$TMPD/first.csv"
awk -v t="$((T0 + FIRST))" -v n="$SECOND" 'BEGIN { print "user,ts,lat,lon";
    for (i = 0; i < n; i++) printf "alice,%d,40.6%04d,-73.8%04d\n", t + i, i, i }' \
    >"$TMPD/second.csv"

start_daemon restart1 -o "state.dir=$STATE1" \
    -o "profiles.geoind.points_per_window=$PPW"
start_tail restart1 "$FIRST"
replay "$TMPD/first.csv"
wait_tail restart1 20
stop_daemon restart1
check_eq "restart: first run sanitized all $FIRST points" "$FIRST" "$(data_rows "$TAIL_OUT")"
FIRST_OUT=$TAIL_OUT

start_daemon restart2 -o "state.dir=$STATE1" \
    -o "profiles.geoind.points_per_window=$PPW"
start_tail restart2 "$SECOND"
replay "$TMPD/second.csv"
wait_tail restart2 20
stop_daemon restart2
got=$(( $(data_rows "$FIRST_OUT") + $(data_rows "$TAIL_OUT") ))
check_eq "restart: sanitized over both runs = points_per_window" "$PPW" "$got"
check_eq "restart: the rest is budget_exhausted" "$((FIRST + SECOND - PPW))" \
    "$(count_reason budget_exhausted)"
spent=$(state_spent "$STATE1" alice)
check "restart: ledger holds the whole window budget (spent=$spent)" \
    awk -v s="$spent" -v b="$WINDOW_BUDGET" 'BEGIN { d = s - b; if (d < 0) d = -d; exit !(d <= 1e-9 * b) }'
check "restart: state list names the user without coordinates" \
    bash -c "'$TRACESAN' state --dir '$STATE1' list | grep -q '^alice,geoind,' &&
             ! '$TRACESAN' state --dir '$STATE1' list | grep -q '40\\.'"

# export -> import into a fresh store round-trips; importing again never
# replaces (lowers) an existing ledger.
"$TRACESAN" state --dir "$STATE1" export >"$TMPD/export1.jsonl"
check "state import into a new store" \
    "$TRACESAN" state --dir "$TMPD/imported" import "$TMPD/export1.jsonl" 2>"$TMPD/import1.log"
check "state export after import is identical" \
    cmp -s "$TMPD/export1.jsonl" <("$TRACESAN" state --dir "$TMPD/imported" export)
sed 's/"spent":[^,]*/"spent":0/' "$TMPD/export1.jsonl" >"$TMPD/zeroed.jsonl"
"$TRACESAN" state --dir "$TMPD/imported" import "$TMPD/zeroed.jsonl" 2>"$TMPD/import2.log"
check "state import keeps existing ledgers" grep -q 'skipped_existing=1' "$TMPD/import2.log"
check_eq "state import did not lower the spend" "$spent" "$(state_spent "$TMPD/imported" alice)"

# ------------------------------------------------------ 2. kill -9 loop
STATE2=$TMPD/state2
USERS=40
PER_USER=100
RATE=160              # points/s: 4000 points take 25 s
MIN_KILLS=20
awk -v t="$T0" -v users="$USERS" -v per="$PER_USER" 'BEGIN {
    srand(11); print "user,ts,lat,lon"
    for (i = 0; i < per; i++)
        for (u = 0; u < users; u++)
            printf "u%02d,%d,%.6f,%.6f\n", u, t + i, 40.6 + rand() * 0.2, -74.0 + rand() * 0.2
}' >"$TMPD/long.csv"

# Fixed ports so the replay's PUSH and the tail's SUB reconnect by
# themselves to every restarted daemon. Chosen at random; retried if busy.
crash_start() {  # crash_start N: start daemon number N on IN_PORT/OUT_PORT
    DAEMON_LOG=$TMPD/crash.$1.daemon.log
    "${daemon_wrapper[@]}" "$TRACESAND" -c "$SHIPPED_CONF" \
        -o "input.endpoint=tcp://127.0.0.1:$IN_PORT" \
        -o "output.endpoint=tcp://127.0.0.1:$OUT_PORT" \
        -o 'http.listen=127.0.0.1:0' -o 'input.max_backdate_s=0' \
        -o "state.dir=$STATE2" -o "profiles.geoind.points_per_window=$PPW" \
        -o 'log.level="warn"' \
        2>"$DAEMON_LOG" </dev/null &
    DAEMON_PID=$!
    background_pids+=("$DAEMON_PID")
    local tries=$(( TS_START_TIMEOUT * 50 ))
    while ! grep -q 'ready input=' "$DAEMON_LOG" 2>/dev/null; do
        if ! is_running "$DAEMON_PID"; then
            wait "$DAEMON_PID" 2>/dev/null
            forget_pid "$DAEMON_PID"
            return 1
        fi
        tries=$((tries - 1))
        [ $tries -gt 0 ] || fatal "tracesand (crash $1) not ready"
        sleep 0.02
    done
}

started=0
for attempt in 1 2 3 4 5; do
    IN_PORT=$((20000 + RANDOM % 20000))
    OUT_PORT=$((IN_PORT + 1))
    if crash_start 0; then started=1; break; fi
done
[ "$started" = 1 ] || { show_file "$DAEMON_LOG"; fatal "cannot start the crash-test daemon"; }
note "crash test: ports $IN_PORT/$OUT_PORT"
OUTPUT_EP=tcp://127.0.0.1:$OUT_PORT
start_tail crash 0 --timeout 60
"$TRACESAN" replay --connect "tcp://127.0.0.1:$IN_PORT" --rate "$RATE" \
    --batch 10 "$TMPD/long.csv" 2>"$TMPD/crash.replay.log" </dev/null &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")

kills=0
restart_failures=0
while is_running "$REPLAY_PID" || [ "$kills" -lt "$MIN_KILLS" ]; do
    # 0.3 .. 1.2 s of running before each kill.
    sleep "0.$((3 + RANDOM % 10))" 2>/dev/null || sleep 1
    kill -KILL "$DAEMON_PID" 2>/dev/null
    wait "$DAEMON_PID" 2>/dev/null
    forget_pid "$DAEMON_PID"
    kills=$((kills + 1))
    if ! crash_start "$kills"; then
        restart_failures=$((restart_failures + 1))
        show_file "$DAEMON_LOG"
        [ "$restart_failures" -lt 3 ] || fatal "daemon does not restart"
        crash_start "$kills.retry" || fatal "daemon does not restart"
    fi
    [ "$kills" -lt 200 ] || break
done
wait_for_pid "$REPLAY_PID" 70 || kill -KILL "$REPLAY_PID"
# Let the last daemon drain what reached it, then stop everything.
sleep 1
stop_daemon crash-final
sleep 0.5
kill -TERM "$TAIL_PID" 2>/dev/null
wait_for_pid "$TAIL_PID" 10 || kill -KILL "$TAIL_PID"

"$TRACESAN" state --dir "$STATE2" export >"$TMPD/crash.export.jsonl" ||
    fail "crash: state export failed"
received=$(data_rows "$TAIL_OUT")
ledger_users=$(wc -l <"$TMPD/crash.export.jsonl")
note "crash test: kills=$kills points_sent=$((USERS * PER_USER)) sanitized_received=$received rejections_received=$(data_rows "$TAIL_REJ") users_in_ledger=$ledger_users"
check_ge "crash: at least $MIN_KILLS kill -9" "$MIN_KILLS" "$kills"
check_ge "crash: the subscriber received sanitized points" 1 "$received"
# Per user: ledger spend >= sum of received eps, spend <= budget, and at
# most points_per_window points received in the window.
check "crash: ledger covers every received point and no window overspends" \
    awk -F, -v budget="$WINDOW_BUDGET" -v ppw="$PPW" '
        FNR == 1 && NR != FNR { next }
        NR == FNR {
            match($0, /"user":"[^"]*"/); u = substr($0, RSTART + 8, RLENGTH - 9)
            match($0, /"spent":[^,]*/); spent[u] = substr($0, RSTART + 8, RLENGTH - 8) + 0
            next
        }
        { got[$1] += $6; n[$1]++ }
        END {
            for (u in got) {
                if (!(u in spent)) { print "# " u ": received points but no ledger"; bad++; continue }
                if (spent[u] < got[u] * (1 - 1e-9)) { print "# " u ": ledger " spent[u] " < received " got[u]; bad++ }
                if (n[u] > ppw) { print "# " u ": received " n[u] " points > " ppw; bad++ }
            }
            for (u in spent)
                if (spent[u] > budget * (1 + 1e-9)) { print "# " u ": spent " spent[u] " > budget"; bad++ }
            exit bad > 0
        }' "$TMPD/crash.export.jsonl" "$TAIL_OUT"

# ------------------------------------------------- 3. unusable store
"$TRACESAND" -c "$SHIPPED_CONF" -o 'input.endpoint=tcp://127.0.0.1:*' \
    -o 'output.endpoint=tcp://127.0.0.1:*' -o 'state.dir=/dev/null/state' \
    -o 'http.listen=127.0.0.1:0' \
    2>"$TMPD/badstore.log" </dev/null
status=$?
check_eq "unusable state.dir: the daemon refuses to start" 1 "$status"
check "unusable state.dir: the error names the store" \
    grep -q 'state store /dev/null/state' "$TMPD/badstore.log"
check "unusable state.dir: never ready" \
    bash -c "! grep -q 'ready input=' '$TMPD/badstore.log'"
if [ "$(id -u)" != 0 ]; then
    mkdir -p "$TMPD/readonly" && chmod 0500 "$TMPD/readonly"
    "$TRACESAND" -c "$SHIPPED_CONF" -o 'input.endpoint=tcp://127.0.0.1:*' \
        -o 'output.endpoint=tcp://127.0.0.1:*' -o "state.dir=$TMPD/readonly" \
        -o 'http.listen=127.0.0.1:0' \
        2>"$TMPD/readonly.log" </dev/null
    check_eq "read-only state.dir: the daemon refuses to start" 1 "$?"
    chmod 0700 "$TMPD/readonly"
else
    note "running as root: read-only directory check skipped (root can write)"
fi

# A store that fills up (1 MiB map) mid-run: the daemon logs the failure,
# stays up but unhealthy (/healthz 503), stops consuming and retries the
# commit with backoff; it publishes nothing it has not debited. SIGTERM
# then gets one last attempt, fails, and exits non-zero.
awk -v t="$T0" 'BEGIN { print "user,ts,lat,lon";
    for (i = 0; i < 30000; i++) printf "full%05d,%d,40.7,-73.9\n", i, t + i % 1000 }' \
    >"$TMPD/many.csv"
STATE3=$TMPD/state3
start_daemon full -o "state.dir=$STATE3" -o 'state.map_size_mb=1'
start_tail full 0 --timeout 5
# Small groups, so the map fills between commits rather than in the first.
replay_in_background full "$TMPD/many.csv" --batch 20 --rate 5000
FULL_REPLAY=$REPLAY_PID
wait_log 'MDB_MAP_FULL' 30 || :
check "full store: the commit failure is logged" \
    grep -q 'MDB_MAP_FULL.*not published.*input paused.*unhealthy' "$DAEMON_LOG"
# The first retry is due 1 s after the failure, the second 2 s later.
sleep 1.5
check "full store: the daemon stays up" is_running "$DAEMON_PID"
check "full store: the commit is retried" grep -q 'commit retry failed' "$DAEMON_LOG"
if command -v curl >/dev/null 2>&1 && [ -n "$HTTP_EP" ]; then
    check_eq "full store: /healthz is 503" 503 \
        "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://$HTTP_EP/healthz")"
    check "full store: /healthz gives the reason" \
        sh -c "curl -s --max-time 5 'http://$HTTP_EP/healthz' | grep -q 'state store commit failed'"
    updates_paused=$(curl -s --max-time 5 "http://$HTTP_EP/metrics" |
        awk '$1 == "tracesand_updates_total" { print $2; exit }')
    sleep 1
    check_eq "full store: input stays paused (no update read)" "$updates_paused" \
        "$(curl -s --max-time 5 "http://$HTTP_EP/metrics" |
            awk '$1 == "tracesand_updates_total" { print $2; exit }')"
else
    note "curl missing or http off: /healthz checks skipped"
fi
kill -TERM "$DAEMON_PID"
if wait_for_pid "$DAEMON_PID" 15; then
    check_eq "full store: SIGTERM with an uncommittable batch exits 1" 1 "$waited_status"
else
    fail "full store: the daemon did not stop on SIGTERM"
    kill -KILL "$DAEMON_PID"
fi
check "full store: the held batch is dropped unpublished at shutdown" \
    grep -q 'uncommitted batch.*not published' "$DAEMON_LOG"
{ kill -KILL "$FULL_REPLAY"; wait "$FULL_REPLAY"; } 2>/dev/null
forget_pid "$FULL_REPLAY"
wait_for_pid "$TAIL_PID" 15 || kill -KILL "$TAIL_PID"
"$TRACESAN" state --dir "$STATE3" export >"$TMPD/full.export.jsonl"
note "full store: $(wc -l <"$TMPD/full.export.jsonl") users committed, $(data_rows "$TAIL_OUT") points received"
check "full store: some points were committed and published first" \
    test "$(data_rows "$TAIL_OUT")" -gt 0
check "full store: every received point is in the ledger" \
    awk -F, '
        NR == FNR { match($0, /"user":"[^"]*"/); have[substr($0, RSTART + 8, RLENGTH - 9)] = 1; next }
        FNR > 1 && !($1 in have) { print "# published without debit: " $1; bad++ }
        END { exit bad > 0 }' "$TMPD/full.export.jsonl" "$TAIL_OUT"
check "full store: fewer points published than sent" \
    test "$(data_rows "$TAIL_OUT")" -lt 30000

# ------------------------------- 4. a full disk that is freed again: recovery
# Root only (a 2 MiB tmpfs as state.dir): the disk fills mid-run, the daemon
# pauses input and reports 503, and once space is freed the retried commit
# publishes the held group, /healthz is 200 again and input resumes: every
# point arrives, nothing is dropped.
TMPFS=$TMPD/tmpfs
mkdir -p "$TMPFS"
if [ "$(id -u)" = 0 ] && command -v curl >/dev/null 2>&1 &&
        mount -t tmpfs -o size=2m tracesan-test "$TMPFS" 2>/dev/null; then
    unmount_after() {
        local pid
        for pid in "${background_pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
        sleep 0.2
        umount "$TMPFS" 2>/dev/null
        cleanup
    }
    trap unmount_after EXIT
    RECOVER_POINTS=8000
    awk -v t="$T0" -v n="$RECOVER_POINTS" 'BEGIN { print "user,ts,lat,lon";
        for (i = 0; i < n; i++) printf "rec%05d,%d,40.7,-73.9\n", i, t + i % 1000 }' \
        >"$TMPD/recover.csv"
    start_daemon recover -o "state.dir=$TMPFS/state" -o 'state.map_size_mb=64'
    # Leave ~400 KiB: room for a few thousand users, not for all of them.
    avail_kb=$(df -k --output=avail "$TMPFS" | tail -n 1)
    dd if=/dev/zero of="$TMPFS/filler" bs=1k count=$(( avail_kb - 400 )) 2>/dev/null
    start_tail recover "$RECOVER_POINTS" --timeout 20
    replay_in_background recover "$TMPD/recover.csv" --batch 20 --rate 4000
    RECOVER_REPLAY=$REPLAY_PID
    wait_log 'not published' 10 || :
    # The kernel reports ENOSPC from write() but EIO when the overflow
    # surfaces at fdatasync of a tmpfs-backed map; either is a full disk.
    check "recovery: the full disk fails a commit" \
        grep -Eq 'commit failed: (No space left on device|Input/output error); the batch is not published.*input paused' "$DAEMON_LOG"
    check_eq "recovery: /healthz is 503 while the disk is full" 503 \
        "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://$HTTP_EP/healthz")"
    rm -f "$TMPFS/filler"
    wait_log 'commit retry succeeded' 40 || :
    check "recovery: a retried commit succeeds once space is freed" \
        grep -q 'commit retry succeeded: held batch published' "$DAEMON_LOG"
    check_eq "recovery: /healthz is 200 again" 200 \
        "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://$HTTP_EP/healthz")"
    wait_for_pid "$RECOVER_REPLAY" 30 || fail "recovery: replay did not finish"
    wait_tail recover 30
    check_eq "recovery: every point arrives after the pause" "$RECOVER_POINTS" \
        "$(data_rows "$TAIL_OUT")"
    check_eq "recovery: nothing dropped as uncommitted" 0 \
        "$(curl -s --max-time 5 "http://$HTTP_EP/metrics" |
            awk '$1 == "tracesand_dropped_total{cause=\"uncommitted\"}" { print $2 }')"
    stop_daemon recover
    "$TRACESAN" state --dir "$TMPFS/state" export >"$TMPD/recover.export.jsonl"
    check_eq "recovery: every user's debit is in the store" "$RECOVER_POINTS" \
        "$(grep -c '"user":"rec' "$TMPD/recover.export.jsonl")"
    umount "$TMPFS" 2>/dev/null || note "recovery: could not unmount $TMPFS"
    trap cleanup EXIT
else
    note "not root, no curl or no tmpfs mount: disk-full recovery check skipped"
fi

finish
