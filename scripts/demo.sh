#!/usr/bin/env bash
# Command one: build, start tracesand on the bundled Gowalla sample, replay
# the sample through it, print sanitized points and a summary, stop.
#
#   scripts/demo.sh [--no-build]
#
# Uses the shipped conf/tracesand.conf (ports 7001/7002 on 127.0.0.1); when
# those ports are taken it says so and uses ephemeral ports instead.
set -euo pipefail

cd "$(dirname "$0")/.."
top=$(pwd)
build_first=1
for arg in "$@"; do
    case $arg in
        --no-build) build_first=0 ;;
        -h|--help) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "demo: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

say() { printf 'demo: %s\n' "$*"; }

if [ $build_first -eq 1 ]; then
    scripts/setup.sh
fi
# Binaries: BUILD_DIR, else the current directory when run by `make demo`
# from a build tree, else ./build.
if [ -n "${BUILD_DIR:-}" ]; then
    bin=$(cd "$BUILD_DIR" && pwd)
elif [ -x "$OLDPWD/tracesand" ] && [ -x "$OLDPWD/tracesan" ]; then
    bin=$OLDPWD
else
    bin=$top/build
fi
for p in tracesand tracesan; do
    [ -x "$bin/$p" ] || { say "$bin/$p is not built: run scripts/setup.sh"; exit 1; }
done

