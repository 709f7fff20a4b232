#!/usr/bin/env bash
# The MI-optimal identity-protecting channel (Romanelli et al., CSF 2020)
# against planar Laplace at equal mean distortion, judged by the Bayes
# error of the MAP identity classifier (tracesan eval --identity):
#
#   synthetic  the paper's Sec. IV-C: four users in clouds (radius 150 m)
#              around the vertices of a 500 m square centred on 5 boulevard
#              de Sebastopol, Paris; cells of SYN_CELL_M (default 50) m, the
#              channel fitted without smoothing or validation (rows
#              alternate between fitting and evaluation). With L large
#              enough the channel reaches Bayes error 0.75 (random guessing
#              among four); Laplace's Bayes error falls as the evaluation
#              grid gets finer, the channel's stays (Fig. 5).
#   gowalla    the shared Gowalla New York check-ins (if present), issue
#              28's time split: the NY_USERS (default 10) most active users
#              inside the box NY_BOX; the first 70 % of each user's
#              check-ins (by time) fit the channel (tracesan optimize
#              --cell-m NY_CELL_M, default 125 m below L = 400 m and 250 m
#              above, with its defaults: distortion on the true points, the
#              MI channel and the remapped Laplace, smoothing, chosen on a
#              held-out split of those 70 %), the last 30 % are released. For L in NY_LS
#              (default 200 500 1000 m) both sets are released through the
#              channel and through planar Laplace at eps = 2 / D, D the
#              channel's measured mean distortion on the released (held-out)
#              rows, and attacked with eval --identity at NY_EVAL_CELL_M
#              (default 200) m: the in-sample columns are the fitted rows,
#              the held-out ones the last 30 %. With NY_EPS_CELL_M (default
#              2500) m cells, also the channel with geoind_epsilon = 2 / L
#              per metre against geoind at the same epsilon (the exact
#              geo-ind optimizer is an LP per step: at most 144 cells, and
#              EPS_MAX_ITERATIONS steps, default 100).
#
# The Bayes error is estimated from REPEAT (default 40) independent
# sanitizations of every row (as later check-ins at the same places), so
# that the adversary's table is filled: each is a fresh draw from the
# joint P(U, Z) the error is defined on. With 10 the table over 200 m
# cells is thin and the estimate biased upwards, more for reports that
# spread over many cells (planar Laplace's).
#
# Usage (from a build directory, or set BUILD_DIR / TRACESAN):
#   bench/eval_mi_channel.sh [GOWALLA.csv.gz]
# Everything derived from the data lives in a temporary directory removed
# on exit. Environment: SYN_LS (default "100 250 400 600"; "" skips the
# synthetic part), NY_EPS_CELL_M ("" skips the geo-ind part),
# NY_OPTIMIZE_ARGS (more tracesan optimize options for the time split, e.g.
# "--gap-bits 1e-3"), SEED (1). The optimizer is CPU-heavy: run it with nice
# on a shared machine.
set -euo pipefail

BENCH=eval_mi_channel
. "$(dirname "$0")/common.sh"
need_programs "$tracesan"
gowalla=${1:-$srcdir/../shared/data/gowalla-nyc.csv.gz}
syn_ls=${SYN_LS-100 250 400 600}
syn_cell=${SYN_CELL_M:-50}
ny_box=${NY_BOX:-40.70,-74.02,40.78,-73.94}
ny_users=${NY_USERS:-10}
# Cells of NY_CELL_M metres, or by default 250 m for L >= 400 m and 125 m
# below (at 250 m cells the within-cell offset alone is about 96 m).
ny_cell=${NY_CELL_M:-auto}
ny_eval_cell=${NY_EVAL_CELL_M:-200}
ny_ls=${NY_LS:-200 500 1000}
ny_eps_cell=${NY_EPS_CELL_M:-2500}
eps_max_it=${EPS_MAX_ITERATIONS:-100}
seed=${SEED:-1}
repeat=${REPEAT:-40}
conf=$srcdir/conf/tracesand.conf
eval_cells=(--cell-m 50 --cell-m 100 --cell-m 200 --cell-m 400)

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tracesan-$BENCH.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# optimize NAME REGION CELL_M L [EPS] TRAIN: writes $tmp/NAME.bin and
# prints the optimizer's summary line on stderr-free stdout.
optimize() {
    local name=$1 region=$2 cell=$3 l=$4 eps=$5 train=$6 extra=()
    # The geo-ind optimizer solves an LP per step: cap its steps (the
    # printed gap says how far from optimal the channel is).
    [ "$eps" = 0 ] || extra=(--geoind-epsilon "$eps" --max-iterations "$eps_max_it")
    extra+=("${optimize_args[@]}")
    "$tracesan" optimize --region "$region" --cell-m "$cell" \
        --distortion-m "$l" "${extra[@]}" -o "$tmp/$name.bin" "$train" \
        >"$tmp/$name.opt" 2>&1 || { cat "$tmp/$name.opt" >&2; exit 1; }
}

