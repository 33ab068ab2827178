"""Compaction of a large topic: a run holds a chunk of the topic and a map of its keys, not the whole range."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from managed_ledger import Position
from tests.e2e.conftest import topic_name
from tests.e2e.test_compaction import view_keys
from tests.waiting import eventually

KEYS = 10


def keyed_entry(i: int, value: bytes) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1, partition_key=f"k{i % KEYS}")
    return build_entry(md.SerializeToString(), value)


def batch_entry(i: int, messages: int) -> bytes:
    """A batch of ``messages`` small messages, all under keys of their own but the last, k{i % KEYS}."""
    def single(key: str) -> bytes:
        meta = pb.SingleMessageMetadata(partition_key=key, payload_size=1).SerializeToString()
        return len(meta).to_bytes(4, "big") + meta + b"v"
    body = b"".join(single(f"b{i}-{j}") for j in range(messages - 1)) + single(f"k{i % KEYS}")
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1, num_messages_in_batch=messages,
                            uncompressed_size=len(body))
    return build_entry(md.SerializeToString(), body)


def loaded_topic(b: BrokerThread, name: str, entries: Iterator[bytes]) -> PersistentTopic:
    """``name`` loaded, with ``entries`` appended straight to its managed ledger (faster than a client)."""
    async def fill() -> PersistentTopic:
        topic = await b.server.service.get_persistent_topic(TopicName.parse(name), create=True)
        stored = 0

        def added(position: Position | None, exc: BaseException | None) -> None:
            nonlocal stored
            assert exc is None
            stored += 1

        added_count = 0
        for data in entries:
            topic.ledger.add_entry(data, added)
            added_count += 1
        await eventually(lambda: stored == added_count, "the entries to be stored")
        return topic
    topic: PersistentTopic = b.run_coroutine(fill())
    return topic


def test_a_run_holds_a_chunk_of_the_range_not_all_of_it(tmp_path: Path) -> None:
    # 20 MiB of values under 10 keys, on file storage without a read cache (so every entry a run holds is a
    # copy of its own). A run used to read the whole range into a list, then parse it all: its peak memory
    # was the range. It reads a chunk at a time now, twice, keeping only each key's latest position.
    value = b"x" * 2048
    count = 10_000
    with BrokerThread(data_dir=tmp_path, managedLedgerStorage="file", managedLedgerCacheSizeMB=0) as b:
        name = topic_name("compact-large")
        topic = loaded_topic(b, name, (keyed_entry(i, value) for i in range(count)))
        tracemalloc.start()
        try:
            b.run_coroutine(topic.compactor.compact(), timeout=60)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert view_keys(b, name) == [f"k{i % KEYS}" for i in range(count - KEYS, count)]
        range_bytes = count * len(value)
        # a chunk is at most READ_CHUNK entries (500 x 2 KiB): a few of those, nowhere near the 20 MiB range
        assert peak < range_bytes // 4, peak
