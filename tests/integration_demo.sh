#!/usr/bin/env bash
# Command one of the README, scripts/demo.sh, on this build (issue 29):
# every profile of the shipped configuration runs through the daemon and
# gets a complete row in the table (mechanism, released + rejected = the
# sample, errors, spend, and the guarantee its mechanism states in
# tracesand --help); the error-CDF figure is a PNG; every profile passes
# the exactly-one-outcome check. --quick keeps the geoind-only run.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
command -v python3 >/dev/null 2>&1 || fatal "python3 is not installed (scripts/setup.sh installs it)"
SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
ROWS=$(data_rows "$SAMPLE")
OUT=$TMPD/out

# The profiles of the shipped file: the groups directly under `profiles`.
SHIPPED=$(sed -n '/^profiles = {/,/^};/ s/^    \([a-z][a-z0-9-]*\) = {$/\1/p' "$SHIPPED_CONF" | sort)
check "the shipped file has profiles" test -n "$SHIPPED"

demo() {
    BUILD_DIR=$top_builddir DEMO_OUT=$OUT DEMO_FREE_PORTS=1 \
        timeout 300 bash "$top_srcdir/scripts/demo.sh" --no-build "$@" </dev/null
}

# --- every profile ---------------------------------------------------------
rc=0
demo >"$TMPD/demo.out" 2>&1 || rc=$?
check_eq "demo: exit status" 0 "$rc"
[ "$rc" = 0 ] || show_file "$TMPD/demo.out" 40
TABLE=$OUT/profiles.txt
check "demo: prints the table it writes" \
    grep -qF "$(sed -n 2p "$TABLE" 2>/dev/null || echo missing)" "$TMPD/demo.out"
check_eq "demo: one row per shipped profile, in the table" "$SHIPPED" \
    "$(awk 'NR > 1 { print $1 }' "$TABLE" | sort)"
"$TRACESAND" --help 2>&1 |
    sed -n '/^Mechanisms/,$s/^  \([a-z][a-z-]*\): \(.*\)$/\1\t\2/p' >"$TMPD/summaries"
bad_rows=$(awk -v rows="$ROWS" -v summaries="$TMPD/summaries" '
    BEGIN { FS = "\t"; while ((getline line < summaries) > 0) { split(line, f, "\t"); s[f[1]] = f[2] } FS = " " }
    NR == 1 { next }
    {
        guarantee = $0
        for (i = 0; i < 7; i++) sub(/^[^ ]+ +/, "", guarantee)
        if ($3 + $4 != rows || $5 !~ /^[0-9]+$/ || $6 !~ /^[0-9]+$/ ||
            $7 !~ /^[0-9.e+-]+$/ || !($2 in s) || guarantee != s[$2])
            print $1
    }' "$TABLE" 2>&1)
[ -s "$TABLE" ] || bad_rows="no table in $TABLE"
check_eq "demo: every row complete (released + rejected = $ROWS, errors, spend, the mechanism's own summary)" \
    "" "$bad_rows"
check "demo: pim, lm-delta and mi-channel enabled from the sample (learn, optimize)" \
    sh -c 'for p in pim lm-delta mi-channel; do
               awk -v p="$p" "\$1 == p && \$3 > 0 { ok = 1 } END { exit !ok }" "$1" || exit 1
           done' sh "$TABLE"
check "demo: the figure is a PNG" \
    sh -c 'test "$(head -c 8 "$1" | od -An -tx1 | tr -d " \n")" = 89504e470d0a1a0a' \
    sh "$OUT/error-cdf.png"
check "demo: prints the figure's path" grep -qF "figure: $OUT/error-cdf.png" "$TMPD/demo.out"
check "demo: prints the dashboard's address while the daemon runs" \
    grep -qE '^demo: dashboard \(live while the daemon runs\): http://127\.0\.0\.1:[0-9]+/$' "$TMPD/demo.out"
check "demo: ends with the exactly-one-outcome check of every profile" \
    grep -qx "demo: done: in each of the $(wc -w <<<"$SHIPPED") profiles, every check-in produced exactly one sanitized point or rejection" \
    "$TMPD/demo.out"

# --- --quick: geoind alone -------------------------------------------------
rc=0
demo --quick >"$TMPD/quick.out" 2>&1 || rc=$?
check_eq "demo --quick: exit status" 0 "$rc"
check "demo --quick: the geoind counts" \
    grep -q "^Counts: $ROWS check-ins in, [0-9]* sanitized, [0-9]* rejected$" "$TMPD/quick.out"
check "demo --quick: the error next to planar Laplace's theory" \
    grep -q "theory for planar Laplace" "$TMPD/quick.out"
check "demo --quick: ends with the exactly-one-outcome check" \
    grep -qx "demo: done: every check-in produced exactly one sanitized point or rejection" \
    "$TMPD/quick.out"
[ "$tests_failed" -eq 0 ] || show_file "$TMPD/quick.out" 20

finish
