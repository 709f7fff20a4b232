# Shared helpers for the integration tests (sourced, bash).
#
# The tests drive the real programs: tracesand on ephemeral loopback ports,
# `tracesan replay` into it and `tracesan tail` out of it. Everything they
# write goes to a private temporary directory removed on exit, so they run
# from a read-only source tree (make distcheck) and in parallel.
#
# Exit codes follow automake: 0 pass, 1 fail, 77 skip, 99 hard error.

set -u

: "${top_srcdir:=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
: "${top_builddir:=$(pwd)}"
export top_srcdir top_builddir

TRACESAND=${TRACESAND:-$top_builddir/tracesand}
TRACESAN=${TRACESAN:-$top_builddir/tracesan}
ZMQ_SEND_RAW=${ZMQ_SEND_RAW:-$top_builddir/tests/zmq_send_raw}
SHIPPED_CONF=$top_srcdir/conf/tracesand.conf
TEST_DATA=$top_srcdir/tests/data
TEST_NAME=$(basename "$0" .sh)

# Seconds a daemon may take to print its ready line, and a tail its ready
# file; generous because ASan/valgrind builds start slowly.
: "${TS_START_TIMEOUT:=20}"

tests_run=0
tests_failed=0
background_pids=()

# Optional: TS_VALGRIND=1 runs the daemon under valgrind (leaks and errors
# make it exit non-zero, which stop_daemon reports).
daemon_wrapper=()
if [ "${TS_VALGRIND:-0}" = 1 ]; then
    daemon_wrapper=(valgrind -q --error-exitcode=99 --leak-check=full
                    --errors-for-leak-kinds=definite,indirect)
    TS_START_TIMEOUT=60
fi

cleanup() {
    local pid
    for pid in "${background_pids[@]}"; do
        kill -CONT "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -n "${TS_KEEP_TMP:-}" ]; then
        echo "# kept $TMPD"
    else
        rm -rf "$TMPD"
    fi
}

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/tracesan-$TEST_NAME.XXXXXX") || exit 99
trap cleanup EXIT
trap 'exit 99' INT TERM

note() { printf '# %s\n' "$*"; }

fatal() {
    printf 'Bail out! %s\n' "$*"
    exit 99
}

pass() {
    tests_run=$((tests_run + 1))
    printf 'ok %d - %s\n' "$tests_run" "$*"
}

fail() {
    tests_run=$((tests_run + 1))
    tests_failed=$((tests_failed + 1))
    printf 'not ok %d - %s\n' "$tests_run" "$*"
}

# check "description" command...: pass when the command succeeds.
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}

# check_eq "description" expected actual
check_eq() {
    if [ "$2" = "$3" ]; then
        pass "$1"
    else
        fail "$1: expected '$2', got '$3'"
    fi
}

# check_ge "description" minimum actual
check_ge() {
    if [ "$3" -ge "$2" ] 2>/dev/null; then
        pass "$1"
    else
        fail "$1: expected at least $2, got '$3'"
    fi
}

# Print the tail of a file for diagnosis, prefixed so TAP ignores it.
show_file() {
    local file=$1 lines=${2:-20}
    [ -f "$file" ] || { note "($file does not exist)"; return; }
    note "--- last $lines lines of $(basename "$file"):"
    tail -n "$lines" "$file" | sed 's/^/#   /'
}

finish() {
    echo "1..$tests_run"
    if [ "$tests_failed" -ne 0 ]; then
        note "$TEST_NAME: $tests_failed of $tests_run checks failed"
        exit 1
    fi
    note "$TEST_NAME: all $tests_run checks passed"
    exit 0
}

require_programs() {
    local p
    for p in "$@"; do
        [ -x "$p" ] || fatal "$p is not built (run make first)"
    done
}

is_running() { kill -0 "$1" 2>/dev/null; }

