"""Run a broker inside a Python process: an async context manager and a threaded one.

``Broker`` runs on the caller's event loop. ``BrokerThread`` runs its own loop (uvloop when
available) on a background thread, for synchronous code such as the official ``pulsar-client``.
Both default to ephemeral ports (0) and a temporary data directory removed on exit. TLS and
security take Pulsar's keys as overrides, e.g. ``Broker(brokerServicePortTls=0, webServicePortTls=0,
tlsCertificateFilePath=..., tlsKeyFilePath=..., authenticationEnabled=True, ...)``; the bound
ports are ``server.tls_port`` / ``server.web_tls_port``, the URLs ``service_url_tls`` / ``web_url_tls``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from broker.config import BrokerConfig
from broker.server import BrokerServer

# How long BrokerThread waits for the broker to start or stop before giving up.
THREAD_START_TIMEOUT_S = 30.0


def _make_config(config: BrokerConfig | None, data_dir: str | Path | None, overrides: dict[str, Any]) -> BrokerConfig:
    cfg = config if config is not None else BrokerConfig(brokerServicePort=0, webServicePort=0,
                                                         bindAddress="127.0.0.1")
    if data_dir is not None:
        cfg.dataDir = str(data_dir)
    for key, value in overrides.items():
        cfg.set(key, value)
    return cfg


class Broker:
    """``async with Broker() as b:`` gives a running broker; ``b.service_url``, ``b.web_url``."""

    def __init__(self, config: BrokerConfig | None = None, data_dir: str | Path | None = None,
                 **overrides: Any) -> None:
        self._tmp: str | None = None
        if data_dir is None and (config is None or not config.dataDir or config.dataDir == "data"):
            self._tmp = tempfile.mkdtemp(prefix="pulsar-py-broker-")
            data_dir = self._tmp
        self.config = _make_config(config, data_dir, overrides)
        self.server: BrokerServer | None = None

    @property
    def service_url(self) -> str:
        assert self.server is not None, "broker not started"
        return self.server.service_url

    @property
    def web_url(self) -> str:
        assert self.server is not None, "broker not started"
        return self.server.web_url

    @property
    def service_url_tls(self) -> str:
        """pulsar+ssl:// URL ("" when brokerServicePortTls is not set)."""
        assert self.server is not None, "broker not started"
        return self.server.service_url_tls

    @property
    def web_url_tls(self) -> str:
        """https:// URL ("" when webServicePortTls is not set)."""
        assert self.server is not None, "broker not started"
        return self.server.web_url_tls

    async def start(self) -> Broker:
        self.server = BrokerServer(self.config)
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    async def __aenter__(self) -> Broker:
        return await self.start()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()


class BrokerThread:
    """``with BrokerThread() as b:`` runs a broker on its own loop in a daemon thread."""

    def __init__(self, config: BrokerConfig | None = None, data_dir: str | Path | None = None,
                 **overrides: Any) -> None:
        self.broker = Broker(config, data_dir, **overrides)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    @property
    def service_url(self) -> str:
        return self.broker.service_url

    @property
    def web_url(self) -> str:
        return self.broker.web_url

    @property
    def service_url_tls(self) -> str:
        return self.broker.service_url_tls

    @property
    def web_url_tls(self) -> str:
        return self.broker.web_url_tls

    @property
    def server(self) -> BrokerServer:
        assert self.broker.server is not None
        return self.broker.server

    def run_coroutine(self, coro: Any, timeout: float = THREAD_START_TIMEOUT_S) -> Any:
        """Run ``coro`` on the broker's loop and wait for its result (for tests and tools)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> BrokerThread:
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            try:
                await self.broker.start()
            except BaseException as exc:
                started.set_exception(exc)
                return
            # (set by stop(), or by the admin API's POST /admin/v2/brokers/shutdown, as python -m broker waits)
            self._stop = self.server.shutdown_requested
            started.set_result(None)
            try:
                await self._stop.wait()
            finally:
                await self.broker.stop()

        def run() -> None:
            try:
                import uvloop

                uvloop.run(main())
            except ImportError:  # pragma: no cover - uvloop is a dependency
                asyncio.run(main())

        self._thread = threading.Thread(target=run, name="pulsar-py-broker", daemon=True)
        self._thread.start()
        started.result(THREAD_START_TIMEOUT_S)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            if self._thread.is_alive():  # (not when the admin API's brokers/shutdown stopped it already)
                with contextlib.suppress(RuntimeError):  # (its loop closing meanwhile)
                    self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(THREAD_START_TIMEOUT_S)
            self._thread = None

    @property
    def running(self) -> bool:
        """Whether the broker's thread still runs (False once stopped, by ``stop`` or by the admin API)."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
