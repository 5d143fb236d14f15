"""Headless chromium driven over the Chrome DevTools Protocol (a websocket): open a page,
collect console errors, exceptions, dialogs and requests, evaluate a script, take a
screenshot."""

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DISMISS_IDS = 1_000_000  # the ids of the commands that dismiss dialogs start above it


class Page:
    def __init__(self, url: str, timeout_s: float = 60.0):
        import websocket

        self.profile = tempfile.mkdtemp(prefix="steptrace-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-extensions", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "--window-size=1280,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})  # not the sanitizer's
        self.browser = None
        try:  # a page that does not open leaves no chromium behind
            browser_ws = self._devtools_url(timeout_s)
            # no Origin header: chromium 111 and later refuse an origin not allowed
            self.browser = websocket.create_connection(browser_ws, timeout=timeout_s,
                                                       suppress_origin=True)
            self.ws = self.browser
            self.next_id, self.events, self.dismissed = 0, [], 0
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target,
                                     flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable", session=True)
            self.call("Page.navigate", url=url, session=True)
            self.wait_for("Page.loadEventFired", timeout_s)
        except BaseException:
            self.close()
            raise

    def _devtools_url(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                return found.group(1)
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError("chromium did not start its DevTools endpoint")

    def call(self, method, session=False, **params):
        self.next_id += 1
        message = dict(id=self.next_id, method=method, params=params)
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = self._receive()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method, timeout_s):
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout_s} s")
            self.events.append(self._receive())

    def _receive(self):
        """The next message. A JavaScript dialog is dismissed at once (it would block the
        page until answered) and stays among the events."""
        message = json.loads(self.ws.recv())
        if message.get("method") == "Page.javascriptDialogOpening":
            self.dismissed += 1  # ids of their own: a call waits for its id's reply
            self.ws.send(json.dumps(dict(id=DISMISS_IDS + self.dismissed,
                                         method="Page.handleJavaScriptDialog",
                                         params=dict(accept=False),
                                         sessionId=message["sessionId"])))
        return message

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", session=True, format="png",
                         captureBeyondViewport=True)["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def errors(self):
        """Console errors, uncaught exceptions and log entries of level error."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(str(p.get("args")))
            elif m == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(str(p["entry"]))
        return out

    def dialogs(self):
        """The messages of alert(), confirm() and prompt() dialogs the page opened."""
        return [e["params"].get("message") for e in self.events
                if e.get("method") == "Page.javascriptDialogOpening"]

    def requests(self):
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def close(self):
        try:
            if self.browser is not None:
                self.browser.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)
