#!/usr/bin/env python3
"""Pipe tracesand's feed to JSON lines on stdout.

Each message becomes one line, wrapped in an object whose only key says
what it is, as ``tracesan tail --format jsonl`` writes them:

    {"sanitized": {"user_id": "62", "timestamp_ms": "1254682593000", ...}}
    {"rejected": {"user_id": "7", "reason": "REJECTION_REASON_BUDGET_EXHAUSTED", ...}}
    {"density": {"profile": "privic", ...}}

Field names are the wire format's (protobuf's json_format with
preserving_proto_field_name=True). json_format writes 64-bit integers
(timestamp_ms, window_start_ms, ...) as strings, as proto3's JSON mapping
asks; ``tracesan replay --format jsonl`` reads both forms. With the
package installed (pip install ./clients/python) it runs from anywhere;
from the source tree, set PYTHONPATH=clients/python.

    python3 clients/python/examples/feed_to_jsonl.py \\
        --connect tcp://127.0.0.1:7002 --topic sanitized. | kcat -P -b broker -t points

Options: --connect ENDPOINT (default tcp://127.0.0.1:7002), --topic T
(repeatable, default everything), --count N (stop after N messages),
--idle-timeout S (stop after S seconds without one), --curve-server-key
FILE with --curve-key PREFIX (CURVE, key files as tracesan keygen writes).
"""

import argparse
import json
import sys

from google.protobuf import json_format

import tracesan_client


def main():
    parser = argparse.ArgumentParser(
        description="Pipe tracesand's feed to JSON lines on stdout.")
    parser.add_argument("--connect", default="tcp://127.0.0.1:7002")
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--idle-timeout", type=float, default=None)
    parser.add_argument("--curve-server-key")
    parser.add_argument("--curve-key")
    parser.add_argument("--ready-file",
                        help="create this file once subscribed")
    args = parser.parse_args()
    if (args.curve_server_key is None) != (args.curve_key is None):
        parser.error("--curve-server-key and --curve-key go together")
    curve = None
    if args.curve_key is not None:
        curve = tracesan_client.load_curve(args.curve_server_key,
                                           args.curve_key)

    written = 0
    with tracesan_client.Subscription(args.connect, args.topic or [""],
                                      curve) as feed:
        feed.wait_connected()
        if args.ready_file:
            open(args.ready_file, "w").close()
        for message in feed.messages(args.idle_timeout):
            fields = json_format.MessageToDict(
                message, preserving_proto_field_name=True)
            line = json.dumps({tracesan_client.kind_of(message): fields},
                              separators=(",", ":"), ensure_ascii=False)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            written += 1
            if args.count and written >= args.count:
                break
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
