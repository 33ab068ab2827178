"""Pipelined syncs of the file ledger's writer: a light round of appends is written and its sync
started while an earlier round's sync is still in flight; completions keep their order, and a
round written before an earlier round's sync failed is never confirmed."""

from __future__ import annotations

import asyncio
import errno
import threading
from typing import Any

from managed_ledger import InitialPosition, ManagedLedgerError, Position
from managed_ledger.file import FileManagedLedgerFactory
from managed_ledger.fs import FileHandle
from tests.managed_ledger.crashfs import CrashFileSystem
from tests.managed_ledger.ml_support import FakeClock
from tests.managed_ledger.test_file_ledger import read_all
from tests.waiting import eventually

TIMEOUT = 10.0
ROOT = "/data/ledgers"


class _Gate:
    """Holds the next segment sync until released; it then fails with error, if one is given."""

    def __init__(self, error: int | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.error = error


class GatedFileSystem(CrashFileSystem):
    """CrashFileSystem whose next segment sync can be held (``arm``) while others go through."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: _Gate | None = None
        self._gate_lock = threading.Lock()

    def arm(self, error: int | None = None) -> _Gate:
        self.gate = _Gate(error)
        return self.gate

    def take_gate(self, path: str) -> _Gate | None:
        with self._gate_lock:
            gate, self.gate = (self.gate, None) if path.endswith(".seg") else (None, self.gate)
            return gate

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        return _GatedHandle(self, super().open_append(path, create=create, direct=direct), path)


class _GatedHandle:
    def __init__(self, fs: GatedFileSystem, inner: FileHandle, path: str) -> None:
        self._fs = fs
        self._inner = inner
        self._path = path

    def sync(self) -> None:
        gate = self._fs.take_gate(self._path)
        if gate is not None:
            gate.entered.set()
            gate.release.wait(TIMEOUT)
            if gate.error is not None:
                raise OSError(gate.error, "held sync failed", self._path)
        self._inner.sync()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def factory_on(fs: CrashFileSystem) -> FileManagedLedgerFactory:
    fs.makedirs_durable("/data")
    return FileManagedLedgerFactory(ROOT, clock=FakeClock(), fs=fs, fault_retry_interval_s=0)


async def test_a_round_is_synced_while_an_earlier_sync_is_in_flight_and_completes_after_it() -> None:
    fs = GatedFileSystem()
    factory = factory_on(fs)
    ml = await factory.open("t")
    await ml.add_entry_async(b"first")
    gate = fs.arm()
    held = asyncio.ensure_future(ml.add_entry_async(b"held"))
    await asyncio.to_thread(gate.entered.wait, TIMEOUT)
    syncs = fs.syncs
    later = asyncio.ensure_future(ml.add_entry_async(b"later"))
    # The later round is written and synced although the held sync has not returned ...
    await eventually(lambda: fs.syncs > syncs, "the later round's sync")
    await asyncio.sleep(0)  # (one loop turn: a completion already posted would run)
    # ... but it is not confirmed before the round ahead of it.
    assert not held.done() and not later.done()
    gate.release.set()
    first_done, second_done = await asyncio.wait_for(asyncio.gather(held, later), TIMEOUT)
    assert isinstance(first_done, Position) and isinstance(second_done, Position)
    assert first_done < second_done
    await factory.close()


async def test_a_round_written_before_an_earlier_sync_failed_is_not_confirmed() -> None:
    fs = GatedFileSystem()
    factory = factory_on(fs)
    ml = await factory.open("t")
    first = await ml.add_entry_async(b"first")
    gate = fs.arm(errno.EIO)
    order: list[str] = []

    async def add(data: bytes) -> Position | BaseException:
        try:
            return await ml.add_entry_async(data)
        except ManagedLedgerError as exc:
            return exc
        finally:
            order.append(data.decode())

    held = asyncio.ensure_future(add(b"held"))
    await asyncio.to_thread(gate.entered.wait, TIMEOUT)
    syncs = fs.syncs
    later = asyncio.ensure_future(add(b"later"))
    # The later round's own sync succeeds (and makes both records durable in this file system).
    await eventually(lambda: fs.syncs > syncs, "the later round's sync")
    gate.release.set()
    results = await asyncio.wait_for(asyncio.gather(held, later), TIMEOUT)
    assert all(isinstance(r, ManagedLedgerError) for r in results)
    assert order == ["held", "later"]
    # (Not `is_fenced`: the ledger fences, then recovers by itself at once, rolling to a new segment.)
    assert ml.last_confirmed_entry == first
    await factory.close()  # recovers: the segment is cut back to what was confirmed

    fs.power_cut()
    fs.reboot()
    factory = factory_on(fs)
    ml = await factory.open("t")
    cursor = await ml.open_cursor("check", InitialPosition.EARLIEST)
    entries = await cursor.read_entries_async(10)
    assert [e.data for e in entries] == [b"first"]
    await factory.close()


class _WhereSynced(CrashFileSystem):
    """CrashFileSystem that records the thread of each segment sync; ``slow_next`` makes the next one take that
    many seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.slow_next = 0.0

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        inner = super().open_append(path, create=create, direct=direct)
        return _RecordingHandle(self, inner) if path.endswith(".seg") else inner


class _RecordingHandle:
    def __init__(self, fs: _WhereSynced, inner: FileHandle) -> None:
        self._fs = fs
        self._inner = inner

    def sync(self) -> None:
        self._syncing()
        self._inner.sync()

    def pwrite_parts(self, parts: Any, offset: int, *, sync: bool = False) -> None:
        if sync:  # (a write that syncs itself: see "Writes that sync" in managed_ledger/writer.py)
            self._syncing()
        self._inner.pwrite_parts(parts, offset, sync=sync)

    def _syncing(self) -> None:
        delay, self._fs.slow_next = self._fs.slow_next, 0.0
        if delay:
            threading.Event().wait(delay)
        self._fs.threads.append(threading.current_thread().name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_grouped_stream_is_synced_on_the_writer_while_syncs_are_quicker_than_the_group_wait() -> None:
    """A batch that makes the writer gather the next one (group_min_bytes) is synced on the writer thread itself
    when the last sync took less than the group wait (the writer waits that long anyway: no sync thread is woken);
    after a slower sync, or for a light batch, the sync goes to the sync threads (pipelined) as before."""
    fs = _WhereSynced()
    fs.makedirs_durable("/data")
    factory = FileManagedLedgerFactory(ROOT, clock=FakeClock(), fs=fs, fault_retry_interval_s=0, group_wait_s=0.05,
                                       group_min_bytes=4096)
    ml = await factory.open("t")
    await ml.add_entry_async(b"warm-up")  # (the first add also syncs the new topic's names: a round of its own)
    fs.threads.clear()
    heavy = b"h" * 5000
    await ml.add_entry_async(heavy)  # quick sync: on the writer
    fs.slow_next = 0.2  # longer than the group wait: the next sync after it goes to a sync thread
    await ml.add_entry_async(heavy)
    await ml.add_entry_async(heavy)  # (its sync was quick again: the next is the writer's)
    await ml.add_entry_async(heavy)
    await ml.add_entry_async(b"light")  # a light batch ends the grouping: pipelined
    where = ["writer" if name == "ml-writer" else "sync" if name.startswith("ml-sync") else name
             for name in fs.threads]
    assert where == ["writer", "writer", "sync", "writer", "sync"]
    await factory.close()


class _HeldCreation(CrashFileSystem):
    """CrashFileSystem whose next segment creation waits for ``release`` and then fails with EIO."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.armed = False

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        if create and self.armed and path.endswith(".seg"):
            self.armed = False
            self.entered.set()
            self.release.wait(TIMEOUT)
            raise OSError(errno.EIO, "held creation failed", path)
        return super().open_append(path, create=create, direct=direct)


async def test_an_open_cancelled_while_its_segment_is_made_still_closes_the_ledger_when_that_fails(
        monkeypatch: Any) -> None:
    """A new managed ledger's open awaits its directory's and segment's outcomes in its own task; that task
    cancelled meanwhile, a segment that then cannot be made still closes the ledger (and frees its writer
    state), and the next open of the name works."""
    import managed_ledger.file as file_module

    made: list[Any] = []
    real = file_module.FileManagedLedger

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(file_module, "FileManagedLedger", recording)
    fs = _HeldCreation()
    factory = factory_on(fs)
    fs.armed = True
    opening = asyncio.ensure_future(factory.open("t"))
    await asyncio.get_running_loop().run_in_executor(None, fs.entered.wait, TIMEOUT)
    factory._opening.cancel()  # (the open's own work, not only a waiter: as its owner does on close)
    await asyncio.wait([opening], timeout=TIMEOUT)
    assert opening.cancelled()
    fs.release.set()
    await eventually(lambda: made[0].is_closed, "the cancelled open's ledger closed")
    ml = await factory.open("t")
    assert ml is not made[0]
    assert await ml.add_entry_async(b"x") == Position(ml.last_confirmed_entry.ledger_id, 0)
    await factory.close()


class _CountingHandle:
    def __init__(self, inner: FileHandle, path: str, writes: dict[str, int]) -> None:
        self._inner = inner
        self._path = path
        self._writes = writes

    def pwrite_parts(self, parts: Any, offset: int, *, sync: bool = False) -> None:
        self._writes[self._path] = self._writes.get(self._path, 0) + 1
        self._inner.pwrite_parts(parts, offset, sync=sync)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class WriteCountingFileSystem(CrashFileSystem):
    """CrashFileSystem that counts the writes to each segment."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, int] = {}

    def open_append(self, path: str, *, create: bool, direct: bool = False) -> FileHandle:
        return _CountingHandle(super().open_append(path, create=create, direct=direct), path, self.writes)


async def test_appends_to_several_segments_that_arrive_interleaved_are_one_write_per_segment() -> None:
    # Several producers (one client's, on one connection) submit their adds interleaved: a b a b.
    fs = WriteCountingFileSystem()
    factory = factory_on(fs)
    a, b = await factory.open("a"), await factory.open("b")
    await a.add_entry_async(b"a0")
    await b.add_entry_async(b"b0")
    busy, release = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        release.wait(TIMEOUT)

    factory.writer.run(hold)  # the writer is busy: the adds below queue up and make one batch
    await asyncio.to_thread(busy.wait, TIMEOUT)
    before = dict(fs.writes)
    adds = [asyncio.ensure_future(ml.add_entry_async(f"{name}{i}".encode()))
            for i in (1, 2, 3) for name, ml in (("a", a), ("b", b))]
    await asyncio.sleep(0)  # every add is queued now, while the writer is held (not racing it once released)
    release.set()
    positions = await asyncio.wait_for(asyncio.gather(*adds), TIMEOUT)
    assert [p.entry_id for p in positions] == [1, 1, 2, 2, 3, 3]
    assert {path.rsplit("/", 2)[-2]: n - before[path] for path, n in fs.writes.items()} == {"a": 1, "b": 1}
    await factory.close()
    factory = factory_on(fs)  # (what the segments hold, read back from the file system)
    for name in ("a", "b"):
        ml = await factory.open(name)
        assert [e.data for e in await read_all(ml)] == [f"{name}{i}".encode() for i in range(4)]
    await factory.close()
