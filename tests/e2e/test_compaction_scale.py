"""Compaction of a large topic: a run holds a chunk of the topic and a map of its keys, not the whole range
nor the view it writes; the broker serves its other clients while the run parses; a loaded topic reads its
view from the view's ledger and does not hold it."""

from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from broker.embedded import BrokerThread
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.service import compaction
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from managed_ledger import Position
from tests.e2e.conftest import topic_name
from tests.e2e.test_compaction import view_keys
from tests.waiting import eventually, wait_for

KEYS = 10


def keyed_entry(i: int, value: bytes, keys: int = KEYS) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1, partition_key=f"k{i % keys}")
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


def traced(b: BrokerThread, coro: Coroutine[Any, Any, object]) -> tuple[int, int]:
    """Run ``coro`` on the broker's loop with tracemalloc on: (bytes still held after it, peak bytes during it)."""
    tracemalloc.start()
    try:
        b.run_coroutine(coro, timeout=60)
        _, peak = tracemalloc.get_traced_memory()
        gc.collect()  # (garbage a collection frees is not held: whether one ran yet depends on the timing)
        held, _ = tracemalloc.get_traced_memory()
        return held, peak
    finally:
        tracemalloc.stop()


def test_a_run_holds_a_chunk_of_the_range_not_all_of_it(tmp_path: Path) -> None:
    # 20 MiB of values under 10 keys, on file storage without a read cache (so every entry a run holds is a
    # copy of its own). A run used to read the whole range into a list, then parse it all: its peak memory
    # was the range. It reads a chunk at a time now, twice, keeping only each key's latest position.
    value = b"x" * 2048
    count = 10_000
    with BrokerThread(data_dir=tmp_path, managedLedgerStorage="file", managedLedgerCacheSizeMB=0) as b:
        name = topic_name("compact-large")
        topic = loaded_topic(b, name, (keyed_entry(i, value) for i in range(count)))
        _, peak = traced(b, topic.compactor.compact())
        assert view_keys(b, name) == [f"k{i % KEYS}" for i in range(count - KEYS, count)]
        range_bytes = count * len(value)
        # a chunk is at most READ_CHUNK entries (500 x 2 KiB): a few of those, nowhere near the 20 MiB range
        assert peak < range_bytes // 4, peak


def test_another_client_is_served_while_a_run_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    # A run parses a topic of 20 batches of 1,000 messages (one read, inline from memory storage). It used to
    # parse all of them without giving the event loop back, and every connection of the broker waited. It
    # gives the loop back every PARSE_SLICE messages now: here it waits there (once it has started) until a
    # producer of another topic has its message stored, as a long run would, and goes on parsing after.
    started = threading.Event()
    parsed_after_the_send = 0
    original = compaction.messages_of
    with BrokerThread(managedLedgerStorage="memory", dataDir="") as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        other_name = topic_name("served-meanwhile")
        producer = client.create_producer(other_name, batching_enabled=False)
        other = b.server.service.topics[other_name]

        def other_stored() -> bool:
            return other.ledger.last_confirmed_entry.entry_id >= 0

        def counting(entry: bytes) -> Iterator[compaction._Message]:
            nonlocal parsed_after_the_send
            started.set()
            if other_stored():
                parsed_after_the_send += 1
            return original(entry)

        async def give_way_until_served() -> None:
            await asyncio.sleep(0)
            if started.is_set():
                await eventually(other_stored, "the other topic's message to be stored")

        monkeypatch.setattr(compaction, "messages_of", counting)
        monkeypatch.setattr(compaction, "_give_way", give_way_until_served, raising=False)
        name = topic_name("compact-batches")
        loaded_topic(b, name, (batch_entry(i, 1000) for i in range(20)))
        topic = b.server.service.topics[name]

        async def trigger() -> bool:
            return topic.compactor.trigger()
        assert b.run_coroutine(trigger())
        assert started.wait(10)
        message_id = producer.send(b"meanwhile")
        compaction_done = wait_for(lambda: topic.compactor.status != compaction.CompactionStatus.RUNNING, 30,
                                   "the run to finish")
        assert compaction_done and topic.compactor.status == compaction.CompactionStatus.SUCCESS
        # the producer's message was stored (and its receipt sent) while the run still had messages to parse
        assert parsed_after_the_send > 0
        assert Position(message_id.ledger_id(), message_id.entry_id()) == other.ledger.last_confirmed_entry
        assert view_keys(b, name) == [key for i in range(20) for key in (
            *(f"b{i}-{j}" for j in range(999)), *((f"k{i % KEYS}",) if i >= 20 - KEYS else ()))]
        client.close()


def test_a_view_of_many_keys_is_read_from_its_ledger_not_held(tmp_path: Path) -> None:
    # 5,000 keys of 2 KiB values: a 10 MiB view. A run used to build the view in memory as it wrote it, and a
    # loaded topic held it whole for as long as it was loaded (dispatch read it from there). The view is read
    # from its ledger now: neither the run nor the loaded topic holds it, and a read_compacted reader still
    # gets every key, in order.
    value = b"y" * 2048
    count = 5_000
    view_bytes = count * len(value)
    with BrokerThread(data_dir=tmp_path, managedLedgerStorage="file", managedLedgerCacheSizeMB=0) as b:
        service = b.server.service
        name = topic_name("compact-many-keys")
        topic = loaded_topic(b, name, (keyed_entry(i, value, keys=count) for i in range(count)))
        held_after_run, peak = traced(b, topic.compactor.compact())
        # (a chunk read, 500 appends in flight, the map of 5,000 keys: about 4 MB, well under the view)
        assert peak < view_bytes // 2, peak
        assert held_after_run < view_bytes // 20, held_after_run
        assert b.run_coroutine(service.unload_topic(TopicName.parse(name)))
        held_after_load, _ = traced(b, service.get_persistent_topic(TopicName.parse(name), create=False))
        assert held_after_load < view_bytes // 20, held_after_load
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        reader = client.create_reader(name, pulsar.MessageId.earliest, is_read_compacted=True)
        keys = []
        while reader.has_message_available():
            msg = reader.read_next(10_000)
            assert msg.data() == value
            keys.append(msg.partition_key())
        assert keys == [f"k{i}" for i in range(count)]
        client.close()
