"""The console in a real headless Chromium (Debian's ``chromium``), driven over the DevTools protocol.

A real responder (uvicorn on a loopback port) holds two incidents, a node drain and a refusal. The
browser opens every console page and saves a screenshot of each under ``test-artifacts/console/``
(set ``TRAINGUARD_DOCS_IMAGES=1`` to refresh the copies in ``docs/images/``), then flips a cluster
from monitor to act by typing the operator token into the page's form and clicking its button,
as a person would, after a wrong token was refused.

The DevTools client is the protocol over a pipe (``--remote-debugging-pipe``: NUL-separated JSON on
file descriptors 3 and 4), so no websocket library or browser driver is needed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from responder.store.sqlite import SqliteStore
from tests.services import free_port, require_binary, wait_until
from tests.test_console import OPERATOR_TOKEN, console_app, lab_settings, seed

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts" / "console"
DOCS_IMAGES = ROOT / "docs" / "images"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe",
]  # fmt: skip


class CdpError(RuntimeError):
    pass


class Browser:
    """A headless Chromium and one page, driven with DevTools protocol commands over a pipe."""

    def __init__(self, binary: str, profile: Path, log: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        argv = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"]
        # fds 3 and 4 are where Chromium expects the pipe: a tiny Python exec wrapper puts them there.
        wrapper = (
            "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
            "os.execv(sys.argv[3], sys.argv[3:])"
        )
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", wrapper, str(to_browser_r), str(from_browser_w), *argv],
                pass_fds=(to_browser_r, from_browser_w), stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = ""
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.call("Page.enable", session=True)
            self.resize(1280, 900)
        except (CdpError, OSError) as exc:
            self.close()
            raise CdpError(f"chromium did not start: {exc}\n{log.read_text(errors='replace')[-2000:]}") from exc

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies[-1] = {"error": {"message": "browser closed the pipe"}}
                    self._cond.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._cond:
                        self._replies[message["id"]] = message
                        self._cond.notify_all()

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = False,
             timeout: float = 20.0) -> dict[str, Any]:  # fmt: skip
        with self._cond:
            self._next_id += 1
            ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        with self._cond:
            if not self._cond.wait_for(lambda: ident in self._replies or -1 in self._replies, timeout):
                raise CdpError(f"{method}: no answer in {timeout}s")
            reply = self._replies.pop(ident, None) or self._replies[-1]
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in result:
            raise CdpError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def resize(self, width: int, height: int) -> None:
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.call("Emulation.setDeviceMetricsOverride", metrics, session=True)

    def location(self) -> str:
        return str(self.evaluate("document.readyState === 'complete' ? location.href : ''"))

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, session=True)
        wait_until(lambda: self.location() == url, 15, what=f"the browser to load {url}")

    def text(self) -> str:
        """The page's text; empty while a navigation (a submitted form) has no body yet, so polls go on."""
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def click(self, selector: str) -> None:
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        if box is None:
            raise CdpError(f"nothing matches {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            event = {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1}
            self.call("Input.dispatchMouseEvent", event, session=True)

    def type(self, selector: str, text: str) -> None:
        self.click(selector)
        self.call("Input.insertText", {"text": text}, session=True)

    def screenshot(self, path: Path) -> None:
        """The whole page (not just the viewport) as PNG."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        self.resize(1280, max(600, min(height, 4000)))
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        self.resize(1280, 900)

    def close(self) -> None:
        with_timeout = time.monotonic() + 5
        with contextlib.suppress(CdpError, OSError):
            self.call("Browser.close", timeout=5)
        while self.proc.poll() is None and time.monotonic() < with_timeout:
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        os.close(self._to_browser)
        self._reader.join(2)
        os.close(self._from_browser)


class LiveResponder:
    """The responder with its console on a loopback port (uvicorn in a thread)."""

    def __init__(self, db: Path) -> None:
        self.settings = lab_settings(db, operator_token=OPERATOR_TOKEN)
        self.store = SqliteStore(db)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(console_app(self.settings, self.store), host="127.0.0.1", port=self.port,
                                log_level="warning", access_log=False, lifespan="on")  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, 15, what="uvicorn to start")
        self.http = httpx.Client(base_url=self.url, timeout=5)

    def decisions(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = self.http.get("/v1/decisions", params={"kind": "decision"}).json()["decisions"]
        return records

    def mode(self, cluster: str) -> str:
        mode: str = self.http.get(f"/v1/clusters/{cluster}/mode").json()["mode"]
        return mode

    def stop(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(15)
        self.store.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveResponder]:
    responder = LiveResponder(tmp_path_factory.mktemp("console") / "trainguard.db")
    try:
        seed(lambda payload: responder.http.post("/v1/alerts", json=payload), responder.decisions)
        yield responder
    finally:
        responder.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    binary = require_binary("chromium")
    workdir = tmp_path_factory.mktemp("chromium")
    b = Browser(binary, workdir / "profile", workdir / "chromium.log")
    try:
        yield b
    finally:
        b.close()


def save(browser: Browser, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    browser.screenshot(path)
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    if os.environ.get("TRAINGUARD_DOCS_IMAGES") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMAGES / f"console-{name}.png")
    return path


def test_every_page_renders_in_chromium(live: LiveResponder, browser: Browser) -> None:
    browser.open(f"{live.url}/console")
    text = browser.text()
    assert "Clusters" in text
    assert "4242" in text
    assert "Recent incidents" in text
    assert browser.evaluate("getComputedStyle(document.querySelector('header')).display") == "flex", "CSS blocked?"
    save(browser, "overview")

    browser.open(f"{live.url}/console/decisions")
    assert "drain_node" in browser.text()
    assert "<script>alert(1)</script>" in browser.evaluate("document.body.innerText")  # shown as text ...
    assert browser.evaluate("document.scripts.length") == 0  # ... never run as a script
    save(browser, "decisions")

    (record,) = [d for d in live.decisions() if d["workload"] == "4242"]
    browser.open(f"{live.url}/console/decisions/{record['id']}")
    assert "Evidence" in browser.text()
    assert "TrainguardGpuXid" in browser.text()
    save(browser, "decision")

    browser.open(f"{live.url}/console/nodes")
    assert "gpu-002" in browser.text()
    save(browser, "nodes")


def test_flip_a_cluster_to_act_through_the_page(live: LiveResponder, browser: Browser) -> None:
    assert live.mode("lab") == "monitor"
    form = 'form[data-cluster="lab"]'

    browser.open(f"{live.url}/console")
    browser.type(f"{form} input[name=token]", "not-the-token")
    browser.click(f"{form} button[name=mode]")
    wait_until(lambda: "Not switched" in browser.text(), 10, what="the refusal page")
    assert "token is missing or wrong" in browser.text()
    assert live.mode("lab") == "monitor"
    save(browser, "refused")

    browser.open(f"{live.url}/console")
    assert browser.evaluate(f"document.querySelector('{form} button').textContent") == "Switch to act"
    browser.type(f"{form} input[name=token]", OPERATOR_TOKEN)
    browser.click(f"{form} button[name=mode]")
    wait_until(lambda: "changed=lab" in browser.location(), 10, what="the redirect after the switch")
    assert "Cluster lab is now in act mode." in browser.text()
    assert live.mode("lab") == "act"
    assert browser.evaluate("document.querySelector('#cluster-lab td.mode').dataset.mode") == "act"
    assert browser.evaluate(f"document.querySelector('{form} button').textContent") == "Switch to monitor"
    save(browser, "switched")
