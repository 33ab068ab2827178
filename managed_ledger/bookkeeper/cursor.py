"""Cursors of the BookKeeper managed ledger, and where their state lives (Pulsar's ``ManagedCursorImpl`` layout).

Each durable cursor has a znode, a child of its managed ledger's znode, named by the URL-encoded cursor name, holding
a ``ManagedCursorInfo``; and, while the cursor is in use, a *cursor ledger*: a BookKeeper ledger whose every entry is
a ``PositionInfo`` (mark-delete, individually deleted ranges, properties, batch-index acks). The znode names the
cursor ledger (``cursorsLedgerId``), or says -1 when its own snapshot is the state.

- Writing a state (batched by ``CursorPersistence``): append a PositionInfo to the cursor ledger. Without one (a new
  or recovered cursor), or when it holds ``CURSOR_LEDGER_MAX_ENTRIES``: create a new ledger, write the state into
  it, compare-and-set the znode to point at it, then delete the old ledger (``createNewMetadataLedger``).
- Closing the managed ledger (``persistPositionWhenClosing``): the snapshot goes into the znode with
  ``cursorsLedgerId = -1`` (when its ranges fit Pulsar's limit for the metadata store) and the cursor ledger is
  deleted; otherwise a last PositionInfo is appended and the ledger is closed.
- Recovering (``ManagedCursorImpl.recover``): read the znode; with a cursor ledger, open it *with recovery* (this
  fences a previous owner still writing it) and take the PositionInfo of its last entry; an empty ledger means the
  znode's snapshot. Then the znode is rewritten unchanged, which moves its version on: a previous owner's next
  compare-and-set of it fails too (ours, not Pulsar's: it closes the gap of a cursor without a cursor ledger).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from managed_ledger.api import ManagedLedgerError
from managed_ledger.bookkeeper import ml_formats
from managed_ledger.bookkeeper.errors import (
    BookKeeperError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from managed_ledger.bookkeeper.placement import isolation_of
from managed_ledger.bookkeeper.writer import LedgerWriter
from managed_ledger.cursor_base import CursorRecord
from managed_ledger.stored import StoredCursor
from metadata_store.api import MetadataStoreError, Stat

if TYPE_CHECKING:
    from managed_ledger.bookkeeper.ledger import BookKeeperManagedLedger

log = logging.getLogger(__name__)

# Pulsar's managedLedgerCursorMaxEntriesPerLedger: a cursor ledger is switched for a new one past this many states.
CURSOR_LEDGER_MAX_ENTRIES = 50_000


class BkCursor(StoredCursor):
    _ledger: BookKeeperManagedLedger

    @property
    def ledger(self) -> BookKeeperManagedLedger:
        return self._ledger


@dataclass
class CursorLedger:
    """Where one durable cursor's state goes: its znode (version) and its current cursor ledger."""

    znode_version: int | None  # None: no znode yet (a new cursor)
    ledger_id: int = -1  # -1: none (the znode's snapshot is the state)
    writer: LedgerWriter | None = None  # open for appends: a ledger this process created
    entries: int = 0
    cursor_properties: dict[str, str] | None = None  # what the znode holds (they live only there, as in Pulsar)


def snapshot(record: CursorRecord) -> CursorRecord:
    """A copy of a record as it is now (the live one keeps changing while a write is in flight)."""
    return CursorRecord(record.mark_delete, record.individually_deleted.copy(), dict(record.properties),
                        {p: list(words) for p, words in record.batch_acks.items()}, record.last_active,
                        dict(record.cursor_properties))


