#!/usr/bin/env bash
# Command one: build, start tracesand on the bundled Gowalla sample, send
# the sample through every shipped profile side by side, print one table
# (what each profile guarantees, what it released and rejected, its error
# and its spend), draw the error CDFs, stop.
#
#   scripts/demo.sh [--quick] [--no-build] [--keep-running]
#
#   --quick         the geoind profile alone, its first points, its error
#                   next to theory, and the durable ledger
#   --no-build      skip the package and build step (make demo)
#   --keep-running  leave the daemon and its dashboard up until Ctrl-C
#
# Uses the shipped conf/tracesand.conf (ports 7001/7002 and the dashboard
# on 9107, on 127.0.0.1); when one is taken it says so and uses free ports.
# Environment: BUILD_DIR (the programs), DEMO_OUT (where the figure goes,
# default BUILD_DIR/demo), DEMO_FREE_PORTS=1 (free ports from the start).
set -euo pipefail

cd "$(dirname "$0")/.."
top=$(pwd)
build_first=1
quick=0
keep_running=0
for arg in "$@"; do
    case $arg in
        --quick) quick=1 ;;
        --no-build) build_first=0 ;;
        --keep-running) keep_running=1 ;;
        -h|--help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
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
free_ports=(-o 'input.endpoint=tcp://127.0.0.1:*' -o 'output.endpoint=tcp://127.0.0.1:*'
            -o 'http.listen=127.0.0.1:0')

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
if [ "${DEMO_FREE_PORTS:-0}" = 1 ]; then
    overrides=("${free_ports[@]}")
else
    busy=""
    for port in 7001 7002 9107; do
        port_busy "$port" && busy="$busy $port"
    done
    if [ -n "$busy" ]; then
        say "port(s)$busy on 127.0.0.1 already in use (another tracesand?);"
        say "using free ports instead of the shipped 7001/7002/9107"
        overrides=("${free_ports[@]}")
    fi
fi

