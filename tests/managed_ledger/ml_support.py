"""Shared by the managed-ledger tests: the implementations under test and a fake clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from managed_ledger import ManagedLedgerFactory, MemoryManagedLedgerFactory
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
