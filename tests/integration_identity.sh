#!/usr/bin/env bash
# `tracesan eval --identity`: the identity adversary (issue 13) on four
# users in clouds around the vertices of a 6 km square in Paris (the
# paper's Section IV-C layout), first unperturbed (a perfectly identifying
# "channel": Bayes error 0 and I(U;Z) = log2 4 = 2 bits), then after
# `tracesan sanitize` with the shipped geoind profile; plus the usage
# errors and the rule that rejected rows are not counted.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

"$TRACESAN" eval --help 2>/dev/null | grep -q -- --identity ||
    fatal "$TRACESAN eval has no --identity option (tools/cmd_eval.c)"

HEADER=cell_m,bayes_error,mi_bits,mean_distortion_m,users,rows
USERS=4
PER_USER=1000
TRUE_CSV=$TMPD/true.csv
# 1000 check-ins per user, 2 h apart (12 a day, below the profile's 30
# points per daily window, so nothing is rejected), each at one of nine
# places on a 3 x 3 lattice about 100 m apart around the user's vertex
# (venues, as in check-in data). awk's generator differs between awks;
# nothing below depends on the exact draws.
awk -v n="$PER_USER" 'BEGIN {
    srand(13)
    print "user,ts,lat,lon"
    split("48.8296 48.8296 48.8836 48.8836", lat, " ")
    split("2.3112 2.3932 2.3112 2.3932", lon, " ")
    for (u = 1; u <= 4; u++)
        for (i = 0; i < n; i++)
            printf "u%d,%d,%.6f,%.6f\n", u, 1700000000 + 7200 * i,
                   lat[u] + 0.0009 * (int(3 * rand()) - 1),
                   lon[u] + 0.00135 * (int(3 * rand()) - 1)
}' >"$TRUE_CSV"
ROWS=$((USERS * PER_USER))

# --- no noise: the released point is the true one ----------------------------
PLAIN=$TMPD/plain.csv
awk -F, 'NR == 1 {
    print "user,ts,lat,lon,mechanism,eps_point,eps_spent,eps_remaining,profile,predicted"
    next
}
{ printf "%s,%s,%s,%s,none,0,0,1,p,\n", $1, $2, $3, $4 }' "$TRUE_CSV" >"$PLAIN"
rc=0
"$TRACESAN" eval --identity --cell-m 400 "$TRUE_CSV" "$PLAIN" \
    >"$TMPD/plain.out" 2>"$TMPD/plain.err" || rc=$?
check_eq "no noise: exit status" 0 "$rc"
[ "$rc" = 0 ] || show_file "$TMPD/plain.err"
# The clouds are 6 km apart, so no 400 m cell holds two users. A held-out
# row is misjudged only when its cell has no training row; but each place
# gets about 111 check-ins, half of them training rows, and a cell holding
# a place holds all of them: the chance that a place has no training row
# is 2^-111. So every held-out row is guessed right. Balanced users:
# H(U) = 2 bits.
check_eq "no noise: error 0, MI log2 4, distortion 0" \
    "$HEADER
400,0.000000,2.000000,0.0,$USERS,$ROWS" "$(cat "$TMPD/plain.out")"

# The split: every joined row on one side; each side binomial(4000, 1/2)
# if the hash is fair, standard deviation 31.6, allowed 5 of them.
split_line=$(grep 'training' "$TMPD/plain.err" | head -1)
train=$(sed -n 's/.* joined: \([0-9]*\) training.*/\1/p' <<<"$split_line")
held=$(sed -n 's/.* training[^,]*, \([0-9]*\) held out.*/\1/p' <<<"$split_line")
check_eq "split: training + held out = joined rows" "$ROWS" \
    "$((${train:-0} + ${held:-0}))"
check "split: about half held out ($held of $ROWS)" \
    awk -v h="${held:-0}" -v n="$ROWS" 'BEGIN { exit !(h >= n / 2 - 5 * sqrt(n / 4) && h <= n / 2 + 5 * sqrt(n / 4)) }'
check "split: printed on stderr with its rule" \
    grep -q 'hash of (user, ts)' "$TMPD/plain.err"

# --- sanitize with geoind, then the adversary -----------------------------------
SAN=$TMPD/sanitized.csv
rc=0
"$TRACESAN" sanitize --config "$SHIPPED_CONF" --profile geoind --seed 13 \
    "$TRUE_CSV" >"$SAN" 2>"$TMPD/sanitize.err" || rc=$?
