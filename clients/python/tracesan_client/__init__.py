"""Python client of tracesand, the streaming location-trace sanitizer.

    from tracesan_client import subscribe, publish, read_csv

    publish("tcp://127.0.0.1:7001", read_csv("trace.csv"))
    for message in subscribe("tcp://127.0.0.1:7002", ["sanitized."]):
        print(message.user_id, message.lat, message.lon)

Depends on pyzmq and protobuf only (Debian: python3-zmq,
python3-protobuf). The message classes are generated from the wire schema
at build time; ``tracesan_client.pb`` is that module (where it is looked
for: tracesan_client/_schema.py). Field names are the wire format's
(docs/wire-format.md).
"""

from .client import (DEFAULT_BATCH_SIZE, Published, Subscription,
                     TracesanError, as_update, decode, kind_of, load_curve,
                     pb, publish, read_csv, read_key_file, subscribe,
                     topic_of)

__all__ = [
    "DEFAULT_BATCH_SIZE", "Published", "Subscription", "TracesanError",
    "as_update", "decode", "kind_of", "load_curve", "pb", "publish",
    "read_csv", "read_key_file", "subscribe", "topic_of",
]
__version__ = "0.1.0"
