#!/usr/bin/python3
"""Drive headless Chromium over the DevTools protocol on a pipe.

Chromium's --remote-debugging-pipe speaks the protocol as NUL-terminated
JSON messages on file descriptors 3 (commands in) and 4 (replies and events
out): no WebSocket, no port, nothing beyond the standard library.

    browser_cdp.py --chromium PATH --url URL --ready-file F
                   --min-points N [--min-density-layers M]
                   --screenshot OUT.png [--timeout S]

Opens URL, writes F once the page's feed is open (<body data-feed="open">),
then waits until the element #points-drawn holds at least N (and the page
shows M density layers, <body data-density-layers>), and saves a
screenshot. Prints the count read back from the DOM. Exit status 0 when N
was reached, 1 when not within the timeout, 2 on a browser failure.
"""

import argparse
import base64
import json
import os
import select
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, chromium, profile_dir, width, height):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # bash puts the pipes on descriptors 3 and 4, where Chromium looks
        # for them, and gives Chromium /dev/null as stdin and stderr's
        # file as stdout, so that nothing else writes on the pipe.
        command = [
            "bash", "-c", 'exec 3<&"$1" 4>&"$2"; shift 2; '
            'exec "$@" </dev/null >&2',
            "bash", str(to_browser_r), str(from_browser_w),
            chromium, "--headless", "--no-sandbox", "--disable-gpu",
            "--remote-debugging-pipe", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--disable-default-apps",
            "--mute-audio", "--hide-scrollbars",
            "--disable-background-timer-throttling",
            "--disable-renderer-backgrounding",
            "--user-data-dir=" + profile_dir,
            "--window-size=%d,%d" % (width, height),
            "about:blank",
        ]
        self.log = open(os.path.join(profile_dir, "chromium.log"), "wb")
        self.process = subprocess.Popen(
            command, pass_fds=(to_browser_r, from_browser_w),
            stdout=self.log, stderr=self.log)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.next_id = 0
        self.buffer = b""
        self.events = []

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method,
                   "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.next_id

    def receive(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no reply from the browser")
            ready, _, _ = select.select([self.from_browser], [], [], 0.5)
            if not ready:
                if self.process.poll() is not None:
                    raise RuntimeError("the browser exited with status %d"
                                       % self.process.returncode)
                continue
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None, timeout=30):
        wanted = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self.receive(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError("%s: %s" % (method, message["error"]))
                return message.get("result", {})
            self.events.append(message)

    def close(self):
        try:
            self.send("Browser.close")
            self.process.wait(timeout=5)
        except Exception:
            self.process.kill()
            self.process.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        self.log.close()


def evaluate(browser, session, expression):
    result = browser.call("Runtime.evaluate",
                          {"expression": expression, "returnByValue": True},
                          session)
    return result.get("result", {}).get("value")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--url", required=True)
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--min-points", type=int, required=True)
    parser.add_argument("--screenshot", required=True)
    parser.add_argument("--min-density-layers", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=45)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args()

    deadline = time.monotonic() + args.timeout
    profile_dir = tempfile.mkdtemp(prefix="chromium-",
                                   dir=os.path.dirname(args.screenshot))
    browser = Browser(args.chromium, profile_dir, args.width, args.height)
    status = 2
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"},
                              timeout=deadline - time.monotonic())
        session = browser.call("Target.attachToTarget",
                               {"targetId": target["targetId"],
                                "flatten": True})["sessionId"]
        browser.call("Page.enable", session=session)
        browser.call("Runtime.enable", session=session)
        browser.call("Log.enable", session=session)
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": args.width, "height": args.height,
                      "deviceScaleFactor": 1, "mobile": False},
                     session=session)
        browser.call("Page.navigate", {"url": args.url}, session=session)

        drawn = 0
        layers = 0
        ready = False
        status = 1
        while time.monotonic() < deadline:
            if not ready and evaluate(
                    browser, session,
                    "document.body && document.body.dataset.feed") == "open":
                with open(args.ready_file, "w") as ready_file:
                    ready_file.write("open\n")
                ready = True
            text = evaluate(browser, session,
                            "(document.getElementById('points-drawn') || "
                            "{}).textContent || ''")
            drawn = int(text) if str(text).isdigit() else 0
            layers = evaluate(browser, session,
                              "Number(document.body.dataset.densityLayers)")
            if drawn >= args.min_points and \
                    (layers or 0) >= args.min_density_layers:
                status = 0
                break
            time.sleep(0.25)
        # Let the map settle on the points before the picture.
        time.sleep(1.5)
        shot = browser.call("Page.captureScreenshot", {"format": "png"},
                            session=session)
        with open(args.screenshot, "wb") as out:
            out.write(base64.b64decode(shot["data"]))
        leaflet = evaluate(browser, session,
                           "document.getElementById('map-error').hidden")
        # Uncaught exceptions, and errors the browser logged (a resource
        # that failed to load, a Content-Security-Policy violation).
        problems = []
        for event in browser.events:
            if event.get("method") == "Runtime.exceptionThrown":
                details = event["params"]["exceptionDetails"]
                problems.append(details.get("exception", {}).get(
                    "description", details.get("text", "exception")))
            elif event.get("method") == "Log.entryAdded" and \
                    event["params"]["entry"].get("level") == "error":
                entry = event["params"]["entry"]
                # /density/NAME answers 404 (no estimate) or 503 (none
                # yet) by design; the page then shows no layer.
                if "/density/" in entry.get("url", "") and \
                        ("404" in entry.get("text", "") or
                         "503" in entry.get("text", "")):
                    continue
                problems.append("%s %s" % (entry.get("text", ""),
                                           entry.get("url", "")))
        for problem in problems:
            print("page error: %s" % problem.splitlines()[0])
        print("points-drawn=%d density-layers=%s feed-ready=%s leaflet=%s "
              "page-errors=%d" % (drawn, layers, ready,
                                  "ok" if leaflet else "missing",
                                  len(problems)))
    except Exception as error:  # reported, and the status says it failed
        print("browser: %s" % error, file=sys.stderr)
        status = 2
    finally:
        browser.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
