"""A small driver of headless Chromium over the DevTools protocol (a WebSocket, aiohttp's client):
start the browser on a free port with a temporary profile, open a page, evaluate JavaScript,
click and type through the DOM, take screenshots, and collect what went wrong on the page
(uncaught exceptions, console errors, failed or refused requests, CSP violations).

Chromium is Debian's ``chromium`` package (``make console-deps`` installs it). ``find_chromium``
says where it is, or why there is none.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from cluster import processes

# Starting Chromium on a busy two-core machine can take a while.
START_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 30.0
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class PageError(AssertionError):
    pass


class Browser:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self._profile = tempfile.TemporaryDirectory(prefix="console-chromium-")
        self._proc: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._listeners: dict[str, list[Callable[[str, dict[str, Any]], None]]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Browser:
        self._proc = await asyncio.create_subprocess_exec(
            self.binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", "--mute-audio",
            "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            f"--user-data-dir={self._profile.name}", "--window-size=1360,900", "about:blank",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)  # (its own process group: close() ends its helpers too)
        processes.track(self._proc.pid, "Chromium", group=True)
        try:
            url = await asyncio.wait_for(self._devtools_url(), START_TIMEOUT_S)
        except BaseException:
            await self.close()
            raise
        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(url, max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        return self

    async def _devtools_url(self) -> str:
        assert self._proc is not None and self._proc.stderr is not None
        stderr = self._proc.stderr
        while line := (await stderr.readline()).decode(errors="replace"):
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                # Keep draining stderr so Chromium never blocks on a full pipe.
                self._drain = asyncio.create_task(self._drain_stderr(stderr))
                return m.group(1)
        raise RuntimeError(f"Chromium exited ({await self._proc.wait()}) without a DevTools address")

    @staticmethod
    async def _drain_stderr(stderr: asyncio.StreamReader) -> None:
        while await stderr.read(65536):
            pass

    async def _read(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type is not aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    if "error" in data:
                        fut.set_exception(RuntimeError(f"CDP error: {data['error']}"))
                    else:
                        fut.set_result(data.get("result", {}))
            else:
                for fn in self._listeners.get(data.get("sessionId", ""), []):
                    fn(data["method"], data.get("params", {}))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RuntimeError("Chromium closed the DevTools connection"))

    async def send(self, method: str, session: str | None = None, **params: Any) -> Any:
        assert self._ws is not None
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        await self._ws.send_str(json.dumps(message))
        return await asyncio.wait_for(fut, CALL_TIMEOUT_S)

    async def new_page(self) -> Page:
        target = await self.send("Target.createTarget", url="about:blank")
        attached = await self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)
        page = Page(self, attached["sessionId"], target["targetId"])
        self._listeners.setdefault(page.session, []).append(page._on_event)
        for domain in ("Page", "Runtime", "Network", "Log"):
            await page.send(f"{domain}.enable")
        await page.send("Emulation.setDeviceMetricsOverride", width=1360, height=900, deviceScaleFactor=1, mobile=False)
        return page

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.send("Browser.close")
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._session is not None:
            await self._session.close()
        if self._proc is not None and self._proc.returncode is None:
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        if self._proc is not None:
            # Chromium's helper processes (zygote, GPU, utilities) are in the group it leads.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
        self._profile.cleanup()


class Page:
    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target
        self.problems: list[str] = []  # what went wrong on the page, in order
        self.requests: list[tuple[str, str, dict[str, Any]]] = []  # (method, url, headers) of each request
        self.statuses: list[tuple[str, int]] = []
        self._loaded = asyncio.Event()

    def _on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self._loaded.set()
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            self.problems.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.problems.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                              for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.problems.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}")
        elif method == "Network.requestWillBeSent":
            req = params["request"]
            self.requests.append((req["method"], req["url"], req.get("headers", {})))
        elif method == "Network.responseReceived":
            response = params["response"]
            self.statuses.append((response["url"], response["status"]))
            if response["status"] >= 400:
                self.problems.append(f"HTTP {response['status']}: {response['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self.problems.append(f"request failed: {params.get('errorText')} {params.get('blockedReason', '')}")

    async def send(self, method: str, **params: Any) -> Any:
        return await self.browser.send(method, self.session, **params)

    async def goto(self, url: str) -> None:
        self._loaded.clear()
        result = await self.send("Page.navigate", url=url)
        if "errorText" in result:
            raise PageError(f"navigation to {url} failed: {result['errorText']}")
        if "loaderId" in result:  # (none for a navigation within the document: a new #hash)
            await asyncio.wait_for(self._loaded.wait(), CALL_TIMEOUT_S)

    async def eval(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise PageError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, within: float = 20.0, what: str = "") -> Any:
        """Evaluate until the value is truthy; the value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        last: Any = None
        while True:
            try:
                last = await self.eval(expression)
            except PageError as exc:
                last = exc
            if last and not isinstance(last, Exception):
                return last
            if loop.time() > deadline:
                raise PageError(f"timed out waiting for {what or expression!r} (last: {last!r}); "
                                f"page problems: {self.problems}")
            await asyncio.sleep(0.1)  # (polling the page, not a wait for time to pass)

    async def click(self, selector: str) -> None:
        await self.wait_for(f"!!document.querySelector({json.dumps(selector)})", what=selector)
        await self.eval(f"document.querySelector({json.dumps(selector)}).click()")

    async def click_text(self, selector: str, text: str) -> None:
        """Click the first element matching ``selector`` whose text is ``text``."""
        js = (f"(() => {{ const el = [...document.querySelectorAll({json.dumps(selector)})]"
              f".find(e => e.textContent.trim() === {json.dumps(text)}); if (el) el.click(); return !!el; }})()")
        await self.wait_for(js, what=f"{selector} {text!r}")

    async def fill(self, selector: str, value: str) -> None:
        await self.wait_for(f"!!document.querySelector({json.dumps(selector)})", what=selector)
        await self.eval(f"(() => {{ const el = document.querySelector({json.dumps(selector)}); "
                        f"el.value = {json.dumps(value)}; el.dispatchEvent(new Event('input', {{bubbles: true}})); "
                        f"el.dispatchEvent(new Event('change', {{bubbles: true}})); }})()")

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png")
        data = base64.b64decode(shot["data"])

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        await asyncio.to_thread(write)
        return path
