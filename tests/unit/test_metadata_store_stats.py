"""A metadata store counts its operations as Pulsar's MetadataStoreStats does (pulsar_metadata_store_*)."""

from __future__ import annotations

import asyncio

import pytest

from metadata_store.api import BadVersionError
from metadata_store.memory import MemoryMetadataStore
from metadata_store.stats import LATENCY_BUCKETS_MS


def test_operations_counted_by_outcome() -> None:
    async def run() -> MemoryMetadataStore:
        store = MemoryMetadataStore()
        await store.put("/a", b"12345", None)
        with pytest.raises(BadVersionError):
            await store.put("/a", b"x", 99)  # a stale version: a failed put
        assert await store.get("/a") is not None
        assert await store.get("/missing") is None  # (found nothing: still a successful get)
        await store.delete("/a")
        return store

    stats = asyncio.run(run()).stats
    done = {key: h.count for key, h in stats.latency.items() if h.count}
    assert done == {("put", "success"): 1, ("put", "fail"): 1, ("get", "success"): 2, ("del", "success"): 1}
    assert stats.put_bytes == 5  # successful puts only
    h = stats.latency[("get", "success")]
    assert len(h.counts) == len(LATENCY_BUCKETS_MS) + 1 and sum(h.counts) == 2 and h.sum_ms >= 0