# start_daemon [-o ...]: sets daemon_pid and ready ("INPUT OUTPUT HTTP"),
# or leaves ready empty when the daemon exited or never became ready.
start_daemon() {
    say "starting $bin/tracesand -c conf/tracesand.conf $*"
    "$bin/tracesand" -c "$conf" "$@" 2>"$tmp/daemon.log" </dev/null &
    daemon_pid=$!
    ready=""
    for _ in $(seq 200); do
        # The log may not exist yet: the shell creates it in the background.
        ready=$(sed -n 's/.*ready input=\([^ ]*\) output=\([^ ]*\) http=\([^ ]*\).*/\1 \2 \3/p' \
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

# run_daemon [-o ...]: start_daemon with the store and port overrides, one
# more try on free ports after a lost race for the shipped ones.
run_daemon() {
    start_daemon "${store[@]}" "${overrides[@]}" "$@"
    if [ -z "$ready" ] && [ ${#overrides[@]} -eq 0 ]; then
        say "retrying on free ports"
        start_daemon "${store[@]}" "${free_ports[@]}" "$@"
    fi
    [ -n "$ready" ] || exit 1
    read -r input_ep output_ep http_ep <<<"$ready"
    dashboard_url="http://$http_ep/"
    say "tracesand ready: input $input_ep, output $output_ep"
    say "dashboard (live while the daemon runs): $dashboard_url"
}

# feed_through TRACE COUNT: tail the output for COUNT outcomes, replay
# TRACE into the input, wait for all of them; sanitized.csv and
# rejected.csv in $tmp. Sets status=1 when they did not all arrive.
feed_through() {
    local trace=$1 count=$2
    # --timeout is tail's idle limit: generous, since the daemon publishes
    # a group of messages only once it has processed all of it (slow
    # under the sanitizers).
    "$bin/tracesan" tail --connect "$output_ep" --count "$count" --timeout 120 \
        --topic sanitized. --topic rejected \
        --rejections "$tmp/rejected.csv" --ready-file "$tmp/tail.ready" \
        >"$tmp/sanitized.csv" 2>"$tmp/tail.log" </dev/null &
    tail_pid=$!
    for _ in $(seq 200); do
        [ -e "$tmp/tail.ready" ] && break
        kill -0 "$tail_pid" 2>/dev/null || break
        sleep 0.05
    done
    [ -e "$tmp/tail.ready" ] || { say "tracesan tail did not connect"; cat "$tmp/tail.log"; exit 1; }
    "$bin/tracesan" replay --connect "$input_ep" "$trace" 2>"$tmp/replay.log"
    sed 's/^/demo: /' "$tmp/replay.log"
    for _ in $(seq 3000); do
        kill -0 "$tail_pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$tail_pid" 2>/dev/null; then
        say "tail did not receive all $count messages within 150 s"
        kill "$tail_pid"
        status=1
    fi
    if ! wait "$tail_pid"; then
        say "tracesan tail failed; its log:"
        sed 's/^/    /' "$tmp/tail.log"
        status=1
    fi
    tail_pid=""
    touch "$tmp/rejected.csv"
}

# stop_daemon: SIGTERM (after Ctrl-C with --keep-running); status=1 unless
# it exits 0.
stop_daemon() {
    if [ $keep_running -eq 1 ]; then
        say "the daemon keeps running: $dashboard_url (Ctrl-C stops it)"
        local interrupted=0
        trap 'interrupted=1' INT
        while [ $interrupted -eq 0 ] && kill -0 "$daemon_pid" 2>/dev/null; do
            sleep 1 || true
        done
        trap 'exit 130' INT
        # A Ctrl-C at the terminal reaches the daemon too, which then shuts
        # down by itself; a SIGTERM in the middle of that would kill it.
        for _ in $(seq 60); do
            kill -0 "$daemon_pid" 2>/dev/null || break
            sleep 0.05
        done
    fi
    kill -TERM "$daemon_pid" 2>/dev/null || true
    local daemon_status=0
    wait "$daemon_pid" || daemon_status=$?
    daemon_pid=""
    if [ $daemon_status -ne 0 ]; then
        say "tracesand exited with status $daemon_status"
        status=1
    fi
}

# The haversine distance between each true check-in and its sanitized
# point, joined by (user, ts): "profile distance eps_point" per point.
distances() { # TRUTH SANITIZED
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
            print $9, haversine(t[1], t[2], $3, $4), $6
        }
    ' "$1" "$2"
}

rejected_rows() { awk 'NR > 1 || $0 != "user,ts,reason,profile,detail"' "$1" | wc -l; }

# ---------------------------------------------------------------- --quick
run_quick() {
    run_daemon
    feed_through "$sample" "$rows"
    stop_daemon

    local sanitized rejected
    sanitized=$(( $(wc -l <"$tmp/sanitized.csv") - 1 ))
    rejected=$(rejected_rows "$tmp/rejected.csv")

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

    distances "$sample" "$tmp/sanitized.csv" | sort -k2,2n >"$tmp/distances"
    if [ -s "$tmp/distances" ]; then
        awk '{ d[NR] = $2; sum += $2; if ($3 > 0) { theory += 1 / $3; paid++ } }
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
}

# ------------------------------------------------------- every profile
# The sample's box, for the model, the channel and the PRIVIC grid (the
# shipped privic profile covers San Francisco).
BOX=40.55,-74.27,40.93,-73.68

run_all() {
    local out=${DEMO_OUT:-$bin/demo}
    mkdir -p "$out"
    say "learning a Markov mobility model of the sample for pim and lm-delta (tracesan learn)"
    "$bin/tracesan" learn --region "$BOX" --cell-m 3000 --tick-s 3600 \
        --max-speed-kmh 40 --output "$tmp/nyc.model" "$sample" 2>"$tmp/learn.log" ||
        { cat "$tmp/learn.log"; say "tracesan learn failed"; exit 1; }
    sed -n 's/^learn: \(model .*\) read=.*/demo:   \1/p' "$tmp/learn.log"
    say "optimizing an identity-protecting channel of the sample for mi-channel (tracesan optimize)"
    "$bin/tracesan" optimize --region "$BOX" --cell-m 3000 --distortion-m 3000 \
        -o "$tmp/nyc.channel" "$sample" 2>"$tmp/optimize.log" ||
        { cat "$tmp/optimize.log"; say "tracesan optimize failed"; exit 1; }
    sed -n 's/^optimize: \(cells=.*\)/demo:   \1/p; s/^optimize: \(mi_bits=.*\) bytes=.*/demo:   \1/p' "$tmp/optimize.log"
    say "(both are fitted to the sample itself, i.e. evaluated in-sample: docs/evaluation.md)"

    run_daemon -o "profiles.pim.model=\"$tmp/nyc.model\"" \
        -o "profiles.lm-delta.model=\"$tmp/nyc.model\"" \
        -o "profiles.mi-channel.channel=\"$tmp/nyc.channel\"" \
        -o "profiles.privic.region=\"$BOX\""
    if grep -q "is disabled" "$tmp/daemon.log"; then
        grep "is disabled" "$tmp/daemon.log" | sed 's/^/demo:   /'
        say "a shipped profile is disabled: every profile must run"
        exit 1
    fi
    # The profiles the daemon runs, from its dashboard's configuration.
    local profiles
    profiles=$(curl -s --max-time 5 "${dashboard_url}dashboard.json" |
               python3 -c 'import json, sys; print(" ".join(json.load(sys.stdin)["profiles"]))') ||
        { say "cannot read ${dashboard_url}dashboard.json"; exit 1; }
    local n_profiles
    n_profiles=$(wc -w <<<"$profiles")
    say "profiles: $profiles"

    # One trace: each profile gets the whole sample under its own user ids
    # (PROFILE/USER, so no user switches profile), all in time order.
    awk -F, -v profiles="$profiles" '
        BEGIN { n = split(profiles, p, " "); print "user,ts,lat,lon,profile" }
        NR > 1 { for (i = 1; i <= n; i++) print p[i] "/" $1 "," $2 "," $3 "," $4 "," p[i] }
    ' "$sample" | { IFS= read -r header; echo "$header"; sort -t, -k2,2n -s; } >"$tmp/all.csv"
    say "replaying $rows check-ins x $n_profiles profiles = $((rows * n_profiles)) updates"
    feed_through "$tmp/all.csv" $((rows * n_profiles))
    stop_daemon

    # Guarantees: each mechanism's own summary line, from tracesand --help.
    "$bin/tracesand" --help 2>&1 |
        sed -n '/^Mechanisms/,$s/^  \([a-z][a-z-]*\): \(.*\)$/\1\t\2/p' >"$tmp/guarantees"

    distances "$tmp/all.csv" "$tmp/sanitized.csv" >"$tmp/distances"
    {
        printf '%-19s %-11s %8s %8s %10s %10s %9s  %s\n' profile mechanism released \
            rejected "mean m" "median m" "ε/user" guarantee
        for p in $profiles; do
            local mechanism released rejected mean median spent guarantee
            mechanism=$(awk -F, -v p="$p" 'NR > 1 && $9 == p { print $5; exit }' "$tmp/sanitized.csv")
            released=$(awk -F, -v p="$p" 'NR > 1 && $9 == p { n++ } END { print n + 0 }' "$tmp/sanitized.csv")
            rejected=$(awk -F, -v p="$p" 'NR > 1 && $4 == p { n++ } END { print n + 0 }' "$tmp/rejected.csv")
            read -r mean median < <(awk -v p="$p" '$1 == p { print $2 }' "$tmp/distances" | sort -n |
                awk '{ d[NR] = $1; s += $1 }
                     END { if (NR == 0) { print "- -"; exit }
                           m = (NR % 2) ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2
                           printf "%.0f %.0f\n", s / NR, m }')
            spent=$(awk -v p="$p" -v users="$(cut -d, -f1 "$sample" | sed 1d | sort -u | wc -l)" \
                '$1 == p { s += $3 } END { printf "%.4g", s / users }' "$tmp/distances")
            guarantee=$(awk -F'\t' -v m="$mechanism" '$1 == m { print $2; exit }' "$tmp/guarantees")
            printf '%-19s %-11s %8s %8s %10s %10s %9s  %s\n' "$p" "${mechanism:--}" "$released" \
                "$rejected" "$mean" "$median" "$spent" "${guarantee:--}"
        done
    } >"$out/profiles.txt"
    echo
    echo "Every shipped profile on the same $rows check-ins of $(cut -d, -f1 "$sample" | sed 1d | sort -u | wc -l) users:"
    sed 's/^/  /' "$out/profiles.txt"
    echo "  (error: true check-in to released point; ε/user: the eps_point of the released"
    echo "   points summed per user, in the profile's own budget unit (docs/configuration.md);"
    echo "   guarantee: the mechanism's summary in tracesand --help, its docs say exactly what it proves)"

    echo
    if "$bin/tracesan" eval --plot "$out/error-cdf.png" --plot-size 1100x600 \
            "$tmp/all.csv" "$tmp/sanitized.csv" >"$out/eval.txt" 2>"$tmp/eval.log"; then
        say "figure: $out/error-cdf.png (error CDF per profile; tracesan eval --plot)"
    else
        sed 's/^/demo:   /' "$tmp/eval.log"
        say "tracesan eval --plot failed"
        status=1
    fi
    echo
    echo "Daemon summary:"
    sed -n '/summary updates=/,$p' "$tmp/daemon.log" | sed 's/^/  /'

    # Exactly one outcome per check-in and profile.
    local bad
    bad=$(awk -F, '
        FILENAME == ARGV[1] { if (FNR > 1) want[$1 "," $2]++; next }
        FNR == 1 { next }
        { got[$1 "," $2]++ }
        END {
            for (k in want) if (got[k] != want[k]) { split(k, u, "/"); bad[u[1]]++ }
            for (k in got) if (!(k in want)) { split(k, u, "/"); bad[u[1]]++ }
            for (p in bad) printf "%s(%d) ", p, bad[p]
        }' "$tmp/all.csv" "$tmp/sanitized.csv" "$tmp/rejected.csv")
    echo
    if [ $status -eq 0 ] && [ -z "$bad" ]; then
        say "done: in each of the $n_profiles profiles, every check-in produced exactly one sanitized point or rejection"
    else
        [ -z "$bad" ] || say "check-ins without exactly one outcome, by profile: $bad"
        say "FAILED (see above)"
        status=1
    fi
}

status=0
if [ $quick -eq 1 ]; then
    run_quick
else
    run_all
fi
exit $status
