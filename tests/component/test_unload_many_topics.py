"""Unloading many topics at once (a bundle's unload: a split's, an admin's, a shutdown's): the closes run at most
UNLOAD_PARALLELISM at a time, in order, and the unload waits for them at most namespaceBundleUnloadingTimeoutMs
(Pulsar's unloadServiceUnit timeout), so the bundle is released and lookups answered again even when a close hangs.

Observed through the real broker in process; a topic's close is wrapped only to count and, in the second test, to
hang one of them (the failure path)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.embedded import Broker
from broker.service import broker_service
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName

TOPICS = 100


async def load_topics(b: Broker, count: int) -> list[str]:
    service = b.server.service if b.server is not None else None
    assert service is not None
    names = [f"persistent://public/default/unload-{i}" for i in range(count)]
    await asyncio.gather(*(service.get_persistent_topic(TopicName.parse(n), True) for n in names))
    return names


async def test_closes_run_with_bounded_parallelism(monkeypatch: pytest.MonkeyPatch) -> None:
    running = 0
    most = 0
    close = PersistentTopic.close

    async def counted(self: PersistentTopic, *args: Any, **kwargs: Any) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.001)  # (a close that takes a while, as on BookKeeper)
            await close(self, *args, **kwargs)
        finally:
            running -= 1

    async with Broker() as b:
        names = await load_topics(b, TOPICS)
        monkeypatch.setattr(PersistentTopic, "close", counted)
        service = b.server.service  # type: ignore[union-attr]
        assert await service.unload_topics(names) == TOPICS
        assert not service.topics
    assert 1 < most <= broker_service.UNLOAD_PARALLELISM


async def test_a_hanging_close_does_not_hold_the_unload_past_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    release = asyncio.Event()
    close = PersistentTopic.close
    stuck = "persistent://public/default/unload-7"

    async def maybe_hang(self: PersistentTopic, *args: Any, **kwargs: Any) -> None:
        if self.full_name == stuck:
            await release.wait()
        await close(self, *args, **kwargs)

    async with Broker(namespaceBundleUnloadingTimeoutMs=2000) as b:
        names = await load_topics(b, TOPICS)
        monkeypatch.setattr(PersistentTopic, "close", maybe_hang)
        service = b.server.service  # type: ignore[union-attr]
        try:
            # Returns although one close never ends (without the timeout: never, and this fails on wait_for).
            closed = await asyncio.wait_for(service.unload_topics(names), 60)
            assert closed < TOPICS
            assert stuck not in service.topics  # (out of the registry already: no client reaches it)
        finally:
            release.set()
        await asyncio.wait_for(service._unloads.wait(), 60)  # the rest closed in the background
        assert not service.topics
