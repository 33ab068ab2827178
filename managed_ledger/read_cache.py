"""The entry cache of the file ledger: recently added or read entries, bounded by size.

One cache per factory (Pulsar's managedLedgerCacheSizeMB is broker-wide too), least recently
used out first. Entries go in when they are added (tailing consumers read what was just
written) and when they are read from disk. Only the event loop touches it.

The bound counts the entry data plus a fixed per-entry overhead for the key and the dict slot,
so a flood of tiny entries cannot blow past it either.

It holds the data bytes under plain ``(owner, ledger, entry)`` int tuples, never ``Entry`` or
``Position`` objects: those are tuple subclasses, which the cyclic garbage collector tracks and
scans forever, so a full cache of them made every collection slower (and publishing with it:
CPU per message grew by half after 150k cached entries). Plain tuples of ints and bytes are not
tracked.
"""

from __future__ import annotations

from collections import OrderedDict

from managed_ledger.entry import Entry
from managed_ledger.position import Position

# Approximate bytes of Python objects per cached entry beyond its data (key tuple and its ints,
# bytes header, OrderedDict node), measured with sys.getsizeof on CPython 3.11.
ENTRY_OVERHEAD = 160

CacheKey = tuple[int, int, int]  # (managed ledger instance id, ledger id, entry id)


class ReadCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0  # bytes accounted for the entries held now
        self._entries: OrderedDict[CacheKey, bytes] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, owner: int, position: Position) -> Entry | None:
        key = (owner, position[0], position[1])
        data = self._entries.get(key)
        if data is None:
            return None
        self._entries.move_to_end(key)
        return Entry(position, data)

    def put(self, owner: int, position: Position, data: bytes) -> None:
        cost = len(data) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return  # would evict everything else and still not fit
        entries = self._entries
        key = (owner, position[0], position[1])
        old = entries.pop(key, None)
        if old is not None:
            self.size -= len(old) + ENTRY_OVERHEAD
        entries[key] = data
        self.size += cost
        while self.size > self.max_bytes:
            _, evicted = entries.popitem(last=False)
            self.size -= len(evicted) + ENTRY_OVERHEAD
            self.evictions += 1

    def put_run(self, owner: int, first: Position, data: list[bytes]) -> None:
        """Entries at consecutive entry ids from ``first`` (just added: not cached yet)."""
        entries = self._entries
        ledger_id, entry_id = first
        max_bytes = self.max_bytes
        added = 0
        for d in data:
            cost = len(d) + ENTRY_OVERHEAD
            if cost <= max_bytes:
                entries[(owner, ledger_id, entry_id)] = d
                added += cost
            entry_id += 1
        self.size += added
        while self.size > max_bytes:
            _, evicted = entries.popitem(last=False)
            self.size -= len(evicted) + ENTRY_OVERHEAD
            self.evictions += 1

    def drop_owner(self, owner: int) -> None:
        """Forget every entry of one managed ledger instance (closed or deleted)."""
        doomed = [key for key in self._entries if key[0] == owner]
        for key in doomed:
            self.size -= len(self._entries.pop(key)) + ENTRY_OVERHEAD
