#!/usr/bin/env bash
# The MI-optimal identity-protecting channel (Romanelli et al., CSF 2020)
# against planar Laplace at equal mean distortion, judged by the Bayes
# error of the MAP identity classifier (tracesan eval --identity):
#
#   synthetic  the paper's Sec. IV-C: four users in clouds (radius 150 m)
#              around the vertices of a 500 m square centred on 5 boulevard
#              de Sebastopol, Paris; cells of SYN_CELL_M (default 50) m. With
#              L large enough the channel reaches Bayes error 0.75 (random
#              guessing among four); Laplace's Bayes error falls as the
#              evaluation grid gets finer, the channel's stays (Fig. 5).
#   gowalla    the shared Gowalla New York check-ins (if present): the
#              NY_USERS (default 20) most active users inside the box
#              NY_BOX, cells of NY_CELL_M (default 300) m, L in NY_LS
#              (default 200 500 1000 m); each user's rows alternate
#              between training (the channel is fitted on them) and
#              evaluation (sanitized and attacked), so the channel is never
#              judged on the rows it was fitted on. With NY_EPS_CELL_M
#              (default 2500) m cells, also the channel with geoind_epsilon
#              = 2 / L per metre against geoind at the same epsilon (the
#              geo-ind optimizer is an LP per step: at most 144 cells, and
#              EPS_MAX_ITERATIONS steps, default 100: GLPK's warm-started
#              simplex was seen to stall on one LP past step 100).
#
# For every row: mechanism, L, eval cell_m, bayes_error, mi_bits,
# mean_distortion_m, and the optimizer's I(U;Z), gap, iterations and time
# from `tracesan optimize`. Geoind is run at eps = 2 / D per metre, D the
# channel's measured mean distortion on the same rows, so both have the
# same expected distortion (planar Laplace's mean radius is 2 / eps).
#
# The Bayes error is estimated from REPEAT (default 10) independent
# sanitizations of every evaluation row (as later check-ins at the same
# places), so that the adversary's table is filled even on 50 m cells:
# each is a fresh draw from the joint P(U, Z) the error is defined on.
#
# Usage (from a build directory, or set BUILD_DIR / TRACESAN):
#   bench/eval_mi_channel.sh [GOWALLA.csv.gz]
# Everything derived from the data lives in a temporary directory removed
# on exit. Environment: SYN_LS (default "100 250 400 600"), SEED (1).
set -euo pipefail

BENCH=eval_mi_channel
. "$(dirname "$0")/common.sh"
need_programs "$tracesan"
gowalla=${1:-$srcdir/../shared/data/gowalla-nyc.csv.gz}
syn_ls=${SYN_LS:-100 250 400 600}
syn_cell=${SYN_CELL_M:-50}
ny_box=${NY_BOX:-40.70,-74.02,40.80,-73.93}
ny_users=${NY_USERS:-20}
ny_cell=${NY_CELL_M:-300}
ny_ls=${NY_LS:-200 500 1000}
ny_eps_cell=${NY_EPS_CELL_M:-2500}
eps_max_it=${EPS_MAX_ITERATIONS:-100}
seed=${SEED:-1}
repeat=${REPEAT:-10}
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
    awk -v n="$ny_users" 'NR <= n { print $2 }' >"$tmp/users.txt"
sort -t, -k1,1 -k2,2n "$tmp/box.csv" | awk -F, 'NR == FNR { keep[$1] = 1; next }
    ($1 in keep) { n[$1]++; line = $0
        if (n[$1] % 2) print line >> train; else print line >> evalset }' \
    train="$tmp/ny.train.body" evalset="$tmp/ny.eval.body" "$tmp/users.txt" -
for part in train eval; do
    { echo "user,ts,lat,lon"; cat "$tmp/ny.$part.body"; } >"$tmp/ny.$part.csv"
done
echo "Gowalla New York: the $ny_users most active users in $ny_box," \
     "$(( $(wc -l <"$tmp/ny.train.csv") - 1 )) training and" \
     "$(( $(wc -l <"$tmp/ny.eval.csv") - 1 )) evaluation check-ins (alternate rows)," \
     "cells of $ny_cell m"
echo "$header"
for l in $ny_ls; do
    run_case "ny$l" "$ny_box" "$ny_cell" "$l" 0 "$tmp/ny.train.csv" "$tmp/ny.eval.csv"
done
echo
echo "Gowalla New York with geoind_epsilon = 2 / L, cells of $ny_eps_cell m"
echo "$header"
for l in $ny_ls; do
    eps=$(awk -v l="$l" 'BEGIN { printf "%.9g", 2 / l }')
    run_case "nyeps$l" "$ny_box" "$ny_eps_cell" "$l" "$eps" "$tmp/ny.train.csv" "$tmp/ny.eval.csv"
done
