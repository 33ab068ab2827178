"""Peek and examine-message find the n-th entry ledger by ledger: a role that may consume can ask for the
n-millionth entry of a long backlog, and stepping entry by entry would hold the event loop for seconds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace

import pytest

from broker.service import admin_ops
from managed_ledger import ManagedLedger, ManagedLedgerConfig, Position
from managed_ledger.memory import MemoryManagedLedgerFactory

ENTRIES = 2_000
PER_LEDGER = 300  # (several ledgers, the last one partly filled)


@pytest.fixture
async def ledger() -> AsyncIterator[ManagedLedger]:
    factory = MemoryManagedLedgerFactory()
    ml = await factory.open("t", ManagedLedgerConfig(max_entries_per_ledger=PER_LEDGER, min_ledger_rollover_time_s=0,
                                                     retention_time_s=-1, retention_size_bytes=-1))
    for i in range(ENTRIES):
        await ml.add_entry_async(f"m{i}".encode())
    yield ml
    await factory.close()


def count_steps(ml: ManagedLedger, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times position stepping (next / previous) is called from now on."""
    steps = [0]
    for method in ("next_valid_position", "previous_position"):
        original: Callable[[Position], Position] = getattr(ml, method)

        def counted(position: Position, original: Callable[[Position], Position] = original) -> Position:
            steps[0] += 1
            return original(position)
        monkeypatch.setattr(ml, method, counted)
    return steps


async def test_peek_does_not_step_through_the_backlog(ledger: ManagedLedger, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = SimpleNamespace(ledger=ledger)
    sub = SimpleNamespace(cursor=SimpleNamespace(mark_delete_position=ledger.previous_position(ledger.first_position)))
    steps = count_steps(ledger, monkeypatch)
    for n in (1, 2, PER_LEDGER, PER_LEDGER + 1, ENTRIES):
        entry = await admin_ops.peek(topic, sub, n)  # type: ignore[arg-type]
        assert entry.data == f"m{n - 1}".encode()
    assert steps[0] <= 5  # (one step from the mark-delete position per peek)
    with pytest.raises(admin_ops.EntryNotFoundError):
        await admin_ops.peek(topic, sub, ENTRIES + 1)  # type: ignore[arg-type]


async def test_examine_does_not_step_through_the_log(ledger: ManagedLedger, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = SimpleNamespace(ledger=ledger)
    steps = count_steps(ledger, monkeypatch)
    for n in (1, PER_LEDGER + 7, ENTRIES // 2, ENTRIES, ENTRIES * 10):
        earliest = await admin_ops.examine(topic, False, n)  # type: ignore[arg-type]
        latest = await admin_ops.examine(topic, True, n)  # type: ignore[arg-type]
        clamped = min(n, ENTRIES)
        assert earliest.data == f"m{clamped - 1}".encode()
        assert latest.data == f"m{ENTRIES - clamped}".encode()
    assert steps[0] == 0
