#!/usr/bin/env bash
# The Python client (clients/python) against the real daemon: its unittest
# suite publishes the bundled sample with publish(), receives it with a
# subscription and compares with tracesan tail and /metrics, reads batched
# output, uses CURVE keys, and runs the feed_to_jsonl.py example. Skipped
# only when Debian's python3-zmq or python3-protobuf is missing.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

PY=/usr/bin/python3
if [ ! -x "$PY" ] || ! "$PY" -c 'import zmq, google.protobuf' 2>/dev/null; then
    echo "1..0 # SKIP python3-zmq or python3-protobuf is not installed"
    exit 77
fi
CLIENT=$top_srcdir/clients/python
TRACESAN_PB2_DIR=$top_builddir/clients/python/generated
[ -f "$TRACESAN_PB2_DIR/tracesan/v1/tracesan_pb2.py" ] ||
    fatal "$TRACESAN_PB2_DIR/tracesan/v1/tracesan_pb2.py is not built (run make)"

# Nothing written into the (possibly read-only) source tree.
export PYTHONDONTWRITEBYTECODE=1 TRACESAN_PB2_DIR TRACESAND TRACESAN \
    TS_START_TIMEOUT
export TRACESAN_CONF=$SHIPPED_CONF
export TRACESAN_SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
export TRACESAN_EXAMPLE=$CLIENT/examples/feed_to_jsonl.py
export TRACESAN_TMP=$TMPD

LOG=$TMPD/unittest.log
(cd "$TMPD" && PYTHONPATH=$CLIENT timeout 300 "$PY" -m unittest discover -v \
    -s "$CLIENT/tests" -p 'test_*.py') >"$LOG" 2>&1
status=$?
sed 's/^/# /' "$LOG"
check_eq "python client: the unittest suite passes" 0 "$status"
check "python client: no test was skipped" \
    sh -c 'grep -q "^OK$" "$1" && ! grep -q "skipped" "$1"' sh "$LOG"
ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$LOG")
check_ge "python client: every test ran" 12 "${ran:-0}"

# The package is importable from the source tree with the generated
# module found through TRACESAN_PB2_DIR alone.
check "python client: import from the source tree" \
    env PYTHONPATH="$CLIENT" "$PY" -c \
    'import tracesan_client as t; assert t.pb.SanitizedLocation.DESCRIPTOR.full_name == "tracesan.v1.SanitizedLocation"'
if env -u TRACESAN_PB2_DIR PYTHONPATH="$CLIENT" TRACESAN_PB2_DIR="$TMPD/nowhere" \
        "$PY" -c 'import tracesan_client' 2>"$TMPD/import.err"; then
    fail "python client: a wrong TRACESAN_PB2_DIR is an error"
else
    check "python client: a wrong TRACESAN_PB2_DIR is an error naming it" \
        grep -q "TRACESAN_PB2_DIR=$TMPD/nowhere" "$TMPD/import.err"
fi

finish
