#!/usr/bin/env bash
# Short libFuzzer run of each target on a scratch copy of its seed corpus
# (so the repository's corpus is never written).
#   tests/fuzz/smoke.sh SECONDS FUZZ_SRCDIR TARGET...
# TARGET is the path of a built fuzzer; its corpus is
# FUZZ_SRCDIR/corpus/<basename>. Prints one `fuzz: <name>: ...` line per
# target; a crash input is kept as <target>.crash-* next to the binary.
# Exit status: the number of targets that failed (0 = all clean).
set -u

seconds=$1
fuzz_srcdir=$2
shift 2

export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$fuzz_srcdir/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# A sanitizer-wide ASAN_OPTIONS from the caller (exitcode=23 ...) is fine;
# libFuzzer turns any report into a failing exit status either way.

failures=0
for target in "$@"; do
    name=$(basename "$target")
    seeds=$fuzz_srcdir/corpus/$name
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/tracesan-$name.XXXXXX") || exit 99
    log=$target.smoke.log
    cp -R "$seeds/." "$scratch/"
    chmod -R u+w "$scratch"
    start=$(date +%s)
    if "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$target." \
            "$scratch" </dev/null >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        printf 'fuzz: %s: ok, %s runs in %ss\n' "$name" "${runs:-?}" \
            "$(( $(date +%s) - start ))"
    else
        failures=$((failures + 1))
        printf 'fuzz: %s: FAILED (log %s)\n' "$name" "$log"
        grep -E 'ERROR|SUMMARY|runtime error|^fuzz_|Test unit written' "$log" |
            head -n 20 | sed 's/^/    /'
    fi
    rm -rf "$scratch"
done
exit "$failures"