check_eq "sanitize: exit status" 0 "$rc"
check_eq "sanitize: every row released" "$ROWS" \
    "$(grep -c ',geoind,' "$SAN")"
rc=0
"$TRACESAN" eval --identity "$TRUE_CSV" "$SAN" >"$TMPD/geoind.out" \
    2>"$TMPD/geoind.err" || rc=$?
check_eq "eval --identity: exit status" 0 "$rc"
[ "$rc" = 0 ] || show_file "$TMPD/geoind.err"
check_eq "eval --identity: header" "$HEADER" "$(head -1 "$TMPD/geoind.out")"
check_eq "eval --identity: default cells 50, 100, 200, 400 m" "50 100 200 400" \
    "$(awk -F, 'NR > 1 { printf "%s%s", sep, $1; sep = " " }' "$TMPD/geoind.out")"
check_eq "eval --identity: users and rows" "$USERS,$ROWS" \
    "$(awk -F, 'NR == 2 { print $5 "," $6 }' "$TMPD/geoind.out")"
# Bayes error in [0, 1 - 1/k + 0.06]. Rows in cells with training rows
# are guessed by the MAP table, which the noise leaves informative (at or
# below chance); rows in cells without (most of them at 50 m) get the
# prior guess, whose error is 1 - (the prior user's share of the held-out
# rows). Each user's held-out count is binomial(1000, 1/2), standard
# deviation 15.8, and the total binomial(4000, 1/2), 31.6: within 5 of
# them the share is at least 421 / 2158 = 0.195, an error of at most
# 0.805 < 0.75 + 0.06.
check "eval --identity: Bayes error within [0, 1 - 1/4 + 0.06]" \
    awk -F, 'NR > 1 && !($2 >= 0 && $2 <= 0.81) { bad = 1 } END { exit bad }' \
    "$TMPD/geoind.out"
check "eval --identity: 400 m cells still identify better than chance" \
    awk -F, '$1 == 400 { found = 1; ok = $2 < 0.6 } END { exit !(found && ok) }' \
    "$TMPD/geoind.out"
# Mean of 4000 draws of the planar Laplace radius, Gamma(2, 1/eps) with
# mean 2/eps = 2605.6 m and standard deviation sqrt(2)/eps = 1842 m: the
# mean's standard deviation is 29 m; allowed 5 of them (145 m).
check "eval --identity: mean distortion near 2/eps = 2606 m" \
    awk -F, 'NR == 2 { exit !($4 > 2460 && $4 < 2750) }' "$TMPD/geoind.out"
check "eval --identity: MI between 0 and log2 4" \
    awk -F, 'NR > 1 && !($3 >= 0 && $3 <= 2) { bad = 1 } END { exit bad }' \
    "$TMPD/geoind.out"

# Rejected rows are absent from the sanitized file and are not counted.
grep -v '^u4,' "$SAN" >"$TMPD/partial.csv"
check_eq "eval --identity: only sanitized rows count" \
    "$((ROWS - PER_USER))" \
    "$("$TRACESAN" eval --identity --cell-m 200 "$TRUE_CSV" \
        "$TMPD/partial.csv" 2>/dev/null | awk -F, 'NR == 2 { print $6 }')"

# --- usage errors ----------------------------------------------------------
for args in "--cell-m 100" "--identity --cell-m 0" "--identity --cell-m x" \
            "--identity --poi $TRUE_CSV" "--identity --format table" \
            "--identity --series $TMPD/s.csv"; do
    rc=0
    # shellcheck disable=SC2086
    "$TRACESAN" eval $args "$TRUE_CSV" "$SAN" >/dev/null 2>&1 || rc=$?
    check_eq "usage error: eval $args" 1 "$rc"
done

