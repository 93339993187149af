"""A headless Chromium driven over the DevTools protocol, as a person's browser would be.

Debian's `chromium` with `--remote-debugging-port=0` (loopback only), a private profile, and a
synchronous websocket (the `websockets` package Prefect already needs). It collects every
uncaught exception, `console.error` and browser log error of the pages it opens, moves the
real mouse, types real keys and takes screenshots.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]


def chromium() -> str:
    found = (
        os.environ.get("KINDEX_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    if not found:
        pytest.fail("headless Chromium is needed: apt-get install -y chromium (see .ci/run)")
    return found


class Browser:
    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a previous browser's
        self.proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            self._connect(profile, width, height)
        except BaseException:
            self.close()
            raise

    def _connect(self, profile: Path, width: int, height: int) -> None:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("Chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self.events.append(msg)

    def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        got = self.send(
            "Runtime.evaluate",
            expression=expression,
            returnByValue=True,
            awaitPromise=await_promise,
        )
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def open(self, url: str, timeout: float = 30) -> float:
        """Navigate and wait for the page's script to finish; seconds it took."""
        self.events.clear()
        started = time.monotonic()
        self.send("Page.navigate", url=url)
        while True:
            state = self.evaluate(
                "document.readyState === 'complete' && document.body && "
                "document.body.dataset.ready === '1' && location.href"
            )
            if state and state.split("#")[0] == url.split("#")[0]:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"{url} did not become ready")
            time.sleep(0.05)

    def errors(self) -> list[str]:
        """Uncaught exceptions, console errors and browser log errors since the last open."""
        self.send("Runtime.evaluate", expression="0")  # drain events already sent
        out = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(json.dumps(params.get("args"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(params["entry"].get("text", "")[:500])
        return out

    def mouse_move(self, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type_text(self, text: str) -> None:
        self.send("Input.insertText", text=text)

    def center_of(self, selector: str) -> tuple[float, float]:
        """Scroll an element into view; its centre in viewport pixels."""
        box = self.evaluate(
            f"(function(){{var e=document.querySelector({json.dumps(selector)});"
            "e.scrollIntoView({block:'center'});var r=e.getBoundingClientRect();"
            "return [r.left + r.width / 2, r.top + r.height / 2];})()"
        )
        return float(box[0]), float(box[1])

    def screenshot(self, path: Path, *, full_page: bool = True) -> bytes:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
