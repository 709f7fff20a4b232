"""Subscribing to tracesand's feed and publishing location updates to it.

The wire format is docs/wire-format.md: the daemon reads ``LocationBatch``
payloads on a PULL socket (one frame, or ``[topic][payload]``) and
publishes ``[topic][payload]`` on a PUB socket, with topics
``sanitized.<profile>`` (SanitizedLocation), ``rejected`` (Rejection),
``density.<profile>`` (DensityEstimate) and, with ``output.format =
"batch"``, ``batch`` (OutcomeBatch). A subscription yields the same
individual messages whichever output format the daemon uses.
"""

import collections
import math
import time

import zmq
from google.protobuf.message import DecodeError

from . import _schema

pb = _schema.load()

# After the connection is up, the subscription still has to reach the
# publisher; until it has, the publisher drops our messages (tracesan tail
# waits as long).
SUBSCRIPTION_GRACE_S = 0.2
DEFAULT_BATCH_SIZE = 100
RECEIVE_HWM = 1_000_000
SEND_HWM = 10_000

_HANDSHAKE_FAILURES = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "this client key is not allowed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        "wrong server key or no CURVE on that side",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        "wrong server key or no CURVE on that side",
}


class TracesanError(Exception):
    """The daemon could not be reached, or refused this client."""


Published = collections.namedtuple("Published", "updates messages")


# ------------------------------------------------------------------- CURVE

def read_key_file(path):
    """The Z85 key (40 characters) in a tracesan key file, as bytes."""
    with open(path, "rb") as f:
        text = f.read().strip()
    if len(text) != 40 or b"\n" in text:
        # Like the daemon, never quote key material.
        raise ValueError(f"{path}: expected a 40-character Z85 CURVE key")
    return text


def load_curve(server_public_file, client_prefix):
    """The ``curve`` argument of subscribe() and publish() from the files
    tracesan uses: the daemon's public key, and this client's pair
    PREFIX.pub / PREFIX.key as ``tracesan keygen --out PREFIX`` writes it."""
    return (read_key_file(server_public_file),
            read_key_file(client_prefix + ".pub"),
            read_key_file(client_prefix + ".key"))


def _as_key(key):
    return key.encode("ascii") if isinstance(key, str) else bytes(key)


def _setup_curve(socket, curve):
    server_public, client_public, client_secret = curve
    socket.curve_serverkey = _as_key(server_public)
    socket.curve_publickey = _as_key(client_public)
    socket.curve_secretkey = _as_key(client_secret)


def _wait_for_connection(monitor, curve, endpoint, timeout):
    """Returns once the socket is connected (with CURVE: once the
    handshake succeeded); TracesanError when it was refused or nothing
    happened within timeout seconds."""
    wanted = zmq.EVENT_HANDSHAKE_SUCCEEDED if curve else zmq.EVENT_CONNECTED
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not monitor.poll(left * 1000):
            raise TracesanError(f"no connection to {endpoint} within "
                                f"{timeout:g} s")
        frames = monitor.recv_multipart()
        event = int.from_bytes(frames[0][:2], "little")
        if event == wanted:
            return
        if event in _HANDSHAKE_FAILURES:
            raise TracesanError(f"{endpoint} refused the CURVE handshake "
                                f"({_HANDSHAKE_FAILURES[event]})")


# ---------------------------------------------------------------- messages

def kind_of(message):
    """"sanitized", "rejected" or "density": what a feed message is (the
    key tracesan tail --format jsonl wraps it in)."""
    name = message.DESCRIPTOR.name
    if name == "SanitizedLocation":
        return "sanitized"
    if name == "Rejection":
        return "rejected"
    if name == "DensityEstimate":
        return "density"
    raise ValueError(f"{name} is not a feed message")


def topic_of(message):
    """The topic the daemon publishes a message on by itself."""
    kind = kind_of(message)
    if kind == "rejected":
        return "rejected"
    return f"{kind}.{message.profile}"


def decode(topic, payload):
    """The messages of one published [topic][payload] (an OutcomeBatch
    gives its points, then its rejections). DecodeError when the payload is
    not what the topic says; [] for a topic this client does not know."""
    if topic.startswith(b"sanitized."):
        return [pb.SanitizedLocation.FromString(payload)]
    if topic == b"rejected":
        return [pb.Rejection.FromString(payload)]
    if topic.startswith(b"density."):
        return [pb.DensityEstimate.FromString(payload)]
    if topic == b"batch":
        batch = pb.OutcomeBatch.FromString(payload)
        return list(batch.sanitized) + list(batch.rejected)
    return []