# sanitize OUT IN PROFILE [-o ...]: tracesan sanitize with a fixed seed.
sanitize() {
    local out=$1 in=$2 profile=$3
    shift 3
    "$tracesan" sanitize --config "$conf" --profile "$profile" --seed "$seed" \
        "$@" "$in" >"$out" 2>"$out.err" || { tail "$out.err" >&2; exit 1; }
}

# mean_distance TRUE SANITIZED: mean metres between matched rows (same
# order: sanitize keeps it, and nothing is rejected here).
mean_distance() {
    paste -d, <(tail -n +2 "$1" | cut -d, -f3,4) <(tail -n +2 "$2" | cut -d, -f3,4) |
        awk -F, 'function rad(d) { return d * 3.141592653589793 / 180 }
            { dlat = rad($3 - $1); dlon = rad($4 - $2)
              a = sin(dlat / 2) ^ 2 + cos(rad($1)) * cos(rad($3)) * sin(dlon / 2) ^ 2
              s += 2 * 6371008.8 * atan2(sqrt(a), sqrt(1 - a)); n++ }
            END { printf "%.1f\n", s / n }'
}

# identity NAME TRUE SANITIZED: eval --identity rows prefixed with NAME.
identity() {
    "$tracesan" eval --identity "${eval_cells[@]}" "$2" "$3" 2>"$tmp/id.err" |
        awk -F, -v name="$1" 'NR > 1 { print name "," $0 }' ||
        { cat "$tmp/id.err" >&2; exit 1; }
}

# repeated IN OUT: IN's rows REPEAT times, each copy 10^8 s later (so each
# user's time still only moves forward).
repeated() {
    awk -F, -v r="$repeat" 'NR == 1 { print; next } { row[++n] = $0 }
        END { for (k = 0; k < r; k++) for (i = 1; i <= n; i++) {
            split(row[i], f, ","); printf "%s,%.0f,%s,%s\n", f[1], f[2] + k * 100000000, f[3], f[4] } }' \
        "$1" >"$2"
}

# run_case LABEL REGION CELL L EPS TRAIN EVAL: channel vs geoind.
run_case() {
    local label=$1 region=$2 cell=$3 l=$4 eps=$5 train=$6 evalset=$7 d geo_eps
    optimize "$label" "$region" "$cell" "$l" "$eps" "$train"
    repeated "$evalset" "$tmp/$label.eval.csv"
    evalset=$tmp/$label.eval.csv
    sanitize "$tmp/$label.mi.csv" "$evalset" mi-channel \
        -o "profiles.mi-channel.channel=\"$tmp/$label.bin\"" \
        -o profiles.mi-channel.points_per_window=1000000
    d=$(mean_distance "$evalset" "$tmp/$label.mi.csv")
    if [ "$eps" = 0 ]; then
        geo_eps=$(awk -v d="$d" 'BEGIN { printf "%.9g", 2 / d }')
    else
        geo_eps=$eps
    fi
    # geoind's eps_point is level / radius_m / points_per_window.
    sanitize "$tmp/$label.geo.csv" "$evalset" geoind -o profiles.geoind.radius_m=1 \
        -o profiles.geoind.points_per_window=1000000 \
        -o "profiles.geoind.level=$(awk -v e="$geo_eps" 'BEGIN { printf "%.9g", e * 1e6 }')"
    echo "# $label: $(tr '\n' ' ' <"$tmp/$label.opt")"
    identity "mi-channel,$l,$eps" "$evalset" "$tmp/$label.mi.csv"
    identity "geoind,$l,$geo_eps" "$evalset" "$tmp/$label.geo.csv"
}

