"""The set of individually deleted (acknowledged beyond mark-delete) positions of a cursor.

Positions are kept per ledger as sorted, merged, closed ranges of entry ids: two parallel lists
``starts`` and ``ends`` with ``starts[i] <= ends[i] < starts[i + 1] - 1`` (touching ranges are
merged). Lookups and inserts are bisect based: O(log r) to find, plus the list shift on insert.

Ranges never span a ledger boundary, exactly like Pulsar's default implementation
(OpenLongPairRangeSet keeps one bitset per ledger id). Whether the last entry of ledger 3 and
entry 0 of ledger 4 are "contiguous" is a question for the managed ledger, which knows ledger
sizes; the cursor answers it when it advances the mark-delete position.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from managed_ledger.position import Position

# A closed range of entry ids in one ledger.
_Span = tuple[int, int]


class _LedgerRanges:
    """Sorted, merged, closed ranges of entry ids of one ledger."""

    __slots__ = ("count", "ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.count = 0  # number of entry ids covered

    def add(self, first: int, last: int) -> int:
        """Add [first, last]; return how many ids were not in the set before."""
        starts, ends = self.starts, self.ends
        # Ranges that overlap or touch [first, last]: ends[i] >= first - 1 and starts[j] <= last + 1.
        i = bisect_left(ends, first - 1)
        j = bisect_right(starts, last + 1)
        if i == j:  # nothing to merge with: plain insert
            starts.insert(i, first)
            ends.insert(i, last)
            added = last - first + 1
        else:
            new_first = min(first, starts[i])
            new_last = max(last, ends[j - 1])
            covered = sum(ends[k] - starts[k] + 1 for k in range(i, j))
            starts[i:j] = [new_first]
            ends[i:j] = [new_last]
            added = (new_last - new_first + 1) - covered
        self.count += added
        return added

    def find(self, entry_id: int) -> int:
        """Index of the range containing entry_id, or -1."""
        i = bisect_right(self.starts, entry_id) - 1
        if i >= 0 and self.ends[i] >= entry_id:
            return i
        return -1

    def remove_up_to(self, entry_id: int) -> None:
        """Drop every id <= entry_id."""
        starts, ends = self.starts, self.ends
        i = bisect_right(ends, entry_id)  # ranges [0, i) end at or before entry_id
        removed = sum(ends[k] - starts[k] + 1 for k in range(i))
        del starts[:i]
        del ends[:i]
        if starts and starts[0] <= entry_id:  # the range straddling entry_id keeps its tail
            removed += entry_id - starts[0] + 1
            starts[0] = entry_id + 1
        self.count -= removed

    def count_between(self, first: int, last: int) -> int:
        """How many ids of the set lie in [first, last]."""
        if first > last or not self.starts:
            return 0
        if first <= self.starts[0] and last >= self.ends[-1]:
            return self.count
        starts, ends = self.starts, self.ends
        total = 0
        k = max(bisect_right(starts, first) - 1, 0)
        while k < len(starts) and starts[k] <= last:
            lo = max(starts[k], first)
            hi = min(ends[k], last)
            if hi >= lo:
                total += hi - lo + 1
            k += 1
        return total


class PositionRangeSet:
    """Individually deleted positions of one cursor (all of them after its mark-delete).

    Not thread safe; owned by the event loop like everything else in a managed ledger.
    """

    __slots__ = ("_by_ledger", "_count", "_ledgers")

    def __init__(self) -> None:
        self._ledgers: list[int] = []  # sorted ledger ids that have at least one range
        self._by_ledger: dict[int, _LedgerRanges] = {}
        self._count = 0

    # -- mutation -----------------------------------------------------------------------------

    def add(self, position: Position) -> bool:
        """Add one position; return False if it was already present."""
        return self.add_range(position.ledger_id, position.entry_id, position.entry_id) == 1

    def add_range(self, ledger_id: int, first: int, last: int) -> int:
        """Add entry ids [first, last] of ledger_id (closed range); return how many were new."""
        if first < 0 or last < first:
            raise ValueError(f"invalid entry range [{first}, {last}] in ledger {ledger_id}")
        ranges = self._by_ledger.get(ledger_id)
        if ranges is None:
            ranges = self._by_ledger[ledger_id] = _LedgerRanges()
            self._ledgers.insert(bisect_left(self._ledgers, ledger_id), ledger_id)
        added = ranges.add(first, last)
        self._count += added
        return added

    def remove_up_to(self, position: Position) -> None:
        """Drop every position <= position (used when the mark-delete position moves)."""
        ledger_id, entry_id = position
        cut = bisect_left(self._ledgers, ledger_id)
        for lid in self._ledgers[:cut]:
            self._count -= self._by_ledger.pop(lid).count
        del self._ledgers[:cut]
        ranges = self._by_ledger.get(ledger_id)
        if ranges is not None:
            before = ranges.count
            ranges.remove_up_to(entry_id)
            self._count -= before - ranges.count
            if not ranges.count:
                del self._by_ledger[ledger_id]
                self._ledgers.pop(0)

    def clear(self) -> None:
        self._ledgers.clear()
        self._by_ledger.clear()
        self._count = 0

    # -- queries ------------------------------------------------------------------------------

    def contains(self, position: Position) -> bool:
        ranges = self._by_ledger.get(position.ledger_id)
        return ranges is not None and ranges.find(position.entry_id) >= 0

    __contains__ = contains

    def range_containing(self, position: Position) -> tuple[Position, Position] | None:
        """The closed range (first, last) that contains position, or None."""
        ranges = self._by_ledger.get(position.ledger_id)
        if ranges is None:
            return None
        i = ranges.find(position.entry_id)
        if i < 0:
            return None
        lid = position.ledger_id
        return Position(lid, ranges.starts[i]), Position(lid, ranges.ends[i])

    def first_range(self) -> tuple[Position, Position] | None:
        """The lowest closed range (first, last), or None when empty."""
        if not self._ledgers:
            return None
        lid = self._ledgers[0]
        ranges = self._by_ledger[lid]
        return Position(lid, ranges.starts[0]), Position(lid, ranges.ends[0])

    def ranges_in_ledger(self, ledger_id: int) -> list[_Span]:
        """Closed (first, last) entry-id ranges of one ledger, ascending."""
        ranges = self._by_ledger.get(ledger_id)
        if ranges is None:
            return []
        return list(zip(ranges.starts, ranges.ends, strict=True))

    def count_between(self, first: Position, last: Position) -> int:
        """Number of positions p in the set with first <= p <= last."""
        if last < first:
            return 0
        total = 0
        lo = bisect_left(self._ledgers, first.ledger_id)
        hi = bisect_right(self._ledgers, last.ledger_id)
        for lid in self._ledgers[lo:hi]:
            ranges = self._by_ledger[lid]
            if first.ledger_id < lid < last.ledger_id:
                total += ranges.count
            else:
                a = first.entry_id if lid == first.ledger_id else 0
                b = last.entry_id if lid == last.ledger_id else ranges.ends[-1]
                total += ranges.count_between(a, b)
        return total

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        """Closed ranges (first, last), ascending. Do not mutate the set while iterating."""
        for lid in self._ledgers:
            ranges = self._by_ledger[lid]
            for start, end in zip(ranges.starts, ranges.ends, strict=True):
                yield Position(lid, start), Position(lid, end)

    def __len__(self) -> int:
        """Number of positions (not ranges) in the set."""
        return self._count

    def is_empty(self) -> bool:
        return self._count == 0

    def range_count(self) -> int:
        """Number of disjoint ranges (Pulsar's totalNonContiguousDeletedMessagesRange)."""
        return sum(len(r.starts) for r in self._by_ledger.values())

    def copy(self) -> PositionRangeSet:
        clone = PositionRangeSet()
        for first, last in self:
            clone.add_range(first.ledger_id, first.entry_id, last.entry_id)
        return clone

    def to_pulsar_string(self) -> str:
        """The set as Pulsar prints it in internal stats (``individuallyDeletedMessages``).

        Pulsar records an individual ack of p as the Guava range ``(previous(p), p]`` and, in its
        default per-ledger bitset set (OpenLongPairRangeSet), prints each run of entry ids
        first..last of ledger L as ``(L:first-1..L:last]``: open below, closed above, the lower
        endpoint being the entry just before the run (entry -1 when the run starts at entry 0).
        Runs are joined with "," (no space) inside "[...]"; the empty set is "[]". Example: acks
        of 3:5, 3:6, 3:7 and 3:9 give "[(3:4..3:7],(3:8..3:9]]".
        """
        runs = (f"({first.ledger_id}:{first.entry_id - 1}..{last}]" for first, last in self)
        return "[" + ",".join(runs) + "]"

    def __repr__(self) -> str:
        return f"PositionRangeSet({self.to_pulsar_string()})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PositionRangeSet):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable
