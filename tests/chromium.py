"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: JSON messages ended by NUL on the browser's fds 3 and 4), with the standard
library only: open a page, wait in real time until its script says it is done, read its DOM, keep what
its console said and a screenshot."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

ERROR_LEVELS = ("error", "assert")


def available() -> bool:
    return shutil.which("chromium") is not None


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, width: int = 1100, height: int = 900):
        ours_in, theirs_out = os.pipe()  # the browser writes on its fd 4
        theirs_in, ours_out = os.pipe()  # ... and reads its fd 3

        def fds() -> None:  # in the child: its ends on fds 3 and 4, moved out of the way first
            high_in, high_out = fcntl.fcntl(theirs_in, fcntl.F_DUPFD, 10), fcntl.fcntl(theirs_out, fcntl.F_DUPFD, 10)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        args = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe"]
        args += ["--no-first-run", "--disable-extensions", "--mute-audio", "about:blank"]
        self.process = subprocess.Popen(
            args, preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )  # close_fds=False: fds 3 and 4 stay open; every other fd of this process closes on exec
        os.close(theirs_in)
        os.close(theirs_out)
        self._in, self._out = os.fdopen(ours_in, "rb", buffering=0), os.fdopen(ours_out, "wb", buffering=0)
        self._buffer, self._id, self.events, self.session = b"", 0, [], None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._out.close()
        except OSError:
            pass
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._in.close()

    def _message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = self._in.read(1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command (to the page once attached) and return its result."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        self._out.write(json.dumps(message).encode() + b"\0")
        while True:
            got = self._message()
            if got.get("id") == self._id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return got.get("result", {})
            if "method" in got:
                self.events.append(got)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, until: str, seconds: float) -> bool:
        """Navigate to url and wait until the expression `until` is true (polled in real time); whether it was."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if self.evaluate(until):
                    return True
            except RuntimeError:  # the page is still loading
                pass
            time.sleep(0.2)
        return False

    def dom(self) -> str:
        return self.evaluate("document.documentElement.outerHTML")

    def console_errors(self) -> list[str]:
        """What the page's console said at error level, its uncaught exceptions, and the browser's error log
        (a refused request, a blocked script)."""
        said = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ERROR_LEVELS:
                said.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                said.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                said.append(params["entry"].get("text", ""))
        return said

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at path."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)") or 900)
        self.call("Emulation.setDeviceMetricsOverride", width=1100, height=height, deviceScaleFactor=1, mobile=False)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path
