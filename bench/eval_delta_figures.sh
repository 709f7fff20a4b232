#!/usr/bin/env bash
# Xiao & Xiong (CCS 2015), Figures 6 and 7 as tables, on GeoLife (issue 17):
#
#   Fig. 6     one test trajectory of 500 releases, SEEDS6 runs: |ΔX|,
#              error and drift per step (means over blocks of 25 steps),
#              pim against lm-delta;
#   Fig. 7/8   |ΔX|, drift ratio and error against epsilon (delta = 0.01)
#              and against delta (epsilon = 1), pim and lm-delta, with the
#              popular model and with personal models;
#   acceptance every window, epsilon 1, delta 0.01, popular model: mean
#              error, alpha(0.9), |ΔX| median (min) and drift ratio, the
#              issue's table.
#
# Setup (the issue's): a popular model learnt with `tracesan learn` from
# the users that are not test users (Beijing box 39.75,116.15-40.10,116.60,
# 340 m cells, 60 s tick); the test users' fixes inside the box, the first
# of each tick, cut into windows of 500 consecutive releases (a window
# spans the trace's gaps, as a user's feed does; the belief follows M^k
# across them). Every window starts as a new user. Personal models (the
# paper's Fig. 8) are learnt in-sample, from the test users' own traces,
# as the paper does; their fallback is the popular model.
#
# Usage (from a build directory, or set BUILD_DIR / TRACESAN):
#   bench/eval_delta_figures.sh [DATA.csv.gz]
# Environment:
#   FIGURES="acceptance 6 7" which tables
#   REGION=beijing|ring3|LAT_MIN,LON_MIN,LAT_MAX,LON_MAX
#                            ring3: inside Beijing's 3rd ring road, the
#                            paper's area (39.855,116.305-39.970,116.462)
#   CELL_M=340 TICK_S=60 WINDOW_STEPS=500
#   TEST_USERS=6,8,...       default: every other user of the sorted ids
#   WINDOWS=10               Fig. 7: the first window of each of the first
#                            WINDOWS test users
#   SEEDS6=20                Fig. 6 runs
#   EPSILONS="0.1 0.5 1 2 5" DELTAS="0.001 0.01 0.1 0.2"
#   MODELS="popular personal"
#   LEARN_OPTS="..."         extra `tracesan learn` options, e.g.
#                            "--smoothing uniform" (the first learner)
#   PROFILE_OPTS="k=v ..."   extra profile keys for both mechanisms, e.g.
#                            "likelihood=paper" (the paper's behaviour)
# Without the data set the script says so and exits 0. Everything derived
# from the data lives in a temporary directory removed on exit.
set -euo pipefail

BENCH=eval_delta_figures
. "$(dirname "$0")/common.sh"
data=${1:-$GEOLIFE}
figures=${FIGURES:-acceptance 6 7}
case ${REGION:-beijing} in
    beijing) region=39.75,116.15,40.10,116.60 ;;
    ring3) region=39.855,116.305,39.970,116.462 ;;
    *) region=$REGION ;;
esac
cell_m=${CELL_M:-340}
tick=${TICK_S:-60}
window_steps=${WINDOW_STEPS:-500}
windows=${WINDOWS:-10}
seeds6=${SEEDS6:-20}
epsilons=${EPSILONS:-0.1 0.5 1 2 5}
deltas=${DELTAS:-0.001 0.01 0.1 0.2}
models=${MODELS:-popular personal}
read -r -a learn_opts <<<"${LEARN_OPTS:-}"
read -r -a profile_opts <<<"${PROFILE_OPTS:-}"

need_data "$data"
need_programs "$tracesan"

scratch_dir

test_users=$(test_users "$data" 2 0)
echo "$BENCH: region $region, ${cell_m} m cells, tick $tick s, test users" \
     "$test_users" >&2

