"""Tests of tracesan_client, most of them against the real daemon.

tests/integration_python_client.sh runs them with the environment they
need: TRACESAND and TRACESAN (the programs), TRACESAN_CONF (the shipped
configuration), TRACESAN_SAMPLE (the bundled Gowalla sample),
TRACESAN_EXAMPLE (examples/feed_to_jsonl.py), TRACESAN_TMP (a scratch
directory) and TRACESAN_PB2_DIR (the generated module). Without TRACESAND
only the tests that need no daemon run.
"""

import csv
import ctypes
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import zmq

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import tracesan_client as tc  # noqa: E402
from tracesan_client import pb  # noqa: E402

TRACESAND = os.environ.get("TRACESAND")
TRACESAN = os.environ.get("TRACESAN")
CONF = os.environ.get("TRACESAN_CONF")
SAMPLE = os.environ.get("TRACESAN_SAMPLE")
EXAMPLE = os.environ.get("TRACESAN_EXAMPLE")
START_TIMEOUT_S = float(os.environ.get("TS_START_TIMEOUT", "20"))
needs_daemon = unittest.skipUnless(TRACESAND and TRACESAN and CONF and SAMPLE,
                                   "TRACESAND etc. not set (run "
                                   "tests/integration_python_client.sh)")


def scratch_dir():
    return pathlib.Path(tempfile.mkdtemp(prefix="client-",
                                         dir=os.environ.get("TRACESAN_TMP")))


