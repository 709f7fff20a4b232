#!/usr/bin/env bash
# The cost of honest calibration on real traces (issues 14 and 24):
# GeoLife at its native cadence, sanitized by cip-gp and by the
# calibrations that ignore the trace's smoothness, each row with its mean
# error (`tracesan eval`), its worst-case CIP loss L* under the RBF prior
# at l_max and the certified bound over every l <= l_max (`tracesan
# cip-loss`, ten points at the median cadence of the input), the budget
# spent per point, and the time per point through `tracesan sanitize`.
#
# Protection: CIP epsilon = EPS (default 1) per trace of D = 10 points,
# l_max = L_MAX_S (default 60 s), r = 100 m, lambda = 2, sigma_x = 1 m.
#   every_other  the paper's secret. The input is thinned so that each
#                user's points are at least MIN_INTERVAL_S (default 5 s)
#                apart, which cip-gp requires (cadence_too_fast).
#     cip-gp             sigma_z from the actual timestamps, certified
#                        over every l <= l_max (honest);
#     independent        the same Gaussian mechanism calibrated as if the
#                        points were independent (length_scale_max_s =
#                        0.001 s: alpha* = 0), what geo-indistinguishability
#                        assumes;
#     geoind (matched)   planar Laplace with the per-axis variance of
#                        cip-gp's median sigma_z (3 / eps_g^2 = sigma^2):
#                        its loss is the Gaussian surrogate's, so "tuned
#                        to the same worst-case loss" holds for the
#                        surrogate, not exactly for the Laplace noise;
#     geoind (indep.)    planar Laplace matched the same way to the
#                        independent calibration.
#   all          every point secret, native cadence (no thinning): L*
#                does not depend on the prior, so honest and independent
#                calibration coincide.
#
# Usage (from a build directory): bench/eval_cip.sh [DATA.csv.gz]
# POINTS_PER_USER=N (default 2000; 0 = all) caps each user's points;
# REPEATS=N (default 3) times each sanitize run N times (median CPU
# time). The data stay in a temporary directory removed on exit (GeoLife
# may not be redistributed).
set -euo pipefail

BENCH=eval_cip
. "$(dirname "$0")/common.sh"
data=${1:-$GEOLIFE}
eps=${EPS:-1}
l_max=${L_MAX_S:-60}
min_interval=${MIN_INTERVAL_S:-5}
per_user=${POINTS_PER_USER:-2000}
conf=$srcdir/conf/tracesand.conf

need_data "$data"
need_programs "$tracesan"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tracesan-evalcip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Per user, time-ordered, duplicate timestamps dropped; `thinned` keeps a
# point only min_interval after the user's previous kept one.
zcat -f "$data" | awk -F, -v cap="$per_user" -v gap="$min_interval" \
    -v native="$tmp/native.csv" -v thinned="$tmp/thinned.csv" '
    NR == 1 { print > native; print > thinned; next }
    {
        if ($1 == last_user && $2 <= last_ts) next
        if ($1 != last_user) { kept_ts = -1e18; nn = 0; nt = 0 }
        last_user = $1; last_ts = $2
        if (cap == 0 || nn < cap) { print > native; nn++ }
        if ((cap == 0 || nt < cap) && $2 >= kept_ts + gap) { print > thinned; nt++; kept_ts = $2 }
    }'

common=(-c "$conf" -p cip-gp -o profiles.cip-gp.traces_per_window=100000000
        -o "profiles.cip-gp.epsilon=$eps" -o "profiles.cip-gp.length_scale_max_s=$l_max"
        -o "profiles.cip-gp.min_interval_s=$min_interval")

mean_error() { "$tracesan" eval --format csv "$1" "$2" | awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["user"] == "(all)" { print $col["mean_err_m"] }'; }
column_median() { awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } { print $c }' "$1" | median; }
cadence() { awk -F, 'NR > 1 { if ($1 == u) print $2 - t; u = $1; t = $2 }' "$1" | median; }
loss_at() { # sigma cadence secret [--every-length-scale]: L* at l_max, or
    # the certified bound over every l <= l_max
    "$tracesan" cip-loss --points 10 --interval-s "$2" --length-scale-s "$l_max" \
        --sigma-z-m "$1" --secret "$3" --radius-m 100 --renyi-order 2 --sigma-x-m 1 ${4:-} |
        awk -F, 'NR == 2 { print $3 }'; }
# spent_per_point OUT: the budget (eps_point) spent per released point.
spent_per_point() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "eps_point") c = i; next }
    { s += $c; n++ } END { printf "%.5f", s / n }' "$1"; }

