"""Cursors of the file ledger, and how their state reaches the disk.

Reading: positions are taken (and ``read_position`` moved) when the read is issued; the entries
come from the factory's cache, or from disk on a worker thread (see ``FileManagedLedger._fetch``).

Persisting (durable cursors only; readers' non-durable cursors never touch the disk): batched by
``cursor_persistence.CursorPersistence`` (at most ``persist_interval_s`` late, Pulsar's
managedLedgerDefaultMarkDeleteRateLimit = 1/s); each write replaces the cursor's file atomically
on the writer thread.

The crash window: acknowledgements made since the last completed write are lost by a crash and
those entries are delivered again (at-least-once). A cursor state never points past stored
data: a mark-delete only moves over confirmed (synced) entries.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from managed_ledger.api import ManagedLedgerError, ReadCallback
from managed_ledger.cursor_base import BaseCursor
from managed_ledger.cursor_persistence import CursorPersistence
from managed_ledger.position import Position

if TYPE_CHECKING:
    from managed_ledger.file_ledger import FileManagedLedger

log = logging.getLogger(__name__)


class FileCursor(BaseCursor):
    _ledger: FileManagedLedger

    @property
    def ledger(self) -> FileManagedLedger:
        return self._ledger

    def _deliver(self, positions: list[Position], callback: ReadCallback, read_from: Position | None) -> None:
        on_fail = None if read_from is None else partial(self._read_failed, read_from, self._read_position)
        self._ledger._fetch(positions, self._completer, callback, on_fail)

    async def flush(self) -> None:
        self._check_usable()
        if self._durable:
            await self._ledger._persistence.flush(self._name)

    async def close(self) -> None:
        if self._closed:
            return
        await super().close()
        if self._durable and not self._ledger.is_closed:
            try:
                await self._ledger._persistence.flush(self._name)
            except ManagedLedgerError as exc:
                log.warning("cursor %s/%s: state not saved on close: %s", self._ledger.name, self._name, exc)


__all__ = ["CursorPersistence", "FileCursor"]
