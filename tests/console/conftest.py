"""Fixtures for the console tests: headless Chromium (skipped with the reason when it is missing,
a failure under CI=true), a broker with traffic from the official client, screenshots."""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pulsar
import pytest

from broker.embedded import BrokerThread
from tests.admin.conftest import Admin
from tests.console.cdp import Browser, Page, find_chromium
from tests.needs import unavailable

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"  # (ignored by git)


def chromium_or_skip() -> str:
    binary = find_chromium()
    if binary is None:
        unavailable("no Chromium (Debian package chromium; `make console-deps` installs it)")
    return binary


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    browser = await Browser(chromium_or_skip()).start()
    try:
        yield await browser.new_page()
    finally:
        await browser.close()


def screenshot_path(name: str) -> Path:
    return SCREENSHOTS / f"{name}.png"


class Traffic:
    """A producer sending a message every few milliseconds to ``topic`` (JSON payloads), and a
    subscription ``slow`` whose consumer never acknowledges: rates move and a backlog grows."""

    def __init__(self, service_url: str, topic: str) -> None:
        self.topic = topic
        self.client = pulsar.Client(service_url, operation_timeout_seconds=10)
        self.consumer = self.client.subscribe(topic, "slow", receiver_queue_size=10)
        self.producer = self.client.create_producer(topic, batching_enabled=False)
        self._stop = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.producer.send(f'{{"n": {self.sent}, "text": "hello"}}'.encode(), properties={"kind": "demo"})
            self.sent += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


@pytest.fixture(scope="module")
def console_broker() -> Iterator[BrokerThread]:
    with BrokerThread(managedLedgerStorage="memory", brokerServicePort=0, webServicePort=0,
                      bindAddress="127.0.0.1") as broker:
        yield broker


@pytest.fixture(scope="module")
def traffic(console_broker: BrokerThread) -> Iterator[Traffic]:
    t = Traffic(console_broker.service_url, f"persistent://public/default/orders-{uuid.uuid4().hex[:6]}")
    yield t
    t.close()


@pytest.fixture
def admin(console_broker: BrokerThread) -> Admin:
    return Admin(console_broker.web_url)