class CursorStore:
    """Reads and writes the durable cursors of one managed ledger (znodes + cursor ledgers)."""

    def __init__(self, ledger: BookKeeperManagedLedger) -> None:
        self._ml = ledger
        self._bk = ledger._factory.bk
        self._store = ledger._factory.store
        self.ledgers: dict[str, CursorLedger] = {}
        self._formats = ledger._factory.formats

    def _path(self, name: str) -> str:
        return ml_formats.cursor_path(self._ml._factory.root, self._ml.name, name)

    def _cursor_info(self, cursors_ledger_id: int, record: CursorRecord) -> bytes:
        # (the ranges bounded as in a cursor-ledger entry too, as Pulsar's persistPositionMetaStore builds them)
        max_ranges = min(ml_formats.MAX_RANGES_IN_METADATA_STORE, self._ml.config.max_unacked_ranges_to_persist)
        return ml_formats.encode_cursor_info(cursors_ledger_id, record, max_ranges, self._formats)

    def _position_info(self, record: CursorRecord) -> bytes:
        return ml_formats.encode_position_info(record, self._ml.config.max_unacked_ranges_to_persist, self._formats)

    async def recover_all(self) -> dict[str, CursorRecord]:
        """Every cursor znode under the managed ledger's znode, with its state (fencing cursor ledgers)."""
        records: dict[str, CursorRecord] = {}
        ml_path = ml_formats.ledger_path(self._ml._factory.root, self._ml.name)
        for child in await self._store.get_children(ml_path):
            name = ml_formats.url_decode(child)
            got = await self._store.get(f"{ml_path}/{child}")
            if got is None:
                continue  # deleted meanwhile
            if not got.value:
                continue  # (no cursor: a bare parent node, as a compacted view's of older versions under the topic)
            stored = ml_formats.decode_cursor_info(got.value)
            record = stored.record
            if stored.cursors_ledger_id != -1:
                record = await self._recover_from_ledger(name, stored.cursors_ledger_id, record)
            # Rewrite the znode as it is: its version moves on, so a previous owner that still writes this cursor
            # (its cursor ledger not yet used, so not fenced by the recovery above) fails its next CAS.
            stat = await self._store.put(f"{ml_path}/{child}", got.value, got.stat.version)
            self.ledgers[name] = CursorLedger(stat.version, stored.cursors_ledger_id,
                                              cursor_properties=dict(record.cursor_properties))
            records[name] = record
        return records

    async def _recover_from_ledger(self, name: str, ledger_id: int, snapshot_record: CursorRecord) -> CursorRecord:
        try:
            reader = await self._bk.open_ledger(ledger_id, self._ml._factory.password, recover=True)
            if reader.last_add_confirmed < 0:
                return snapshot_record
            [data] = await reader.read(reader.last_add_confirmed, reader.last_add_confirmed)
            self._ml._stats_of_cursor(name).read_ledger_size += len(data)
        except NoSuchLedgerError:
            log.warning("cursor %s/%s: cursor ledger %d is gone; using the znode's snapshot",
                        self._ml.name, name, ledger_id)
            return snapshot_record
        record = ml_formats.decode_position_info(data)
        # A PositionInfo carries neither: they are the znode's.
        record.last_active = snapshot_record.last_active
        record.cursor_properties = snapshot_record.cursor_properties
        return record

    async def create(self, name: str, record: CursorRecord) -> None:
        """A new cursor: its znode, with the state as a snapshot (the cursor ledger comes with the first write)."""
        stat = await self._put(name, self._cursor_info(-1, record), -1)
        self.ledgers[name] = CursorLedger(stat.version, cursor_properties=dict(record.cursor_properties))

    async def _put(self, name: str, value: bytes, version: int | None) -> Stat:
        """Write the cursor's znode (counted in its persist-to-metadata-store stats)."""
        try:
            stat = await self._store.put(self._path(name), value, version)
        except MetadataStoreError:
            self._ml._stats_of_cursor(name).persisted_to_metadata(False)
            raise
        self._ml._stats_of_cursor(name).persisted_to_metadata(True)
        return stat

    async def write(self, name: str, record: CursorRecord) -> None:
        """Make ``record`` (a snapshot) the cursor's durable state."""
        state = self.ledgers.get(name)
        if state is None:
            raise ManagedLedgerError(f"cursor {name} has no stored state")
        entry = self._position_info(record)
        stats = self._ml._stats_of_cursor(name)
        if state.writer is not None and state.entries < CURSOR_LEDGER_MAX_ENTRIES:
            try:
                await state.writer.add_entry(entry)
            except BookKeeperError as exc:
                stats.persisted_to_ledger(False)
                if isinstance(exc, LedgerFencedError | LedgerClosedError):
                    raise  # another owner recovered the cursor ledger
                # Its bookies failed and none could replace them (read-only, full, away): as Pulsar (the cursor
                # goes to NoLedger), this ledger takes no more; the state goes to a new one, or to the znode.
                log.warning("%s: cursor %s: its ledger %d failed (%s): switching", self._ml.name, name,
                            state.ledger_id, exc)
            else:
                stats.persisted_to_ledger(True, len(entry), self._ml._factory.write_quorum)
                state.entries += 1
                if record.cursor_properties != state.cursor_properties:  # changed (set over REST): into the znode
                    stat = await self._put(name, self._cursor_info(state.ledger_id, record),
                                                 state.znode_version)
                    state.znode_version, state.cursor_properties = stat.version, dict(record.cursor_properties)
                return
        factory = self._ml._factory
        try:
            writer = await self._bk.create_ledger(factory.ensemble_size, factory.write_quorum, factory.ack_quorum,
                                                  password=factory.password,
                                                  custom_metadata=ml_formats.ledger_custom_metadata(self._ml.name,
                                                                                                    name),
                                                  isolation=isolation_of(self._ml.config))
        except NotEnoughBookiesError:
            # No ensemble (bookies read-only or away) but ZooKeeper takes writes: the state goes into the znode as
            # a snapshot (what a close writes, Pulsar's persistPositionToMetaStore), when its ranges fit there.
            if record.individually_deleted.range_count() > ml_formats.MAX_RANGES_IN_METADATA_STORE:
                raise
            stat = await self._put(name, self._cursor_info(-1, record), state.znode_version)
            old_writer, old_id = state.writer, state.ledger_id
            state.znode_version, state.ledger_id, state.writer, state.entries = stat.version, -1, None, 0
            state.cursor_properties = dict(record.cursor_properties)
            await self._drop_ledger(old_writer, old_id)
            return
        try:
            try:
                await writer.add_entry(entry)
            except BookKeeperError:
                stats.persisted_to_ledger(False)
                raise
            stats.persisted_to_ledger(True, len(entry), factory.write_quorum)
            stat = await self._put(name, self._cursor_info(writer.ledger_id, record),
                                         state.znode_version)
        except BaseException:
            await _discard(writer)
            raise
        old_writer, old_id = state.writer, state.ledger_id
        state.znode_version, state.ledger_id, state.writer, state.entries = stat.version, writer.ledger_id, writer, 1
        state.cursor_properties = dict(record.cursor_properties)
        await self._drop_ledger(old_writer, old_id)

    async def close(self, name: str, record: CursorRecord) -> None:
        """The managed ledger closes: leave the state where a new owner finds it cheaply."""
        state = self.ledgers.pop(name, None)
        if state is None:
            return
        if record.individually_deleted.range_count() <= ml_formats.MAX_RANGES_IN_METADATA_STORE:
            await self._put(name, self._cursor_info(-1, record), state.znode_version)
            await self._drop_ledger(state.writer, state.ledger_id)
        elif state.writer is not None:
            await state.writer.add_entry(self._position_info(record))
            await state.writer.close()

    async def delete(self, name: str) -> None:
        state = self.ledgers.pop(name, None)
        with contextlib.suppress(MetadataStoreError):
            await self._store.delete(self._path(name))
        if state is not None:
            await self._drop_ledger(state.writer, state.ledger_id)

    async def abandon(self) -> None:
        """Stop writing (the managed ledger was deleted or fenced): writers stop without closing."""
        for state in self.ledgers.values():
            if state.writer is not None:
                await state.writer.abandon()
        self.ledgers.clear()

    async def _drop_ledger(self, writer: LedgerWriter | None, ledger_id: int) -> None:
        if writer is not None:
            with contextlib.suppress(BookKeeperError):
                await writer.close()
        if ledger_id != -1:
            try:
                await self._bk.delete_ledger(ledger_id)
            except NoSuchLedgerError:
                pass
            except BookKeeperError as exc:
                log.warning("%s: cursor ledger %d not deleted: %s", self._ml.name, ledger_id, exc)


async def _discard(writer: LedgerWriter) -> None:
    """A ledger created for a write that failed: stop it and delete it (best effort)."""
    await writer.abandon()
    with contextlib.suppress(Exception):
        await writer.bk.delete_ledger(writer.ledger_id)
