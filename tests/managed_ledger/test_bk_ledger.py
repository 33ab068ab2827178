"""What only the BookKeeper managed ledger has: takeover with fencing, Pulsar's metadata in the znodes, ledgers
deleted from BookKeeper by trimming, cursors recovered from their cursor ledgers after the owner died (kill -9).

Real ZooKeeper + 3 bookies (conftest's session cluster); each test under its own root znode.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import logging
import os
import signal
import struct
import sys
import termios
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from cluster import processes
from cluster.local import REPO_ROOT, LocalCluster
from managed_ledger import (
    Entry,
    InitialPosition,
    LedgerFencedError,
    ManagedLedgerConfig,
    ManagedLedgerError,
    Position,
)
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.errors import NoSuchLedgerError
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.bookkeeper.metadata import LedgerState
from metadata_store.api import GetResult
from tests.managed_ledger.ml_support import TailReads, bookkeeper_factory, chain_inline_reads
from tests.waiting import eventually

SMALL = ManagedLedgerConfig(max_entries_per_ledger=3, min_ledger_rollover_time_s=0)
SMALL_KEEP = ManagedLedgerConfig(max_entries_per_ledger=3, min_ledger_rollover_time_s=0, retention_time_s=-1,
                                 retention_size_bytes=-1)
TIMEOUT = 30.0
ADD_RESPONSE_FRAME_SIZE = 28  # u32 length, header, rc, ledgerId, entryId


@pytest.fixture
async def make_factory(ml_bk_cluster: LocalCluster) -> AsyncIterator[Callable[[], BookKeeperManagedLedgerFactory]]:
    """Factories on one root znode (as two brokers sharing a cluster), all closed at the end."""
    root = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers"
    made: list[BookKeeperManagedLedgerFactory] = []

    def make() -> BookKeeperManagedLedgerFactory:
        made.append(bookkeeper_factory(ml_bk_cluster.zk_address, root=root))
        return made[-1]

    yield make
    for factory in made:
        await factory.close()


async def test_a_second_owner_fences_the_first_and_loses_nothing_acknowledged(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    first, second = make_factory(), make_factory()
    ml1 = await first.open("t")
    cursor1 = await ml1.open_cursor("sub", InitialPosition.EARLIEST)
    acked = [await ml1.add_entry_async(f"m{i}".encode()) for i in range(5)]

    ml2 = await second.open("t")  # takeover: recovers and closes ml1's ledger, starts its own
    assert ml2.last_confirmed_entry == acked[-1]
    cursor1.mark_delete(acked[3])  # the stale owner cannot overwrite the cursor either
    with pytest.raises(ManagedLedgerError):
        await cursor1.flush()
    assert ml2.cursors["sub"].mark_delete_position < acked[0]
    assert ml2.current_ledger_id > acked[-1].ledger_id
    with pytest.raises(LedgerFencedError):
        await ml1.add_entry_async(b"stale owner")
    assert ml1.is_fenced
    with pytest.raises(LedgerFencedError):  # and it stays fenced
        await ml1.add_entry_async(b"again")
    assert [(await ml2.read_entry(p)).data for p in acked] == [f"m{i}".encode() for i in range(5)]
    new = await ml2.add_entry_async(b"new owner")
    assert new.ledger_id == ml2.current_ledger_id
    assert ml2.next_valid_position(acked[-1]) == new


async def test_the_ledger_list_is_pulsars_managed_ledger_info(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    factory = make_factory()
    ml = await factory.open("tenant/ns/persistent/topic", SMALL_KEEP)
    await factory.start()
    for i in range(7):
        await ml.add_entry_async(b"x" * (i + 1))
    got = await factory.store.get(f"{factory.root}/tenant/ns/persistent/topic")
    assert got is not None
    info = ml_formats.decode_ledger_info(got.value)
    ids = [i.ledger_id for i in ml.ledgers_info()]
    assert [s.ledger_id for s in info.ledgers] == ids
    assert [(s.entries, s.size) for s in info.ledgers[:2]] == [(3, 1 + 2 + 3), (3, 4 + 5 + 6)]
    assert all(s.timestamp_ms > 0 for s in info.ledgers[:2])
    assert info.ledgers[2] == ml_formats.StoredLedger(ids[2])  # the current ledger: its id only
    for ledger_id in ids[:2]:  # rolled-over ledgers are closed in BookKeeper at their last entry
        metadata, _ = await factory.bk.read_metadata(ledger_id)
        assert metadata.state == LedgerState.CLOSED and metadata.last_entry_id == 2
        assert dict(metadata.custom_metadata) == {"application": b"pulsar", "component": b"managed-ledger",
                                                  "pulsar/managed-ledger": b"tenant/ns/persistent/topic"}
    assert factory.list_names() == ["tenant/ns/persistent/topic"]
    assert make_factory().list_names() == []  # a new factory learns the names when it starts
    other = make_factory()
    await other.start()
    assert other.list_names() == ["tenant/ns/persistent/topic"]


async def test_a_level_changed_as_its_re_read_ends_is_read_again(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    """A notification that arrives after a level's re-read has ended but while its task is still listed (its done
    callback not run yet) starts another re-read: that read was before the change, and the watch it armed has
    fired, so nothing else would tell of the name. (Taken for a re-read under way, it was lost: the other broker
    never learned the name: the likely cause of a CI run's timeout in the next test.)"""
    factory, other = make_factory(), make_factory()
    await other.start()
    first, second = "tenant/ns/persistent/first", "tenant/ns/persistent/second"
    assert await factory.create(first) is True
    await eventually(lambda: other.exists(first) and not other._rescans, "the other broker hears of the first")
    ended = asyncio.get_running_loop().create_task(asyncio.sleep(0))
    await ended
    other._rescans[f"{other.root}/tenant/ns/persistent"] = ended  # (the window: read, ended, not yet forgotten)
    assert await factory.create(second) is True
    await eventually(lambda: other.exists(second), "the other broker hears of the second")


async def test_a_created_managed_ledger_is_pulsars_empty_znode(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    """``create`` writes what Pulsar's TopicResources.createPersistentTopicAsync writes for a partition (an empty
    znode, no ledger in BookKeeper); another broker learns the name from its watch; an open that read no znode
    just before another broker created it opens the created one (its create-only write fails: BadVersion)."""
    name = "tenant/ns/persistent/parted-partition-0"
    factory, other = make_factory(), make_factory()
    await other.start()
    assert await factory.create(name) is True
    got = await factory.store.get(f"{factory.root}/{name}")
    assert got is not None and got.value == b"" and await factory.store.get_children(f"{factory.root}/{name}") == []
    await eventually(lambda: other.exists(name), "the other broker hears of it")
    assert await other.create(name) is False
    real_get = other.store.get
    stale = {f"{other.root}/{name}"}

    async def get_before_the_create(path: str, *, watch_missing: bool = True) -> GetResult | None:
        if path in stale:  # (read before the create: not there)
            stale.discard(path)
            return None
        return await real_get(path, watch_missing=watch_missing)

    other.store.get = get_before_the_create  # type: ignore[method-assign]
    ml = await other.open(name, SMALL_KEEP)
    assert not stale and ml.number_of_entries == 0
    await ml.add_entry_async(b"m0")
    got = await real_get(f"{other.root}/{name}")
    assert got is not None
    info = ml_formats.decode_ledger_info(got.value)
    assert [s.ledger_id for s in info.ledgers] == [ml.current_ledger_id]


async def test_a_name_not_heard_of_yet_is_read_from_the_store(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    """``exists_fresh`` reads the znode of a name the factory does not know (another broker's, its notification not
    here yet: held back for good here), and knows it from then on, as the notification would have made it."""
    name = "tenant/ns/persistent/fresh"
    factory, other = make_factory(), make_factory()
    other._on_notification = lambda notification: None  # type: ignore[method-assign]  # (never told)
    await other.start()
    heard: list[str] = []
    other.add_names_listener(heard.append)
    assert await factory.create(name) is True
    assert not other.exists(name)
    assert await other.exists_fresh(name) is True
    assert other.exists(name) and other.list_names() == [name] and heard == [name]
    assert await other.exists_fresh("tenant/ns/persistent/none") is False
    assert other.list_names() == [name] and heard == [name]


@pytest.mark.parametrize("change", ["create", "delete"])
async def test_a_slow_re_read_of_a_wide_level_does_not_undo_what_a_deeper_re_read_saw_meanwhile(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory], change: str) -> None:
    """Another broker creates (or deletes) a topic while this broker re-reads the level above it (after a new
    namespace's notification): the re-read of the topic's own level adds (removes) it, and the slower re-read above,
    which read that level before the change, does not undo that when it ends. (It did: the broker forgot a new topic,
    or listed a deleted one, until the next change there.)"""
    factory, other = make_factory(), make_factory()
    for name in ("t/a/persistent/x", "t/b/persistent/y"):
        assert await factory.create(name) is True
    await other.start()
    assert other.list_names() == ["t/a/persistent/x", "t/b/persistent/y"]
    held_level = f"{other.root}/t/b/persistent"
    reached, release = asyncio.Event(), asyncio.Event()
    real_get_children = other.store.get_children

    async def held_get_children(path: str) -> list[str]:
        if path == held_level and not release.is_set():
            reached.set()
            await release.wait()
        return await real_get_children(path)

    other.store.get_children = held_get_children  # type: ignore[method-assign]
    # A new namespace under t: the re-read of t walks t/a (before the change below), then waits at t/b.
    assert await factory.create("t/c/persistent/z") is True
    await asyncio.wait_for(reached.wait(), TIMEOUT)
    if change == "create":
        assert await factory.create("t/a/persistent/new") is True
        expected = ["t/a/persistent/new", "t/a/persistent/x", "t/b/persistent/y", "t/c/persistent/z"]
    else:
        await factory.delete("t/a/persistent/x")
        expected = ["t/b/persistent/y", "t/c/persistent/z"]
    await eventually(lambda: "t/a/persistent/new" in other.list_names() if change == "create"
                     else not other.exists("t/a/persistent/x"), "the re-read of t/a/persistent sees the change")
    release.set()
    await eventually(lambda: not other._rescans, "every re-read to end")
    assert other.list_names() == expected


async def test_a_cursor_write_that_raises_is_logged_and_does_not_hang_the_close(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory], caplog: pytest.LogCaptureFixture) -> None:
    """A background task that raises what it does not expect (a bug) is logged at once with its traceback, and the
    ledger still closes (it was only gathered at close before: nothing logged)."""
    factory = make_factory()
    ml = await factory.open("tenant/ns/persistent/buggy", SMALL_KEEP)
    cursor = await ml.open_cursor("c")
    await ml.add_entry_async(b"m0")

    async def broken(name: str, record: object) -> None:
        raise RuntimeError("a bug in the cursor store")

    ml._cursor_store.write = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        cursor.mark_delete(Position(ml.current_ledger_id, 0))
        closing = asyncio.ensure_future(ml.close())  # (its flush writes the cursor's state)
        await eventually(lambda: any("a background task failed" in r.getMessage() for r in caplog.records),
                         "the failure to be logged")
        await asyncio.wait_for(closing, 30)


async def test_trimmed_ledgers_are_deleted_from_bookkeeper(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    factory = make_factory()
    ml = await factory.open("t", SMALL)
    cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
    positions = [await ml.add_entry_async(b"x") for _ in range(7)]
    old = [i.ledger_id for i in ml.ledgers_info()[:2]]
    cursor.mark_delete(positions[5])
    assert [i.ledger_id for i in ml.ledgers_info()][:2] != old

    async def gone(ledger_id: int) -> bool:
        try:
            await factory.bk.read_metadata(ledger_id)
        except NoSuchLedgerError:
            return True
        return False

    for ledger_id in old:
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while not await gone(ledger_id):
            assert asyncio.get_running_loop().time() < deadline, f"ledger {ledger_id} still exists"
            await asyncio.sleep(0.02)
    got = await factory.store.get(f"{factory.root}/t")
    assert got is not None
    assert not set(old) & {s.ledger_id for s in ml_formats.decode_ledger_info(got.value).ledgers}


async def test_cursor_state_survives_kill_9_of_its_owner(ml_bk_cluster: LocalCluster) -> None:
    root = f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    owner = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.managed_ledger.bk_owner", ml_bk_cluster.zk_address, root,
        stdout=asyncio.subprocess.PIPE, env=env)
    processes.track(owner.pid, "managed-ledger owner")
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(owner.stdout.readline(), TIMEOUT)
        positions = [Position(*p) for p in json.loads(line)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            owner.send_signal(signal.SIGKILL)
        await owner.wait()

    factory = bookkeeper_factory(ml_bk_cluster.zk_address, root=root)
    try:
        await factory.start()
        got = await factory.store.get(ml_formats.cursor_path(root, "t", "sub"))
        assert got is not None
        assert ml_formats.decode_cursor_info(got.value).cursors_ledger_id != -1  # its state is in a cursor ledger
        ml = await factory.open("t")  # fences the dead owner's ledger and its cursor ledger
        assert ml.last_confirmed_entry == positions[-1]
        sub = ml.cursors["sub"]
        assert sub.mark_delete_position == positions[4]
        assert [list(r) for r in sub.individually_deleted] == [[positions[6], positions[6]]]
        assert [e.data for e in await sub.read_entries_async(10)] == [b"m5", b"m7", b"m8", b"m9"]
    finally:
        await factory.close()


async def test_chained_cached_reads_stay_within_the_nesting_limit(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    """test_nesting's chain, shorter (bookies are slower than memory): in order, never deeper than the limit."""
    factory = make_factory()
    ml = await factory.open("chain", ManagedLedgerConfig(max_entries_per_ledger=700, min_ledger_rollover_time_s=0,
                                                         retention_time_s=-1, retention_size_bytes=-1))
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    count = 2000
    added = asyncio.Event()
    results: list[Position] = []

    def on_added(position: Position | None, exc: BaseException | None) -> None:
        assert exc is None and position is not None
        results.append(position)
        if len(results) == count:
            added.set()

    for i in range(count):
        ml.add_entry(i.to_bytes(4, "big"), on_added)
    await asyncio.wait_for(added.wait(), TIMEOUT)
    assert results == sorted(results) and len(ml.ledgers_info()) == 3

    seen: list[Position] = []
    depths: list[int] = []
    done = asyncio.Event()
    failures: list[BaseException] = []

    def on_read(entries: list[Entry], exc: BaseException | None) -> None:
        depths.append(factory.nesting.depth)
        if exc is not None or not entries:
            failures.extend([exc] if exc else [])
            done.set()
            return
        seen.extend(e.position for e in entries)
        cursor.read_entries(1, on_read)

    cursor.read_entries(1, on_read)
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert failures == [] and seen == results
    assert all(a < b for a, b in itertools.pairwise(seen))
    assert max(depths) <= ml.config.read_nesting_limit


async def test_chained_inline_reads_stay_within_the_nesting_limit(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    """test_nesting's inline chain on bookies: cached entries taken at once (``inline``), across ledgers,
    in order, counted in the nesting depth (posted at the limit, then through the callback)."""
    factory = make_factory()
    ml = await factory.open("inline", ManagedLedgerConfig(max_entries_per_ledger=300, min_ledger_rollover_time_s=0,
                                                          retention_time_s=-1, retention_size_bytes=-1))
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    count = 1000
    added = asyncio.Event()
    results: list[Position] = []

    def on_added(position: Position | None, exc: BaseException | None) -> None:
        assert exc is None and position is not None
        results.append(position)
        if len(results) == count:
            added.set()

    for i in range(count):
        ml.add_entry(i.to_bytes(4, "big"), on_added)
    await asyncio.wait_for(added.wait(), TIMEOUT)

    seen, depths = await chain_inline_reads(cursor, count, 3, lambda: factory.nesting.depth)
    assert seen == results
    limit = ml.config.read_nesting_limit
    assert depths["inline"] and max(depths["inline"]) == limit
    assert depths["callback"] and max(depths["callback"]) <= limit


async def test_reads_of_uncached_entries_come_from_the_bookies(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    first = make_factory()
    ml = await first.open("t", SMALL_KEEP)
    positions = [await ml.add_entry_async(f"m{i}".encode()) for i in range(7)]
    await ml.close()
    again = await make_factory().open("t", SMALL_KEEP)  # a fresh factory: an empty cache
    reader = again.new_non_durable_cursor(Position(-1, -1), "r")
    entries = await reader.read_entries_async(10)
    assert [e.position for e in entries] == positions
    assert [e.data for e in entries] == [f"m{i}".encode() for i in range(7)]
    with pytest.raises(ManagedLedgerError):
        await again.read_entry(Position(positions[0].ledger_id - 1, 0))


def _unread_bytes(transport: asyncio.Transport) -> int:
    """Bytes waiting in the socket's receive buffer (read neither by us nor by the loop)."""
    answer = fcntl.ioctl(transport.get_extra_info("socket").fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", answer)[0])


async def test_adds_confirmed_together_wake_a_waiting_reader_once(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory]) -> None:
    """Adds whose bookie answers arrive together (held here in the sockets: reading from the bookies is paused until
    all ten answers, 5 entries x 2 bookies, are there) go to each cursor waiting at the tail in one read, not in one
    read per add; the receipts run first, then the reads, on the next loop turn (as the file ledger's)."""
    factory = make_factory()
    ml = await factory.open("t")
    for data in (b"a", b"b"):  # (connects to the 3 bookies: entries 0 and 1 go to bookies 0, 1 and 1, 2)
        await ml.add_entry_async(data)
    tail = TailReads([await ml.open_cursor(f"c{i}", InitialPosition.LATEST) for i in range(3)])
    transports = [c.result()._transport for c in factory.bk.bookies._connections.values()]
    assert len(transports) == 3 and all(t is not None for t in transports)
    held = [t for t in transports if t is not None]
    for transport in held:
        transport.pause_reading()
    tail.add(ml, 5)
    await eventually(lambda: sum(map(_unread_bytes, held)) >= 5 * 2 * ADD_RESPONSE_FRAME_SIZE,
                     "every bookie answer waiting in the sockets")
    assert tail.confirmed == []
    for transport in held:
        transport.resume_reading()
    await eventually(tail.all_read, "every waiting cursor read")
    tail.check_one_read_each_after_the_receipts(5)


async def test_a_cursor_deleted_while_its_state_is_written_is_removed_after_that_write(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory], monkeypatch: pytest.MonkeyPatch) -> None:
    """A cursor deleted while a write of its state is in flight (its cursor ledger made, the znode's compare-and-set
    not yet done): the removal waits for that write. It used not to: the cursor was then created again under the
    same name (a new znode, version 0 again), the old write's compare-and-set landed on it (the deleted cursor's
    state in the new cursor's znode), and the new cursor's next write failed the version check, which fenced the
    whole managed ledger as if another broker owned it."""
    ml = await make_factory().open("t")
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    first = await ml.add_entry_async(b"m")
    store = ml._cursor_store
    put, delete = store._put, store.delete
    entered, release = asyncio.Event(), asyncio.Event()
    removed: list[str] = []

    async def held_put(name: str, value: bytes, version: int | None) -> object:
        entered.set()
        await release.wait()
        return await put(name, value, version)

    async def recorded_delete(name: str) -> None:
        removed.append(name)
        await delete(name)

    monkeypatch.setattr(store, "_put", held_put)
    monkeypatch.setattr(store, "delete", recorded_delete)
    cursor.mark_delete(first)  # its state write: a new cursor ledger, then the znode (held)
    try:
        await asyncio.wait_for(entered.wait(), TIMEOUT)
        deleting = asyncio.ensure_future(ml.delete_cursor("c"))
        for _ in range(3):  # (the deletion runs until it awaits something)
            await asyncio.sleep(0)
        assert not removed, "the stored state was removed while a write of it was in flight"
    finally:
        monkeypatch.setattr(store, "_put", put)
        release.set()
    await asyncio.wait_for(deleting, TIMEOUT)
    assert removed == ["c"]
    again = await ml.open_cursor("c", InitialPosition.LATEST)
    second = await ml.add_entry_async(b"n")
    again.mark_delete(second)
    await again.flush()
    assert not ml.is_fenced
    await ml.close()


async def test_an_open_cursor_cancelled_while_creating_it_leaves_the_cursor_created(
        make_factory: Callable[[], BookKeeperManagedLedgerFactory], monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller of open_cursor cancelled (a SUBSCRIBE whose client went away) once the new cursor's znode is made:
    the creation is the ledger's and ends, and the cursor opens at the next call. It used to stop with the caller:
    the znode stayed, unknown to the ledger, and every later open of that name failed ("exists (create-only
    put)"), until the topic was loaded again."""
    ml = await make_factory().open("t")
    store = ml._cursor_store
    put = store._put
    created, release = asyncio.Event(), asyncio.Event()

    async def put_then_hold(name: str, value: bytes, version: int | None) -> object:
        stat = await put(name, value, version)
        created.set()
        await release.wait()
        return stat

    monkeypatch.setattr(store, "_put", put_then_hold)
    opening = asyncio.ensure_future(ml.open_cursor("c", InitialPosition.EARLIEST))
    try:
        await asyncio.wait_for(created.wait(), TIMEOUT)
        opening.cancel()
        await asyncio.wait([opening])
    finally:
        monkeypatch.setattr(store, "_put", put)
        release.set()
    cursor = await asyncio.wait_for(ml.open_cursor("c", InitialPosition.EARLIEST), TIMEOUT)
    assert ml.cursors["c"] is cursor
    cursor.mark_delete(await ml.add_entry_async(b"m"))
    await cursor.flush()
    await ml.close()