# -------------------------------------------------------------- subscribing

class Subscription:
    """A SUB socket on the daemon's output.

    topics are prefixes, as for ``tracesan tail --topic``: ``"sanitized."``
    for every profile's points, ``"sanitized.geoind"`` for one,
    ``"rejected"``, ``"density."``, or ``""`` (the default) for everything.
    A daemon publishing batches (``output.format = "batch"``) is read the
    same way: its batches are split and each element kept when its own
    topic matches. curve is (server_public, client_public, client_secret),
    Z85 text or bytes (see load_curve).

    Messages are decoded as they are received; those that do not decode
    are counted in ``skipped``.
    """

    def __init__(self, endpoint, topics=("",), curve=None, *, context=None,
                 receive_hwm=RECEIVE_HWM):
        if isinstance(topics, (str, bytes)):
            topics = (topics,)
        self.endpoint = endpoint
        self.skipped = 0
        self._prefixes = tuple(t.encode() if isinstance(t, str) else bytes(t)
                               for t in topics)
        self._curve = curve
        self._pending = collections.deque()
        self._own_context = context is None
        self._context = context if context is not None else zmq.Context()
        self._monitor = None
        self._socket = self._context.socket(zmq.SUB)
        try:
            self._socket.setsockopt(zmq.RCVHWM, receive_hwm)
            self._socket.setsockopt(zmq.LINGER, 0)
            subscriptions = set(self._prefixes)
            if not any(b"batch".startswith(p) for p in self._prefixes):
                subscriptions.add(b"batch")
            for prefix in subscriptions:
                self._socket.setsockopt(zmq.SUBSCRIBE, prefix)
            if curve is not None:
                _setup_curve(self._socket, curve)
            self._monitor = self._socket.get_monitor_socket(
                zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED |
                zmq.EVENT_HANDSHAKE_FAILED_AUTH |
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL |
                zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
            self._socket.connect(endpoint)
        except BaseException:
            self.close()
            raise

    def wait_connected(self, timeout=10.0):
        """Blocks until the subscription has reached the daemon, so that
        what is published from now on arrives. TracesanError when the
        connection (or, with CURVE, the handshake) fails in time."""
        _wait_for_connection(self._monitor, self._curve, self.endpoint,
                             timeout)
        time.sleep(SUBSCRIPTION_GRACE_S)

    def _wanted(self, message, topic):
        if topic == b"batch":
            if any(b"batch".startswith(p) for p in self._prefixes):
                return True
            topic = topic_of(message).encode()
        return any(topic.startswith(p) for p in self._prefixes)

    def receive(self, timeout=None):
        """The next message, or None when none came within timeout seconds
        (None: wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            if deadline is None:
                wait_ms = None
            else:
                wait_ms = max(0.0, deadline - time.monotonic()) * 1000
            if not self._socket.poll(wait_ms):
                return None
            frames = self._socket.recv_multipart()
            if len(frames) != 2:
                self.skipped += 1
                continue
            topic, payload = frames
            try:
                messages = decode(topic, payload)
            except DecodeError:
                self.skipped += 1
                continue
            self._pending.extend(m for m in messages
                                 if self._wanted(m, topic))
        return self._pending.popleft()

    def messages(self, idle_timeout=None):
        """Yields messages until idle_timeout seconds pass without one
        (None: for ever)."""
        while True:
            message = self.receive(idle_timeout)
            if message is None:
                return
            yield message

    def __iter__(self):
        return self.messages()

    def close(self):
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._own_context and self._context is not None:
            self._context.term()
        self._context = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def subscribe(endpoint, topics=("",), curve=None, *, idle_timeout=None,
              connect_timeout=10.0, context=None):
    """Yields the daemon's messages (SanitizedLocation, Rejection,
    DensityEstimate), decoded, as they arrive; see Subscription for topics
    and curve. Stops after idle_timeout seconds without a message (None:
    never). The first message is awaited only once connected."""
    with Subscription(endpoint, topics, curve, context=context) as sub:
        sub.wait_connected(connect_timeout)
        yield from sub.messages(idle_timeout)


# --------------------------------------------------------------- publishing

def as_update(update, profile=None):
    """A LocationUpdate from one (a copy when profile fills it in) or from
    a mapping of its fields, e.g. {"user_id": "u1", "timestamp_ms":
    1700000000000, "lat": 40.7, "lon": -74.0}."""
    if not isinstance(update, pb.LocationUpdate):
        update = pb.LocationUpdate(**update)
    elif profile is not None and not update.HasField("profile"):
        copy = pb.LocationUpdate()
        copy.CopyFrom(update)
        update = copy
    if profile is not None and not update.HasField("profile"):
        update.profile = profile
    return update


def publish(endpoint, updates, batch_size=DEFAULT_BATCH_SIZE, curve=None, *,
            profile=None, topic=None, timeout=60.0, context=None):
    """Sends updates (LocationUpdate messages or mappings of their fields)
    to the daemon's input, batch_size per LocationBatch message, in order,
    as ``tracesan replay`` does. Values go out as given: the daemon
    validates them and rejects what is wrong. profile fills in updates that
    name none; topic sends two-frame messages [topic][payload].

    Returns Published(updates, messages) once everything has been handed
    to the network (with a context of its own; with one given, the caller
    terms it). TracesanError when no connection is made, the daemon
    refuses the CURVE key, or it accepts nothing, for timeout seconds."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    own_context = context is None
    context = context if context is not None else zmq.Context()
    socket = context.socket(zmq.PUSH)
    monitor = None
    sent_updates = sent_messages = 0
    try:
        socket.setsockopt(zmq.SNDHWM, SEND_HWM)
        socket.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        socket.setsockopt(zmq.LINGER, int(timeout * 1000))
        if curve is not None:
            _setup_curve(socket, curve)
        # Waiting for the connection turns an absent daemon, or (CURVE) a
        # refused key, into an error instead of updates that silently
        # vanish when the queue is dropped at exit.
        monitor = socket.get_monitor_socket(
            zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED |
            zmq.EVENT_HANDSHAKE_FAILED_AUTH |
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL |
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        socket.connect(endpoint)
        _wait_for_connection(monitor, curve, endpoint, timeout)

        batch = pb.LocationBatch()

        def send():
            payload = batch.SerializeToString()
            try:
                if topic is not None:
                    socket.send_multipart([topic.encode()
                                           if isinstance(topic, str)
                                           else topic, payload])
                else:
                    socket.send(payload)
            except zmq.Again:
                raise TracesanError(f"{endpoint} accepted nothing for "
                                    f"{timeout:g} s") from None

        for update in updates:
            batch.updates.append(as_update(update, profile))
            if len(batch.updates) == batch_size:
                send()
                sent_updates += len(batch.updates)
                sent_messages += 1
                del batch.updates[:]
        if batch.updates:
            send()
            sent_updates += len(batch.updates)
            sent_messages += 1
    except BaseException:
        socket.setsockopt(zmq.LINGER, 0)
        raise
    finally:
        if monitor is not None:
            socket.disable_monitor()
            monitor.close(linger=0)
        socket.close()
        if own_context:
            context.term()  # waits until the queued messages are sent
    return Published(sent_updates, sent_messages)


def read_csv(path_or_file, profile=None):
    """Yields the LocationUpdates of a trace in tracesan's CSV format
    (header user,ts,lat,lon with optional accuracy and profile columns;
    ts in Unix seconds, fractions allowed), as tracesan replay reads it."""
    import csv

    def rows(f):
        reader = csv.reader(f)
        header = [name.strip().lower() for name in next(reader)]
        index = {name: i for i, name in reversed(list(enumerate(header)))}
        for name in ("user", "ts", "lat", "lon"):
            if name not in index:
                raise ValueError(f"the header has no column '{name}'")
        for row in reader:
            if not row or row == [""]:
                continue
            update = pb.LocationUpdate(user_id=row[index["user"]])
            seconds = float(row[index["ts"]])
            update.timestamp_ms = int(math.copysign(
                math.floor(abs(seconds) * 1000 + 0.5), seconds))
            update.lat = float(row[index["lat"]])
            update.lon = float(row[index["lon"]])
            if "accuracy" in index and row[index["accuracy"]].strip():
                update.horizontal_accuracy_m = float(row[index["accuracy"]])
            if "profile" in index and row[index["profile"]].strip():
                update.profile = row[index["profile"]].strip()
            elif profile is not None:
                update.profile = profile
            yield update

    if hasattr(path_or_file, "read"):
        yield from rows(path_or_file)
    else:
        with open(path_or_file, newline="") as f:
            yield from rows(f)
