#!/usr/bin/env bash
# PRIVIC (Biswas & Palamidessi) against the paper's San Francisco figures,
# on the paper's grid (24 x 17 cells over 37.7228,-122.5153 ..
# 37.7946,-122.3789, the shipped `privic` profile) with the Cabspotting
# taxis as the population (the paper used Gowalla check-ins in that box):
#
#   Fig. 3     BA (the channel for the true distribution) against planar
#              Laplace at the same level (eps = 2 beta per km), and
#              against Laplace followed by BA (issue 24's option (a):
#              randomising the cell with Laplace before the channel), each
#              estimated by IBU from a uniform start: EMD to the truth in
#              metres and in grid cells, and the mean distance from the
#              true cell to the report, for each beta in BETAS, mean over
#              SEEDS seeds, with `tracesan privic --compare-laplace`. Also
#              BA stopped after BA_EARLY plain steps (ba_max_steps; the
#              paper reports 5 BA iterations a cycle on SF), still 2 beta
#              metric-private between cell centres.
#   Loop       the PRIVIC loop (Figs. 8-9) against its control, at each
#              beta in LOOP_BETAS (default 1.0), CYCLES cycles of
#              CYCLE_REPORTS reports (default 8 x 15,000), mean over
#              LOOP_SEEDS seeds, with `tracesan privic`:
#                loop     Algorithm 1 with BA stopped after LOOP_BA_STEPS
#                         plain steps (ba_max_steps, default 5: the
#                         paper's SF setting);
#                control  the same with BA never re-fitted
#                         (`tracesan privic --control`);
#                loop-conv, control-conv  the same with BA converged;
#                laplace  geoind with density = true at eps = 2 beta in
#                         the same loop (its channel is fixed).
#              IBU runs IBU_STEPS steps a cycle (ibu_max_steps; default 0:
#              to 1e-6, at most 2000), always from the previous estimate.
#              Columns: EMD to the PMF of every row the loop is given, in
#              metres at cycles 1, 2, 4 and the last, in grid cells at the
#              first and last, and how much it fell.
#
# Rows are shuffled with a fixed seed (SHUFFLE_SEED, default 1; a
# Lehmer generator in awk, so every awk gives the same order) so that a
# cycle sees the population, not one cab's morning. ROWS (default 123025,
# the paper's SF check-in count; 0 = all) rows of the shuffle are used for
# Fig. 3.
#
# Usage (from a build directory, or set BUILD_DIR / TRACESAN):
#   bench/eval_privic.sh [DATA.csv.gz]
# Default data: ../shared/data/cabspotting-sf-35cabs.csv.gz next to the
# source tree; when it is absent, the bundled Gowalla New York sample with
# the region set to its bounding box (a smoke run, not the paper's
# setting). Everything derived from the data lives in a temporary
# directory removed on exit (Cabspotting may not be redistributed).
# Environment: BETAS, SEEDS (default 3), BA_EARLY (default 5; 0 = skip),
# LOOP_BETAS, LOOP_SEEDS (default 3), CYCLE_REPORTS, CYCLES, LOOP_BA_STEPS,
# IBU_STEPS, ROWS, SHUFFLE_SEED, JOBS (parallel runs, default the number of
# cores). BETAS="" or LOOP_BETAS="" skips that part.
set -euo pipefail

BENCH=eval_privic
. "$(dirname "$0")/common.sh"
data=${1:-$srcdir/../shared/data/cabspotting-sf-35cabs.csv.gz}
betas=${BETAS-0.2 0.4 0.6 0.8 1.0 1.5 2.0 3.0 5.0}
seeds=${SEEDS:-3}
ba_early=${BA_EARLY:-5}
loop_betas=${LOOP_BETAS-1.0}
loop_seeds=${LOOP_SEEDS:-3}
cycle_reports=${CYCLE_REPORTS:-15000}
cycles=${CYCLES:-8}
loop_ba_steps=${LOOP_BA_STEPS:-5}
ibu_steps=${IBU_STEPS:-0}
rows=${ROWS:-123025}
shuffle_seed=${SHUFFLE_SEED:-1}
jobs=${JOBS:-$(nproc)}
conf=$srcdir/conf/tracesand.conf
region=37.7228,-122.5153,37.7946,-122.3789

need_programs "$tracesan"
scratch_dir

if [ -f "$data" ]; then
    source_name=$data
else
    echo "eval_privic: $data not found; using the bundled Gowalla sample" \
         "(a smoke run: not the paper's city)" >&2
    data=$srcdir/data/sample/gowalla-nyc-sample.csv
    source_name=$data
    region=$(awk -F, 'NR > 1 { if (n++ == 0) { a = c = $3; b = d = $4 }
        if ($3 < a) a = $3; if ($3 > c) c = $3; if ($4 < b) b = $4; if ($4 > d) d = $4 }
        END { printf "%.6f,%.6f,%.6f,%.6f", a, b, c, d }' "$data")
fi
profile=(--config "$conf" --profile privic -o "profiles.privic.region=\"$region\"")

# Inside the box, then shuffled: key = a Lehmer (minstd) stream, exact in
# doubles, sorted numerically.
gzip -dcf "$data" | awk -F, -v box="$region" -v seed="$shuffle_seed" '
    BEGIN { split(box, b, ","); s = seed }
    NR == 1 { next }
    $3 >= b[1] && $3 <= b[3] && $4 >= b[2] && $4 <= b[4] {
        s = (s * 48271) % 2147483647; printf "%010d\t%s\n", s, $0 }' |
    sort -s -k1,1 | cut -f2- | { echo "user,ts,lat,lon"; cat; } >"$tmp/all.csv"
in_box=$(($(wc -l <"$tmp/all.csv") - 1))
if [ "$rows" -gt 0 ] && [ "$rows" -lt "$in_box" ]; then
    head -n $((rows + 1)) "$tmp/all.csv" >"$tmp/fig3.csv"
else
    cp "$tmp/all.csv" "$tmp/fig3.csv"
fi
fig3_rows=$(($(wc -l <"$tmp/fig3.csv") - 1))
loop_rows=$((cycle_reports * cycles))
head -n $((loop_rows + 1)) "$tmp/all.csv" >"$tmp/loop.csv"
echo "eval_privic: $source_name: $in_box rows in the box $region (shuffle" \
     "seed $shuffle_seed); Fig. 3 on $fig3_rows, the loop on" \
     "$(($(wc -l <"$tmp/loop.csv") - 1))" >&2

# run_one OUT ARGS...: one tracesan privic run, its stdout to OUT, its
# log beside it; the wall time in OUT.time.
run_one() {
    local out=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    "$tracesan" privic "${profile[@]}" "$@" >"$out" 2>"$out.log" ||
        { echo "eval_privic: failed: tracesan privic $*" >&2; cat "$out.log" >&2; return 1; }
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$out.time"
}

# At most $jobs runs at a time; any failure fails the script.
pids=()
spawn() {
    if [ "${#pids[@]}" -ge "$jobs" ]; then
        wait "${pids[0]}" || exit 1
        pids=("${pids[@]:1}")
    fi
    run_one "$@" &
    pids+=($!)
}
wait_all() {
    for p in "${pids[@]}"; do wait "$p" || exit 1; done
    pids=()
}

start=$(date +%s)
# ------------------------------------------------------------- Fig. 3
# BETAS="" or LOOP_BETAS="" skips that part.
for b in $betas; do
    for s in $(seq 1 "$seeds"); do
        spawn "$tmp/cmp.$b.$s.csv" --seed "$s" -o "profiles.privic.beta=$b" \
            --compare-laplace "$tmp/fig3.csv"
        if [ "$ba_early" -gt 0 ]; then
            spawn "$tmp/cmpe.$b.$s.csv" --seed "$s" -o "profiles.privic.beta=$b" \
                -o "profiles.privic.ba_max_steps=$ba_early" \
                --compare-laplace "$tmp/fig3.csv"
        fi
    done
done
wait_all
fig3_s=$(($(date +%s) - start))

[ -z "$betas" ] || {
echo "Fig. 3: EMD between the true PMF and its IBU estimate, $fig3_rows" \
     "reports, mean over $seeds seeds, every mechanism at eps = 2 beta per km"
echo "  ba: BA for the true PMF (eps d + eps_floor on true points);" \
     "laplace: planar Laplace (eps d, geoind with density = true);"
echo "  lap+ba: Laplace at eps, then BA from the cell it lands in (option (a)" \
     "of issue 24: eps d, no floor); ba${ba_early}it: BA stopped after" \
     "$ba_early plain steps (ba_max_steps)"
printf "%6s %6s | %8s %8s %8s %8s | %6s %6s %6s %6s | %7s %7s %7s %7s | %8s\n" \
    beta eps_km ba_m lap_m lap+ba_m "ba${ba_early}it_m" ba_c lap_c lap+ba_c \
    "ba${ba_early}_c" ba_err lap_err lpba_err "ba${ba_early}err" ba/lap
for b in $betas; do
    # columns: mechanism beta emd_true_m ibu_iterations emd_true_cells mean_error_m
    cat "$tmp"/cmp."$b".*.csv | awk -F, '$1 != "mechanism" {
            m[$1] += $3; c[$1] += $5; e[$1] += $6; k[$1]++ }
        END { for (x in k) printf "%s %.1f %.3f %.0f\n", x, m[x] / k[x],
                  c[x] / k[x], e[x] / k[x] }' >"$tmp/m.$b"
    if [ "$ba_early" -gt 0 ]; then
        cat "$tmp"/cmpe."$b".*.csv | awk -F, '$1 == "ba" { m += $3; c += $5; e += $6; k++ }
            END { printf "early %.1f %.3f %.0f\n", m / k, c / k, e / k }' >>"$tmp/m.$b"
    else
        echo "early nan nan nan" >>"$tmp/m.$b"
    fi
    awk -v b="$b" '{ m[$1] = $2; c[$1] = $3; e[$1] = $4 }
        END {
            printf "%6.2f %6.2f | %8.1f %8.1f %8.1f %8s | %6.3f %6.3f %6.3f %6s | %7.0f %7.0f %7.0f %7s | %8.2f\n",
                b, 2 * b, m["ba"], m["laplace"], m["laplace_then_ba"], m["early"],
                c["ba"], c["laplace"], c["laplace_then_ba"], c["early"],
                e["ba"], e["laplace"], e["laplace_then_ba"], e["early"],
                m["ba"] / m["laplace"] }' "$tmp/m.$b"
