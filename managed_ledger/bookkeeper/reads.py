"""Reading entries of a BookKeeper managed ledger: from the factory's read cache on the loop, else from the bookies.

Same order rules as the file ledger (``managed_ledger.file_reads``): a read whose entries are all cached completes
through the cursor's ``OrderedCompleter`` (inline up to the nesting limit); any miss *reserves* its place in that
order and reads the missing entries from the bookies in a task the reader owns, then fills the reservation on the
loop and caches what it read. Consecutive entries of one ledger are read in one run.

Ledger handles: the writers this managed ledger created (current and rolled-over ledgers: a writer reads up to its
last add confirmed), the ledger recovered on open, and, for older ledgers, readers opened without recovery (a closed
ledger's metadata says where it ends).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from functools import partial
from typing import cast

from managed_ledger.api import EntryNotFoundError, ManagedLedgerError, ReadCallback
from managed_ledger.bookkeeper.errors import BookKeeperError, NoSuchLedgerError
from managed_ledger.completion import OrderedCompleter
from managed_ledger.entry import Entry
from managed_ledger.position import Position
from managed_ledger.read_cache import ReadCache

# Reads whole runs of entries: (ledger id, first entry id, last entry id) -> payloads.
ReadRun = Callable[[int, int, int], Awaitable[list[bytes]]]


class BkEntryReader:
    """Entry fetching for one managed-ledger instance (loop-owned)."""

    def __init__(self, owner: int, cache: ReadCache, read_run: ReadRun) -> None:
        self._owner = owner  # cache key prefix: unique per managed-ledger instance
        self._cache = cache
        self._read_run = read_run
        self._tasks: set[asyncio.Task[None]] = set()
        self.cache_hits = 0
        self.cache_misses = 0
        self.last_read_ahead: Position | None = None  # (no read-ahead: the bookies do theirs)

    def remember(self, first: Position, data: list[bytes]) -> None:
        self._cache.put_run(self._owner, first, data)

    def evict_before(self, position: Position) -> None:
        self._cache.evict_before(self._owner, position[0], position[1])

    def cached(self, positions: list[Position]) -> list[Entry] | None:
        """The entries at positions when every one is cached (counted as ``fetch`` counts hits), else None."""
        hit = self._cache.get_all(self._owner, positions)
        if hit is None:
            return None
        self.cache_hits += len(hit[0])
        return hit[0]

    def fetch(self, positions: list[Position], completer: OrderedCompleter, callback: ReadCallback,
              on_fail: Callable[[], None] | None) -> bool:
        """Complete callback with the entries at positions (stored, ascending), in completer's order."""
        cache, owner = self._cache, self._owner
        found: list[Entry | None] = [cache.get(owner, p) for p in positions]
        missing = [i for i, e in enumerate(found) if e is None]
        self.cache_hits += len(positions) - len(missing)
        if not missing:
            completer.complete(partial(callback, cast("list[Entry]", found), None))
            return False
        self.cache_misses += len(missing)
        fill = completer.reserve()

        async def read() -> None:
            try:
                runs = await self._read_positions([positions[i] for i in missing])
            except asyncio.CancelledError:
                fill(partial(callback, [], ManagedLedgerError("read cancelled: the managed ledger closed")))
                raise
            except Exception as exc:  # a bookie or metadata failure: this read fails, nothing else
                if on_fail is not None:
                    on_fail()
                fill(partial(callback, [], _read_error(exc)))
                return
            for i, data in zip(missing, runs, strict=True):
                found[i] = Entry(positions[i], data)
                cache.put(owner, positions[i], data)
            fill(partial(callback, cast("list[Entry]", found), None))

        self._spawn(read())
        return True

    async def read(self, position: Position) -> Entry:
        cached = self._cache.get(self._owner, position)
        if cached is not None:
            return cached
        try:
            [data] = await self._read_positions([position])
        except (BookKeeperError, ManagedLedgerError) as exc:
            raise _read_error(exc) from exc
        self._cache.put(self._owner, position, data)
        return Entry(position, data)

    async def _read_positions(self, positions: list[Position]) -> list[bytes]:
        """Payloads of positions (ascending), one bookie read per run of consecutive entries, runs in parallel."""
        runs: list[tuple[int, int, int]] = []
        for p in positions:
            if runs and runs[-1][0] == p.ledger_id and runs[-1][2] == p.entry_id - 1:
                runs[-1] = (p.ledger_id, runs[-1][1], p.entry_id)
            else:
                runs.append((p.ledger_id, p.entry_id, p.entry_id))
        results = await asyncio.gather(*(self._read_run(*run) for run in runs))
        return list(itertools.chain.from_iterable(results))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Cancel reads in flight (their callbacks get an error) and forget the cached entries."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._cache.drop_owner(self._owner)


def _read_error(exc: BaseException) -> ManagedLedgerError:
    if isinstance(exc, ManagedLedgerError):
        return exc
    if isinstance(exc, NoSuchLedgerError):
        error: ManagedLedgerError = EntryNotFoundError(f"ledger gone (trimmed): {exc}")
    else:
        error = ManagedLedgerError(f"read from the bookies failed: {exc}")
    error.__cause__ = exc
    return error
