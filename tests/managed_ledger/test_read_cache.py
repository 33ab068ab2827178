"""The file ledger's read cache: LRU by bytes, runs of fresh entries, lazy dropping of owners."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from managed_ledger.position import Position
from managed_ledger.read_cache import ENTRY_OVERHEAD, ReadCache


def check(cache: ReadCache) -> None:
    held = list(cache._entries.items())
    assert cache.size == sum(len(d) + ENTRY_OVERHEAD for _, d in held)
    assert cache.size <= cache.max_bytes
    assert sum(cache._count.values()) == len(held)
    for owner, n in cache._count.items():
        assert n == sum(1 for (o, _, _), _ in held if o == owner) > 0
    assert cache.dead_entries == sum(1 for (o, _, _), _ in held if o in cache._dead)
    for key, _ in held:  # every entry can still be found by evict_before
        assert key in cache._order[key[0]]
    for owner, order in cache._order.items():
        assert owner in cache._count and len(order) <= 2 * cache._count[owner] + 64 + 6


def test_least_recently_used_goes_first() -> None:
    cache = ReadCache(3 * (10 + ENTRY_OVERHEAD))
    cache.put_run(1, Position(5, 0), [b"a" * 10, b"b" * 10, b"c" * 10])
    assert cache.get(1, Position(5, 0)) is not None  # now the most recently used
    cache.put(1, Position(5, 3), b"d" * 10)
    assert cache.get(1, Position(5, 1)) is None  # the oldest untouched one left
    assert [cache.get(1, Position(5, i)) is not None for i in (0, 2, 3)] == [True, True, True]
    assert cache.evictions == 1
    check(cache)


def test_entries_every_reader_passed_leave_first() -> None:
    cache = ReadCache(1 << 20)
    cache.put_run(1, Position(3, 0), [b"x"] * 5)
    cache.put_run(1, Position(4, 0), [b"y"] * 5)
    cache.put_run(2, Position(3, 0), [b"z"] * 5)
    cache.evict_before(1, 4, 2)
    assert [p for p in [(3, i) for i in range(5)] + [(4, i) for i in range(5)]
            if cache.get(1, Position(*p)) is not None] == [(4, 2), (4, 3), (4, 4)]
    assert len(cache) == 8  # owner 2 untouched
    cache.evict_before(1, 9, 0)
    assert len(cache) == 5 and 1 not in cache._order
    check(cache)


def test_dropped_owner_is_swept_once_dead_entries_are_half() -> None:
    cache = ReadCache(1 << 20)
    for owner in range(4):
        cache.put_run(owner, Position(1, 0), [b"x"] * 10)
    cache.drop_owner(0)
    assert cache.dead_entries == 10 and len(cache) == 40  # lazily: nothing scanned yet
    check(cache)
    cache.drop_owner(1)  # 20 of 40 dead: one sweep takes them all
    assert cache.dead_entries == 0 and len(cache) == 20
    assert cache.get(2, Position(1, 0)) is not None
    check(cache)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["run", "put", "get", "drop", "evict"]), st.integers(0, 5),
                          st.integers(0, 30), st.integers(1, 6)), max_size=60))
def test_accounting_holds_under_any_sequence(ops: list[tuple[str, int, int, int]]) -> None:
    cache = ReadCache(12 * (20 + ENTRY_OVERHEAD))
    next_entry: dict[int, int] = {}
    current = {k: k for k in range(6)}  # slot -> owner id; a dropped owner's slot gets a new id
    fresh = 6
    for op, slot, arg, n in ops:
        owner = current[slot]
        if op == "run":
            first = next_entry.get(owner, 0)
            cache.put_run(owner, Position(1, first), [bytes([arg]) * (arg % 20 + 1)] * n)
            next_entry[owner] = first + n
        elif op == "put":
            cache.put(owner, Position(2, arg), b"p" * (arg % 20))
        elif op == "get":
            entry = cache.get(owner, Position(1, arg))
            assert entry is None or entry.position == Position(1, arg)
        elif op == "evict":
            # Only entries before the boundary leave (all of them when they came in position
            # order, as adds do; one added out of order may wait for LRU eviction).
            kept = {k for k in cache._entries if k[0] == owner and k[1:] >= (1, arg)}
            cache.evict_before(owner, 1, arg)
            assert kept <= set(cache._entries)
        else:
            cache.drop_owner(owner)
            current[slot] = fresh  # owner ids are never reused after a drop
            fresh += 1
        check(cache)
