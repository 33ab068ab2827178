"""Inline completion: bounded stack depth, no RecursionError, order kept (every implementation)."""

from __future__ import annotations

import asyncio
import itertools

from managed_ledger import (
    Entry,
    InitialPosition,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    MemoryManagedLedgerFactory,
    Position,
)
from managed_ledger.completion import NestingCounter, OrderedCompleter
from tests.managed_ledger.ml_support import chain_inline_reads

TIMEOUT = 30.0
CHAIN = 100_000


async def test_chained_cached_reads_stay_within_the_nesting_limit(factory: ManagedLedgerFactory) -> None:
    """A reader whose callback issues the next read: 100,000 reads, never deeper than the limit."""
    config = ManagedLedgerConfig(max_entries_per_ledger=7_000, min_ledger_rollover_time_s=0,
                                 retention_time_s=-1, retention_size_bytes=-1)
    ml = await factory.open("chain", config)
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    confirmed = asyncio.Event()
    added = 0

    def on_added(position: Position | None, exc: BaseException | None) -> None:
        nonlocal added
        assert exc is None and position is not None
        added += 1
        if added == CHAIN:
            confirmed.set()

    for i in range(CHAIN):
        ml.add_entry(i.to_bytes(4, "big"), on_added)
    assert ml.number_of_entries == CHAIN
    # Entries are readable once their add is confirmed (the file ledger confirms after fsync).
    await asyncio.wait_for(confirmed.wait(), TIMEOUT)

    seen: list[Position] = []
    depths: list[int] = []
    done = asyncio.Event()
    failures: list[BaseException] = []

    def on_read(entries: list[Entry], exc: BaseException | None) -> None:
        depths.append(factory.nesting.depth)
        if exc is not None:
            failures.append(exc)
            done.set()
            return
        if not entries:
            done.set()
            return
        seen.extend(e.position for e in entries)
        cursor.read_entries(1, on_read)

    cursor.read_entries(1, on_read)
    await asyncio.wait_for(done.wait(), TIMEOUT)

    assert failures == []
    assert len(seen) == CHAIN
    assert all(a < b for a, b in itertools.pairwise(seen))  # in order, no duplicates
    assert int.from_bytes((await ml.read_entry(seen[-1])).data, "big") == CHAIN - 1
    limit = config.read_nesting_limit
    assert max(depths) <= limit
    assert min(depths) >= 1
    assert max(depths) == limit  # it did complete inline, up to the limit
    assert factory.nesting.depth == 0


async def test_chained_inline_reads_stay_within_the_nesting_limit(factory: ManagedLedgerFactory) -> None:
    """A reader that takes cached reads at once (``inline``) and issues the next read from either callback:
    the inline completions count in the nesting depth as any other, so the chain is posted at the limit
    (then completes through the callback) and never recurses past it; order kept."""
    ml = await factory.open("inline")
    cursor = await ml.open_cursor("c", InitialPosition.EARLIEST)
    total = 5_000
    confirmed = asyncio.Event()
    added = 0

    def on_added(position: Position | None, exc: BaseException | None) -> None:
        nonlocal added
        assert exc is None
        added += 1
        if added == total:
            confirmed.set()

    for i in range(total):
        ml.add_entry(i.to_bytes(4, "big"), on_added)
    await asyncio.wait_for(confirmed.wait(), TIMEOUT)

    seen, depths = await chain_inline_reads(cursor, total, 2, lambda: factory.nesting.depth)
    assert len(seen) == total and all(a < b for a, b in itertools.pairwise(seen))
    limit = ml.config.read_nesting_limit
    assert depths["inline"] and max(depths["inline"]) == limit  # taken at once, up to the limit
    assert depths["callback"] and max(depths["callback"]) <= limit  # then posted: the stack unwound
    assert factory.nesting.depth == 0


async def test_chained_adds_keep_order_within_the_nesting_limit(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("adds")
    # The file ledger completes each add after its own fsync, and this chain has one add in flight
    # at a time: 20,000 would time the disk (minutes under load), not check the order. Its
    # completions come from the writer thread, so a few thousand cover its posting path.
    count = 20_000 if isinstance(factory, MemoryManagedLedgerFactory) else 2_000
    results: list[Position] = []
    depths: list[int] = []
    done = asyncio.Event()

    def on_added(position: Position | None, exc: BaseException | None) -> None:
        assert exc is None and position is not None
        depths.append(factory.nesting.depth)
        results.append(position)
        if len(results) == count:
            done.set()
        else:
            ml.add_entry(b"x", on_added)

    ml.add_entry(b"x", on_added)
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert results == sorted(results) and len(set(results)) == count
    assert max(depths) <= ml.config.read_nesting_limit


async def test_parked_read_woken_by_add_obeys_the_limit(factory: ManagedLedgerFactory) -> None:
    """A consumer that re-parks from its callback while a producer adds from its own callback."""
    ml = await factory.open("wake")
    cursor = await ml.open_cursor("c")
    total = 5_000
    got: list[Position] = []
    depths: list[int] = []
    done = asyncio.Event()

    def on_read(entries: list[Entry], exc: BaseException | None) -> None:
        assert exc is None
        depths.append(factory.nesting.depth)
        got.extend(e.position for e in entries)
        if len(got) >= total:
            done.set()
        else:
            cursor.read_entries_or_wait(10, on_read)

    added = 0

    def on_added(position: Position | None, exc: BaseException | None) -> None:
        nonlocal added
        added += 1
        if added < total:
            ml.add_entry(b"y", on_added)

    cursor.read_entries_or_wait(10, on_read)
    ml.add_entry(b"y", on_added)
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert len(got) == total and got == sorted(got)
    assert max(depths) <= ml.config.read_nesting_limit


async def test_posted_completion_is_not_overtaken() -> None:
    """Once a completion of a domain is posted, later ones queue behind it even on a shallow stack."""
    counter = NestingCounter()
    completer = OrderedCompleter(counter, limit=2)
    order: list[str] = []
    counter.depth = 2  # pretend we are already deep in the stack
    completer.complete(lambda: order.append("first (posted)"))
    counter.depth = 0
    completer.complete(lambda: order.append("second"))
    assert order == [] and completer.pending == 2
    ran = asyncio.Event()
    asyncio.get_running_loop().call_soon(ran.set)
    await asyncio.wait_for(ran.wait(), TIMEOUT)
    assert order == ["first (posted)", "second"]
    assert completer.pending == 0
    completer.complete(lambda: order.append("inline again"))
    assert order[-1] == "inline again"


async def test_raising_callback_is_reported_not_propagated() -> None:
    counter = NestingCounter()
    completer = OrderedCompleter(counter, limit=10)
    reported: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context.get("exception")))
    try:
        def boom() -> None:
            raise RuntimeError("callback bug")

        completer.complete(boom)  # does not raise into the caller
    finally:
        loop.set_exception_handler(None)
    assert len(reported) == 1 and isinstance(reported[0], RuntimeError)
    assert counter.depth == 0