# --- optimize --validate-split: held-out figures next to in-sample ones ----
# The four users' first 70 % of check-ins fit, the last 30 % are held out
# (issue 28). Three candidates (no smoothing, no back-off): the MI channel
# with and without row entropy, and the remapped Laplace. Each prints its
# in-sample and held-out I(U;Z), Bayes error and mean distortion, and the
# held-out Bayes error of planar Laplace on the grid at its own held-out
# distortion; the one furthest above that reference is refitted on every
# row. Without smoothing the bound holds over the fitted points
# themselves (the guard's rows included), so the in-sample distortion is
# at most L. The trace is stationary (each user at the same nine places
# throughout), so the held-out figures estimate the in-sample ones: the
# held-out Bayes error is a mean over 1200 rows, standard deviation at
# most sqrt(0.25 / 1200) = 0.0144; allowed 5 of them (0.072). Four users:
# the Bayes error is at most 3/4, I(U;Z) at most 2 bits.
BOX=48.80,2.28,48.92,2.43
rc=0
"$TRACESAN" optimize --region "$BOX" --cell-m 1000 --distortion-m 1000 \
    --smooth-m 0 --backoff 0 --row-entropy 0,0.3 --validate-split 0.3 \
    -o "$TMPD/split.channel" "$TRUE_CSV" 2>"$TMPD/split.log" || rc=$?
check_eq "optimize --validate-split: exit status" 0 "$rc"
[ "$rc" = 0 ] || show_file "$TMPD/split.log"
check "optimize --validate-split: says what it held out" \
    grep -q "validation: 2800 rows fitted, the last 1200 held out (30 % of each user's, by ts)" \
    "$TMPD/split.log"
check "optimize --validate-split: names in-sample and held-out columns" \
    grep -q '^optimize: smooth_m,backoff,row_entropy,in_mi_bits,in_bayes_error,in_distortion_m,held_mi_bits,held_bayes_error,held_distortion_m,guarded_rows,gap_bits,seconds,channel,held_laplace_bayes_error$' \
    "$TMPD/split.log"
check_eq "optimize --validate-split: one line per candidate, two families" \
    "2 mi
1 remapped-laplace" \
    "$(grep '^optimize: 0,0,0[.0-9]*,[0-9]' "$TMPD/split.log" | cut -d, -f13 | sort | uniq -c | sed 's/^ *//')"
check "optimize --validate-split: figures in range, in-sample distortion <= L" \
    awk -F, '/^optimize: 0,0,/ { n++
        if (!($5 >= 0 && $5 <= 0.75 && $8 >= 0 && $8 <= 0.75 &&
              $4 >= 0 && $4 <= 2 && $7 >= 0 && $7 <= 2 &&
              $6 <= 1000 * 1.000001 && $9 > 0 && $14 >= 0 && $14 <= 0.75))
            bad = 1 }
        END { exit bad || n != 3 }' "$TMPD/split.log"
check "optimize --validate-split: held-out Bayes error within 0.072 of in-sample (stationary trace)" \
    awk -F, '/^optimize: 0,0,/ { n++; d = $8 - $5; if (d < 0) d = -d; if (d > 0.072) bad = 1 }
        END { exit bad || n != 3 }' "$TMPD/split.log"
# The chosen candidate is the one whose held-out Bayes error is furthest
# above the Laplace reference's.
best=$(awk -F, '/^optimize: 0,0,/ { e = $8 - $14
        if (n++ == 0 || e > best) { best = e; pick = $3 "," $13 } }
    END { print pick }' "$TMPD/split.log")
check_eq "optimize --validate-split: the chosen candidate, the furthest above Laplace, refitted on every row" \
    "$best" "$(sed -n 's/^optimize: chosen smooth_m=0 backoff=0 row_entropy=\([^ ]*\) channel=\([^ ]*\) .*/\1,\2/p' "$TMPD/split.log")"
for bad in "--channel laplace" "--channel ," "--channel remapped-laplace --geoind-epsilon 0.01"; do
    rc=0
    # shellcheck disable=SC2086
    "$TRACESAN" optimize --region "$BOX" --cell-m 1000 --distortion-m 1000 \
        $bad -o "$TMPD/bad.channel" "$TRUE_CSV" 2>"$TMPD/bad.log" || rc=$?
    check_eq "optimize: refuses $bad" 1 "$rc"
    check "optimize: says why it refuses $bad, and writes nothing" \
        sh -c 'grep -q -- "--channel" "$1" && [ ! -e "$2" ]' _ "$TMPD/bad.log" \
        "$TMPD/bad.channel"
done
check "optimize: refuses --validate-split 1" \
    sh -c '! "$1" optimize --region "$2" --cell-m 1000 --distortion-m 300 --validate-split 1 -o "$3/x" "$4" 2>/dev/null' \
    _ "$TRACESAN" "$BOX" "$TMPD" "$TRUE_CSV"

finish
