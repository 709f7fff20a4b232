#!/usr/bin/env bash
# Issue 10, item 4: a delta-location-set release does the same work
# wherever the true point lies. Runs the work_probe case of
# check_delta_privacy under callgrind, once per position of the truth (rank
# 0 of the set, its last rank, a drift, outside the box), and compares the
# instructions executed inside the membership test and the surrogate search.
# Instruction counts are exact and repeatable for one binary, so equality is
# asserted; before the fix the membership test stopped at the first match
# and the surrogate search ran only on a drift, which this test tells
# apart by hundreds of instructions.
. "$(dirname "$0")/lib.sh"

probe=$top_builddir/tests/check_delta_privacy
command -v valgrind >/dev/null 2>&1 || { echo "1..0 # SKIP valgrind not installed"; exit 77; }
command -v callgrind_annotate >/dev/null 2>&1 || { echo "1..0 # SKIP callgrind_annotate not installed"; exit 77; }
# Sanitizer builds cannot run under valgrind.
if nm "$probe" 2>/dev/null | grep -q __asan_init ||
   nm "$top_builddir/.libs/check_delta_privacy" 2>/dev/null | grep -q __asan_init; then
    echo "1..0 # SKIP sanitizer build"
    exit 77
fi

echo "1..3"
declare -A work
for where in rank0 last drift outside; do
    out=$TMPD/callgrind.$where
    if ! CK_FORK=no CK_RUN_CASE=work_probe TS_WORK_PROBE=$where \
        valgrind -q --tool=callgrind --callgrind-out-file="$out" \
            --toggle-collect=ts_delta_set_contains \
            --toggle-collect=ts_delta_set_surrogate \
            "$probe" >"$TMPD/run.$where" 2>&1; then
        cat "$TMPD/run.$where"
        fatal "work probe '$where' failed"
    fi
    work[$where]=$(callgrind_annotate "$out" 2>/dev/null |
                   sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
    note "$where: ${work[$where]} instructions in the membership test and surrogate search"
    [ -n "${work[$where]}" ] || fatal "no instruction count for '$where'"
done
check "rank 0 and last rank cost the same" [ "${work[rank0]}" = "${work[last]}" ]
check "a drift costs the same as a member" [ "${work[drift]}" = "${work[rank0]}" ]
check "a point outside the box costs the same" [ "${work[outside]}" = "${work[rank0]}" ]
[ "$tests_failed" -eq 0 ]
