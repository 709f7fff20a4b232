#!/usr/bin/env bash
# `tracesand --check-config`: the shipped config is valid; syntax and
# semantic errors are reported as FILE:LINE: on stderr with exit 1; a bad
# -o override names the override.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

not_grep() { ! grep -q "$@"; }

# run_check NAME ARGS...: runs tracesand, sets rc and out (stderr in a file).
run_check() {
    local name=$1
    shift
    rc=0
    "$TRACESAND" "$@" >"$TMPD/$name.out" 2>"$TMPD/$name.err" </dev/null || rc=$?
    out=$(cat "$TMPD/$name.out")
}

# expect_error NAME WANT_TEXT ARGS...: exit 1, WANT_TEXT in stderr.
expect_error() {
    local name=$1 want=$2
    shift 2
    run_check "$name" "$@"
    check_eq "$name: exit status" 1 "$rc"
    if grep -qF -- "$want" "$TMPD/$name.err"; then
        pass "$name: stderr names '$want'"
    else
        fail "$name: stderr does not contain '$want'"
        show_file "$TMPD/$name.err" 5
    fi
    check_eq "$name: nothing on stdout" "" "$out"
}

# The shipped configuration, both spellings.
run_check shipped --check-config "$SHIPPED_CONF"
check_eq "shipped config: exit status" 0 "$rc"
check_eq "shipped config: stdout" "$SHIPPED_CONF: configuration OK" "$out"
run_check shipped-c -c "$SHIPPED_CONF" --check-config
check_eq "shipped config via -c: exit status" 0 "$rc"
check_eq "shipped config via -c: stdout" "$SHIPPED_CONF: configuration OK" "$out"
run_check shipped-o --check-config "$SHIPPED_CONF" -o profiles.geoind.radius_m=200
check_eq "shipped config with a valid override: exit status" 0 "$rc"

# A syntax error appended to a copy of the shipped config: its line is the
# file's last.
broken=$TMPD/broken.conf
cp "$SHIPPED_CONF" "$broken"
printf 'this line = is not ; valid\n' >>"$broken"
broken_line=$(wc -l <"$broken")
expect_error appended-syntax "$broken:$broken_line:" --check-config "$broken"

# Fixtures with the error on a known line (stated in each file's first line).
for fixture in check_syntax_error check_bad_radius check_unknown_mechanism; do
    file=$TEST_DATA/$fixture.conf
    line=$(sed -n '1s/.*line \([0-9]*\).*/\1/p' "$file")
    expect_error "$fixture" "$file:$line:" --check-config "$file"
done

# An error in the shipped config itself, by line: set radius_m = -1 where
# the shipped file sets it.
radius_line=$(grep -n '^[[:space:]]*radius_m[[:space:]]*[=:]' "$SHIPPED_CONF" | head -n 1 | cut -d: -f1)
if [ -n "$radius_line" ]; then
    negative=$TMPD/negative-radius.conf
    sed "${radius_line}s/\(radius_m[[:space:]]*[=:][[:space:]]*\)[^;]*/\1-1.0/" \
        "$SHIPPED_CONF" >"$negative"
    expect_error shipped-negative-radius "$negative:$radius_line:" --check-config "$negative"
else
    fail "shipped config sets no radius_m (every key should be documented there)"
fi

# Overrides: reported as override 'path=value'.
expect_error override-negative "override 'profiles.geoind.radius_m=-5'" \
    --check-config "$SHIPPED_CONF" -o profiles.geoind.radius_m=-5
expect_error override-wrong-type "override 'input.hwm=\"lots\"'" \
    --check-config "$SHIPPED_CONF" -o 'input.hwm="lots"'
expect_error override-bad-choice "override 'input.type=carrier-pigeon'" \
    --check-config "$SHIPPED_CONF" -o input.type=carrier-pigeon
expect_error override-no-equals "override 'nonsense'" \
    --check-config "$SHIPPED_CONF" -o nonsense

