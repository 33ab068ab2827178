"""Compaction when things fail midway: a read of the topic or an append to the new view fails, the view's ledger
cannot be opened when the topic loads, the topic is unloaded or deleted while a run is under way, two runs are
asked for at once, a run while a read_compacted read of the previous view is under way.

What must hold whatever fails (as Pulsar's compactor): the status reports ERROR with the error
(GET .../compaction), the previous view stays intact and readable, and the run leaves no managed ledger nor task
behind (Pulsar's compactor deletes the ledger of a failed run).

The real broker in process, on file storage; entries are added to the topic's managed ledger directly."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from broker.admin.stats import compaction_stats
from broker.embedded import Broker
from broker.errors import PersistenceError
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol.entry import build_entry
from broker.service import compaction
from broker.service.broker_service import BrokerService
from broker.service.compacted_view import CompactedView
from broker.service.compaction import COMPACTION_DOMAIN, CompactionStatus, messages_of
from broker.service.deduplication import Deduplication
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from broker.transactions.buffer import TransactionBuffer
from managed_ledger import ManagedCursor, ManagedLedgerError, Position
from metadata_store import MetadataStoreError
from tests.waiting import eventually


def entry(key: str, value: bytes) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key=key)
    return build_entry(md.SerializeToString(), value)


async def publish(topic: PersistentTopic, *pairs: tuple[str, bytes]) -> None:
    for key, value in pairs:
        await topic.ledger.add_entry_async(entry(key, value))


def service_of(b: Broker) -> BrokerService:
    assert b.server is not None
    return b.server.service


async def load(b: Broker, name: TopicName) -> PersistentTopic:
    return await service_of(b).get_persistent_topic(name, True)


async def finished(topic: PersistentTopic) -> CompactionStatus:
    await eventually(lambda: topic.compactor.status is not CompactionStatus.RUNNING, "the run to end")
    return topic.compactor.status


async def compact(topic: PersistentTopic) -> None:
    assert topic.compactor.trigger()
    assert await finished(topic) is CompactionStatus.SUCCESS, topic.compactor.last_error


async def view_of(topic: PersistentTopic) -> list[tuple[str | None, bytes]]:
    view = topic.compacted_view
    assert view is not None
    records, at_end = await view.read(Position(-1, -1), 10_000)
    assert at_end
    out = []
    for r in records:
        [m] = list(messages_of(r.entry.data))
        out.append((m.key, r.entry.data[-2:]))
    return out


def view_ledgers(b: Broker, name: TopicName) -> list[str]:
    """The managed ledgers of the topic's compacted views that exist now."""
    prefix = f"{name.tenant}/{name.namespace_part}/{COMPACTION_DOMAIN}/{name.local_name}-"
    return [n for n in service_of(b).ledger_factory.list_names() if n.startswith(prefix)]


def open_ledgers(b: Broker) -> set[str]:
    return set(service_of(b).ledger_factory._open)  # type: ignore[attr-defined]


def a_name(what: str) -> TopicName:
    return TopicName.parse(f"persistent://public/default/{what}-{uuid.uuid4().hex[:8]}")


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker() as b:
        yield b


async def a_compacted_topic(b: Broker, what: str) -> tuple[PersistentTopic, list[str]]:
    """A topic compacted once (k0=v2, k1=v1), with more after the horizon (k0=v3); its view's ledger."""
    topic = await load(b, a_name(what))
    await publish(topic, ("k0", b"v0"), ("k1", b"v1"), ("k0", b"v2"))
    await compact(topic)
    await publish(topic, ("k0", b"v3"))
    ledgers = view_ledgers(b, topic.name)
    assert len(ledgers) == 1
    return topic, ledgers


class FailingCursor:
    """A cursor whose reads fail from the ``fail_at``-th on."""

    def __init__(self, cursor: ManagedCursor, fail_at: int) -> None:
        self._cursor = cursor
        self._left = fail_at

    async def read_entries_async(self, *args: Any) -> Any:
        self._left -= 1
        if self._left <= 0:
            raise ManagedLedgerError("injected: the bookie is gone")
        return await self._cursor.read_entries_async(*args)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._cursor, attr)