# wait_for_pid PID SECONDS: wait for PID to exit; returns its status in
# $waited_status. Returns 1 (and leaves it running) on timeout.
wait_for_pid() {
    local pid=$1 deadline
    deadline=$(( $(date +%s%N) / 1000000 + ${2%.*} * 1000 ))
    while is_running "$pid"; do
        if [ $(( $(date +%s%N) / 1000000 )) -ge $deadline ]; then
            return 1
        fi
        sleep 0.05
    done
    waited_status=0
    wait "$pid" || waited_status=$?
    forget_pid "$pid"
    return 0
}

# wait_log PATTERN [SECONDS]: wait until the daemon's log (DAEMON_LOG) has
# a line matching PATTERN (grep -E), SECONDS at most (TS_START_TIMEOUT by
# default), or until the daemon is gone; 1 when it never came.
wait_log() {
    local pattern=$1 tries=$(( ${2:-$TS_START_TIMEOUT} * 10 ))
    while [ $tries -gt 0 ]; do
        grep -Eq -- "$pattern" "$DAEMON_LOG" 2>/dev/null && return 0
        is_running "$DAEMON_PID" || return 1
        sleep 0.1
        tries=$((tries - 1))
    done
    return 1
}

forget_pid() {
    local keep=() p
    for p in "${background_pids[@]}"; do
        [ "$p" = "$1" ] || keep+=("$p")
    done
    background_pids=("${keep[@]}")
}

# start_daemon NAME [-o path=value]...
# Starts tracesand with the shipped config on ephemeral loopback ports and
# waits for its ready line. Sets DAEMON_PID, DAEMON_LOG, INPUT_EP, OUTPUT_EP,
# HTTP_EP (empty when http.listen is off).
# Extra arguments go to tracesand after the port overrides. The state
# store is memory-only (state.dir "") unless they set state.dir. The test
# traces are historical (2009 to 2023), so the wall-clock bound on the past
# (input.max_backdate_s) is off unless they set it.
start_daemon() {
    local name=$1
    shift
    DAEMON_LOG=$TMPD/$name.daemon.log
    "${daemon_wrapper[@]}" "$TRACESAND" -c "$SHIPPED_CONF" \
        -o 'input.endpoint=tcp://127.0.0.1:*' \
        -o 'output.endpoint=tcp://127.0.0.1:*' \
        -o 'http.listen=127.0.0.1:0' -o 'state.dir=""' \
        -o 'input.max_backdate_s=0' \
        "$@" 2>"$DAEMON_LOG" </dev/null &
    DAEMON_PID=$!
    background_pids+=("$DAEMON_PID")
    local tries=$(( TS_START_TIMEOUT * 20 )) ready=""
    while [ $tries -gt 0 ]; do
        ready=$(sed -n 's/.*ready input=\([^ ]*\) output=\([^ ]*\).*/\1 \2/p' \
                    "$DAEMON_LOG" 2>/dev/null | head -n 1)
        [ -n "$ready" ] && break
        if ! is_running "$DAEMON_PID"; then
            show_file "$DAEMON_LOG"
            fatal "tracesand ($name) exited before its ready line"
        fi
        sleep 0.05
        tries=$((tries - 1))
    done
    if [ -z "$ready" ]; then
        show_file "$DAEMON_LOG"
        fatal "tracesand ($name) printed no ready line within ${TS_START_TIMEOUT}s"
    fi
    INPUT_EP=${ready% *}
    OUTPUT_EP=${ready#* }
    # The operator HTTP endpoint, when the ready line names one.
    HTTP_EP=$(sed -n 's/.*ready input=.* http=\([^ ]*\).*/\1/p' \
                  "$DAEMON_LOG" 2>/dev/null | head -n 1)
    case $INPUT_EP$OUTPUT_EP in
        *'*'*) fatal "ready line still has unresolved ports: $ready" ;;
    esac
    note "$name: tracesand pid $DAEMON_PID input=$INPUT_EP output=$OUTPUT_EP"
}

