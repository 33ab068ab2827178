"""Unloading many topics at once (a bundle's unload: a split's, an admin's, a shutdown's): the closes run at most
UNLOAD_PARALLELISM at a time over the whole broker, in order, each starting as soon as any other ends (a stuck close
holds its own place only), and the unload waits for them at most namespaceBundleUnloadingTimeoutMs (Pulsar's
unloadServiceUnit timeout), so the bundle is released and lookups answered again even when a close hangs. A
namespace's bundles unload side by side, as Pulsar's namespace unload does: a stuck topic in one bundle does not hold
the others' bundles.

Observed through the real broker in process; a topic's close is wrapped only to count and, in the second test, to
hang one of them (the failure path)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from broker.embedded import Broker
from broker.service import broker_service
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from tests.waiting import eventually

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


class StuckClose:
    """PersistentTopic.close, wrapped: ``stuck`` hangs until released; the others are counted as they end."""

    def __init__(self, stuck: str) -> None:
        self.stuck = stuck
        self.release = asyncio.Event()
        self.closed: set[str] = set()
        self.running = 0
        self.most = 0
        self._close = PersistentTopic.close

    async def __call__(self, topic: PersistentTopic, *args: Any, **kwargs: Any) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if topic.full_name == self.stuck:
                await self.release.wait()
            await asyncio.sleep(0.001)  # (a close that takes a while, as on BookKeeper)
            await self._close(topic, *args, **kwargs)
            self.closed.add(topic.full_name)
        finally:
            self.running -= 1


async def test_a_stuck_close_holds_its_own_place_only(monkeypatch: pytest.MonkeyPatch) -> None:
    stuck = StuckClose("persistent://public/default/unload-3")  # (among the first turn of closes)
    async with Broker(namespaceBundleUnloadingTimeoutMs=600_000) as b:
        names = await load_topics(b, TOPICS)

        async def close(self: PersistentTopic, *args: Any, **kwargs: Any) -> None:
            await stuck(self, *args, **kwargs)

        monkeypatch.setattr(PersistentTopic, "close", close)
        service = b.server.service  # type: ignore[union-attr]
        unload = asyncio.create_task(service.unload_topics(names))
        try:
            # Every other topic closes while the stuck one hangs (in turns of UNLOAD_PARALLELISM, the second turn
            # would wait for it); the unload's timeout is far away.
            await eventually(lambda: len(stuck.closed) == TOPICS - 1, "every other topic to close")
            assert not unload.done() and stuck.stuck not in stuck.closed
        finally:
            stuck.release.set()
        assert await asyncio.wait_for(unload, 60) == TOPICS
    assert 1 < stuck.most <= broker_service.UNLOAD_PARALLELISM


async def test_a_stuck_close_does_not_hold_the_other_bundles_of_a_namespace_unload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Broker(namespaceBundleUnloadingTimeoutMs=600_000, defaultNumberOfNamespaceBundles=4) as b:
        names = await load_topics(b, TOPICS)
        service = b.server.service  # type: ignore[union-attr]
        bundles = service.metadata.namespace_bundles("public/default")
        first = bundles.find(names[0])
        stuck = StuckClose(names[0])

        async def close(self: PersistentTopic, *args: Any, **kwargs: Any) -> None:
            await stuck(self, *args, **kwargs)

        monkeypatch.setattr(PersistentTopic, "close", close)
        others = {n for n in names if bundles.find(n) != first}
        assert others  # (topics in more than one bundle)
        async with aiohttp.ClientSession() as http:
            unload = asyncio.create_task(http.put(f"{b.web_url}/admin/v2/namespaces/public/default/unload"))
            try:
                # One bundle after the other, the bundles after the stuck topic's waited for its timeout.
                await eventually(lambda: others <= stuck.closed, "the other bundles' topics to close")
                assert not unload.done()
            finally:
                stuck.release.set()
                response = await asyncio.wait_for(unload, 60)
                response.release()
            assert response.status == 204
        assert not service.topics
