"""Shared by the managed-ledger tests: the implementations under test and a fake clock."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from managed_ledger import Entry, ManagedLedger, ManagedLedgerFactory, MemoryManagedLedgerFactory, Position
from managed_ledger.api import ManagedCursor
from managed_ledger.bookkeeper.client import BookKeeper
from managed_ledger.bookkeeper.factory import BookKeeperManagedLedgerFactory
from managed_ledger.file import FileManagedLedgerFactory


class FakeClock:
    """A settable clock (seconds) for rollover and retention tests."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


FactoryBuilder = Callable[[Path, FakeClock], ManagedLedgerFactory]

# Every implementation runs the whole contract suite. One line each: the test id and how to
# build a factory that stores under a fresh directory.
IMPLEMENTATIONS: dict[str, FactoryBuilder] = {
    "memory": lambda tmp_path, clock: MemoryManagedLedgerFactory(clock=clock),
    # Real files, fsync on (the production setting).
    "file": lambda tmp_path, clock: FileManagedLedgerFactory(str(tmp_path / "ledgers"), clock=clock),
}

# The BookKeeper implementation needs a running cluster (conftest's ml_bk_cluster), so it is built apart.
BOOKKEEPER = "bookkeeper"


def bookkeeper_factory(zk_address: str, clock: Callable[[], float] = time.time, root: str | None = None,
                       cursor_persist_interval_s: float = 1.0) -> BookKeeperManagedLedgerFactory:
    """A factory on the cluster at zk_address, under its own root znode (a fresh one by default), E/Qw/Qa 3/2/2."""
    return BookKeeperManagedLedgerFactory(
        BookKeeper(zk_address), f"zk:{zk_address}", root=root or f"/ml-tests/{uuid.uuid4().hex}/managed-ledgers",
        ensemble_size=3, write_quorum=2, ack_quorum=2, clock=clock, cursor_persist_interval_s=cursor_persist_interval_s)


class TailReads:
    """Cursors with a read parked at the tail (``read_entries_or_wait``), then adds: what each read got, and how
    many reads had completed when each add's confirmation ran (the wake-once-per-turn tests of each ledger)."""

    def __init__(self, cursors: list[ManagedCursor]) -> None:
        self.reads: list[list[list[Position]]] = [[] for _ in cursors]
        self.confirmed: list[Position] = []
        self.wakes_seen: list[int] = []
        for cursor, got in zip(cursors, self.reads, strict=True):
            cursor.read_entries_or_wait(100, self._reader(got))

    @staticmethod
    def _reader(got: list[list[Position]]) -> Callable[[list[Entry], BaseException | None], None]:
        return lambda entries, exc: got.append([e.position for e in entries])

    def add(self, ml: ManagedLedger, count: int) -> None:
        for i in range(count):
            ml.add_entry(b"e%d" % i, self._added)

    def _added(self, position: Position | None, exc: BaseException | None) -> None:
        assert exc is None and position is not None
        self.confirmed.append(position)
        self.wakes_seen.append(sum(map(len, self.reads)))

    def all_read(self) -> bool:
        return all(self.reads)

    def check_one_read_each_after_the_receipts(self, count: int) -> None:
        assert len(self.confirmed) == count and self.wakes_seen == [0] * count  # the receipts first, then the reads
        assert self.reads == [[self.confirmed]] * len(self.reads)  # one read each, of all the adds


async def chain_inline_reads(cursor: ManagedCursor, total: int, per_read: int,
                             depth: Callable[[], int]) -> tuple[list[Position], dict[str, list[int]]]:
    """Read ``total`` entries with ``cursor`` as a reader that takes cached reads at once (``inline``) and issues
    the next read from either callback: the positions seen, in order, and the nesting ``depth()`` at each inline
    completion and each callback."""
    seen: list[Position] = []
    depths: dict[str, list[int]] = {"inline": [], "callback": []}
    done = asyncio.Event()

    def next_read() -> None:
        if len(seen) == total:
            done.set()
        else:
            cursor.read_entries_or_wait(per_read, on_read, None, on_inline)

    def on_inline(entries: list[Entry]) -> None:
        depths["inline"].append(depth())
        seen.extend(e.position for e in entries)
        next_read()

    def on_read(entries: list[Entry], exc: BaseException | None) -> None:
        assert exc is None
        depths["callback"].append(depth())
        seen.extend(e.position for e in entries)
        next_read()

    next_read()
    await asyncio.wait_for(done.wait(), 30.0)
    return seen, depths
