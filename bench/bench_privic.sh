#!/usr/bin/env bash
# What one PRIVIC cycle costs on the paper's San Francisco grid (24 x 17
# cells), against the paper's Table II (BA 16.805 s, IBU 128.192 s per
# cycle): bench_privic with the empirical PMF of the Cabspotting taxis in
# the paper's box as the prior when the shared data set is there, else a
# synthetic lumpy prior. Figures only; nothing is asserted about time.
#
# Usage (from a build directory, or set BUILD_DIR):
#   bench/bench_privic.sh [DATA.csv.gz]         # or: make bench
# Default data: ../shared/data/cabspotting-sf-35cabs.csv.gz next to the
# source tree (never part of the repository; read in place, nothing derived
# is written). RUNS=N (default 5), BETA=B (default 1.0 per km).
set -euo pipefail

BENCH=bench_privic
. "$(dirname "$0")/common.sh"
data=${1:-$srcdir/../shared/data/cabspotting-sf-35cabs.csv.gz}
runs=${RUNS:-5}
beta=${BETA:-1.0}

need_programs "$build/bench/bench_privic"
args=(--runs "$runs" --beta "$beta")
if [ -f "$data" ]; then
    args+=("$data")
else
    echo "bench_privic: $data not found; using the synthetic prior" >&2
fi
echo "bench_privic: machine: $(nproc) cores, $(uname -srm)"
echo "bench_privic: with the privic profile's IBU cap (2000 iterations):"
"$build/bench/bench_privic" "${args[@]}"
# From a uniform start IBU needs more than the profile's cap to reach
# 1e-6 (the loop starts each cycle from the previous estimate instead),
# so the uncapped figure is the fair one against the paper's converged IBU.
echo "bench_privic: IBU uncapped (to precision 1e-6):"
"$build/bench/bench_privic" --ibu-max-iterations 10000000 "${args[@]}"