conf=$top/conf/tracesand.conf
sample=$top/data/sample/gowalla-nyc-sample.csv
rows=$(( $(wc -l <"$sample") - 1 ))

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tracesan-demo.XXXXXX")
daemon_pid=""
tail_pid=""
cleanup() {
    [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The embedded LMDB store holds the budget ledger: every debit is committed
# before the point that spends it is published (invariant 2). The demo keeps
# it in its temporary directory; production uses /var/lib/tracesand.
mkdir -p "$tmp/state"
store=(-o "state.dir=$tmp/state")
# The bundled trace is from 2010: the shipped bound on backdated updates
# (input.max_backdate_s, one day) would reject all of it as too_old, which
# is what a live feed wants and a replay of history does not.
store+=(-o 'input.max_backdate_s=0')
overrides=()
busy=""
for port in 7001 7002; do
    port_busy "$port" && busy="$busy $port"
done
if [ -n "$busy" ]; then
    say "port(s)$busy on 127.0.0.1 already in use (another tracesand?);"
    say "using ephemeral ports instead of the shipped 7001/7002"
    overrides=(-o 'input.endpoint=tcp://127.0.0.1:*' -o 'output.endpoint=tcp://127.0.0.1:*')
fi

# start_daemon [-o ...]: sets daemon_pid and ready ("INPUT OUTPUT"), or
# leaves ready empty when the daemon exited or never became ready.
start_daemon() {
    say "starting $bin/tracesand -c conf/tracesand.conf $*"
    "$bin/tracesand" -c "$conf" "$@" 2>"$tmp/daemon.log" </dev/null &
    daemon_pid=$!
    ready=""
    for _ in $(seq 200); do
        # The log may not exist yet: the shell creates it in the background.
        ready=$(sed -n 's/.*ready input=\([^ ]*\) output=\([^ ]*\).*/\1 \2/p' \
                    "$tmp/daemon.log" 2>/dev/null | head -n 1 || true)
        [ -n "$ready" ] && return
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.05
    done
    say "tracesand did not become ready; its log:"
    sed 's/^/    /' "$tmp/daemon.log"
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
}

start_daemon "${store[@]}" "${overrides[@]}"
if [ -z "$ready" ] && [ ${#overrides[@]} -eq 0 ]; then
    # Lost a race for the shipped ports: one more try on ephemeral ports.
    say "retrying on ephemeral ports"
    start_daemon "${store[@]}" -o 'input.endpoint=tcp://127.0.0.1:*' -o 'output.endpoint=tcp://127.0.0.1:*'
fi
[ -n "$ready" ] || exit 1
input_ep=${ready% *}
output_ep=${ready#* }
say "tracesand ready: input $input_ep, output $output_ep"

"$bin/tracesan" tail --connect "$output_ep" --count "$rows" --timeout 30 \
    --rejections "$tmp/rejected.csv" --ready-file "$tmp/tail.ready" \
    >"$tmp/sanitized.csv" 2>"$tmp/tail.log" </dev/null &
tail_pid=$!
for _ in $(seq 200); do
    [ -e "$tmp/tail.ready" ] && break
    kill -0 "$tail_pid" 2>/dev/null || break
    sleep 0.05
done
[ -e "$tmp/tail.ready" ] || { say "tracesan tail did not connect"; cat "$tmp/tail.log"; exit 1; }

say "replaying $rows check-ins of data/sample/gowalla-nyc-sample.csv"
"$bin/tracesan" replay --connect "$input_ep" "$sample" 2>"$tmp/replay.log"
sed 's/^/demo: /' "$tmp/replay.log"

status=0
for _ in $(seq 1200); do
    kill -0 "$tail_pid" 2>/dev/null || break
    sleep 0.05
done
if kill -0 "$tail_pid" 2>/dev/null; then
    say "tail did not receive all $rows messages within 60 s"
    kill "$tail_pid"
    status=1
fi
wait "$tail_pid" || status=1
tail_pid=""

kill -TERM "$daemon_pid"
daemon_status=0
wait "$daemon_pid" || daemon_status=$?
daemon_pid=""
if [ $daemon_status -ne 0 ]; then
    say "tracesand exited with status $daemon_status"
    status=1
fi

sanitized=$(( $(wc -l <"$tmp/sanitized.csv") - 1 ))
touch "$tmp/rejected.csv"
rejected=$(awk 'NR > 1 || $0 != "user,ts,reason,profile,detail"' "$tmp/rejected.csv" | wc -l)

echo
echo "First sanitized points (lat/lon are noisy; eps in 1/m):"
head -n 11 "$tmp/sanitized.csv" | awk -F, '
    { printf "  %-8s %-14s %-11s %-12s %-9s %-14s %-14s %s\n", $1, $2, $3, $4, $5, $6, $7, $8 }'

echo
echo "Counts: $rows check-ins in, $sanitized sanitized, $rejected rejected"
if [ "$rejected" -gt 0 ]; then
    awk -F, '$0 != "user,ts,reason,profile,detail" { n[$3]++ } END { for (r in n) printf "  rejected %-22s %d\n", r, n[r] }' \
        "$tmp/rejected.csv" | sort
fi

# Distance between each true check-in and its sanitized point, joined by
# (user, ts); the planar Laplace radius has mean 2/eps_point.
awk -F, '
    function rad(d) { return d * 3.141592653589793 / 180 }
    function haversine(lat1, lon1, lat2, lon2,    a, s1, s2) {
        s1 = sin(rad(lat2 - lat1) / 2); s2 = sin(rad(lon2 - lon1) / 2)
        a = s1 * s1 + cos(rad(lat1)) * cos(rad(lat2)) * s2 * s2
        return 2 * 6371008.8 * atan2(sqrt(a), sqrt(1 - a))
    }
    FNR == 1 { next }
    NR == FNR { truth[$1 "," $2] = $3 "," $4; next }
    ($1 "," $2) in truth {
        split(truth[$1 "," $2], t, ",")
        print haversine(t[1], t[2], $3, $4), ($6 > 0 ? 1 / $6 : "")
    }
' "$sample" "$tmp/sanitized.csv" | sort -n >"$tmp/distances"
if [ -s "$tmp/distances" ]; then
    awk '{ d[NR] = $1; sum += $1; if ($2 != "") { theory += $2; paid++ } }
         END {
             median = (NR % 2) ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2
             printf "Distance true -> sanitized over %d points: mean %.0f m, median %.0f m", NR, sum / NR, median
             # Radius ~ Gamma(2, 1/eps): mean 2/eps, median 1.678347/eps.
             if (paid) printf "\n  (theory for planar Laplace: mean 2/eps_point = %.0f m, median 1.678/eps_point = %.0f m)", 2 * theory / paid, 1.678347 * theory / paid
             printf "\n"
         }' "$tmp/distances"
fi

echo
echo "Daemon summary:"
sed -n '/summary updates=/,$p' "$tmp/daemon.log" | sed 's/^/  /'
echo
echo "Durable budget ledger (tracesan state --dir STATE stats):"
"$bin/tracesan" state --dir "$tmp/state" stats 2>&1 | sed 's/^/  /' || true

if [ $status -eq 0 ] && [ $((sanitized + rejected)) -eq "$rows" ]; then
    echo
    say "done: every check-in produced exactly one sanitized point or rejection"
else
    say "FAILED (see above)"
    status=1
fi
exit $status
