#!/usr/bin/env bash
# Command two: install what is missing, build, and run every test.
#   1. scripts/setup.sh, then `make check` in ./build (unit + integration)
#   2. the same suite in ./build-asan, configured --enable-sanitizers
#      (AddressSanitizer + UndefinedBehaviorSanitizer, leaks fatal)
#   3. `make distcheck` (VPATH build from the tarball, read-only sources)
#   4. the daemon's integration tests again, tracesand under valgrind
#      memcheck (TS_VALGRIND=1: any error or definite/indirect leak fails)
#   5. the libFuzzer targets built in ./build-fuzz (CC=clang,
#      --enable-fuzzers), each run for FUZZ_SECONDS (20) on its seed corpus
#   6. the Debian package: `make deb` (without make check inside, which
#      stage 1 ran), then tests/integration_package.sh installs it with
#      dpkg -i, runs the installed daemon, removes and purges it (root
#      only; it leaves an existing installation alone and says so)
# The last line is always `tests: N passed, M failed`: N and M sum the test
# results of both builds, plus distcheck, the valgrind run, each fuzz
# target and the package as one more check each. Exit status is non-zero
# when anything failed.
#
# Environment: BUILD_DIR (default build), ASAN_BUILD_DIR (default
# build-asan), FUZZ_BUILD_DIR (default build-fuzz), FUZZ_SECONDS (default
# 20), SKIP_ASAN=1, SKIP_DISTCHECK=1, SKIP_VALGRIND=1, SKIP_FUZZ=1,
# SKIP_PACKAGE=1 to leave a stage out.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
build=${BUILD_DIR:-build}
asan_build=${ASAN_BUILD_DIR:-build-asan}
fuzz_build=${FUZZ_BUILD_DIR:-build-fuzz}
top=$(pwd)
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

# 4. valgrind: the integration tests that start tracesand, daemon wrapped in
# memcheck (tests/lib.sh). Their own checks must pass too, so an error that
# only changes behaviour is caught as well.
if [ "${SKIP_VALGRIND:-0}" != 1 ]; then
    vg_ok=1
    build_abs=$(cd "$build" && pwd)
    for script in integration_feed integration_bad_input integration_burst \
            integration_pim; do
        say "$build: $script.sh under valgrind"
        if ! (cd "$build_abs" && TS_VALGRIND=1 top_srcdir="$top" \
                top_builddir="$build_abs" bash "$top/tests/$script.sh") \
                >"$build/$script.valgrind.log" 2>&1; then
            vg_ok=0
            say "$build: $script.sh FAILED under valgrind; last lines of $build/$script.valgrind.log:"
            tail -n 40 "$build/$script.valgrind.log" | sed 's/^/    /'
        fi
    done
    if [ $vg_ok -eq 1 ]; then
        say "$build: valgrind integration run passed"
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
fi

# 5. Fuzz smoke: every libFuzzer target on its corpus for a short while.
if [ "${SKIP_FUZZ:-0}" != 1 ]; then
    mkdir -p "$fuzz_build"
    if [ ! -f "$fuzz_build/config.status" ] ||
       [ configure -nt "$fuzz_build/config.status" ]; then
        say "configuring in $fuzz_build (CC=clang --enable-fuzzers)"
        (cd "$fuzz_build" && CC=clang "$top/configure" -q --enable-fuzzers) \
            >"$fuzz_build/configure.out" 2>&1
    fi
    if make -C "$fuzz_build" -j"$jobs" fuzzers >"$fuzz_build/make-fuzzers.out" 2>&1; then
        make -C "$fuzz_build" fuzz-smoke FUZZ_SECONDS="${FUZZ_SECONDS:-20}" \
            >"$fuzz_build/fuzz-smoke.out" 2>&1
        sed -n 's/^\(fuzz: .*\)/\1/p; /^    /p' "$fuzz_build/fuzz-smoke.out" |
            sed 's/^/test: /'
        fuzz_pass=$(grep -c '^fuzz: .*: ok' "$fuzz_build/fuzz-smoke.out")
        fuzz_fail=$(grep -c '^fuzz: .*: FAILED' "$fuzz_build/fuzz-smoke.out")
        passed=$((passed + fuzz_pass))
        failed=$((failed + fuzz_fail))
        if [ $((fuzz_pass + fuzz_fail)) -eq 0 ]; then
            say "$fuzz_build: fuzz smoke produced no results"
            tail -n 20 "$fuzz_build/fuzz-smoke.out" | sed 's/^/    /'
            failed=$((failed + 1))
        fi
    else
        say "$fuzz_build: building the fuzzers FAILED (needs clang + libclang-rt-14-dev):"
        cat "$fuzz_build/configure.out" 2>/dev/null | tail -n 5 | sed 's/^/    /'
        grep -E 'error' "$fuzz_build/make-fuzzers.out" | head -n 20 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
fi

# 6. The Debian package, last: installing it changes this machine, and the
# test purges it again before it exits.
if [ "${SKIP_PACKAGE:-0}" != 1 ]; then
    say "$build: make deb"
    if DEB_BUILD_OPTIONS="nocheck parallel=$jobs" DEB_BUILD_PROFILES=nocheck \
            make -C "$build" deb >"$build/make-deb.out" 2>&1; then
        build_abs=$(cd "$build" && pwd)
        deb=$(ls "$build_abs"/deb/tracesan_*.deb 2>/dev/null | head -n 1)
        say "$build: tests/integration_package.sh ${deb#"$top"/}"
        pkg_rc=0
        (cd "$build_abs" && top_srcdir="$top" top_builddir="$build_abs" \
            bash "$top/tests/integration_package.sh" "$deb") \
            >"$build/package.log" 2>&1 || pkg_rc=$?
        case $pkg_rc in
            0) say "$build: package installed, run, removed and purged"
               grep -o '# SKIP .*' "$build/package.log" | sed 's/^/    /'
               passed=$((passed + 1)) ;;
            77) say "$build: package test skipped: $(sed -n 's/^1\.\.0 # SKIP //p' "$build/package.log")"
                skipped=$((skipped + 1)) ;;
            *) say "$build: package test FAILED; its failures and last lines ($build/package.log):"
               { grep -E '^not ok' "$build/package.log"; tail -n 30 "$build/package.log"; } |
                   sed 's/^/    /'
               failed=$((failed + 1)) ;;
        esac
    else
        say "$build: make deb FAILED; last lines of $build/make-deb.out:"
        tail -n 40 "$build/make-deb.out" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
fi

finish
