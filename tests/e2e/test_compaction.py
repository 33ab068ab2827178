"""Topic compaction, read_compacted readers/consumers and TableView with the official client."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar import CompressionType, MessageId

from broker.embedded import BrokerThread
from broker.protocol.entry import read_entry_metadata
from broker.service.compacted_view import CompactedEntry, encode_record
from broker.service.compaction import compacted_ledger_name, messages_of
from broker.service.producer import Producer
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from broker.transactions.model import TxnID
from managed_ledger import Position
from tests.e2e.conftest import topic_name
from tests.e2e.test_encryption_required import key_reader
from tests.waiting import wait_for

TIMEOUT_MS = 10_000


def admin_url(broker: BrokerThread, topic: str) -> str:
    return f"{broker.web_url}/admin/v2/{topic.replace('://', '/')}/compaction"


def compact(broker: BrokerThread, topic: str) -> None:
    url = admin_url(broker, topic)
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10) as r:
        assert r.status == 204
    status = wait_for(lambda: s if (s := compaction_status(url))["status"] != "RUNNING" else None, 30,
                      "compaction to finish")
    assert status["status"] == "SUCCESS", status


def compaction_status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as r:
        status: dict[str, Any] = json.loads(r.read())
    return status


def read_all(client: pulsar.Client, topic: str) -> list[tuple[str | None, bytes | None]]:
    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
    out: list[tuple[str | None, bytes | None]] = []
    while reader.has_message_available():
        msg = reader.read_next(TIMEOUT_MS)
        out.append((msg.partition_key() or None, msg.data() if msg.value() is not None else None))
    reader.close()
    return out


@pytest.fixture
def broker(pulsar_broker: BrokerThread) -> BrokerThread:
    return pulsar_broker


@pytest.mark.parametrize("batching", [False, True])
@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZLib,
                                         CompressionType.ZSTD, CompressionType.SNAPPY])
def test_latest_value_per_key(broker: BrokerThread, client: pulsar.Client, batching: bool,
                              compression: CompressionType) -> None:
    topic = topic_name("compact")
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=50,
                                      compression_type=compression,
                                      batching_type=pulsar.BatchingType.Default)
    for i in range(30):
        producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i % 3}")
    producer.send_async(b"no key", None)  # dropped by compaction (topicCompactionRetainNullKey=false)
    producer.flush()
    compact(broker, topic)
    assert read_all(client, topic) == [("k0", b"v27"), ("k1", b"v28"), ("k2", b"v29")]
    # A plain reader still sees everything.
    plain = client.create_reader(topic, MessageId.earliest)
    count = 0
    while plain.has_message_available():
        plain.read_next(TIMEOUT_MS)
        count += 1
    assert count == 31


def test_null_value_deletes_key_and_live_tail_follows(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = topic_name("tombstone")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"a1", partition_key="a")
    producer.send(b"b1", partition_key="b")
    producer.send(None, partition_key="a")  # tombstone
    compact(broker, topic)
    consumer = client.subscribe(topic, "compacted", is_read_compacted=True,
                                initial_position=pulsar.InitialPosition.Earliest)
    first = consumer.receive(TIMEOUT_MS)
    assert (first.partition_key(), first.data()) == ("b", b"b1")
    consumer.acknowledge(first)
    producer.send(b"a2", partition_key="a")  # after the horizon: delivered from the live topic
    live = consumer.receive(TIMEOUT_MS)
    assert (live.partition_key(), live.data()) == ("a", b"a2")


def test_a_read_compacted_consumer_reading_while_runs_replace_the_view(broker: BrokerThread,
                                                                      client: pulsar.Client) -> None:
    # Runs one after the other while a read_compacted consumer (a small receiver queue: many reads) goes
    # through the view and on: each run replaces the view the consumer is reading. It may see a key more than
    # once (an older view's value, then a later one), never an error, and ends at every key's latest value.
    topic = topic_name("compact-while-reading")
    producer = client.create_producer(topic, batching_enabled=False)
    latest: dict[str, bytes] = {}
    for i in range(600):
        key, value = f"k{i % 40}", f"v{i}".encode()
        producer.send_async(value, None, partition_key=key)
        latest[key] = value
    producer.flush()
    compact(broker, topic)
    consumer = client.subscribe(topic, "reads-during-runs", is_read_compacted=True, receiver_queue_size=2,
                                initial_position=pulsar.InitialPosition.Earliest)
    seen: dict[str, bytes] = {}
    for round_ in range(5):
        for i in range(20):
            key, value = f"k{(round_ * 20 + i) % 40}", f"r{round_}-{i}".encode()
            producer.send(value, partition_key=key)
            latest[key] = value
        compact(broker, topic)
        for _ in range(10):
            msg = consumer.receive(TIMEOUT_MS)
            seen[msg.partition_key()] = msg.data()
            consumer.acknowledge(msg)
    while seen != latest:
        msg = consumer.receive(TIMEOUT_MS)
        seen[msg.partition_key()] = msg.data()
        consumer.acknowledge(msg)
    assert compaction_status(admin_url(broker, topic))["status"] == "SUCCESS"


def test_compaction_status_before_any_run(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = topic_name("status")
    client.create_producer(topic).send(b"x", partition_key="k")
    with urllib.request.urlopen(admin_url(broker, topic), timeout=10) as r:
        assert json.loads(r.read()) == {"status": "NOT_RUN", "lastError": ""}


def test_table_view_sees_latest_values_and_updates(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = topic_name("tableview")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"1", partition_key="x")
    producer.send(b"2", partition_key="x")
    producer.send(b"9", partition_key="y")
    compact(broker, topic)
    view = client.create_table_view(topic)
    assert view.get("x") == b"2" or view.get("x") == "2"
    producer.send(b"3", partition_key="x")
    wait_for(lambda: view.get("x") in (b"3", "3"), 10, "the table view to see the live update")
    view.close()


def file_broker(data_dir: Path, **overrides: Any) -> BrokerThread:
    """A started broker on file storage in ``data_dir`` (again after a stop: a restart)."""
    return BrokerThread(data_dir=data_dir, managedLedgerStorage="file", **overrides).start()


def test_compacted_view_survives_restart(tmp_path: Path) -> None:
    topic = topic_name("restart")
    b = file_broker(tmp_path)
    try:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=20)
        for i in range(10):
            producer.send_async(f"{i}".encode(), None, partition_key=f"k{i % 2}")
        producer.flush()
        compact(b, topic)
        client.close()
    finally:
        b.stop()
    b = file_broker(tmp_path)
    try:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        assert read_all(client, topic) == [("k0", b"8"), ("k1", b"9")]
        client.close()
    finally:
        b.stop()


def test_a_view_of_many_ledgers_survives_restart(tmp_path: Path) -> None:
    # A compacted view is a managed ledger without cursors: with the broker's retention (0), every ledger of
    # it but the last was deleted as soon as it rolled over, and after a restart the view had lost its keys.
    small_ledgers = {"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMinLedgerRolloverTimeMinutes": 0}
    topic = topic_name("restart-many-ledgers")
    expected = [(f"k{i}", f"v{i}".encode()) for i in range(7)]
    b = file_broker(tmp_path, **small_ledgers)
    try:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        client.subscribe(topic, "holds-the-topic")  # (else retention trims the topic before the run)
        producer = client.create_producer(topic, batching_enabled=False)
        for key, value in expected:
            producer.send(value, partition_key=key)
        compact(b, topic)
        client.close()
    finally:
        b.stop()
    b = file_broker(tmp_path, **small_ledgers)
    try:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        assert read_all(client, topic) == expected
        client.close()
    finally:
        b.stop()


def test_compaction_threshold_policy_triggers_compaction() -> None:
    with BrokerThread(brokerServiceCompactionMonitorIntervalInSeconds=0.1) as b:
        url = f"{b.web_url}/admin/v2/namespaces/public/default/compactionThreshold"
        req = urllib.request.Request(url, data=b"1000", method="PUT", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 204
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        topic = topic_name("auto-compact")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):  # ~40 x 100 B: past the 1000-byte threshold
            producer.send(f"{i:03d}".encode() * 30, partition_key=f"k{i % 4}")
        wait_for(lambda: compaction_status(admin_url(b, topic))["status"] == "SUCCESS", 20,
                 "threshold compaction to run")
        survivors = read_all(client, topic)
        # Compaction ran at some point while publishing: older values of keys before its horizon
        # are gone, and each key still ends with its latest value.
        assert len(survivors) < 40
        latest = dict(survivors)
        assert latest == {f"k{j}": f"{36 + j:03d}".encode() * 30 for j in range(4)}
        client.close()


def test_read_compacted_seek_and_last_message_id(broker: BrokerThread, client: pulsar.Client) -> None:
    topic = topic_name("compact-seek")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"{i}".encode(), partition_key=f"k{i % 2}") for i in range(6)]
    producer.send(None, partition_key="k1")  # the topic's last entry is a tombstone
    compact(broker, topic)
    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
    assert reader.read_next(TIMEOUT_MS).data() == b"4"
    # Nothing more to read although the topic's last entry is later: the last message id a
    # read_compacted reader gets is the compacted view's last survivor, not the tombstone.
    assert not reader.has_message_available()
    reader.seek(MessageId.earliest)  # back to the start: the compacted view again
    assert reader.read_next(TIMEOUT_MS).data() == b"4"
    consumer = client.subscribe(topic, "lastid", is_read_compacted=True,
                                initial_position=pulsar.InitialPosition.Earliest)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[4].ledger_id(), ids[4].entry_id())


def test_empty_payload_with_a_key_deletes_the_key(broker: BrokerThread, client: pulsar.Client) -> None:
    # Pulsar's compactor takes a keyed message with an empty payload (size 0) as a tombstone, whether
    # or not the client flagged it null_value: Java's value(new byte[0]) is the documented way to delete.
    topic = topic_name("empty-tombstone")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"a1", partition_key="a")
    producer.send(b"b1", partition_key="b")
    producer.send(b"", partition_key="a")
    batched = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    batched.send_async(b"c1", None, partition_key="c")
    batched.send_async(b"", None, partition_key="b")
    batched.flush()
    compact(broker, topic)
    assert read_all(client, topic) == [("c", b"c1")]




def view_keys(broker: BrokerThread, topic: str) -> list[str]:
    """The keys of the messages in ``topic``'s compacted view, in order (as the broker holds it)."""
    view = broker.server.service.topics[topic].compacted_view
    assert view is not None
    records, _ = broker.run_coroutine(view.read(Position(-1, -1), len(view) + 1))
    return [m.key for c in records for i, m in enumerate(messages_of(c.entry.data))
            if m.key is not None and (c.ack_set is None or (c.ack_set[i // 64] >> (i % 64)) & 1)]



def compact_then_trim(b: BrokerThread, client: pulsar.Client, topic: str, consumed: int = 8) -> None:
    """Compact old0..old3 (four batches whose first message is superseded), publish new0..new3 and a
    tombstone of old3, consume ``consumed`` messages (8: the batches) so that retention deletes their
    ledgers, compact again."""
    consumer = client.subscribe(topic, "all")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(4):
        producer.send_async(b"superseded", None, partition_key=f"old{i}")
        producer.send_async(f"old{i}".encode(), None, partition_key=f"old{i}")
        producer.flush()
    compact(b, topic)
    for i in range(4):
        producer.send(f"new{i}".encode(), partition_key=f"new{i}")
    producer.send(b"", partition_key="old3")  # a tombstone deletes a key of the view
    for _ in range(consumed):
        msg = consumer.receive(TIMEOUT_MS)
        consumer.acknowledge(msg)
        if msg.data() == b"old3":  # (the last batch)
            last_batch = msg.message_id()
    ledger = b.server.service.topics[topic].ledger
    wait_for(lambda: ledger.first_position.ledger_id > last_batch.ledger_id(), 10,
             "the consumed ledgers to be trimmed")
    compact(b, topic)


def trimming_broker() -> BrokerThread:
    return BrokerThread(managedLedgerMaxEntriesPerLedger=2, managedLedgerMinLedgerRolloverTimeMinutes=0)


def test_keys_compacted_before_their_ledgers_are_trimmed_survive_the_next_compaction() -> None:
    # Pulsar's compactor reads the compacted view first, then the topic after its horizon: a key whose
    # messages are only in the compacted ledger (their topic ledgers deleted by retention) stays.
    with trimming_broker() as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        topic = topic_name("compact-trim")
        compact_then_trim(b, client, topic)
        assert view_keys(b, topic) == ["old0", "old1", "old2", "new0", "new1", "new2", "new3"]
        client.close()



def test_messages_after_the_horizon_are_kept_for_the_next_compaction() -> None:
    # Pulsar's compactor reads through its durable __compaction subscription, acknowledged up to the
    # horizon of each run: what follows is kept for the next run, whatever the other subscriptions have
    # consumed. Without it, retention deleted consumed ledgers the next run had not read yet.
    with trimming_broker() as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        topic = topic_name("compact-hold")
        compact_then_trim(b, client, topic, consumed=13)  # all of it, new values and tombstone too
        assert view_keys(b, topic) == ["old0", "old1", "old2", "new0", "new1", "new2", "new3"]
        client.close()


def test_readers_from_earliest_read_the_view_before_the_first_ledger() -> None:
    # Pulsar's PersistentDispatcherSingleActiveConsumer reads the compacted ledger from its start on a
    # read_compacted reader's first read from MessageId.earliest (readFromEarliest), though the topic's
    # first entry is past the view's first ones; a TableView is such a reader.
    with trimming_broker() as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        topic = topic_name("compact-trim-read")
        compact_then_trim(b, client, topic)
        expected = [*((f"old{i}", f"old{i}".encode()) for i in range(3)),
                    *((f"new{i}", f"new{i}".encode()) for i in range(4))]
        assert read_all(client, topic) == expected
        # A little at a time (one permit at a time: the view in as many reads).
        slow = client.create_reader(topic, MessageId.earliest, is_read_compacted=True, receiver_queue_size=1)
        assert [slow.read_next(TIMEOUT_MS).data() for _ in expected] == [v for _, v in expected]
        slow.close()
        reader = client.create_reader(topic, MessageId.latest, is_read_compacted=True)
        reader.seek(MessageId.earliest)
        assert reader.read_next(TIMEOUT_MS).data() == b"old0"
        reader.close()
        table = client.create_table_view(topic)
        seen: dict[str, bytes] = {}
        table.for_each(lambda k, v: seen.__setitem__(k, v))
        assert seen == dict(expected)
        table.close()
        client.close()


def test_a_run_killed_midway_leaves_nothing_in_the_next_view(tmp_path: Path) -> None:
    # A run killed (kill -9) after writing part of its compacted ledger, before the metadata switched to
    # it, leaves that ledger behind under the name the next run takes. Pulsar's compactor writes each run
    # to a new ledger (and deletes it when the run fails); the next view must hold that run's entries only.
    topic = topic_name("compact-crash")
    b = file_broker(tmp_path)
    try:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        producer = client.create_producer(topic, batching_enabled=False)
        first = producer.send(b"v1", partition_key="k")
        service = b.server.service
        loaded = service.topics[topic]

        async def crashed_run() -> None:  # what the killed run had written: k=v1, then nothing
            entry = await loaded.ledger.read_entry(Position(first.ledger_id(), first.entry_id()))
            ledger = await service.ledger_factory.open(compacted_ledger_name(loaded.name, 1), service.ledger_config)
            await ledger.add_entry_async(encode_record(CompactedEntry(entry, None, 1, -1)))
            await ledger.close()

        b.run_coroutine(crashed_run())
        producer.send(b"v2", partition_key="k")
        compact(b, topic)
        assert read_all(client, topic) == [("k", b"v2")]
        client.close()
    finally:
        b.stop()
    b = file_broker(tmp_path)
    try:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        assert read_all(client, topic) == [("k", b"v2")]
        client.close()
    finally:
        b.stop()


def test_encrypted_batches_are_kept_whole_under_their_key(broker: BrokerThread, client: pulsar.Client,
                                                          tmp_path: Path) -> None:
    # The broker cannot read an encrypted batch's messages. Pulsar's compactor (RawBatchConverter.
    # isReadableBatch: no encryption keys) takes such a batch as one message under its metadata's key,
    # which the client copies from the batch's first message: a later value of that key supersedes the
    # whole batch. Read message by message, the ciphertext was either unreadable (the batch then kept
    # forever: an older value came back) or read as garbage keys.
    keys = key_reader(tmp_path)
    topic = topic_name("compact-encrypted")
    producer = client.create_producer(topic, encryption_key="key", crypto_key_reader=keys, batching_enabled=True,
                                      batching_max_publish_delay_ms=50)
    for value in (b"v1", b"v2", b"v3"):
        producer.send_async(value, None, partition_key="k")
        producer.flush()  # (one batch each)
    compact(broker, topic)
    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True, crypto_key_reader=keys)
    seen = []
    while reader.has_message_available():
        seen.append(reader.read_next(TIMEOUT_MS).data())
    assert seen == [b"v3"]


CHUNK_LIMIT = 16 * 1024  # a small maxMessageSize: a message of 40 KiB goes in 3 chunks


def test_chunked_messages_are_compacted_as_whole_messages_of_their_key() -> None:
    # Each chunk is an entry under the message's key. Pulsar's compactor (and ours before) took each chunk for
    # a message of the key and kept the key's last chunk alone, which the client cannot assemble ("Received an
    # uncached chunk"): key "a", whose latest value is chunked, was missing from the reader and the TableView.
    with BrokerThread(maxMessageSize=CHUNK_LIMIT) as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            topic = topic_name("compact-chunks")
            producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
            big = {c: bytes([c]) * (40 * 1024) for c in b"ABCD"}
            producer.send(b"a-small", partition_key="a")
            producer.send(big[ord("A")], partition_key="a")  # a's latest: chunked
            producer.send(big[ord("B")], partition_key="b")  # superseded by the next value of b
            producer.send(b"c-small", partition_key="c")
            producer.send(b"b-small", partition_key="b")
            producer.send(big[ord("C")], partition_key="c")  # c's latest: chunked
            compact(b, topic)
            assert read_all(client, topic) == [("a", big[ord("A")]), ("b", b"b-small"), ("c", big[ord("C")])]
            view = client.create_table_view(topic)
            assert {k: view.get(k) for k in "abc"} == {"a": big[ord("A")], "b": b"b-small", "c": big[ord("C")]}
            view.close()
            # a second run, over the view and what follows it: a chunked value superseded by a chunked one
            producer.send(big[ord("D")], partition_key="a")
            compact(b, topic)
            assert read_all(client, topic) == [("b", b"b-small"), ("c", big[ord("C")]), ("a", big[ord("D")])]
        finally:
            client.close()


class ChunkGate:
    """Holds back, in the broker, every chunk from ``from_chunk`` on (and whatever is published after one held),
    until ``release``: a chunked message then has only its first chunks stored when a compaction run takes its
    horizon, as when the run starts while the producer is still sending it. (The broker stores what a producer
    sent together with one append: the entries before the first chunk held are stored at once, and the receipts
    of the whole append go out once the rest is.)"""

    def __init__(self, broker: BrokerThread, topic: str, from_chunk: int) -> None:
        self.broker = broker
        self.held: list[tuple[Any, ...]] = []
        self.open = False
        loaded = broker.server.service.get_topic_if_loaded(TopicName.parse(topic))
        assert isinstance(loaded, PersistentTopic)
        self.topic = loaded
        self.publish = publish = loaded.publish_entries

        def held(entry: bytes) -> bool:
            md = read_entry_metadata(entry)
            return md.num_chunks_from_msg > 1 and md.chunk_id >= from_chunk

        def gated(producer: Producer, entries: list[bytes], num_messages: int, nbytes: int,
                  callback: Callable[[Position | None, BaseException | None], None], txn: TxnID | None = None) -> None:
            cut = 0 if self.held else next((i for i, e in enumerate(entries) if held(e)), None)
            if self.open or cut is None:
                publish(producer, entries, num_messages, nbytes, callback, txn)
                return
            first: list[Position | None] = []
            if cut:
                before = entries[:cut]
                publish(producer, before, cut, sum(map(len, before)), lambda p, _: first.append(p), txn)
            after = entries[cut:]
            self.held.append((producer, after, len(after), sum(map(len, after)),
                              lambda p, exc: callback(first[0] if first else p, exc), txn))

        loaded.publish_entries = gated  # type: ignore[method-assign]

    def release(self) -> None:
        async def replay() -> None:
            self.open = True
            for call in self.held:
                self.publish(*call)
            self.held.clear()

        self.broker.run_coroutine(replay())


def test_a_chunked_message_straddling_the_horizon_is_neither_lost_nor_duplicated() -> None:
    # The producer is still sending a chunked message when a run takes its horizon: chunks 0 and 1 of 3 are
    # before it, chunk 2 after. Pulsar 4.0.7's compactor (AbstractTwoPhaseCompactor.phaseTwoLoop keeps a non-batch
    # entry only if it is latestForKey of its key) keeps chunk 1 alone, then chunk 2 alone after the next run:
    # the client can assemble neither, and key "a" (its older value superseded) is lost to read_compacted readers.
    # Ours keeps the incomplete message's chunks so far and the value they do not yet supersede: a reader reads
    # the old value, then the message whole (its first chunks from the view, the last from the topic); the next
    # run finds it complete and keeps it alone.
    with BrokerThread(maxMessageSize=CHUNK_LIMIT) as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        try:
            topic = topic_name("compact-chunk-horizon")
            producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
            big = b"A" * (40 * 1024)  # 3 chunks
            producer.send(b"a-old", partition_key="a")
            producer.send(b"b-small", partition_key="b")
            gate = ChunkGate(b, topic, from_chunk=2)
            sent: list[Any] = []
            producer.send_async(big, lambda result, msg_id: sent.append((result, msg_id)), partition_key="a")
            ledger = gate.topic.ledger
            wait_for(lambda: ledger.number_of_entries == 4 and gate.held, 10, "chunks 0 and 1 stored, 2 held")
            compact(b, topic)
            assert gate.topic.compacted_view is not None
            assert gate.topic.compacted_view.horizon == ledger.last_confirmed_entry  # (chunk 1)
            reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
            for expected in (("a", b"a-old"), ("b", b"b-small")):
                msg = reader.read_next(TIMEOUT_MS)
                assert (msg.partition_key(), msg.data()) == expected
            gate.release()
            wait_for(lambda: sent, 10, "the chunked message's receipt")
            assert sent[0][0] == pulsar.Result.Ok
            msg = reader.read_next(TIMEOUT_MS)  # (chunks 0 and 1 from the view, 2 from the topic)
            assert (msg.partition_key(), msg.data()) == ("a", big)
            assert not reader.has_message_available()
            reader.close()
            assert read_all(client, topic) == [("a", b"a-old"), ("b", b"b-small"), ("a", big)]
            compact(b, topic)  # the message is whole now: it supersedes a's older value
            assert read_all(client, topic) == [("b", b"b-small"), ("a", big)]
            view = client.create_table_view(topic)
            assert {k: view.get(k) for k in "ab"} == {"a": big, "b": b"b-small"}
            view.close()
        finally:
            client.close()


def test_compaction_threshold_counts_what_was_published_before_a_restart(tmp_path: Path) -> None:
    # Pulsar's PersistentTopic.checkCompaction compares the __compaction subscription's backlog (the
    # topic's size before a first run) with the threshold, so a topic loaded with more than that
    # uncompacted is compacted at the next check. Counted as bytes published since the broker started,
    # it waited for as much again to be published after every restart or bundle move.
    url = "/admin/v2/namespaces/public/default/compactionThreshold"
    topic = topic_name("auto-compact-restart")

    def start(interval: float) -> BrokerThread:
        return BrokerThread(data_dir=tmp_path, managedLedgerStorage="file",
                            brokerServiceCompactionMonitorIntervalInSeconds=interval).start()

    b = start(3600)  # (no check while publishing)
    try:
        req = urllib.request.Request(b.web_url + url, data=b"1000", method="PUT",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 204
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):  # ~40 x 100 B: past the 1000-byte threshold
            producer.send(f"{i:03d}".encode() * 30, partition_key=f"k{i % 4}")
        client.close()
    finally:
        b.stop()
    b = start(0.1)
    try:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        client.create_reader(topic, MessageId.earliest)  # (loads the topic)
        wait_for(lambda: compaction_status(admin_url(b, topic))["status"] == "SUCCESS", 20,
                 "threshold compaction of what was published before the restart")
        assert read_all(client, topic) == [(f"k{j}", f"{36 + j:03d}".encode() * 30) for j in range(4)]
        client.close()
    finally:
        b.stop()


def test_a_topic_with_a_compaction_threshold_keeps_its_messages_for_the_first_run() -> None:
    # Pulsar's PersistentTopic.preCreateSubscriptionForCompactionIfNeeded creates the __compaction
    # subscription when a topic with a compaction threshold is loaded, so that what is published before
    # the first run stays for it even once every other subscription has consumed it.
    with trimming_broker() as b:
        url = f"{b.web_url}/admin/v2/namespaces/public/default/compactionThreshold"
        req = urllib.request.Request(url, data=b"1000000", method="PUT", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 204
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        topic = topic_name("compact-first-hold")
        consumer = client.subscribe(topic, "all")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(4):
            producer.send(f"v{i}".encode(), partition_key=f"k{i}")
        for _ in range(4):
            msg = consumer.receive(TIMEOUT_MS)
            consumer.acknowledge(msg)
        producer.send(b"last", partition_key="k9")  # (a ledger after those consumed)
        last = Position(msg.message_id().ledger_id(), msg.message_id().entry_id())
        loaded = b.server.service.topics[topic]
        wait_for(lambda: loaded.subscriptions["all"].cursor.mark_delete_position >= last, 10,
                 "the acknowledgements (and what retention then deletes)")
        compact(b, topic)
        assert view_keys(b, topic) == ["k0", "k1", "k2", "k3", "k9"]
        client.close()


def test_a_compaction_threshold_set_on_a_loaded_topic_holds_its_messages_too() -> None:
    # Pulsar creates the __compaction subscription when a topic's policies change to a compaction
    # threshold too (PersistentTopic.applyUpdatedTopicPolicies), not only at load; here the threshold check
    # does it, every brokerServiceCompactionMonitorIntervalInSeconds.
    with BrokerThread(brokerServiceCompactionMonitorIntervalInSeconds=0.1) as b:
        client = pulsar.Client(b.service_url, operation_timeout_seconds=10)
        topic = topic_name("compact-hold-later")
        client.create_producer(topic).send(b"v", partition_key="k")
        url = f"{b.web_url}/admin/v2/namespaces/public/default/compactionThreshold"
        req = urllib.request.Request(url, data=b"1000000", method="PUT", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 204
        ledger = b.server.service.topics[topic].ledger
        wait_for(lambda: "__compaction" in ledger.cursors, 10, "the __compaction cursor")
        client.close()
