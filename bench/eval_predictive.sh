#!/usr/bin/env bash
# The predictive mechanism against the independent one on real traces, in
# the setting of Section 5 of Chatzikokolakis, Palamidessi & Stronati
# (PETS 2014): GeoLife, query sampling with jump probability p = 0, 0.5, 1
# (10 samplings each), r* = 100 m, eps* = ln 10, daily budget window.
#
#   fixed rate 3.3 %:   predictive-rate    vs independent-rate (30 points)
#   fixed utility 3 km: predictive-utility vs independent-utility (geoind
#                       with the largest share that keeps alpha(0.9) <= 3 km:
#                       floor(eps * 3000 / c_N(0.9)) = 17 points a window)
# plus both predictive profiles with the paper's time-based skip (0.5 km/h).
#
# Usage (from a build directory, or set BUILD_DIR / TRACESAN):
#   bench/eval_predictive.sh [DATA.csv.gz]
# Default data: ../shared/data/geolife-beijing-20users.csv.gz next to the
# source tree; when it is absent the script says so and exits 0. Everything
# derived from the data lives in a temporary directory removed on exit
# (GeoLife may not be redistributed). SAMPLINGS=N changes the 10.
set -euo pipefail

BENCH=eval_predictive
. "$(dirname "$0")/common.sh"
data=${1:-$GEOLIFE}
samplings=${SAMPLINGS:-10}
conf=$srcdir/conf/tracesand.conf

need_data "$data"
need_programs "$tracesan"
for cmd in sample eval; do
    "$tracesan" "$cmd" --help >/dev/null 2>&1 ||
        { echo "eval_predictive: $tracesan has no '$cmd' command" >&2; exit 1; }
done

scratch_dir

# name|extra sanitize arguments
runs=(
    "predictive-rate|--profile predictive-rate"
    "independent-rate|--profile independent-rate"
    "predictive-utility|--profile predictive-utility"
    "independent-utility|--profile independent-utility -o profiles.independent-utility.mechanism=geoind -o profiles.independent-utility.points_per_window=17"
    "predictive-rate+skip|--profile predictive-rate -o profiles.predictive-rate.skip_speed_kmh=0.5"
    "predictive-utility+skip|--profile predictive-utility -o profiles.predictive-utility.skip_speed_kmh=0.5"
)

results=$tmp/results.csv
echo "p,sampling,run,user,n,dropped,mean_err_m,alpha90_m,pred_rate,rho,windows,exhausted,covered" >"$results"
for p in 0.0 0.5 1.0; do
    for s in $(seq 1 "$samplings"); do
        "$tracesan" sample --seed "$s" --p "$p" "$data" >"$tmp/sample.csv" 2>"$tmp/sample.log"
        for entry in "${runs[@]}"; do
            name=${entry%%|*}
            # shellcheck disable=SC2086 # the arguments are split on purpose
            "$tracesan" sanitize --config "$conf" --seed "$s" ${entry#*|} \
                "$tmp/sample.csv" >"$tmp/out.csv" 2>"$tmp/sanitize.log" ||
                { cat "$tmp/sanitize.log" >&2; exit 1; }
            "$tracesan" eval --format csv "$tmp/sample.csv" "$tmp/out.csv" \
                2>"$tmp/eval.log" | awk -F, -v p="$p" -v s="$s" -v r="$name" \
                '$1 == "(all)" { print p "," s "," r "," $0 }' >>"$results"
        done
    done
    echo "p = $p: $samplings samplings done" >&2
done

# Means over samplings (each sampling weighs the same); `covered` is the
# mean over all exhausted windows of all samplings; pts/budget = 1 / rho.
awk -F, -v samplings="$samplings" '
    NR == 1 { next }
    {
        k = $1 SUBSEP $3
        cnt[k]++; n[k] += $5; dropped[k] += $6
        err[k] += $7; a90[k] += $8; rho[k] += $10
        if ($9 != "-") { pr[k] += $9; prn[k]++ }
        win[k] += $11; exh[k] += $12
        if ($13 != "-") covered[k] += $13 * $12
    }
    function val(k, what) {
        if (what == "n") return sprintf("%.0f", n[k] / cnt[k])
        if (what == "dropped") return sprintf("%.0f", dropped[k] / cnt[k])
        if (what == "err") return sprintf("%.0f", err[k] / cnt[k])
        if (what == "a90") return sprintf("%.0f", a90[k] / cnt[k])
        if (what == "pr") return prn[k] ? sprintf("%.3f", pr[k] / prn[k]) : "-"
        if (what == "rho") return sprintf("%.4f", rho[k] / cnt[k])
        if (what == "ppb") return sprintf("%.1f", cnt[k] / rho[k])
        if (what == "exh") return sprintf("%.1f", exh[k] / cnt[k])
        if (what == "win") return sprintf("%.1f", win[k] / cnt[k])
        if (what == "cov") return exh[k] ? sprintf("%.1f", covered[k] / exh[k]) : "-"
    }
    function table(p, title, a, b, c, metrics, labels,   m, i, nm) {
        printf "\n  %s\n", title
        printf "  %-34s %20s %20s %24s\n", "", a, b, c
        nm = split(metrics, m, " ")
        split(labels, lab, ";")
        for (i = 1; i <= nm; i++)
            printf "  %-34s %20s %20s %24s\n", lab[i], val(p SUBSEP a, m[i]), \
                val(p SUBSEP b, m[i]), val(p SUBSEP c, m[i])
    }
    END {
        split("0.0 0.5 1.0", ps, " ")
        for (j = 1; j <= 3; j++) {
            p = ps[j]
            printf "\n=== p = %s (jump probability), means over %d samplings ===\n", p, samplings
            table(p, "fixed rate 3.3 %", "predictive-rate", "independent-rate", "predictive-rate+skip",
                  "err a90 pr rho n dropped",
                  "mean error (m);alpha(0.9) (m);prediction rate;rho (budget per point);points sanitized per sampling;points dropped (exhausted)")
            table(p, "fixed utility alpha = 3 km", "predictive-utility", "independent-utility", "predictive-utility+skip",
                  "cov exh win ppb err a90 pr rho",
                  "points covered before exhaustion;exhausted windows per sampling;windows per sampling;points per budget (1/rho);mean error (m);alpha(0.9) (m);prediction rate;rho (budget per point)")
        }
    }' "$results"