# A configuration of its own: the shipped one is edited by others, and
# only these two profiles matter here. The belief capacity holds every
# cell of the grid (exact beliefs; state is copied per release, so no
# larger).
conf=$tmp/delta.conf
capacity=$(awk -F, -v cell="$cell_m" -v box="$region" 'BEGIN {
    split(box, b, ","); pi = 3.141592653589793; r = 6371008.8
    h = (b[3] - b[1]) * pi / 180 * r; w = (b[4] - b[2]) * pi / 180 * r * cos((b[1] + b[3]) / 2 * pi / 180)
    print (int(h / cell) + 2) * (int(w / cell) + 2) }')
cat >"$conf" <<EOF
default_profile = "pim";
profiles = {
    pim = { mechanism = "pim"; model = ""; points_per_window = 1000000;
            belief_capacity = $capacity; };
    lmd = { mechanism = "lm-delta"; model = ""; points_per_window = 1000000;
            belief_capacity = $capacity; };
};
EOF

learn() { # OUT [learn options...]
    local out=$1
    shift
    "$tracesan" learn --region "$region" --cell-m "$cell_m" --tick-s "$tick" \
        "${learn_opts[@]}" "$@" --output "$out" 2>"$tmp/learn.log" ||
        { cat "$tmp/learn.log" >&2; exit 1; }
    sed -n 's/^learn: model /model /p' "$tmp/learn.log" | sed "s/^/$BENCH: /" >&2
}

# Windows: test user's fixes inside the box, first of each tick, in windows
# of WINDOW_STEPS consecutive releases named USER-N.
gzip -dc "$data" | awk -F, -v users="$test_users" -v tick="$tick" \
    -v steps="$window_steps" -v box="$region" '
    BEGIN { n = split(users, list, ","); for (i = 1; i <= n; i++) want[list[i]] = 1
            split(box, b, ","); print "user,ts,lat,lon" }
    function flush(   i) {
        if (len == steps) { w[cur]++; for (i = 1; i <= len; i++) print cur "-" w[cur] "," buf[i] }
        len = 0
    }
    NR == 1 || !($1 in want) { next }
    $3 < b[1] || $3 > b[3] || $4 < b[2] || $4 > b[4] { next }
    { k = $1 "," int($2 / tick); if (k in seen) next; seen[k] = 1
      if ($1 != cur) { flush(); cur = $1 }
      buf[++len] = $2 "," $3 "," $4; if (len == steps) flush() }
    END { flush() }' >"$tmp/windows.csv"
# Fig. 7 set: the first window of each test user, up to WINDOWS of them.
awk -F, -v max="$windows" 'NR == 1 { print; next }
    { split($1, p, "-"); if (p[2] == 1 && !(p[1] in u)) { if (n >= max) next; u[p[1]] = 1; n++ } }
    { split($1, p, "-"); if (p[2] == 1 && (p[1] in u)) print }' \
    "$tmp/windows.csv" >"$tmp/sweep.csv"
echo "$BENCH: $(($(wc -l <"$tmp/windows.csv") - 1)) test fixes in" \
     "$(awk -F, 'NR > 1 { print $1 }' "$tmp/windows.csv" | sort -u | wc -l) windows;" \
     "sweeps on $(awk -F, 'NR > 1 { print $1 }' "$tmp/sweep.csv" | sort -u | wc -l) windows" >&2
[ "$(wc -l <"$tmp/sweep.csv")" -gt 1 ] ||
    { echo "$BENCH: no window of $window_steps releases in the region" >&2; exit 1; }

learn "$tmp/popular.model" --exclude-users "$test_users" "$data"
if [[ " $models " == *" personal "* && " $figures " == *" 7 "* ]]; then
    # Personal models are looked up by pseudonym: the window names.
    { gzip -dc "$data" | awk -F, -v users="$test_users" '
          BEGIN { n = split(users, l, ","); for (i = 1; i <= n; i++) t[l[i]] = 1 }
          NR == 1 || !($1 in t) { print }'
      gzip -dc "$data" | awk -F, -v users="$test_users" -v list="$tmp/sweep.csv" '
          BEGIN { while ((getline line < list) > 0) { split(line, f, ","); split(f[1], p, "-")
                      if (f[1] != "user" && !(f[1] in seen)) { seen[f[1]] = 1; names[p[1]] = names[p[1]] " " f[1] } } }
          NR > 1 && ($1 in names) { m = split(names[$1], w, " ")
              for (i = 1; i <= m; i++) { line = $0; sub(/^[^,]*/, w[i], line); print line } }'
    } >"$tmp/personal-input.csv"
    learn "$tmp/personal.model" --per-user "$tmp/personal-input.csv"
