"""PositionRangeSet: examples, Pulsar's string format, and a model-based hypothesis test."""

from __future__ import annotations

from itertools import groupby

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from managed_ledger import Position, PositionRangeSet


def P(ledger: int, entry: int) -> Position:
    return Position(ledger, entry)


def test_empty() -> None:
    s = PositionRangeSet()
    assert len(s) == 0
    assert s.is_empty()
    assert s.first_range() is None
    assert list(s) == []
    assert s.to_pulsar_string() == "[]"
    assert not s.contains(P(1, 0))


def test_add_merges_adjacent_and_overlapping() -> None:
    s = PositionRangeSet()
    assert s.add(P(3, 5))
    assert s.add(P(3, 7))
    assert not s.add(P(3, 5))  # already there
    assert list(s) == [(P(3, 5), P(3, 5)), (P(3, 7), P(3, 7))]
    assert s.add(P(3, 6))  # bridges both
    assert list(s) == [(P(3, 5), P(3, 7))]
    assert s.add_range(3, 1, 9) == 6  # covers 1..9, 3 of them were present
    assert list(s) == [(P(3, 1), P(3, 9))]
    assert len(s) == 9
    assert s.range_count() == 1


def test_ranges_do_not_cross_ledgers() -> None:
    s = PositionRangeSet()
    s.add_range(3, 0, 4)
    s.add_range(4, 0, 2)
    assert list(s) == [(P(3, 0), P(3, 4)), (P(4, 0), P(4, 2))]
    assert s.first_range() == (P(3, 0), P(3, 4))
    assert s.range_containing(P(4, 1)) == (P(4, 0), P(4, 2))
    assert s.range_containing(P(4, 3)) is None


def test_pulsar_string_format() -> None:
    # Pulsar prints each run first..last of ledger L as "(L:first-1..L:last]" (Guava openClosed).
    s = PositionRangeSet()
    for e in (5, 6, 7, 9):
        s.add(P(3, e))
    s.add(P(4, 0))
    assert s.to_pulsar_string() == "[(3:4..3:7],(3:8..3:9],(4:-1..4:0]]"
    # Pulsar's own test: addOpenClosed(0, 0, 0, 1) etc. -> "[(0:0..0:1],(1:0..1:1],...]"
    t = PositionRangeSet()
    for ledger in range(4):
        t.add(P(ledger, 1))
    assert t.to_pulsar_string() == "[(0:0..0:1],(1:0..1:1],(2:0..2:1],(3:0..3:1]]"


def test_remove_up_to() -> None:
    s = PositionRangeSet()
    s.add_range(1, 0, 9)
    s.add_range(2, 3, 5)
    s.add_range(2, 8, 8)
    s.add_range(3, 0, 0)
    s.remove_up_to(P(2, 4))
    assert list(s) == [(P(2, 5), P(2, 5)), (P(2, 8), P(2, 8)), (P(3, 0), P(3, 0))]
    assert len(s) == 3
    s.remove_up_to(P(2, 99))
    assert list(s) == [(P(3, 0), P(3, 0))]
    s.remove_up_to(P(9, -1))
    assert s.is_empty() and len(s) == 0


def test_count_between() -> None:
    s = PositionRangeSet()
    s.add_range(1, 2, 6)
    s.add_range(2, 0, 3)
    s.add_range(4, 10, 12)
    assert s.count_between(P(1, 0), P(9, 0)) == 12
    assert s.count_between(P(1, 4), P(2, 1)) == 5
    assert s.count_between(P(2, 2), P(4, 10)) == 3
    assert s.count_between(P(3, 0), P(3, 99)) == 0
    assert s.count_between(P(2, 0), P(1, 0)) == 0


def test_invalid_range_rejected() -> None:
    s = PositionRangeSet()
    with pytest.raises(ValueError):
        s.add(P(1, -1))
    with pytest.raises(ValueError):
        s.add_range(1, 5, 4)


def test_copy_and_equality() -> None:
    s = PositionRangeSet()
    s.add_range(1, 0, 3)
    c = s.copy()
    assert c == s
    c.add(P(1, 9))
    assert c != s


# -- model-based -----------------------------------------------------------------------------

LEDGERS = st.integers(min_value=0, max_value=3)
ENTRIES = st.integers(min_value=0, max_value=40)

op = st.one_of(
    st.tuples(st.just("add"), LEDGERS, ENTRIES),
    st.tuples(st.just("add_range"), LEDGERS, ENTRIES, st.integers(min_value=0, max_value=12)),
    st.tuples(st.just("remove_up_to"), LEDGERS, st.integers(min_value=-1, max_value=40)),
)


def model_ranges(model: set[Position]) -> list[tuple[Position, Position]]:
    runs: list[tuple[Position, Position]] = []
    ordered = sorted(model)
    # Group consecutive entry ids of the same ledger: entry - index is constant within a run.
    for _, group in groupby(enumerate(ordered), key=lambda t: (t[1].ledger_id, t[1].entry_id - t[0])):
        members = [p for _, p in group]
        runs.append((members[0], members[-1]))
    return runs


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op, max_size=60), probes=st.lists(st.tuples(LEDGERS, ENTRIES, LEDGERS, ENTRIES), max_size=8))
def test_matches_plain_set_model(
    ops: list[tuple[object, ...]], probes: list[tuple[int, int, int, int]]
) -> None:
    s = PositionRangeSet()
    model: set[Position] = set()
    for o in ops:
        if o[0] == "add":
            _, ledger, entry = o
            assert isinstance(ledger, int) and isinstance(entry, int)
            p = P(ledger, entry)
            assert s.add(p) == (p not in model)
            model.add(p)
        elif o[0] == "add_range":
            _, ledger, first, span = o
            assert isinstance(ledger, int) and isinstance(first, int) and isinstance(span, int)
            new = {P(ledger, e) for e in range(first, first + span + 1)}
            assert s.add_range(ledger, first, first + span) == len(new - model)
            model |= new
        else:
            _, ledger, entry = o
            assert isinstance(ledger, int) and isinstance(entry, int)
            cut = P(ledger, entry)
            s.remove_up_to(cut)
            model = {p for p in model if p > cut}
        assert len(s) == len(model)
        assert s.is_empty() == (not model)

    expected = model_ranges(model)
    assert list(s) == expected
    assert s.range_count() == len(expected)
    assert s.first_range() == (expected[0] if expected else None)
    for ledger in range(4):
        for entry in range(-1, 55):
            p = P(ledger, entry)
            assert s.contains(p) == (p in model)
            rng = s.range_containing(p)
            assert (rng is not None) == (p in model)
            if rng is not None:
                assert rng in expected and rng[0] <= p <= rng[1]
    for a_l, a_e, b_l, b_e in probes:
        a, b = P(a_l, a_e), P(b_l, b_e)
        assert s.count_between(a, b) == sum(1 for p in model if a <= p <= b)
    expected_string = "[" + ",".join(f"({f.ledger_id}:{f.entry_id - 1}..{last}]" for f, last in expected) + "]"
    assert s.to_pulsar_string() == expected_string
