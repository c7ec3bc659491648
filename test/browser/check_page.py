#!/usr/bin/python3
"""Load an ibvcap run page in headless Chromium and check it against its report.

    check_page.py --chromium PATH --page PAGE.html --report REPORT.json
                  --screenshot OUT.png [--verify PASSED/CHECKED] [--streams-match]

Drives the browser over the Chrome DevTools Protocol (Debian's python3-websocket;
the protocol: chromedevtools.github.io/devtools-protocol, domains Target, Page,
Runtime, Log, Network, Input, Emulation). Run it with the network off (the
wrapper runs it in a network namespace of its own with only loopback up, which
DevTools needs). Fails, printing every difference, when:
- the page logs a console error or warning, throws, or the browser logs an error
  (a Content-Security-Policy refusal among them);
- the page asks for anything but itself (any request, failed or not);
- an element with data-key shows other than the report's value at that path
  (numbers as the page writes them, en-US grouping);
- the presence map's rows do not add up (each row's cells' missing, and with
  --streams-match each row against its report stream: present = packets -
  duplicates, missing = missing);
- the tooltip over a gap cell (or the first cell) does not say that cell's figures.
Keeps a screenshot of the first screen at OUT.png and prints the page's size
and its load time (navigation start to the page's script done).
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import websocket  # python3-websocket (websocket-client)


class Browser:
    def __init__(self, chromium):
        self.profile = tempfile.mkdtemp(prefix="ibvcap-chromium.")
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--user-data-dir=" + self.profile, "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-sync",
             "--disable-component-update", "--disable-default-apps", "--mute-audio",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 60
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if self.proc.poll() is not None:
                raise SystemExit("chromium ended before it listened: "
                                 + self.proc.stderr.read().decode(errors="replace")[-2000:])
            if time.time() > deadline:
                raise SystemExit("chromium did not open its DevTools port in 60 s")
            time.sleep(0.05)
        time.sleep(0.1)
        port, path = open(port_file).read().split("\n")[:2]
        self.ws = websocket.create_connection("ws://127.0.0.1:%s%s" % (port, path), timeout=60,
                                              suppress_origin=True)
        self.next_id = 0
        self.events = []
        self.session = None

    def send(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise SystemExit("DevTools %s: %s" % (method, reply["error"]))
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method, timeout):
        deadline = time.time() + timeout
        seen = len(self.events)
        while time.time() < deadline:
            for e in self.events[seen:]:
                if e["method"] == method:
                    return e
            seen = len(self.events)
            self.ws.settimeout(max(0.05, deadline - time.time()))
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                break
        raise SystemExit("no %s within %s s" % (method, timeout))

    def evaluate(self, expression):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise SystemExit("evaluating %s: %s" % (expression[:80], r["exceptionDetails"]))
        return r["result"].get("value")

    def close(self):
        try:
            self.send("Browser.close", session=False)
        except Exception:  # the browser may be gone already
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def shown(value):
    """The text the page writes for a report value (its fmt())."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "\u2013"
    if isinstance(value, int):
        return "{:,}".format(value)
    if isinstance(value, float):
        return "{:,}".format(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value
    return None  # objects and arrays: compared as JSON


def at(report, path):
    v = report
    for p in path.split("."):
        if isinstance(v, list):
            i = int(p)
            if i >= len(v):
                raise KeyError(path)
            v = v[i]
        elif isinstance(v, dict):
            v = v[p]
        else:
            raise KeyError(path)
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--page", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--verify", help="PASSED/CHECKED: verify's counts the page must show")
    ap.add_argument("--streams-match", action="store_true",
                    help="each presence row against its report stream (runs, not synthetic)")
    args = ap.parse_args()
    report = json.load(open(args.report))
    page = os.path.abspath(args.page)
    url = "file://" + page
    problems = []

    b = Browser(args.chromium)
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"}, session=False)
        b.session = b.send("Target.attachToTarget", {"targetId": target["targetId"],
                                                     "flatten": True}, session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.send(domain + ".enable")
        b.send("Emulation.setDeviceMetricsOverride",
               {"width": 1280, "height": 1400, "deviceScaleFactor": 1, "mobile": False})
        started = time.time()
        b.send("Page.navigate", {"url": url})
        b.wait_event("Page.loadEventFired", 120)
        deadline = time.time() + 60
        while b.evaluate("document.body && document.body.dataset.ready") != "1":
            if time.time() > deadline:
                problems.append("the page's script never finished (body data-ready not set)")
                break
            time.sleep(0.05)
        wall_s = time.time() - started
        ready_ms = b.evaluate("window.ibvcapPage ? window.ibvcapPage.readyMs : null")

        # Every figure shown against the report.
        figures = b.evaluate(
            "Array.from(document.querySelectorAll('[data-key]')).map(e => [e.dataset.key, e.textContent])")
        data = b.evaluate("JSON.parse(document.getElementById('ibvcap-data').textContent)")
        checked = 0
        for key, text in figures:
            source = data if key.startswith("page_") else report
            try:
                value = at(source, key)
            except (KeyError, ValueError):
                problems.append("the page shows %s = %r, which the report does not have" % (key, text))
                continue
            want = shown(value)
            if want is None:
                try:
                    ok = json.loads(text) == value
                except ValueError:
                    ok = False
            else:
                ok = text == want
            if not ok:
                problems.append("the page shows %s = %r, the report says %r" % (key, text, value))
            checked += 1
        if checked == 0:
            problems.append("the page shows no figure with a data-key")
        for key in ("verdict", "run_id"):
            if key in report and not any(k == key for k, _ in figures):
                problems.append("the page does not show %s" % key)
        for cause in report.get("lost_by_cause", {}):
            if not any(k == "lost_by_cause." + cause for k, _ in figures):
                problems.append("the page does not show lost_by_cause.%s" % cause)
        if args.verify:
            passed, total = args.verify.split("/")
            for key, want in (("page_verify.passed", passed), ("page_verify.checked", total)):
                got = [t for k, t in figures if k == key]
                if got != ["{:,}".format(int(want))]:
                    problems.append("the page shows %s = %s, verify said %s" % (key, got, want))

        # The presence map adds up, and says what the report says per stream.
        presence = report.get("presence")
        if presence is None:
            problems.append("the report has no presence")
        else:
            rows = presence["streams"]
            text_rows = b.evaluate("document.querySelectorAll('#presence-text tbody tr').length")
            if text_rows != len(rows):
                problems.append("the map's text table has %s rows, presence %d streams" % (text_rows, len(rows)))
            for r in rows:
                cells_missing = sum(c[2] for c in r["cells"])
                if cells_missing != r["missing"]:
                    problems.append("%s: its cells miss %d frames, the row says %d" % (r["stream"], cells_missing, r["missing"]))
                if any(not (0 <= c[0] < presence["bins"]) for c in r["cells"]):
                    problems.append("%s: a cell outside the %d bins" % (r["stream"], presence["bins"]))
            if args.streams_match:
                keyed = {}
                for s in report["streams"]:
                    keyed.setdefault((s["group"], s["antenna"], s["thread"]), []).append(s)
                if len(rows) != len(report["streams"]):
                    problems.append("presence has %d rows, the report %d streams" % (len(rows), len(report["streams"])))
                for r in rows:
                    same = keyed.get((r["group"], r["antenna"], r["thread"]), [])
                    if len(same) != 1:
                        continue
                    s = same[0]
                    if r["missing"] != s["missing"] or r["present"] != s["packets"] - s["duplicates"]:
                        problems.append("%s: presence says present %d missing %d, the stream packets %d duplicates %d missing %d"
                                        % (r["stream"], r["present"], r["missing"], s["packets"], s["duplicates"], s["missing"]))
            # The tooltip over a gap cell, or over the first cell.
            target_cell = None
            for i, r in enumerate(rows):
                if r["cells"]:
                    target_cell = (i, r["cells"][0])
                    break
            if rows:
                i, cell = target_cell if target_cell else (0, None)
                b_ = cell[0] if cell else (rows[0]["active"][0][0] if rows[0]["active"] else 0)
                b.evaluate("document.getElementById('presence-map').scrollIntoView({block: 'center'})")
                b.evaluate("(() => { const w = document.getElementById('map-wrap'); const c = window.ibvcapPage.cellCenter(%d, %d);"
                           " const r = w.getBoundingClientRect(); w.scrollTop += c.y - r.top - r.height / 2; return 0; })()" % (i, b_))
                pt = b.evaluate("window.ibvcapPage.cellCenter(%d, %d)" % (i, b_))
                b.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": pt["x"], "y": pt["y"]})
                time.sleep(0.1)
                tip = b.evaluate("(() => { const t = document.getElementById('tip'); return [t.style.display, t.dataset.row, t.dataset.bin, t.textContent]; })()")
                if tip[0] != "block" or tip[1] != str(i) or tip[2] != str(b_):
                    problems.append("hovering row %d bin %d showed %r" % (i, b_, tip))
                elif cell:
                    want = "present {:,}, missing {:,} ({})".format(cell[1], cell[2], ", ".join(cell[3]))
                    if want not in tip[3]:
                        problems.append("the tooltip over row %d bin %d says %r, not %r" % (i, b_, tip[3], want))
                if rows[i]["stream"] not in tip[3]:
                    problems.append("the tooltip does not name the stream %s" % rows[i]["stream"])

        # Nothing fetched, nothing logged.
        b.evaluate("window.scrollTo(0, 0)")
        shot = b.send("Page.captureScreenshot", {"format": "png"})
        with open(args.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        time.sleep(0.2)
        try:
            b.ws.settimeout(0.3)
            while True:
                b.events.append(json.loads(b.ws.recv()))
        except websocket.WebSocketTimeoutException:
            pass
        for e in b.events:
            m, p = e["method"], e.get("params", {})
            if m == "Network.requestWillBeSent" and p["request"]["url"] not in (url, "about:blank"):
                problems.append("the page asked for %s" % p["request"]["url"])
            elif m == "Network.loadingFailed":
                problems.append("a request failed: %s" % p.get("errorText"))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                problems.append("console %s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))))
            elif m == "Runtime.exceptionThrown":
                problems.append("the page threw: %s" % p["exceptionDetails"].get("exception", {}).get("description", p["exceptionDetails"].get("text")))
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                problems.append("browser log %s: %s" % (p["entry"]["level"], p["entry"].get("text")))
    finally:
        b.close()

    size = os.path.getsize(page)
    print("check_page: %s: %d bytes, %d figures checked, %d presence rows; ready in %.0f ms (page script), %.2f s from navigation to checked"
          % (os.path.basename(page), size, checked, len(report.get("presence", {}).get("streams", [])),
             ready_ms or -1, wall_s))
    for p in problems:
        print("FAIL check_page: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
