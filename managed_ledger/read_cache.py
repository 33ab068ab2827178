"""The entry cache of the file ledger: recently added or read entries, bounded by size.

One cache per factory (Pulsar's managedLedgerCacheSizeMB is broker-wide too), least recently
used out first. Entries go in when they are added (tailing consumers read what was just
written) and when they are read from disk. Only the event loop touches it.

The bound counts the entry data plus a fixed per-entry overhead for the key and the dict slot,
so a flood of tiny entries cannot blow past it either.

Entries every reader has passed leave early (``evict_before``, as Pulsar evicts below the slowest
reader): without it, a broker that had consumed a few hundred MB kept the cache full of them.

It holds the data bytes under plain ``(owner, ledger, entry)`` int tuples, never ``Entry`` or
``Position`` objects: those are tuple subclasses, which the cyclic garbage collector tracks and
scans forever, so a full cache of them made every collection slower (and publishing with it:
CPU per message grew by half after 150k cached entries). Plain tuples of ints and bytes are not
tracked.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from managed_ledger.entry import Entry
from managed_ledger.position import Position

# Approximate bytes of Python objects per cached entry beyond its data (key tuple and its ints,
# bytes header, OrderedDict node), measured with sys.getsizeof on CPython 3.11.
ENTRY_OVERHEAD = 160

CacheKey = tuple[int, int, int]  # (managed ledger instance id, ledger id, entry id)


# Builds an Entry without the NamedTuple's keyword-taking __new__ (per cache hit).
_new_tuple = tuple.__new__

class ReadCache:
    """LRU by bytes. Dropping a closed ledger's entries is lazy: they are marked dead (their owner
    id is never used again, so nobody reads them) and leave by LRU eviction, or in one sweep once
    dead entries are half the cache. Closing a topic used to scan the whole cache, which made
    closing 1000 topics with a full cache cost seconds."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0  # bytes accounted for the entries held now (dead ones included)
        self._entries: OrderedDict[CacheKey, bytes] = OrderedDict()
        self._count: dict[int, int] = {}  # entries held per owner
        self._dead: set[int] = set()  # owners dropped while they still had entries here
        self._dead_entries = 0
        self.evictions = 0  # entries that left (evicted or dropped below the readers), in total
        self.inserted = 0  # entries put in, in total
        # Each owner's keys in insertion order (mostly position order: adds come in order), for
        # evict_before. Keys of entries already gone are skipped, and compacted away in time.
        self._order: dict[int, deque[CacheKey]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def dead_entries(self) -> int:
        return self._dead_entries

    def get(self, owner: int, position: Position) -> Entry | None:
        key = (owner, position[0], position[1])
        data = self._entries.get(key)
        if data is None:
            return None
        self._entries.move_to_end(key)
        return _new_tuple(Entry, (position, data))

    def get_all(self, owner: int, positions: list[Position]) -> tuple[list[Entry], int] | None:
        """``get`` of each position and their bytes, when every one is cached; else None."""
        entries = self._entries
        get = entries.get
        touch = entries.move_to_end
        found: list[Entry] = []
        nbytes = 0
        for position in positions:
            key = (owner, position[0], position[1])
            data = get(key)
            if data is None:
                return None
            touch(key)
            found.append(_new_tuple(Entry, (position, data)))
            nbytes += len(data)
        return found, nbytes

    def uncached_prefix(self, owner: int, positions: list[Position]) -> int:
        """How many of ``positions``, from the first, are not cached (``contains`` of each, in one loop)."""
        entries = self._entries
        for i, position in enumerate(positions):
            if (owner, position[0], position[1]) in entries:
                return i
        return len(positions)

    def contains(self, owner: int, position: Position) -> bool:
        """Whether the entry is cached (without touching its place in the LRU order)."""
        return (owner, position[0], position[1]) in self._entries

    def put(self, owner: int, position: Position, data: bytes) -> None:
        cost = len(data) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return  # would evict everything else and still not fit
        entries = self._entries
        key = (owner, position[0], position[1])
        old = entries.pop(key, None)
        if old is not None:
            self.size -= len(old) + ENTRY_OVERHEAD
        else:
            self._count[owner] = self._count.get(owner, 0) + 1
            self.inserted += 1
            self._remember_order(owner, (key,))
        entries[key] = data
        self.size += cost
        self._evict()

    def put_run(self, owner: int, first: Position, data: list[bytes]) -> None:
        """Entries at consecutive entry ids from ``first`` (just added: not cached yet)."""
        entries = self._entries
        ledger_id, entry_id = first
        max_bytes = self.max_bytes
        added = 0
        keys: list[CacheKey] = []
        for d in data:
            cost = len(d) + ENTRY_OVERHEAD
            if cost <= max_bytes:
                key = (owner, ledger_id, entry_id)
                entries[key] = d
                keys.append(key)
                added += cost
            entry_id += 1
        self._count[owner] = self._count.get(owner, 0) + len(keys)
        self.inserted += len(keys)
        self._remember_order(owner, keys)
        self.size += added
        self._evict()

    def _remember_order(self, owner: int, keys: list[CacheKey] | tuple[CacheKey, ...]) -> None:
        order = self._order.get(owner)
        if order is None:
            order = self._order[owner] = deque()
        order.extend(keys)
        if len(order) > 2 * self._count.get(owner, 0) + 64:  # mostly keys of entries gone: compact
            entries = self._entries
            self._order[owner] = deque(k for k in order if k in entries)

    def evict_before(self, owner: int, ledger_id: int, entry_id: int) -> None:
        """Drop the owner's entries before (ledger_id, entry_id): every reader has passed them."""
        order = self._order.get(owner)
        if not order:
            return
        pop = self._entries.pop
        popleft = order.popleft
        freed = evicted = 0
        while order:
            key = order[0]
            if key[1] > ledger_id or (key[1] == ledger_id and key[2] >= entry_id):
                break
            popleft()
            data = pop(key, None)
            if data is not None:
                freed += len(data)
                evicted += 1
        if evicted:
            self.size -= freed + evicted * ENTRY_OVERHEAD
            self.evictions += evicted
            self._forget(owner, evicted)

    def resize(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._evict()

    def _evict(self) -> None:
        entries = self._entries
        while self.size > self.max_bytes:
            (owner, _, _), evicted = entries.popitem(last=False)
            self.size -= len(evicted) + ENTRY_OVERHEAD
            self.evictions += 1
            self._forget(owner, 1)

    def _forget(self, owner: int, n: int) -> None:
        """n entries of owner have left."""
        left = self._count[owner] - n
        if owner in self._dead:
            self._dead_entries -= n
            if not left:
                self._dead.discard(owner)
        if left:
            self._count[owner] = left
        else:
            del self._count[owner]
            self._order.pop(owner, None)

    def drop_owner(self, owner: int) -> None:
        """Forget every entry of one managed ledger instance (closed or deleted)."""
        held = self._count.get(owner, 0)
        if not held or owner in self._dead:
            return
        self._dead.add(owner)
        self._dead_entries += held
        if self._dead_entries * 2 >= len(self._entries):
            self._sweep()

    def _sweep(self) -> None:
        dead = self._dead
        entries = self._entries
        for key in [k for k in entries if k[0] in dead]:
            self.size -= len(entries.pop(key)) + ENTRY_OVERHEAD
        for owner in dead:
            self._count.pop(owner, None)
            self._order.pop(owner, None)
        dead.clear()
        self._dead_entries = 0