done
echo "(_m: EMD in metres; _c: EMD in grid cells; _err: mean distance in m" \
     "from the true cell's centre to the report's; Fig. 3 runs: ${fig3_s} s" \
     "wall, $jobs at a time)"
echo
}

# ------------------------------------------------- the loop and its control
start=$(date +%s)
ibu=(-o "profiles.privic.ibu_max_steps=$ibu_steps"
     -o "profiles.privic.cycle_reports=$cycle_reports")
for b in $loop_betas; do
    eps_m=$(awk -v b="$b" 'BEGIN { printf "%.17g", 2 * b / 1000 }')
    # geoind's eps_point = level / radius_m / points_per_window.
    laplace=(--profile geoind -o profiles.geoind.density=true
             -o "profiles.geoind.region=\"$region\"" -o profiles.geoind.rows=17
             -o profiles.geoind.cols=24 -o profiles.geoind.radius_m=1
             -o "profiles.geoind.level=$eps_m" -o profiles.geoind.points_per_window=1
             -o "profiles.geoind.cycle_reports=$cycle_reports"
             -o "profiles.geoind.ibu_max_steps=$ibu_steps")
    for s in $(seq 1 "$loop_seeds"); do
        beta=(--seed "$s" -o "profiles.privic.beta=$b" "${ibu[@]}")
        spawn "$tmp/loop.$b.loop.$s.csv" "${beta[@]}" \
            -o "profiles.privic.ba_max_steps=$loop_ba_steps" "$tmp/loop.csv"
        spawn "$tmp/loop.$b.control.$s.csv" "${beta[@]}" --control \
            -o "profiles.privic.ba_max_steps=$loop_ba_steps" "$tmp/loop.csv"
        spawn "$tmp/loop.$b.loop-conv.$s.csv" "${beta[@]}" "$tmp/loop.csv"
        spawn "$tmp/loop.$b.control-conv.$s.csv" "${beta[@]}" --control \
            "$tmp/loop.csv"
        spawn "$tmp/loop.$b.laplace.$s.csv" --seed "$s" "${laplace[@]}" \
            "$tmp/loop.csv"
    done
done
wait_all
loop_s=$(($(date +%s) - start))

for b in $loop_betas; do
    echo "Loop against control: beta $b per km (eps = 2 beta), $cycles cycles" \
         "of $cycle_reports reports, BA $loop_ba_steps steps or converged," \
         "IBU $( [ "$ibu_steps" -gt 0 ] && echo "$ibu_steps steps" ||
                 echo "to 1e-6 or 2000 steps")" \
         "a cycle from the previous estimate, mean over $loop_seeds seeds"
    printf "%-13s %8s %8s %8s %8s | %7s %7s | %6s\n" variant c1_m c2_m c4_m \
        "c${cycles}_m" c1_cells "c${cycles}_cells" fell
    for v in loop control loop-conv control-conv laplace; do
        # columns: cycle reports emd_true emd_prev ba_it ba_ms ibu_it ibu_ms emd_true_cells
        cat "$tmp"/loop."$b"."$v".*.csv | awk -F, -v v="$v" -v last="$cycles" '
            $1 == "cycle" { next }
            { m[$1] += $3; c[$1] += $9; k[$1]++ }
            END {
                for (i in k) { m[i] /= k[i]; c[i] /= k[i] }
                printf "%-13s %8.1f %8.1f %8.1f %8.1f | %7.3f %7.3f | %5.0f%%\n",
                    v, m[1], m[2], m[4], m[last], c[1], c[last],
                    100 * (1 - m[last] / m[1]) }'
    done
    echo
done
[ -z "$loop_betas" ] || echo "(loop runs: ${loop_s} s wall, $jobs at a time)"
