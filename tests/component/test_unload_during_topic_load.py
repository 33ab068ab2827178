"""A bundle unloaded while one of its topics is still loading (its managed ledger open, its state being recovered):
the load must not end with the topic served by a broker that no longer owns the bundle, and what the load opened is
closed before the bundle is released (closed after, it wrote its cursors' state over that of the broker that had
taken the bundle meanwhile, fencing that broker's managed ledger). Pulsar's unloadServiceUnit closes the topics'
futures, loading ones included, before the bundle is released.

The real broker in process, with cluster ownership (``ClusterOwnership``) on a shared memory store in place of
the standalone one; the topic's recovery is held at ``start_replication`` to open the window."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from broker.cluster.bundles import NamespaceBundle
from broker.cluster.data import BrokerUrls, LoadReport
from broker.cluster.ownership import ClusterOwnership
from broker.cluster.registry import BrokerRegistry
from broker.embedded import Broker
from broker.errors import ServiceNotReadyError
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from metadata_store.memory import MemoryMetadataStore


async def test_a_topic_whose_load_ends_after_its_bundle_was_unloaded_is_not_served_and_closed_before_the_release(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Broker() as b:
        service = b.server.service  # type: ignore[union-attr]
        store = MemoryMetadataStore(f"late-load-{uuid.uuid4().hex}")
        urls = BrokerUrls("127.0.0.1:8080", "pulsar://127.0.0.1:6650", None, "http://127.0.0.1:8080", None)
        registry = BrokerRegistry(store, urls, lambda: LoadReport(urls))
        await registry.start()
        ownership = ClusterOwnership(store, urls, registry, service, service.namespace_bundles,
                                     service.metadata.stored_namespace_bundles)
        standalone, service.ownership = service.ownership, ownership
        try:
            name = TopicName.parse(f"persistent://public/default/late-{uuid.uuid4().hex[:6]}")
            bundle = ownership.bundle_of(name)
            await ownership.acquire(bundle)
            reached, resume = asyncio.Event(), asyncio.Event()
            start_replication = PersistentTopic.start_replication

            async def held(self: PersistentTopic, *args: Any, **kwargs: Any) -> None:
                if self.name == name:
                    reached.set()
                    await resume.wait()
                await start_replication(self, *args, **kwargs)

            monkeypatch.setattr(PersistentTopic, "start_replication", held)
            # The load is let go on as soon as the unload takes the loading topic in hand, or else (the old way)
            # once the bundle is released; each close of the topic notes whether the bundle was released by then.
            released = asyncio.Event()
            unload_topics, release_node = service.unload_topics, ownership._release_node

            async def unloading_topics(names: list[str]) -> int:
                if name.full in names:
                    resume.set()
                return await unload_topics(names)

            async def releasing(of: NamespaceBundle) -> None:
                await release_node(of)
                released.set()
                resume.set()

            closes: list[bool] = []
            close = PersistentTopic.close

            async def noted_close(self: PersistentTopic, *args: Any, **kwargs: Any) -> None:
                if self.name == name:
                    closes.append(released.is_set())
                await close(self, *args, **kwargs)

            monkeypatch.setattr(service, "unload_topics", unloading_topics)
            monkeypatch.setattr(ownership, "_release_node", releasing)
            monkeypatch.setattr(PersistentTopic, "close", noted_close)
            loading = asyncio.ensure_future(service.get_persistent_topic(name, True))
            await asyncio.wait_for(reached.wait(), 10)
            await asyncio.wait_for(ownership.unload_bundle(bundle), 10)
            assert not ownership.is_owned(bundle)
            with pytest.raises(ServiceNotReadyError):
                await asyncio.wait_for(loading, 10)
            assert name.full not in service.topics, "the topic is served by a broker that released its bundle"
            assert closes == [False], "the topic the load opened was closed after its bundle was released"
        finally:
            service.ownership = standalone
            await ownership.close()
            await registry.close()
            await store.close()