# stop_daemon [NAME [SIGNAL]]: SIGTERM (or SIGNAL), wait, and record
# whether it exited 0 as a check.
stop_daemon() {
    local name=${1:-daemon} signal=${2:-TERM}
    if ! is_running "$DAEMON_PID"; then
        wait "$DAEMON_PID"
        local status=$?
        forget_pid "$DAEMON_PID"
        fail "$name: tracesand was still running before SIGTERM (it exited with $status)"
        show_file "$DAEMON_LOG"
        return
    fi
    kill -"$signal" "$DAEMON_PID"
    if ! wait_for_pid "$DAEMON_PID" 30; then
        kill -KILL "$DAEMON_PID" 2>/dev/null
        wait "$DAEMON_PID" 2>/dev/null
        forget_pid "$DAEMON_PID"
        fail "$name: tracesand did not exit within 30 s of SIG$signal"
        show_file "$DAEMON_LOG"
        return
    fi
    if [ "$waited_status" -eq 0 ]; then
        pass "$name: tracesand exits 0 on SIG$signal"
    else
        fail "$name: tracesand exit status after SIG$signal is $waited_status, expected 0"
        show_file "$DAEMON_LOG" 40
    fi
}

# summary_value KEY [LOG]: the number after KEY= in the daemon's summary
# (the summary line and the lines after it). Empty when absent.
summary_value() {
    local key=$1 log=${2:-$DAEMON_LOG} pattern
    pattern=$(printf '%s' "$key" | sed 's/\./\\./g')
    sed -n '/summary updates=/,$p' "$log" |
        grep -oE "(^|[ :])$pattern=[0-9]+" | head -n 1 | sed 's/.*=//'
}

# start_tail NAME COUNT [tail options...]: start `tracesan tail` on the
# daemon's output; waits for its ready file. Sets TAIL_PID, TAIL_OUT,
# TAIL_REJ (CSV files).
start_tail() {
    local name=$1 count=$2
    shift 2
    TAIL_OUT=$TMPD/$name.sanitized.csv
    TAIL_REJ=$TMPD/$name.rejected.csv
    TAIL_ERR=$TMPD/$name.tail.log
    local ready=$TMPD/$name.tail.ready
    local count_args=()
    [ "$count" -gt 0 ] && count_args=(--count "$count")
    "$TRACESAN" tail --connect "$OUTPUT_EP" "${count_args[@]}" \
        --rejections "$TAIL_REJ" --ready-file "$ready" "$@" \
        >"$TAIL_OUT" 2>"$TAIL_ERR" </dev/null &
    TAIL_PID=$!
    background_pids+=("$TAIL_PID")
    local tries=$(( TS_START_TIMEOUT * 20 ))
    while [ ! -e "$ready" ]; do
        if ! is_running "$TAIL_PID"; then
            show_file "$TAIL_ERR"
            fatal "tracesan tail ($name) exited before creating its ready file"
        fi
        tries=$((tries - 1))
        [ $tries -gt 0 ] || fatal "tracesan tail ($name) not ready within ${TS_START_TIMEOUT}s"
        sleep 0.05
    done
}

# wait_tail NAME SECONDS: wait for tail to reach its --count; a check.
wait_tail() {
    local name=$1 secs=$2
    if wait_for_pid "$TAIL_PID" "$secs"; then
        if [ "$waited_status" -eq 0 ]; then
            pass "$name: tail received every expected message"
            return 0
        fi
        fail "$name: tail exited with status $waited_status"
        show_file "$TAIL_ERR"
        return 1
    fi
    kill -TERM "$TAIL_PID" 2>/dev/null
    wait_for_pid "$TAIL_PID" 5 || kill -KILL "$TAIL_PID" 2>/dev/null
    fail "$name: tail did not receive all messages within ${secs}s (got $(data_rows "$TAIL_OUT") sanitized, $(data_rows "$TAIL_REJ") rejected)"
    show_file "$TAIL_ERR"
    show_file "$DAEMON_LOG"
    return 1
}

