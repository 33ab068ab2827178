"""The backends the metadata-store contract suite runs over, each behind one small opener.

A ``Backend`` opens stores on one data set (a test's own): ``open()`` again after a ``close()`` is
a restart; with ``peers`` two stores may be open at once, each a session of its own (two brokers).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from metadata_store import MetadataStore
from metadata_store.local import LocalMetadataStore
from metadata_store.memory import MemoryMetadataStore
from metadata_store.zookeeper import ZooKeeperMetadataStore


@dataclass
class Backend:
    name: str
    peers: bool  # two sessions on the same data at once
    opener: Callable[[], Awaitable[MetadataStore]]
    opened: list[MetadataStore] = field(default_factory=list)

    async def open(self) -> MetadataStore:
        store = await self.opener()
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()


def memory_backend() -> Backend:
    name = f"contract-{uuid.uuid4().hex}"

    async def opener() -> MetadataStore:
        return MemoryMetadataStore(name)

    return Backend("memory", True, opener)


def local_backend(directory: Path) -> Backend:
    async def opener() -> MetadataStore:
        return await LocalMetadataStore.open(directory)

    return Backend("local", False, opener)


def zookeeper_backend(address: str) -> Backend:
    """Stores on a chroot of their own in a real ZooKeeper."""
    url = f"zk:{address}/contract-{uuid.uuid4().hex}"

    async def opener() -> MetadataStore:
        return await ZooKeeperMetadataStore.open(url, session_timeout_s=10.0)

    return Backend("zookeeper", True, opener)