async def test_the_status_of_a_failed_run_names_its_error(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # GET .../compaction after a run failed on an error without a message: ERROR, and a lastError that says
    # what failed (it was empty)
    topic, _ = await a_compacted_topic(broker, "status")

    async def set_compaction(*args: Any) -> None:
        raise TimeoutError()

    monkeypatch.setattr(service_of(broker).metadata, "set_compaction", set_compaction)
    assert topic.compactor.trigger()
    assert await finished(topic) is CompactionStatus.ERROR
    url = f"{broker.web_url}/admin/v2/{topic.full_name.replace('://', '/')}/compaction"
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        assert r.status == 200
        assert await r.json() == {"status": "ERROR", "lastError": "TimeoutError"}
    stats = compaction_stats(topic.compactor.record)
    assert stats["lastCompactionFailedTimestamp"] >= stats["lastCompactionSucceedTimestamp"] > 0


@pytest.mark.parametrize("fail_in", ["first pass", "second pass"])
async def test_a_read_of_the_topic_that_fails_leaves_the_previous_view(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, fail_in: str) -> None:
    topic, ledgers = await a_compacted_topic(broker, "read-fails")
    before = await view_of(topic)
    opened = 0
    real = topic.ledger.new_non_durable_cursor

    def failing(start: Position, name: str) -> Any:
        nonlocal opened
        cursor = real(start, name)
        if name != "__compaction-reader":
            return cursor
        opened += 1
        return FailingCursor(cursor, 1) if (opened == 1) == (fail_in == "first pass") else cursor

    monkeypatch.setattr(topic.ledger, "new_non_durable_cursor", failing)
    assert topic.compactor.trigger()
    assert await finished(topic) is CompactionStatus.ERROR
    assert "the bookie is gone" in topic.compactor.last_error
    assert topic.compactor.record.last_failed_ms > 0
    assert view_ledgers(broker, topic.name) == ledgers  # (the failed run's ledger deleted)
    assert await view_of(topic) == before
    monkeypatch.undo()
    await compact(topic)
    assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v3")]


async def test_an_append_to_the_new_view_that_fails_leaves_the_previous_view(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    topic, ledgers = await a_compacted_topic(broker, "append-fails")
    before = await view_of(topic)
    factory = service_of(broker).ledger_factory
    real_open = factory.open
    appends = 0

    async def opened(name: str, config: Any = None) -> Any:
        ledger = await real_open(name, config)
        if COMPACTION_DOMAIN in name:
            real_add = ledger.add_entry

            def add_entry(data: bytes, callback: Callable[[Any, BaseException | None], None]) -> None:
                nonlocal appends
                appends += 1
                if appends == 2:
                    callback(None, ManagedLedgerError("injected: the disk is full"))
                else:
                    real_add(data, callback)

            monkeypatch.setattr(ledger, "add_entry", add_entry)
        return ledger

    monkeypatch.setattr(factory, "open", opened)
    assert topic.compactor.trigger()
    assert await finished(topic) is CompactionStatus.ERROR
    assert "the disk is full" in topic.compactor.last_error
    assert view_ledgers(broker, topic.name) == ledgers
    assert not [n for n in open_ledgers(broker) if COMPACTION_DOMAIN in n and n not in ledgers]
    assert await view_of(topic) == before
    monkeypatch.undo()
    await compact(topic)
    assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v3")]


async def test_a_view_that_cannot_be_opened_fails_the_load_and_leaves_nothing_open(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    name = a_name("view-unopenable")
    async with Broker(data_dir=tmp_path) as b:
        topic = await load(b, name)
        await publish(topic, ("k0", b"v0"), ("k1", b"v1"), ("k0", b"v2"))
        await compact(topic)
        [ledger] = view_ledgers(b, name)
    async with Broker(data_dir=tmp_path) as b:
        factory = service_of(b).ledger_factory
        real_open = factory.open

        async def failing(n: str, config: Any = None) -> Any:
            if n == ledger:
                raise ManagedLedgerError("injected: no bookie has it")
            return await real_open(n, config)

        monkeypatch.setattr(factory, "open", failing)
        with pytest.raises(PersistenceError, match="no bookie has it"):
            await load(b, name)
        assert name.full not in service_of(b).topics
        assert open_ledgers(b) & {name.persistence_path, ledger} == set()
        monkeypatch.undo()
        topic = await load(b, name)  # (again once storage is back, with its view)
        assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v2")]


@pytest.mark.parametrize("step", ["hold_for_first_run", "dedup", "txn_buffer"])
async def test_a_load_that_fails_after_the_view_opened_closes_it(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    name = a_name("load-fails")
    async with Broker(data_dir=tmp_path) as b:
        topic = await load(b, name)
        await publish(topic, ("k0", b"v0"))
        await compact(topic)
        [ledger] = view_ledgers(b, name)
    async with Broker(data_dir=tmp_path) as b:
        async def failing(self: Any) -> None:
            raise ManagedLedgerError("injected: recovery failed")

        target = {"hold_for_first_run": (compaction.Compactor, "hold_for_first_run"),
                  "dedup": (Deduplication, "recover"), "txn_buffer": (TransactionBuffer, "recover")}[step]
        monkeypatch.setattr(*target, failing)
        with pytest.raises(ManagedLedgerError, match="recovery failed"):
            await load(b, name)
        assert open_ledgers(b) & {name.persistence_path, ledger} == set()
        if step == "dedup":  # (a close that fails too: the load's own error is the one reported)
            async def close_fails(self: Any, finish_reads: bool = False) -> None:
                raise ManagedLedgerError("injected: close failed")

            monkeypatch.setattr(CompactedView, "close", close_fails)
            with pytest.raises(ManagedLedgerError, match="recovery failed"):
                await load(b, name)
            assert name.persistence_path not in open_ledgers(b)
        monkeypatch.undo()
        topic = await load(b, name)
        assert await view_of(topic) == [("k0", b"v0")]


class Gate:
    """Holds a coroutine at a point until the test lets it go."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.released = asyncio.Event()

    async def hold(self) -> None:
        self.reached.set()
        await self.released.wait()

    async def reach(self) -> None:
        await asyncio.wait_for(self.reached.wait(), 10)


def hold_appends(monkeypatch: pytest.MonkeyPatch, gate: Gate) -> list[asyncio.Future[Any]]:
    """The runs' second pass stops at its first append (its new ledger open)."""
    real = compaction._Appender.append

    async def held(self: Any, data: bytes) -> None:
        await gate.hold()
        await real(self, data)

    monkeypatch.setattr(compaction._Appender, "append", held)
    return []


async def test_a_run_asked_for_on_a_closed_topic_does_not_start(broker: Broker) -> None:
    # (an admin call or the threshold check that found the topic before its unload: Pulsar's triggerCompaction
    # skips a topic that is closing or deleting)
    topic, ledgers = await a_compacted_topic(broker, "closed")
    assert await service_of(broker).unload_topic(topic.name)
    done = topic.compactor._task
    assert topic.compactor.trigger()
    assert topic.compactor._task is done and topic.compactor.status is CompactionStatus.SUCCESS
    assert view_ledgers(broker, topic.name) == ledgers


async def test_two_runs_asked_for_at_once_make_one(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the admin's PUT and the threshold check: the second is refused, 409 on the admin API)
    topic, _ = await a_compacted_topic(broker, "twice")
    gate = Gate()
    hold_appends(monkeypatch, gate)
    assert topic.compactor.trigger()
    await gate.reach()
    assert not topic.compactor.trigger()
    assert topic.compactor.status is CompactionStatus.RUNNING
    gate.released.set()
    assert await finished(topic) is CompactionStatus.SUCCESS
    assert topic.compactor.record.runs == 2 and len(view_ledgers(broker, topic.name)) == 1
    assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v3")]


async def test_a_run_waits_for_the_reads_of_the_previous_view_under_way(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # A read_compacted consumer's read of the view in flight when a run replaces the view: it completes with
    # the previous view's records (its ledger is closed and deleted after it), the next read goes to the new one.
    topic, [old_ledger] = await a_compacted_topic(broker, "read-during-run")
    old = topic.compacted_view
    assert old is not None
    gate = Gate()
    real_cursor = old.ledger.new_non_durable_cursor

    class HeldCursor(FailingCursor):
        async def read_entries_async(self, *args: Any) -> Any:
            await gate.hold()
            return await self._cursor.read_entries_async(*args)

    def cursor(start: Position, name: str) -> Any:
        c = real_cursor(start, name)
        return HeldCursor(c, 0) if name == "__compacted-view" else c

    monkeypatch.setattr(old.ledger, "new_non_durable_cursor", cursor)
    got: list[tuple[list[Any], bool, BaseException | None]] = []
    old.read_entries(Position(-1, -1), 100, None, lambda records, at_end, exc: got.append((records, at_end, exc)))
    await gate.reach()
    assert topic.compactor.trigger()
    await eventually(lambda: topic.compacted_view is not old, "the run to switch the view")
    assert old_ledger in view_ledgers(broker, topic.name) and not got
    gate.released.set()
    assert await finished(topic) is CompactionStatus.SUCCESS
    [(records, at_end, exc)] = got
    assert exc is None and at_end and [r.entry.data[-2:] for r in records] == [b"v1", b"v2"]
    assert old_ledger not in view_ledgers(broker, topic.name)
    assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v3")]


def hold_open(monkeypatch: pytest.MonkeyPatch, factory: Any, gate: Gate) -> list[asyncio.Future[Any]]:
    """The runs' open of their new ledger is held until the gate opens, the open itself under way meanwhile (as the
    file factory's open goes on in a task of its own when its caller is cancelled). Returns the opens."""
    real_open = factory.open
    opens: list[asyncio.Future[Any]] = []

    async def held(n: str, config: Any = None) -> Any:
        if COMPACTION_DOMAIN not in n:
            return await real_open(n, config)
        opening = asyncio.ensure_future(real_open(n, config))
        opens.append(opening)
        await gate.hold()
        return await opening

    monkeypatch.setattr(factory, "open", held)
    return opens


async def close_during_run(monkeypatch: pytest.MonkeyPatch, gate: Gate, work: Awaitable[Any]) -> Any:
    """``work`` (an unload or delete) while the run is held at ``gate``, which opens once the topic's close has
    come to the run (an open held meanwhile completes after the run was told to stop)."""
    closing = asyncio.Event()
    real_close = compaction.Compactor.close

    async def close(self: compaction.Compactor) -> None:
        closing.set()
        await real_close(self)

    monkeypatch.setattr(compaction.Compactor, "close", close)
    working = asyncio.ensure_future(work)
    await asyncio.wait_for(closing.wait(), 10)
    gate.released.set()
    return await asyncio.wait_for(working, 10)


@pytest.mark.parametrize("held_at", ["open", "append"])
async def test_a_topic_unloaded_during_a_run_keeps_its_previous_view(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, held_at: str) -> None:
    topic, ledgers = await a_compacted_topic(broker, "unloaded-midway")
    before = await view_of(topic)
    gate = Gate()
    opens = hold_appends(monkeypatch, gate) if held_at == "append" else hold_open(
        monkeypatch, service_of(broker).ledger_factory, gate)
    assert topic.compactor.trigger()
    await gate.reach()
    assert await close_during_run(monkeypatch, gate, service_of(broker).unload_topic(topic.name))
    assert all(o.done() for o in opens)
    assert topic.compactor._task is not None and topic.compactor._task.done()
    assert view_ledgers(broker, topic.name) == ledgers, "the run's ledger left behind"
    assert not [n for n in open_ledgers(broker) if COMPACTION_DOMAIN in n]
    monkeypatch.undo()
    again = await load(broker, topic.name)
    assert await view_of(again) == before
    await compact(again)
    assert await view_of(again) == [("k1", b"v1"), ("k0", b"v3")]


@pytest.mark.parametrize("held_at", ["open", "append"])
async def test_a_topic_deleted_during_a_run_leaves_no_view_ledger(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, held_at: str) -> None:
    topic, _ = await a_compacted_topic(broker, "deleted-midway")
    gate = Gate()
    opens = hold_appends(monkeypatch, gate) if held_at == "append" else hold_open(
        monkeypatch, service_of(broker).ledger_factory, gate)
    assert topic.compactor.trigger()
    await gate.reach()
    await close_during_run(monkeypatch, gate, service_of(broker).delete_topic(topic.name))
    assert all(o.done() for o in opens)
    assert topic.compactor._task is not None and topic.compactor._task.done()
    assert view_ledgers(broker, topic.name) == []
    assert not [n for n in open_ledgers(broker) if COMPACTION_DOMAIN in n]
    assert topic.full_name not in service_of(broker).metadata.compactions


async def test_a_topic_unloaded_while_its_run_switches_the_view_loads_the_new_view(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # The unload came while the run was writing the metadata record that names its new view: the record was
    # written, but the run, cancelled, deleted the ledger it names; loaded again, the topic had no view at all.
    topic, [old_ledger] = await a_compacted_topic(broker, "unloaded-switching")
    metadata = service_of(broker).metadata
    gate = Gate()
    real_set = metadata.set_compaction

    async def set_compaction(*args: Any) -> None:
        await real_set(*args)
        await gate.hold()  # (written; its answer not back yet)

    monkeypatch.setattr(metadata, "set_compaction", set_compaction)
    assert topic.compactor.trigger()
    await gate.reach()
    assert await close_during_run(monkeypatch, gate, service_of(broker).unload_topic(topic.name))
    monkeypatch.undo()
    [ledger] = view_ledgers(broker, topic.name)
    assert ledger != old_ledger and metadata.compactions[topic.full_name]["ledger"] == ledger
    again = await load(broker, topic.name)
    assert await view_of(again) == [("k1", b"v1"), ("k0", b"v3")]


async def test_a_record_written_whose_answer_was_lost_switches_the_view(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    # The metadata write of the new view's record failed after the store had it (a lost answer): the run deleted
    # the ledger the record names, and the topic loaded again without a view.
    topic, [old_ledger] = await a_compacted_topic(broker, "answer-lost")
    metadata = service_of(broker).metadata
    real_set = metadata.set_compaction

    async def set_compaction(*args: Any) -> None:
        await real_set(*args)
        raise MetadataStoreError("injected: connection lost before the answer")

    monkeypatch.setattr(metadata, "set_compaction", set_compaction)
    assert topic.compactor.trigger()
    assert await finished(topic) is CompactionStatus.SUCCESS
    monkeypatch.undo()
    [ledger] = view_ledgers(broker, topic.name)
    assert ledger != old_ledger and metadata.compactions[topic.full_name]["ledger"] == ledger
    assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v3")]
    assert await service_of(broker).unload_topic(topic.name)
    again = await load(broker, topic.name)
    assert await view_of(again) == [("k1", b"v1"), ("k0", b"v3")]


async def test_a_record_not_written_leaves_the_previous_view(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    topic, [old_ledger] = await a_compacted_topic(broker, "not-recorded")
    before = await view_of(topic)
    metadata = service_of(broker).metadata

    async def set_compaction(*args: Any) -> None:
        raise MetadataStoreError("injected: the store is down")

    monkeypatch.setattr(metadata, "set_compaction", set_compaction)
    assert topic.compactor.trigger()
    assert await finished(topic) is CompactionStatus.ERROR
    assert "the store is down" in topic.compactor.last_error
    monkeypatch.undo()
    assert metadata.compactions[topic.full_name]["ledger"] == old_ledger
    assert not [n for n in open_ledgers(broker) if COMPACTION_DOMAIN in n and n != old_ledger]
    assert await view_of(topic) == before
    assert await service_of(broker).unload_topic(topic.name)
    again = await load(broker, topic.name)
    assert await view_of(again) == before
    await compact(again)  # (deletes the failed run's ledger, under the name it takes)
    assert await view_of(again) == [("k1", b"v1"), ("k0", b"v3")]
    assert view_ledgers(broker, topic.name) == [metadata.compactions[topic.full_name]["ledger"]]


async def test_a_deleted_topic_takes_the_ledger_a_failed_run_left(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    topic, _ = await a_compacted_topic(broker, "delete-leftover")

    async def set_compaction(*args: Any) -> None:
        raise MetadataStoreError("injected: the store is down")

    monkeypatch.setattr(service_of(broker).metadata, "set_compaction", set_compaction)
    assert topic.compactor.trigger()
    assert await finished(topic) is CompactionStatus.ERROR
    monkeypatch.undo()
    assert len(view_ledgers(broker, topic.name)) == 2  # (the view, and what the run left)
    await service_of(broker).delete_topic(topic.name)
    assert view_ledgers(broker, topic.name) == []


async def test_a_deleted_topic_never_compacted_takes_the_ledger_a_killed_run_left(broker: Broker) -> None:
    # (a run killed before its record: no record names the ledger, of generation 1)
    topic = await load(broker, a_name("delete-killed"))
    await publish(topic, ("k0", b"v0"))
    factory = service_of(broker).ledger_factory
    await (await factory.open(compaction.compacted_ledger_name(topic.name, 1))).close()
    assert len(view_ledgers(broker, topic.name)) == 1
    await service_of(broker).delete_topic(topic.name)
    assert view_ledgers(broker, topic.name) == []


async def test_deleting_a_non_persistent_topic_leaves_the_persistent_namesakes_view(broker: Broker) -> None:
    # A view's ledger name leaves the domain out (<tenant>/<ns>/__compaction/<topic>-<n>): deleting
    # non-persistent://.../x deleted the view of persistent://.../x, whose next run then failed on it. Found by the
    # admin HTTP fuzz (tests/admin/test_http_fuzz.py).
    topic, ledgers = await a_compacted_topic(broker, "namesake")
    namesake = TopicName.parse(f"non-persistent://{topic.name.namespace}/{topic.name.local_name}")
    await service_of(broker).get_topic(namesake, True)
    await service_of(broker).delete_topic(namesake)
    assert view_ledgers(broker, topic.name) == ledgers
    assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v2")]
    await compact(topic)
    assert await view_of(topic) == [("k1", b"v1"), ("k0", b"v3")]