header="mechanism,L_m,eps_per_m,cell_m,bayes_error,mi_bits,mean_distortion_m,users,rows"
# The synthetic and geo-ind parts fit without smoothing or validation (the
# synthetic rows alternate; the geo-ind grid is the LP's).
optimize_args=(--validate-split 0 --smooth-m 0)

# -------------------------------------------------------------- synthetic
# 5 boulevard de Sebastopol: 48.8594 N, 2.3488 E. A 500 m square: the
# vertices are 250 m from the centre on each axis.
awk -v seed="$seed" 'BEGIN {
    srand(seed); lat0 = 48.8594; lon0 = 2.3488
    mlat = 111320; mlon = 111320 * cos(lat0 * 3.141592653589793 / 180)
    split("-250 250 250 -250", vx, " "); split("-250 -250 250 250", vy, " ")
    print "user,ts,lat,lon" > "/dev/stderr"
    print "user,ts,lat,lon"
    for (i = 0; i < 2000; i++)
        for (u = 1; u <= 4; u++) {
            do { x = 300 * rand() - 150; y = 300 * rand() - 150 } while (x * x + y * y > 150 * 150)
            line = sprintf("user%d,%d,%.7f,%.7f", u, 1600000000 + 10 * i + u,
                           lat0 + (vy[u] + y) / mlat, lon0 + (vx[u] + x) / mlon)
            if (i % 2 == 0) print line; else print line > "/dev/stderr"
        }
}' >"$tmp/syn.train.csv" 2>"$tmp/syn.eval.csv"
syn_region=48.8540,2.3406,48.8648,2.3570
echo "synthetic (Sec. IV-C): 4 users x 1000 training + 1000 evaluation rows," \
     "cells of $syn_cell m over $syn_region"
echo "$header"
for l in $syn_ls; do
    run_case "syn$l" "$syn_region" "$syn_cell" "$l" 0 "$tmp/syn.train.csv" "$tmp/syn.eval.csv"
done
echo

# ---------------------------------------------------------- Gowalla NY
if [ ! -f "$gowalla" ]; then
    echo "$BENCH: $gowalla not found; skipping the Gowalla part" >&2
    exit 0
fi
IFS=, read -r la0 lo0 la1 lo1 <<<"$ny_box"
zcat -f "$gowalla" | awk -F, -v a="$la0" -v b="$lo0" -v c="$la1" -v d="$lo1" \
    'NR > 1 && $3 >= a && $3 <= c && $4 >= b && $4 <= d' >"$tmp/box.csv"
cut -d, -f1 "$tmp/box.csv" | sort | uniq -c | sort -k1,1nr -k2,2 |
    awk -v n="$ny_users" 'NR <= n { print $2, $1 }' >"$tmp/users.txt"
# The time split: each user's first 70 % of check-ins (by ts) fit, the
# last 30 % are released.
sort -t, -k1,1 -k2,2n "$tmp/box.csv" |
    awk -v tr="$tmp/ny.train.body" -v ev="$tmp/ny.eval.body" '
        NR == FNR { split($0, f, " "); total[f[1]] = f[2]; next }
        { split($0, f, ","); u = f[1] }
        (u in total) { k[u]++
            if (k[u] <= int(0.7 * total[u] + 0.5)) print >> tr; else print >> ev }' \
    "$tmp/users.txt" -
for part in train eval; do
    { echo "user,ts,lat,lon"; cat "$tmp/ny.$part.body"; } >"$tmp/ny.$part.csv"
done
echo "Gowalla New York, time split: the $ny_users most active users in $ny_box," \
     "$(( $(wc -l <"$tmp/ny.train.csv") - 1 )) check-ins to fit (each user's first 70 %)," \
     "$(( $(wc -l <"$tmp/ny.eval.csv") - 1 )) to release (the last 30 %)," \
     "cells of $ny_cell m (auto: 125 m below L = 400 m, else 250 m)," \
     "eval --identity cells of $ny_eval_cell m"
