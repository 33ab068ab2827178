"""The entry cache of the file ledger: recently added or read entries, bounded by size.

One cache per factory (Pulsar's managedLedgerCacheSizeMB is broker-wide too), least recently
used out first. Entries go in when they are added (tailing consumers read what was just
written) and when they are read from disk. Only the event loop touches it.

The bound counts the entry data plus a fixed per-entry overhead for the key, the ``Entry``
tuple and the dict slot, so a flood of tiny entries cannot blow past it either.
"""

from __future__ import annotations

from collections import OrderedDict

from managed_ledger.entry import Entry
from managed_ledger.position import Position

# Approximate bytes of Python objects per cached entry beyond its data (key tuple, Position,
# Entry, bytes header, OrderedDict node), measured with sys.getsizeof on CPython 3.11.
ENTRY_OVERHEAD = 200

CacheKey = tuple[int, int, int]  # (managed ledger instance id, ledger id, entry id)


class ReadCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0  # bytes accounted for the entries held now
        self._entries: OrderedDict[CacheKey, Entry] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, owner: int, position: Position) -> Entry | None:
        key = (owner, position.ledger_id, position.entry_id)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, owner: int, entry: Entry) -> None:
        cost = len(entry.data) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return  # would evict everything else and still not fit
        position = entry.position
        key = (owner, position.ledger_id, position.entry_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= len(old.data) + ENTRY_OVERHEAD
        self._entries[key] = entry
        self.size += cost
        while self.size > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.size -= len(evicted.data) + ENTRY_OVERHEAD
            self.evictions += 1

    def drop_owner(self, owner: int) -> None:
        """Forget every entry of one managed ledger instance (closed or deleted)."""
        doomed = [key for key in self._entries if key[0] == owner]
        for key in doomed:
            self.size -= len(self._entries.pop(key).data) + ENTRY_OVERHEAD
