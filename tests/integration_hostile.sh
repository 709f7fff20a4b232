#!/usr/bin/env bash
# Issue 10: the daemon as an attacker on loopback finds it. Every hostile
# input that once cost a guarantee or the daemon's availability, replayed
# against the real daemon:
#   1. a multipart message of 100 frames        -> one `malformed`, "100 frames"
#   2. 20 batches of 524 288 empty updates      -> 20 `batch_too_large`
#   3. ids with a NUL inside                    -> `invalid_user_id`,
#                                                  `unknown_profile`
#   4. 300 updates dated 1970                   -> 300 `too_old`
#   5. a subscriber that does not read          -> its cut-offs counted
#   6. HTTP connections past the cap            -> refused or evicted,
#      counted; the daemon keeps serving ZeroMQ
#   7. HTTP connections past the fd limit       -> accept backs off; no spin
#   8. a FIFO at every configured file path      -> refused at once, also
#      on SIGHUP (issue 25, item 5)
#   9. a 4 MiB string, a group of 2000 settings  -> refused (item 13)
# Throughout: one output per update, no crash, RSS under a stated bound,
# and /healthz answering within 100 ms (sampled every 50 ms) while the
# ZeroMQ attacks run.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
ZMQ_PULL_COUNT=${ZMQ_PULL_COUNT:-$top_builddir/tests/zmq_pull_count}
require_programs "$ZMQ_SEND_RAW" "$ZMQ_PULL_COUNT"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"

