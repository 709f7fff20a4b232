#!/usr/bin/env bash
# Command two: install what is missing, build, and run every test.
#   1. scripts/setup.sh, then `make check` in ./build (unit + integration)
#   2. the same suite in ./build-asan, configured --enable-sanitizers
#      (AddressSanitizer + UndefinedBehaviorSanitizer, leaks fatal)
#   3. `make distcheck` (VPATH build from the tarball, read-only sources)
# The last line is always `tests: N passed, M failed`: N and M sum the test
# results of both builds, plus distcheck as one more check. Exit status is
# non-zero when anything failed.
#
# Environment: BUILD_DIR (default build), ASAN_BUILD_DIR (default
# build-asan), SKIP_ASAN=1, SKIP_DISTCHECK=1 to leave a stage out.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
build=${BUILD_DIR:-build}
asan_build=${ASAN_BUILD_DIR:-build-asan}
jobs=$(nproc 2>/dev/null || echo 2)

passed=0
failed=0
skipped=0

say() { printf 'test: %s\n' "$*"; }

# Add a build's results from its test-suite.log, and show the logs of
# failed tests.
count_results() {
    local dir=$1 log=$1/test-suite.log
    if [ ! -f "$log" ]; then
        say "$dir: no test-suite.log (the build or the test harness failed)"
        failed=$((failed + 1))
        return
    fi
    local pass fail error xfail xpass skip
    field() { sed -n "s/^# $1: *\([0-9][0-9]*\).*/\1/p" "$log" | head -n 1; }
    pass=$(field PASS); fail=$(field FAIL); error=$(field ERROR)
    xfail=$(field XFAIL); xpass=$(field XPASS); skip=$(field SKIP)
    passed=$((passed + ${pass:-0} + ${xfail:-0}))
    failed=$((failed + ${fail:-0} + ${error:-0} + ${xpass:-0}))
    skipped=$((skipped + ${skip:-0}))
    say "$dir: ${pass:-0} passed, $(( ${fail:-0} + ${error:-0} + ${xpass:-0} )) failed, ${skip:-0} skipped"
    local trs name
    while IFS= read -r trs; do
        if grep -qE '^:test-result: (FAIL|ERROR|XPASS)' "$trs"; then
            name=${trs%.trs}
            say "---- $name.log (last 40 lines) ----"
            tail -n 40 "$name.log" 2>/dev/null | sed 's/^/    /'
        fi
    done < <(find "$dir" -name '*.trs' -newer "$dir/.test-start" 2>/dev/null | sort)
}

# run_suite DIR: make check in DIR with fresh results.
run_suite() {
    local dir=$1
    rm -f "$dir/test-suite.log"
    touch "$dir/.test-start"
    say "$dir: make check"
    if make -C "$dir" -j"$jobs" check >"$dir/make-check.out" 2>&1; then
        say "$dir: make check succeeded"
    else
        say "$dir: make check FAILED"
        grep -E '^(FAIL|ERROR|XPASS):|error:' "$dir/make-check.out" | head -n 30 | sed 's/^/    /'
    fi
    count_results "$dir"
}

finish() {
    [ "$skipped" -gt 0 ] && say "$skipped tests skipped"
    echo "tests: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

# 1. Packages, plain build, the whole suite.
if ! BUILD_DIR=$build scripts/setup.sh; then
    say "setup failed: nothing was tested"
    failed=$((failed + 1))
    finish
fi
run_suite "$build"

# 2. Sanitizers.
if [ "${SKIP_ASAN:-0}" != 1 ]; then
    if BUILD_DIR=$asan_build SETUP_SKIP_PACKAGES=1 scripts/setup.sh --enable-sanitizers; then
        export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23}
        export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
        run_suite "$asan_build"
    else
        say "$asan_build: sanitizer build FAILED"
        failed=$((failed + 1))
    fi
fi

# 3. distcheck: the tarball builds and passes its tests out of tree.
if [ "${SKIP_DISTCHECK:-0}" != 1 ]; then
    say "$build: make distcheck"
    if make -C "$build" -j"$jobs" distcheck >"$build/make-distcheck.out" 2>&1; then
        say "$build: distcheck passed"
        passed=$((passed + 1))
    else
        say "$build: distcheck FAILED; last lines of $build/make-distcheck.out:"
        tail -n 40 "$build/make-distcheck.out" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
fi

finish