fi

# run MODEL PROFILE EPS DELTA SEED INPUT SERIES: sanitize, replay, and
# write "step,dss,error,drifted" rows to SERIES. Fails (and leaves
# $tmp/failed, as runs go in the background) when the replayed |ΔX| differ
# from the published ones.
run() {
    run_one "$@" || { touch "$tmp/failed"; return 1; }
}
run_one() {
    local model=$1 profile=$2 eps=$3 delta=$4 seed=$5 input=$6 series=$7
    local tag=$tmp/$profile.$$.$RANDOM
    local opts=(-o "default_profile=\"$profile\""
                -o "profiles.$profile.model=\"$tmp/$model.model\""
                -o "profiles.$profile.epsilon=$eps"
                -o "profiles.$profile.delta=$delta")
    local kv
    for kv in "${profile_opts[@]}"; do
        opts+=(-o "profiles.$profile.${kv%%=*}=${kv#*=}")
    done
    "$tracesan" sanitize --config "$conf" --seed "$seed" --profile "$profile" \
        "${opts[@]}" "$input" >"$tag.out" 2>"$tag.log" ||
        { cat "$tag.log" >&2; return 1; }
    "$tracesan" eval --format csv --config "$conf" --profile "$profile" \
        "${opts[@]}" --series "$tag.series" "$input" "$tag.out" \
        >/dev/null 2>"$tag.log" || { cat "$tag.log" >&2; return 1; }
    grep -q "replayed .* dss_mismatches=0 errors=0" "$tag.log" ||
        { echo "$BENCH: replay does not match the release:" >&2
          cat "$tag.log" >&2; return 1; }
    awk -F, 'NR > 1 { print ++step[$1] "," $3 "," $4 "," $5 }' \
        "$tag.series" >"$series"
    rm -f "$tag".*
}
check_runs() {
    [ ! -e "$tmp/failed" ] || { echo "$BENCH: a run failed" >&2; exit 1; }
}

# summary SERIES: mean |ΔX|, median |ΔX|, drift ratio, mean error (km).
summary() {
    printf '%s %s' "$(awk -F, '{ n++; d += $2 } END { printf "%.0f", d / n }' "$1")" \
        "$(cut -d, -f2 "$1" | median)"
    awk -F, '{ n++; dr += $4; e += $3 } END { printf " %.4f %.1f", dr / n, e / n / 1000 }' "$1"
}

if [[ " $figures " == *" acceptance "* ]]; then
    run popular pim 1 0.01 1 "$tmp/windows.csv" "$tmp/acc.pim" &
    run popular lmd 1 0.01 1 "$tmp/windows.csv" "$tmp/acc.lmd" &
    wait
    check_runs
    echo
    echo "Acceptance: $(($(wc -l <"$tmp/windows.csv") - 1)) releases, epsilon 1, delta 0.01, popular model, seed 1"
    echo
    echo "| profile | mean error | α(0.9) | \\|ΔX\\| median (min) | mean \\|ΔX\\| | drift ratio |"
    echo "| --- | --- | --- | --- | --- | --- |"
    for profile in pim lmd; do
        a90=$(cut -d, -f3 "$tmp/acc.$profile" | sort -g |
              awk '{ v[NR] = $1 } END { i = int(0.9 * NR); if (i < 0.9 * NR) i++; printf "%.1f", v[i] / 1000 }')
        dmin=$(awk -F, 'NR == 1 || $2 < m { m = $2 } END { print m }' "$tmp/acc.$profile")
        summary "$tmp/acc.$profile" | awk -v p="$profile" -v a="$a90" -v m="$dmin" '
            { printf "| %s | %.1f km | %s km | %s (%s) | %s | %.3f |\n", p == "lmd" ? "lm-delta" : p, $4, a, $2, m, $1, $3 }'
    done