vmrss_kb() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status" 2>/dev/null; }
metric() { awk -v s="$1" '$1 == s { print $2; exit }' "${2:-$TMPD/metrics.txt}"; }
scrape() { curl -s --max-time 5 "http://$HTTP_EP/metrics" >"${1:-$TMPD/metrics.txt}"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# The backdating bound on (lib.sh turns it off for historic traces).
# A small output HWM so that a subscriber that does not read falls behind
# within the flood of step 5.
start_daemon hostile -o 'input.max_backdate_s=86400' -o 'log.level=warn' \
    -o 'output.hwm=1000'
[ -n "$HTTP_EP" ] || fatal "the ready line names no http endpoint"
BASELINE_KB=$(vmrss_kb "$DAEMON_PID")
start_tail hostile 0
scrape "$TMPD/lag.before.txt"

# /healthz and RSS sampler, in the background while the ZeroMQ attacks run.
: >"$TMPD/healthz.txt"
: >"$TMPD/rss.txt"
(
    while [ ! -e "$TMPD/stop-sampling" ]; do
        curl -s --max-time 2 -o /dev/null -w '%{http_code} %{time_total}\n' \
            "http://$HTTP_EP/healthz" >>"$TMPD/healthz.txt"
        vmrss_kb "$DAEMON_PID" >>"$TMPD/rss.txt"
        sleep 0.05
    done
) &
SAMPLER_PID=$!
background_pids+=("$SAMPLER_PID")

# 1. 100 frames (item 7): the rejection gives the real count.
send_raw --frames 100
# 2. 20 x 1 MiB of empty updates (item 8): counted on the wire, refused
#    before any unpacking.
send_raw --empty-updates 524288 --repeat 20
# 3. NUL inside ids (item 9): user "alice\0evil", then profile "geoind\0junk".
varint_hex() {
    local n=$1 out=""
    while [ "$n" -ge 128 ]; do
        out+=$(printf '%02x' $(( (n & 127) | 128 )))
        n=$(( n >> 7 ))
    done
    printf '%s%02x' "$out" "$n"
}
# LocationUpdate: user_id (1), timestamp_ms (2) a minute ago, lat 40.0 (3),
# lon -74.0 (4), optional profile (6); wrapped as LocationBatch.updates (1).
nul_update_hex() {
    local user_hex=$1 profile_hex=$2 body
    body="0a$(printf '%02x' $(( ${#user_hex} / 2 )))$user_hex"
    body+="10$(varint_hex $(( $(date +%s) * 1000 - 60000 )))"
    body+="190000000000004440"     # lat 40.0, little-endian double
    body+="2100000000008052c0"     # lon -74.0
    [ -n "$profile_hex" ] &&
        body+="32$(printf '%02x' $(( ${#profile_hex} / 2 )))$profile_hex"
    printf '0a%02x%s' $(( ${#body} / 2 )) "$body"
}
send_raw --hex "$(nul_update_hex 616c6963650065766c69 "")"
send_raw --hex "$(nul_update_hex 616c696365 67656f696e64006a756e6b)"
# 4. 300 updates from 1970 (item 10's clock bound, item 6).
send_raw --burst 300 --ts-start 1000 --users 30 --user-prefix old-
# A valid update last: its outcome arriving means everything before it was
# handled (one input socket, one loop, in order).
send_raw --batch-of 1 --user-prefix last- --ts-start $(( ($(date +%s) - 60) * 1000 ))
EXPECTED=$(( 1 + 20 + 2 + 300 + 1 ))
for _ in $(seq 1 200); do
    [ "$(( $(data_rows "$TAIL_OUT") + $(data_rows "$TAIL_REJ") ))" -ge "$EXPECTED" ] && break
    sleep 0.05
done
# One more 250 ms tick after the last attack, so the lag covers it.
sleep 0.3
touch "$TMPD/stop-sampling"
wait "$SAMPLER_PID" 2>/dev/null
forget_pid "$SAMPLER_PID"
scrape "$TMPD/lag.after.txt"
lag_metric() { metric "tracesand_event_loop_lag_seconds$1" "$2"; }
lag_ticks=$(( $(lag_metric _count "$TMPD/lag.after.txt") - $(lag_metric _count "$TMPD/lag.before.txt") ))
ticks_later_than() {
    echo $(( lag_ticks - ( $(lag_metric "_bucket{le=\"$1\"}" "$TMPD/lag.after.txt") -
                           $(lag_metric "_bucket{le=\"$1\"}" "$TMPD/lag.before.txt") ) ))
}
lag_late=$(ticks_later_than 0.1)
lag_slow=$(ticks_later_than 0.25)
lag_stalled=$(ticks_later_than 1)

check_eq "100 frames: one malformed rejection" 1 \
    "$(grep -c ',malformed,.*message has 100 frames' "$TAIL_REJ")"
check_eq "empty-update floods: one batch_too_large each" 20 \
    "$(grep -c ',batch_too_large,.*524288 updates' "$TAIL_REJ")"
check_eq "NUL in a user id: invalid_user_id" 1 "$(count_reason invalid_user_id)"
check_eq "NUL in a profile name: unknown_profile" 1 "$(count_reason unknown_profile)"
check "no user id is published cut at its NUL" \
    bash -c "! grep -q '^alice,' '$TAIL_OUT'"
check_eq "1970 updates: 300 too_old" 300 "$(count_reason too_old)"
check_eq "the last valid update was sanitized" 1 \
    "$(grep -c '^last-0,' "$TAIL_OUT")"
check_eq "one output per update or message" "$EXPECTED" \
    "$(( $(data_rows "$TAIL_OUT") + $(data_rows "$TAIL_REJ") ))"

healthz_samples=$(wc -l <"$TMPD/healthz.txt")
healthz_bad=$(awk '$1 != 200' "$TMPD/healthz.txt" | wc -l)
healthz_slowest=$(awk 'BEGIN { m = 0 } $2 > m { m = $2 } END { print m }' "$TMPD/healthz.txt")
max_rss_kb=$(sort -n "$TMPD/rss.txt" | tail -n 1)
# Bound: input.max_queued_mb (64 MiB, the most ZeroMQ may queue for one
# producer) plus 32 MiB for the scan of one message, the outbox and the
# allocator. Before issue 10 the same attacks took RSS to ~470 MB.
RSS_BOUND_KB=$(( BASELINE_KB + 96 * 1024 ))
if ldd "$TRACESAND" 2>/dev/null | grep -q libasan; then
    RSS_BOUND_KB=$(( BASELINE_KB + 3 * 96 * 1024 ))
fi
note "healthz: $healthz_samples samples, slowest ${healthz_slowest}s, non-200 $healthz_bad"
note "event loop: $lag_ticks timer ticks during the attacks, $lag_late more than 100 ms late, $lag_slow more than 250 ms, $lag_stalled more than 1 s"
note "rss: baseline ${BASELINE_KB} kB, max ${max_rss_kb} kB, bound ${RSS_BOUND_KB} kB"
check_ge "/healthz was sampled during the attacks" 2 "$healthz_samples"
check_eq "/healthz always 200" 0 "$healthz_bad"
# /healthz is served by the event loop, so it answers as fast as the loop
# turns. The daemon's own lag histogram measures that without the time the
# test's curl processes wait for a CPU. The work per turn is bounded (1 MiB
# of input, a 1.7 ms wire scan for the largest batch), so the figures
# above show the 100 ms target (uninstrumented, unloaded: 0 ticks late).
# The assertion is at 1 s: CI runs this beside other tests on two shared
# cores, under ASan too, where the daemon was seen descheduled > 250 ms.
# It still fails on what issue 10 found: twenty batches of empty updates
# stalled the loop 8 s.
check_ge "the event loop ticked during the attacks" 1 "$lag_ticks"
check_eq "the event loop never stalled more than 1 s" 0 "$lag_stalled"
check "RSS stayed under the bound" test "${max_rss_kb:-0}" -le "$RSS_BOUND_KB"
kill -TERM "$TAIL_PID" 2>/dev/null
wait_for_pid "$TAIL_PID" 5 || kill -KILL "$TAIL_PID" 2>/dev/null
forget_pid "$TAIL_PID"

# 5. A subscriber that reads nothing for 3 s, through a tiny queue (item
#    11). It once lost 99.9 % of a flood with every drop counter at 0. Now
#    each time it is cut off at its HWM is counted (libzmq does not say how
#    many messages a cut-off subscriber misses; docs/operations.md).
N_FLOOD=60000
"$ZMQ_PULL_COUNT" --sub --connect "$OUTPUT_EP" --count "$N_FLOOD" \
    --rcvhwm 10 --start-delay-ms 3000 --timeout 3 \
    >"$TMPD/slow.out" 2>"$TMPD/slow.err" &
SLOW_PID=$!
background_pids+=("$SLOW_PID")
sleep 0.5
scrape "$TMPD/before.txt"
send_raw --burst "$N_FLOOD" --users 1000 --user-prefix flood- \
    --ts-start $(( ($(date +%s) - 3600) * 1000 ))
wait_for_pid "$SLOW_PID" 60 || kill -KILL "$SLOW_PID"
scrape "$TMPD/after.txt"
published=$(( $(metric tracesand_messages_published_total "$TMPD/after.txt") -
              $(metric tracesand_messages_published_total "$TMPD/before.txt") ))
cutoffs=$(( $(metric tracesand_subscriber_cutoffs_total "$TMPD/after.txt") -
            $(metric tracesand_subscriber_cutoffs_total "$TMPD/before.txt") ))
slow_received=$(cat "$TMPD/slow.out")
note "slow subscriber: published=$published cut-offs=$cutoffs received=$slow_received"
check_eq "flood: every update published" "$N_FLOOD" "$published"
check "slow subscriber: it lost messages" test "$slow_received" -lt "$published"
check "slow subscriber: its cut-offs are counted" test "$cutoffs" -gt 0

# 6. More idle HTTP connections than http.max_connections (item 14): the
#    excess is closed at once and counted, and ZeroMQ input still works.
HOST=${HTTP_EP%:*} PORT=${HTTP_EP##*:}
hold_connections() {
    local n=$1 i
    for i in $(seq 1 "$n"); do
        exec {fd}<>"/dev/tcp/$HOST/$PORT" 2>/dev/null || true
    done
    sleep "$2"
}
scrape "$TMPD/before.txt"
hold_connections 100 4 &
HOLD_PID=$!
background_pids+=("$HOLD_PID")
sleep 1.5
send_raw --batch-of 1 --user-prefix during-cap- \
    --ts-start $(( ($(date +%s) - 60) * 1000 ))
wait_for_pid "$HOLD_PID" 10 || kill -KILL "$HOLD_PID"
sleep 0.3
scrape
# Beyond the cap a newcomer is refused, or takes the slot of a connection
# that waited over 1 s for a head (issue 25, item 7): either way closed and
# counted.
check_ge "cap: connections beyond 64 refused or evicted" 36 \
    "$(( $(metric 'tracesand_http_connections_total{result="refused"}') +
         $(metric tracesand_http_evictions_total) ))"
check_eq "cap: the ZeroMQ update during the attack was handled" 1 \
    "$(( $(metric tracesand_sanitized_total) - $(metric tracesand_sanitized_total "$TMPD/before.txt") ))"
stop_daemon hostile

# 7. Out of descriptors (item 14): a daemon limited to 64 fds, a cap above
#    that, 120 idle connections. accept() fails with EMFILE; the listener
#    rests with backoff instead of spinning (it once burned 100 % CPU and
#    wrote 1.8 M log lines in 5 s).
# own_daemon NAME CONF [-o ...]: a daemon apart from start_daemon's (its
# own file, or OWN_FD_LIMIT descriptors) on ephemeral ports, logging to
# $TMPD/NAME.daemon.log; sets OWN_PID and HTTP_EP once it is ready.
own_daemon() {
    local name=$1 conf=$2
    shift 2
    (
        [ -z "${OWN_FD_LIMIT:-}" ] || ulimit -n "$OWN_FD_LIMIT"
        exec "$TRACESAND" -c "$conf" -o 'input.endpoint=tcp://127.0.0.1:*' \
            -o 'output.endpoint=tcp://127.0.0.1:*' \
            -o 'http.listen=127.0.0.1:0' -o 'state.dir=""' "$@"
    ) 2>"$TMPD/$name.daemon.log" </dev/null &
    OWN_PID=$!
    background_pids+=("$OWN_PID")
    for _ in $(seq 1 100); do
        grep -q 'ready input=' "$TMPD/$name.daemon.log" && break
        sleep 0.05
    done
    HTTP_EP=$(sed -n 's/.*ready input=.* http=\([^ ]*\).*/\1/p' \
                  "$TMPD/$name.daemon.log" | head -n 1)
    [ -n "$HTTP_EP" ] || fatal "$name: the daemon printed no http endpoint"
}
OWN_FD_LIMIT=64 own_daemon fd "$SHIPPED_CONF" -o 'http.max_connections=1000'
FD_PID=$OWN_PID
HOST=${HTTP_EP%:*} PORT=${HTTP_EP##*:}
hold_connections 120 4 &
HOLD_PID=$!
background_pids+=("$HOLD_PID")
sleep 1
cpu_before=$(cpu_ticks "$FD_PID")
sleep 2
cpu_after=$(cpu_ticks "$FD_PID")
wait_for_pid "$HOLD_PID" 10 || kill -KILL "$HOLD_PID"
cpu_ticks_spent=$(( cpu_after - cpu_before ))
accept_lines=$(grep -c 'accept failed' "$TMPD/fd.daemon.log")
note "fd exhaustion: ${cpu_ticks_spent} CPU ticks in 2 s, $accept_lines accept-failure lines"
check "fd exhaustion: no spin (< 0.3 s of CPU in 2 s)" \
    test "$cpu_ticks_spent" -lt $(( $(getconf CLK_TCK) * 3 / 10 ))
check "fd exhaustion: accept failures were logged" test "$accept_lines" -gt 0
check "fd exhaustion: the log stays small (< 100 lines)" \
    test "$(wc -l <"$TMPD/fd.daemon.log")" -lt 100
# Once the connections are gone the endpoint serves again.
ok=0
for _ in $(seq 1 40); do
    if [ "$(curl -s --max-time 1 -o /dev/null -w '%{http_code}' "http://$HTTP_EP/healthz")" = 200 ]; then
        ok=1
        break
    fi
    sleep 0.1
done
check_eq "fd exhaustion: /healthz serves again afterwards" 1 "$ok"
curl -s --max-time 5 "http://$HTTP_EP/metrics" >"$TMPD/fd.metrics.txt"
check "fd exhaustion: accept errors counted" \
    test "$(metric tracesand_http_accept_errors_total "$TMPD/fd.metrics.txt")" -gt 0
kill -TERM "$FD_PID"
wait_for_pid "$FD_PID" 10 && check_eq "fd-limited daemon exits 0" 0 "$waited_status"
forget_pid "$FD_PID"

# 8. Blocking opens (issue 25, item 5): a FIFO wherever the configuration
#    names a file. open() of a FIFO waits for a writer, so each of these
#    once hung --check-config, the start, or a SIGHUP on the event loop.
#    Now each is refused at once, naming the file (a hang is killed after
#    10 s and fails the check).
FIFO=$TMPD/fifo
mkfifo -m 600 "$FIFO"
# refused_in_time NAME WANT COMMAND...: exit 1 (not 124: timeout), WANT in
# stderr.
refused_in_time() {
    local name=$1 want=$2 rc=0
    shift 2
    timeout 10 "$@" >"$TMPD/$name.out" 2>"$TMPD/$name.err" </dev/null || rc=$?
    check_eq "$name: refused, not hung" 1 "$rc"
    if grep -qF -- "$want" "$TMPD/$name.err"; then
        pass "$name: says '$want'"
    else
        fail "$name: stderr lacks '$want'"
        show_file "$TMPD/$name.err" 5
    fi
}
refused_in_time "fifo: the configuration file" \
    "$FIFO: cannot read: not a regular file (a FIFO)" "$TRACESAND" --check-config "$FIFO"
cp "$SHIPPED_CONF" "$TMPD/includes-fifo.conf"
printf '@include "fifo"\n' >>"$TMPD/includes-fifo.conf"
refused_in_time "fifo: an @include" \
    "includes-fifo.conf:$(wc -l <"$TMPD/includes-fifo.conf"): @include \"fifo\": not a regular file (a FIFO)" \
    "$TRACESAND" --check-config "$TMPD/includes-fifo.conf"
refused_in_time "fifo: a model" "not a regular file" \
    "$TRACESAND" --check-config "$SHIPPED_CONF" -o "profiles.pim.model=$FIFO"
refused_in_time "fifo: a channel" "not a regular file" \
    "$TRACESAND" --check-config "$SHIPPED_CONF" -o "profiles.mi-channel.channel=$FIFO"
refused_in_time "fifo: http.token_file" "not a regular file (a FIFO)" \
    "$TRACESAND" --check-config "$SHIPPED_CONF" -o "http.token_file=\"$FIFO\""
refused_in_time "fifo: a CURVE key file" "not a regular file (a FIFO)" \
    "$TRACESAND" --check-config "$SHIPPED_CONF" -o security.curve=true \
    -o "security.server_secret_key_file=\"$FIFO\"" \
    -o "security.server_public_key_file=\"$FIFO\"" \
    -o "security.input_allow_keys_file=\"$FIFO\""
mkdir -p "$TMPD/state"
mkfifo -m 600 "$TMPD/state/data.mdb"
refused_in_time "fifo: the state store's data.mdb" \
    "data.mdb: not a regular file (a FIFO)" \
    "$TRACESAN" state --dir "$TMPD/state" stats

# A SIGHUP whose new configuration includes a FIFO: refused and counted,
# while /healthz goes on answering.
cp "$SHIPPED_CONF" "$TMPD/live.conf"
own_daemon live "$TMPD/live.conf"
LIVE_PID=$OWN_PID
printf '@include "fifo"\n' >>"$TMPD/live.conf"
kill -HUP "$LIVE_PID"
: >"$TMPD/live.healthz.txt"
for _ in $(seq 1 8); do
    curl -s --max-time 5 -o /dev/null -w '%{http_code} %{time_total}\n' \
        "http://$HTTP_EP/healthz" >>"$TMPD/live.healthz.txt"
    sleep 0.25
done
note "SIGHUP with a FIFO included: /healthz answers (code, s):" \
    $(tr ' \n' ': ' <"$TMPD/live.healthz.txt")
check_eq "fifo on SIGHUP: /healthz kept answering 200" 0 \
    "$(awk '$1 != 200' "$TMPD/live.healthz.txt" | wc -l)"
scrape "$TMPD/live.metrics.txt"
check_eq "fifo on SIGHUP: the reload is refused and counted" 1 \
    "$(metric tracesand_config_reload_failures_total "$TMPD/live.metrics.txt")"
check "fifo on SIGHUP: the refusal names the FIFO" \
    grep -q 'reload refused.*@include "fifo": not a regular file' "$TMPD/live.daemon.log"
kill -TERM "$LIVE_PID"
wait_for_pid "$LIVE_PID" 10 && check_eq "live daemon exits 0" 0 "$waited_status"

# 9. Quadratic configuration parsing (issue 25, item 13): libconfig took
#    8.9 s over a 4 MiB string and 16 s over a group of 26 000 settings
#    (256 KiB). The configuration, includes and all, is capped at 256 KiB
#    and a group at 1024 settings, with a clear error.
timed_check_config() { # NAME WANT FILE
    local start=$(date +%s%N)
    refused_in_time "$1" "$2" "$TRACESAND" --check-config "$3"
    note "$1: answered in $(( ($(date +%s%N) - start) / 1000000 )) ms"
}
{ cat "$SHIPPED_CONF"; printf 'long_string = "'; head -c 4194304 /dev/zero | tr '\0' a; printf '";\n'; } >"$TMPD/long-string.conf"
timed_check_config "config: a 4 MiB string" \
    "long-string.conf: larger than 256 KiB, the most a configuration may hold" \
    "$TMPD/long-string.conf"
{ cat "$SHIPPED_CONF"; printf 'x = {\n'; seq -f 'k%g = 1;' 1 2000; printf '};\n'; } >"$TMPD/wide-group.conf"
timed_check_config "config: a group of 2000 settings" \
    "more than 1024 settings in one group" "$TMPD/wide-group.conf"
finish