def die_with_parent():
    """In a child: SIGTERM when the test process dies, so that a killed
    test run leaves no daemon behind (Linux prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


def now_ms():
    return int(time.time() * 1000)


class Daemon:
    """tracesand with the shipped configuration on free loopback ports."""

    def __init__(self, directory, name, *overrides):
        self.log_path = directory / f"{name}.daemon.log"
        self._log = open(self.log_path, "w")
        args = [TRACESAND, "-c", CONF,
                "-o", "input.endpoint=tcp://127.0.0.1:*",
                "-o", "output.endpoint=tcp://127.0.0.1:*",
                "-o", "http.listen=127.0.0.1:0", "-o", 'state.dir=""',
                "-o", "input.max_backdate_s=0"]
        for override in overrides:
            args += ["-o", override]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                        stderr=self._log,
                                        preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            match = re.search(r"ready input=(\S+) output=(\S+) http=(\S+)",
                              self.log_path.read_text())
            if match:
                self.input, self.output, self.http = match.groups()
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError(f"tracesand {name} did not start:\n" +
                                   self.log_path.read_text()[-2000:])
            time.sleep(0.05)

    def metrics(self):
        with urllib.request.urlopen(f"http://{self.http}/metrics",
                                    timeout=5) as response:
            text = response.read().decode()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def stop(self):
        self.process.terminate()
        status = self.process.wait(30)
        self._log.close()
        return status

    def log(self):
        return self.log_path.read_text()


def counters(metrics):
    """(sanitized, rejected) totals of a /metrics reading."""
    rejected = sum(v for k, v in metrics.items()
                   if k.startswith("tracesand_rejected_total{"))
    return metrics["tracesand_sanitized_total"], rejected


def collect(subscription, count, idle_timeout=20.0):
    """Up to count messages, stopping early after idle_timeout seconds
    without one."""
    received = []
    while len(received) < count:
        message = subscription.receive(idle_timeout)
        if message is None:
            break
        received.append(message)
    return received


def updates(user, n, start_ms=None, **fields):
    start_ms = now_ms() if start_ms is None else start_ms
    return [dict(user_id=user, timestamp_ms=start_ms + 1000 * i,
                 lat=40.7 + i * 1e-3, lon=-74.0, **fields) for i in range(n)]


# ------------------------------------------------------- without a daemon

class MessagesTest(unittest.TestCase):
    def test_topics_decode_to_their_messages(self):
        point = pb.SanitizedLocation(user_id="u", profile="geoind", lat=1.5)
        rejection = pb.Rejection(
            user_id="v", reason=pb.REJECTION_REASON_BUDGET_EXHAUSTED)
        density = pb.DensityEstimate(profile="privic", rows=1, cols=1,
                                     probability=[1.0])
        self.assertEqual(tc.decode(b"sanitized.geoind",
                                   point.SerializeToString()), [point])
        self.assertEqual(tc.decode(b"rejected", rejection.SerializeToString()),
                         [rejection])
        self.assertEqual(tc.decode(b"density.privic",
                                   density.SerializeToString()), [density])
        batch = pb.OutcomeBatch(sanitized=[point, point], rejected=[rejection])
        self.assertEqual(tc.decode(b"batch", batch.SerializeToString()),
                         [point, point, rejection])
        self.assertEqual(tc.decode(b"something.else", b"\x00"), [])
        self.assertEqual([tc.kind_of(m) for m in (point, rejection, density)],
                         ["sanitized", "rejected", "density"])
        self.assertEqual([tc.topic_of(m) for m in (point, rejection, density)],
                         ["sanitized.geoind", "rejected", "density.privic"])
        with self.assertRaises(ValueError):
            tc.kind_of(pb.LocationBatch())

    def test_updates_from_mappings_and_csv(self):
        update = tc.as_update({"user_id": "u", "timestamp_ms": 5, "lat": 1.0,
                               "lon": 2.0}, profile="geoind")
        self.assertEqual(update.profile, "geoind")
        named = pb.LocationUpdate(user_id="u", profile="other")
        self.assertEqual(tc.as_update(named, profile="geoind").profile,
                         "other")
        bare = pb.LocationUpdate(user_id="u")
        self.assertEqual(tc.as_update(bare, profile="geoind").profile,
                         "geoind")
        self.assertFalse(bare.HasField("profile"), "the caller's update "
                         "is not modified")
        with self.assertRaises(ValueError):
            tc.as_update({"user_id": "u", "speed": 3})

        trace = scratch_dir() / "trace.csv"
        trace.write_text("lon,user,ts,lat,profile,accuracy\n"
                         "-73.5,alice,1254682593.25,40.5,,12.5\n"
                         "\n"
                         "-73.25,bob,1254682594,40.25,pim,\n")
        first, second = tc.read_csv(trace, profile="geoind")
        self.assertEqual((first.user_id, first.timestamp_ms, first.lat,
                          first.lon, first.profile,
                          first.horizontal_accuracy_m),
                         ("alice", 1254682593250, 40.5, -73.5, "geoind", 12.5))
        self.assertEqual(second.profile, "pim")
        self.assertFalse(second.HasField("horizontal_accuracy_m"))

    def test_key_files(self):
        directory = scratch_dir()
        (directory / "server.pub").write_text("A" * 40 + "\n")
        (directory / "me.pub").write_text("B" * 40)
        (directory / "me.key").write_text("C" * 39 + "\n")
        with self.assertRaises(ValueError) as refused:
            tc.load_curve(directory / "server.pub", str(directory / "me"))
        self.assertNotIn("C" * 39, str(refused.exception))
        (directory / "me.key").write_text("C" * 40 + "\n")
        self.assertEqual(tc.load_curve(directory / "server.pub",
                                       str(directory / "me")),
                         (b"A" * 40, b"B" * 40, b"C" * 40))


class LocalSocketsTest(unittest.TestCase):
    """The client against plain ZeroMQ sockets standing in for the daemon."""

    def setUp(self):
        self.context = zmq.Context()
        # Cleanups run last registered first: the sockets close before.
        self.addCleanup(self.context.term)

    def bind(self, kind):
        socket = self.context.socket(kind)
        socket.setsockopt(zmq.LINGER, 0)
        self.addCleanup(socket.close)
        socket.bind("tcp://127.0.0.1:*")
        return socket, socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def test_publish_batches_like_replay(self):
        pull, endpoint = self.bind(zmq.PULL)
        sent = tc.publish(endpoint, updates("u", 250), batch_size=100)
        self.assertEqual(sent, tc.Published(updates=250, messages=3))
        sizes = []
        for _ in range(3):
            self.assertTrue(pull.poll(5000))
            frames = pull.recv_multipart()
            self.assertEqual(len(frames), 1)
            sizes.append(len(pb.LocationBatch.FromString(frames[0]).updates))
        self.assertEqual(sizes, [100, 100, 50])

        sent = tc.publish(endpoint, updates("u", 3), topic="in")
        self.assertEqual(sent, (3, 1))
        self.assertTrue(pull.poll(5000))
        topic, payload = pull.recv_multipart()
        self.assertEqual(topic, b"in")
        batch = pb.LocationBatch.FromString(payload)
        self.assertEqual([u.timestamp_ms for u in batch.updates],
                         sorted(u.timestamp_ms for u in batch.updates))
        self.assertEqual(tc.publish(endpoint, []), (0, 0))

    def test_publish_to_nobody_fails(self):
        # An IPC path in a fresh directory: a freed TCP port could be bound
        # again by a test running alongside, and the connection would work.
        directory = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, directory)
        endpoint = f"ipc://{directory}/nobody"
        started = time.monotonic()
        with self.assertRaises(tc.TracesanError):
            tc.publish(endpoint, updates("u", 1), timeout=0.5)
        self.assertLess(time.monotonic() - started, 5)

    def test_subscription_filters_batches_like_topics(self):
        pub, endpoint = self.bind(zmq.PUB)
        mine = pb.SanitizedLocation(user_id="a", profile="geoind")
        other = pb.SanitizedLocation(user_id="b", profile="pim")
        rejection = pb.Rejection(user_id="c")
        with tc.Subscription(endpoint, ["sanitized.geoind"]) as sub:
            sub.wait_connected()
            pub.send_multipart([b"sanitized.pim", other.SerializeToString()])
            pub.send_multipart([b"rejected", rejection.SerializeToString()])
            pub.send_multipart([b"sanitized.geoind", b"\xff\xff"])
            pub.send_multipart([b"sanitized.geoind", b"x", b"y"])
            pub.send_multipart([b"batch", pb.OutcomeBatch(
                sanitized=[other, mine], rejected=[rejection])
                .SerializeToString()])
            pub.send_multipart([b"sanitized.geoind", mine.SerializeToString()])
            got = collect(sub, 3, idle_timeout=1.0)
            self.assertEqual(got, [mine, mine])
            self.assertEqual(sub.skipped, 2)
        with tc.Subscription(endpoint) as everything:
            everything.wait_connected()
            pub.send_multipart([b"batch", pb.OutcomeBatch(
                sanitized=[other, mine], rejected=[rejection])
                .SerializeToString()])
            self.assertEqual(collect(everything, 4, idle_timeout=1.0),
                             [other, mine, rejection])
        with self.assertRaises(tc.TracesanError):
            with tc.Subscription(endpoint.rsplit(":", 1)[0] + ":1") as sub:
                sub.wait_connected(timeout=0.5)


# ---------------------------------------------------- against the daemon

@needs_daemon
class DaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.directory = scratch_dir()
        cls.daemon = Daemon(cls.directory, "plain")

    @classmethod
    def tearDownClass(cls):
        status = cls.daemon.stop()
        assert status == 0, f"tracesand exited with {status}"

    def start_tail(self, name, count, *options):
        ready = self.directory / f"{name}.ready"
        out = self.directory / f"{name}.csv"
        rejected = self.directory / f"{name}.rejected.csv"
        with open(out, "w") as stdout:
            process = subprocess.Popen(
                [TRACESAN, "tail", "--connect", self.daemon.output, "--count",
                 str(count), "--ready-file", str(ready), "--rejections",
                 str(rejected), *options],
                stdout=stdout, stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists():
            self.assertIsNone(process.poll(), "tracesan tail exited")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        return process, out, rejected

    def test_the_sample_through_the_daemon(self):
        """publish() the bundled sample; the subscription gets one output
        per check-in: what tracesan tail gets and /metrics counts."""
        sample = list(tc.read_csv(SAMPLE))
        rows = len(sample)
        self.assertEqual(rows, 1699)
        before = counters(self.daemon.metrics())
        tail, tail_out, tail_rejected = self.start_tail("sample", rows)
        with tc.Subscription(self.daemon.output,
                             ["sanitized.", "rejected"]) as sub:
            sub.wait_connected()
            sent = tc.publish(self.daemon.input, sample)
            self.assertEqual(sent, (rows, 17))
            received = collect(sub, rows)
            self.assertIsNone(sub.receive(0.5), "nothing beyond one output "
                              "per input")
        self.assertEqual(tail.wait(30), 0)

        points = [m for m in received if tc.kind_of(m) == "sanitized"]
        rejections = [m for m in received if tc.kind_of(m) == "rejected"]
        self.assertEqual(len(points) + len(rejections), rows)
        self.assertGreater(len(rejections), 0, "the sample exhausts budgets")
        self.assertTrue(all(
            pb.RejectionReason.Name(r.reason) ==
            "REJECTION_REASON_BUDGET_EXHAUSTED" for r in rejections))

        after = counters(self.daemon.metrics())
        self.assertEqual((after[0] - before[0], after[1] - before[1]),
                         (len(points), len(rejections)))

        inputs = {(u.user_id, u.timestamp_ms): u for u in sample}
        outputs = {(m.user_id, m.timestamp_ms) for m in received}
        self.assertEqual(outputs, set(inputs))
        for point in points:
            truth = inputs[(point.user_id, point.timestamp_ms)]
            self.assertEqual((point.profile, point.mechanism),
                             ("geoind", "geoind"))
            self.assertNotEqual((f"{point.lat:.7f}", f"{point.lon:.7f}"),
                                (f"{truth.lat:.7f}", f"{truth.lon:.7f}"),
                                "a raw point was published")
            self.assertTrue(point.HasField("eps_point"))
            self.assertFalse(point.HasField("predicted"))

        with open(tail_out, newline="") as f:
            tail_points = {(r["user"], round(float(r["ts"]) * 1000)):
                           (r["lat"], r["lon"]) for r in csv.DictReader(f)}
        self.assertEqual(tail_points, {
            (p.user_id, p.timestamp_ms): (f"{p.lat:.7f}", f"{p.lon:.7f}")
            for p in points})
        with open(tail_rejected, newline="") as f:
            self.assertEqual(len(list(csv.DictReader(f))), len(rejections))

    def test_rejections_and_profiles(self):
        user = "rejections-test"
        batch = updates(user, 2)
        batch.append(dict(user_id=user + "-bad", timestamp_ms=now_ms(),
                          lat=91.0, lon=0.0))
        batch.append(dict(user_id=user + "-nope", timestamp_ms=now_ms(),
                          lat=40.0, lon=-74.0, profile="nope"))
        with tc.Subscription(self.daemon.output, ["rejected"]) as sub:
            sub.wait_connected()
            tc.publish(self.daemon.input, batch, profile="geoind",
                       topic="ignored")
            got = collect(sub, 2, idle_timeout=10)
            self.assertIsNone(sub.receive(0.5))
        self.assertEqual(
            sorted((r.user_id, pb.RejectionReason.Name(r.reason)) for r in got),
            [(user + "-bad", "REJECTION_REASON_INVALID_COORDINATE"),
             (user + "-nope", "REJECTION_REASON_UNKNOWN_PROFILE")])

    def test_subscribe_generator(self):
        user = "generator-test"
        feed = tc.subscribe(self.daemon.output, "sanitized.geoind",
                            idle_timeout=3.0)
        # The generator connects on its first next(); publish meanwhile.
        import threading

        def later():
            time.sleep(1.0)
            tc.publish(self.daemon.input, updates(user, 5))
        sender = threading.Thread(target=later)
        sender.start()
        got = [m for m in feed if m.user_id == user]
        sender.join()
        self.assertEqual(len(got), 5)
        self.assertEqual([m.timestamp_ms for m in got],
                         sorted(m.timestamp_ms for m in got))

    @unittest.skipUnless(EXAMPLE, "TRACESAN_EXAMPLE not set")
    def test_feed_to_jsonl_example(self):
        user = "example-test"
        ready = self.directory / "example.ready"
        env = dict(os.environ,
                   PYTHONPATH=str(pathlib.Path(tc.__file__).parent.parent))
        example = subprocess.Popen(
            [sys.executable, EXAMPLE, "--connect", self.daemon.output,
             "--topic", "sanitized.", "--count", "3", "--ready-file",
             str(ready)], stdout=subprocess.PIPE, env=env,
            preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists():
            self.assertIsNone(example.poll(), "the example exited")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        sent = updates(user, 3)
        tc.publish(self.daemon.input, sent)
        out, _ = example.communicate(timeout=30)
        self.assertEqual(example.returncode, 0)
        lines = out.decode().splitlines()
        self.assertEqual(len(lines), 3)
        for line, update in zip(lines, sent):
            (kind, fields), = json.loads(line).items()
            self.assertEqual(kind, "sanitized")
            self.assertEqual(fields["user_id"], user)
            self.assertEqual(int(fields["timestamp_ms"]),
                             update["timestamp_ms"])
            for name in ("lat", "lon", "profile", "mechanism", "eps_point",
                         "eps_spent_window", "eps_remaining",
                         "window_start_ms", "repeated"):
                self.assertIn(name, fields)
            # The wire format's names: what tail --format jsonl and
            # replay --format jsonl use.
            self.assertNotIn("userId", fields)


@needs_daemon
class BatchOutputTest(unittest.TestCase):
    """output.format = "batch": the same messages, the same filters."""

    def test_batches_are_split_and_filtered(self):
        daemon = Daemon(scratch_dir(), "batch", 'output.format="batch"')
        try:
            user = "batch-test"
            batch = updates(user, 4)
            batch.insert(2, dict(user_id=user, timestamp_ms=1, lat=0.0,
                                 lon=0.0))   # time went backwards
            with tc.Subscription(daemon.output, ["sanitized."]) as points, \
                    tc.Subscription(daemon.output, "rejected") as rejected, \
                    tc.Subscription(daemon.output) as everything:
                for sub in (points, rejected, everything):
                    sub.wait_connected()
                tc.publish(daemon.input, batch, batch_size=10)
                got_points = collect(points, 4, idle_timeout=10)
                got_rejected = collect(rejected, 1, idle_timeout=10)
                got_all = collect(everything, 5, idle_timeout=10)
                for sub in (points, rejected, everything):
                    self.assertIsNone(sub.receive(0.3))
            self.assertEqual([m.timestamp_ms for m in got_points],
                             [u["timestamp_ms"] for u in batch
                              if u["timestamp_ms"] != 1])
            self.assertEqual(
                [pb.RejectionReason.Name(r.reason) for r in got_rejected],
                ["REJECTION_REASON_TIME_WENT_BACKWARDS"])
            self.assertEqual(got_all, got_points + got_rejected)
        finally:
            self.assertEqual(daemon.stop(), 0)


@needs_daemon
class CurveTest(unittest.TestCase):
    """CURVE on both sockets, with allow-lists."""

    @classmethod
    def setUpClass(cls):
        if not zmq.has("curve"):
            raise unittest.SkipTest("this libzmq has no CURVE")
        cls.directory = scratch_dir()
        keys = cls.directory / "keys"
        keys.mkdir()
        for who in ("server", "client", "stranger"):
            subprocess.run([TRACESAN, "keygen", "--out", str(keys / who)],
                           check=True, stderr=subprocess.DEVNULL)
        allowed = (keys / "client.pub").read_text()
        (keys / "input.allow").write_text(allowed)
        (keys / "output.allow").write_text(allowed)
        cls.daemon = Daemon(
            cls.directory, "curve", "security.curve=true",
            f'security.server_secret_key_file="{keys / "server.key"}"',
            f'security.server_public_key_file="{keys / "server.pub"}"',
            f'security.input_allow_keys_file="{keys / "input.allow"}"',
            f'security.output_allow_keys_file="{keys / "output.allow"}"')
        cls.client = tc.load_curve(keys / "server.pub", str(keys / "client"))
        cls.stranger = tc.load_curve(keys / "server.pub",
                                     str(keys / "stranger"))

    @classmethod
    def tearDownClass(cls):
        status = cls.daemon.stop()
        assert status == 0, f"tracesand exited with {status}"

    def test_allowed_keys_publish_and_subscribe(self):
        user = "curve-test"
        with tc.Subscription(self.daemon.output, "sanitized.",
                             curve=self.client) as sub:
            sub.wait_connected()
            self.assertEqual(tc.publish(self.daemon.input, updates(user, 3),
                                        curve=self.client), (3, 1))
            got = collect(sub, 3, idle_timeout=10)
        self.assertEqual([m.user_id for m in got], [user] * 3)

    def test_unknown_keys_are_refused(self):
        with self.assertRaises(tc.TracesanError) as refused:
            tc.publish(self.daemon.input, updates("stranger", 1),
                       curve=self.stranger, timeout=5)
        self.assertIn("not allowed", str(refused.exception))
        with tc.Subscription(self.daemon.output, curve=self.stranger) as sub:
            with self.assertRaises(tc.TracesanError):
                sub.wait_connected(timeout=5)
        self.assertIn("zap: denied input client", self.daemon.log())


if __name__ == "__main__":
    unittest.main()
