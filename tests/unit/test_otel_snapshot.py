"""The OpenTelemetry export thread reads broker values only through snapshots taken on the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from broker.admin.otel import Snapshot, _SharedSnapshot, enabled


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_one_snapshot_per_collection_taken_on_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    taken: list[threading.Thread] = []

    def take() -> Snapshot:
        taken.append(threading.current_thread())
        return {"x": [(1.0, {"a": "b"})]}

    shared = _SharedSnapshot(take, loop)
    assert shared.get() == shared.get() == {"x": [(1.0, {"a": "b"})]}  # two callbacks of one collection
    assert len(taken) == 1 and taken[0] is not threading.current_thread()


def test_a_closed_loop_gives_an_empty_snapshot_not_an_error() -> None:
    closed = asyncio.new_event_loop()
    closed.close()
    assert _SharedSnapshot(lambda: {"x": [(1.0, {})]}, closed).get() == {}


def test_enabled_only_when_pulsar_would() -> None:
    assert not enabled({})
    assert not enabled({"OTEL_SDK_DISABLED": "true"})
    assert enabled({"OTEL_SDK_DISABLED": "false"}) and enabled({"OTEL_SDK_DISABLED": " FALSE "})