# replay FILE [options...]: send a CSV to the daemon's input.
replay() {
    local file=$1
    shift
    if ! "$TRACESAN" replay --connect "$INPUT_EP" "$@" "$file" \
            2>>"$TMPD/replay.log" </dev/null; then
        show_file "$TMPD/replay.log"
        fatal "tracesan replay $file failed"
    fi
}

# replay_in_background NAME FILE [options...]: replay FILE to the daemon's
# input without waiting for it, stderr in $TMPD/NAME.replay.log. Sets
# REPLAY_PID; a replay still running at the end is killed.
replay_in_background() {
    local name=$1 file=$2
    shift 2
    "$TRACESAN" replay --connect "$INPUT_EP" "$@" "$file" \
        2>"$TMPD/$name.replay.log" </dev/null &
    REPLAY_PID=$!
    background_pids+=("$REPLAY_PID")
}

# send_raw [zmq_send_raw options...]: to the daemon's input.
send_raw() {
    if ! "$ZMQ_SEND_RAW" --connect "$INPUT_EP" "$@" 2>>"$TMPD/send_raw.log"; then
        show_file "$TMPD/send_raw.log"
        fatal "zmq_send_raw $* failed"
    fi
}

# Data rows of a CSV with a header (0 when missing or empty).
data_rows() {
    if [ -s "$1" ]; then
        echo $(( $(wc -l <"$1") - 1 ))
    else
        echo 0
    fi
}

SANITIZED_HEADER='user,ts,lat,lon,mechanism,eps_point,eps_spent,eps_remaining,profile,predicted,delta_set_size,channel_version,information_theoretic,sigma_z_m,eps_floor'
REJECTED_HEADER='user,ts,reason,profile,detail'

# Rows of the rejections CSV whose reason column is REASON (count).
count_reason() {
    awk -F, -v r="$1" 'NR > 1 && $3 == r { n++ } END { print n + 0 }' "${2:-$TAIL_REJ}"
}

# no_input_point_published INPUT.csv OUTPUT.csv: no output (lat, lon) pair
# equals any input pair at 7 decimals (the published precision). Prints the
# offending rows.
no_input_point_published() {
    awk -F, '
        FNR == 1 { next }
        NR == FNR {
            if ($3 != "" && $4 != "")
                truth[sprintf("%.7f,%.7f", $3, $4)] = 1
            next
        }
        ($3 "," $4) in truth { print "# leaked input point: " $0; bad++ }
        END { exit bad > 0 }
    ' "$1" "$2"
}

# The daemon log must not contain any coordinate string of the input: both
# the literal text in the CSV and its %.7f / %.6f renderings.
no_coordinates_in() {
    local input=$1 log=$2
    awk -F, '
        FNR == 1 { next }
        NR == FNR {
            for (i = 3; i <= 4; i++) {
                v = $i
                if (v !~ /^-?[0-9]+\.[0-9][0-9][0-9]+/) continue
                needle[v] = 1
                needle[sprintf("%.7f", v)] = 1
                needle[sprintf("%.6f", v)] = 1
                needle[sprintf("%.5f", v)] = 1
            }
            next
        }
        {
            for (n in needle)
                if (index($0, n) > 0) { print "# coordinate " n " in log: " $0; bad++ }
        }
        END { exit bad > 0 }
    ' "$input" "$log"
}

require_programs "$TRACESAND" "$TRACESAN"

# Every input (user, ts) of $FEED yields exactly one output across the
# sanitized CSV $1 and the rejected CSV $2, and nothing else appears.
one_output_per_input() {
    awk -F, '
        FNR == 1 { file++; next }
        file == 1 { want[$1 "," $2]++; next }
        { got[$1 "," $2]++ }
        END {
            for (k in want)
                if (got[k] != want[k]) { print "# input " k ": " got[k] + 0 " outputs"; bad++ }
            for (k in got)
                if (!(k in want)) { print "# output for unknown input " k; bad++ }
            exit bad > 0
        }
    ' "$FEED" "$1" "$2"
}
