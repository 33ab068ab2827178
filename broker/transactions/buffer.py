"""A topic's transaction buffer (Pulsar's TopicTransactionBuffer).

Transactional entries are appended to the topic's ledger like any other, but dispatch reads
only up to the *read limit*: the first entry of the oldest transaction still open on the topic
(Pulsar's maxReadPosition, exclusive here), so consumers never see uncommitted data and order is
kept (entries after it wait too, transactional or not). When a transaction ends, its marker
(TXN_COMMIT or TXN_ABORT, an entry with an empty payload) is appended and the limit moves on; an
aborted transaction joins the *aborted set*, whose entries dispatch acknowledges and skips.

While its first append is in flight a transaction's position is not known yet: it holds the limit
just after the last entry confirmed when the append was issued (nothing written after that can
be read before the position is known). That provisional position is never past the one the entry
gets (adds are confirmed in order, so the entry lands after every entry confirmed before it was
issued), which is what lets a snapshot be taken while first appends are in flight (below).

State across restarts: a durable cursor ``pulsar.txn.buffer``, created by the topic's first
transactional SEND before that SEND is stored (Pulsar's "first snapshot"), is the snapshot: its
properties hold the aborted set (``aborted:<most>:<least>`` -> the ledger of its marker, dropped
once that ledger is trimmed) and its mark-delete the position up to which that set is complete:
after every end, just before the first entry of the oldest transaction still open (the end when
none is), whatever appends are in flight then. At load the entries after it are replayed
(transactional entries open a transaction, markers end one). A topic without that
cursor never had a transactional entry and loads as before: a topic that never sees a transaction
costs nothing more than one without transactions.

While that first snapshot is being taken (one cursor creation), every append to the topic waits in
order behind the SEND that asked for it, transactional or not, so that receipts keep SEND order and
no transactional entry is stored before the cursor that makes the replay at load see it. Pulsar's
TopicTransactionBuffer does the same (state NoSnapshot: the first transactional append takes the
first snapshot, appends queued behind it), so neither a coordinator on another broker nor the
producer's ``txn_enabled`` has to prepare the topic beforehand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, MutableSet
from typing import Protocol

from broker.errors import NotAllowedError
from broker.protocol import pulsar_api_pb2 as pb
from broker.protocol import pulsar_markers_pb2 as mk
from broker.protocol.entry import build_entry, read_entry_metadata
from broker.protocol.errors import ProtocolError
from broker.tasks import OwnedTasks
from broker.transactions.model import TxnID
from managed_ledger import InitialPosition, ManagedCursor, ManagedLedger, ManagedLedgerError, Position

log = logging.getLogger(__name__)

BUFFER_CURSOR = "pulsar.txn.buffer"
MARKER_PRODUCER = "pulsar.txn.marker"  # Pulsar's Markers: the producer name of transaction markers
_ABORTED_PREFIX = "aborted:"
_READ_BATCH = 500
# Ended transactions remembered (besides the aborted set) to refuse late SENDs for them.
RECENTLY_COMMITTED = 10_000

AddCallback = Callable[[Position | None, BaseException | None], None]
# An append waiting for the first snapshot: (its transaction or None, the entries, the callback).
_Held = tuple[TxnID | None, list[bytes], AddCallback]


def txn_marker(commit: bool, txn: TxnID) -> bytes:
    md = pb.MessageMetadata(producer_name=MARKER_PRODUCER, sequence_id=0, publish_time=int(time.time() * 1000),
                            marker_type=mk.TXN_COMMIT if commit else mk.TXN_ABORT,
                            txnid_most_bits=txn.most, txnid_least_bits=txn.least)
    return build_entry(md.SerializeToString(), b"")


def _unchanged(entry: bytes) -> bytes:
    return entry


class ReadTrigger(Protocol):
    """What the buffer wakes when the limit moves on: a dispatcher."""

    def trigger_read(self) -> None: ...


class TransactionBuffer:
    def __init__(self, ledger: ManagedLedger) -> None:
        self.ledger = ledger
        self.cursor: ManagedCursor | None = ledger.cursors.get(BUFFER_CURSOR)
        # Open transactions -> their first entry (or the provisional limit while it is in flight).
        self.ongoing: dict[TxnID, Position] = {}
        self._in_flight: set[TxnID] = set()
        self.aborted: dict[TxnID, int] = {}
        self._committed: dict[TxnID, None] = {}  # recent ones, oldest first
        self._limit: Position | None = None
        # Dispatchers stopped at the limit: woken when it moves.
        self.waiters: MutableSet[ReadTrigger] = set()
        self.committed_count = 0
        self.aborted_count = 0
        self._snapshot_dirty = False
        # Appends waiting, in order, while the first snapshot is taken (None: no first snapshot under way).
        self.held: list[_Held] | None = None
        # Where the topic stores a SEND without a transaction: the ledger, or, swapped in while the
        # first snapshot is taken, the queue behind it (so the common publish path asks nothing).
        self.add_entries: Callable[[list[bytes], AddCallback], None] = ledger.add_entries
        self._first_snapshot = OwnedTasks(f"transaction buffer of {ledger.name}")
        self.recover_started_ms = 0
        self.recover_ended_ms = 0
        self.last_snapshot_ms = 0
        # coordinator id -> the last low watermark its ends brought (-1: none below the first transaction).
        self.low_watermarks: dict[int, int] = {}
        # What the topic does to an entry the broker writes (broker entry metadata), set by the topic.
        self.stamp: Callable[[bytes], bytes] = _unchanged

    # -- what dispatch asks --------------------------------------------------------------------------
    def read_limit(self) -> Position | None:
        """Dispatch reads only entries before this position; None: no limit."""
        return self._limit

    def is_aborted(self, most: int, least: int) -> bool:
        return bool(self.aborted) and TxnID(most, least) in self.aborted

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def prepared(self) -> bool:
        return self.cursor is not None

    async def prepare(self) -> None:
        """Before the first transactional entry is stored: create the snapshot cursor at the end
        (nothing before it is transactional)."""
        if self.cursor is None:
            self.cursor = await self.ledger.open_cursor(BUFFER_CURSOR, InitialPosition.LATEST)
            self.last_snapshot_ms = int(time.time() * 1000)

    async def _take_first_snapshot(self) -> None:
        """The first snapshot, then the appends held behind it, in order (each failed if it fails)."""
        try:
            await self.prepare()
        except Exception as exc:
            log.warning("%s: first transaction buffer snapshot failed: %s", self.ledger.name, exc)
            self._fail_held(exc)
            return
        except asyncio.CancelledError:
            self._fail_held(ManagedLedgerError(f"{self.ledger.name} closed before its first transaction"))
            raise
        for txn, entries, callback in self._end_hold():
            self.append(txn, entries, callback)

    def _fail_held(self, exc: Exception) -> None:
        for _txn, _entries, callback in self._end_hold():
            callback(None, exc)

    def _start_hold(self, first: _Held) -> None:
        self.held = [first]
        self.add_entries = self._add_held

    def _end_hold(self) -> list[_Held]:
        held, self.held = self.held or [], None
        self.add_entries = self.ledger.add_entries
        return held

    def _add_held(self, entries: list[bytes], callback: AddCallback) -> None:
        self.append(None, entries, callback)

    async def close(self) -> None:
        """The topic closes: a first snapshot under way is given up and the appends behind it fail."""
        await self._first_snapshot.close()
        if self.held is not None:  # (its task was cancelled before it ran)
            self._fail_held(ManagedLedgerError(f"{self.ledger.name} closed before its first transaction"))

    async def recover(self) -> None:
        """At load: the aborted set from the snapshot, then the entries after it."""
        cursor = self.cursor
        self.recover_started_ms = int(time.time() * 1000)
        if cursor is None:  # (no transaction ever: nothing to read back)
            self.recover_ended_ms = self.recover_started_ms
            return
        for key, ledger_id in cursor.properties.items():
            if key.startswith(_ABORTED_PREFIX):
                most, least = key[len(_ABORTED_PREFIX):].split(":")
                self.aborted[TxnID(int(most), int(least))] = ledger_id
        saved = set(self.aborted)
        reader = self.ledger.new_non_durable_cursor(cursor.mark_delete_position, f"{BUFFER_CURSOR}-replay")
        replayed = 0
        try:
            while True:
                entries = await reader.read_entries_async(_READ_BATCH)
                if not entries:
                    break
                replayed += len(entries)
                for e in entries:
                    self._replay(e.position, e.data)
        finally:
            await reader.close()
        # Aborts found by the replay are not in the saved set yet: the next snapshot must save them
        # before it moves the mark-delete past their markers (or a crash after it forgets them).
        self._snapshot_dirty = set(self.aborted) != saved
        self._update_limit()
        self.recover_ended_ms = int(time.time() * 1000)
        log.info("%s: transaction buffer recovered (%d entries replayed, %d open, %d aborted)",
                 self.ledger.name, replayed, len(self.ongoing), len(self.aborted))

    def _replay(self, position: Position, data: bytes) -> None:
        try:
            md = read_entry_metadata(data)
        except ProtocolError:
            return
        if not md.HasField("txnid_most_bits"):
            return
        txn = TxnID(md.txnid_most_bits, md.txnid_least_bits)
        if md.HasField("marker_type"):
            if md.marker_type in (mk.TXN_COMMIT, mk.TXN_ABORT):
                self.ongoing.pop(txn, None)
                if md.marker_type == mk.TXN_ABORT:
                    self.aborted[txn] = position.ledger_id
                else:
                    self._remember_committed(txn)
            return
        if txn not in self.aborted and txn not in self._committed:
            self.ongoing.setdefault(txn, position)

    # -- publishing ----------------------------------------------------------------------------------
    def check_append(self, txn: TxnID) -> None:
        """A transactional SEND may go in: the transaction has not ended here."""
        if txn in self.aborted or txn in self._committed:
            raise NotAllowedError(f"Transaction {txn} has already ended on {self.ledger.name}")

    def append(self, txn: TxnID | None, entries: list[bytes], callback: AddCallback) -> None:
        """Store the entries of a SEND (``txn`` None: an ordinary one, which the topic sends here
        only while the first snapshot is taken, through ``add_entries``)."""
        if self.held is not None:
            self.held.append((txn, entries, callback))
            return
        if txn is None:
            self.ledger.add_entries(entries, callback)
            return
        if self.cursor is None:
            self._start_hold((txn, entries, callback))
            self._first_snapshot.spawn(self._take_first_snapshot(), name=f"first snapshot of {self.ledger.name}")
            return
        if txn in self.aborted or txn in self._committed:  # (it ended while held behind the first snapshot)
            callback(None, NotAllowedError(f"Transaction {txn} has already ended on {self.ledger.name}"))
            return
        if txn not in self.ongoing:
            last = self.ledger.last_confirmed_entry
            self.ongoing[txn] = Position(last.ledger_id, last.entry_id + 1)
            self._in_flight.add(txn)
            self._update_limit()

        def stored(first: Position | None, exc: BaseException | None) -> None:
            if txn in self._in_flight:
                self._in_flight.discard(txn)
                if first is not None:
                    self.ongoing[txn] = first
                else:  # nothing of it was stored: it holds nothing back
                    del self.ongoing[txn]
                self._update_limit()
            callback(first, exc)

        self.ledger.add_entries(entries, stored)

    # -- ending --------------------------------------------------------------------------------------
    async def end(self, txn: TxnID, commit: bool, low_watermark: int | None = None) -> Position | None:
        """END_TXN_ON_PARTITION: append the marker, then release (commit) or drop (abort) the
        transaction's entries. A transaction known to have ended here already (the coordinator
        asked again: its answer was lost, or the topic moved) is left alone: None. Otherwise (not
        remembered) ending twice writes a second marker and changes nothing else.

        ``low_watermark`` (Pulsar's): every transaction of ``txn``'s coordinator at or below it has
        ended; one still open here never heard its end (its entries came without the coordinator
        knowing the topic, or the end was lost) and would hold the read limit forever: it is
        aborted (an ABORT marker), as Pulsar's TopicTransactionBuffer does."""
        self.low_watermarks[txn.most] = (low_watermark if low_watermark is not None
                                          else self.low_watermarks.get(txn.most, -1))
        if txn not in self.ongoing and (txn in self._committed if commit else txn in self.aborted):
            await self._below_low_watermark(txn, low_watermark)
            return None
        position = await self.ledger.add_entry_async(self.stamp(txn_marker(commit, txn)))
        self.ongoing.pop(txn, None)
        self._in_flight.discard(txn)
        if commit:
            self._remember_committed(txn)
            self.committed_count += 1
        else:
            self.aborted[txn] = position.ledger_id
            self._snapshot_dirty = True
            self.aborted_count += 1
        self._update_limit()
        self._snapshot()
        await self._below_low_watermark(txn, low_watermark)
        return position

    async def _below_low_watermark(self, txn: TxnID, low_watermark: int | None) -> None:
        if low_watermark is None:
            return
        stale = [t for t in self.ongoing if t.most == txn.most and t.least <= low_watermark and t != txn]
        for t in stale:
            log.warning("%s: transaction %s is below its coordinator's low watermark %d: aborted",
                        self.ledger.name, t, low_watermark)
            await self.end(t, commit=False)

    def _remember_committed(self, txn: TxnID) -> None:
        self._committed[txn] = None
        if len(self._committed) > RECENTLY_COMMITTED:
            del self._committed[next(iter(self._committed))]

    def _update_limit(self) -> None:
        limit = min(self.ongoing.values()) if self.ongoing else None
        if limit == self._limit:
            return
        moved_on = self._limit is not None and (limit is None or limit > self._limit)
        self._limit = limit
        if moved_on and self.waiters:
            waiting = list(self.waiters)
            self.waiters.clear()
            loop = asyncio.get_running_loop()
            for w in waiting:
                loop.call_soon(w.trigger_read)

    def _snapshot(self) -> None:
        """Save the aborted set, complete up to just before the oldest open transaction's first
        entry (the end when none is open): the replay at load starts there. Every transaction
        with an entry before that point has ended, and its fate is in the set, so the cursor does
        not hold the topic's data back for longer than its oldest open transaction.

        Appends in flight do not stop it (Pulsar's TopicTransactionBuffer snapshots its
        maxReadPosition and aborted list likewise, whatever is being written): the point is never
        past the last confirmed entry, so never past an entry still in flight; and a transaction
        whose first append is in flight is open here already, at a provisional position at or
        before the one its entry gets, so the point stops short of that entry too and the replay
        at load finds the transaction."""
        cursor = self.cursor
        if cursor is None or cursor.is_closed:
            return
        first_ledger = self.ledger.first_position.ledger_id
        trimmed = [t for t, lid in self.aborted.items() if lid < first_ledger]
        for t in trimmed:
            del self.aborted[t]
        if self._snapshot_dirty or trimmed:
            cursor.set_properties({f"{_ABORTED_PREFIX}{t.most}:{t.least}": lid for t, lid in self.aborted.items()})
            self._snapshot_dirty = False
            self.last_snapshot_ms = int(time.time() * 1000)
        limit = self._limit
        upto = self.ledger.last_confirmed_entry if limit is None else self.ledger.previous_position(limit)
        if upto > cursor.mark_delete_position:
            cursor.mark_delete(upto)
            self.last_snapshot_ms = int(time.time() * 1000)

    def snapshot_idle(self) -> None:
        """Called when the topic closes: the snapshot as far as it can go."""
        self._snapshot()

    # -- stats ---------------------------------------------------------------------------------------
    def txn_stats(self, txn: TxnID) -> dict[str, object]:
        """Pulsar's TransactionInBufferStats of one transaction on this topic (no startPosition: none known)."""
        first = self.ongoing.get(txn)
        out: dict[str, object] = {"aborted": txn in self.aborted}
        if first is not None and txn not in self._in_flight:
            out["startPosition"] = str(first)
        return out

    def stats(self, low_watermarks: bool = False) -> dict[str, object]:
        """Pulsar's TransactionBufferStats (``low_watermarks``: with the last one of each coordinator); the
        snapshot is a single one (the aborted set in the buffer cursor's properties)."""
        last = self.ledger.last_confirmed_entry
        limit = self.ledger.previous_position(self._limit) if self._limit is not None else last
        out: dict[str, object] = {
            "state": "Ready",
            "maxReadPosition": str(limit),
            "lastSnapshotTimestamps": self.last_snapshot_ms,
            "ongoingTxnSize": len(self.ongoing),
            "recoverStartTime": self.recover_started_ms,
            "recoverEndTime": self.recover_ended_ms,
            "totalAbortedTransactions": len(self.aborted),
            "snapshotType": "Single",
        }
        if low_watermarks:
            out["lowWaterMarks"] = {str(tc): lw for tc, lw in sorted(self.low_watermarks.items())}
        return out