echo "# $BENCH: epsilon $eps per 10 points, l_max $l_max s, r 100 m, lambda 2, sigma_x 1 m"
echo "# native: $(( $(wc -l <"$tmp/native.csv") - 1 )) points, median interval $(cadence "$tmp/native.csv") s;" \
     "thinned: $(( $(wc -l <"$tmp/thinned.csv") - 1 )) points, median interval $(cadence "$tmp/thinned.csv") s"
echo "secret,mechanism,sigma_z_m_median,mean_error_m,loss_at_l_max,certified_loss_every_l,spent_per_point,sanitize_us_per_point"

thin_cadence=$(cadence "$tmp/thinned.csv")
# timed OUT sanitize-args...: runs `tracesan sanitize` REPEATS times
# (default 3; the output is seeded, so the same each time) and sets
# us_per_point to the median CPU time (user + system) per point: the
# machine may be shared, so wall-clock time would measure the neighbours.
timed() {
    local out=$1 cpu rows
    shift
    : >"$tmp/cpu"
    for _ in $(seq "${REPEATS:-3}"); do
        cpu=$( { TIMEFORMAT='%U %S'; time "$tracesan" sanitize "$@" >"$out" 2>/dev/null; } 2>&1 )
        echo "$cpu" | awk '{ print $1 + $2 }' >>"$tmp/cpu"
    done
    rows=$(( $(wc -l <"$out") - 1 ))
    us_per_point=$(median <"$tmp/cpu" | awk -v n="$rows" '{ printf "%.1f", $1 * 1e6 / n }')
}
timed "$tmp/honest.csv" "${common[@]}" -o 'profiles.cip-gp.secret="every_other"' \
    --seed 1 "$tmp/thinned.csv"
sigma_honest=$(column_median "$tmp/honest.csv" sigma_z_m)
echo "every_other,cip-gp,$sigma_honest,$(mean_error "$tmp/thinned.csv" "$tmp/honest.csv"),$(loss_at "$sigma_honest" "$thin_cadence" every_other),$(loss_at "$sigma_honest" "$thin_cadence" every_other --every-length-scale),$(spent_per_point "$tmp/honest.csv"),$us_per_point"

timed "$tmp/indep.csv" "${common[@]}" -o 'profiles.cip-gp.secret="every_other"' \
    -o profiles.cip-gp.length_scale_max_s=0.001 --seed 1 "$tmp/thinned.csv"
sigma_indep=$(column_median "$tmp/indep.csv" sigma_z_m)
echo "every_other,independent,$sigma_indep,$(mean_error "$tmp/thinned.csv" "$tmp/indep.csv"),$(loss_at "$sigma_indep" "$thin_cadence" every_other),$(loss_at "$sigma_indep" "$thin_cadence" every_other --every-length-scale),$(spent_per_point "$tmp/indep.csv"),$us_per_point"

for pair in "matched:$sigma_honest" "indep.:$sigma_indep"; do
    name=${pair%%:*} sigma=${pair#*:}
    # planar Laplace with per-axis variance sigma^2: eps_g = sqrt(3) / sigma
    # per metre, spent per point (radius_m 1, level eps_g x points).
    level=$(awk -v s="$sigma" 'BEGIN { printf "%.12g", sqrt(3) / s * 1e8 }')
    timed "$tmp/geoind.csv" -c "$conf" -p geoind -o profiles.geoind.radius_m=1 \
        -o "profiles.geoind.level=$level" -o profiles.geoind.points_per_window=100000000 \
        --seed 1 "$tmp/thinned.csv"
    echo "every_other,geoind ($name),$sigma,$(mean_error "$tmp/thinned.csv" "$tmp/geoind.csv"),$(loss_at "$sigma" "$thin_cadence" every_other) (Gaussian surrogate),$(loss_at "$sigma" "$thin_cadence" every_other --every-length-scale) (Gaussian surrogate),-,$us_per_point"
done

timed "$tmp/all.csv" "${common[@]}" --seed 1 "$tmp/native.csv"
sigma_all=$(column_median "$tmp/all.csv" sigma_z_m)
echo "all,cip-gp,$sigma_all,$(mean_error "$tmp/native.csv" "$tmp/all.csv"),$(loss_at "$sigma_all" "$(cadence "$tmp/native.csv")" all),$(loss_at "$sigma_all" "$(cadence "$tmp/native.csv")" all --every-length-scale),$(spent_per_point "$tmp/all.csv"),$us_per_point"
