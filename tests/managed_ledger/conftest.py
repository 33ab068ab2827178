"""Fixtures of the managed-ledger contract suite: every implementation runs every test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from managed_ledger import ManagedLedgerFactory
from tests.managed_ledger.ml_support import IMPLEMENTATIONS, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
async def factory(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[ManagedLedgerFactory]:
    built = IMPLEMENTATIONS[request.param](tmp_path, clock)
    yield built
    await built.close()