echo "L_m,mechanism,eps_per_m,in_bayes_error,in_distortion_m,held_bayes_error,held_distortion_m,validation_held_bayes_error,chosen_smooth_m,chosen_backoff,chosen_row_entropy,chosen_channel"
read -r -a optimize_args <<<"${NY_OPTIMIZE_ARGS:-}"
for l in $ny_ls; do
    cell=$ny_cell
    [ "$cell" != auto ] || cell=$(( l >= 400 ? 250 : 125 ))
    optimize "ny$l" "$ny_box" "$cell" "$l" 0 "$tmp/ny.train.csv"
    echo "# ny$l: $(grep -v '^optimize: [0-9]' "$tmp/ny$l.opt" | tr '\n' ' ')"
    grep '^optimize: [0-9.]*,[0-9.]*,' "$tmp/ny$l.opt" | sed 's/^optimize: /# candidate: /'
    # The validation's held-out Bayes error of the chosen candidate (the
    # candidate lines' columns are named by their header line).
    chosen=$(sed -n 's/.*chosen smooth_m=\([^ ]*\) backoff=\([^ ]*\) row_entropy=\([^ ]*\) channel=\([^ ]*\).*/\1,\2,\3,\4/p' "$tmp/ny$l.opt")
    vheld=$(awk -v c="$chosen" '{ sub(/^optimize: /, "") }
        /^smooth_m,/ { for (i = 1; i <= split($0, h, ","); i++) col[h[i]] = i; next }
        ("held_bayes_error" in col) && /^[0-9]/ { split($0, f, ",")
            if (f[1] "," f[2] "," f[3] "," f[col["channel"]] == c)
                print f[col["held_bayes_error"]] }' "$tmp/ny$l.opt")
    declare -A bayes dist
    for part in train eval; do
        repeated "$tmp/ny.$part.csv" "$tmp/ny$l.$part.rep.csv"
        sanitize "$tmp/ny$l.$part.mi.csv" "$tmp/ny$l.$part.rep.csv" mi-channel \
            -o "profiles.mi-channel.channel=\"$tmp/ny$l.bin\"" \
            -o profiles.mi-channel.points_per_window=1000000
        dist[mi.$part]=$(mean_distance "$tmp/ny$l.$part.rep.csv" "$tmp/ny$l.$part.mi.csv")
    done
    geo_eps=$(awk -v d="${dist[mi.eval]}" 'BEGIN { printf "%.9g", 2 / d }')
    for part in train eval; do
        sanitize "$tmp/ny$l.$part.geo.csv" "$tmp/ny$l.$part.rep.csv" geoind \
            -o profiles.geoind.radius_m=1 -o profiles.geoind.points_per_window=1000000 \
            -o "profiles.geoind.level=$(awk -v e="$geo_eps" 'BEGIN { printf "%.9g", e * 1e6 }')"
        dist[geo.$part]=$(mean_distance "$tmp/ny$l.$part.rep.csv" "$tmp/ny$l.$part.geo.csv")
        for m in mi geo; do
            bayes[$m.$part]=$("$tracesan" eval --identity --cell-m "$ny_eval_cell" \
                "$tmp/ny$l.$part.rep.csv" "$tmp/ny$l.$part.$m.csv" 2>"$tmp/id.err" |
                awk -F, 'NR == 2 { print $2 }') || { cat "$tmp/id.err" >&2; exit 1; }
        done
    done
    echo "$l,mi-channel,0,${bayes[mi.train]},${dist[mi.train]},${bayes[mi.eval]},${dist[mi.eval]},$vheld,$chosen"
    echo "$l,planar-laplace,$geo_eps,${bayes[geo.train]},${dist[geo.train]},${bayes[geo.eval]},${dist[geo.eval]},,,"
done
echo
[ -n "${NY_EPS_CELL_M-2500}" ] || exit 0
optimize_args=(--validate-split 0 --smooth-m 0)
# The geo-ind part keeps the alternate-row split of issue 13.
sort -t, -k1,1 -k2,2n "$tmp/box.csv" | awk -F, 'NR == FNR { keep[$1] = 1; next }
    ($1 in keep) { n[$1]++; if (n[$1] % 2) print >> train; else print >> evalset }' \
    train="$tmp/alt.train.body" evalset="$tmp/alt.eval.body" <(cut -d" " -f1 "$tmp/users.txt") -
for part in train eval; do
    { echo "user,ts,lat,lon"; cat "$tmp/alt.$part.body"; } >"$tmp/alt.$part.csv"
done
echo "Gowalla New York with geoind_epsilon = 2 / L, cells of $ny_eps_cell m (alternate rows)"
echo "$header"
for l in $ny_ls; do
    eps=$(awk -v l="$l" 'BEGIN { printf "%.9g", 2 / l }')
    run_case "nyeps$l" "$ny_box" "$ny_eps_cell" "$l" "$eps" "$tmp/alt.train.csv" "$tmp/alt.eval.csv"
done
