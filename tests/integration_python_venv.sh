#!/usr/bin/env bash
# `pip install ./clients/python` as a user runs it (issue 29): the package
# carries its tracesan_pb2 module, checked in, so the install needs no
# build step; this test fails when that module no longer matches
# proto/tracesan/v1/tracesan.proto. Then it installs the package into a
# fresh virtual environment (system site-packages for pyzmq and protobuf,
# no build isolation and no index: this machine reaches no Python index),
# imports it from outside the source tree, and runs one publish/subscribe
# round trip against the real daemon.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

PY=/usr/bin/python3
if [ ! -x "$PY" ] || ! "$PY" -c 'import zmq, google.protobuf' 2>/dev/null; then
    echo "1..0 # SKIP python3-zmq or python3-protobuf is not installed"
    exit 77
fi
if ! "$PY" -c 'import ensurepip, setuptools, wheel' 2>/dev/null; then
    echo "1..0 # SKIP python3-venv, python3-setuptools or python3-wheel is not installed (scripts/setup.sh installs them)"
    exit 77
fi
PROTOC=${PROTOC:-protoc}
command -v "$PROTOC" >/dev/null 2>&1 || fatal "protoc is not installed (Debian package protobuf-compiler)"
CLIENT=$top_srcdir/clients/python
CHECKED_IN=$CLIENT/tracesan_client/_generated/tracesan/v1/tracesan_pb2.py
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
unset TRACESAN_PB2_DIR PYTHONPATH

# --- the checked-in module is the schema's -------------------------------
# Compared as descriptors (what the module registers against what protoc
# makes of the .proto now), so a newer protoc's different layout of the
# same schema is no failure, and any change of the schema is. json_name,
# which --descriptor_set_out adds and the Python generator leaves out, is
# derived from the field name and compared through it.
"$PROTOC" --proto_path="$top_srcdir/proto" --descriptor_set_out="$TMPD/schema.pb" \
    "$top_srcdir/proto/tracesan/v1/tracesan.proto" || fatal "protoc failed"
if "$PY" - "$CHECKED_IN" "$TMPD/schema.pb" >"$TMPD/schema.out" 2>&1 <<'EOF'
import importlib.util
import sys

from google.protobuf import descriptor_pb2

spec = importlib.util.spec_from_file_location("checked_in_pb2", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)


def without_json_names(file_descriptor):
    def strip(messages):
        for message in messages:
            for field in message.field:
                field.ClearField("json_name")
            strip(message.nested_type)
    strip(file_descriptor.message_type)
    return file_descriptor


checked_in = without_json_names(descriptor_pb2.FileDescriptorProto.FromString(
    module.DESCRIPTOR.serialized_pb))
with open(sys.argv[2], "rb") as f:
    (schema,) = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
schema = without_json_names(schema)
if checked_in != schema:
    import difflib
    print("\n".join(difflib.unified_diff(
        str(checked_in).splitlines(), str(schema).splitlines(),
        "checked in", "proto/", lineterm="", n=2)))
    sys.exit(1)
EOF
then
    pass "the checked-in tracesan_pb2.py matches proto/tracesan/v1/tracesan.proto"
else
    fail "the checked-in tracesan_pb2.py is stale: run make update-python-pb2 and commit it"
    show_file "$TMPD/schema.out"
fi

# --- pip install into a fresh venv ----------------------------------------
# pip builds in the directory it is given (setuptools writes build/ and
# *.egg-info there), so from a copy: the source tree may be read-only.
cp -R "$CLIENT" "$TMPD/python-client"
chmod -R u+w "$TMPD/python-client"
rm -rf "$TMPD/python-client/tracesan_client/__pycache__"
VENV=$TMPD/venv
"$PY" -m venv --system-site-packages "$VENV" >"$TMPD/venv.log" 2>&1 ||
    { show_file "$TMPD/venv.log"; fatal "python3 -m venv failed"; }
if (cd "$TMPD" && "$VENV/bin/pip" install --no-build-isolation --no-index \
        ./python-client) >"$TMPD/pip.log" 2>&1; then
    pass "pip install --no-build-isolation ./clients/python into a fresh venv"
else
    fail "pip install --no-build-isolation ./clients/python into a fresh venv"
    show_file "$TMPD/pip.log" 30
    finish
fi
check "pip: the package is installed in the venv" \
    grep -q "Successfully installed tracesan-client-" "$TMPD/pip.log"

# Imported from elsewhere, the venv's copy and its own module are used.
mkdir -p "$TMPD/elsewhere"
(cd "$TMPD/elsewhere" && "$VENV/bin/python" -c '
import sys
import tracesan_client as tc
module = sys.modules["tracesan_client.tracesan_pb2"]
print(tc.__file__)
print(module.__file__)
print(tc.pb.SanitizedLocation.DESCRIPTOR.full_name)
') >"$TMPD/import.out" 2>&1
check "import: tracesan_client comes from the venv" \
    sh -c 'sed -n 1p "$1" | grep -q "^$2/lib/python3[^/]*/site-packages/tracesan_client/__init__.py$"' \
    sh "$TMPD/import.out" "$VENV"
check "import: its tracesan_pb2 is the installed copy" \
    sh -c 'sed -n 2p "$1" | grep -q "^$2/lib/python3[^/]*/site-packages/tracesan_client/_generated/tracesan/v1/tracesan_pb2.py$"' \
    sh "$TMPD/import.out" "$VENV"
check_eq "import: the wire schema's classes" "tracesan.v1.SanitizedLocation" \
    "$(sed -n 3p "$TMPD/import.out")"
show_file "$TMPD/import.out" 3

# --- one round trip through the real daemon --------------------------------
start_daemon venv
(cd "$TMPD/elsewhere" && timeout 60 "$VENV/bin/python" - "$INPUT_EP" "$OUTPUT_EP" <<'EOF'
import sys
import tracesan_client as tc

input_ep, output_ep = sys.argv[1:]
update = {"user_id": "venv-user", "timestamp_ms": 1700000000000,
          "lat": 40.7128, "lon": -74.0060}
with tc.Subscription(output_ep, ["sanitized.", "rejected"]) as sub:
    sub.wait_connected()
    sent = tc.publish(input_ep, [update])
    message = sub.receive(timeout=20)
print("published", sent.updates, sent.messages)
print("kind", tc.kind_of(message) if message is not None else "none")
if message is not None:
    print("user", message.user_id, message.timestamp_ms)
    print("profile", message.profile, message.mechanism)
    print("moved", (message.lat, message.lon) != (update["lat"], update["lon"]))
EOF
) >"$TMPD/roundtrip.out" 2>&1
check_eq "round trip: exit status" 0 "$?"
check "round trip: one update in one message" grep -qx "published 1 1" "$TMPD/roundtrip.out"
check "round trip: a sanitized point came back" grep -qx "kind sanitized" "$TMPD/roundtrip.out"
check "round trip: for that user and time" \
    grep -qx "user venv-user 1700000000000" "$TMPD/roundtrip.out"
check "round trip: by the default profile's mechanism" \
    grep -qx "profile geoind geoind" "$TMPD/roundtrip.out"
check "round trip: not the true point" grep -qx "moved True" "$TMPD/roundtrip.out"
show_file "$TMPD/roundtrip.out"
stop_daemon venv
check_eq "daemon: one update sanitized" 1 "$(summary_value sanitized)"

finish
