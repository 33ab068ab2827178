"""Fixtures of the managed-ledger contract suite: every implementation runs every test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from ml_fakes import FakeClock

from managed_ledger import ManagedLedgerFactory, MemoryManagedLedgerFactory

FactoryBuilder = Callable[[Path, FakeClock], ManagedLedgerFactory]

# One line per implementation: the id and how to build a factory in a fresh directory.
IMPLEMENTATIONS: dict[str, FactoryBuilder] = {
    "memory": lambda tmp_path, clock: MemoryManagedLedgerFactory(clock=clock),
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
async def factory(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> AsyncIterator[
    ManagedLedgerFactory
]:
    built = IMPLEMENTATIONS[request.param](tmp_path, clock)
    yield built
    await built.close()