# Help and version for every program.
for args in "$TRACESAND --help" "$TRACESAND --version" "$TRACESAN --help" \
            "$TRACESAN sanitize --help" "$TRACESAN replay --help" "$TRACESAN tail --help"; do
    rc=0
    $args >"$TMPD/help.out" 2>&1 </dev/null || rc=$?
    label=${args#"$top_builddir"/}
    check_eq "$label: exit status" 0 "$rc"
    check "$label: prints something" test -s "$TMPD/help.out"
done
check "tracesand --help documents --check-config" grep -q -- --check-config <("$TRACESAND" --help)
rc=0
"$TRACESAND" --no-such-option >/dev/null 2>&1 </dev/null || rc=$?
check_eq "tracesand --no-such-option: exit status" 1 "$rc"

# The shipped pim and lm-delta profiles have model = "": disabled, not an
# error; --check-config says so (one info line each) and still succeeds.
check "shipped config: pim is disabled, with the reason" \
    grep -q "profile 'pim' (mechanism pim) is disabled: its model is \"\"" \
    "$TMPD/shipped.err"
check "shipped config: lm-delta is disabled" \
    grep -q "profile 'lm-delta' (mechanism lm-delta) is disabled" "$TMPD/shipped.err"
check "shipped config: mi-channel is disabled" \
    grep -q "profile 'mi-channel' (mechanism mi-channel) is disabled" "$TMPD/shipped.err"
check_eq "shipped config: one line per disabled profile" 3 \
    "$(grep -c "is disabled" "$TMPD/shipped.err")"
# Enabled by -o profiles.pim.model=PATH: a learned model loads, pim is no
# longer reported disabled; an unreadable model is an error naming it.
MODEL=$TMPD/check_config.model
printf 'user,ts,lat,lon\n' >"$TMPD/learn.csv"
for i in $(seq 0 30); do
    printf 'a,%d,39.91%02d,116.31%02d\n' $((1700000000 + 60 * i)) "$i" "$i"
done >>"$TMPD/learn.csv"
if "$TRACESAN" learn --region 39.9,116.3,39.95,116.36 --cell-m 500 \
        --tick-s 60 --output "$MODEL" "$TMPD/learn.csv" 2>"$TMPD/learn.err"; then
    run_check enabled --check-config "$SHIPPED_CONF" -o "profiles.pim.model=$MODEL"
    check_eq "pim enabled by -o model=PATH: exit status" 0 "$rc"
    check_eq "pim enabled: stdout" "$SHIPPED_CONF: configuration OK" "$out"
    check "pim enabled: no longer reported disabled" \
        not_grep "profile 'pim' " "$TMPD/enabled.err"
    check "pim enabled: lm-delta still disabled" \
        grep -q "profile 'lm-delta' .*is disabled" "$TMPD/enabled.err"
else
    fail "tracesan learn failed"
    show_file "$TMPD/learn.err"
fi
# learn's old -o FILE (before -o meant an override everywhere) still writes
# the same model, and says to use --output.
if "$TRACESAN" learn --region 39.9,116.3,39.95,116.36 --cell-m 500 \
        --tick-s 60 -o "$MODEL.old" "$TMPD/learn.csv" 2>"$TMPD/learn_old.err"; then
    check "learn -o: same model as --output" cmp -s "$MODEL" "$MODEL.old"
    check "learn -o: deprecation message" \
        grep -q "tracesan learn: -o FILE is deprecated, use --output FILE" \
        "$TMPD/learn_old.err"
else
    fail "tracesan learn -o failed"
    show_file "$TMPD/learn_old.err"
fi
expect_error model-missing "$TMPD/no-such.model" \
    --check-config "$SHIPPED_CONF" -o "profiles.pim.model=$TMPD/no-such.model"
expect_error model-default-disabled "default_profile 'pim' is disabled" \
    --check-config "$SHIPPED_CONF" -o default_profile=pim

# A missing file is an error too, not "configuration OK".
run_check missing --check-config "$TMPD/does-not-exist.conf"
check_eq "missing file: exit status" 1 "$rc"

finish
