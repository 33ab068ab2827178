"""A topic's compacted view, served from its managed ledger on demand (service/compaction.py writes it).

The view is a managed ledger of its own, one record per surviving entry, in the order of the topic:
[ledgerId:i64][entryId:i64][ack_set word count:u32][words:i64...][entry bytes]. The surviving ENTRIES are
stored verbatim under their original positions; when only some messages of a batch survive, the entry is
kept with an ack_set marking the survivors (MESSAGE carries it, and the client skips the other indexes).

A loaded topic does not hold its view in memory, as Pulsar's CompactedTopicImpl does not: it keeps the
view's ledger open and, for a read from a topic position, finds the first record at or after it by binary
search over the records, reading a record's position from the ledger when it is not among the last
PROBE_CACHE positions it read; then reads at most a dispatcher read's worth of records from there. A
dispatcher reading the view in order finds its next record at the first probe.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from broker.errors import PersistenceError
from broker.protocol.entry import read_entry_metadata
from managed_ledger import Entry, LedgerClosedError, ManagedLedger, ManagedLedgerConfig, ManagedLedgerError, Position

if TYPE_CHECKING:
    from broker.service.topic import PersistentTopic

log = logging.getLogger(__name__)

_RECORD_HEAD = struct.Struct(">qqI")
_WORD = struct.Struct(">q")
# Record positions remembered for the binary search (Pulsar's CompactedTopicImpl.DEFAULT_MAX_CACHE_SIZE).
PROBE_CACHE = 100
BEFORE_FIRST = Position(-1, -1)

# A view read's completion: (records, whether the last record of the view is among them, error).
ViewReadCallback = Callable[[list["CompactedEntry"], bool, BaseException | None], None]


class CompactedEntry(NamedTuple):
    entry: Entry  # original position and verbatim bytes
    ack_set: list[int] | None  # survivors of a partly compacted batch (bit set = deliver)
    messages: int  # surviving messages (permits it costs)
    last_index: int  # batch index of the last survivor (-1 for a non-batch entry)


def batch_count(entry: bytes) -> int | None:
    """The messages of a batch entry, as its metadata counts them; None for an entry that is not a batch."""
    md = read_entry_metadata(entry)
    return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else None


def encode_record(c: CompactedEntry) -> bytes:
    words = c.ack_set or []
    pos = c.entry.position
    return b"".join([_RECORD_HEAD.pack(pos.ledger_id, pos.entry_id, len(words)),
                     *(_WORD.pack(w) for w in words), c.entry.data])


def decode_record(data: bytes) -> CompactedEntry:
    lid, eid, n = _RECORD_HEAD.unpack_from(data, 0)
    off = _RECORD_HEAD.size
    words = [_WORD.unpack_from(data, off + 8 * i)[0] for i in range(n)]
    body = data[off + 8 * n:]
    # (counted by the metadata, not read message by message: a batch that cannot be read is kept whole)
    count = batch_count(body)
    if words:
        alive = [i for i in range(count or 1) if (words[i // 64] >> (i % 64)) & 1]
        return CompactedEntry(Entry(Position(lid, eid), body), words, len(alive), alive[-1])
    if count is None:
        return CompactedEntry(Entry(Position(lid, eid), body), None, 1, -1)
    return CompactedEntry(Entry(Position(lid, eid), body), None, count, count - 1)


def _record_position(data: bytes) -> Position:
    lid, eid, _ = _RECORD_HEAD.unpack_from(data, 0)
    return Position(lid, eid)


def view_ledger_config(config: ManagedLedgerConfig) -> ManagedLedgerConfig:
    """The settings of a compacted view's managed ledger: the broker's, but every ledger is kept. A view has no
    cursor, so retention took every ledger of it but the last as soon as it rolled over (Pulsar writes a view
    to one BookKeeper ledger of its own, which nothing trims)."""
    return replace(config, retention_time_s=-1, retention_size_bytes=-1)


class CompactedView:
    """The latest message per key up to ``horizon``, in the open managed ledger ``ledger`` (``count`` records,
    the last of them ``last``: its topic position and batch index). It owns the ledger and its reads."""

    def __init__(self, horizon: Position, ledger: ManagedLedger, count: int,
                 last: tuple[Position, int] | None) -> None:
        self.horizon = horizon
        self.ledger = ledger
        self.count = count
        self.last = last
        # record index -> its topic position, the last PROBE_CACHE read (least recently used out first)
        self._probes: OrderedDict[int, Position] = OrderedDict()
        self._reads: set[asyncio.Task[None]] = set()

    @property
    def ledger_name(self) -> str:
        return self.ledger.name

    def __len__(self) -> int:
        return self.count

    @property
    def ledger_id(self) -> int:
        """The id of the ledger the view's records begin in, as Pulsar's internal stats show the id of the
        compacted topic's ledger: a BookKeeper ledger on BookKeeper storage, the segment of that id on file
        storage (ids unique in the broker's storage, as BookKeeper's are in its cluster). The view's managed
        ledger holds all its records in that one ledger unless it rolled over while the run wrote; it starts
        a new, empty ledger each time it is opened, which holds none of them (for an empty view, the only one)."""
        infos = self.ledger.ledgers_info()
        return infos[0].ledger_id if infos else self.ledger.current_ledger_id

    @property
    def size(self) -> int:
        """Bytes of its records."""
        return self.ledger.total_size

    # -- dispatch --

    def read_entries(self, start: Position, max_entries: int, max_bytes: int | None,
                     callback: ViewReadCallback) -> None:
        """Read the records from the first at or after topic position ``start``: at most ``max_entries`` and,
        past the first, ``max_bytes`` bytes. ``callback`` runs on the loop when they are read."""
        task = asyncio.get_running_loop().create_task(self._serve(start, max_entries, max_bytes, callback))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    async def _serve(self, start: Position, max_entries: int, max_bytes: int | None,
                     callback: ViewReadCallback) -> None:
        try:
            records, at_end = await self.read(start, max_entries, max_bytes)
        except asyncio.CancelledError:
            callback([], False, LedgerClosedError(f"compacted view {self.ledger_name} closed"))
            raise
        except Exception as exc:
            callback([], False, exc)
            return
        callback(records, at_end, None)

    async def read(self, start: Position, max_entries: int,
                   max_bytes: int | None = None) -> tuple[list[CompactedEntry], bool]:
        """``read_entries`` as a coroutine: (records, whether the view's last record is among them)."""
        index = await self._first_at_or_after(start)
        if index >= self.count:
            return [], True
        first = self._nth(index)
        cursor = self.ledger.new_non_durable_cursor(self.ledger.previous_position(first), "__compacted-view")
        try:
            entries = await cursor.read_entries_async(max_entries, max_bytes)
        finally:
            await cursor.close()
        records = [decode_record(e.data) for e in entries]
        if records:  # (the next read of a dispatcher reading in order starts after it)
            self._remember(index + len(records) - 1, records[-1].entry.position)
        return records, index + len(records) >= self.count

    async def _first_at_or_after(self, start: Position) -> int:
        """Index of the first record whose topic position is at or after ``start`` (``count`` if none)."""
        lo, hi = 0, self.count
        for i, position in self._probes.items():  # (what the cache knows narrows the search)
            if position < start:
                lo = max(lo, i + 1)
            else:
                hi = min(hi, i)
        if lo < hi:  # the next record, for a dispatcher reading in order
            if await self._position_of(lo) >= start:
                return lo
            lo += 1
        while lo < hi:
            mid = (lo + hi) // 2
            if await self._position_of(mid) < start:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def _position_of(self, index: int) -> Position:
        position = self._probes.get(index)
        if position is not None:
            self._probes.move_to_end(index)
            return position
        entry = await self.ledger.read_entry(self._nth(index))
        position = _record_position(entry.data)
        self._remember(index, position)
        return position

    def _remember(self, index: int, position: Position) -> None:
        self._probes[index] = position
        self._probes.move_to_end(index)
        if len(self._probes) > PROBE_CACHE:
            self._probes.popitem(last=False)

    def _nth(self, index: int) -> Position:
        position = self.ledger.nth_position(BEFORE_FIRST, index)
        if position is None:
            raise LedgerClosedError(f"compacted view {self.ledger_name} has no record {index}")
        return position

    # -- the compactor --

    async def chunks(self, records: int, max_bytes: int) -> AsyncGenerator[list[CompactedEntry], None]:
        """Every record, in order, ``records`` at a time (at most ``max_bytes`` past the first of each)."""
        cursor = self.ledger.new_non_durable_cursor(BEFORE_FIRST, "__compacted-view-scan")
        try:
            while batch := await cursor.read_entries_async(records, max_bytes):
                yield [decode_record(e.data) for e in batch]
                if not cursor.has_more_entries():
                    return
        finally:
            await cursor.close()

    async def close(self, finish_reads: bool = False) -> None:
        """Close its ledger, after the reads in progress (``finish_reads``: a newer view replaces this one)
        or stopping them (their callbacks get LedgerClosedError)."""
        if not finish_reads:
            for task in self._reads:
                task.cancel()
        await asyncio.gather(*self._reads, return_exceptions=True)
        await self.ledger.close()


async def open_view(ledger: ManagedLedger, horizon: Position) -> CompactedView:
    """The view in ``ledger`` (open): its records are counted, its last one read."""
    count = ledger.number_of_entries
    last = None
    if count:
        position = ledger.nth_position(BEFORE_FIRST, count - 1)
        assert position is not None
        tail = decode_record((await ledger.read_entry(position)).data)
        last = (tail.entry.position, tail.last_index)
    return CompactedView(horizon, ledger, count, last)


async def load_view(topic: PersistentTopic) -> CompactedView | None:
    """The compacted view recorded in metadata for ``topic``, its ledger opened (nothing of it read but its
    last record). PersistenceError when it cannot be opened or read: the topic does not load (the client
    retries), for served without its view a read_compacted consumer would miss the keys whose topic ledgers
    are gone, and the next compaction would write a view without them."""
    record = topic.service.metadata.compactions.get(topic.full_name)
    if not record:
        return None
    factory = topic.service.ledger_factory
    if not factory.exists(record["ledger"]):
        log.warning("compacted ledger %s of %s is missing; ignoring it", record["ledger"], topic.name)
        return None
    try:
        ledger = await factory.open(record["ledger"], view_ledger_config(topic.service.ledger_config))
    except ManagedLedgerError as exc:
        raise PersistenceError(f"Failed to open the compacted view of {topic.name}: {exc}") from exc
    try:
        lid, eid = record["horizon"]
        return await open_view(ledger, Position(lid, eid))
    except BaseException as exc:
        await ledger.close()
        if isinstance(exc, Exception):
            raise PersistenceError(f"Failed to read the compacted view of {topic.name}: {exc}") from exc
        raise