fi

if [[ " $figures " == *" 6 "* ]]; then
    # The first window of the first test user.
    first=$(awk -F, 'NR == 2 { print $1 }' "$tmp/sweep.csv")
    awk -F, -v w="$first" 'NR == 1 || $1 == w' "$tmp/sweep.csv" >"$tmp/fig6.csv"
    for profile in pim lmd; do
        for s in $(seq 1 "$seeds6"); do
            run popular "$profile" 1 0.01 "$s" "$tmp/fig6.csv" "$tmp/fig6.$profile.$s" &
            if (( s % 2 == 0 )); then wait; fi
        done
        wait
        check_runs
        for s in $(seq 1 "$seeds6"); do cat "$tmp/fig6.$profile.$s"; done >"$tmp/fig6.$profile"
    done
    echo
    echo "Fig. 6: window $first, epsilon 1, delta 0.01, popular model, $seeds6 runs;"
    echo "means over steps (|ΔX|, drift ratio, error in km)"
    echo
    echo "| steps | pim \\|ΔX\\| | lm \\|ΔX\\| | pim drift | lm drift | pim error | lm error |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    awk -F, -v block=25 '
        { b = int(($1 - 1) / block); k = FILENAME ~ /pim$/ ? "p" : "l"
          n[k, b]++; d[k, b] += $2; e[k, b] += $3; r[k, b] += $4; if (b > last) last = b }
        END { for (b = 0; b <= last; b++)
            printf "| %d-%d | %.0f | %.0f | %.3f | %.3f | %.1f | %.1f |\n", b * block + 1, (b + 1) * block,
                d["p", b] / n["p", b], d["l", b] / n["l", b], r["p", b] / n["p", b], r["l", b] / n["l", b],
                e["p", b] / n["p", b] / 1000, e["l", b] / n["l", b] / 1000 }' \
        "$tmp/fig6.pim" "$tmp/fig6.lmd"
    printf '| all | %s |\n' "$(paste -d' ' <(summary "$tmp/fig6.pim") <(summary "$tmp/fig6.lmd") |
        awk '{ printf "%s | %s | %s | %s | %s | %s", $1, $5, $3, $7, $4, $8 }')"
fi

if [[ " $figures " == *" 7 "* ]]; then
    for model in $models; do
        echo
        echo "Fig. $([ "$model" = popular ] && echo 7 || echo 8): $model model," \
             "$(awk -F, 'NR > 1 { print $1 }' "$tmp/sweep.csv" | sort -u | wc -l) windows of $window_steps, seed 1"
        echo
        echo "| epsilon | delta | pim mean \\|ΔX\\| | lm mean \\|ΔX\\| | pim median \\|ΔX\\| | lm median \\|ΔX\\| | pim drift | lm drift | pim error km | lm error km |"
        echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        settings=()
        for e in $epsilons; do settings+=("$e,0.01"); done
        for d in $deltas; do [ "$d" = 0.01 ] || settings+=("1,$d"); done
        for setting in "${settings[@]}"; do
            e=${setting%,*} d=${setting#*,}
            run "$model" pim "$e" "$d" 1 "$tmp/sweep.csv" "$tmp/sweep.pim" &
            run "$model" lmd "$e" "$d" 1 "$tmp/sweep.csv" "$tmp/sweep.lmd" &
            wait
            check_runs
            paste -d' ' <(summary "$tmp/sweep.pim") <(summary "$tmp/sweep.lmd") |
                awk -v e="$e" -v d="$d" '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                    e, d, $1, $5, $2, $6, $3, $7, $4, $8 }'
        done
    done
fi
