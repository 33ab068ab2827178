"""A durable cursor against a plain model (a set of acknowledged entry indexes), with hypothesis.

Ledgers hold 3 entries, so most operations cross ledger boundaries. Each example runs on a
fresh factory of every implementation.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, ManagedLedgerConfig, Position
from tests.managed_ledger.ml_support import IMPLEMENTATIONS, FakeClock

INDEX = st.integers(min_value=0, max_value=30)
OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("ack"), st.lists(INDEX, max_size=4)),
    st.tuples(st.just("mark_delete"), INDEX),
    st.tuples(st.just("skip"), st.integers(min_value=0, max_value=5)),
    st.tuples(st.just("read"), st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("rewind"),),
    st.tuples(st.just("reset"), INDEX),
)


class Model:
    """Entries are 0..n-1; a cursor is the acked set plus a read index."""

    def __init__(self) -> None:
        self.n = 0
        self.acked: set[int] = set()
        self.read = 0

    @property
    def mark_delete(self) -> int:  # highest index with everything up to it acked, or -1
        i = -1
        while i + 1 in self.acked:
            i += 1
        return i

    def unacked_from(self, start: int) -> list[int]:
        return [i for i in range(start, self.n) if i not in self.acked]

    def settle_read(self) -> None:
        self.read = max(self.read, self.mark_delete + 1)


async def run(ops: list[tuple[object, ...]], retention: int, impl: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        factory = IMPLEMENTATIONS[impl](Path(tmp), FakeClock())
        config = ManagedLedgerConfig(max_entries_per_ledger=3, min_ledger_rollover_time_s=0,
                                     retention_time_s=retention, retention_size_bytes=retention)
        ml = await factory.open("model", config)
        cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
        model = Model()
        ps: list[Position] = []
        for op in ops:
            await apply(op, ml, cursor, model, ps)
            check(ml, cursor, model, ps)
        await factory.close()


async def apply(op: tuple[object, ...], ml: ManagedLedger, cursor: ManagedCursor, model: Model,
                ps: list[Position]) -> None:
    kind = op[0]
    if kind == "add":
        assert isinstance(op[1], int)
        for _ in range(op[1]):
            ps.append(await ml.add_entry_async(str(len(ps)).encode()))
        model.n = len(ps)
    elif kind == "ack":
        assert isinstance(op[1], list)
        wanted = [i for i in op[1] if i < model.n]
        cursor.delete([ps[i] for i in wanted])
        model.acked |= set(wanted)
        model.settle_read()
    elif kind == "mark_delete":
        assert isinstance(op[1], int)
        if op[1] < model.n:
            cursor.mark_delete(ps[op[1]])
            if op[1] > model.mark_delete:
                model.acked |= set(range(op[1] + 1))
            model.settle_read()
    elif kind == "skip":
        assert isinstance(op[1], int)
        cursor.skip_entries(op[1])
        skipped = model.unacked_from(model.mark_delete + 1)[: op[1]]
        if skipped:
            model.acked |= set(range(skipped[-1] + 1))
        model.settle_read()
    elif kind == "read":
        assert isinstance(op[1], int)
        got = await cursor.read_entries_async(op[1])
        expected = model.unacked_from(model.read)[: op[1]]
        assert [int(e.data) for e in got] == expected
        assert [e.position for e in got] == [ps[i] for i in expected]
        model.read = expected[-1] + 1 if len(expected) == op[1] else model.n
    elif kind == "rewind":
        cursor.rewind()
        model.read = model.mark_delete + 1
    elif kind == "reset":
        assert isinstance(op[1], int)
        # reset clamps into the stored range: with trimming the first entries may be gone
        first_stored = sum(1 for p in ps if p < ml.first_position)
        target = max(min(op[1], model.n), first_stored)
        cursor.reset(ps[target] if target < model.n else ml.next_valid_position(ml.last_confirmed_entry))
        model.acked = set(range(target))
        model.read = target


def check(ml: ManagedLedger, cursor: ManagedCursor, model: Model, ps: list[Position]) -> None:
    md = model.mark_delete
    if md >= 0:
        assert cursor.mark_delete_position >= ps[md]
        # absorbed acks, or moved to (next ledger, -1) by trimming: nothing unacked in between
        assert ml.next_valid_position(cursor.mark_delete_position) == (
            ps[md + 1] if md + 1 < model.n else ml.next_valid_position(ml.last_confirmed_entry)
        )
    else:
        assert ml.next_valid_position(cursor.mark_delete_position) == (ps[0] if ps else ml.first_position)
    beyond = sorted(i for i in model.acked if i > md)
    assert len(cursor.individually_deleted) == len(beyond)
    assert all(cursor.individually_deleted.contains(ps[i]) for i in beyond)
    assert cursor.number_of_entries_in_backlog() == model.n - len(model.acked)
    for i in range(model.n):
        assert cursor.is_acked(ps[i]) == (i in model.acked)
    assert cursor.read_position > cursor.mark_delete_position
    assert cursor.number_of_entries_to_read() == len(model.unacked_from(model.read))
    # trimming never loses an unacknowledged entry
    unacked = model.unacked_from(0)
    if unacked:
        assert ml.first_position <= ps[unacked[0]]


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("retention", [0, -1], ids=["trim", "keep"])
@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, max_size=40))
def test_cursor_matches_model(impl: str, retention: int, ops: list[tuple[object, ...]]) -> None:
    asyncio.run(run(ops, retention, impl))
