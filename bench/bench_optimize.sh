#!/usr/bin/env bash
# The geo-ind MI-optimal channel at city scale (issue 28 item 3):
# `tracesan optimize --geoind-epsilon` on a synthetic trace, at about 1,000
# cells with the first-order solver, and on a small grid with both the
# first-order solver and the exact LP, so that their objectives can be
# compared within their certificates. Prints, per run: cells, wall time,
# I(U;Z) (bits), the certified lower bound and gap, E[d], and the loader's
# exact check of the written file. Figures only; nothing about time is
# asserted.
#
# The trace: USERS users (default 10), each POINTS check-ins (default 200)
# scattered around a home by a Gaussian of SPREAD metres (default 800), in
# a box of SIDE x SIDE cells of CELL metres near 40.7 N (awk, fixed seed:
# the same file every run). Nothing of /work/shared is needed.
#
# Usage (from a build directory, or set BUILD_DIR):
#   bench/bench_optimize.sh
# SIDE=32 CELL=100 EPS=0.01 L=300 ITER=200; the small grid's SMALL_SIDE=6
# SMALL_L=150 SMALL_SPREAD=200 SMALL_ITER=200 (LP) SMALL_FO_ITER=1500
set -euo pipefail

BENCH=bench_optimize
. "$(dirname "$0")/common.sh"
need_programs "$tracesan"
scratch_dir

users=${USERS:-10}
points=${POINTS:-200}
spread=${SPREAD:-800}
cell=${CELL:-100}
eps=${EPS:-0.01}
L=${L:-300}

# trace SIDE FILE: the synthetic check-ins on a box of SIDE x SIDE cells.
trace() {
    awk -v users="$users" -v points="$points" -v spread="$spread" \
        -v side="$1" -v cell="$cell" 'BEGIN {
        srand(28);
        lat0 = 40.70; lon0 = -74.00;
        mlat = 111320.0; mlon = 111320.0 * cos(lat0 * 3.14159265 / 180);
        size = side * cell;
        print "user,lat,lon,ts";
        for (u = 1; u <= users; u++) {
            hx = size * (0.1 + 0.8 * rand()); hy = size * (0.1 + 0.8 * rand());
            for (i = 0; i < points; i++) {
                do {
                    r = sqrt(-2 * log(1 - rand())) * spread; a = 6.2831853 * rand();
                    x = hx + r * cos(a); y = hy + r * sin(a);
                } while (x <= 0 || y <= 0 || x >= size || y >= size);
                printf "u%d,%.7f,%.7f,%d\n", u, lat0 + y / mlat, lon0 + x / mlon, i;
            }
        }
    }' > "$2"
}

# region SIDE: the box of the trace, a hair inside so that SIDE cells fit.
region() {
    awk -v side="$1" -v cell="$cell" 'BEGIN {
        lat0 = 40.70; lon0 = -74.00;
        mlat = 111320.0; mlon = 111320.0 * cos(lat0 * 3.14159265 / 180);
        size = side * cell * 0.9999;
        printf "%.7f,%.7f,%.7f,%.7f", lat0, lon0, lat0 + size / mlat, lon0 + size / mlon;
    }'
}

# run NAME SIDE SOLVER ITER: one optimize, its figures on one line.
run() {
    local name=$1 side=$2 solver=$3 iter=$4
    local csv=$tmp/trace-$side.csv log=$tmp/$name.log
    [ -f "$csv" ] || trace "$side" "$csv"
    local t0 t1
    t0=$(date +%s.%N)
    nice "$tracesan" optimize --region "$(region "$side")" --cell-m "$cell" \
        --distortion-m "$L" --geoind-epsilon "$eps" --geoind-solver "$solver" \
        --validate-split 0 --smooth-m 0 --gap-bits 1e-3 \
        --max-iterations "$iter" -o "$tmp/$name.bin" "$csv" 2> "$log" ||
        { echo "$BENCH: $name failed:"; cat "$log"; return 0; }
    t1=$(date +%s.%N)
    awk -v name="$name" -v wall="$(echo "$t1 - $t0" | bc)" '
        /^optimize: cells=/ { split($2, a, "="); cells = a[2] }
        /^optimize: mi_bits=/ {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
        /lower_bound_bits=/ {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); g[kv[1]] = kv[2] } }
        /loader_check=/ { split($2, kv, "="); check = kv[2] }
        END {
            printf "%s,%s,%.1f,%s,%s,%s,%s,%s,%s\n", name, cells, wall,
                f["mi_bits"], g["lower_bound_bits"], f["gap_bits"],
                f["mean_distortion_m"], f["iterations"], check
        }' "$log"
}

echo "$BENCH: machine: $(nproc) cores, $(uname -srm); eps=$eps/m L=$L m" \
     "cells of $cell m, $users users x $points points"
echo "$BENCH: I(U;Z) is certified within gap_bits: optimum in [lower_bound_bits, mi_bits]"
echo "run,cells,wall_s,mi_bits,lower_bound_bits,gap_bits,mean_distortion_m,iterations,loader_check"
# The small grid: tighter L and clouds, so that the identity channel is
# not trivially constant at 6 x 6 cells.
small=${SMALL_SIDE:-6}
small_L=${SMALL_L:-150}
small_spread=${SMALL_SPREAD:-200}
L=$small_L spread=$small_spread run "lp-$small" "$small" lp "${SMALL_ITER:-200}"
L=$small_L spread=$small_spread run "first-order-$small" "$small" first-order "${SMALL_FO_ITER:-1500}"
run "first-order-${SIDE:-32}" "${SIDE:-32}" first-order "${ITER:-200}"
